"""kvtier.sglang_page_keys against SGLang's own page keys.

Method: the kit's ``hicache_harness/page_hash.py`` compiles SGLang's pure-Python ``get_hash_str``
out of SGLang's source (sgl-project/sglang ``python/sglang/srt/mem_cache/utils.py`` at
commit df0dfbaa4529, the last with it in pure Python; a verbatim copy in ../shared/sglang); for seeded random token lists (ids across the whole
u32 range, page sizes 1..64, with and without a prior hash, partial trailing pages, EAGLE bigram
pairs) kvtier's keys must equal SGLang's. The tests that need the kit skip with one line where
it is absent; the argument checks and the seeding rule (the seed is the prior hash of page 0)
run everywhere. The seed is printed on failure; KVTIER_TEST_SEED replays it.
"""

import importlib.util
import os
import random

import pytest

import kvtier
from conftest import shared_dir

SEED = int(os.environ.get("KVTIER_TEST_SEED", random.randrange(2**32)))


@pytest.fixture(scope="module")
def sglang_page_hash():
    path = shared_dir() / "sglang" / "stubs" / "hicache_harness" / "page_hash.py"
    if not path.is_file():
        pytest.skip(f"SGLang's page hash needs {path} (the SGLang kit); absent here")
    spec = importlib.util.spec_from_file_location("kvtier_test_sglang_page_hash", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def random_case(rng: random.Random):
    page_size = rng.choice([1, 2, 3, 16, 32, 64])
    n = rng.randrange(0, 4 * page_size + 2)
    high = rng.choice([2**32 - 1, 151936, 2**16])
    tokens = [rng.randrange(0, high + 1) for _ in range(n)]
    prior = None
    if rng.random() < 0.4:
        prior = "%064x" % rng.getrandbits(256)
    return tokens, page_size, prior


def test_random_token_lists_match_sglang(sglang_page_hash):
    rng = random.Random(SEED)
    for i in range(300):
        tokens, page_size, prior = random_case(rng)
        want = sglang_page_hash.page_hashes(tokens, page_size, prior)
        got = kvtier.sglang_page_keys(tokens, page_size, prior_hash=prior)
        assert got == want, f"seed {SEED} case {i}: page_size {page_size} prior {prior} tokens {tokens}"


def test_bigram_pairs_match_sglang(sglang_page_hash):
    rng = random.Random(SEED + 1)
    for i in range(50):
        pairs = [(rng.randrange(2**32), rng.randrange(2**32)) for _ in range(rng.randrange(1, 20))]
        page_size = rng.choice([1, 2, 4])
        want = sglang_page_hash.page_hashes(pairs, page_size, None)
        assert kvtier.sglang_page_keys(pairs, page_size) == want, f"seed {SEED} case {i}: {pairs}"


def test_every_vector_case(sglang_page_hash):
    for case in sglang_page_hash.vectors()["cases"]:
        tokens = [tuple(t) if isinstance(t, list) else t for t in case["token_ids"]]
        got = kvtier.sglang_page_keys(tokens, case["page_size"], prior_hash=case["prior_hash"])
        assert got == case["page_keys"], case["name"]


def test_seed_heads_the_chain():
    tokens = list(range(40))
    seeded = kvtier.sglang_page_keys(tokens, 16, extra_key="lora-7", cache_salt="salt")
    seed = "ac2584d2a0a5e9542240ba73ed5686d803fe7730def4bb1a2be87ed79c1089b7"  # tests/unit/sglang_page_hash_test.cc
    assert seeded == kvtier.sglang_page_keys(tokens, 16, prior_hash=seed)
    plain = kvtier.sglang_page_keys(tokens, 16)
    assert seeded != plain
    assert kvtier.sglang_page_keys(tokens, 16, extra_key="") != plain
    assert kvtier.sglang_page_keys(tokens, 16, extra_key="") != kvtier.sglang_page_keys(tokens, 16, cache_salt="")


@pytest.mark.parametrize("call, names", [
    (lambda: kvtier.sglang_page_keys([1, 2**32], 2), "tokens[1]"),
    (lambda: kvtier.sglang_page_keys([-1], 2), "tokens[0]"),
    (lambda: kvtier.sglang_page_keys([1, (2, 3)], 2), "tokens[1]"),
    (lambda: kvtier.sglang_page_keys([(1, 2, 3)], 2), "tokens[0]"),
    (lambda: kvtier.sglang_page_keys([1], 0), "page_size"),
    (lambda: kvtier.sglang_page_keys([1], 2, prior_hash="xyz"), "prior_hash"),
    (lambda: kvtier.sglang_page_keys([1], 2, prior_hash="ab", extra_key="k"), "prior_hash"),
    (lambda: kvtier.sglang_page_keys([1], 2, extra_key=b"k"), "extra_key"),
])
def test_bad_arguments_name_themselves(call, names):
    with pytest.raises(kvtier.KvtierError, match=names.replace("[", r"\[").replace("]", r"\]")):
        call()
