// The human-readable form of a `kvtier hash` report. The model name, the
// root and the seed are the user's bytes: names and paths are quoted as the
// operators' reports quote them (util/name_escape.h), so that a newline in
// --model cannot split a path over two lines.
#include <sstream>

#include "cli/hash_command.h"
#include "util/name_escape.h"

namespace kvtier::internal {

std::string FormatHashReport(const nlohmann::json& r) {
  std::ostringstream out;
  out << "algorithm      " << r["algo"].get<std::string>() << "\n";
  if (r["none_hash_random"].get<bool>()) {
    out << "NONE_HASH seed random (PYTHONHASHSEED unset): these hashes match no other process\n";
  } else {
    out << "NONE_HASH seed \"" << EscapeUnprintable(r["none_hash_seed"].get<std::string>()) << "\"\n";
  }
  out << "NONE_HASH      " << r["none_hash_hex"].get<std::string>() << "\n";
  out << "tokens         " << r["num_tokens"].get<size_t>() << " (" << r["block_hashes_hex"].size()
      << " full blocks of " << r["hash_block_size"].get<uint32_t>() << ")\n";
  if (r.contains("namespace_dir")) out << "namespace      " << QuoteName(r["namespace_dir"].get<std::string>()) << "\n";
  out << "\nblock  tokens          hash\n";
  const uint32_t bs = r["hash_block_size"].get<uint32_t>();
  for (size_t i = 0; i < r["block_hashes_hex"].size(); ++i) {
    std::string range = std::to_string(i * bs) + "-" + std::to_string((i + 1) * bs - 1);
    out << std::left;
    out.width(7);
    out << i;
    out.width(16);
    out << range << r["block_hashes_hex"][i].get<std::string>() << "\n";
  }
  const uint32_t per_chunk = r["hashes_per_chunk"].get<uint32_t>();
  out << "\nchunk  last block  file\n";
  for (size_t i = 0; i < r["chunks"].size(); ++i) {
    const auto& c = r["chunks"][i];
    out.width(7);
    out << i;
    out.width(12);
    out << (i + 1) * per_chunk - 1;
    if (c.contains("path")) {
      out << QuoteName(c["path"].get<std::string>()) << (c["exists"].get<bool>() ? "  [present]" : "  [absent]");
    } else if (c.contains("relpath")) {
      out << QuoteName(c["relpath"].get<std::string>());
    } else {
      out << "key " << c["offload_key_hex"].get<std::string>() << " (give --model for paths)";
    }
    out << "\n";
  }
  return out.str();
}

}  // namespace kvtier::internal
