"""Store configuration: the startup-fixed facts from which capacity and pools are resolved.

Store contract: "模型配置和 selected speculative backend 在启动时确定 pool set" and the symbols
S = max_context, C = max_concurrency, P = 64, L = ceil(S/P) ("M_{min}=\\max(L,C)"). Validation here
covers what does not need the plane inventory; capacity resolution lives in `capacity`.
This module knows nothing of pools, pages or traces.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvsim.kvmodel.store.errors import ConfigError, InvariantError

PAGE_SIZE = 64  # "每个 growing pool 为 P=64"; any other value is an architecture change
PROFILES = ("bf16", "int8", "fp8", "nvfp4", "k8v4")
BACKEND_KINDS = ("off", "mtp", "dflash", "dflash2")
CODEC_HEAD_DIM = 256  # the closed Main/MTP profiles are D256 ("D256 Main/MTP profile")


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True, slots=True)
class BackendConfig:
    """The selected speculative backend ("Speculative backends 在一个 Engine 内互斥")."""

    kind: str = "off"
    draft_window: int = 0  # MTP K
    mtp_layers: int = 1
    full_layers: int = 0  # DFlash/DFlash2 full-attention draft layers; 0: no Draft Full pool (either kind)
    draft_kv_heads: int = 8
    draft_head_dim: int = 128

    @property
    def pool(self) -> str | None:
        """The backend growing pool's name, or None when the backend needs none."""
        if self.kind == "mtp":
            return "mtp"
        if self.kind in ("dflash", "dflash2") and self.full_layers > 0:
            return "draft_full"
        return None


@dataclass(frozen=True, slots=True)
class GrowthConfig:
    """kv_lease_growth: bounded window (tokens) plus a per-lane cushion (pages)."""

    window: int = 4096
    cushion_pages: int = 2


@dataclass(frozen=True, slots=True)
class CapacityPolicy:
    """kv_capacity: explicit tokens, automatic (free/headroom bytes), or neither (default M_max)."""

    tokens: int | None = None
    free_bytes: int | None = None
    headroom_bytes: int | None = None

    @property
    def kind(self) -> str:
        if self.tokens is not None:
            return "explicit"
        if self.free_bytes is not None:
            return "automatic"
        return "max"


@dataclass(frozen=True, slots=True)
class ModelGeometry:
    """The target's full-attention geometry that the Main and MTP pools store."""

    full_attention_layers: int = 1
    kv_heads: int = 2
    head_dim: int = 256


@dataclass(frozen=True, slots=True)
class StoreConfig:
    max_context: int
    max_concurrency: int
    page_size: int = PAGE_SIZE
    kv_profile: str = "bf16"
    backend: BackendConfig = BackendConfig()
    capacity: CapacityPolicy = CapacityPolicy()
    model: ModelGeometry = ModelGeometry()
    host_arena_bytes: int = 0
    growth: GrowthConfig | None = None
    prefill_chunk: int = 2048
    reserved_bytes: int = 0  # non-pool part of B(M): state, workspace, CUDA-graph allowance

    @property
    def logical_pages(self) -> int:
        """L = ceil(S/P): one address space's logical page capacity."""
        return ceil_div(self.max_context, self.page_size)

    @property
    def pool_names(self) -> tuple[str, ...]:
        """Enabled growing pools, Main first ("当前最多有两个 growing pools")."""
        backend = self.backend.pool
        return ("main",) if backend is None else ("main", backend)

    @property
    def growth_window(self) -> int:
        """The bounded window in tokens: max(prefill_chunk, configured window)."""
        if self.growth is None:
            raise InvariantError("growth_window needs kv_lease_growth", "asked with growth off")
        return max(self.prefill_chunk, self.growth.window)

    @property
    def growth_cushion(self) -> int:
        """The per-lane cushion in pages (kv_lease_growth only)."""
        if self.growth is None:
            raise InvariantError("growth_cushion needs kv_lease_growth", "asked with growth off")
        return self.growth.cushion_pages

    def validate(self) -> StoreConfig:
        """Raise ConfigError (with the rule id) for anything the contract does not support."""
        if self.page_size != PAGE_SIZE:
            raise ConfigError("CAP-1", f"page_size {self.page_size} is unsupported: the contract fixes P = 64 "
                                       "(changing the page size is an architecture change)")
        _positive("max_context", self.max_context)
        _positive("max_concurrency", self.max_concurrency)
        if self.kv_profile not in PROFILES:
            raise ConfigError("CAP-5", f"unknown kv_profile {self.kv_profile!r}; expected one of {', '.join(PROFILES)}")
        m = self.model
        _positive("model.full_attention_layers", m.full_attention_layers)
        _positive("model.kv_heads", m.kv_heads)
        if m.head_dim != CODEC_HEAD_DIM:
            raise ConfigError("CAP-5", f"model.head_dim {m.head_dim} is unsupported: the closed Main/MTP profiles "
                                       f"are defined at D = {CODEC_HEAD_DIM}")
        b = self.backend
        if b.kind not in BACKEND_KINDS:
            raise ConfigError("CAP-2", f"unknown backend kind {b.kind!r}")
        if b.kind == "mtp":
            _positive("backend.draft_window", b.draft_window)
            _positive("backend.layers", b.mtp_layers)
        if b.kind in ("dflash", "dflash2") and b.full_layers < 0:
            # DFlash and DFlash2 alike: zero full-attention draft layers is legal and allocates no Draft Full
            # pool (store contract "Draft Full, when the selected draft config contains full-attention layers",
            # "没有 full layer 的 draft 配置不分配此 pool"; CAP-2's entry)
            raise ConfigError("CAP-2", f"backend.full_layers must be >= 0, got {b.full_layers}")
        if b.pool == "draft_full":
            _positive("backend.kv_heads", b.draft_kv_heads)
            if b.draft_head_dim <= 0 or b.draft_head_dim % 2:
                raise ConfigError("CAP-5", f"backend.head_dim {b.draft_head_dim} must be a positive even number")
        if self.prefill_chunk <= 0 or self.prefill_chunk % 128:
            raise ConfigError("ENT-3", f"prefill_chunk {self.prefill_chunk} must be a positive multiple of 128")
        if self.growth is not None:
            _positive("kv_lease_growth.window", self.growth.window)
            if self.growth.cushion_pages < 0:
                raise ConfigError("ENT-3", "kv_lease_growth.cushion_pages must be >= 0")
        c = self.capacity
        if c.tokens is not None and c.free_bytes is not None:
            raise ConfigError("CAP-1", "kv_capacity is either explicit tokens or automatic, not both")
        if c.free_bytes is not None and c.headroom_bytes is None:
            raise ConfigError("CAP-1", "automatic kv_capacity needs headroom_bytes")
        if self.host_arena_bytes < 0 or self.reserved_bytes < 0:
            raise ConfigError("CAP-1", "host_arena_bytes and reserved_bytes must be >= 0")
        return self


def _positive(name: str, value: int) -> None:
    if value <= 0:
        raise ConfigError("CAP-1", f"{name} must be >= 1, got {value}")
