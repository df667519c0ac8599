"""Helpers of the sealed-namespace tests (test_sealed_attacks.py, test_sealed_tools.py)."""

import time

import kvtier


def namespace(model):
    """A one-layer vLLM namespace of `model` (16-token blocks)."""
    return kvtier.Namespace(model, kv_cache_groups=[{"tokens_per_block": 16, "layer_names": ["l0"]}])


def run_job(tier, job, timeout_s=30):
    """The result of `job` on `tier`, waited for (an AssertionError after timeout_s)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for r in tier.wait(1000):
            if r.job_id == job:
                return r
    raise AssertionError(f"job {job} did not finish")
