// Python json.dumps emulation (see header).
#include "layout/py_json.h"

#include "util/utf8.h"


namespace kvtier::internal {
namespace {

// "\uXXXX" with lowercase hex, as Python writes it; unit <= 0xffff.
void AppendU(uint32_t unit, std::string* out) {
  static constexpr char kDigits[] = "0123456789abcdef";
  const char buf[6] = {'\\', 'u', kDigits[(unit >> 12) & 0xf], kDigits[(unit >> 8) & 0xf],
                       kDigits[(unit >> 4) & 0xf], kDigits[unit & 0xf]};
  out->append(buf, 6);
}

struct Style {
  const char* item_sep;  // between elements
  const char* key_sep;   // between key and value
  int indent;            // < 0: no newlines
};

Status Dump(const nlohmann::json& v, const Style& style, int level, std::string* out);

void NewlineIndent(const Style& style, int level, std::string* out) {
  if (style.indent < 0) return;
  out->push_back('\n');
  out->append(static_cast<size_t>(style.indent * level), ' ');
}

Status DumpContainer(const nlohmann::json& v, const Style& style, int level, std::string* out) {
  const bool object = v.is_object();
  if (v.empty()) {
    out->append(object ? "{}" : "[]");
    return Status::Ok();
  }
  out->push_back(object ? '{' : '[');
  bool first = true;
  // nlohmann's object is a std::map: keys iterate in byte order, which for
  // UTF-8 is code-point order, the order of Python's sort_keys.
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (!first) out->append(style.item_sep);
    first = false;
    NewlineIndent(style, level + 1, out);
    if (object) {
      KVTIER_RETURN_IF_ERROR(PyJsonEscape(it.key(), out));
      out->append(style.key_sep);
    }
    KVTIER_RETURN_IF_ERROR(Dump(it.value(), style, level + 1, out));
  }
  NewlineIndent(style, level, out);
  out->push_back(object ? '}' : ']');
  return Status::Ok();
}

Status Dump(const nlohmann::json& v, const Style& style, int level, std::string* out) {
  switch (v.type()) {
    case nlohmann::json::value_t::null: out->append("null"); return Status::Ok();
    case nlohmann::json::value_t::boolean:
      out->append(v.get<bool>() ? "true" : "false");
      return Status::Ok();
    case nlohmann::json::value_t::number_integer:
      out->append(std::to_string(v.get<int64_t>()));
      return Status::Ok();
    case nlohmann::json::value_t::number_unsigned:
      out->append(std::to_string(v.get<uint64_t>()));
      return Status::Ok();
    case nlohmann::json::value_t::string: return PyJsonEscape(v.get_ref<const std::string&>(), out);
    case nlohmann::json::value_t::array:
    case nlohmann::json::value_t::object: return DumpContainer(v, style, level, out);
    default:
      // Floats and binary values never occur in vLLM's namespace fields, and
      // Python's float repr is not reproduced here.
      return InvalidArgument("py_json: unsupported JSON value type " + std::string(v.type_name()));
  }
}

}  // namespace

Status PyJsonEscape(std::string_view utf8, std::string* out) {
  out->push_back('"');
  for (size_t i = 0; i < utf8.size();) {
    int32_t cp = NextCodePoint(utf8, &i);
    if (cp < 0) return InvalidArgument("string is not valid UTF-8 at byte " + std::to_string(i));
    switch (cp) {
      case '"': out->append("\\\""); continue;
      case '\\': out->append("\\\\"); continue;
      case '\n': out->append("\\n"); continue;
      case '\r': out->append("\\r"); continue;
      case '\t': out->append("\\t"); continue;
      case '\b': out->append("\\b"); continue;
      case '\f': out->append("\\f"); continue;
      default: break;
    }
    if (cp >= 0x20 && cp <= 0x7e) {
      out->push_back(static_cast<char>(cp));
    } else if (cp <= 0xffff) {
      AppendU(static_cast<uint32_t>(cp), out);
    } else {
      uint32_t v = static_cast<uint32_t>(cp) - 0x10000;
      AppendU(0xd800 | (v >> 10), out);
      AppendU(0xdc00 | (v & 0x3ff), out);
    }
  }
  out->push_back('"');
  return Status::Ok();
}

Result<std::string> PyJsonDumpsCompact(const nlohmann::json& value) {
  std::string out;
  KVTIER_RETURN_IF_ERROR(Dump(value, Style{",", ":", -1}, 0, &out));
  return out;
}

Result<std::string> PyJsonDumpsIndent2(const nlohmann::json& value) {
  std::string out;
  KVTIER_RETURN_IF_ERROR(Dump(value, Style{",", ": ", 2}, 0, &out));
  return out;
}

}  // namespace kvtier::internal
