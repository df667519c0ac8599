// Big-integer-preserving JSON parsing (see header).
#include "cli/json_input.h"

#include "util/json_text.h"

namespace kvtier::internal {
namespace {

// Stored in place of an integer literal too large for 64 bits. The NUL byte
// keeps it apart from any string a JSON text could hold unescaped.
constexpr std::string_view kBigIntMarker{"\0kvtier-bigint:", 15};

bool IsIntegerLiteral(const std::string& s) {
  size_t i = (!s.empty() && s[0] == '-') ? 1 : 0;
  if (i == s.size()) return false;
  for (; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return false;
  }
  return true;
}

class BigIntSaxParser : public nlohmann::detail::json_sax_dom_parser<nlohmann::json> {
 public:
  using Base = nlohmann::detail::json_sax_dom_parser<nlohmann::json>;
  explicit BigIntSaxParser(nlohmann::json& out) : Base(out, /*allow_exceptions=*/false) {}

  bool number_float(double value, const std::string& literal) {
    if (!IsIntegerLiteral(literal)) return Base::number_float(value, literal);
    std::string marked(kBigIntMarker);
    marked += literal;
    return Base::string(marked);
  }
  bool parse_error(std::size_t position, const std::string& token,
                   const nlohmann::detail::exception& ex) {
    error_ = "at byte " + std::to_string(position) + " near '" + token + "': " + ex.what();
    return Base::parse_error(position, token, ex);
  }
  const std::string& error() const { return error_; }

 private:
  std::string error_;
};

std::string Describe(const nlohmann::json& v) {
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_float()) return "a non-integer number";
  if (v.is_null()) return "null";
  return std::string("a ") + v.type_name();
}

}  // namespace

Result<nlohmann::json> ParseJsonKeepingBigInts(std::string_view text, std::string_view what) {
  KVTIER_RETURN_IF_ERROR(CheckJsonDepth(text, kCliJsonDepthMax, what));
  nlohmann::json root;
  BigIntSaxParser sax(root);
  bool ok = nlohmann::json::sax_parse(text, &sax, nlohmann::json::input_format_t::json,
                                      /*strict=*/true, /*ignore_comments=*/false);
  if (!ok || sax.is_errored()) {
    return InvalidArgument(std::string(what) + ": malformed JSON " + sax.error());
  }
  return root;
}

Result<BigInt> JsonToBigInt(const nlohmann::json& value, std::string_view what) {
  if (value.is_number_integer() && !value.is_number_unsigned()) return BigInt(value.get<int64_t>());
  if (value.is_number_unsigned()) return BigInt::FromDecimal(std::to_string(value.get<uint64_t>()));
  if (value.is_string()) {
    const auto& s = value.get_ref<const std::string&>();
    if (s.size() > kBigIntMarker.size() && s.compare(0, kBigIntMarker.size(), kBigIntMarker) == 0) {
      return BigInt::FromDecimal(std::string_view(s).substr(kBigIntMarker.size()));
    }
  }
  return InvalidArgument(std::string(what) + ": expected an integer, got " + Describe(value));
}

Result<int64_t> JsonToInt64(const nlohmann::json& value, std::string_view what) {
  if (value.is_number_integer() && !value.is_number_unsigned()) return value.get<int64_t>();
  if (value.is_number_unsigned() && value.get<uint64_t>() <= uint64_t{INT64_MAX}) {
    return static_cast<int64_t>(value.get<uint64_t>());
  }
  if (value.is_number_unsigned() || JsonToBigInt(value, what).ok()) {
    return InvalidArgument(std::string(what) + ": integer out of range");
  }
  return InvalidArgument(std::string(what) + ": expected an integer, got " + Describe(value));
}

}  // namespace kvtier::internal
