"""The persistent KV codecs of the five storage profiles, bit-exact, plus their plane schema.

Profiles (the store contract's byte table, search "Page-major 地址为"; exact codec: its "Exact persistent
codec 由 kv_cache_append.h 定义"): ``bf16``, ``int8`` (INT8-G64), ``fp8`` (FP8-E4M3FN-row256), ``nvfp4``
(NVFP4-G16), ``k8v4`` (K fp8-row256, V nvfp4-G16). Bytes per token per KV head at D = 256: 1024, 528, 516,
288, 402 (K8V4 is asymmetric; every byte figure comes from :data:`PLANE_SCHEMA`, never ``2 * vector``).

The ``bf16`` profile stores BF16 K **and BF16 V**: the store contract's table says "BF16 | 512 B | 512 B";
an older engine stored FP16 V, and the seed wins over that implementation.

Per vector (input: the BF16 value widened to FP32; a float32 input is first rounded to BF16, a no-op
for BF16-representable values):

* rotation R = H256/16 (:mod:`gpu.hadamard`) on K for int8/fp8, on K and V for nvfp4/k8v4, before the
  absmax/scale step; :func:`decode` returns stored-domain (still rotated) values.
* INT8-G64: ``s = FP32(FP16_RNE(a/127))``, ``code = clamp(rint_even(x * (1/s)), -127, 127)``, 0 when s == 0.
* FP8-row256: ``a == 0`` -> zero scale and codes; else ``s = FP32(FP16_RNE(clamp(a/448, 2^-24, 65504)))``,
  ``code = E4M3FN_RNE_SATFINITE(x * (1/s))``.
* NVFP4-G16: ``a == 0`` -> zero scale byte and codes; else ``byte = UE4M3_RNE_SATFINITE(clamp(a/6, 2^-9,
  448))`` (true FP32 division), ``code = E2M1_RNE_SATFINITE(x / s)`` (true division), low nibble = even
  dimension.

Must not know about pages, tables, pools or the store model: only vectors.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvsim.gpu import formats as F
from kvsim.gpu.hadamard import rotate

PARTS = ("k", "v")
ROTATED_DIM = 256


@dataclass(frozen=True)
class VectorCodec:
    """One persistent vector codec: code plane and optional scale plane, per head_dim D."""

    name: str
    code_dtype: np.dtype
    code_extent_divisor: int  # code X = D // divisor
    scale_dtype: np.dtype | None
    scale_group: int  # values per scale (scale X = D // group); 0 when there is no scale

    def code_extent(self, head_dim: int) -> int:
        return head_dim // self.code_extent_divisor

    def scale_extent(self, head_dim: int) -> int:
        return head_dim // self.scale_group if self.scale_dtype is not None else 0


CODECS = {
    "bf16": VectorCodec("bf16", F.BF16, 1, None, 0),
    "int8_g64": VectorCodec("int8_g64", np.dtype(np.int8), 1, np.dtype(np.float16), 64),
    "fp8_row256": VectorCodec("fp8_row256", F.E4M3FN, 1, np.dtype(np.float16), 256),
    "nvfp4_g16": VectorCodec("nvfp4_g16", np.dtype(np.uint8), 2, np.dtype(np.uint8), 16),
}


@dataclass(frozen=True)
class Profile:
    """A KV storage profile: the codec and rotation of each part (engine enum name in ``storage``)."""

    name: str
    storage: str
    k_codec: str
    v_codec: str
    rotate_k: bool
    rotate_v: bool

    def codec(self, part: str) -> VectorCodec:
        return CODECS[self.k_codec if _part(part) == "k" else self.v_codec]

    def rotates(self, part: str) -> bool:
        return self.rotate_k if _part(part) == "k" else self.rotate_v


PROFILES = {
    "bf16": Profile("bf16", "BFloat16", "bf16", "bf16", False, False),
    "int8": Profile("int8", "Int8Group64", "int8_g64", "int8_g64", True, False),
    "fp8": Profile("fp8", "Fp8E4M3Row256", "fp8_row256", "fp8_row256", True, False),
    "nvfp4": Profile("nvfp4", "Nvfp4Group16", "nvfp4_g16", "nvfp4_g16", True, True),
    "k8v4": Profile("k8v4", "Fp8KeyNvfp4Value", "fp8_row256", "nvfp4_g16", True, True),
}
PROFILE_NAMES = tuple(PROFILES)


def _part(part: str) -> str:
    if part not in PARTS:
        raise ValueError(f"part must be 'k' or 'v', got {part!r}")
    return part


def get_profile(profile: str | Profile) -> Profile:
    """Profile by name (``bf16|int8|fp8|nvfp4|k8v4``); ValueError for anything else."""
    if isinstance(profile, Profile):
        return profile
    try:
        return PROFILES[profile]
    except KeyError:
        raise ValueError(f"unknown KV storage profile {profile!r}; expected one of {PROFILE_NAMES}") from None


def check_head_dim(profile: str | Profile, head_dim: int) -> None:
    """Quantised/rotated profiles are D = 256 only; BF16 accepts any positive D (e.g. a D128 draft pool)."""
    prof = get_profile(profile)
    if prof.name == "bf16":
        if head_dim < 1:
            raise ValueError(f"head_dim must be positive, got {head_dim}")
    elif head_dim != ROTATED_DIM:
        raise ValueError(f"profile {prof.name!r} is defined for head_dim {ROTATED_DIM} only, got {head_dim}")


# ----------------------------------------------------------------------------------------------------
# Plane schema


@dataclass(frozen=True)
class PlaneSpec:
    """One plane of one layer: which part, code or scale, element dtype, leading extent X.

    ``dtype`` is the logical element type (ml_dtypes for BF16/E4M3FN); ``device_dtype`` is the
    bit-identical integer type a device array uses where the array library lacks the logical type.
    """

    name: str  # "k_code" | "v_code" | "k_scale" | "v_scale"
    part: str
    role: str  # "code" | "scale"
    dtype: np.dtype
    extent: int
    codec: str

    @property
    def dtype_name(self) -> str:
        return _DTYPE_NAMES[self.dtype]

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def bytes_per_token_per_head(self) -> int:
        return self.extent * self.dtype.itemsize

    @property
    def device_dtype(self) -> np.dtype:
        return _DEVICE_DTYPES.get(self.dtype, self.dtype)


_DTYPE_NAMES = {
    F.BF16: "bf16",
    F.E4M3FN: "e4m3fn",
    np.dtype(np.int8): "i8",
    np.dtype(np.uint8): "u8",
    np.dtype(np.float16): "f16",
}
_DEVICE_DTYPES = {F.BF16: np.dtype(np.uint16), F.E4M3FN: np.dtype(np.uint8)}


def plane_schema(profile: str | Profile, head_dim: int = ROTATED_DIM) -> tuple[PlaneSpec, ...]:
    """The planes of one layer in the closed per-layer order: K code, V code, [K scale], [V scale]."""
    prof = get_profile(profile)
    check_head_dim(prof, head_dim)
    codes, scales = [], []
    for part in PARTS:
        codec = prof.codec(part)
        codes.append(PlaneSpec(f"{part}_code", part, "code", codec.code_dtype, codec.code_extent(head_dim),
                               codec.name))
        if codec.scale_dtype is not None:
            scales.append(PlaneSpec(f"{part}_scale", part, "scale", codec.scale_dtype,
                                    codec.scale_extent(head_dim), codec.name))
    return tuple(codes + scales)


def bytes_per_token_per_head(profile: str | Profile, head_dim: int = ROTATED_DIM) -> int:
    """Sum of plane bytes per token per KV head (1024/528/516/288/402 at D = 256)."""
    return sum(p.bytes_per_token_per_head for p in plane_schema(profile, head_dim))


#: Plane schema of every profile at D = 256 (the cross-check target of the reference model's inventory).
PLANE_SCHEMA = {name: plane_schema(name) for name in PROFILE_NAMES}
#: Bytes per token per KV head at D = 256.
BYTES_PER_TOKEN_PER_HEAD = {name: bytes_per_token_per_head(name) for name in PROFILE_NAMES}


# ----------------------------------------------------------------------------------------------------
# Encode / decode


def _encode_int8_g64(x: np.ndarray):
    g = x.reshape(x.shape[:-1] + (x.shape[-1] // 64, 64))
    a = np.max(np.abs(g), axis=-1)
    scale16 = F.to_f16(a / np.float32(127.0))
    s = scale16.astype(np.float32)
    zero = s == 0
    with np.errstate(divide="ignore"):
        inv = np.where(zero, np.float32(0.0), np.float32(1.0) / s).astype(np.float32)
    q = np.clip(np.rint(g * inv[..., None]), -127, 127)
    codes = np.where(zero[..., None], 0, q).astype(np.int8)
    return codes.reshape(x.shape), scale16


def _encode_fp8_row256(x: np.ndarray):
    a = np.max(np.abs(x), axis=-1, keepdims=True)
    zero = a == 0
    t = np.clip(a / np.float32(448.0), F.FP16_MIN_SUBNORMAL, F.FP16_MAX)
    rounded = F.to_f16(t)  # t >= 2^-24 rounds to >= 2^-24: never zero, never infinite
    scale16 = np.where(zero, np.float16(0.0), rounded).astype(np.float16)
    inv = np.where(zero, np.float32(0.0), np.float32(1.0) / rounded.astype(np.float32)).astype(np.float32)
    codes = F.to_e4m3fn_satfinite(np.where(zero, np.float32(0.0), x * inv))
    return codes, scale16


def _encode_nvfp4_g16(x: np.ndarray):
    g = x.reshape(x.shape[:-1] + (x.shape[-1] // 16, 16))
    a = np.max(np.abs(g), axis=-1)
    zero = a == 0
    t = np.clip(a / np.float32(6.0), F.E4M3_MIN_SUBNORMAL, F.E4M3FN_MAX)
    scale_bytes = np.where(zero, np.uint8(0), F.to_e4m3fn_satfinite(t).view(np.uint8)).astype(np.uint8)
    s = F.E4M3_TABLE[scale_bytes]
    with np.errstate(divide="ignore", invalid="ignore"):
        nib = F.to_e2m1_nibbles(g / np.where(zero, np.float32(1.0), s)[..., None])
    nib = np.where(zero[..., None], np.uint8(0), nib).astype(np.uint8)
    return F.pack_nibbles(nib.reshape(x.shape)), scale_bytes


def _encode_bf16(x: np.ndarray):
    return F.to_bf16(x), None


_ENCODERS = {
    "bf16": _encode_bf16,
    "int8_g64": _encode_int8_g64,
    "fp8_row256": _encode_fp8_row256,
    "nvfp4_g16": _encode_nvfp4_g16,
}


def encode(profile: str | Profile, part: str, x: np.ndarray):
    """Encode float32 (..., D) K or V vectors into ``(codes, scales)`` with the plane dtypes/extents.

    Rotates first where the profile rotates that part. ``scales`` is None for BF16.
    """
    prof = get_profile(profile)
    x = F.round_to_bf16(x)
    check_head_dim(prof, x.shape[-1])
    if prof.rotates(part):
        x = rotate(x)
    return _ENCODERS[prof.codec(part).name](x)


def encode_codec(codec: str, x: np.ndarray):
    """Encode already-prepared FP32 vectors (no BF16 rounding, no rotation) with one vector codec."""
    try:
        encoder = _ENCODERS[codec]
    except KeyError:
        raise ValueError(f"unknown codec {codec!r}; expected one of {tuple(_ENCODERS)}") from None
    return encoder(np.asarray(x, dtype=np.float32))


def decode(profile: str | Profile, part: str, codes: np.ndarray, scales: np.ndarray | None) -> np.ndarray:
    """Stored-domain FP32 values of ``codes`` (+ ``scales``): exact products, still rotated."""
    name = get_profile(profile).codec(part).name
    return decode_codec(name, codes, scales)


def decode_codec(codec: str, codes: np.ndarray, scales: np.ndarray | None) -> np.ndarray:
    """Decode by codec name (``bf16|int8_g64|fp8_row256|nvfp4_g16``); accepts logical or bit dtypes."""
    if codec == "bf16":
        return F.bf16_bits_to_f32(np.asarray(codes).view(np.uint16))
    if codec == "int8_g64":
        c = np.asarray(codes).view(np.int8)
        s = np.asarray(scales).view(np.float16).astype(np.float32)
        g = c.reshape(c.shape[:-1] + (s.shape[-1], c.shape[-1] // s.shape[-1])).astype(np.float32) * s[..., None]
        return g.reshape(c.shape)
    if codec == "fp8_row256":
        c = F.E4M3_TABLE[np.asarray(codes).view(np.uint8)]
        return c * np.asarray(scales).view(np.float16).astype(np.float32)
    if codec == "nvfp4_g16":
        c = np.asarray(codes).view(np.uint8)
        vals = F.E2M1_PAIR_TABLE[c].reshape(c.shape[:-1] + (c.shape[-1] // 8, 16))
        s = F.E4M3_TABLE[np.asarray(scales).view(np.uint8)]
        return (vals * s[..., None]).reshape(c.shape[:-1] + (c.shape[-1] * 2,))
    raise ValueError(f"unknown codec {codec!r}")
