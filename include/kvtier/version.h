// The library's version string ("0.1.0").
#pragma once

#include "kvtier/export.h"

namespace kvtier {

KVTIER_API const char* Version();

}  // namespace kvtier
