"""kvtier's log in Python (kvtier/log.h through the binding).

Proves: a warning that a real kvtier call emits reaches the sink installed with set_log_sink (as
level and message strings), also when kvtier logs with the GIL released (VllmTier's open); None
restores stderr; use_python_logging routes messages to a ``logging`` logger; set_min_log_level
drops lower levels; a sink that raises does not break the call that logged.
"""

import logging
import mmap
import sys

import pytest

import kvtier

ROW = 8192


@pytest.fixture(autouse=True)
def reset_log():
    yield
    kvtier.set_log_sink(None)
    kvtier.set_min_log_level("info")


@pytest.fixture
def unseeded(monkeypatch):
    # Without PYTHONHASHSEED a non-cryptographic NONE_HASH seed is random, and kvtier warns.
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)


def test_sink_receives_a_warning(unseeded, capfd):
    got = []
    kvtier.set_log_sink(lambda level, message: got.append((level, message)))
    kvtier.none_hash("xxhash_cbor")
    assert len(got) == 1, got
    assert got[0][0] == "warning"
    assert "PYTHONHASHSEED is not set" in got[0][1]
    assert capfd.readouterr().err == ""


def test_none_restores_stderr(unseeded, capfd):
    got = []
    kvtier.set_log_sink(lambda level, message: got.append(message))
    kvtier.set_log_sink(None)
    kvtier.none_hash("xxhash_cbor")
    assert got == []
    assert "kvtier: warning: PYTHONHASHSEED is not set" in capfd.readouterr().err


def test_use_python_logging(unseeded, caplog):
    with caplog.at_level(logging.INFO, logger="kvtier"):
        kvtier.use_python_logging()
        kvtier.none_hash("xxhash_cbor")
    records = [r for r in caplog.records if r.name == "kvtier"]
    assert len(records) == 1
    assert records[0].levelno == logging.WARNING
    assert "PYTHONHASHSEED" in records[0].getMessage()


def test_min_level(unseeded):
    got = []
    kvtier.set_log_sink(lambda level, message: got.append(level))
    kvtier.set_min_log_level("error")
    kvtier.none_hash("xxhash_cbor")
    assert got == []
    with pytest.raises(kvtier.KvtierError):
        kvtier.set_min_log_level("loud")


def test_sink_that_raises_does_not_break_the_call(unseeded, monkeypatch):
    def sink(level, message):
        raise RuntimeError("sink broke")

    unraisable = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    kvtier.set_log_sink(sink)
    assert len(kvtier.none_hash("xxhash_cbor")) == 16
    assert len(unraisable) == 1 and isinstance(unraisable[0].exc_value, RuntimeError)


def test_sink_called_while_kvtier_runs_without_the_gil(tmp_path):
    # io_uring refuses to register file-backed memory (EFAULT): VllmTier's open, which runs
    # with the GIL released, warns that the rows are not registered.
    got = []
    kvtier.set_log_sink(lambda level, message: got.append((level, message)))
    ns = kvtier.Namespace("kvtier-test/log", kv_cache_groups=[{"tokens_per_block": 16, "layer_names": ["l0"]}])
    with open(tmp_path / "rows", "w+b") as f:
        f.truncate(4 * ROW)
        rows = mmap.mmap(f.fileno(), 4 * ROW)
        tier = kvtier.VllmTier(ns, memoryview(rows), ROW, {"root_dir": str(tmp_path / "root")})
        backend = tier.backend
        tier.shutdown()
    if backend != "io_uring":
        pytest.skip(f"backend {backend}: no buffer registration to refuse")
    assert any(level == "warning" and "not registered with io_uring" in message for level, message in got), got
