"""Scenarios of the store-conformance review: per finding, a correct engine that must pass (legal) and a buggy
engine that must be caught with the right rule at the right event (violation).

Each violation scenario then shows, by the `observe` after its bad event, that the rejected fact was not
applied (the state is what it was before). Page ids and Host offsets that a trace leaves out are the
engine's choice: the model guesses and adopts the engine's at first sighting (DESIGN §6), so the engine's
own ids below need not be the lowest free ones.

This module knows the kvtrace/1 vocabulary (tracebook) and the store contract; it never imports the model.
"""

from __future__ import annotations

from tracebook import Trace, config

BF16_PAGE = 131072  # one bf16 page: 1024 B/token/head x 2 heads x 64 tokens
M128 = {"tokens": 8192}
M64 = {"tokens": 4096}
HOST = dict(kv_capacity=M128, host_arena_bytes=8 * BF16_PAGE)



# -- 1. restore destinations are the engine's -------------------------------------------------------

def restore_engine_destinations() -> Trace:
    t = Trace("restore_engine_destinations",
              'Restores land on the Device ids the engine chose, in any permutation: an activation restores '
              'three Host-only blocks and copies the tail to pages 9, 7, 8, 5, and an h2d transfer names its '
              'destination 20 (store contract "Physical IDs 可以任意排列", "restore required Host-only pages")',
              config(**HOST))
    t.checkpoint("s0", 200, "c0", [0, 1, 2, 3], budget=56)  # 4 pages, tail of 8 columns
    t.offload("c0", [0, 1, 2, 3])
    t.drop_device("c0", [0, 1, 2, 3])
    t.ckpt("c0", table=[-1, -1, -1, -1], frontier=200, replicas=["host"] * 4)
    t.pool(allocated=0, reserved=0, available=128)
    # Fork from a Host-only checkpoint: blocks 0..2 restored (shared with c0), the 8-column tail copied from
    # the Host into a private page; entitlement ceil(256/64) = 4 = membership, so nothing is reserved.
    t.activate("s1", 200, 56, src="c0")
    t.row("s1", table=[9, 7, 8, 5], frontier=200)  # the engine's ids, adopted
    t.ckpt("c0", table=[9, 7, 8, -1], replicas=["both", "both", "both", "host"])
    t.pool(allocated=4, reserved=0, available=124)
    t.step("s1", 200, 256)  # into the private tail page 5
    t.row("s1", table=[9, 7, 8, 5], frontier=256)
    t.finish("s1")  # page 5 goes; 9, 7, 8 stay as c0's Device replicas
    x = "x1"
    t.xfer(x, "h2d", "c0", [3], "reserve", pages=[20])  # restore block 3 onto the engine's page 20
    for phase in ("copy", "verify", "publish", "release_source"):
        t.xfer(x, "h2d", "c0", [3], phase)
    t.ckpt("c0", table=[9, 7, 8, 20], frontier=200, replicas=["both", "both", "both", "device"])
    t.pool(allocated=4, reserved=0, available=124)
    t.release("c0")
    t.pool(allocated=0, reserved=0, available=128)
    return t


def restore_onto_leased_page() -> Trace:
    t = Trace("PAGE-1_restore_onto_leased_page",
              'Use-after-free on restore: the engine restores c0\'s block 0 onto page 10, which still carries s9\'s '
              'block 0 (store contract "每个 Device page-group lease 在所属 pool 中至多承载一个 logical page replica")',
              config(**HOST))
    t.activate("s9", 100, 28)
    t.map("s9", 100, result={"ok": True, "pages": [10, 11]})
    t.step("s9", 0, 100)
    t.checkpoint("s0", 200, "c0", [0, 1, 2, 3], budget=56)
    t.offload("c0", [0, 1, 2, 3])
    t.drop_device("c0", [0, 1, 2, 3])
    t.activate("s1", 200, 56, src="c0")
    t.row("s1", table=[10, 7, 8, 5], expect="PAGE-1")
    t.row("s9", table=[10, 11], frontier=100)  # unchanged: s9 keeps page 10
    t.pool(allocated=6, reserved=0, available=122)
    t.finish("s1")
    t.finish("s9")
    t.release("c0")
    t.pool(allocated=0, reserved=0, available=128)
    return t


# -- 2. Host placement is the engine's ----------------------------------------------------------------

