"""The device codec source checked on the CPU, where a CUDA toolkit (nvcc) is installed.

* The same ``__host__ __device__`` codec text the kernels use is compiled into a host library and must
  encode bit for bit like :mod:`gpu.codecs` for every profile and part.
* Its narrow-float conversions, and ml_dtypes + SATFINITE clipping in :mod:`gpu.formats`, must equal
  CUDA's own conversions (``__float2half_rn``, ``__nv_cvt_float_to_fp8`` SATFINITE E4M3,
  ``__nv_cvt_float_to_fp4`` E2M1 RN) over every BF16 value and random FP32 values.
* The attention and append kernels compile to PTX for sm_90 for every codec pairing and both orders.

Skips where nvcc is missing (no GPU is needed).
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess

import numpy as np
import pytest

from kvsim.gpu import formats as F
from kvsim.gpu.codecs import PARTS, PROFILE_NAMES, encode, get_profile, plane_schema
from kvsim.gpu.cuda_source import CODEC_IDS, CODEC_SOURCE, kernel_source
from kvsim.gpu.hadamard import rotate

NVCC = shutil.which("nvcc")
pytestmark = pytest.mark.skipif(NVCC is None, reason="nvcc (CUDA toolkit) not installed")

HARNESS = r"""
#include <cstring>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#if __has_include(<cuda_fp4.h>)
#include <cuda_fp4.h>
#define KVH_FP4 1
#else
#define KVH_FP4 0
#endif
""" + CODEC_SOURCE + r"""
extern "C" int kvh_has_fp4() { return KVH_FP4; }

extern "C" void kvh_official(const float* x, int n, unsigned short* f16, unsigned char* e4m3, unsigned char* e2m1) {
  for (int i = 0; i < n; ++i) {
    __half h = __float2half_rn(x[i]);
    std::memcpy(&f16[i], &h, 2);
    e4m3[i] = __nv_cvt_float_to_fp8(x[i], __NV_SATFINITE, __NV_E4M3);
#if KVH_FP4
    e2m1[i] = __nv_cvt_float_to_fp4(x[i], __NV_E2M1, cudaRoundNearest);
#else
    e2m1[i] = 0;
#endif
  }
}

extern "C" void kvh_manual(const float* x, int n, unsigned short* f16, unsigned char* e4m3, unsigned char* e2m1) {
  for (int i = 0; i < n; ++i) {
    f16[i] = kv_f32_to_f16(x[i]);
    e4m3[i] = kv_f32_to_e4m3(x[i]);
    e2m1[i] = (unsigned char)kv_f32_to_e2m1(x[i]);
  }
}

extern "C" void kvh_decoders(float* f16, float* e4m3, float* e2m1) {
  for (int i = 0; i < 65536; ++i) f16[i] = kv_f16_to_f32((unsigned short)i);
  for (int i = 0; i < 256; ++i) e4m3[i] = kv_e4m3_to_f32((unsigned int)i);
  for (int i = 0; i < 16; ++i) e2m1[i] = kv_e2m1_to_f32((unsigned int)i);
}

extern "C" void kvh_rotate(float* x, int nvec) {
  for (int v = 0; v < nvec; ++v) kv_hadamard256(x + (long)v * 256);
}

