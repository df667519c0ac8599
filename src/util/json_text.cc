// JSON text checks (json_text.h).
#include "util/json_text.h"

#include <algorithm>
#include <cstdint>

namespace kvtier::internal {
namespace {

using Json = nlohmann::json;

// Records where the SAX parser gave up.
class SyntaxErrorLocator final : public nlohmann::json_sax<Json> {
 public:
  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return true; }
  bool key(string_t&) override { return true; }
  bool end_object() override { return true; }
  bool start_array(std::size_t) override { return true; }
  bool end_array() override { return true; }
  bool parse_error(std::size_t position, const std::string&, const Json::exception& ex) override {
    position_ = position;
    what_ = ex.what();
    return false;
  }

  JsonSyntaxError error() const {
    const size_t tag_end = what_.find("] ");
    return {position_, tag_end == std::string::npos ? what_ : what_.substr(tag_end + 2)};
  }

 private:
  size_t position_ = 0;
  std::string what_;
};

}  // namespace

std::optional<size_t> FirstTooDeepByte(std::string_view text, int depth_max) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > depth_max) return i;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return std::nullopt;
}

Status CheckJsonDepth(std::string_view text, size_t depth_max, std::string_view what) {
  const int depth_max_int = static_cast<int>(std::min<size_t>(depth_max, INT32_MAX));
  const std::optional<size_t> at = FirstTooDeepByte(text, depth_max_int);
  if (!at) return Status::Ok();
  return InvalidArgument(std::string(what) + ": nested deeper than " + std::to_string(depth_max) + " levels at byte " +
                         std::to_string(*at));
}

std::optional<JsonSyntaxError> LocateJsonSyntaxError(std::string_view text) {
  SyntaxErrorLocator locator;
  if (Json::sax_parse(text.begin(), text.end(), &locator)) return std::nullopt;
  return locator.error();
}

}  // namespace kvtier::internal
