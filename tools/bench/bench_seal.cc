// `kvtier bench fs --seal-key-file`: the sealed namespace a run writes.
#include "bench/bench_fs.h"
#include "seal/seal_key.h"

namespace kvtier::internal {

Result<Namespace> BenchNamespace(const BenchFsOptions& o, const NamespaceSpec& spec) {
  KVTIER_ASSIGN_OR_RETURN(Namespace ns, Namespace::Create(spec));
  if (o.seal_key_file.empty()) return ns;
  // The key is read once more here only for its id (L161), and wiped.
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<SealKey> key, SealKey::FromFile(o.seal_key_file, o.seal_key_group_read));
  return ns.Sealed(key->key_id_hex());
}

}  // namespace kvtier::internal