def host_placement_engine_offsets() -> Trace:
    S = BF16_PAGE
    t = Trace("host_placement_engine_offsets",
              'Host placement is the engine\'s: its allocator (unlike a first fit) keeps a 2-page extent free, so '
              'a 2-page offload fits where the model\'s own first fit would not; later offsets the engine names '
              'are adopted (store contract "Host arena 是有界 variable-size allocator", "Plan 必须针对完整 '
              'release/allocation recipe 验证 extent geometry")',
              config(kv_capacity=M128, host_arena_bytes=4 * S))
    for seq, prompt, ckpt in (("s0", 128, "c0"), ("s1", 64, "c1"), ("s2", 128, "c2")):
        t.activate(seq, prompt, 0)
        t.prefill(seq, prompt)
        t.finish(seq, retain=ckpt)
    t.offload("c0", [0, 1])  # the engine places these at [2, 4) strides (not said)
    t.offload("c1", [0])  # at [0, 1)
    t.drop_host("c0", [0])  # the engine's free space: [1, 3): one 2-stride extent
    t.offload("c2", [0, 1])  # fits there; the model's own first fit has only 1-stride holes
    t.ckpt("c2", replicas=["both", "both"])
    t.drop_host("c1", [0])
    t.offload("c1", [0], offsets=[0])  # the engine names its extent: adopted
    t.ckpt("c1", replicas=["both"])
    for ckpt in ("c0", "c1", "c2"):
        t.release(ckpt)
    t.pool(allocated=0, reserved=0, available=128)
    return t


def offload_beyond_free_bytes() -> Trace:
    t = Trace("REP-3_offload_beyond_free_bytes",
              'The engine offloads a third page into a Host arena of two page strides that already holds two '
              'pages: no placement can hold it (store contract "Host capacity 按实际 packed bytes 和 allocator '
              'extent geometry计费")', config(kv_capacity=M128, host_arena_bytes=2 * BF16_PAGE))
    for seq, prompt, ckpt in (("s0", 128, "c0"), ("s1", 64, "c1")):
        t.activate(seq, prompt, 0)
        t.prefill(seq, prompt)
        t.finish(seq, retain=ckpt)
    t.offload("c0", [0, 1])
    t.offload("c1", [0], expect="REP-3")
    t.ckpt("c1", replicas=["device"])  # nothing was published
    t.release("c1")
    t.release("c0")
    return t


# -- 3. copy pins do not forbid reading ---------------------------------------------------------------

def fork_while_copying() -> Trace:
    t = Trace("fork_while_copying",
              'A Fork reads a checkpoint whose pages a D2H copy pins: legal, only releasing the sole valid source '
              'or publishing early is forbidden; the source is released once no active sequence needs it (store '
              'contract "Copy 进行时 source 与 destination 都被 pin", "唯一有效 source 也不能先释放")', config(**HOST))
    t.checkpoint("s0", 200, "c0", [0, 1, 2, 3], budget=56)
    t.xfer("x1", "d2h", "c0", [0, 1, 2, 3], "reserve")
    t.xfer("x1", "d2h", "c0", [0, 1, 2, 3], "copy")
    t.activate("s1", 200, 56, src="c0")  # shares blocks 0..2, copies the tail (page 4: the engine's, unsaid)
    t.step("s1", 200, 256)
    t.xfer("x1", "d2h", "c0", [0, 1, 2, 3], "verify")
    t.xfer("x1", "d2h", "c0", [0, 1, 2, 3], "publish")
    t.finish("s1")
    t.xfer("x1", "d2h", "c0", [0, 1, 2, 3], "release_source")  # no active reference remains
    t.ckpt("c0", table=[-1, -1, -1, -1], frontier=200, replicas=["host"] * 4)
    t.release("c0")
    t.pool(allocated=0, reserved=0, available=128)
    return t


def drop_source_while_fork_reads() -> Trace:
    t = Trace("REP-2_drop_source_while_fork_reads",
              'While a D2H copy pins c0 and a fork reads it, the engine drops the Device copy of block 3 — the '
              'copy\'s sole valid source (store contract "Copy 进行时 source 与 destination 都被 pin", "唯一有效 '
              'source 也不能先释放")', config(**HOST))
    t.checkpoint("s0", 200, "c0", [0, 1, 2, 3], budget=56)
    t.xfer("x1", "d2h", "c0", [0, 1, 2, 3], "reserve")
    t.xfer("x1", "d2h", "c0", [0, 1, 2, 3], "copy")
    t.activate("s1", 200, 56, src="c0")
    t.drop_device("c0", [3], expect="REP-2")
    t.ckpt("c0", table=[0, 1, 2, 3], replicas=["device"] * 4)  # unchanged: the copy is not yet published
    for phase in ("verify", "publish"):
        t.xfer("x1", "d2h", "c0", [0, 1, 2, 3], phase)
    t.finish("s1")
    t.xfer("x1", "d2h", "c0", [0, 1, 2, 3], "release_source")
    t.release("c0")
    return t


# -- 4. explicit capacity -------------------------------------------------------------------------------

FP8_ONE_HEAD = dict(kv_capacity=M128, kv_profile="fp8",
                    model={"full_attention_layers": 1, "kv_heads": 1, "head_dim": 256})


