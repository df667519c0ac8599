// KVTIER_API marks what libkvtier.so exports. The library is compiled with
// -fvisibility=hidden, so a declaration in include/kvtier/ that users call
// (a free function, or a class with out-of-line members, typeinfo or a vtable)
// carries KVTIER_API; everything else stays internal to the library and may
// change without breaking the ABI. On ELF the same attribute serves both
// building and using the library. A standard attribute, so that it may follow
// [[nodiscard]] (`class [[nodiscard]] KVTIER_API Status`).
#pragma once

#if defined(__GNUC__) || defined(__clang__)
#define KVTIER_API [[gnu::visibility("default")]]
#else
#define KVTIER_API
#endif
