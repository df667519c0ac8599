"""kvtier.sglang's zero-copy calls never touch memory outside the registered host pool.

For every host layout SGLang has (MHA layer_first, page_first, page_first_direct, page_head; MLA
layer_first, page_first, page_first_direct), batch_set_v1 and batch_get_v1 get a batch of one
good page and one page whose host indices start at -1, one page before the pool, one page past
its end (under layer_first only the last layers' K and V pieces fall outside), far past, 2^40
slots past, 2^62 and -2^62. The good page answers True and round-trips byte-exact; the bad page answers False,
no page file is written for it, a load leaves the pool's bytes unchanged, and nothing raises.
The calls run in a child interpreter: before the backend checked the pieces against the pool,
one page past the end stored the heap memory after the pool (True) and the others crashed the
process (SIGSEGV), which fails this test instead of killing pytest. Skips with one line where
../shared/sglang or torch is absent.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

import sglang_support as sg

sg.skip_module_unless_ready()

LAYOUTS = [("mha", "layer_first"), ("mha", "page_first"), ("mha", "page_first_direct"), ("mha", "page_head"),
           ("mla", "layer_first"), ("mla", "page_first"), ("mla", "page_first_direct")]
CHILD = textwrap.dedent("""
    import ctypes, json, os, sys
    import torch
    sys.path.insert(0, os.environ["KVTIER_TEST_DIR"])
    import sglang_support as sg

    PS, PAGES = 16, 8


    def pool_bytes(p):
        kv = p.kv_buffer
        return ctypes.string_at(kv.data_ptr(), kv.numel() * kv.element_size())


    root, layouts = sys.argv[1], json.loads(sys.argv[2])
    for kind, layout in layouts:
        p = sg.pool(kind, layout, pages=PAGES)
        extra = {"interface_v1": 1, "root_dir": os.path.join(root, kind + "-" + layout)}
        b = sg.backend(extra, p, is_mla=kind == "mla")
        size = PAGES * PS
        bad_starts = {"minus_one": -1, "page_before": -PS, "one_past": size, "far_past": size * 1000,
                      "2^40_past": 1 << 40, "2^62": 1 << 62, "-2^62": -(1 << 62)}
        for case, start in bad_starts.items():
            good = p.alloc(PS)
            ks = sg.keys(2, f"{kind}/{layout}/{case}")
            sg.fill(p, ks[:1], good)
            idx = torch.cat([good, torch.arange(start, start + PS, dtype=torch.int64)])
            row = {"layout": kind + " " + layout, "case": case}
            print(json.dumps(dict(row, step="set")), flush=True)  # the last line a crash leaves
            row["set"] = b.batch_set_v1(ks, idx)
            row["bad_file"] = os.path.exists(b._store.page_path(ks[1]))
            before = pool_bytes(p)
            print(json.dumps(dict(row, step="get")), flush=True)
            row["get"] = b.batch_get_v1(ks, idx)
            row["pool_unchanged"] = before == pool_bytes(p)
            row["good_bytes"] = bool((p.page_u8(good[0]) == sg.expected(p, ks[0])).all())
            print(json.dumps(dict(row, step="done")), flush=True)
        b.close()
""")


def test_out_of_range_host_indices_answer_false_and_touch_nothing(tmp_path, tmp_path_factory):
    tree = sg.harness_tree(tmp_path_factory)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), sg.kvtier_python_dir()]),
               KVTIER_TEST_DIR=os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path), json.dumps(LAYOUTS)], env=env,
                          capture_output=True, text=True, timeout=240)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert proc.returncode == 0, (f"the child died (exit {proc.returncode}) at {rows[-1] if rows else 'start'}\n"
                                  f"{proc.stderr[-3000:]}")
    done = [r for r in rows if r["step"] == "done"]
    assert len(done) == len(LAYOUTS) * 7, proc.stdout
    wrong = [r for r in done if r["set"] != [True, False] or r["get"] != [True, False] or r["bad_file"]
             or not r["pool_unchanged"] or not r["good_bytes"]]
    assert not wrong, "pages outside the pool were not refused:\n" + "\n".join(map(json.dumps, wrong))