def explicit_capacity_fp8() -> Trace:
    t = Trace("explicit_capacity_fp8",
              'Explicit kv_capacity 8192 with FP8-E4M3FN-row256 and one KV head: M = ceil(8192/64) = 128, in '
              '[M_min, M_max] = [64, 256], K_main >= S; the explicit policy needs nothing more, even though the '
              'plane alignment bends B(M) off an affine curve (store contract "kv_capacity 的 explicit policy '
              '解析为", "并要求 (K_{main}\\\\ge S) 且 (M\\\\in[M_{min},M_{max}])")', config(**FP8_ONE_HEAD))
    t.pool(allocated=0, reserved=0, available=128)
    t.activate("s0", 1000, 24)
    t.prefill("s0", 1000)
    t.pool(allocated=16, reserved=0, available=112)
    t.finish("s0")
    t.pool(allocated=0, reserved=0, available=128)
    return t


def fp8_counters_off_capacity() -> Trace:
    t = Trace("CAP-3_fp8_counters_off_capacity",
              'The engine sizes an explicit FP8 Main pool by the curve-adjusted M = 129 instead of ceil(K/P) = '
              '128, so its counters sum to 129 (store contract "M=\\\\left\\\\lceil K_{main}/P\\\\right\\\\rceil", '
              '"allocated+reserved+available=capacity")', config(**FP8_ONE_HEAD))
    t.activate("s0", 1000, 24)
    t.pool(allocated=0, reserved=16, available=113, expect="CAP-3")
    t.pool(allocated=0, reserved=16, available=112)
    t.finish("s0")
    return t


# -- 7. the per-sequence ceiling S at activation ----------------------------------------------------------

def context_ceiling() -> Trace:
    t = Trace("context_ceiling",
              'Activations up to the per-sequence ceiling S = 4096 are admitted; one whose prompt alone exceeds '
              'S is refused (store contract "Page rounding 只增加 physical padding， 不会扩大单 sequence 的 logical '
              'ceiling (S)"; a budget beyond S - prompt is clamped, decision 18)', config(kv_capacity=M128))
    t.activate("s0", 4000, 96)  # exactly S
    t.activate("s1", 4100, 0, result={"ok": False, "error": "context"})
    t.pool(allocated=0, reserved=64, available=64)
    t.finish("s0")
    return t


def activation_beyond_max_context() -> Trace:
    t = Trace("AS-6_activation_beyond_max_context",
              'The engine admits a request whose prompt alone (4100) exceeds max_context S = 4096 (store '
              'contract "不会扩大单 sequence 的 logical ceiling (S)")', config(kv_capacity=M128))
    t.activate("s1", 4100, 0, result={"ok": True, "rows": {"main": 0}, "pages": {"main": []}}, expect="AS-6")
    t.pool(allocated=0, reserved=0, available=128)  # nothing was admitted
    t.activate("s1", 4000, 96)
    t.finish("s1")
    return t


# -- 9. cow answers are judged ----------------------------------------------------------------------------

def _fork_at_1000(t: Trace) -> None:
    """c0: 16 full pages (1024 tokens); s1 forks it (page-aligned: all shared) and regenerates from 1000."""
    t.activate("s0", 1024, 0)
    t.map("s0", 1024, result={"ok": True, "pages": list(range(16))})
    t.step("s0", 0, 1024)
    t.finish("s0", retain="c0")
    t.activate("s1", 1024, 64, src="c0")  # entitlement 17, 16 shared members: reservation 1
    t.truncate("s1", 1000)  # block 15 stays a shared member


def cow_answers() -> Trace:
    t = Trace("cow_answers",
              'COW requests answered by the engine: refused while the pool has no page for the private copy, '
              'then copied into the page the engine chose (store contract "需要写入 shared partial tail 时必须先 '
              'COW", "non-aligned writable tail先建立private COW page")', config(kv_capacity=M64))
    _fork_at_1000(t)
    t.activate("s9", 2900, 100)  # ceil(3000/64) = 47 pages: the rest of the pool (64 - 16 - 1)
    t.pool(allocated=16, reserved=48, available=0)
    t.cow("s1", 15, result={"ok": False, "error": "capacity"})
    t.finish("s9")
    t.cow("s1", 15, result={"ok": True, "page": 40})
    t.row("s1", table=[*range(15), 40], frontier=1000)
    t.step("s1", 1000, 1024)
    t.finish("s1")
    t.release("c0")
    t.pool(allocated=0, reserved=0, available=64)
    return t


def cow_refused_with_capacity() -> Trace:
    t = Trace("TRACE-1_cow_refused_with_capacity",
              'The engine refuses a COW for capacity while 47 pages are available (store contract "需要写入 shared '
              'partial tail 时必须先 COW")', config(kv_capacity=M64))
    _fork_at_1000(t)
    t.cow("s1", 15, result={"ok": False, "error": "capacity"}, expect="TRACE-1")
    t.row("s1", table=range(16), frontier=1000)  # still the shared member
    t.cow("s1", 15, result={"ok": True, "page": 16})
    t.finish("s1")
    t.release("c0")
    return t


