"""kvtier.sglang passes SGLang's conformance selftest on the generic tensor path.

As test_sglang_selftest.py, with ``--path generic`` (batch_get / batch_set with SGLang's flat page
tensors, what a deployment without ``interface_v1`` uses): every counted check (c01-c16) must
PASS. Skips with one line where ../shared/sglang or torch is absent.
"""

import sglang_support as sg

sg.skip_module_unless_ready()


def test_selftest_generic_passes_every_check(tmp_path_factory, tmp_path):
    sg.run_selftest("generic", tmp_path_factory, tmp_path)
