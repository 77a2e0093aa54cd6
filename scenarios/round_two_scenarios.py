"""Scenarios of the second seed-conformance reading: per finding, a correct engine that must pass (legal) and a
buggy engine that must be caught with the right rule at the right event (violation).

Each finding's decision is recorded in the rule catalogue (spec/rules); the scenario's source names the
decision and the store contract's words. Comments derive every observed value. Page ids and Host offsets a
trace leaves out are the engine's choice (DESIGN §6).

This module knows the kvtrace/1 vocabulary (tracebook) and the store contract; it never imports the model.
"""

from __future__ import annotations

from tracebook import Trace, config

BF16_PAGE = 131072  # one bf16 page: 1024 B/token/head x 2 heads x 64 tokens
M128 = {"tokens": 8192}
S4000 = dict(max_context=4000, kv_capacity=M128)  # L = 63 pages; the last page has 32 spare columns
HOST = dict(kv_capacity=M128, host_arena_bytes=8 * BF16_PAGE)



# -- 1. the effective output budget (decision 18) -------------------------------------------------------------

def effective_budget_clamped() -> Trace:
    t = Trace("effective_budget_clamped",
              'The engine logs the raw max_tokens (1000) of a 3900-token prompt under S = 4000 and clamps it to the '
              'effective output budget S - prompt = 100: the activation is legal, the reservation covers prompt + '
              'effective budget = S (store contract "默认 entitlement 预留 prompt 加整个 effective output 预算", '
              '"不会扩大单 sequence 的 logical ceiling (S)"; decision 18)', config(**S4000))
    t.activate("s0", 3900, 1000)  # entitlement ceil(min(4000, 4900)/64) = 63 pages
    t.pool(allocated=0, reserved=63, available=65)
    t.prefill("s0", 3900)  # ceil(3900/64) = 61 pages
    t.advance("s0", 3900, 4000)  # 63 pages: the whole entitlement, frontier exactly S
    t.row("s0", frontier=4000)
    t.pool(allocated=63, reserved=0, available=65)
    t.finish("s0")
    t.pool(allocated=0, reserved=0, available=128)
    return t


def clamped_budget_write_beyond_s() -> Trace:
    t = Trace("AS-6_clamped_budget_write_beyond_s",
              'The engine admits a 3900-token prompt with raw max_tokens 1000 (legal: S only caps it) but then '
              'decodes by the raw budget and writes position 4000 of a sequence whose ceiling is S = 4000: the '
              'violation is reported at that write, the activation and every other event stand (store contract '
              '"不会扩大单 sequence 的 logical ceiling (S)"; decision 18)', config(**S4000))
    t.activate("s0", 3900, 1000)
    t.prefill("s0", 3900)
    t.advance("s0", 3900, 4000)
    u = t.unit()
    t.launch(u, [("s0", "main", 4000, 4001)], expect="AS-6")
    t.row("s0", table=list(range(63)), frontier=4000)  # reported once: the frontier stays S
    t.pool(allocated=63, reserved=0, available=65)
    t.fail(u)  # error recovery adopted the launch (the unit ran, as the engine says); the engine drops its result
    t.finish("s0")
    return t


# -- 2. Host plans judged on the extent layout (decision 23) ---------------------------------------------------

def _fragmented_arena(t: Trace) -> None:
    """Arena of 4 strides; the engine names every offset, so the model knows the layout: c0's block 1 at
    stride 1, c1 at stride 2, holes [0, 1) and [3, 4): 2 strides of free bytes, no 2-stride hole."""
    S = BF16_PAGE
    t.checkpoint("s0", 128, "c0")  # 2 pages
    t.checkpoint("s1", 64, "c1")  # 1 page
    t.checkpoint("s2", 128, "c2")  # 2 pages
    t.offload("c0", [0, 1], offsets=[0, S])
    t.offload("c1", [0], offsets=[2 * S])
    t.drop_host("c0", [0])