# -- 12. a failed activation leaves the source complete -----------------------------------------------------

def _refused_fork(t: Trace) -> None:
    t.activate("s0", 1000, 0)
    t.map("s0", 1000, result={"ok": True, "pages": list(range(16))})
    t.step("s0", 0, 1000)
    t.finish("s0", retain="c0")
    t.activate("s9", 3000, 0)  # 47 pages: one page left
    # a fork needs a tail copy + ceil(1100/64) - 16 = 2 reserved pages: refused
    t.activate("s1", 1000, 100, src="c0", result={"ok": False, "error": "capacity"})


def failed_activation_keeps_checkpoint() -> Trace:
    t = Trace("failed_activation_keeps_checkpoint",
              'A fork refused for capacity leaves its source a complete inactive checkpoint, observed member by '
              'member (store contract "任一失败都回到完整 inactive 终态", "任一 pool 失败都不能发布部分 Active '
              'bundle")', config(kv_capacity=M64))
    _refused_fork(t)
    t.ckpt("c0", table=range(16), frontier=1000, replicas=["device"] * 16)
    t.finish("s9")
    t.release("c0")
    t.pool(allocated=0, reserved=0, available=64)
    return t


def failed_activation_loses_source() -> Trace:
    t = Trace("AS-4_failed_activation_loses_source",
              'The engine had already moved c0\'s partial tail into the new sequence when the fork failed: the '
              'checkpoint it reports lost block 15 (store contract "Active publication 前，source 保持有效，任一'
              '失败都回到完整 inactive 终态")', config(kv_capacity=M64))
    _refused_fork(t)
    t.ckpt("c0", table=range(15), frontier=960, expect="AS-4")
    t.ckpt("c0", table=range(16), frontier=1000)  # the model's checkpoint is complete
    t.finish("s9")
    t.release("c0")
    return t


# -- 13. stale handles by generation --------------------------------------------------------------------------

def stale_entry_reused_page() -> Trace:
    t = Trace("PAGE-2_stale_entry_reused_page",
              'Stale block table: a truncate released s0\'s page 4, s1 then leased it, and s0\'s table still maps '
              'it — a stale handle by generation, although the id is leased again (store contract "generation '
              '防止 release/reuse 后的 stale handle")', config(kv_capacity=M64))
    t.activate("s0", 300, 200)
    t.map("s0", 400, result={"ok": True, "pages": [0, 1, 2, 3, 4, 5, 6]})
    t.step("s0", 0, 400)
    t.truncate("s0", 200)  # pages 4, 5, 6 go back to s0's reservation
    t.activate("s1", 64, 0)
    t.map("s1", 64, result={"ok": True, "pages": [4]})
    t.row("s0", table=[0, 1, 2, 3, 4], expect="PAGE-2")
    t.row("s0", table=[0, 1, 2, 3, -1], frontier=200)
    t.row("s1", table=[4])
    t.finish("s1")
    t.finish("s0")
    return t


# -- 16. destructive truncate into a forked prefix --------------------------------------------------------------

def _forked_256(t: Trace) -> None:
    t.activate("s0", 256, 0)
    t.map("s0", 256, result={"ok": True, "pages": [0, 1, 2, 3]})
    t.step("s0", 0, 256)
    t.finish("s0", retain="c0")
    t.activate("s1", 256, 0, src="c0")  # 4 shared members: entitlement 4, reservation 0
    t.pool(allocated=4, reserved=0, available=124)
    t.truncate("s1", 100)  # blocks 2, 3 (shared) unmapped: no lease freed, entitlement 2


def truncate_into_forked_prefix() -> Trace:
    t = Trace("truncate_into_forked_prefix",
              'Decision 16: a destructive truncate into a forked prefix unmaps shared members without freeing '
              'a lease; the entitlement shrinks by them, global available never moves, and a map beyond the '
              'smaller entitlement is refused (store contract "两者不改变其他 requests 可用的 global capacity")',
              config(kv_capacity=M128))
    _forked_256(t)
    t.pool(allocated=4, reserved=0, available=124)
    t.row("s1", table=[0, 1, -1], frontier=100)
    t.map("s1", 256, result={"ok": False, "error": "entitlement"})
    t.cow("s1", 1, result={"ok": True, "page": 4})  # 36 columns copied, page from global available
    t.pool(allocated=5, reserved=0, available=123)
    t.step("s1", 100, 128)
    t.finish("s1")
    t.release("c0")
    t.pool(allocated=0, reserved=0, available=128)
    return t


