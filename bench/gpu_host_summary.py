#!/usr/bin/env python3
"""bench/gpu_host.sh's summary: reads the raw files of one run and writes summary.md and summary.json.

    gpu_host_summary.py RAW_DIR OUT_DIR MODE WALL_S [partial]

One table per item: the machine, the steps (ok / failed / timeout / skipped, with why), the GPU
tests, the stager against the pinned-copy probe per row size, direction and checksum mode, and
the engine benchmarks (fio_compare.sh's tools, vllm_tier.py's and sglang_backends.py's medians
with checksums on and off). A step whose output is missing or unreadable shows as such in its
table: the summary never fails because a benchmark did. Standard library only (it runs under
whatever python3 the machine has).
"""

import csv
import glob
import json
import os
import re
import sys

TARGET_RATIO = 0.90  # the stager against the probe


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def last_json(path):
    """The last line of a log that parses as a JSON object (tools print JSON on stdout; the log
    also holds their stderr)."""
    text = read(path)
    for line in reversed((text or "").splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                pass
    return None


def load_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def table(head, rows):
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return out


def f3(v):
    return "" if v is None else "%.3f" % v


def machine(raw):
    info = {}
    for line in (read(os.path.join(raw, "machine.txt")) or "").splitlines():
        k, _, v = line.partition(": ")
        info[k.strip()] = v.strip()
    return info


def steps(raw):
    with open(os.path.join(raw, "steps.tsv")) as f:
        return list(csv.DictReader(f, delimiter="\t"))


def gpu_tests(raw):
    rows = []
    for path in sorted(glob.glob(os.path.join(raw, "test_*.json"))):
        j = load_json(path)
        name = os.path.basename(path)[5:-5]
        if j is None:
            rows.append({"binary": name, "error": "no GoogleTest JSON (see test_%s.log)" % name})
            continue
        cases = [c for s in j.get("testsuites", []) for c in s.get("testsuite", [])]
        skipped = [c for c in cases if c.get("result") == "SKIPPED"]
        failed = [c["classname"] + "." + c["name"] for c in cases if c.get("failures")]
        rows.append({"binary": name, "tests": len(cases), "failed": failed, "skipped": len(skipped),
                     "passed": len(cases) - len(skipped) - len(failed)})
    return rows


def transfers(raw):
    rows = []
    for path in glob.glob(os.path.join(raw, "transfer_*_o*.json")):
        size, ck = re.match(r"transfer_(\w+?)_(on|off)\.json$", os.path.basename(path)).groups()
        j = last_json(path)
        last = [l for l in (read(path) or "").splitlines() if l.strip()][-1:] or ["(empty)"]
        rows.append({"row": size, "checksums": ck, "result": j, "log": os.path.basename(path),
                     "error": None if j else last[0][:160].replace("|", "/")})
    unit = {"KiB": 1 << 10, "MiB": 1 << 20}
    rows.sort(key=lambda r: (int(r["row"][:-3]) * unit[r["row"][-3:]], r["checksums"] == "off"))
    return rows


def fio_compare(raw):
    text = read(os.path.join(raw, "fio_compare.txt"))
    if not text:
        return None
    num = r"\s+([\d.]+|inf|nan)"
    tools = [m.groups() for m in re.finditer(r"^(\S.*?)" + num * 6 + r"\s*$", text, re.M)]
    ratios = [l for l in text.splitlines()
              if re.match(r"^(fs benchmark|kvtier[^:]*/|kvtier load p99|fio read p99|CRC32C|CPU s/GB|rows verified)", l)]
    return {"tools": [{"name": t[0].strip(), "store_gbps": t[1], "load_gbps": t[2], "store_p99_us": t[3],
                       "load_p99_us": t[4], "store_gb_per_cpu_s": t[5], "load_gb_per_cpu_s": t[6]} for t in tools],
            "lines": ratios}


def engine(raw, pattern):
    return {ck: load_json(os.path.join(raw, pattern % ck)) for ck in ("on", "off")}


def md_machine(info, mode, wall):
    lines = ["# kvtier on a GPU host: bench/gpu_host.sh (%s mode, %s s)" % (mode, wall), ""]
    lines += table(["", ""], [(k, v.replace("|", "/")) for k, v in info.items()])
    return lines


def md_steps(st, notes):
    lines = ["", "## Steps", ""]
    lines += table(["step", "status", "s", "log", "detail"],
                   [(s["step"], s["status"], s["seconds"], s["log"], s["detail"]) for s in st])
    if notes:
        lines.append("")
    for n in notes:
        lines.append("- " + n)
    return lines


def md_tests(rows):
    lines = ["", "## 1. GPU tests (gpu_*_test binaries)", ""]
    if not rows:
        return lines + ["no GPU test ran (see Steps)"]
    body = []
    for r in rows:
        if "error" in r:
            body.append((r["binary"], "", "", "", "", r["error"]))
        else:
            body.append((r["binary"], r["tests"], r["passed"], len(r["failed"]), r["skipped"],
                         ", ".join(r["failed"]) or ("all skipped: no GPU" if r["skipped"] == r["tests"] else "")))
    return lines + table(["binary", "tests", "passed", "failed", "skipped", "note"], body)


def crc_where(c):
    """Where transfer_bench says the rows' CRC32C ran (its JSON's "checksums" object, when it has one)."""
    if not c or c.get("mode") != "on":
        return ""
    return " (GPU, %.2f GB)" % (c.get("device_bytes", 0) / 1e9) if c.get("on_device") else " (CPU)"


def md_transfers(rows):
    lines = ["", "## 2. Staging: transfer_bench against the pinned-copy probe (GB = 1e9 B; target >= %.2f)" % TARGET_RATIO, ""]
    body, ratios = [], []
    for r in rows:
        j = r["result"]
        if not j:
            body.append((r["row"], r["checksums"], "", "", "", "", "", "", "%s: %s" % (r["log"], r["error"])))
            continue
        c = j.get("copy", {})
        path = ", ".join("%s %d" % (k[:-9], v) for k, v in sorted(c.items()) if k.endswith("_segments") and v)
        h, d = j["h2d"], j["d2h"]
        ratios += [h["ratio"], d["ratio"]]
        body.append((r["row"], r["checksums"] + crc_where(j.get("checksums")), f3(h["kvtier_gbps"]),
                     f3(h["probe_gbps"]), f3(h["ratio"]), f3(d["kvtier_gbps"]), f3(d["probe_gbps"]), f3(d["ratio"]),
                     path))
    lines += table(["row", "checksums", "h2d GB/s", "probe", "h2d ratio", "d2h GB/s", "probe", "d2h ratio",
                    "segments by path"], body)
    if ratios:
        lines += ["", "lowest ratio %.3f, highest %.3f; %d of %d below %.2f" % (
            min(ratios), max(ratios), sum(x < TARGET_RATIO for x in ratios), len(ratios), TARGET_RATIO)]
    return lines


def md_fio(fc):
    lines = ["", "## 3a. fs tier against fio and vLLM's syscalls (bench/fio_compare.sh)", ""]
    if not fc:
        return lines + ["no output (see Steps)"]
    lines += table(["tool", "store GB/s", "load GB/s", "store p99 us", "load p99 us", "store GB/CPU-s",
                    "load GB/CPU-s"], [tuple(t.values()) for t in fc["tools"]])
    return lines + ["", "```"] + fc["lines"] + ["```"]


def md_vllm(res):
    lines = ["", "## 3b. kvtier against vLLM's own fs tier (bench/vllm_tier.py)", ""]
    for ck, j in res.items():
        if not j:
            lines += ["checksums %s: no output (see Steps)" % ck, ""]
            continue
        for rb, s in j["sizes"].items():
            lines += ["checksums %s, rows of %d KiB, %d rows, median of %d rounds:" % (
                ck, int(rb) // 1024, j["options"]["rows"], j["options"]["rounds"]), ""]
            lines += table(["", "vLLM fs", "kvtier", "kvtier/vLLM"],
                           [(k, f3(v["vllm"]), f3(v["kvtier"]), "%.2f" % v["ratio"]) for k, v in s["summary"].items()])
            lines.append("")
    return lines


def md_sglang(res):
    lines = ["", "## 3c. kvtier against SGLang's HiCacheFile (bench/sglang_backends.py)", ""]
    for ck, j in res.items():
        if not j:
            lines += ["checksums %s: no output (see Steps)" % ck, ""]
            continue
        med, fio = j["medians"], j.get("fio")
        cols = list(med)
        lines += ["checksums %s, %d pages of 2 MiB, median of %d rounds:" % (ck, j["pages"], j["rounds"]), ""]
        body = []
        for key, label, fk in (("set_gbs", "set GB/s", "write"), ("set_cpu", "set CPU s/GB", None),
                               ("get_gbs", "get GB/s", "read"), ("get_cpu", "get CPU s/GB", None),
                               ("p99_ms", "p99 128-page read ms", None)):
            body.append([label] + [f3(med[c][key]) for c in cols] + [f3(fio[fk]) if fio and fk else ""])
        lines += table([""] + cols + ["fio"], body) + [""]
        base = (res.get("on") or {}).get("medians", {}).get("HiCacheFile")
        for c in (c for c in cols if c.startswith("kvtier") and base):
            m = med[c]
            lines.append("%s / HiCacheFile%s: set %.2fx, get %.2fx (target >= 3x); CPU/GB set %.2fx, get %.2fx "
                         "(target <= 0.3x)%s" % (
                             c, "" if ck == "on" else " (HiCacheFile of the checksums-on run)", m["set_gbs"] / base["set_gbs"],
                             m["get_gbs"] / base["get_gbs"], m["set_cpu"] / base["set_cpu"],
                             m["get_cpu"] / base["get_cpu"],
                             "; / fio: set %.2fx, get %.2fx (target >= 0.9x)" % (
                                 m["set_gbs"] / fio["write"], m["get_gbs"] / fio["read"]) if fio else ""))
        lines.append("")
    return lines


def guarded(fn, arg):
    """One section's lines; a tool whose output is not what the section expects costs that
    section only (named, with the error), never the summary."""
    try:
        return fn(arg)
    except (KeyError, IndexError, TypeError, ValueError, ZeroDivisionError, AttributeError) as e:
        return ["", "## %s: unexpected output (%s: %s); the raw files are in raw.tar.gz" % (
            fn.__name__[3:], type(e).__name__, e)]


def main():
    raw, out, mode, wall = sys.argv[1:5]
    partial = sys.argv[5:6] == ["partial"]  # a snapshot between steps (gpu_host.sh's snapshot)
    info, st = machine(raw), steps(raw)
    notes = (read(os.path.join(raw, "notes.txt")) or "").splitlines()
    tests, tb, fc = gpu_tests(raw), transfers(raw), fio_compare(raw)
    vl, sg = engine(raw, "vllm_tier_%s.json"), engine(raw, "sglang_%s.json")
    md = md_machine(info, mode, wall) + md_steps(st, notes)
    for fn, arg in ((md_tests, tests), (md_transfers, tb), (md_fio, fc), (md_vllm, vl), (md_sglang, sg)):
        md += guarded(fn, arg)
    if partial:
        md[1:1] = ["", "**Partial: written after the last step that ended; the run had not finished.**"]
    # Each file replaced whole: a run killed while writing keeps the previous one.
    with open(os.path.join(out, "summary.md.part"), "w") as f:
        f.write("\n".join(md) + "\n")
    os.replace(os.path.join(out, "summary.md.part"), os.path.join(out, "summary.md"))
    with open(os.path.join(out, "summary.json.part"), "w") as f:
        json.dump({"mode": mode, "partial": partial, "wall_s": int(wall), "machine": info, "steps": st,
                   "notes": notes, "gpu_tests": tests, "transfer": tb, "fio_compare": fc, "vllm_tier": vl,
                   "sglang": sg}, f, indent=1)
    os.replace(os.path.join(out, "summary.json.part"), os.path.join(out, "summary.json"))


if __name__ == "__main__":
    main()