def host_plan_on_known_layout() -> Trace:
    t = Trace("host_plan_on_known_layout",
              'The engine names its Host offsets, so the arena\'s extent layout is known; a later 1-page offload '
              'without offsets fits one of the 1-stride holes (any hole will do: placement is the engine\'s), and '
              'once c1\'s extent is dropped a 2-page plan finds its hole too (store contract "Plan 必须针对完整 '
              'release/allocation recipe 验证 extent geometry；free_bytes 只是占用摘要"; decision 23)',
              config(kv_capacity=M128, host_arena_bytes=4 * BF16_PAGE))
    _fragmented_arena(t)
    t.offload("c2", [1])  # 1 stride: a hole exists
    t.ckpt("c2", replicas=["device", "both"])
    t.drop_host("c1", [0])
    t.drop_host("c2", [1])
    t.offload("c2", [0, 1], offsets=[2 * BF16_PAGE, 3 * BF16_PAGE])  # the hole [2, 4) the drops opened
    t.ckpt("c2", replicas=["both", "both"])
    for ckpt in ("c0", "c1", "c2"):
        t.release(ckpt)
    t.pool(allocated=0, reserved=0, available=128)
    return t


def host_plan_without_offsets_on_fragmented_layout() -> Trace:
    t = Trace("REP-3_host_plan_without_offsets_on_fragmented_layout",
              'The engine plans a 2-page offload on free bytes (2 strides free) and does not say where it put it; '
              'the layout its own offsets gave has only 1-stride holes, so no placement exists (store contract '
              '"free_bytes 只是占用摘要，不是可分配性的充分证明"; decision 23)',
              config(kv_capacity=M128, host_arena_bytes=4 * BF16_PAGE))
    _fragmented_arena(t)
    t.offload("c2", [0, 1], expect="REP-3")
    t.ckpt("c2", replicas=["device", "device"])  # the rejected copy published nothing
    t.ckpt("c0", replicas=["device", "both"])
    for ckpt in ("c2", "c1", "c0"):
        t.release(ckpt)
    return t


# -- 3. Host replicas packed in logical block order (decision 22) ----------------------------------------------

def host_replica_logical_order() -> Trace:
    S = BF16_PAGE
    t = Trace("host_replica_logical_order",
              'The engine lists the blocks of an offload as [1, 0] and packs them in logical order: block 0 at the '
              'extent\'s first stride, block 1 at the next (store contract "Host replica 使用 logical-order packed '
              'HostKVPageLayout"; decision 22)', config(**HOST))
    t.checkpoint("s0", 128, "c0")
    t.offload("c0", [1, 0], offsets=[3 * S, 2 * S])
    t.ckpt("c0", replicas=["both", "both"])
    t.drop_device("c0", [0, 1])
    t.activate("s1", 128, 0, src="c0")  # both blocks restored from their packed Host extent
    t.row("s1", frontier=128)
    t.finish("s1")
    t.release("c0")
    t.pool(allocated=0, reserved=0, available=128)
    return t


def host_replica_reverses_logical_order() -> Trace:
    S = BF16_PAGE
    t = Trace("REP-3_host_replica_reverses_logical_order",
              'The engine lists the blocks of an offload as [1, 0] and packs them in that listed order, block 1 '
              'before block 0: the extent is not in logical block order (store contract "Host replica 使用 '
              'logical-order packed HostKVPageLayout"; decision 22)', config(**HOST))
    t.checkpoint("s0", 128, "c0")
    t.offload("c0", [1, 0], offsets=[2 * S, 3 * S], expect="REP-3")
    t.ckpt("c0", replicas=["device", "device"])  # nothing was published
    t.offload("c0", [0, 1], offsets=[2 * S, 3 * S])  # the engine's retry, in logical order
    t.ckpt("c0", replicas=["both", "both"])
    t.release("c0")
    return t


# -- 6. pins start at reserve (decision 24) ------------------------------------------------------------------------

def reads_while_copy_reserved() -> Trace:
    t = Trace("reads_while_copy_reserved",
              'A D2H copy of c0 is reserved but not yet copying: the transaction already pins c0\'s pages, which '
              'forbids releasing or writing them, not reading them: a Fork reads c0 before the copy starts, and '
              'c0 resumes by Move and appends only once the copy is published (store contract "Copy 进行时 source '
              '与 destination 都被 pin", "唯一有效 source 也不能先释放"; decision 24)', config(**HOST))
    t.checkpoint("s0", 200, "c0", [0, 1, 2, 3], budget=56)
    t.xfer("x1", "d2h", "c0", [0, 1, 2, 3], "reserve")
    t.activate("s1", 200, 0, src="c0")  # Fork: 3 shared full pages + a private copy of the 8-column tail
    t.row("s1", frontier=200)
    t.finish("s1")
    t.activate("s0", 200, 56, src="c0", keep_source=False)  # Move: the pinned pages stay where they are
    for phase in ("copy", "verify", "publish"):
        t.xfer("x1", "d2h", "c0", [0, 1, 2, 3], phase)
    t.step("s0", 200, 256)  # the pins are gone: the tail takes writes
    t.xfer("x1", "d2h", "c0", [0, 1, 2, 3], "release_source")  # s0 still reads them: the sources stay
    t.row("s0", table=[0, 1, 2, 3], frontier=256)
    t.pool(allocated=4, reserved=0, available=124)
    t.finish("s0")
    t.pool(allocated=0, reserved=0, available=128)
    return t


