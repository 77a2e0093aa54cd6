"""The violation scenarios: small engine traces in which exactly one event breaks the store contract.

Each is named after the rule it must trigger and models an engine bug of a known kind (use-after-free of
a page, stale table entries after a trim, a double release, publication out of order, ...). The bad event
carries ``expect=RULE``; the header's ``meta.expect`` then lists exactly what the replay must report.
The replay ignores a bad fact (the model does not apply it), so the events after it never depend on it:
they are other sequences' work or the same sequence's correct retry.

This module knows the kvtrace/1 vocabulary (tracebook) and the store contract; it never imports the model.
"""

from __future__ import annotations

from tracebook import Trace, config

BF16_PAGE = 131072  # one bf16 page: 1024 B/token/head x 2 heads x 64 tokens
M128 = {"tokens": 8192}
M64 = {"tokens": 4096}
MTP = {"kind": "mtp", "draft_window": 4}


def _checkpoint(t: Trace, seq: str, prompt: int, ckpt: str, budget: int = 24) -> None:
    """A request prefills `prompt` tokens and is retained as checkpoint `ckpt`."""
    t.activate(seq, prompt, budget)
    t.prefill(seq, prompt)
    t.finish(seq, retain=ckpt)


def cap_3() -> Trace:
    t = Trace("CAP-3_shared_pages_billed_twice",
              'Accounting bug (sglang#35270 kind): the engine bills the 15 shared pages of a fork once per holder, '
              'so its counters sum to 143 on a pool of 128 (store contract "allocated+reserved+available=capacity", '
              '"logical aliases不重复计费")', config(kv_capacity=M128))
    _checkpoint(t, "s0", 1000, "c0")  # pages 0..15
    t.activate("s1", 1020, 44, src="c0")  # tail copy on page 16; reservation 1
    t.pool(allocated=32, reserved=1, available=110, expect="CAP-3")  # true: 17 / 1 / 110
    t.pool(allocated=17, reserved=1, available=110)  # the rejected fact changed nothing
    t.step("s1", 1000, 1020)
    t.finish("s1")
    t.release("c0")
    t.pool(allocated=0, reserved=0, available=128)
    return t


def page_1() -> Trace:
    t = Trace("PAGE-1_map_hands_out_leased_page",
              'Use-after-free (vllm#37076 kind): the allocator hands s1 page 7, which still carries s0\'s block 1 '
              '(store contract "每个 Device page-group lease 在所属 pool 中至多承载一个 logical page replica")',
              config(kv_capacity=M128))
    t.activate("s0", 200, 56, result={"ok": True, "rows": {"main": 0}, "pages": {"main": []}})
    t.map("s0", 200, result={"ok": True, "pages": [4, 7, 9, 12]})
    t.step("s0", 0, 200)
    t.activate("s1", 100, 28, result={"ok": True, "rows": {"main": 1}, "pages": {"main": []}})
    t.map("s1", 100, result={"ok": True, "pages": [20, 7]}, expect="PAGE-1")
    t.row("s1", table=[-1, -1], frontier=0)  # the rejected fact changed nothing
    t.step("s0", 200, 256)
    t.row("s0", table=[4, 7, 9, 12], frontier=256)
    t.finish("s0")
    return t


def page_2() -> Trace:
    t = Trace("PAGE-2_stale_table_entry_after_truncate",
              'Stale block table (vllm#42273 kind): after a truncate released blocks 4..6, the engine\'s table '
              'still maps their page ids (store contract "generation 防止 release/reuse 后的 stale handle", '
              '"block table只是 active Device mapping 的执行镜像")', config(kv_capacity=M64))
    t.activate("s0", 300, 200)
    t.prefill("s0", 300)
    t.map("s0", 400)
    t.step("s0", 300, 400)  # pages 0..6
    t.truncate("s0", 200)  # pages 4, 5, 6 return to the reservation
    t.row("s0", table=range(7), frontier=200, expect="PAGE-2")
    t.row("s0", table=[0, 1, 2, 3, -1], frontier=200)  # the rejected fact changed nothing
    t.map("s0", 264)
    t.step("s0", 200, 264)
    t.row("s0", table=[0, 1, 2, 3, 4, -1], frontier=264)
    t.finish("s0")
    return t


