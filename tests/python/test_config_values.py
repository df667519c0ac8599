"""What the Python API accepts as config values, namespace groups and
hash inputs, and that every refusal is a ``kvtier.KvtierError`` naming the argument or key.

A tier config's values may be ``pathlib.Path``, numpy scalars or a ``root_dir`` that is not
UTF-8 (bytes, or a str from ``os.fsdecode``), as vLLM's own tier allows; NaN and infinity, non-str
dict keys and other types are refused naming the key (not a bare ``TypeError`` or a JSON syntax
error). A badly shaped ``Namespace(kv_cache_groups=...)`` is refused naming the group (not
``KeyError`` or an opaque ``RuntimeError``). Block hashes are bytes and vLLM's str arguments are
str: ``chunk_keys`` refuses a str hash rather than hash its UTF-8 bytes.
Method: open real tiers in a temporary directory and call the functions with each input.
"""

import math
import os
import pathlib

import numpy as np
import pytest

import kvtier

ROW = 4096


def ns():
    return kvtier.Namespace("config-values/model")


def open_tier(config):
    tier = kvtier.FsTier(ns(), ROW, config)
    tier.close()


def refused(fn, *names):
    with pytest.raises(kvtier.KvtierError) as e:
        fn()
    assert e.value.code == "invalid_argument", e.value
    for name in names:
        assert name in e.value.message, e.value.message
    return e.value.message


# ---- config values -------------------------------------------------------------------------


def test_pathlib_root_dir_and_numpy_scalars_are_accepted(tmp_path):
    open_tier({"root_dir": tmp_path / "a", "n_read_threads": np.int64(4), "n_write_threads": np.int32(2),
               "o_direct": np.bool_(False), "io_timeout_ms": np.uint16(5000)})
    assert (tmp_path / "a").is_dir()


def test_numpy_float_backpressure_is_accepted(tmp_path):
    bp = {"backpressure_cls": "EMABackpressureDetector", "alpha": np.float32(0.5), "high_water_s": np.float64(0.1)}
    open_tier({"root_dir": str(tmp_path), "backpressure": bp})


def test_vllm_tier_takes_the_same_values(tmp_path):
    rows = bytearray(ROW * 2)
    tier = kvtier.VllmTier(ns(), rows, ROW, {"root_dir": tmp_path / "e", "n_read_threads": np.int64(2)})
    tier.shutdown()


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, np.float64("nan")])
def test_nan_and_infinity_name_the_key(tmp_path, bad):
    bp = {"backpressure_cls": "EMABackpressureDetector", "high_water_s": bad}
    refused(lambda: open_tier({"root_dir": str(tmp_path), "backpressure": bp}), "backpressure.high_water_s", "finite")


@pytest.mark.parametrize("raw", ["bytes", "fsdecoded str"])
def test_root_dir_that_is_not_utf8(tmp_path, raw):
    root = os.fsencode(tmp_path) + b"/kv-\xff\xfe"
    open_tier({"root_dir": root if raw == "bytes" else os.fsdecode(root)})
    assert os.path.isdir(root)
    assert any(os.scandir(root)), "the namespace directory is created under the raw path"


def test_root_dir_rules_hold_for_raw_bytes(tmp_path):
    refused(lambda: open_tier({"root_dir": os.fsencode(tmp_path) + b"/a\x00b"}), "root_dir", "NUL")
    refused(lambda: open_tier({"root_dir": 7}), "root_dir", "expected a string")


def test_other_types_name_the_key(tmp_path):
    refused(lambda: open_tier({"root_dir": str(tmp_path), "durability": b"file"}), "durability", "bytes")
    refused(lambda: open_tier({"root_dir": str(tmp_path), "n_read_threads": object()}), "n_read_threads")
    refused(lambda: open_tier({"root_dir": str(tmp_path), 1: 2}), "keys must be strings")
    refused(lambda: open_tier({"root_dir": str(tmp_path), "durability": "\udcff"}), "durability", "Unicode")
    refused(lambda: open_tier(["root_dir"]), "dict of tier keys")