def drop_source_before_copy() -> Trace:
    t = Trace("REP-2_drop_source_before_copy",
              'The engine reserves a D2H copy of c0\'s blocks 0 and 1, then, before the copy starts, drops block '
              '0\'s Device replica because its Host replica is current: the transaction already pins it (store '
              'contract "Copy 完成前 ... 唯一有效 source 也不能先释放", "source/destination pins"; decision 24)',
              config(**HOST))
    t.checkpoint("s0", 128, "c0")
    t.offload("c0", [0])
    t.xfer("x1", "d2h", "c0", [0, 1], "reserve")
    t.drop_device("c0", [0], expect="REP-2")
    t.ckpt("c0", replicas=["both", "device"])  # the rejected drop changed nothing
    for phase in ("copy", "verify", "publish", "release_source"):
        t.xfer("x1", "d2h", "c0", [0, 1], phase)
    t.ckpt("c0", replicas=["host", "host"])
    t.release("c0")
    t.pool(allocated=0, reserved=0, available=128)
    return t


# -- 4. bounded growth under kv_lease_growth (decision 25) ------------------------------------------------------

GROWTH = dict(max_concurrency=2, kv_capacity={"tokens": 4096}, prefill_chunk=128,
              kv_lease_growth={"window": 128, "cushion_pages": 1})  # M = 64; window max(128, 128) tokens


def _decoding(t: Trace) -> None:
    """s0: prompt 1280, raw budget 2816 (ceiling S = 4096); entitlement ceil((1280 + 128)/64) + 1 = 23 pages;
    prefilled and decoded to 1408 (22 pages)."""
    t.activate("s0", 1280, 2816)
    t.prefill("s0", 1280)
    t.advance("s0", 1280, 1344)
    t.advance("s0", 1344, 1408)


def growth_to_the_window_bound() -> Trace:
    t = Trace("growth_to_the_window_bound",
              'kv_lease_growth: at each round boundary the engine grows s0 to exactly the current frontier + the '
              'bounded window + the cushion, stated once and once only visible in its counters; the rest of the '
              'output budget stays unleased (store contract "Generation 只租用「当前 frontier 加一个 bounded window'
              '（约 4096 tokens）加一个 per-lane cushion」的 page count"; decision 25)', config(**GROWTH))
    _decoding(t)
    t.grow("s0", result={"ok": True, "entitlement": {"main": 25}})  # ceil((1408 + 128)/64) + 1 = 25
    t.pool(allocated=22, reserved=3, available=39)
    t.advance("s0", 1408, 1472)
    t.advance("s0", 1472, 1536)  # 24 pages
    t.grow("s0", result={"ok": True})  # ceil((1536 + 128)/64) + 1 = 27
    t.pool(allocated=24, reserved=3, available=37)
    t.finish("s0")
    t.pool(allocated=0, reserved=0, available=64)
    return t


def growth_leases_whole_budget() -> Trace:
    t = Trace("ENT-5_growth_leases_whole_budget",
              'At a round boundary the engine grows s0\'s lease to the whole remaining output budget (64 pages, '
              'up to S) instead of frontier + window + cushion = 25 pages: the pages beyond the window are '
              'withheld from retained prefixes (store contract "window 之外、尚未取得的 output budget 不计入 active '
              'entitlement"; decision 25)', config(**GROWTH))
    _decoding(t)
    t.grow("s0", result={"ok": True, "entitlement": {"main": 64}}, expect="ENT-5")
    t.pool(allocated=22, reserved=1, available=41)  # the rejected growth changed nothing
    t.grow("s0", result={"ok": True, "entitlement": {"main": 25}})  # the engine's bounded retry
    t.pool(allocated=22, reserved=3, available=39)
    t.finish("s0")
    return t


