// libFuzzer target for ParseOffloadConfig() (vLLM's kv_connector_extra_config).
//
// Beyond "no crash, no leak, no undefined behaviour" (the sanitizers' job),
// it checks two properties and aborts when one breaks:
//  * a rejected input yields kInvalidArgument with a non-empty message;
//  * an accepted input's normalized JSON (OffloadConfigToJson) parses back to
//    an equal OffloadConfig, and printing that again gives the same text.
// Under g++ the same file is linked with replay_main.cc and runs the seed
// corpus tests/fuzz/corpus/config/ as a ctest.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "kvtier/config.h"

namespace {

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "config_fuzzer: %s\n%s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const kvtier::EngineContext engine;  // 16-token GPU blocks
  const kvtier::Result<kvtier::OffloadConfig> parsed = kvtier::ParseOffloadConfig(text, engine);
  if (!parsed.ok()) {
    const kvtier::Status status = parsed.status();
    if (status.code() != kvtier::StatusCode::kInvalidArgument || status.message().empty()) {
      Fail("a rejection that is not invalid_argument with a message", status.ToString());
    }
    return 0;
  }
  const std::string normalized = kvtier::OffloadConfigToJson(*parsed);
  const kvtier::Result<kvtier::OffloadConfig> reparsed = kvtier::ParseOffloadConfig(normalized, engine);
  if (!reparsed.ok()) Fail("normalized JSON does not parse", reparsed.status().ToString() + "\n" + normalized);
  if (!(*reparsed == *parsed)) Fail("normalized JSON parses to a different config", normalized);
  const std::string again = kvtier::OffloadConfigToJson(*reparsed);
  if (again != normalized) Fail("normalized JSON is not a fixed point", normalized + "\n---\n" + again);
  return 0;
}