def page_3() -> Trace:
    t = Trace("PAGE-3_offload_from_dropped_device_copy",
              'Stale offload (vllm#46951 kind): the engine starts a D2H copy of blocks whose Device replica was '
              'already dropped, so the copy would read a freed page (store contract "replica.epoch=page.epoch '
              '\\quad\\land\\quad replica.coverage\\ge n")',
              config(kv_capacity=M128, host_arena_bytes=8 * BF16_PAGE))
    _checkpoint(t, "s0", 200, "c0", budget=56)  # pages 0..3
    t.offload("c0", [0, 1, 2, 3])
    t.drop_device("c0", [0, 1, 2, 3])
    t.xfer("x1", "d2h", "c0", [0, 1], "reserve", expect="PAGE-3")
    t.ckpt("c0", table=[-1, -1, -1, -1], replicas=["host"] * 4)  # the rejected fact changed nothing
    t.release("c0")
    t.pool(allocated=0, reserved=0, available=128)
    return t


def as_1() -> Trace:
    t = Trace("AS-1_row_leased_twice",
              'Row recycling bug: the engine activates s1 on execution row 0 while s0 still holds it (store '
              'contract "每个 active address space lease 一行", "execution row 不回收")', config(kv_capacity=M128))
    t.activate("s0", 100, 28, result={"ok": True, "rows": {"main": 0}, "pages": {"main": []}})
    t.map("s0", 100, result={"ok": True, "pages": [0, 1]})
    t.step("s0", 0, 100)
    t.activate("s1", 100, 28, result={"ok": True, "rows": {"main": 0}, "pages": {"main": []}}, expect="AS-1")
    t.row("s0", table=[0, 1], frontier=100)  # the rejected fact changed nothing
    t.step("s0", 100, 101)
    t.finish("s0")
    return t


def as_2() -> Trace:
    t = Trace("AS-2_fork_frontier_rounded_to_960",
              'The engine reports a fork of F = 1000 at frontier 960, rounded down to the page boundary (store '
              'contract "Checkpoint frontier 不向下取整到 960", "Valid frontier精确到token")',
              config(kv_capacity=M128))
    _checkpoint(t, "s0", 1000, "c0")
    t.activate("s1", 1000, 64, src="c0")
    t.row("s1", table=[*range(15), 16], frontier=960, expect="AS-2")
    t.row("s1", table=[*range(15), 16], frontier=1000)  # the rejected fact changed nothing
    t.step("s1", 1000, 1001)
    t.finish("s1")
    t.release("c0")
    return t


def as_3() -> Trace:
    t = Trace("AS-3_table_aliases_other_sequence",
              'Aliasing table (vllm#33775 kind): s1\'s published row maps its block 1 to s0\'s page 1 instead of '
              'its own page 4 (store contract "block table只是 active Device mapping 的执行镜像")',
              config(kv_capacity=M128))
    t.activate("s0", 150, 42)
    t.map("s0", 150, result={"ok": True, "pages": [0, 1, 2]})  # the engine names its ids: no guesses
    t.step("s0", 0, 150)
    t.activate("s1", 100, 28)
    t.map("s1", 100, result={"ok": True, "pages": [3, 4]})
    t.step("s1", 0, 100)
    t.row("s1", table=[3, 1], expect="AS-3")
    t.row("s1", table=[3, 4], frontier=100)  # the rejected report changed nothing
    t.row("s0", table=[0, 1, 2], frontier=150)
    t.finish("s0")
    t.finish("s1")
    return t


