#!/usr/bin/env bash
# What sealed mode (docs/sealed.md) costs on this machine, beside the cipher
# alone, for 64 KiB and 1 MiB rows:
#  1. `kvtier bench fs` in CRC32C mode and in sealed mode, in interleaved
#     rounds (store, drop the page cache, load and verify): the medians of
#     store and load GB/s and CPU s/GB (getrusage of the whole process,
#     fsync and rename included), and load GB/s sealed/CRC (target >= 0.90
#     where the disk is the limit);
#  2. `openssl speed -evp aes-256-gcm -bytes N` (one core): the cipher's own
#     CPU s/GB, and (sealed - CRC CPU s/GB) / that: what sealing adds end to
#     end per cipher second (noisy where the store CPU is fsync-bound);
#  3. bench/seal_bench: the tier's SealCipher::Seal / ::Open against
#     AES-256-GCM alone on the same bytes, on one thread's CPU clock: the
#     target ratio (sealing at most 1.10x the cipher), free of I/O noise.
#   [ROOT=/mnt/ext4] [ROWS_64K=4096] [ROWS_1M=256] [ROUNDS=3] bench/sealed.sh
# Not part of CI; a run with the defaults takes a minute or two.
set -euo pipefail
BIN=${KVTIER_BIN:-$(dirname "$0")/../build/bin/kvtier}
SEAL_BENCH=${SEAL_BENCH:-$(dirname "$BIN")/seal_bench}
made_root=
[ -n "${ROOT:-}" ] || { ROOT=$(mktemp -d /tmp/kvtier-sealed-bench.XXXXXX); made_root=$ROOT; }
ROWS_64K=${ROWS_64K:-4096}
ROWS_1M=${ROWS_1M:-256}
ROUNDS=${ROUNDS:-3}
out=$(mktemp -d)
trap 'rm -rf "$out" ${made_root:+"$made_root"}' EXIT
head -c 32 /dev/urandom > "$out/seal.key"
chmod 0400 "$out/seal.key"

for bytes in 65536 1048576; do
  rows=$ROWS_64K
  [ "$bytes" = 1048576 ] && rows=$ROWS_1M
  for round in $(seq "$ROUNDS"); do
    for mode in crc sealed; do
      extra=()
      [ "$mode" = sealed ] && extra=(--seal-key-file "$out/seal.key")
      "$BIN" bench fs --root "$ROOT" --row-bytes "$bytes" --rows "$rows" --json "${extra[@]}" \
        > "$out/$mode.$bytes.$round.json" 2> "$out/$mode.$bytes.$round.err"
    done
  done
  for dir in enc dec; do
    flag=()
    [ "$dir" = dec ] && flag=(-decrypt)
    openssl speed "${flag[@]}" -seconds 3 -evp aes-256-gcm -bytes "$bytes" 2>/dev/null | tail -1 > "$out/openssl.$dir.$bytes"
  done
done

"$SEAL_BENCH" --json --row-bytes 65536 --row-bytes 1048576 > "$out/seal_bench.json"

/usr/bin/python3 - "$out" "$ROUNDS" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])

def median(mode, size, phase, field):
    vals = []
    for r in range(1, rounds + 1):
        d = json.load(open(f"{out}/{mode}.{size}.{r}.json"))["details"][phase]
        vals.append(d["bytes"] / d["wall_s"] / 1e9 if field == "gbps" else d["cpu_s"] / (d["bytes"] / 1e9))
    return statistics.median(vals)

def cipher_s_per_gb(direction, size):
    # "AES-256-GCM    5011046.40k": thousands of bytes per second, one core.
    kbps = float(open(f"{out}/openssl.{direction}.{size}").read().split()[-1].rstrip("k"))
    return 1e9 / (kbps * 1e3)

sizes = ((65536, "64 KiB"), (1048576, "1 MiB"))
print("kvtier bench fs (medians of %d rounds):" % rounds)
print("| row | mode | store GB/s | store CPU s/GB | load GB/s | load CPU s/GB |")
print("| --- | --- | --- | --- | --- | --- |")
for size, name in sizes:
    for mode in ("crc", "sealed"):
        f = [median(mode, size, p, k) for p in ("store", "load") for k in ("gbps", "cpu")]
        print(f"| {name} | {'CRC32C' if mode == 'crc' else 'sealed'} | " + " | ".join(f"{x:.3f}" for x in f) + " |")
print()
seal = {r["row_bytes"]: r for r in json.load(open(f"{out}/seal_bench.json"))}
print("| row | openssl enc / dec s/GB | seal_bench seal / cipher | open / cipher "
      "| (sealed - CRC CPU) / openssl: store | load | load GB/s sealed / CRC |")
print("| --- | --- | --- | --- | --- | --- | --- |")
for size, name in sizes:
    enc, dec = cipher_s_per_gb("enc", size), cipher_s_per_gb("dec", size)
    e2e_store = (median("sealed", size, "store", "cpu") - median("crc", size, "store", "cpu")) / enc
    e2e_load = (median("sealed", size, "load", "cpu") - median("crc", size, "load", "cpu")) / dec
    ratio = median("sealed", size, "load", "gbps") / median("crc", size, "load", "gbps")
    b = seal[size]
    print(f"| {name} | {enc:.3f} / {dec:.3f} | {b['seal_cpu_s_per_gb']:.3f} / {b['cipher_encrypt_cpu_s_per_gb']:.3f}"
          f" = {b['seal_vs_cipher']:.3f} | {b['open_cpu_s_per_gb']:.3f} / {b['cipher_decrypt_cpu_s_per_gb']:.3f}"
          f" = {b['open_vs_cipher']:.3f} | {e2e_store:.2f} | {e2e_load:.2f} | {ratio:.2f} |")
PY