def test_integers_are_not_coerced(tmp_path):
    # The parser's rules still apply to converted values: 4.0 is not an integer, True is not 1.
    refused(lambda: open_tier({"root_dir": str(tmp_path), "n_read_threads": np.float64(4.0)}), "n_read_threads")
    refused(lambda: open_tier({"root_dir": str(tmp_path), "n_read_threads": True}), "n_read_threads")


def test_io_slot_limit_is_enforced_from_python(tmp_path):
    refused(lambda: open_tier({"root_dir": str(tmp_path), "n_read_threads": 8000, "n_write_threads": 200}),
            "n_read_threads", "at most 8192")
    refused(lambda: open_tier({"root_dir": str(tmp_path), "n_read_threads": 2**29, "n_write_threads": 2**29}),
            "n_read_threads")


# ---- Namespace(kv_cache_groups=...) -----------------------------------------------------


def test_well_formed_groups_are_accepted():
    a = kvtier.Namespace("m", kv_cache_groups=[{"tokens_per_block": 16, "layer_names": ["l0", "l1"]}])
    b = kvtier.Namespace("m", kv_cache_groups=({"tokens_per_block": np.int64(16), "layer_names": ("l0", "l1")},))
    assert a.digest == b.digest


@pytest.mark.parametrize("groups, names", [
    ([{"tokens_per_block": 16}], ["kv_cache_groups[0].layer_names", "missing"]),
    ([{"layer_names": ["l0"]}], ["kv_cache_groups[0].tokens_per_block", "missing"]),
    ([{"tokens_per_block": "16", "layer_names": ["l0"]}], ["kv_cache_groups[0].tokens_per_block", "int"]),
    ([{"tokens_per_block": 0, "layer_names": ["l0"]}], ["kv_cache_groups[0].tokens_per_block"]),
    ([{"tokens_per_block": 2**64, "layer_names": ["l0"]}], ["kv_cache_groups[0].tokens_per_block"]),
    ([{"tokens_per_block": 16, "layer_names": "l0"}], ["kv_cache_groups[0].layer_names", "list"]),
    ([{"tokens_per_block": 16, "layer_names": [b"l0"]}], ["kv_cache_groups[0].layer_names[0]", "str"]),
    ([{"tokens_per_block": 16, "layer_names": ["l0"], "extra": 1}], ["kv_cache_groups[0]", "unknown key"]),
    ([16], ["kv_cache_groups[0]", "dict"]),
    (16, ["kv_cache_groups", "list"]),
    ({"tokens_per_block": 16, "layer_names": ["l0"]}, ["kv_cache_groups", "list"]),
])
def test_badly_shaped_groups_name_the_group(groups, names):
    refused(lambda: kvtier.Namespace("m", kv_cache_groups=groups), *names)


# ---- bytes hashes, str arguments --------------------------------------------------------


def test_chunk_keys_takes_bytes_hashes():
    h = bytes(range(32))
    assert kvtier.chunk_keys([h]) == [kvtier.make_key(h)]


def test_chunk_keys_refuses_str_hashes():
    refused(lambda: kvtier.chunk_keys(["a" * 32]), "block_hashes[0]", "bytes")
    refused(lambda: kvtier.chunk_keys([bytes(32), bytearray(32)]), "block_hashes[1]", "bytes")
    refused(lambda: kvtier.chunk_keys("ab"), "block_hashes[0]")


@pytest.mark.parametrize("arg", ["lora_name", "cache_salt", "seed"])
def test_block_hashes_refuses_bytes_for_str_arguments(arg):
    refused(lambda: kvtier.block_hashes(list(range(16)), **{arg: b"x"}), arg, "str")


def test_str_arguments_of_hashing_and_namespace_refuse_bytes():
    refused(lambda: kvtier.block_hashes(list(range(16)), mm_features=[(b"id", 0, 4)]), "mm_features[0]", "str")
    refused(lambda: kvtier.none_hash(seed=b"1"), "seed")
    refused(lambda: kvtier.Namespace(b"model"), "model_name")
    refused(lambda: kvtier.Namespace("m", dtype=b"bfloat16"), "dtype")
    assert kvtier.block_hashes(list(range(16)), lora_name="x", cache_salt="s", seed="1")
