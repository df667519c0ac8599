"""kvtier.sglang passes SGLang's conformance selftest on the zero-copy path.

Runs the kit's ../shared/sglang/selftest_backend.py (SGLang's real StorageBackendFactory,
sgl-project/sglang ``python/sglang/srt/mem_cache/storage/backend_factory.py`` at commit
d315eb725044, a mock host pool
that is SGLang's statement for statement, the controller's call pattern) against
``kvtier.sglang.KvtierHiCacheStorage`` loaded by the ``dynamic`` backend with ``--path v1``
(batch_get_v1 / batch_set_v1), in a fresh interpreter. Every counted check (c01-c16) must PASS,
none may FAIL or be SKIPped (a layout refused at attach would be a SKIP), and the summary must
say all of them pass; on failure the whole output is shown. The generic path is
test_sglang_selftest_generic.py (one ctest test each, to keep each under a minute). Skips with
one line where ../shared/sglang or torch is absent.
"""

import sglang_support as sg

sg.skip_module_unless_ready()


def test_selftest_v1_passes_every_check(tmp_path_factory, tmp_path):
    sg.run_selftest("v1", tmp_path_factory, tmp_path)
