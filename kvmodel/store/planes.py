"""The typed plane inventory: per profile, the K/V code and scale planes with dtype, extent and bytes.

Store contract: "D256 Main/MTP profile 的单 token/head 物理 payload 为" (the byte table: 1024 / 528 /
516 / 288 / 402 B per token per head), "Page-major 地址为" (the closed orders [X,P,H,N] for Main/MTP
and [X,P,N,H] for Draft Full) and "PageBytes=\\sum_{plane} PlaneBytesPerToken\\cdot P". Every byte
figure of the model (PageBytes, startup bytes, the capacity curve, Host extents) comes from here; K8V4
is asymmetric, so nothing may use 2 * vector_bytes. The BF16 profile stores BF16 K and BF16 V (the seed
wins over an older NInfer that stored FP16 V). Draft Full uses its own BF16 profile.
This module knows nothing of pages, leases or address spaces.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvsim.kvmodel.store.config import PAGE_SIZE, StoreConfig

PAGE_MAJOR = "page_major"  # [X, P, H, N]
HEAD_MAJOR = "head_major"  # [X, P, N, H]
SLAB_ALIGNMENT = 256  # plane slab bases are 256-byte aligned: each slab is charged this much on top of its span

# dtype name -> bytes per element (u8x2 = two FP4 E2M1 codes per byte)
DTYPE_BYTES = {"bf16": 2, "f16": 2, "i8": 1, "e4m3fn": 1, "u8x2": 1, "ue4m3": 1}


@dataclass(frozen=True, slots=True)
class PlaneSpec:
    """One plane of a layer: which part, code or scale, element dtype and leading extent X."""

    part: str  # "k" | "v"
    role: str  # "code" | "scale"
    dtype: str
    extent: int  # X: elements per token per head

    @property
    def bytes_per_token_head(self) -> int:
        return DTYPE_BYTES[self.dtype] * self.extent


def _part_planes(part: str, codec: str, d: int) -> tuple[PlaneSpec, PlaneSpec | None]:
    """(code plane, scale plane or None) of one part under one closed codec."""
    if codec == "bf16":
        return PlaneSpec(part, "code", "bf16", d), None
    if codec == "int8":  # INT8-G64: FP16 scale per 64 values
        return PlaneSpec(part, "code", "i8", d), PlaneSpec(part, "scale", "f16", d // 64)
    if codec == "fp8":  # FP8-E4M3FN-row256: one FP16 scale per row
        return PlaneSpec(part, "code", "e4m3fn", d), PlaneSpec(part, "scale", "f16", 1)
    if codec == "nvfp4":  # NVFP4-G16: packed E2M1 nibbles, UE4M3 scale per 16 values
        return PlaneSpec(part, "code", "u8x2", d // 2), PlaneSpec(part, "scale", "ue4m3", d // 16)
    raise ValueError(f"unknown codec {codec!r}")


# profile -> (K codec, V codec); K8V4 is the closed asymmetric profile
PROFILE_CODECS = {"bf16": ("bf16", "bf16"), "int8": ("int8", "int8"), "fp8": ("fp8", "fp8"),
                  "nvfp4": ("nvfp4", "nvfp4"), "k8v4": ("fp8", "nvfp4")}


def profile_planes(profile: str, head_dim: int) -> tuple[PlaneSpec, ...]:
    """Per-layer plane order: K code, V code, [K scale], [V scale] (NInfer's plane order)."""
    k_codec, v_codec = PROFILE_CODECS[profile]
    k_code, k_scale = _part_planes("k", k_codec, head_dim)
    v_code, v_scale = _part_planes("v", v_codec, head_dim)
    return tuple(p for p in (k_code, v_code, k_scale, v_scale) if p is not None)


def bytes_per_token_head(profile: str, head_dim: int = 256) -> int:
    """Physical K+V payload per token per KV head (the seed's byte table at D = 256)."""
    return sum(p.bytes_per_token_head for p in profile_planes(profile, head_dim))


@dataclass(frozen=True, slots=True)
class PoolGeometry:
    """One growing pool's expanded geometry: what the common pool implementation receives."""

    name: str
    order: str
    layers: int
    kv_heads: int
    head_dim: int
    planes: tuple[PlaneSpec, ...]
    pages: int  # N_physical

    @property
    def page_bytes(self) -> int:
        """PageBytes = Σ_plane PlaneBytesPerToken · P, over every grouped plane of every layer."""
        per_token = sum(p.bytes_per_token_head for p in self.planes) * self.kv_heads * self.layers
        return per_token * PAGE_SIZE

    def plane_shape(self, plane: PlaneSpec) -> tuple[int, int, int, int]:
        """ggml-style shape (ne[0] fastest) in the closed order."""
        if self.order == PAGE_MAJOR:
            return (plane.extent, PAGE_SIZE, self.kv_heads, self.pages)
        return (plane.extent, PAGE_SIZE, self.pages, self.kv_heads)

    def slab_bytes(self, plane: PlaneSpec) -> int:
        return plane.bytes_per_token_head * PAGE_SIZE * self.kv_heads * self.pages

    @property
    def startup_bytes(self) -> int:
        """Σ over layers and planes of the slab span plus one alignment allowance per slab.

        Store contract: "Startup physical bytes 由各 plane slab 的完整 span 与 alignment 得到" and the affine
        SequenceCapacityCurve "B(M)=B_{min}+(M-M_{min})B_{step}" (L57-68). The seed names no alignment value;
        rounding each span up to SLAB_ALIGNMENT bends the curve wherever a slab's per-page bytes are no
        multiple of it (an FP8-row256 scale plane holds 128·H bytes per page: odd H gives a zig-zag), and
        the automatic policy would refuse a legal geometry. So each slab is charged its exact span plus
        SLAB_ALIGNMENT bytes, which covers any padding that aligns its base (at most SLAB_ALIGNMENT - 1) and
        is constant in N: B(M) is affine by construction for every geometry (decision 21, CAP-1). The
        physical implementation allocates each plane exactly so (gpu.planes.PagedKVPool.startup_bytes).
        """
        per_layer = sum(self.slab_bytes(p) + SLAB_ALIGNMENT for p in self.planes)
        return per_layer * self.layers


def pool_geometry(config: StoreConfig, name: str, pages: int) -> PoolGeometry:
    """Expand the selected profile for one pool ("PagedKVStorageLayout 将选定的 closed profile 解析为 ...")."""
    m = config.model
    if name == "main":
        return PoolGeometry(name, PAGE_MAJOR, m.full_attention_layers, m.kv_heads, m.head_dim,
                            profile_planes(config.kv_profile, m.head_dim), pages)
    if name == "mtp":
        return PoolGeometry(name, PAGE_MAJOR, config.backend.mtp_layers, m.kv_heads, m.head_dim,
                            profile_planes(config.kv_profile, m.head_dim), pages)
    if name == "draft_full":
        b = config.backend
        return PoolGeometry(name, HEAD_MAJOR, b.full_layers, b.draft_kv_heads, b.draft_head_dim,
                            profile_planes("bf16", b.draft_head_dim), pages)
    raise ValueError(f"unknown pool {name!r}")


def block_table_bytes(config: StoreConfig) -> int:
    """One pool's I32 block-table matrix [N_logical, C] ("block_tables[N_{logical},C]")."""
    return 4 * config.logical_pages * config.max_concurrency