def map_beyond_shrunk_entitlement() -> Trace:
    t = Trace("ENT-2_map_beyond_shrunk_entitlement",
              'After truncating into its forked prefix, the engine maps s1 back to 256 tokens as if the unmapped '
              'shared pages still counted toward its entitlement, taking 2 pages of global capacity (store '
              'contract "两者不改变其他 requests 可用的 global capacity", "只有所需页数超过 entitlement 才失败")',
              config(kv_capacity=M128))
    _forked_256(t)
    t.map("s1", 256, result={"ok": True, "pages": [4, 5]}, expect="ENT-2")
    t.pool(allocated=4, reserved=0, available=124)
    t.row("s1", table=[0, 1, -1], frontier=100)
    t.finish("s1")
    t.release("c0")
    return t


# -- 17. a Move copies no payload -------------------------------------------------------------------------------

def move_copies_tail() -> Trace:
    t = Trace("CKPT-3_move_copies_tail",
              'The engine "moves" private checkpoint c0 but maps its partial tail to a fresh page 40, copying it '
              '(store contract "Move 不复制 KV payload，也不改变 logical page identity")', config(kv_capacity=M128))
    t.activate("s0", 1000, 24)
    t.map("s0", 1000, result={"ok": True, "pages": list(range(16))})
    t.step("s0", 0, 1000)
    t.finish("s0", retain="c0")
    t.activate("s0", 1000, 88, src="c0", keep_source=False,
               result={"ok": True, "rows": {"main": 0}, "pages": {"main": [*range(15), 40]}}, expect="CKPT-3")
    t.ckpt("c0", table=range(16), frontier=1000)  # not consumed: the Move was rejected
    t.activate("s0", 1000, 88, src="c0", keep_source=False)
    t.row("s0", table=range(16), frontier=1000)
    t.finish("s0")
    return t


# -- 14. facts logged with ok:false -------------------------------------------------------------------------------

def failed_launch_retried() -> Trace:
    t = Trace("failed_launch_retried",
              'A launch the engine logs as not started (ok: false) is not applied; its legal retry runs (store '
              'contract "Unit 成功后，Program 才推进 corresponding committed frontiers")', config(kv_capacity=M128))
    t.activate("s0", 100, 28)
    t.map("s0", 101)
    t.ev("launch", unit="u1", rows=[{"seq": "s0", "pool": "main", "write": [0, 100]}], result={"ok": False})
    t.step("s0", 0, 100)
    t.row("s0", frontier=100)
    t.finish("s0")
    return t


def failed_launch_writes_shared_page() -> Trace:
    t = Trace("WR-2_failed_launch_writes_shared_page",
              'The engine logs a launch as failed (ok: false), but the unit it tried writes block 15, shared '
              'with s2: the illegal write set is still a violation (store contract "存在多个 address-space '
              'references 的 full page immutable")', config(kv_capacity=M128))
    t.activate("s0", 1024, 0)
    t.prefill("s0", 1024)
    t.finish("s0", retain="c0")
    t.activate("s1", 1024, 64, src="c0")
    t.activate("s2", 1024, 64, src="c0")
    t.release("c0")
    t.truncate("s1", 1000)
    t.ev("launch", "WR-2", unit="u9", rows=[{"seq": "s1", "pool": "main", "write": [1000, 1001]}],
         result={"ok": False, "error": "preempted"})
    t.row("s1", frontier=1000)
    t.finish("s2")
    t.finish("s1")
    return t


# -- 6. growth step size is the engine's ----------------------------------------------------------------------------

GROWTH = dict(max_concurrency=2, kv_capacity=M64, prefill_chunk=128,
              kv_lease_growth={"window": 128, "cushion_pages": 1})


def growth_engine_steps() -> Trace:
    t = Trace("growth_engine_steps",
              'kv_lease_growth with the engine\'s own step sizes: it grows s0 one page at a time (to 24, then to 26) '
              'where the model\'s rung would take the whole window, never beyond frontier + window + cushion '
              '(store contract "在每个 decode-round 边界按需扩充该 window"; decision 25)', config(**GROWTH))
    t.activate("s0", 1280, 2816)  # ceil(1408/64) + 1 = 23 pages
    t.prefill("s0", 1280)
    t.advance("s0", 1280, 1344)
    t.advance("s0", 1344, 1408)  # 22 pages
    t.grow("s0", result={"ok": True, "entitlement": {"main": 24}})  # bound ceil(1536/64) + 1 = 25
    t.pool(allocated=22, reserved=2, available=40)
    t.advance("s0", 1408, 1472)  # 23 pages
    t.grow("s0", result={"ok": True, "entitlement": {"main": 26}})  # bound ceil(1600/64) + 1 = 26
    t.pool(allocated=23, reserved=3, available=38)
    t.finish("s0")
    t.pool(allocated=0, reserved=0, available=64)
    return t


