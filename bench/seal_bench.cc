// What sealing costs beyond the cipher: CPU seconds per GB of the fs tier's
// SealCipher::Seal and ::Open (src/seal: block key from the salt, AAD of the
// block's path, AES-256-GCM, the trailer) against AES-256-GCM alone through
// EVP on the same bytes (a key set once, a fresh IV per row: what `openssl
// speed -evp aes-256-gcm -bytes N` measures), per row size, on the calling
// thread's CPU clock. Rounds alternate the two so that a noisy neighbour
// costs both alike; the medians are printed with their ratio (the target of
// docs/sealed.md: sealing at most 1.10x the cipher). bench/sealed.sh runs it.
// With --pool-bytes the rows cycle through a pool larger than the cache, as
// a load's rows (fresh from the disk) and a store's do.
//   seal_bench [--row-bytes 65536 --row-bytes 1048576] [--rounds 7] [--bytes-per-round 268435456]
//              [--pool-bytes 268435456] [--json]
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <time.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "seal/seal_cipher.h"
#include "seal/seal_key.h"

namespace {

using kvtier::internal::SealCipher;
using kvtier::internal::SealKey;
using kvtier::internal::SealKeyring;
using kvtier::internal::SealPiece;

double ThreadCpuS() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// CPU seconds per GB of `n` calls of `op`, each over `row` bytes.
double SecondsPerGb(size_t n, size_t row, const std::function<bool()>& op) {
  const double t0 = ThreadCpuS();
  for (size_t i = 0; i < n; ++i) {
    if (!op()) {
      std::fprintf(stderr, "seal_bench: an operation failed\n");
      std::exit(1);
    }
  }
  return (ThreadCpuS() - t0) / (static_cast<double>(n * row) / 1e9);
}

// AES-256-GCM alone: one context, the key set once, a fresh IV per row.
struct PlainGcm {
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  uint8_t key[32] = {}, iv[12] = {}, tag[16] = {};
  PlainGcm() { RAND_bytes(key, sizeof key); }
  ~PlainGcm() { EVP_CIPHER_CTX_free(ctx); }
  bool Run(bool encrypt, const uint8_t* in, uint8_t* out, size_t len) {
    int n = 0;
    ++iv[0];
    if (EVP_CipherInit_ex(ctx, EVP_aes_256_gcm(), nullptr, key, iv, encrypt ? 1 : 0) != 1) return false;
    if (!encrypt) EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, sizeof tag, tag);
    if (EVP_CipherUpdate(ctx, out, &n, in, static_cast<int>(len)) != 1) return false;
    EVP_CipherFinal_ex(ctx, out + n, &n);  // decrypting under a stale tag fails: the work is done either way
    if (encrypt) EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, sizeof tag, tag);
    return true;
  }
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Rows of one size: `count` of each kind, used in turn (count 1: the same
// row every time, hot in the cache; enough rows to pass the last-level
// cache: cold, as a load's row fresh from the disk is).
struct Rows {
  size_t row, count;
  std::vector<uint8_t> plain, sealed, opened, pages;
  Rows(size_t r, size_t c) : row(r), count(c), plain(r * c), sealed(r * c), opened(r * c), pages(4096 * c) {
    RAND_bytes(plain.data(), static_cast<int>(std::min<size_t>(plain.size(), INT32_MAX)));
  }
  SealPiece Seal(size_t i) { return {&plain[i % count * row], &sealed[i % count * row], row}; }
  SealPiece Open(size_t i) { return {&sealed[i % count * row], &opened[i % count * row], row}; }
  uint8_t* Page(size_t i) { return &pages[i % count * 4096]; }
};

nlohmann::json OneSize(SealCipher* cipher, size_t row, int rounds, size_t bytes_per_round, size_t pool_bytes) {
  Rows rows(row, std::max<size_t>(1, pool_bytes / row));
  const std::string rel = "kvtier-bench_0123456789ab_r0/abc/de_g0/" + std::string(64, 'f') + ".bin";
  PlainGcm gcm;
  const size_t n = std::max<size_t>(1, bytes_per_round / row);
  std::vector<double> seal, open, enc, dec;
  size_t i = 0;
  for (int r = 0; r < rounds; ++r) {
    enc.push_back(SecondsPerGb(n, row, [&] {
      const SealPiece p = rows.Seal(i++);
      return gcm.Run(true, p.in, p.out, row);
    }));
    dec.push_back(SecondsPerGb(n, row, [&] {
      const SealPiece p = rows.Open(i++);
      return gcm.Run(false, p.in, p.out, row);
    }));
    seal.push_back(SecondsPerGb(n, row, [&] {
      const SealPiece p = rows.Seal(i);
      return cipher->Seal(rel, {&p, 1}, row, rows.Page(i++)).ok();
    }));
    i -= n;  // open the rows just sealed, in the same order
    open.push_back(SecondsPerGb(n, row, [&] {
      const SealPiece p = rows.Open(i);
      return cipher->Open(0, rel, rows.Page(i++), row + 4096, {&p, 1}).empty();
    }));
  }
  const double s = Median(seal), o = Median(open), e = Median(enc), d = Median(dec);
  return {{"row_bytes", row}, {"rows_per_round", n}, {"rounds", rounds}, {"pool_bytes", rows.row * rows.count},
          {"seal_cpu_s_per_gb", s}, {"cipher_encrypt_cpu_s_per_gb", e}, {"seal_vs_cipher", s / e},
          {"open_cpu_s_per_gb", o}, {"cipher_decrypt_cpu_s_per_gb", d}, {"open_vs_cipher", o / d}};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"CPU cost of the fs tier's sealing against AES-256-GCM alone"};
  std::vector<size_t> rows = {65536, 1048576};
  int rounds = 7;
  size_t bytes_per_round = size_t{256} << 20;
  size_t pool_bytes = 0;
  bool json = false;
  app.add_option("--pool-bytes", pool_bytes,
                 "Rows cycled through (0: one row, hot in the cache; e.g. 268435456: cold, as a row fresh from the disk)")
      ->capture_default_str();
  app.add_option("--row-bytes", rows, "Row sizes (repeatable)")->capture_default_str();
  app.add_option("--rounds", rounds, "Alternating rounds; medians are printed")->capture_default_str();
  app.add_option("--bytes-per-round", bytes_per_round, "Bytes each measurement seals or opens")->capture_default_str();
  app.add_flag("--json", json, "Machine-readable output");
  CLI11_PARSE(app, argc, argv);
  std::vector<uint8_t> key(32);
  RAND_bytes(key.data(), 32);
  auto ring = std::make_shared<SealKeyring>();
  auto loaded = SealKey::FromContent(key, "a random key");
  if (!loaded.ok()) return std::fprintf(stderr, "seal_bench: %s\n", loaded.status().ToString().c_str()), 1;
  ring->keys.push_back(std::move(*loaded));
  auto cipher = SealCipher::Create(ring);
  if (!cipher.ok()) return std::fprintf(stderr, "seal_bench: %s\n", cipher.status().ToString().c_str()), 1;
  nlohmann::json out = nlohmann::json::array();
  for (size_t row : rows) out.push_back(OneSize(cipher->get(), row, std::max(1, rounds), bytes_per_round, pool_bytes));
  if (json) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::printf("%10s %12s %12s %8s %12s %12s %8s   (CPU s/GB, medians)\n", "row", "seal", "cipher enc", "ratio",
              "open", "cipher dec", "ratio");
  for (const auto& r : out) {
    std::printf("%10zu %12.4f %12.4f %8.3f %12.4f %12.4f %8.3f\n", r["row_bytes"].get<size_t>(),
                r["seal_cpu_s_per_gb"].get<double>(), r["cipher_encrypt_cpu_s_per_gb"].get<double>(),
                r["seal_vs_cipher"].get<double>(), r["open_cpu_s_per_gb"].get<double>(),
                r["cipher_decrypt_cpu_s_per_gb"].get<double>(), r["open_vs_cipher"].get<double>());
  }
  return 0;
}
