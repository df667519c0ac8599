"""kvtier.sglang never loads two pages of one batch into the same host memory.

SGLang's allocator gives each page of a batch its own slots; a caller that repeats them (or
overlaps two pages) would let one load overwrite the other's bytes before its checksum is
checked (loads read straight into the pool where bounce_loads is off, as on a local root), and a
valid block would be taken for a corrupt one and removed. Proves: batch_get_v1 with the same
host page twice answers False for both and removes no page file; a partly overlapping page
(one slot shifted, under page_first, where a page's slots are one contiguous piece) is refused
the same way; the same keys into distinct pages then load byte-exact. Skips with one line where
../shared/sglang or torch is absent.
"""

import os

import sglang_support as sg
from sglang_support import sglang_tree  # noqa: F401 (autouse: the harness on sys.path)

sg.skip_module_unless_ready()
import torch  # noqa: E402 (after the skip: absent torch is a one-line skip, not an error)
PS = 16


def test_pages_sharing_host_memory_answer_false_and_keep_their_files(tmp_path):
    p = sg.pool(pages=8, seed=3)
    b = sg.backend({"interface_v1": 1, "root_dir": str(tmp_path / "root")}, p)
    ks, w = sg.keys(2, "overlap"), p.alloc(2 * PS)
    sg.fill(p, ks, w)
    assert b.batch_set_v1(ks, w) == [True, True]
    files = [b._store.page_path(k) for k in ks]
    assert all(os.path.exists(f) for f in files)

    r = p.alloc(2 * PS)
    same = torch.cat([r[:PS], r[:PS]])
    assert b.batch_get_v1(ks, same) == [False, False]
    d = 1 if int(r[0]) + PS < 8 * PS else -1  # one slot over, still inside the pool
    shifted = torch.cat([r[:PS], r[:PS] + d])
    assert b.batch_get_v1(ks, shifted) == [False, False]
    assert all(os.path.exists(f) for f in files), "a valid page file was removed"

    assert b.batch_get_v1(ks, r) == [True, True]
    assert all(bool((p.page_u8(r[i * PS]) == sg.expected(p, k)).all()) for i, k in enumerate(ks))
    b.close()