def as_4() -> Trace:
    t = Trace("AS-4_bundle_published_without_mtp",
              'Partial activation: with MTP enabled the engine publishes s0 with a Main row and no MTP address '
              'space (store contract "任一 pool 失败都不能发布部分 Active bundle", "Active sequence 不能按 request '
              '临时关闭 selected backend")', config(kv_capacity=M128, backend=MTP))
    t.activate("s0", 100, 28, result={"ok": True, "rows": {"main": 0}, "pages": {"main": []}}, expect="AS-4")
    t.pool(allocated=0, reserved=0, available=128)  # the rejected fact changed nothing
    t.activate("s1", 100, 28, result={"ok": True, "rows": {"main": 0, "mtp": 0}, "pages": {"main": [], "mtp": []}})
    t.map("s1", 100, "main")
    t.map("s1", 100, "mtp")
    u = t.unit()
    t.launch(u, [("s1", "main", 0, 100), ("s1", "mtp", 0, 100)])
    t.complete(u, [("s1", "main", 100), ("s1", "mtp", 100)])
    t.finish("s1")
    return t


def as_5() -> Trace:
    t = Trace("AS-5_dflash2_maps_draft_full",
              'The engine treats DFlash2 like DFlash and maps Draft Full pages, a pool DFlash2\'s bundle does not '
              'hold: its draft context is cyclic state (store contract "DFlash2 的 draft context 全部写入固定 '
              'cyclic state，不需要 paged KV 物化")', config(kv_capacity=M128, backend={"kind": "dflash2"}))
    t.activate("s0", 200, 56)
    t.prefill("s0", 200)
    t.map("s0", 200, "draft_full", expect="AS-5")
    t.row("s0", table=[0, 1, 2, 3], frontier=200)  # the rejected fact changed nothing
    t.step("s0", 200, 201)
    t.finish("s0")
    return t


def wr_2() -> Trace:
    t = Trace("WR-2_write_shared_page_after_truncate",
              'Missing COW: two forks share a checkpoint\'s pages; after the checkpoint is released, s1 truncates '
              'into shared block 15 and writes it without a private copy (store contract "存在多个 address-space '
              'references 的 full page immutable；需要写入 shared partial tail 时必须先 COW")',
              config(kv_capacity=M128))
    _checkpoint(t, "s0", 1024, "c0", budget=64)  # 16 full pages
    t.activate("s1", 1024, 64, src="c0")
    t.activate("s2", 1024, 64, src="c0")
    t.release("c0")  # the 16 pages stay shared by s1 and s2
    t.truncate("s1", 1000)  # block 15 stays a shared, immutable member of s1
    t.launch(t.unit(), [("s1", "main", 1000, 1001)], expect="WR-2")
    t.row("s1", table=range(16), frontier=1000)  # the rejected fact changed nothing
    t.map("s2", 1025)
    t.step("s2", 1024, 1025)
    t.finish("s2")
    return t


def wr_3() -> Trace:
    t = Trace("WR-3_overwrite_checkpoint_protected_columns",
              'Missing COW under a live checkpoint: s1 truncates into block 15, shared with checkpoint c0, and '
              'writes columns c0 protects (also a write to a shared page) (store contract "Published '
              'checkpoint所需coverage不可被writer覆盖")', config(kv_capacity=M128))
    _checkpoint(t, "s0", 1024, "c0", budget=64)
    t.activate("s1", 1024, 64, src="c0")
    t.truncate("s1", 1000)
    t.launch(t.unit(), [("s1", "main", 1000, 1001)], expect=("WR-2", "WR-3"))
    t.row("s1", table=range(16), frontier=1000)  # the rejected fact changed nothing
    t.cow("s1", 15)  # what the engine should have done first: a private copy of the 40 columns
    t.step("s1", 1000, 1001)
    t.finish("s1")
    t.release("c0")
    return t


def wr_4() -> Trace:
    t = Trace("WR-4_fork_drops_partial_tail",
              'Page-rounded fork: activating from F = 1000 the engine maps only the 15 full pages, dropping the '
              '40-column tail as if the frontier were 960 (store contract "checkpoint frontier (F=1000)", '
              '"partial tail columns = 40")', config(kv_capacity=M128))
    _checkpoint(t, "s0", 1000, "c0")
    t.activate("s1", 1000, 64, src="c0",
               result={"ok": True, "rows": {"main": 1}, "pages": {"main": list(range(15))}}, expect="WR-4")
    t.pool(allocated=16, reserved=0, available=112)  # the rejected fact changed nothing
    t.activate("s2", 1000, 64, src="c0")
    t.row("s2", table=[*range(15), 16], frontier=1000)
    t.finish("s2")
    t.release("c0")
    return t


