// The duration grammar of tools/cli/duration.h, in integers only: a binary
// fraction would turn "0.1" into 100.000...01 ms and round it up to 101.
#include "cli/duration.h"

#include <string>

namespace kvtier::internal {
namespace {

struct Unit {
  std::string_view name;
  uint64_t ms;
};
constexpr Unit kUnits[] = {{"ms", 1}, {"s", 1000}, {"m", 60 * 1000}, {"h", 3600 * 1000}, {"d", 86400 * 1000}};
constexpr uint64_t kNanosPerUnit = 1000000000;  // the fraction is kept in billionths
constexpr size_t kDecimalsMax = 9;

Status NotADuration(std::string_view text) {
  return InvalidArgument("not a duration: '" + std::string(text) +
                         "' (give seconds, as in 30, 0.5 or .5, or a number with a unit: ms, s, m, h or d, "
                         "as in 500ms, 1.5h, 7d)");
}

// The largest duration as people write it: whole days where it is, else ms.
std::string Spelled(uint64_t ms) {
  const uint64_t day = kUnits[4].ms;
  return ms % day == 0 ? std::to_string(ms / day) + "d" : std::to_string(ms) + "ms";
}

Status OutOfRange(std::string_view text, uint64_t max_ms) {
  return InvalidArgument("duration '" + std::string(text) + "' is out of range (at most " + Spelled(max_ms) + ")");
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// The number's parts: whole units (saturated at UINT64_MAX) and billionths.
struct Number {
  uint64_t whole = 0;
  uint64_t billionths = 0;
  size_t digits = 0, decimals = 0;
  size_t end = 0;  // where the unit starts
};

Number ScanNumber(std::string_view text) {
  Number n;
  size_t i = 0;
  for (; i < text.size() && IsDigit(text[i]); ++i, ++n.digits) {
    const uint64_t d = static_cast<uint64_t>(text[i] - '0');
    n.whole = n.whole > (UINT64_MAX - d) / 10 ? UINT64_MAX : n.whole * 10 + d;
  }
  if (i < text.size() && text[i] == '.') {
    uint64_t scale = kNanosPerUnit;
    for (++i; i < text.size() && IsDigit(text[i]); ++i, ++n.decimals) {
      scale /= 10;  // 0 past the 9th decimal: refused by the caller
      n.billionths += static_cast<uint64_t>(text[i] - '0') * scale;
    }
  }
  n.end = i;
  return n;
}

}  // namespace

Result<uint64_t> ParseDurationMs(std::string_view text, uint64_t max_ms) {
  if (text.empty()) return InvalidArgument("empty duration (give e.g. 30, 0.5, 500ms or 1.5h)");
  if (text.front() == '-') return InvalidArgument("duration '" + std::string(text) + "' is negative");
  const Number n = ScanNumber(text);
  if (n.digits + n.decimals == 0) return NotADuration(text);
  if (n.decimals > kDecimalsMax) {
    return InvalidArgument("duration '" + std::string(text) + "' has more than " + std::to_string(kDecimalsMax) +
                           " decimals");
  }
  const std::string_view unit_name = text.substr(n.end);
  const Unit* unit = unit_name.empty() ? &kUnits[1] : nullptr;
  for (const Unit& u : kUnits) unit = u.name == unit_name ? &u : unit;
  if (unit == nullptr) return NotADuration(text);
  if (n.whole > max_ms / unit->ms) return OutOfRange(text, max_ms);
  // billionths * ms < 1e9 * 86400000: no overflow; rounded up.
  const uint64_t fraction_ms = (n.billionths * unit->ms + kNanosPerUnit - 1) / kNanosPerUnit;
  const uint64_t ms = n.whole * unit->ms + fraction_ms;
  if (ms > max_ms) return OutOfRange(text, max_ms);
  return ms;
}

Result<uint64_t> ParseDurationS(std::string_view text) {
  KVTIER_ASSIGN_OR_RETURN(const uint64_t ms, ParseDurationMs(text));
  return (ms + 999) / 1000;
}

}  // namespace kvtier::internal
