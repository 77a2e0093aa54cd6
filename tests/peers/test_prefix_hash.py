"""The SHA-256 chained prefix hasher: framing, chaining and the pages a scheduler hashes."""

import hashlib
import struct

import pytest

from kvsim.kvmodel.cache.prefix_hash import (
    hashed_pages,
    page_digest,
    prefix_digests,
    prefix_hashes,
)


def test_empty_first_page_framing():
    # u32 prior length 0, no prior bytes, u32 token count 0.
    assert page_digest(b"", []) == hashlib.sha256(b"\0" * 8).digest()


def test_first_page_bytes_by_hand():
    tokens = [1, 2, 70000]
    framed = struct.pack("<I", 0) + struct.pack("<I", 3) + struct.pack("<3I", *tokens)
    assert page_digest(b"", tokens) == hashlib.sha256(framed).digest()


def test_chain_feeds_raw_prior_digest():
    first = page_digest(b"", [5] * 4)
    framed = struct.pack("<I", 32) + first + struct.pack("<I", 4) + struct.pack("<4I", *[6] * 4)
    assert prefix_digests([5] * 4 + [6] * 4, 4)[1] == hashlib.sha256(framed).digest()


def test_framing_separates_token_boundaries():
    # Without the count prefix, [1] + [] and [] + [1]-style splits could collide; with it they cannot.
    assert page_digest(b"", [1, 0]) != page_digest(b"", [1])
    assert page_digest(b"", [], [b"a"]) != page_digest(b"", [])


def test_only_whole_pages_and_prefix_property():
    tokens = list(range(10))
    assert len(prefix_hashes(tokens, 4)) == 2
    assert prefix_hashes(tokens[:8], 4) == prefix_hashes(tokens, 4)
    assert prefix_hashes(tokens, 4, pages=1) == prefix_hashes(tokens, 4)[:1]
    assert all(len(h) == 64 for h in prefix_hashes(tokens, 4))


def test_hashed_pages_leaves_the_last_token():
    assert [hashed_pages(n, 64) for n in (0, 1, 64, 65, 128, 129)] == [0, 0, 0, 1, 1, 2]


def test_out_of_range_rejected():
    with pytest.raises(ValueError):
        page_digest(b"", [-1])
    with pytest.raises(ValueError):
        page_digest(b"x", [1])


def test_numpy_tokens_hash_like_lists():
    np = pytest.importorskip("numpy")
    tokens = list(range(100, 300))
    assert prefix_hashes(np.asarray(tokens, dtype=np.int64), 64) == prefix_hashes(tokens, 64)
    with pytest.raises(ValueError):
        page_digest(b"", np.asarray([-1]))


def test_chain_digests_equal_page_by_page():
    from kvsim.kvmodel.cache.prefix_hash import chain_digests, token_bytes
    tokens = list(range(7, 7 + 50))
    whole = prefix_digests(tokens, 8)
    assert chain_digests(b"", token_bytes(tokens), 8, 6) == whole
    assert chain_digests(whole[1], token_bytes(tokens[16:]), 8, 4) == whole[2:]
    with pytest.raises(ValueError):
        chain_digests(b"", token_bytes(tokens), 8, 7)
