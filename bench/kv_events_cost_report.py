#!/usr/bin/python3
"""The table of bench/kv_events_cost.sh, from the raw JSON of its runs (see that script).

argv: RAW HAVE_FIO ROWS ROW_BYTES QD REPEAT ELAPSED_S FSTYPE SLOW_SLEEP_MS SLOW_HWM
BLOCKS_PER_FILE. Prints, never judges: the ratios stand beside their target (>= 0.98x) and nothing
exits non-zero for a missed one. Exits 1 only when a run's report is missing or a row failed to round-trip.
"""
import json
import os
import statistics
import sys

TARGET = 0.98
raw, have_fio, rows, row_bytes, qd, repeat, elapsed, fstype, slow_sleep_ms, slow_hwm, bpf = sys.argv[1:12]
have_fio = have_fio == "1"
rows, row_bytes, repeat, bpf = int(rows), int(row_bytes), int(repeat), int(bpf)


def load(name):
    with open(os.path.join(raw, name)) as f:
        return json.load(f)


def fio_gbps(path, kind):
    return load(path)["jobs"][0][kind]["bw_bytes"] / 1e9


def spread(vals):
    return f"{min(vals):.3f}-{max(vals):.3f}" if len(vals) > 1 else "-"


off = [load(f"off.{i}.json") for i in range(1, repeat + 1)]
on = [load(f"on.{i}.json") for i in range(1, repeat + 1)]
subs = [load(f"on.{i}.sub.json") for i in range(1, repeat + 1)]
bad = [r for r in off + on if r["rows_verified"] != rows or r["rows_corrupt"] or r["store_errors"]]
if bad:
    print("kv_events_cost: a run did not round-trip every row", file=sys.stderr)
    sys.exit(1)

fig = {}  # name -> direction -> list of GB/s
if have_fio:
    fig["fio io_uring O_DIRECT"] = {"store": [fio_gbps("fio_write.json", "write")],
                                    "load": [fio_gbps("fio_read.json", "read")]}
fig["kvtier, events off"] = {d: [r[d]["gbps"] for r in off] for d in ("store", "load")}
fig["kvtier, events on"] = {d: [r[d]["gbps"] for r in on] for d in ("store", "load")}
med = {n: {d: statistics.median(v) for d, v in f.items()} for n, f in fig.items()}

files = f"files of {bpf} blocks, each recording their hashes (FORMAT.md L197-L202)" if bpf > 1 else "a block a file"
print(f"kv events cost: {rows} rows x {row_bytes / 1024:g} KiB, {files}, queue depth {qd}, on {fstype}; "
      f"{repeat} interleaved round{'s' if repeat != 1 else ''} (median, range); {elapsed} s")
print()
print(f"| {'run':24} | {'store GB/s':>10} | {'range':>11} | {'load GB/s':>9} | {'range':>11} |")
print(f"| {'-' * 24} | {'-' * 9}: | {'-' * 10}: | {'-' * 8}: | {'-' * 10}: |")
for name, f in fig.items():
    print(f"| {name:24} | {med[name]['store']:10.3f} | {spread(f['store']):>11} | "
          f"{med[name]['load']:9.3f} | {spread(f['load']):>11} |")
print()
for d in ("store", "load"):
    r = med["kvtier, events on"][d] / med["kvtier, events off"][d]
    paired = [a[d]["gbps"] / b[d]["gbps"] for a, b in zip(on, off)]
    verdict = "meets" if r >= TARGET else "MISSES"
    print(f"events on / off, {d:5}: {r:.3f}x (per round {', '.join(f'{p:.3f}' for p in paired)}); "
          f"target >= {TARGET}x: {verdict}")
if have_fio:
    fio = med["fio io_uring O_DIRECT"]
    for n in ("kvtier, events off", "kvtier, events on"):
        print(f"{n} / fio: store {med[n]['store'] / fio['store']:.3f}x, load {med[n]['load'] / fio['load']:.3f}x")
pub = [r["kv_events"]["published"] for r in on]
got = [s["events"] for s in subs]
print(f"events: published {', '.join(map(str, pub))} (the tier, per round); received {', '.join(map(str, got))} "
      f"(the subscriber); dropped {', '.join(str(r['kv_events']['dropped']) for r in on)}; "
      f"batches {', '.join(str(r['kv_events']['batches']) for r in on)}; "
      f"undecodable {sum(s['undecodable'] for s in subs)}")
print(f"block hashes in BlockStored: {', '.join(str(s['stored_hashes']) for s in subs)} (the subscriber, per round; "
      f"every block of every file: {rows * bpf} a round)")
cpu = {n: statistics.median(r["details"]["store"]["cpu_s"] for r in runs) for n, runs in (("off", off), ("on", on))}
cs = {n: statistics.median(r["details"]["store"]["context_switches"] for r in runs) for n, runs in (("off", off), ("on", on))}
events = statistics.median(pub) or 1
print(f"store phase CPU (the tier's process, median): off {cpu['off']:.3f} s, on {cpu['on']:.3f} s: "
      f"{(cpu['on'] - cpu['off']) * 1e6 / events:.0f} us and {(cs['on'] - cs['off']) / events:.1f} context switches "
      f"more per event; the subscriber's CPU: {statistics.median(x['cpu_s'] for x in subs) * 1e6 / events:.0f} us "
      f"per event")
if any(p != g for p, g in zip(pub, got)):
    print("  (a fast subscriber lost events: see the seq gaps in the raw JSON)")
print()

print(f"slow subscriber: sleeps {slow_sleep_ms} ms after each batch, RCVHWM 10, 4 KiB receive buffer")
print()
print(f"| {'PUB hwm':>8} | {'store GB/s':>10} | {'vs off':>6} | {'vs pair':>7} | {'published':>9} | {'pub. ev/s':>9} | "
      f"{'received':>8} | {'recv ev/s':>9} | {'seq gaps':>8} | {'dropped':>7} |")
print(f"| {'-' * 7}: | {'-' * 9}: | {'-' * 5}: | {'-' * 6}: | {'-' * 8}: | {'-' * 8}: | {'-' * 7}: | {'-' * 8}: | "
      f"{'-' * 7}: | {'-' * 6}: |")
for name, hwm in (("slow_default", "100000"), ("slow_hwm", slow_hwm)):
    r, s, beside = load(f"{name}.json"), load(f"{name}.sub.json"), load(f"{name}.off.json")
    e = r["kv_events"]
    wall = r["details"]["store"]["wall_s"]
    print(f"| {hwm:>8} | {r['store']['gbps']:10.3f} | {r['store']['gbps'] / med['kvtier, events off']['store']:5.3f}x | "
          f"{r['store']['gbps'] / beside['store']['gbps']:6.3f}x | "
          f"{e['published']:9} | {e['published'] / wall if wall else 0:9.0f} | {s['events']:8} | "
          f"{s['events_per_s'] or 0:9.0f} | {s['seq_gaps']:8} | {e['dropped']:7} |")
print()
print("vs off: against part 1's events-off median; vs pair: against the events-off run just before it.")
print("published: events the tier's publisher sent; pub. ev/s: over the store phase's wall time; received and")
print("recv ev/s: what the subscriber took, over its first to last receive; seq gaps: batches lost on the way")
print("(ZeroMQ drops at the PUB's high-water mark, unseen by the publisher); dropped: the tier's")
print("kv_events_dropped (its queue full). Events still in ZeroMQ's or the kernel's socket buffers when the benchmark")
print("exits are not received (closed after its linger): a slow subscriber catches up through the replay")
print("socket. GB = 1e9 bytes.")