def ent_2_refused() -> Trace:
    t = Trace("ENT-2_map_refused_within_entitlement",
              'The engine refuses ensure_mapped_to_tokens(400) although s0\'s entitlement of 8 pages covers it '
              '(store contract "只有所需页数超过 entitlement 才失败")', config(kv_capacity=M64))
    t.activate("s0", 300, 200)  # ceil(500/64) = 8 pages
    t.prefill("s0", 300)
    t.map("s0", 400, result={"ok": False, "error": "entitlement"}, expect="ENT-2")
    t.row("s0", table=range(5), frontier=300)  # the rejected fact changed nothing
    t.finish("s0")  # the engine preempts s0
    t.pool(allocated=0, reserved=0, available=64)
    return t


def ent_2_beyond() -> Trace:
    t = Trace("ENT-2_map_beyond_entitlement",
              'The engine maps 600 tokens (10 pages) for s0 whose entitlement is 8 pages, taking pages from '
              'other requests\' capacity (store contract "新增页只把当前 address 的 reservation 转成 allocation")',
              config(kv_capacity=M64))
    t.activate("s0", 300, 200)
    t.prefill("s0", 300)  # pages 0..4
    t.map("s0", 600, result={"ok": True, "pages": [5, 6, 7, 8, 9]}, expect="ENT-2")
    t.row("s0", table=range(5), frontier=300)  # the rejected fact changed nothing
    t.step("s0", 300, 301)
    t.finish("s0")
    return t


GROWTH = dict(max_concurrency=2, kv_capacity=M64, prefill_chunk=128,
              kv_lease_growth={"window": 128, "cushion_pages": 1})


def ent_3_bounded() -> Trace:
    t = Trace("ENT-3_write_after_bounded_completion",
              'Shortfall escaping a step: growth was refused with bounded completion at 1472, the cushion covered '
              'the step in progress, yet the engine launches a decode step writing position 1536 (store contract '
              '"request 在 window 覆盖的 frontier 上以 length 结束（bounded completion）", '
              '"shortfall不通过异常离开该步")',
              config(**GROWTH))
    _checkpoint(t, "s1", 2560, "c1", budget=0)  # 40 pages retained; 24 available
    t.activate("s0", 1344, 2752)  # ceil(1472/64) + 1 = 24 pages: the rest of the pool
    t.prefill("s0", 1344)
    t.grow("s0", result={"ok": True})  # 128-token rung: 24 pages, held
    t.advance("s0", 1344, 1408)
    t.grow("s0", result={"ok": True})  # 64-token rung: 24 pages, held
    t.advance("s0", 1408, 1472)
    t.grow("s0", result={"ok": False, "bounded_at": 1472})  # 64-token rung needs 25 pages; window ends at 1472
    t.advance("s0", 1472, 1536)
    t.launch(t.unit(), [("s0", "main", 1536, 1537)], expect="ENT-3")
    t.row("s0", frontier=1536)  # the rejected fact changed nothing
    t.release("c1")
    return t


def ent_3_grow_in_step() -> Trace:
    t = Trace("ENT-3_grow_inside_a_step",
              'The engine extends s0\'s kv_lease_growth window while s0\'s decode unit is in flight instead of at '
              'the round boundary (store contract "在每个 decode-round 边界按需扩充该 window")', config(**GROWTH))
    t.activate("s0", 1280, 2816)  # ceil(1408/64) + 1 = 23 pages
    t.prefill("s0", 1280)
    u = t.unit()
    t.map("s0", 1344)
    t.launch(u, [("s0", "main", 1280, 1344)])
    t.grow("s0", expect="ENT-3")
    t.pool(allocated=21, reserved=2, available=41)  # the rejected fact changed nothing
    t.complete(u, [("s0", "main", 1344)])
    t.grow("s0", result={"ok": True})  # at the boundary: 24 pages
    t.finish("s0")
    return t


