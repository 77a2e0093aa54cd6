"""CAP-*: capacity resolution, backend pool sizes, pool accounting, fixed separate pools, typed bytes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvsim.kvmodel.store.capacity import m_range, pool_pages, resolve_automatic, resolve_explicit
from kvsim.kvmodel.store.planes import HEAD_MAJOR, PAGE_MAJOR, PAGE_SIZE, PROFILE_CODECS, bytes_per_token_head
from kvsim.spec.catalogue import clause_rule, state_rule

if TYPE_CHECKING:

    from kvsim.kvmodel.store.store import KVStore

SEED_BYTES_D256 = {"bf16": 1024, "int8": 528, "fp8": 516, "nvfp4": 288, "k8v4": 402}


@state_rule("CAP-1", "Main capacity M is resolved by the explicit or automatic policy within [M_min, M_max]",
            'store contract: "M_{min}=\\max(L,C)", "M=\\left\\lceil K_{main}/P\\right\\rceil", "Automatic 选择"',
            scope="config", evidence="model",
            decisions="Guards the model: a configuration the contract refuses stops the replay as an input error "
                      "(exit 2), so only an inconsistent resolution inside kvsim can fire this rule. No kv_capacity "
                      "means M_max. B(M) = reserved_bytes + Σ pools (plane slabs + I32 block table); "
                      "B_step is measured as B(M_min+1) − B(M_min) with the same layout builder; under the automatic "
                      "policy the resolved layout must lie on the affine curve. Decision 21 (store contract "
                      "\"affine SequenceCapacityCurve\", \"Startup physical bytes 由各 plane slab 的完整 span 与 "
                      "alignment 得到\"; the seed names no alignment value): each slab is charged its exact span plus "
                      "a constant 256-byte alignment allowance, never its span rounded up (which bent the curve for "
                      "FP8/K8V4 scale planes with an odd KV-head count and refused a legal configuration), so B(M) is "
                      "affine for every geometry by construction. The explicit policy needs only K_main >= S and M "
                      "in [M_min, M_max] (store contract "
                      "\"并要求 (K_{main}\\ge S) 且 (M\\in[M_{min},M_{max}])\"): a plane alignment that bends the "
                      "curve never refuses an explicit capacity.",
            tests=("tests/rules/test_cap.py::test_cap1_keeps_explicit_and_automatic_resolution",
                   "tests/rules/test_cap.py::test_cap1_keeps_automatic_capacity_affine_for_odd_head_counts",
                   "tests/rules/test_cap.py::test_cap1_fires_when_m_differs_from_the_policy"))
def cap_1(st: KVStore, _entity: object, full: bool) -> str | bool | None:
    cfg, res = st.config, st.resolution
    m_min, m_max = m_range(cfg)
    if not m_min <= res.m <= m_max:
        return f"M = {res.m} outside [M_min, M_max] = [{m_min}, {m_max}]"
    pol = cfg.capacity
    if pol.kind == "explicit" and pol.tokens is not None \
            and res.m != resolve_explicit(pol.tokens, cfg.max_context, m_min, m_max):
        return f"explicit kv_capacity {pol.tokens} resolved to M = {res.m}, not ceil(K/P)"
    if pol.kind == "automatic" and pol.free_bytes is not None and pol.headroom_bytes is not None \
            and res.m != resolve_automatic(res.curve, pol.free_bytes, pol.headroom_bytes):
        return f"automatic kv_capacity resolved to M = {res.m}, not min(M_max, M_min + floor((F-R-B_min)/B_step))"
    if pol.kind == "max" and res.m != m_max:
        return f"default kv_capacity resolved to M = {res.m}, not M_max = {m_max}"
    if pol.kind == "automatic" and res.layout.reservation_bytes != res.curve.bytes_at(res.m):
        return f"B({res.m}) = {res.layout.reservation_bytes} B is off the affine curve"
    return True


@state_rule("CAP-2", "Backend pool sizes derive from M: MTP M + C·ceil((K−1)/P), Draft Full M, at most two pools",
            'store contract (seed 000 L30, L31, L75-L79): "MTP physical pages = M + C * ceil((K - 1) / P)", '
            '"Draft Full physical pages = M", "当前最多有两个 growing pools"',
            scope="config", evidence="model",
            decisions="Guards the model (the pool vector is derived, never reported by a trace). DFlash and "
                      "DFlash2 alike get a Draft Full pool only with full_layers > 0 (seed 000 L28-L30 \"Draft Full, "
                      "when the selected draft config contains full-attention layers\", L79 \"没有 full layer 的 draft "
                      "配置不分配此 pool\"): a draft with no full-attention layer is a legal configuration of either "
                      "kind with Main as its only growing pool (the official DFlash2 config is one, L31); only a "
                      "negative layer count is refused.",
            tests=("tests/rules/test_cap.py::test_cap2_keeps_backend_pool_sizes",
                   "tests/rules/test_cap.py::test_cap2_fires_when_mtp_pool_lacks_the_provisional_lead"))
def cap_2(st: KVStore, _entity: object, full: bool) -> str | bool | None:
    want = pool_pages(st.config, st.resolution.m)
    have = {name: pool.capacity for name, pool in st.pools.items()}
    if have != want:
        return f"pool pages {have}, the contract derives {want}"
    if len(have) > 2:
        return f"{len(have)} growing pools; at most two"
    return len(have) > 1 or None


@state_rule("CAP-3", "Per pool allocated + reserved + available = capacity, all >= 0",
            'store contract: "allocated+reserved+available=capacity"', scope="pool",
            decisions="The audit recounts allocated from the leases; reserved is the sum of active reservations "
                      "(checked under ENT-1).",
            tests=("tests/rules/test_cap.py::test_cap3_keeps_allocated_reserved_available",
                   "tests/rules/test_cap.py::test_cap3_fires_on_over_reservation",
                   "tests/rules/test_through_traces.py::test_engine_rule_fires_from_a_trace"),
            context=("pool", "xfer", "allocated", "reserved", "available"))
def cap_3(st: KVStore, name: str, full: bool) -> str | bool | None:
    p = st.pools[name]
    if p.allocated < 0 or p.reserved < 0 or p.available < 0:
        return f"{name}: allocated {p.allocated}, reserved {p.reserved}, available {p.available} (negative)"
    if p.allocated + p.reserved + p.available != p.capacity:
        return f"{name}: allocated + reserved + available != capacity {p.capacity}"
    if full:
        leased = sum(1 for _ in p.leased_ids())
        drained = sum(1 for pid in p.leased_ids() if p.holder[pid] is not None and p.holder[pid].drained)
        if leased != p.allocated + p.draining or drained != p.draining:
            return f"{name}: {leased} ids leased ({drained} drained) but allocated = {p.allocated}, " \
                   f"draining = {p.draining}"
    return True


@state_rule("CAP-4", "Pools are fixed at startup and physically separate: no resize, no lending",
            'store contract: "各 pools 物理分离。一个 pool 的 free page 不能变成另一 pool 的 payload"', scope="pool",
            evidence="model",
            decisions="Guards the model: engine page ids are checked against their own pool's namespace when adopted "
                      "(PAGE-1), so only model state can break this.",
            tests=("tests/rules/test_cap.py::test_cap4_keeps_pools_fixed_and_separate",
                   "tests/rules/test_cap.py::test_cap4_fires_when_a_pool_resizes"),
            context=("pool",))
def cap_4(st: KVStore, name: str, full: bool) -> str | bool | None:
    p = st.pools[name]
    if p.capacity != st.resolution.pages[name]:
        return f"{name}: capacity {p.capacity} differs from the startup vector {st.resolution.pages[name]}"
    if full:
        for pid in p.leased_ids():
            h = p.holder[pid]
            if h is None or h.pool != name:
                return f"{name}: page {pid} carries a page of pool {getattr(h, 'pool', None)!r}"
    return True


@state_rule("CAP-5", "Byte accounting comes from the typed plane inventory (PageBytes, startup bytes)",
            'store contract: "PageBytes=\\sum_{plane} PlaneBytesPerToken\\cdot P", "不能用 2 * vector_bytes 代替 K8V4"',
            scope="config", evidence="model",
            decisions="Guards the model (kvtrace/1 carries no byte figures). Draft Full uses its own BF16 profile at "
                      "the draft head_dim; the BF16 profile stores BF16 V.",
            tests=("tests/rules/test_cap.py::test_cap5_keeps_typed_byte_accounting",
                   "tests/rules/test_cap.py::test_cap5_fires_on_symmetric_k8v4_bytes"))
def cap_5(st: KVStore, _entity: object, full: bool) -> str | bool | None:
    cfg = st.config
    if bytes_per_token_head(cfg.kv_profile, 256) != SEED_BYTES_D256[cfg.kv_profile]:
        return f"{cfg.kv_profile}: inventory gives {bytes_per_token_head(cfg.kv_profile, 256)} B/token/head"
    for name, g in st.geometry.items():
        per_token = sum(p.bytes_per_token_head for p in g.planes) * g.kv_heads * g.layers
        if g.page_bytes != per_token * PAGE_SIZE or st.pools[name].page_bytes != g.page_bytes:
            return f"{name}: PageBytes {st.pools[name].page_bytes} != Σ plane bytes · P = {per_token * PAGE_SIZE}"
        if g.startup_bytes < g.page_bytes * g.pages:
            return f"{name}: startup bytes {g.startup_bytes} below pages · PageBytes"
    return True


clause_rule("CAP-6", "B(M) is the complete runtime Device reservation, non-pool parts included",
            'store contract: "其中 (B(M)) 是该 Main capacity 对应的完整 runtime Device reservation"',
            not_checkable="kvtrace/1 records the non-pool part of B(M) (active/checkpoint State storage, fixed "
                          "persistent state, unified workspace, CUDA Graph allowance) as one header figure, "
                          "`reserved_bytes`; no event reports those allocations, so only their sum enters the "
                          "automatic policy (CAP-1) and nothing about the parts can be judged from a trace.")


# X of each plane (elements per token per head) per closed codec, restated from the seed's list (L104-110):
# K/V and quantized code planes X = D; INT8-G64 scale D/64; FP8-E4M3FN-row256 scale 1; NVFP4-G16 code D/2, scale D/16
_SEED_X = {"bf16": (lambda d: d, None), "int8": (lambda d: d, lambda d: d // 64), "fp8": (lambda d: d, lambda d: 1),
           "nvfp4": (lambda d: d // 2, lambda d: d // 16)}
_ORDER = {"main": PAGE_MAJOR, "mtp": PAGE_MAJOR, "draft_full": HEAD_MAJOR}


@state_rule("CAP-7", "Every pool uses P = 64 and its closed plane order: page-major [X,P,H,N], head-major [X,P,N,H]",
            'store contract: "所有 registered growing pools 使用 (P=64)，并选择两种 closed orders 之一", '
            '"Main Text 与 MTP 使用 page-major", "DFlash Full 使用 head-major page run", '
            '"Device replica 使用 4 的 consumer-native plane layout"', scope="config", evidence="model",
            decisions="Decision 20 (plane order, nothing silently left out): guards the model, whose pool geometry "
                      "(kvmodel.store.planes) feeds PageBytes, startup bytes and the capacity curve; the physical "
                      "implementation (gpu/planes.py) builds the same shapes and its views reject any other "
                      "(tests/gpu). kvtrace/1 carries no plane shapes, so an engine's layout is not judged. X per "
                      "plane as the seed lists it: D for K/V and quantized code planes, D/64 for the INT8-G64 scale, "
                      "1 for the FP8-E4M3FN-row256 scale, D/2 (packed U8) for the NVFP4-G16 code and D/16 for its "
                      "scale. Code and scale planes share the page group g (one PoolGeometry per pool).",
            tests=("tests/rules/test_cap.py::test_cap7_keeps_the_closed_plane_orders",
                   "tests/rules/test_cap.py::test_cap7_fires_on_a_head_major_main_pool",
                   "tests/rules/test_cap.py::test_cap7_fires_on_a_wrong_scale_extent"))
def cap_7(st: KVStore, _entity: object, full: bool) -> str | bool:
    for name, g in st.geometry.items():
        if PAGE_SIZE != 64:
            return f"{name}: page size {PAGE_SIZE}, the contract fixes P = 64"
        if g.order != _ORDER[name]:
            return f"{name}: plane order {g.order}, the contract fixes {_ORDER[name]}"
        codecs = PROFILE_CODECS["bf16" if name == "draft_full" else st.config.kv_profile]
        want_roles = [(part, role) for part, codec in zip("kv", codecs, strict=True)
                      for role, f in zip(("code", "scale"), _SEED_X[codec], strict=True) if f]
        if sorted((p.part, p.role) for p in g.planes) != sorted(want_roles):
            return f"{name}: planes {[(p.part, p.role) for p in g.planes]}, the profile needs {want_roles}"
        for plane in g.planes:
            x = plane.extent
            code_x, scale_x = _SEED_X[codecs[0 if plane.part == "k" else 1]]
            extent_of = code_x if plane.role == "code" else scale_x
            want = -1 if extent_of is None else extent_of(g.head_dim)
            if x != want:
                return f"{name}: {plane.part} {plane.role} plane ({plane.dtype}) has X = {x}, the contract gives {want}"
            shape = g.plane_shape(plane)
            n, h = g.pages, g.kv_heads
            if shape != ((x, PAGE_SIZE, h, n) if g.order == PAGE_MAJOR else (x, PAGE_SIZE, n, h)):
                return f"{name}: plane shape {shape} is not the closed {g.order} order"
    return True