def growth_beyond_capacity() -> Trace:
    t = Trace("TRACE-1_growth_beyond_capacity",
              'The engine reports an accepted growth of s0 to 30 pages while only 1 page is available: the '
              'window it claims cannot be covered (store contract "池已无法再扩充该 window 时，request 在 window '
              '覆盖的 frontier 上以 length 结束")', config(**GROWTH))
    t.activate("s1", 2560, 0)
    t.prefill("s1", 2560)
    t.finish("s1", retain="c1")  # 40 pages
    t.activate("s0", 1280, 2816)  # 23 pages: 1 available
    t.prefill("s0", 1280)
    t.grow("s0", result={"ok": True, "entitlement": {"main": 30}}, expect="TRACE-1")
    t.pool(allocated=60, reserved=3, available=1)
    t.finish("s0")
    t.release("c1")
    return t


# -- 5. bounded completion in every pool that writes ------------------------------------------------------------

DFLASH_GROWTH = dict(max_concurrency=2, kv_capacity=M64, prefill_chunk=128,
                     backend={"kind": "dflash", "full_layers": 1}, kv_lease_growth={"window": 128, "cushion_pages": 2})


def _bounded_dflash(t: Trace) -> None:
    """s0 (Main + Draft Full) grows no further: bounded completion at the window's frontier 1408."""
    t.activate("s1", 2560, 0)
    t.prefill("s1", 2560)  # 40 Main pages
    t.finish("s1", retain="c1")
    # s0: entitlement ceil((1280 + 128)/64) + 2 cushion pages = 24 per pool; Main has 24 available
    t.activate("s0", 1280, 2816)
    t.prefill("s0", 1280)
    t.prefill("s0", 1280, pool="draft_full")
    # the whole window is already held and nothing is available: the window ends at (24 - 2) * 64 = 1408
    t.grow("s0", result={"ok": False, "bounded_at": 1408})


def bounded_completion_every_pool() -> Trace:
    t = Trace("bounded_completion_every_pool",
              'Bounded completion with a 2-page cushion: the request completes at the window\'s frontier 1408 in '
              'Main and Draft Full; the cushion covers the step about to launch at 1408 and one forced control '
              'span after it (store contract "cushion 是 reservation 中 cache 不得占用的一段，它保证「即将 launch 的'
              '那一步」以及一次 forced control span 已被覆盖")',
              config(**DFLASH_GROWTH))
    _bounded_dflash(t)
    for a, b in ((1280, 1344), (1344, 1408), (1408, 1472)):  # the last step starts at F: the cushion's
        t.advance("s0", a, b)
        t.advance("s0", a, b, pool="draft_full")
    t.advance("s0", 1472, 1476)  # the one forced control span the cushion also covers
    t.row("s0", frontier=1476)
    t.row("s0", "draft_full", frontier=1472)
    t.finish("s0")
    t.release("c1")
    t.pool(allocated=0, reserved=0, available=64)
    return t


def draft_full_write_after_bounded_completion() -> Trace:
    t = Trace("ENT-3_draft_full_write_after_bounded_completion",
              'After bounded completion at 1408 the engine keeps appending draft context: after the step at 1408 '
              'and one forced control span, a third Draft Full write starting at 1480, still inside the cushion '
              '(store contract "request 在 window 覆盖的 frontier 上以 length 结束（bounded completion）", "cushion '
              '... 保证「即将 launch 的那一步」以及一次 forced control span 已被覆盖")',
              config(**DFLASH_GROWTH))
    _bounded_dflash(t)
    t.advance("s0", 1280, 1408, pool="draft_full")
    t.advance("s0", 1408, 1472, pool="draft_full")  # the step about to launch at F
    t.advance("s0", 1472, 1480, pool="draft_full")  # the one forced control span
    u = t.unit()
    t.launch(u, [("s0", "draft_full", 1480, 1481)], expect="ENT-3")
    t.row("s0", "draft_full", frontier=1480)
    t.fail(u)  # recovery adopted the launch (the unit ran, as the engine says); the engine drops its result
    t.finish("s0")
    t.release("c1")
    return t


# -- 7. writes beyond S ----------------------------------------------------------------------------------------------

S4000 = dict(max_context=4000, kv_capacity=M128)  # L = ceil(4000/64) = 63 pages: the last page has 32 spare columns


def writes_up_to_s() -> Trace:
    t = Trace("writes_up_to_s",
              'S = 4000 is not a page multiple: the last page maps positions up to 4032, but the sequence writes '
              'and commits exactly up to S (store contract "Page rounding 只增加 physical padding， 不会扩大单 '
              'sequence 的 logical ceiling (S)")', config(**S4000))
    t.activate("s0", 3900, 100)
    t.prefill("s0", 3900)
    t.advance("s0", 3900, 4000)
    t.row("s0", frontier=4000)
    t.finish("s0")
    return t