def unit_1() -> Trace:
    t = Trace("UNIT-1_map_while_unit_in_flight",
              'The engine materializes s0\'s next prefill chunk and republishes its table while s0\'s unit is in '
              'flight (store contract "从 block-table publication 到 GPU unit 完成", "replay in-flight期间不得改写'
              '同一 row")', config(kv_capacity=M128))
    t.activate("s0", 300, 100)
    t.map("s0", 128)
    u = t.unit()
    t.launch(u, [("s0", "main", 0, 128)])
    t.map("s0", 256, expect="UNIT-1")
    t.row("s0", table=[0, 1, -1], frontier=0)  # the rejected fact changed nothing
    t.complete(u, [("s0", "main", 128)])
    t.map("s0", 256)
    t.step("s0", 128, 256)
    t.row("s0", table=[0, 1, 2, 3], frontier=256)
    t.finish("s0")
    return t


def unit_2() -> Trace:
    t = Trace("UNIT-2_commit_beyond_written_extent",
              'A verify unit wrote [100, 104) but the engine publishes frontier 106, exposing two positions no '
              'unit wrote (store contract "Unit 成功后，Program 才推进 corresponding committed frontiers")',
              config(kv_capacity=M128))
    t.activate("s1", 64, 64)
    t.prefill("s1", 64)
    t.activate("s0", 100, 28)
    t.prefill("s0", 100)
    u = t.unit()
    t.launch(u, [("s0", "main", 100, 104)])
    t.complete(u, [("s0", "main", 106)], expect="UNIT-2")
    t.row("s0", frontier=106)  # recovery adopted the frontier the engine published
    t.map("s1", 65)
    t.step("s1", 64, 65)
    t.finish("s1")
    return t


def unit_3() -> Trace:
    t = Trace("UNIT-3_rewrite_committed_position",
              'Off-by-one decode position: the step writes [99, 101) and so overwrites committed position 99 '
              '(store contract "Private tail 的唯一 writer 可以继续在未保护 suffix append")', config(kv_capacity=M128))
    t.activate("s0", 100, 28)
    t.prefill("s0", 100)
    u = t.unit()
    t.launch(u, [("s0", "main", 99, 101)], expect="UNIT-3")
    t.row("s0", frontier=100)  # not committed yet
    t.complete(u, [("s0", "main", 101)])  # recovery adopted the launch: the unit ran and commits, as the engine says
    t.step("s0", 101, 102)
    t.finish("s0")
    return t


def trim_before_verify_settles() -> Trace:
    t = Trace("UNIT-1_trim_before_verify_settles",
              'The engine trims Main\'s rejected tail page while the verify unit is still in flight, before its '
              'accepted frontier is committed: the space is frozen until the unit completes, and truncate happens '
              'at a GPU boundary (store contract, seed 000 L251 "logical memberships 和 readable frontiers 对该 unit '
              '冻结", L254 "Mapping、frontier commit、truncate 和 row recycling 都发生在 GPU boundary"; the settle '
              'order of L241 "等待 GPU 工作完成后" is the same clause, judged once as UNIT-1)',
              config(kv_capacity=M128, backend=MTP))
    t.activate("s0", 125, 64)
    t.map("s0", 125, "main")
    t.map("s0", 129, "mtp")
    u = t.unit()
    t.launch(u, [("s0", "main", 0, 125), ("s0", "mtp", 0, 125)])
    t.complete(u, [("s0", "main", 125), ("s0", "mtp", 125)])
    t.map("s0", 130, "main")
    u = t.unit()
    t.launch(u, [("s0", "main", 125, 130), ("s0", "mtp", 125, 130)])
    t.truncate("s0", 127, "main", expect="UNIT-1")
    t.row("s0", "main", table=[0, 1, 2], frontier=125)  # the rejected fact changed nothing
    t.complete(u, [("s0", "main", 127), ("s0", "mtp", 126)])
    t.truncate("s0", 127, "main")
    t.truncate("s0", 126, "mtp")
    t.row("s0", "main", table=[0, 1, -1], frontier=127)
    t.finish("s0")
    return t


HOST = dict(kv_capacity=M128, host_arena_bytes=8 * BF16_PAGE)