def growth_beyond_window_in_counters() -> Trace:
    t = Trace("ENT-5_growth_beyond_window_in_counters",
              'The engine\'s accepted growth does not state its size; its pool counters then show s0 holding 64 '
              'pages (the whole output budget) where frontier + window + cushion allows 25 (store contract '
              '"Generation 只租用「当前 frontier 加一个 bounded window ... 加一个 per-lane cushion」的 page count"; '
              'decision 25)', config(**GROWTH))
    _decoding(t)
    t.grow("s0", result={"ok": True})
    t.pool(allocated=22, reserved=42, available=0, expect="ENT-5")
    t.pool(allocated=22, reserved=3, available=39)  # the model's own step (the bound) stands
    t.finish("s0")
    return t


# -- 5. truncate of a copy-pinned private page (decision 26) -----------------------------------------------------

def _moved_while_copying(t: Trace) -> None:
    """c0 (200 tokens on the engine's pages 0..3) is being copied to the Host (x1 reserved and copying) when
    s0 resumes it by Move (entitlement ceil(256/64) = 4 = membership: reservation 0), then truncates to 128:
    blocks 2 and 3, private and pinned by x1, are unmapped."""
    t.checkpoint("s0", 200, "c0", [0, 1, 2, 3], budget=56)
    t.xfer("x1", "d2h", "c0", [0, 1, 2, 3], "reserve")
    t.xfer("x1", "d2h", "c0", [0, 1, 2, 3], "copy")
    t.activate("s0", 200, 56, src="c0", keep_source=False)
    t.truncate("s0", 128)


def truncate_copy_pinned_page() -> Trace:
    t = Trace("truncate_copy_pinned_page",
              'A truncate unmaps two private pages a D2H copy still pins: their leases go back to the same '
              'reservation at once (allocated 4 -> 2, reserved 0 -> 2), never to global available, and the '
              'entitlement still covers 256 tokens; the page groups stay the copy\'s until it publishes (store '
              'contract "解除的 Device leases 回到 同一 active reservation，而不是全局 available capacity", '
              '"Copy 进行时 source 与 destination 都被 pin"; decision 26)', config(**HOST))
    _moved_while_copying(t)
    t.row("s0", table=[0, 1], frontier=128)
    t.pool(allocated=2, reserved=2, available=124)
    t.map("s0", 256, result={"ok": True, "pages": [4, 5]})  # within the entitlement; pages 2, 3 are still pinned
    t.step("s0", 128, 256)
    for phase in ("verify", "publish", "release_source"):  # blocks 0, 1 unchanged; 2, 3 published and reclaimed
        t.xfer("x1", "d2h", "c0", [0, 1, 2, 3], phase)
    t.row("s0", table=[0, 1, 4, 5], frontier=256)
    t.pool(allocated=4, reserved=0, available=124)
    t.finish("s0")
    t.pool(allocated=0, reserved=0, available=128)
    return t


def truncated_pinned_lease_to_global() -> Trace:
    t = Trace("TRACE-1_truncated_pinned_lease_to_global",
              'The engine returns the leases of two truncated pages a D2H copy still pins to global available '
              '(available 126) instead of to s0\'s reservation: other requests could take capacity s0 was '
              'guaranteed (store contract "解除的 Device leases 回到 同一 active reservation，而不是全局 available '
              'capacity"; decision 26)', config(**HOST))
    _moved_while_copying(t)
    t.pool(allocated=2, reserved=0, available=126, expect="TRACE-1")
    t.pool(allocated=2, reserved=2, available=124)
    for phase in ("verify", "publish", "release_source"):
        t.xfer("x1", "d2h", "c0", [0, 1, 2, 3], phase)
    t.finish("s0")
    t.pool(allocated=0, reserved=0, available=128)
    return t