extern "C" void kvh_encode(const float* x, int nvec, int d, int codec, int rot, unsigned char* code,
                           unsigned char* scale) {
  int cb = kv_code_bytes(codec, d), sb = kv_scale_bytes(codec, d);
  for (int v = 0; v < nvec; ++v)
    kv_prepare_and_encode(x + (long)v * d, d, codec, rot, code + (long)v * cb, scale + (long)v * sb);
}
"""


def _ptr(a: np.ndarray):
    return a.ctypes.data_as(ctypes.c_void_p)


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    work = tmp_path_factory.mktemp("kvh")
    src = work / "harness.cu"
    src.write_text(HARNESS)
    lib = work / "libkvh.so"
    subprocess.run([NVCC, "-shared", "-O2", "-Xcompiler", "-fPIC", "-Xcompiler", "-ffp-contract=off",
                    "-o", str(lib), str(src)], check=True, capture_output=True, text=True)
    return ctypes.CDLL(str(lib))


def _probe_values() -> np.ndarray:
    bf16 = (np.arange(65536, dtype=np.uint32) << 16).view(np.float32)
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 2**32, 300_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    # dense sweeps around the FP16 / E4M3 / E2M1 subnormal and saturation boundaries, midpoints included
    sweeps = [np.linspace(-8, 8, 20_001), np.linspace(-500, 500, 40_001), np.linspace(-2**-5, 2**-5, 40_001),
              np.linspace(65_000, 66_000, 2_001), np.linspace(-2**-13, 2**-13, 40_001)]
    x = np.concatenate([bf16, bits] + [s.astype(np.float32) for s in sweeps])
    return np.ascontiguousarray(x[np.isfinite(x)], dtype=np.float32)


def test_conversions_equal_cuda_and_ml_dtypes(harness):
    x = _probe_values()
    n = x.size
    outs = {}
    for name in ("official", "manual"):
        f16 = np.empty(n, np.uint16)
        e4 = np.empty(n, np.uint8)
        e2 = np.empty(n, np.uint8)
        getattr(harness, f"kvh_{name}")(_ptr(x), ctypes.c_int(n), _ptr(f16), _ptr(e4), _ptr(e2))
        outs[name] = (f16, e4, e2)
    ours = (F.to_f16(x).view(np.uint16), F.to_e4m3fn_satfinite(x).view(np.uint8), F.to_e2m1_nibbles(x))
    for i, fmt in enumerate(("fp16", "e4m3fn", "e2m1")):
        if fmt == "e2m1" and not harness.kvh_has_fp4():
            continue
        official, manual, numpy_side = outs["official"][i], outs["manual"][i], ours[i]
        bad = np.flatnonzero((official != manual) | (official != numpy_side))
        assert bad.size == 0, (fmt, x[bad[:5]], official[bad[:5]], manual[bad[:5]], numpy_side[bad[:5]])


def test_device_decoders_equal_tables(harness):
    f16 = np.empty(65536, np.float32)
    e4 = np.empty(256, np.float32)
    e2 = np.empty(16, np.float32)
    harness.kvh_decoders(_ptr(f16), _ptr(e4), _ptr(e2))
    want16 = np.arange(65536, dtype=np.uint16).view(np.float16).astype(np.float32)
    finite = np.isfinite(want16)
    assert np.array_equal(f16[finite].view(np.uint32), want16[finite].view(np.uint32))
    codes = np.arange(256)
    ok = (codes & 0x7F) != 0x7F  # E4M3FN NaN encodings are never produced by the codec
    assert np.array_equal(e4[ok].view(np.uint32), F.E4M3_TABLE[ok].view(np.uint32))
    assert np.array_equal(e2.view(np.uint32), F.E2M1_TABLE.view(np.uint32))


def _rows(d: int) -> np.ndarray:
    rng = np.random.default_rng(1)
    kinds = [rng.standard_normal((40, d)) * 2.0 ** rng.integers(-30, 30, (40, 1)),
             np.zeros((2, d)), np.full((2, d), 448.0), np.full((2, d), -3.5),
             rng.standard_normal((8, d)) * 2.0**-40,
             rng.integers(-12, 13, (8, d)) * 0.25 + rng.choice([0.0, 0.5, 0.0625], (8, d)),
             np.where(rng.random((8, d)) < 0.9, 0.0, rng.standard_normal((8, d)) * 1e4),
             # wide dynamic range inside a row: FP32 partial sums round, so the butterfly order shows
             rng.standard_normal((16, d)) * 2.0 ** rng.integers(-20, 10, (16, d))]
    x = np.concatenate(kinds).astype(np.float32)
    x[-8:, 0] = 127.0
    return np.ascontiguousarray(x)


def test_device_butterfly_bits_equal_numpy_rotation(harness):
    """FP32 bit-exact: quantised codes rarely expose the stage order, the rotated values do."""
    x = F.round_to_bf16(_rows(256))
    y = x.copy()
    harness.kvh_rotate(_ptr(y), ctypes.c_int(x.shape[0]))
    assert np.array_equal(y.view(np.uint32), rotate(x).view(np.uint32))


@pytest.mark.parametrize("profile", PROFILE_NAMES)
def test_device_codec_source_encodes_like_numpy(harness, profile):
    prof = get_profile(profile)
    x = _rows(256)
    specs = {s.name: s for s in plane_schema(profile)}
    for part in PARTS:
        codec = prof.codec(part).name
        code_spec = specs[f"{part}_code"]
        scale_spec = specs.get(f"{part}_scale")
        code = np.zeros((x.shape[0], code_spec.bytes_per_token_per_head), np.uint8)
        scale = np.zeros((x.shape[0], max(1, scale_spec.bytes_per_token_per_head if scale_spec else 0)), np.uint8)
        harness.kvh_encode(_ptr(x), ctypes.c_int(x.shape[0]), ctypes.c_int(256), ctypes.c_int(CODEC_IDS[codec]),
                           ctypes.c_int(int(prof.rotates(part))), _ptr(code), _ptr(scale))
        want_codes, want_scales = encode(profile, part, x)
        assert np.array_equal(code, want_codes.view(np.uint8).reshape(x.shape[0], -1)), (profile, part)
        if want_scales is not None:
            assert np.array_equal(scale, want_scales.view(np.uint8).reshape(x.shape[0], -1)), (profile, part)


def test_device_codec_source_bf16_d128(harness):
    x = _rows(128)
    code = np.zeros((x.shape[0], 256), np.uint8)
    scale = np.zeros(1, np.uint8)
    harness.kvh_encode(_ptr(x), ctypes.c_int(x.shape[0]), ctypes.c_int(128), ctypes.c_int(0), ctypes.c_int(0),
                       _ptr(code), _ptr(scale))
    assert np.array_equal(code, encode("bf16", "v", x)[0].view(np.uint8).reshape(x.shape[0], -1))


@pytest.mark.parametrize("k_codec, v_codec, order, head_dim", [
    ("bf16", "bf16", 0, 256), ("int8_g64", "int8_g64", 1, 256), ("fp8_row256", "fp8_row256", 0, 256),
    ("nvfp4_g16", "nvfp4_g16", 1, 256), ("fp8_row256", "nvfp4_g16", 0, 256), ("bf16", "bf16", 1, 128)])
def test_kernels_compile_to_ptx(tmp_path, k_codec, v_codec, order, head_dim):
    src = tmp_path / "k.cu"
    src.write_text(kernel_source())
    rot = int(k_codec != "bf16")
    defs = [f"-DKV_HEAD_DIM={head_dim}", f"-DKV_KCODEC={CODEC_IDS[k_codec]}", f"-DKV_VCODEC={CODEC_IDS[v_codec]}",
            f"-DKV_KROT={rot}", f"-DKV_VROT={int(v_codec == 'nvfp4_g16')}", f"-DKV_ORDER={order}"]
    res = subprocess.run([NVCC, "-arch=sm_90", "-std=c++14", "-ptx", "-o", str(tmp_path / "k.ptx"), str(src), *defs],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    ptx = (tmp_path / "k.ptx").read_text()
    assert ".entry kv_paged_attention" in ptx and ".entry kv_append_tokens" in ptx