def rep_1() -> Trace:
    t = Trace("REP-1_release_source_before_publish",
              'Publication out of order (vllm PR #46278 kind): the D2H transfer frees the Device source before '
              'the Host replica is published (store contract "reserve destination -> copy page payload -> verify '
              'epoch and committed coverage -> publish replica -> release source")', config(**HOST))
    _checkpoint(t, "s0", 200, "c0", budget=56)
    for phase in ("reserve", "copy", "verify"):
        t.xfer("x1", "d2h", "c0", [0, 1, 2, 3], phase)
    t.xfer("x1", "d2h", "c0", [0, 1, 2, 3], "release_source", expect="REP-1")
    t.ckpt("c0", replicas=["device"] * 4)  # the rejected fact changed nothing
    t.xfer("x1", "d2h", "c0", [0, 1, 2, 3], "publish")
    return t


def rep_2() -> Trace:
    t = Trace("REP-2_drop_page_pinned_by_copy",
              'Eviction during an in-flight copy (vllm#46951 kind): block 1\'s Device replica is dropped while '
              'the D2H transfer copying it holds its pin (store contract "Copy 进行时 source 与 destination 都被 '
              'pin")', config(**HOST))
    _checkpoint(t, "s0", 200, "c0", budget=56)
    t.xfer("x1", "d2h", "c0", [0, 1, 2, 3], "reserve")
    t.xfer("x1", "d2h", "c0", [0, 1, 2, 3], "copy")
    t.drop_device("c0", [1], expect="REP-2")
    t.ckpt("c0", table=[0, 1, 2, 3], replicas=["device"] * 4)  # the rejected fact changed nothing
    for phase in ("verify", "publish", "release_source"):
        t.xfer("x1", "d2h", "c0", [0, 1, 2, 3], phase)
    t.release("c0")
    t.pool(allocated=0, reserved=0, available=128)
    return t


def rep_3() -> Trace:
    t = Trace("REP-3_host_plan_on_free_bytes_only",
              'The engine plans a 2-page offload because the Host arena has 2 pages of free bytes, but they are '
              'two separate 1-page extents: the packed extent it places at offset 0 overlaps c0\'s live block 1 '
              '(store contract "free_bytes 只是占用摘要，不是可分配性的充分证明", "Plan 必须针对完整 '
              'release/allocation recipe 验证 extent geometry")',
              config(kv_capacity=M128, host_arena_bytes=4 * BF16_PAGE))
    _checkpoint(t, "s0", 128, "c0", budget=0)  # 2 pages
    _checkpoint(t, "s1", 64, "c1", budget=0)  # 1 page
    _checkpoint(t, "s2", 128, "c2", budget=0)  # 2 pages
    t.offload("c0", [0, 1], offsets=[0, BF16_PAGE])  # Host extent [0, 2 strides)
    t.offload("c1", [0], offsets=[2 * BF16_PAGE])  # [2, 3)
    t.drop_host("c0", [0])  # free: [0, 1) and [3, 4): 2 strides of free bytes, largest extent 1
    t.offload("c2", [0, 1], offsets=[0, BF16_PAGE], expect="REP-3")
    t.ckpt("c2", replicas=["device", "device"])  # the rejected copy published nothing
    t.ckpt("c0", replicas=["device", "both"])
    t.release("c2")
    t.release("c1")
    t.release("c0")
    return t


def rep_4_device() -> Trace:
    t = Trace("REP-4_drop_only_device_replica",
              'Lost last replica (vllm#42571 kind): the engine frees the Device copy of a checkpoint block that '
              'was never offloaded: its only valid replica is lost (store contract "唯一有效 source 也不能先释放")',
              config(**HOST))
    _checkpoint(t, "s0", 200, "c0", budget=56)
    t.offload("c0", [0, 1, 2])
    t.drop_device("c0", [0, 1, 2])
    t.drop_device("c0", [3], expect="REP-4")
    # the rejected fact changed nothing
    t.ckpt("c0", table=[-1, -1, -1, 3], replicas=["host", "host", "host", "device"])
    t.release("c0")
    t.pool(allocated=0, reserved=0, available=128)
    return t