def map_onto_pinned_page_group() -> Trace:
    t = Trace("REP-2_map_onto_pinned_page_group",
              'After the truncate, s0\'s reservation holds the two units again, but every free page group of the pool '
              'is still pinned by the in-flight D2H copy: the engine maps s0 anyway, onto a page group the copy is '
              'reading, instead of waiting for the copy to publish (store contract "Copy 进行时 source 与 destination '
              '都被 pin"; decision 26)', config(max_context=1024, max_concurrency=2, kv_capacity={"tokens": 1280},
                                                 host_arena_bytes=8 * BF16_PAGE))  # M = 20
    t.checkpoint("s0", 200, "c0", [0, 1, 2, 3], budget=56)
    t.xfer("x1", "d2h", "c0", [0, 1, 2, 3], "reserve")
    t.xfer("x1", "d2h", "c0", [0, 1, 2, 3], "copy")
    t.activate("s0", 200, 56, src="c0", keep_source=False)
    t.activate("s1", 900, 124)  # 16 pages
    t.map("s1", 1024)  # allocated 20, available 0
    t.truncate("s0", 128)  # blocks 2, 3 back in s0's reservation; their page groups stay the copy's
    t.pool(allocated=18, reserved=2, available=0)
    t.map("s0", 256, result={"ok": True}, expect="REP-2")
    t.pool(allocated=18, reserved=2, available=0)  # the rejected map took nothing
    for phase in ("verify", "publish", "release_source"):
        t.xfer("x1", "d2h", "c0", [0, 1, 2, 3], phase)
    t.map("s0", 256)  # the copy published: the page groups are free again
    t.pool(allocated=20, reserved=0, available=0)
    t.finish("s0")
    t.finish("s1")
    return t


# -- 7. the automatic capacity curve is affine for every geometry (decision 21) --------------------------------

# FP8-E4M3FN-row256 with 3 KV heads: each scale slab holds 2 B x 64 x 3 = 384 B per page, no multiple of the
# 256-byte slab alignment. With each slab charged its span + 256 B, B(M) = B_min + (M - 64)·99072 B with B_min =
# 6342656 B is affine; F = B(100) + R + 1000 B with R = 1 MiB resolves M = 100. Rounding each span up instead
# measured B_step = 99328 B at M_min and bent the curve: that resolver lands on 99 and refuses the layout.
FP8_ODD = dict(kv_profile="fp8", model={"full_attention_layers": 1, "kv_heads": 3, "head_dim": 256},
               kv_capacity={"auto": {"free_bytes": 10958824, "headroom_bytes": 1048576}})


def auto_capacity_fp8_odd_heads() -> Trace:
    t = Trace("auto_capacity_fp8_odd_heads",
              'Automatic kv_capacity for FP8 with an odd KV-head count: the capacity curve is affine, M = 100 '
              'pages, and the pool admits exactly that much (store contract "affine SequenceCapacityCurve", '
              '"Automatic 选择"; decision 21)', config(**FP8_ODD))
    t.pool(allocated=0, reserved=0, available=100)
    t.activate("s0", 4000, 96)  # 64 pages
    t.prefill("s0", 4000)  # 63 pages
    t.pool(allocated=63, reserved=1, available=36)
    t.finish("s0")
    t.pool(allocated=0, reserved=0, available=100)
    return t


def fp8_odd_heads_counters_off_capacity() -> Trace:
    t = Trace("CAP-3_fp8_odd_heads_counters_off_capacity",
              'The engine sized its FP8 pool (3 KV heads) on a slab-rounded, non-affine curve and reports 99 pages '
              'where the affine curve resolves 100: its counters do not sum to the capacity (store contract '
              '"allocated+reserved+available=capacity", "affine SequenceCapacityCurve"; decision 21)',
              config(**FP8_ODD))
    t.pool(allocated=0, reserved=0, available=99, expect="CAP-3")
    t.pool(allocated=0, reserved=0, available=100)
    t.activate("s0", 4000, 96)
    t.finish("s0")
    return t


# -- 10. verify after a cut (decision 27; found by `kvsim fuzz --machine host --budget 300 --seed 1`) ----------

def _cut_while_copying(t: Trace) -> None:
    """The fuzzer's counterexample, shortest form: c0 (200 tokens on pages 0..3) is copied to the Host (x1
    reserved and copying) when s0 resumes it by Move and truncates to 180: block 2 is cut to 52 columns (a
    new content epoch) while x1 still pins it, block 3 is unmapped (its lease back in s0's reservation)."""
    t.checkpoint("s0", 200, "c0", [0, 1, 2, 3], budget=56)
    t.xfer("x1", "d2h", "c0", [0, 1, 2, 3], "reserve")
    t.xfer("x1", "d2h", "c0", [0, 1, 2, 3], "copy")
    t.activate("s0", 200, 56, src="c0", keep_source=False)
    t.truncate("s0", 180)
    t.pool(allocated=3, reserved=1, available=124)


