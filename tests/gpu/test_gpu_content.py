"""Content from keys (deterministic, BF16, structured) and the bit-exact row check a lockstep driver uses."""

from __future__ import annotations

import numpy as np
import pytest

from kvsim.gpu.content import append_content, content_kv, expected_stored, splitmix64, stored_mismatches
from kvsim.gpu.formats import round_to_bf16
from kvsim.gpu.planes import PagedKVPool
from kvsim.gpu.readback import read_view


def test_content_is_deterministic_bf16_and_keyed():
    keys = np.arange(500, dtype=np.uint64) * 977 + 3
    a = content_kv(keys, 1, "k", 2, 256)
    assert a.shape == (500, 2, 256) and a.dtype == np.float32
    assert np.array_equal(a, content_kv(keys, 1, "k", 2, 256))
    assert np.array_equal(a, round_to_bf16(a))
    assert np.array_equal(a[7], content_kv(keys[7:8], 1, "k", 2, 256)[0])  # per-token, order-free
    assert not np.array_equal(a, content_kv(keys, 2, "k", 2, 256))
    assert not np.array_equal(a, content_kv(keys, 1, "v", 2, 256))
    assert not np.array_equal(a[:250], a[250:])
    zero_tokens = ~a.reshape(500, -1).any(axis=1)
    assert 0 < zero_tokens.sum() < 30  # about one token in 61 is all zeros
    assert np.abs(a).max() > 8 and np.abs(a).max() < 64  # outlier channels, moderate magnitude


def test_splitmix64_known_values():
    # splitmix64 with state 0: the first outputs of the reference generator
    assert int(splitmix64(np.array([0], np.uint64))[0]) == 0xE220A8397B1DCDAF
    assert int(splitmix64(np.array([0x9E3779B97F4A7C15], np.uint64))[0]) == 0x6E789E6AA1B965F4


def test_stored_mismatches_reports_corruption_and_holes():
    pool = PagedKVPool("nvfp4", 2, 2, 256, num_pages=4, rows=1, logical_pages=3)
    pool.publish(0, 0, [2, 0, 3])
    keys = np.arange(150, dtype=np.uint64) + 40
    append_content(pool, 0, np.arange(150), keys)
    assert stored_mismatches(pool, 0, 150, keys) == []
    want = expected_stored("nvfp4", 1, keys, 2, 256)
    got = read_view(pool.layer_view(1, 0), 150)
    assert all(np.array_equal(got[n].view(np.uint8), want[n].view(np.uint8)) for n in want)
    pool.planes[1]["v_scale"][0, 1, 70 - 64, 3] ^= 1  # position 70 lives in page 0 (logical block 1)
    assert stored_mismatches(pool, 0, 150, keys) == ["layer 1 v_scale: position 70 differs"]
    other = keys.copy()
    other[5] += 1
    assert "layer 0 k_code: position 5 differs" in stored_mismatches(pool, 0, 150, other)
    pool.publish(0, 2, [-1])
    assert stored_mismatches(pool, 0, 150, keys)[0].startswith("layer 0: hole at logical block 2")
    assert stored_mismatches(pool, 0, 128, keys[:128]) == ["layer 1 v_scale: position 70 differs"]
    with pytest.raises(ValueError, match="one content key per position"):
        stored_mismatches(pool, 0, 10, keys)
