"""Proves that kvtier.sglang hands SGLang's extra_config to the fs tier by the library's own key
table, not by a list of its own: every key the C++ fs-tier parser accepts (read from the parser's
"valid keys are" message, so the test does not trust the binding it checks) reaches that parser
from SGLang's config (a bad value is refused naming the key, never ignored as unknown), and
``max_bytes`` (vLLM PR #54327's budget, once missing from kvtier.sglang's copy of the list) bounds
the pages a backend keeps: the namespace directory stays within it, the oldest pages are evicted
and the tier's metrics show the budget. Uses SGLang's own config class and the kit's mock host
pool (sglang_support); skips with one line where ../shared/sglang or torch is absent.
"""

import logging
import re
from pathlib import Path

import pytest

import sglang_support as sg
from sglang_support import sglang_tree  # noqa: F401 (autouse: the harness on sys.path)

sg.skip_module_unless_ready()
PS = 16  # the mock pool's tokens per page
extra = sg.extra_config


def library_fs_keys(tmp_path):
    """The fs-tier keys kvtier's C++ parser accepts, from its own refusal of an unknown key."""
    import kvtier

    ns = kvtier.Namespace("kvtier-test/keys")
    with pytest.raises(kvtier.KvtierError) as e:
        kvtier.FsTier(ns, 4096, {"root_dir": str(tmp_path), "no_such_key_xyz": 1})
    listed = re.search(r"valid keys are: (.*)$", e.value.message).group(1)
    return sorted(name.removesuffix(" (kvtier)") for name in listed.split(", "))


def page_files(root):
    return [p for p in Path(root).rglob("*.bin") if p.is_file()]


def test_every_library_key_reaches_the_parser(tmp_path, caplog):
    import kvtier

    keys = library_fs_keys(tmp_path / "probe")
    assert "max_bytes" in keys and "root_dir" in keys, keys
    p = sg.pool(pages=4)
    for key in keys:
        cfg = extra(tmp_path / key)
        cfg[key] = "\0 not a value of any key"  # refused by every row of the table
        caplog.clear()
        refusal = None
        with caplog.at_level(logging.WARNING, logger="kvtier.sglang"):
            try:
                sg.backend(cfg, p).close()
            except kvtier.KvtierError as e:
                refusal = e.message
        unknown = [r.getMessage() for r in caplog.records if "unknown" in r.getMessage()]
        assert refusal and f"'{key}'" in refusal and not unknown, (key, refusal, unknown)


def test_max_bytes_from_sglang_bounds_the_pages_kept(tmp_path):
    p = sg.pool(pages=16)
    budget = 4 * p.page_bytes
    b = sg.backend(extra(tmp_path, max_bytes=budget), p)
    try:
        for round_ in range(3):
            idx = p.alloc(4 * PS)
            ks = sg.keys(4, f"budget{round_}")
            sg.fill(p, ks, idx)
            assert b.batch_set_v1(ks, idx) == [True] * 4, round_
            p.free(idx)
            files = page_files(tmp_path)
            assert sum(f.stat().st_size for f in files) <= budget, (round_, len(files))
        m = b.kvtier_metrics()
        assert m["capacity_bytes_max"] == budget and m["capacity_evicted_blocks"] == 8, m
        assert b.batch_exists(sg.keys(4, "budget2")) == 4 and b.batch_exists(sg.keys(4, "budget0")) == 0
    finally:
        b.close()
