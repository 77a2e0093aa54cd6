"""Codecs: known answers from a scalar reference, exact bit patterns, round-trip bounds, plane schema."""

from __future__ import annotations

import gpu_scalar_ref as ref
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvsim.gpu import codecs as C
from kvsim.gpu import formats as F
from kvsim.gpu.hadamard import hadamard_matrix, rotate

SETTINGS = settings(max_examples=30, deadline=None)
BF16_MAX = float(np.float32(F.to_bf16(np.float32(3.3895e38)).astype(np.float32)))


@st.composite
def rows(draw, big: float = BF16_MAX):
    """One 256-wide BF16-representable FP32 row exercising the codec corners."""
    kind = draw(st.sampled_from(["random", "zeros", "constant", "extremes", "tiny", "ties", "sparse", "wide"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if kind == "random":
        exp = draw(st.integers(-20, 20))
        x = rng.standard_normal(256) * 2.0**exp
    elif kind == "zeros":
        x = np.where(rng.random(256) < 0.5, -0.0, 0.0)
    elif kind == "constant":
        x = np.full(256, draw(st.sampled_from([1.0, -3.5, 448.0, 6.0, 2.0**-30, -big])))
    elif kind == "extremes":
        x = rng.standard_normal(256)
        x[rng.integers(0, 256, 4)] = big
        x[rng.integers(0, 256, 4)] = -big
    elif kind == "tiny":  # below the 2^-24 (FP8) and 2^-9 (NVFP4) scale clamps
        x = rng.standard_normal(256) * 2.0 ** draw(st.integers(-60, -12))
    elif kind == "wide":  # wide dynamic range inside a row: FP32 butterfly sums round, order matters
        x = rng.standard_normal(256) * 2.0 ** rng.integers(-20, 10, 256)
    elif kind == "ties":  # absmax pins scales to 1; halves / midpoints force RNE ties
        x = rng.integers(-12, 13, 256) * 0.25 + rng.choice([0.0, 0.5, 0.0625, 0.1875], 256)
        x[0] = draw(st.sampled_from([127.0, 448.0, 6.0]))
    else:
        x = np.zeros(256)
        idx = rng.integers(0, 256, 5)
        x[idx] = rng.standard_normal(5) * 100
    return F.round_to_bf16(x.astype(np.float32))


def _codec_ref(codec: str, x: np.ndarray):
    fn = {"int8_g64": ref.int8_g64, "fp8_row256": ref.fp8_row256, "nvfp4_g16": ref.nvfp4_g16}[codec]
    return fn([float(v) for v in x])


def _as_bits(codec: str, codes, scales):
    if codec == "int8_g64":
        return [int(v) for v in codes.view(np.int8)], [int(v) for v in scales.view(np.uint16)]
    if codec == "fp8_row256":
        return [int(v) for v in codes.view(np.uint8)], [int(v) for v in scales.view(np.uint16)]
    return [int(v) for v in codes], [int(v) for v in scales]


@pytest.mark.parametrize("codec", ["int8_g64", "fp8_row256", "nvfp4_g16"])
@SETTINGS
@given(x=rows())
def test_codec_matches_scalar_reference(codec, x):
    codes, scales = C.encode_codec(codec, x)
    assert _as_bits(codec, codes, scales) == _codec_ref(codec, x)


@pytest.mark.parametrize("profile", C.PROFILE_NAMES)
@pytest.mark.parametrize("part", C.PARTS)
@settings(max_examples=8, deadline=None)
@given(x=rows(big=2.0**100))
def test_profile_encode_matches_scalar_reference_with_rotation(profile, part, x):
    prof = C.get_profile(profile)
    codes, scales = C.encode(profile, part, x)
    xs = [float(v) for v in x]
    if prof.rotates(part):
        xs = ref.rotate(xs)
    codec = prof.codec(part).name
    if codec == "bf16":
        assert [int(v) for v in codes.view(np.uint16)] == [ref.bf16_bits(v) for v in xs]
        assert scales is None
    else:
        assert _as_bits(codec, codes, scales) == _codec_ref(codec, np.array(xs, dtype=np.float32))


def test_known_answers_written_by_hand():
    # INT8: absmax 127 -> scale FP16 1.0 (0x3C00); rint ties to even: 2.5 -> 2, -0.5 -> 0, 1.5 -> 2.
    x = np.zeros(256, np.float32)
    x[:5] = [127.0, 2.5, -0.5, 1.5, -127.0]
    codes, scales = C.encode_codec("int8_g64", x)
    assert codes[:5].tolist() == [127, 2, 0, 2, -127]
    assert scales.view(np.uint16).tolist() == [0x3C00, 0, 0, 0]
    # FP8: absmax 448 -> scale 1.0; 1.0625 is the midpoint of 1.0 (0x38) and 1.125 (0x39) -> even 0x38;
    # 1.1875 is the midpoint of 1.125 (0x39) and 1.25 (0x3A) -> 0x3A; 464 saturates to 448 (0x7E).
    x = np.zeros(256, np.float32)
    x[:4] = [448.0, 1.0625, -1.1875, 2.0**-9]
    codes, scales = C.encode_codec("fp8_row256", x)
    assert codes.view(np.uint8)[:4].tolist() == [0x7E, 0x38, 0xBA, 0x01]
    assert scales.view(np.uint16).tolist() == [0x3C00]
    # FP8 clamp: absmax 2^-30 -> a/448 < 2^-24 -> scale 2^-24 (FP16 0x0001).
    codes, scales = C.encode_codec("fp8_row256", np.full(256, 2.0**-30, np.float32))
    assert scales.view(np.uint16).tolist() == [0x0001]
    # NVFP4: group absmax 6 -> a/6 = 1 -> UE4M3 0x38; 0.25 ties to 0, 0.75 ties to 1.0, -5 ties to -4;
    # low nibble = even dimension.
    x = np.zeros(256, np.float32)
    x[:4] = [6.0, 0.25, 0.75, -5.0]
    codes, scales = C.encode_codec("nvfp4_g16", x)
    assert scales[0] == 0x38 and scales[1:].tolist() == [0] * 15
    assert codes[:2].tolist() == [0x0 << 4 | 0x7, 0xE << 4 | 0x2]
    # NVFP4 clamp: absmax 2^-20 -> a/6 < 2^-9 -> scale byte 0x01 (2^-9).
    codes, scales = C.encode_codec("nvfp4_g16", np.full(256, 2.0**-20, np.float32))
    assert scales.tolist() == [0x01] * 16 and codes.tolist() == [0] * 128


@pytest.mark.parametrize("codec", ["int8_g64", "fp8_row256", "nvfp4_g16"])
def test_all_zero_input_gives_zero_scales_and_codes(codec):
    x = np.zeros((3, 256), np.float32)
    x[1] = -0.0
    codes, scales = C.encode_codec(codec, x)
    assert not codes.view(np.uint8).any() and not scales.view(np.uint8).any()


@SETTINGS
@given(x=rows(big=2.0**20))
def test_round_trip_error_bounds(x):
    # (codec, relative half-step of the code format, absolute half-step near zero in scale units,
    #  smallest normal scale: below it the scale is coarse or flushes to zero, bounded by |x| only;
    #  largest scale: NVFP4 has no second-level scale, so a group beyond 6 * 448 saturates at +-2688)
    for codec, rel, sub, normal, top in (("int8_g64", 0.0, 0.5, 2.0**-14, np.inf),
                                         ("fp8_row256", 2.0**-4, 2.0**-10, 2.0**-14, np.inf),
                                         ("nvfp4_g16", 0.25, 0.25, 2.0**-6, 448.0)):
        codes, scales = C.encode_codec(codec, x)
        got = C.decode_codec(codec, codes, scales).astype(np.float64)
        s = C.decode_codec(codec, _unit_codes(codec, codes), scales).astype(np.float64)
        ax = np.abs(x.astype(np.float64))
        bound = np.where(s >= normal, rel * ax, ax) + sub * s
        bound = np.where(s >= top, np.maximum(bound, ax - 6 * top), bound)
        err = np.abs(got - x.astype(np.float64))
        assert np.all(err <= bound * (1 + 1e-6)), codec


def _unit_codes(codec, codes):
    """Codes whose decoded value is exactly the scale of each position (code value 1)."""
    if codec == "int8_g64":
        return np.ones_like(codes)
    if codec == "fp8_row256":
        return np.full(codes.shape, 0x38, np.uint8).view(F.E4M3FN)
    return np.full(codes.shape, 0x22, np.uint8)  # nibbles 2 (= 1.0) in both halves


@pytest.mark.parametrize("profile", C.PROFILE_NAMES)
def test_decode_of_encode_is_close_and_rotated(profile):
    rng = np.random.default_rng(7)
    x = F.round_to_bf16(rng.standard_normal((5, 256)).astype(np.float32))
    for part in C.PARTS:
        codes, scales = C.encode(profile, part, x)
        got = C.decode(profile, part, codes, scales)
        target = rotate(x) if C.get_profile(profile).rotates(part) else x
        rel = np.linalg.norm(got - target) / np.linalg.norm(target)
        assert rel < 0.12, (profile, part, rel)


def test_hadamard_butterfly_equals_matrix_product_and_is_involution():
    rng = np.random.default_rng(3)
    x = F.round_to_bf16(rng.standard_normal((64, 256)).astype(np.float32) * 8)
    h = hadamard_matrix(256)
    assert np.array_equal(h, h.T) and np.allclose(h @ h, np.eye(256), atol=1e-12)
    exact = x.astype(np.float64) @ h.T
    got = rotate(x)
    assert got.dtype == np.float32
    # 8 FP32 stages: each element carries at most ~8 half-ulps of the largest partial sum.
    scale = np.abs(x).sum(axis=1, keepdims=True) / 16
    assert np.all(np.abs(got - exact) <= 8 * 2.0**-24 * scale)
    back = rotate(got)
    assert np.all(np.abs(back - x) <= 16 * 2.0**-24 * np.abs(x).sum(axis=1, keepdims=True) / 16)
    # A basis vector rotates to the first row of H/16 exactly: all +-1/16.
    e0 = np.zeros(256, np.float32)
    e0[0] = 1
    assert np.all(rotate(e0) == np.float32(1 / 16))


@settings(max_examples=10, deadline=None)
@given(x=rows(big=2.0**60))
def test_hadamard_butterfly_bits_match_scalar_stage_order(x):
    assert [float(v) for v in rotate(x)] == ref.rotate([float(v) for v in x])


def test_plane_schema_bytes_and_order():
    expected = {"bf16": 1024, "int8": 528, "fp8": 516, "nvfp4": 288, "k8v4": 402}
    assert C.BYTES_PER_TOKEN_PER_HEAD == expected
    assert [p.name for p in C.PLANE_SCHEMA["k8v4"]] == ["k_code", "v_code", "k_scale", "v_scale"]
    assert [(p.dtype_name, p.extent) for p in C.PLANE_SCHEMA["k8v4"]] == [
        ("e4m3fn", 256), ("u8", 128), ("f16", 1), ("u8", 16)]
    assert [(p.dtype_name, p.extent) for p in C.PLANE_SCHEMA["bf16"]] == [("bf16", 256), ("bf16", 256)]
    assert [(p.dtype_name, p.extent) for p in C.PLANE_SCHEMA["int8"]] == [
        ("i8", 256), ("i8", 256), ("f16", 4), ("f16", 4)]
    assert C.bytes_per_token_per_head("bf16", 128) == 512


@pytest.mark.parametrize("profile", C.PROFILE_NAMES)
def test_encode_output_matches_schema(profile):
    x = np.ones((2, 3, 256), np.float32)
    specs = {p.name: p for p in C.PLANE_SCHEMA[profile]}
    for part in C.PARTS:
        codes, scales = C.encode(profile, part, x)
        assert codes.dtype == specs[f"{part}_code"].dtype and codes.shape == (2, 3, specs[f"{part}_code"].extent)
        if f"{part}_scale" in specs:
            sp = specs[f"{part}_scale"]
            assert scales.dtype == sp.dtype and scales.shape == (2, 3, sp.extent)
        else:
            assert scales is None


def test_bad_arguments_are_rejected():
    with pytest.raises(ValueError, match="unknown KV storage profile"):
        C.encode("fp16", "k", np.zeros(256, np.float32))
    with pytest.raises(ValueError, match="part must be"):
        C.encode("bf16", "q", np.zeros(256, np.float32))
    with pytest.raises(ValueError, match="head_dim 256 only"):
        C.encode("int8", "v", np.zeros(128, np.float32))