def rep_4_host() -> Trace:
    t = Trace("REP-4_drop_host_of_host_only_page",
              'Double free across tiers: after the Device copies were dropped, the engine also drops the Host '
              'copy of block 2, its only replica (store contract "它可以在 Device-only、Host-only 或 Both placements 下'
              '继续存在", "唯一有效 source 也不能先释放")', config(**HOST))
    _checkpoint(t, "s0", 200, "c0", budget=56)
    t.offload("c0", [0, 1, 2, 3])
    t.drop_device("c0", [0, 1, 2, 3])
    t.drop_host("c0", [2], expect="REP-4")
    t.ckpt("c0", replicas=["host"] * 4)  # the rejected fact changed nothing
    t.release("c0")
    t.pool(allocated=0, reserved=0, available=128)
    return t


def ckpt_1() -> Trace:
    t = Trace("CKPT-1_retain_without_state_image",
              'The engine retains s0 as a checkpoint although its StateImage was not saved, so the checkpoint is '
              'no complete continuation (store contract "Retain 只有在 Main、backend 与 StateImage 构成同一完整 '
              'continuation 时才能发布")', config(kv_capacity=M128))
    t.activate("s1", 64, 64)
    t.activate("s0", 300, 20)
    t.prefill("s0", 300)
    t.finish("s0", retain="c0", state_image=False, expect="CKPT-1")
    t.ckpt("c0", frontier=300)  # recovery adopted the claim: c0 is retained, as the engine says
    t.prefill("s1", 64)
    t.finish("s1")
    t.release("c0")
    return t


def ckpt_2_double() -> Trace:
    t = Trace("CKPT-2_double_release",
              'Double free (vllm#1556 kind): checkpoint c0 is released twice (store contract "Release 逐个解除 '
              'logical references，并只在最后引用消失时释放 physical replicas")', config(kv_capacity=M128))
    _checkpoint(t, "s0", 300, "c0")
    t.release("c0")
    t.release("c0", expect="CKPT-2")
    t.pool(allocated=0, reserved=0, available=128)
    return t


def ckpt_2_after_release() -> Trace:
    t = Trace("CKPT-2_activate_released_checkpoint",
              'A prefix index still lists checkpoint c0 after its release and activates s1 from it (store '
              'contract "Release 逐个解除 logical references", "Checkpoint可复用性由完整target continuation证明")',
              config(kv_capacity=M128))
    _checkpoint(t, "s0", 300, "c0")
    t.release("c0")
    t.activate("s1", 320, 64, src="c0", expect="CKPT-2")
    t.pool(allocated=0, reserved=0, available=128)  # the rejected fact changed nothing
    t.activate("s1", 320, 64)  # the engine falls back to a cold prefill
    t.prefill("s1", 320)
    t.finish("s1")
    return t


def ckpt_3() -> Trace:
    t = Trace("CKPT-3_fork_reuses_source_tail",
              'Move where Fork is required: the source checkpoint survives (keep_source), yet the engine maps its '
              'partial tail page 15 into s1 instead of copying it (store contract "Shared source或仍需保留的 private '
              'source使用 Fork", "Private source 在最终 post-state 中没有 surviving immutable reference 时，可以 '
              'Move")', config(kv_capacity=M128))
    _checkpoint(t, "s0", 1000, "c0")
    t.activate("s1", 1000, 64, src="c0",
               result={"ok": True, "rows": {"main": 0}, "pages": {"main": list(range(16))}}, expect="CKPT-3")
    t.ckpt("c0", table=range(16), frontier=1000)  # the rejected fact changed nothing
    t.activate("s1", 1000, 64, src="c0")
    t.row("s1", table=[*range(15), 16], frontier=1000)
    t.finish("s1")
    t.release("c0")
    return t


