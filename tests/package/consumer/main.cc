// A program outside the kvtier tree: hashes the first block of range(16) with
// vLLM's sha256 and PYTHONHASHSEED=0 and checks the golden value.
#include <kvtier/hashing.h>
#include <kvtier/layout.h>

#include <cstdio>
#include <vector>

int main() {
  using namespace kvtier;
  BlockHash none = ComputeNoneHash(HashAlgo::kSha256, "0");
  Result<BlockHasher> hasher = BlockHasher::Create(HashAlgo::kSha256, none, 16);
  if (!hasher.ok()) return 1;
  std::vector<int64_t> tokens;
  for (int i = 0; i < 16; ++i) tokens.push_back(i);
  std::vector<BlockHash> hashes;
  if (!hasher->AppendBlockHashes(tokens, {}, &hashes).ok() || hashes.size() != 1) return 1;
  const char* golden = "6358e31578a64b75ebe28cdb99d3beae65de82a2087321dc6ec84ae048faaaa6";
  if (hashes[0].Hex() != golden) {
    std::fprintf(stderr, "consumer: got %s\n", hashes[0].Hex().c_str());
    return 1;
  }
  std::printf("consumer: block hash %s ok\n", golden);
  return 0;
}