def write_beyond_s() -> Trace:
    t = Trace("AS-6_write_beyond_s",
              'An off-by-one stop condition: the engine writes position 4000 of a sequence whose ceiling is S = 4000, '
              'into the padding of its last page (store contract "不会扩大单 sequence 的 logical ceiling (S)")',
              config(**S4000))
    t.activate("s0", 3900, 100)
    t.prefill("s0", 3900)
    t.advance("s0", 3900, 4000)
    u = t.unit()
    t.launch(u, [("s0", "main", 4000, 4001)], expect="AS-6")
    t.row("s0", frontier=4000)
    t.fail(u)  # recovery adopted the launch (the unit ran, as the engine says); the engine drops its result
    t.finish("s0")
    return t


# -- 8. writes into pinned pages ---------------------------------------------------------------------------------------

def move_while_copying() -> Trace:
    t = Trace("move_while_copying",
              'A private checkpoint resumes by Move while a D2H copy of it is in flight; the sequence appends '
              'into its tail only after the copy is published (store contract "Copy 进行时 source 与 destination 都'
              '被 pin", "Private tail 的唯一 writer 可以继续在未保护 suffix append")', config(**HOST))
    t.checkpoint("s0", 200, "c0", [0, 1, 2, 3], budget=56)
    t.xfer("x1", "d2h", "c0", [0, 1, 2, 3], "reserve")
    t.xfer("x1", "d2h", "c0", [0, 1, 2, 3], "copy")
    t.activate("s0", 200, 56, src="c0", keep_source=False)  # reading pinned pages is legal
    t.xfer("x1", "d2h", "c0", [0, 1, 2, 3], "verify")
    t.xfer("x1", "d2h", "c0", [0, 1, 2, 3], "publish")
    t.step("s0", 200, 256)  # the pins are gone
    t.xfer("x1", "d2h", "c0", [0, 1, 2, 3], "release_source")  # s0 still reads them: the sources stay
    t.row("s0", table=[0, 1, 2, 3], frontier=256)
    t.pool(allocated=4, reserved=0, available=124)
    t.finish("s0")
    t.pool(allocated=0, reserved=0, available=128)
    return t


def write_into_pinned_page() -> Trace:
    t = Trace("REP-2_write_into_pinned_page",
              'The engine resumes c0 by Move during a D2H copy and appends into its tail page while the copy still '
              'pins it: the copied payload no longer matches what verify checks (store contract "Copy 进行时 '
              'source 与 destination 都被 pin", "source/destination pins")', config(**HOST))
    t.checkpoint("s0", 200, "c0", [0, 1, 2, 3], budget=56)
    t.xfer("x1", "d2h", "c0", [0, 1, 2, 3], "reserve")
    t.xfer("x1", "d2h", "c0", [0, 1, 2, 3], "copy")
    t.activate("s0", 200, 56, src="c0", keep_source=False)
    t.launch(t.unit(), [("s0", "main", 200, 201)], expect="REP-2")
    t.row("s0", table=[0, 1, 2, 3], frontier=200)
    t.xfer("x1", "d2h", "c0", [0, 1, 2, 3], "verify")
    t.xfer("x1", "d2h", "c0", [0, 1, 2, 3], "publish")
    t.finish("s0")
    return t


# -- 11. the provisional frontier
# -----------------------------------------------------------------------------------------

def verify_mapping_kept() -> Trace:
    t = Trace("verify_mapping_kept",
              'A verify maps Main to 190 before it launches; only after it ran and settled at 127 is the rejected '
              'tail trimmed (store contract "NeededPages_s= \\left\\lceil \\frac{\\max(CommittedFrontier_s,'
              'ProvisionalFrontier_s)}{P}", "不能为满足某个后续阶段更短的覆盖需求而提前裁剪 verify 的映射")',
              config(kv_capacity=M128))
    t.activate("s0", 125, 128)
    t.prefill("s0", 125)
    t.map("s0", 190)  # the verify's provisional frontier: 3 pages
    t.row("s0", table=[0, 1, 2], frontier=125)
    t.step("s0", 125, 190, commit=127)
    t.truncate("s0", 127)  # settle: the rejected tail page goes
    t.row("s0", table=[0, 1, -1], frontier=127)
    t.finish("s0")
    return t


def trim_mapping_verify_needs() -> Trace:
    t = Trace("UNIT-4_trim_mapping_verify_needs",
              'DFlash2: once the 100-token prompt is committed every target step is a verify; the engine maps Main '
              'to 190 for one, then trims back to the committed frontier 100 for a shorter draft-stage requirement '
              'before the verify launches (store contract, seed 000 L241 "不能为满足某个后续阶段更短的覆盖需求而提前'
              '裁剪 verify 的映射"; L239 "ProvisionalFrontier_s")',
              config(kv_capacity=M128, backend={"kind": "dflash2"}))
    t.activate("s0", 100, 128)
    t.prefill("s0", 100)
    t.map("s0", 190)
    t.truncate("s0", 100, expect="UNIT-4")
    t.row("s0", table=[0, 1], frontier=100)  # recovery adopted the trim: block 2 is unmapped, as the engine says
    t.map("s0", 190)
    t.step("s0", 100, 190, commit=104)
    t.finish("s0")
    return t