def cons_1() -> Trace:
    t = Trace("CONS-1_step_skips_a_position",
              'A decode step writes position 1001 while the committed frontier is 1000: the unit reads position '
              '1000, which holds no valid content (store contract "read domain 不超过该 sequence 的 frozen valid '
              'frontier")', config(kv_capacity=M128))
    t.activate("s0", 1000, 24)
    t.prefill("s0", 1000)
    u = t.unit()
    t.launch(u, [("s0", "main", 1001, 1002)], expect="CONS-1")
    t.row("s0", frontier=1000)  # not committed yet
    t.fail(u)  # recovery adopted the launch (the unit ran, as the engine says); the engine drops its result
    t.step("s0", 1000, 1001)
    t.finish("s0")
    return t


def trace_1_refusal() -> Trace:
    t = Trace("TRACE-1_activation_refused_with_capacity",
              'The engine refuses s1 for capacity while the pool has 120 pages available and a free row (store '
              'contract "active request 通过 reservation 获得不会被其他 request 使用的完成容量")',
              config(kv_capacity=M128))
    t.activate("s0", 300, 200)  # 8 pages
    t.activate("s1", 100, 28, result={"ok": False, "error": "capacity"}, expect="TRACE-1")
    t.pool(allocated=0, reserved=8, available=120)  # the rejected fact changed nothing
    t.prefill("s0", 300)
    t.finish("s0")
    t.activate("s1", 100, 28)
    t.prefill("s1", 100)
    t.finish("s1")
    return t


def trace_1_counters() -> Trace:
    t = Trace("TRACE-1_truncate_keeps_leases",
              'Accounting bug (TensorRT-LLM PR #12834 kind): after a truncate the engine still counts the '
              'unmapped pages as allocated instead of returning them to the reservation (store contract '
              '"dematerialize 把 lease 还回同一 reservation")', config(kv_capacity=M64))
    t.activate("s0", 300, 200)
    t.prefill("s0", 300)
    t.map("s0", 400)
    t.step("s0", 300, 400)
    t.truncate("s0", 200)
    t.pool(allocated=7, reserved=1, available=56, expect="TRACE-1")  # required: 4 / 4 / 56
    t.pool(allocated=4, reserved=4, available=56)  # the rejected fact changed nothing
    t.finish("s0")
    return t


def trace_2_moved() -> Trace:
    t = Trace("TRACE-2_activate_moved_checkpoint",
              'A prefix index keeps checkpoint c0 after a Move consumed it and activates s2 from it (store '
              'contract "Move 不复制 KV payload，也不改变 logical page identity": the pages now belong to s1)',
              config(kv_capacity=M128))
    _checkpoint(t, "s0", 300, "c0")
    t.activate("s1", 300, 64, src="c0", keep_source=False)
    t.activate("s2", 300, 64, src="c0", expect="TRACE-2")
    t.row("s1", table=range(5), frontier=300)  # the rejected fact changed nothing
    t.step("s1", 300, 301)
    t.finish("s1")
    return t


def trace_2_finished() -> Trace:
    t = Trace("TRACE-2_launch_finished_sequence",
              'A batch still carries s0 after it finished: the unit names an ended sequence (store contract '
              '"generation 防止 release/reuse 后的 stale handle": a finished sequence is a released handle)',
              config(kv_capacity=M128))
    t.activate("s0", 100, 28)
    t.activate("s1", 100, 28)
    t.prefill("s0", 100)
    t.prefill("s1", 100)
    t.finish("s0")
    t.launch(t.unit(), [("s1", "main", 100, 101), ("s0", "main", 100, 101)], expect="TRACE-2")
    t.row("s1", frontier=100)  # the rejected fact changed nothing
    t.step("s1", 100, 101)
    t.finish("s1")
    return t


def build() -> list[Trace]:
    return [cap_3(), page_1(), page_2(), page_3(), as_1(), as_2(), as_3(), as_4(), as_5(), wr_2(), wr_3(),
            wr_4(), ent_2_refused(), ent_2_beyond(), ent_3_bounded(), ent_3_grow_in_step(), unit_1(), unit_2(),
            unit_3(), trim_before_verify_settles(), rep_1(), rep_2(), rep_3(), rep_4_device(), rep_4_host(), ckpt_1(),
            ckpt_2_double(), ckpt_2_after_release(), ckpt_3(), cons_1(), trace_1_refusal(), trace_1_counters(),
            trace_2_moved(), trace_2_finished()]