def verify_fails_after_cut() -> Trace:
    t = Trace("verify_fails_after_cut",
              'A destructive truncate cuts a page a D2H copy still pins (legal: pins forbid releasing and writing '
              'it, not moving its frontier); the engine\'s verify finds the copy\'s epoch stale and reports it '
              'failed, the copy is abandoned (nothing published, the Host extent freed, the pins dropped) and s0 '
              'rewrites its tail (store contract "verify epoch and committed coverage -> publish replica"; '
              'decision 27)', config(**HOST))
    _cut_while_copying(t)
    t.ev("xfer", xfer="x1", dir="d2h", ckpt="c0", pool="main", blocks=[0, 1, 2, 3], phase="verify",
         result={"ok": False, "error": "epoch"})
    t.advance("s0", 180, 256)  # block 3 from the reservation; block 2 takes writes again
    t.row("s0", frontier=256)
    t.pool(allocated=4, reserved=0, available=124)
    t.finish("s0", retain="c1")
    t.offload("c1", [0, 1, 2, 3])  # the arena is whole again: the abandoned copy's extent went back
    t.ckpt("c1", frontier=256, replicas=["both"] * 4)
    t.release("c1")
    t.pool(allocated=0, reserved=0, available=128)
    return t


def verify_passed_after_cut() -> Trace:
    t = Trace("PAGE-3_verify_passed_after_cut",
              'Regression trace of `kvsim fuzz --machine host --budget 300 --seed 1`: the engine reports the verify '
              'of a D2H copy as passed although a truncate cut block 2 to a new content epoch after it was copied '
              '(store contract "verify epoch and committed coverage -> publish replica", "replica.epoch=page.epoch"; '
              'decision 27)', config(**HOST))
    _cut_while_copying(t)
    t.xfer("x1", "d2h", "c0", [0, 1, 2, 3], "verify", expect="PAGE-3")
    t.row("s0", table=[0, 1, 2], frontier=180)  # the rejected verify changed nothing
    t.finish("s0")
    return t


# -- 11. a later copy keeps its source (decision 24; found by `kvsim fuzz --machine lockstep --seed 11`) ---------

def copy_after_release_source() -> Trace:
    t = Trace("copy_after_release_source",
              'Regression trace of `kvsim fuzz --machine lockstep --budget 900 --seed 11`, shortest form: block 0 '
              'of c0 has a published D2H copy (x1) when a second D2H copy of it (x2) is reserved; c0 is released '
              '(blocks 1..3 go back, block 0 waits for x2\'s pins); x1\'s release_source must keep block 0\'s '
              'Device replica, the source x2 reserved and still copies from (store contract "Copy 进行时 source 与 '
              'destination 都被 pin。Copy 完成前 ... 唯一有效 source 也不能先释放", "release source when no longer '
              'required"; decision 24)', config(**HOST))
    t.checkpoint("s0", 200, "c0", [0, 1, 2, 3])
    for phase in ("reserve", "copy", "verify", "publish"):  # x1 published, its release_source still to come
        t.xfer("x1", "d2h", "c0", [0], phase)
    t.ckpt("c0", replicas=["both", "device", "device", "device"])
    t.xfer("x2", "d2h", "c0", [0], "reserve")
    t.release("c0")
    t.pool(allocated=1, reserved=0, available=127)  # block 0: pinned by x2, reclaimed at its publish
    t.xfer("x1", "d2h", "c0", [0], "release_source")  # x2 pins block 0's Device source: it stays
    t.pool(allocated=1, reserved=0, available=127)
    for phase in ("copy", "verify", "publish"):
        t.xfer("x2", "d2h", "c0", [0], phase)
    t.pool(allocated=0, reserved=0, available=128)  # the last pin went: block 0 reclaimed
    t.xfer("x2", "d2h", "c0", [0], "release_source")
    t.pool(allocated=0, reserved=0, available=128)
    return t


def legal() -> list[Trace]:
    return [effective_budget_clamped(), host_plan_on_known_layout(), host_replica_logical_order(),
            reads_while_copy_reserved(), growth_to_the_window_bound(), truncate_copy_pinned_page(),
            verify_fails_after_cut(), auto_capacity_fp8_odd_heads(), copy_after_release_source()]


def violations() -> list[Trace]:
    return [clamped_budget_write_beyond_s(), host_plan_without_offsets_on_fragmented_layout(),
            host_replica_reverses_logical_order(), drop_source_before_copy(), growth_leases_whole_budget(),
            growth_beyond_window_in_counters(), truncated_pinned_lease_to_global(),
            map_onto_pinned_page_group(), verify_passed_after_cut(), fp8_odd_heads_counters_off_capacity()]
