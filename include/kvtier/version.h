// The library's version string ("0.1.0").
#pragma once

namespace kvtier {

const char* Version();

}  // namespace kvtier