# -- 17. readers share a space
# ---------------------------------------------------------------------------------------------

def concurrent_readers() -> Trace:
    t = Trace("concurrent_readers",
              'Decision 17: two in-flight units read the same sequence (read-only rows) at once; mutation waits '
              'until both ended (store contract "从 block-table publication 到 GPU unit 完成", "logical memberships '
              '和 readable frontiers 对该 unit 冻结")', config(kv_capacity=M128))
    t.activate("s0", 128, 64)
    t.prefill("s0", 128)
    t.launch("r1", [("s0", "main")])
    t.launch("r2", [("s0", "main")])
    t.complete("r1", [])
    t.complete("r2", [("s0", "main", 128)])
    t.advance("s0", 128, 129)
    t.row("s0", frontier=129)
    t.finish("s0")
    return t


def write_while_read() -> Trace:
    t = Trace("UNIT-1_write_while_read",
              'Decision 17: a unit writes s0 while another unit still reads it: the reader\'s frozen frontier '
              'would move under it (store contract "logical memberships 和 readable frontiers 对该 unit 冻结")',
              config(kv_capacity=M128))
    t.activate("s0", 128, 64)
    t.prefill("s0", 128)
    t.map("s0", 129)
    t.launch("r1", [("s0", "main")])
    t.launch("w1", [("s0", "main", 128, 129)], expect="UNIT-1")
    t.row("s0", frontier=128)
    t.complete("r1", [])
    t.step("s0", 128, 129)
    t.finish("s0")
    return t


def growth_step_from_counters() -> Trace:
    t = Trace("growth_step_from_counters",
              'An accepted growth of unstated size: the engine leases 1 page, the model\'s own rung would take the '
              'whole window (2 pages); the pool counters the engine reports next show its step, which is adopted '
              '(store contract "在每个 decode-round 边界按需扩充该 window"; decision 25)', config(**GROWTH))
    t.activate("s0", 1280, 2816)  # ceil(1408/64) + 1 = 23 pages
    t.prefill("s0", 1280)
    t.advance("s0", 1280, 1344)
    t.advance("s0", 1344, 1408)  # 22 pages
    t.grow("s0", result={"ok": True})  # the engine: 23 -> 24 pages (the model's rung: the bound, 25)
    t.pool(allocated=22, reserved=2, available=40)
    t.advance("s0", 1408, 1472)
    t.pool(allocated=23, reserved=1, available=40)
    t.finish("s0")
    t.pool(allocated=0, reserved=0, available=64)
    return t


def growth_counters_shrink() -> Trace:
    t = Trace("TRACE-1_growth_counters_shrink",
              'After an accepted growth the engine\'s counters show s0 holding less than before it (reserved 1 '
              'where the entitlement of 23 pages leaves 2): a growth never shrinks the window (store contract '
              '"Entitlement 保证的是当前已取得的容量")', config(**GROWTH))
    t.activate("s0", 1280, 2816)
    t.prefill("s0", 1280)
    t.advance("s0", 1280, 1344)
    t.grow("s0", result={"ok": True})
    t.pool(allocated=21, reserved=1, available=42, expect="TRACE-1")
    t.pool(allocated=21, reserved=3, available=40)  # the model's own step stands
    t.finish("s0")
    return t


def legal() -> list[Trace]:
    return [restore_engine_destinations(), host_placement_engine_offsets(), fork_while_copying(),
            explicit_capacity_fp8(), context_ceiling(), cow_answers(), failed_activation_keeps_checkpoint(),
            truncate_into_forked_prefix(), failed_launch_retried(), growth_engine_steps(),
            bounded_completion_every_pool(), writes_up_to_s(), move_while_copying(), verify_mapping_kept(),
            concurrent_readers(), growth_step_from_counters()]


def violations() -> list[Trace]:
    return [restore_onto_leased_page(), offload_beyond_free_bytes(), drop_source_while_fork_reads(),
            fp8_counters_off_capacity(), activation_beyond_max_context(), cow_refused_with_capacity(),
            failed_activation_loses_source(), stale_entry_reused_page(), map_beyond_shrunk_entitlement(),
            move_copies_tail(), failed_launch_writes_shared_page(), growth_beyond_capacity(),
            draft_full_write_after_bounded_completion(), write_beyond_s(), write_into_pinned_page(),
            trim_mapping_verify_needs(), write_while_read(), growth_counters_shrink()]
