// Output of `kvtier doctor` (text and JSON).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "ops/doctor.h"

namespace kvtier::internal {

nlohmann::json DoctorJson(const DoctorReport& r);
std::string DoctorText(const DoctorReport& r);

}  // namespace kvtier::internal
