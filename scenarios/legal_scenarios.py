"""The legal scenarios: engine traces a correct store produces; each replays with no violation.

Every scenario is a realistic sequence of requests and facts (activate, map, launch/complete units,
finish ...) and uses `observe` to state the tables, frontiers and pool counters the store contract
requires at that point. The comments derive those values; pages are named by the ids a lowest-free
allocator hands out unless the trace carries the engine's own choice in a `result`.
Shared numbers: P = 64; a bf16 page of one full-attention layer with 2 KV heads at D = 256 holds
1024 B/token/head x 2 heads x 64 tokens = 131072 B; S = 4096 gives L = 64 logical pages.

This module knows the kvtrace/1 vocabulary (tracebook) and the store contract's arithmetic; it never
imports the model, so a scenario cannot agree with the model by construction.
"""

from __future__ import annotations

from tracebook import Trace, config

BF16_PAGE = 131072  # bytes of one bf16 page (see above)
K8V4_PAGE = 402 * 2 * 64  # K fp8-row256 + V nvfp4-G16 = 402 B/token/head: 51456 B


def fork_f1000() -> Trace:
    t = Trace("fork_f1000",
              'Fork at checkpoint frontier F = 1000: 15 shared full pages, the 40 committed tail columns copied '
              'into a private page, frontier 1000 never rounded to 960 (store contract "checkpoint frontier '
              '(F=1000)", "Immutable Fork 共享前 15 个完整 pages")',
              config(kv_capacity={"tokens": 8192}))  # M = 128
    t.activate("s0", 1000, 24)  # entitlement ceil(1024/64) = 16 pages, all reserved
    t.pool(allocated=0, reserved=16, available=112)
    t.prefill("s0", 1000)  # 16 pages (ids 0..15) materialized from the reservation
    t.row("s0", table=range(16), frontier=1000)
    t.pool(allocated=16, reserved=0, available=112)
    t.finish("s0", retain="c0")  # immutable checkpoint: 16 pages, frontier 1000 protected
    t.pool(allocated=16, reserved=0, available=112)
    # Fork: entitlement ceil((1020 + 44)/64) = 17; blocks 0..14 shared, block 15's 40 columns copied to
    # page 16 (from global available); reservation = 17 - 16 members = 1.
    t.activate("s1", 1020, 44, src="c0")
    t.row("s1", table=[*range(15), 16], frontier=1000)
    t.pool(allocated=17, reserved=1, available=110)
    t.map("s1", 1020)  # ceil(1020/64) = 16 pages: membership already covers it
    t.step("s1", 1000, 1020)  # the 20 new prompt tokens go into the private tail only
    t.row("s1", frontier=1020)
    # A second fork of the same checkpoint: its own tail copy (page 17), reservation 1.
    t.activate("s2", 1000, 64, src="c0")
    t.row("s2", table=[*range(15), 17], frontier=1000)
    t.pool(allocated=18, reserved=2, available=108)
    t.step("s2", 1000, 1001)
    t.map("s1", 1025)  # crossing the page boundary: page 18 from s1's own reservation
    t.step("s1", 1020, 1025)
    t.row("s1", table=[*range(15), 16, 18], frontier=1025)
    t.pool(allocated=19, reserved=1, available=108)
    t.finish("s1")  # its private pages 16 and 18 go; shared pages keep c0's and s2's references
    t.pool(allocated=17, reserved=1, available=110)
    t.row("s2", table=[*range(15), 17], frontier=1001)
    t.finish("s2")
    t.release("c0")
    t.pool(allocated=0, reserved=0, available=128)
    return t


def move_private_checkpoint() -> Trace:
    t = Trace("move_private_checkpoint",
              'A preempted request resumes by Move: its private checkpoint becomes active with the same pages '
              '(no copy) and appends in place from frontier 1000 (store contract "Private Move 可以从 position '
              '1000 原地继续", "Move 不复制 KV payload")',
              config(kv_capacity={"tokens": 8192}))  # M = 128
    t.activate("s0", 1000, 24)
    t.prefill("s0", 1000)  # pages 0..15
    t.finish("s0", retain="c0")
    t.pool(allocated=16, reserved=0, available=112)
    # Move (keep_source false): nothing else references the tail, so no copy; entitlement
    # ceil(1088/64) = 17, reservation 17 - 16 = 1.
    t.activate("s0", 1000, 88, src="c0", keep_source=False)
    t.row("s0", table=range(16), frontier=1000)
    t.pool(allocated=16, reserved=1, available=111)
    t.step("s0", 1000, 1024)  # columns 40..63 of the same tail page 15
    t.map("s0", 1025)  # page 16 from the reservation
    t.step("s0", 1024, 1025)
    t.row("s0", table=range(17), frontier=1025)
    t.pool(allocated=17, reserved=0, available=111)
    t.finish("s0", retain="c1")
    t.release("c1")
    t.pool(allocated=0, reserved=0, available=128)
    return t


def move_with_shared_prefix() -> Trace:
    t = Trace("move_with_shared_prefix",
              'Move of a checkpoint whose prefix is shared with an older checkpoint: the private pages move '
              '(same ids, no copy), the pages the older checkpoint still references stay shared and immutable '
              '(store contract "Private source 在最终 post-state 中没有 surviving immutable reference 时，可以 '
              'Move", "shared pages没有 writer")',
              config(kv_capacity={"tokens": 8192}))  # M = 128
    t.activate("s0", 130, 10)
    t.prefill("s0", 130)  # pages 0, 1, 2
    t.finish("s0", retain="c0")
    t.activate("s1", 200, 10, src="c0")  # shares 0, 1; tail copied to 3
    t.prefill("s1", 200, start=130)  # page 4
    t.finish("s1", retain="c1")  # c1: [0, 1, 3, 4]
    # Move c1: pages 3 and 4 are c1's alone and move; 0 and 1 stay shared with c0. Entitlement
    # ceil(300/64) = 5, reservation 5 - 4 = 1.
    t.activate("s1", 200, 100, src="c1", keep_source=False)
    t.row("s1", table=[0, 1, 3, 4], frontier=200)
    t.pool(allocated=5, reserved=1, available=122)
    t.advance("s1", 200, 260)  # appends in place into page 4, then page 5 from the reservation
    t.row("s1", table=[0, 1, 3, 4, 5], frontier=260)
    t.pool(allocated=6, reserved=0, available=122)
    t.finish("s1")  # pages 3, 4, 5 go; 0 and 1 keep c0's reference
    t.pool(allocated=3, reserved=0, available=125)
    t.release("c0")
    t.pool(allocated=0, reserved=0, available=128)
    return t


def mtp_speculative_round() -> Trace:
    t = Trace("mtp_speculative_round",
              'One MTP speculative round: the MTP draft maps ahead of Main (provisional lead), the verify unit '
              'writes both pools, settle commits each pool\'s accepted frontier, then trims the rejected tail '
              'pages back to the same reservations (store contract "MTP draft 期间 backend mapped extent可以'
              '暂时领先 Main", "投机终止先")',
              config(kv_capacity={"tokens": 8192}, backend={"kind": "mtp", "draft_window": 4}))
    # M = 128; MTP pages = M + C * ceil((K - 1)/P) = 128 + 4 * 1 = 132.
    # Entitlement: Main ceil((125 + 64)/64) = 3, MTP 3 + ceil(3/64) = 4.
    t.activate("s0", 125, 64)
    t.pool("main", allocated=0, reserved=3, available=125)
    t.pool("mtp", allocated=0, reserved=4, available=128)
    t.map("s0", 125, "main")
    t.map("s0", 125, "mtp")
    u = t.unit()
    t.launch(u, [("s0", "main", 0, 125), ("s0", "mtp", 0, 125)])
    t.complete(u, [("s0", "main", 125), ("s0", "mtp", 125)])
    # Draft: K = 4 draft positions [125, 129) need a third MTP page; Main stays at 2 pages.
    t.map("s0", 129, "mtp")
    t.row("s0", "mtp", table=[0, 1, 2], frontier=125)
    t.row("s0", "main", table=[0, 1, -1], frontier=125)
    u = t.unit()
    t.launch(u, [("s0", "mtp", 125, 129)])
    t.complete(u, [])  # draft KV is provisional: no frontier is published
    t.row("s0", "mtp", frontier=125)
    # Verify: the target checks [125, 130); MTP recomputes its KV over the same positions.
    t.map("s0", 130, "main")
    u = t.unit()
    t.launch(u, [("s0", "main", 125, 130), ("s0", "mtp", 125, 130)])
    # One draft accepted plus the bonus token: Main commits 127; MTP, one position behind, commits 126.
    t.complete(u, [("s0", "main", 127), ("s0", "mtp", 126)])
    t.row("s0", "main", frontier=127)
    t.row("s0", "mtp", frontier=126)
    # Trim after the commit: ceil(127/64) = ceil(126/64) = 2 pages stay; page 2 of each pool goes back to
    # that pool's reservation (allocated down, reserved up, available unchanged).
    t.truncate("s0", 127, "main")
    t.truncate("s0", 126, "mtp")
    t.row("s0", "main", table=[0, 1, -1], frontier=127)
    t.row("s0", "mtp", table=[0, 1, -1], frontier=126)
    t.pool("main", allocated=2, reserved=1, available=125)
    t.pool("mtp", allocated=2, reserved=2, available=128)
    t.finish("s0")
    t.pool("main", allocated=0, reserved=0, available=128)
    t.pool("mtp", allocated=0, reserved=0, available=132)
    return t


def dflash_draft_full() -> Trace:
    t = Trace("dflash_draft_full",
              'DFlash with one full-attention draft layer: a Draft Full pool of M pages with Main\'s entitlement; '
              'the draft context frontier lags Main and each pool commits separately (store contract '
              '"DFlash Full 通常落后于 Main", "Draft Full physical pages = M")',
              config(kv_capacity={"tokens": 8192}, backend={"kind": "dflash", "full_layers": 1}))
    # M = 128 for both pools; entitlement ceil((300 + 100)/64) = 7 pages in each.
    t.activate("s0", 300, 100)
    t.pool("main", allocated=0, reserved=7, available=121)
    t.pool("draft_full", allocated=0, reserved=7, available=121)
    t.prefill("s0", 300, pool="main")  # 5 Main pages
    t.prefill("s0", 256, pool="draft_full")  # the draft context so far: 4 Draft Full pages
    t.row("s0", "main", table=range(5), frontier=300)
    t.row("s0", "draft_full", table=[0, 1, 2, 3, -1], frontier=256)
    # Verify writes Main only [300, 308) and accepts 5 tokens; the draft context appends [256, 300).
    t.map("s0", 308, "main")
    t.step("s0", 300, 308, "main", commit=305)
    t.map("s0", 300, "draft_full")
    t.step("s0", 256, 300, "draft_full")
    t.row("s0", "main", frontier=305)
    t.row("s0", "draft_full", table=range(5), frontier=300)
    t.pool("main", allocated=5, reserved=2, available=121)
    t.pool("draft_full", allocated=5, reserved=2, available=121)
    t.finish("s0")
    t.pool("main", allocated=0, reserved=0, available=128)
    t.pool("draft_full", allocated=0, reserved=0, available=128)
    return t


def dflash2_main_only() -> Trace:
    t = Trace("dflash2_main_only",
              'DFlash2 (all draft layers local attention): no Draft Full pool, Main is the only growing pool '
              '(store contract "官方 DFlash2 配置的五层全部是 local attention，只需要 Main growing pool")',
              config(kv_capacity={"tokens": 8192}, backend={"kind": "dflash2"}))
    t.activate("s0", 200, 56)  # ceil(256/64) = 4 pages
    t.pool("main", allocated=0, reserved=4, available=124)
    t.prefill("s0", 200)
    t.map("s0", 208)
    t.step("s0", 200, 208, commit=204)  # verify of 8 positions, 4 accepted
    t.row("s0", table=range(4), frontier=204)
    t.pool("main", allocated=4, reserved=0, available=124)
    t.finish("s0")
    t.pool("main", allocated=0, reserved=0, available=128)
    return t


def lease_growth_bounded_completion() -> Trace:
    t = Trace("lease_growth_bounded_completion",
              'kv_lease_growth: the window grows at decode-round boundaries while the pool can cover it, then a '
              'retained prefix holds the rest, growth is refused and the request ends with length at the '
              'window\'s frontier 1472; the cushion covers the step about to launch (store contract "启用 '
              'ContextCacheOptions::kv_lease_growth", "bounded completion", "cushion 是 reservation 中 cache 不得占用的'
              '一段")',
              config(max_concurrency=2, kv_capacity={"tokens": 4096}, prefill_chunk=128,
                     kv_lease_growth={"window": 128, "cushion_pages": 1}))
    # M = 64; window = max(prefill_chunk, 128) = 128 tokens, cushion 1 page; decode rounds of 64 steps
    # (multi-step scheduling) are one unit each.
    # A prompt-only request (budget 0) prefills a 2560-token prefix that is kept as checkpoint c1:
    # entitlement min(40, ceil(2688/64) + 1) = 40 pages.
    t.activate("s1", 2560, 0)
    t.prefill("s1", 2560)
    t.finish("s1", retain="c1")
    t.pool(allocated=40, reserved=0, available=24)
    # s0: ceiling 4096, entitlement ceil((1280 + 128)/64) + 1 = 23 pages, not the whole budget.
    t.activate("s0", 1280, 2816)
    t.pool(allocated=40, reserved=23, available=1)
    t.prefill("s0", 1280)  # 20 pages
    # Round 1 at frontier 1280: ceil(1408/64) + 1 = 23 pages are already held.
    t.grow("s0", result={"ok": True})
    t.map("s0", 1344)
    t.step("s0", 1280, 1344)
    # Round 2 at 1344: ceil(1472/64) + 1 = 24 pages: grows by the last available page.
    t.grow("s0", result={"ok": True})
    t.pool(allocated=61, reserved=3, available=0)
    t.map("s0", 1408)
    t.step("s0", 1344, 1408)
    # Round 3 at 1408: the 128-token rung needs 25 pages (none available); the 64-token rung needs 24: held.
    t.grow("s0", result={"ok": True})
    t.map("s0", 1472)
    t.step("s0", 1408, 1472)
    # Round 4 at 1472: even the 64-token rung needs 25 pages: bounded completion at the window's frontier
    # (24 - 1 cushion page) * 64 = 1472; the cushion page covers the step about to launch.
    t.grow("s0", result={"ok": False, "bounded_at": 1472})
    t.map("s0", 1536)
    t.step("s0", 1472, 1536)
    t.row("s0", table=range(40, 64), frontier=1536)  # c1 holds pages 0..39
    t.pool(allocated=64, reserved=0, available=0)
    t.finish("s0")  # ends with `length` at the covered frontier
    t.pool(allocated=40, reserved=0, available=24)
    t.release("c1")
    t.pool(allocated=0, reserved=0, available=64)
    return t


def host_offload_restore() -> Trace:
    t = Trace("host_offload_restore",
              'A checkpoint is offloaded to the HostKVArena, its Device replicas dropped, and a Fork activation '
              'restores the missing Device replicas and copies the partial tail (store contract "restore '
              'required Host-only pages", "Logical descriptor 不构成第三份 payload")',
              config(kv_capacity={"tokens": 8192}, host_arena_bytes=8 * BF16_PAGE))
    t.activate("s0", 200, 56)  # 4 pages
    t.prefill("s0", 200)  # pages 0..3; block 3 holds 8 columns
    t.finish("s0", retain="c0")
    t.offload("c0", [0, 1, 2, 3])  # one Host extent of 4 page strides
    t.drop_device("c0", [0, 1, 2, 3])  # Host-only now: no Device page is leased
    t.pool(allocated=0, reserved=0, available=128)
    # Fork: blocks 0..2 restored to Device (ids 0, 1, 2), the tail's 8 columns copied to a private page
    # (id 3); entitlement ceil(256/64) = 4 = members, so nothing is reserved.
    t.activate("s1", 220, 36, src="c0")
    t.row("s1", table=[0, 1, 2, 3], frontier=200)
    t.pool(allocated=4, reserved=0, available=124)
    t.step("s1", 200, 220)
    t.drop_host("c0", [0, 1, 2])  # their Device replicas are current again
    t.finish("s1")  # page 3 goes; pages 0..2 stay with c0
    t.pool(allocated=3, reserved=0, available=125)
    t.release("c0")  # last references: Device pages 0..2 and c0's Host-only tail go
    t.pool(allocated=0, reserved=0, available=128)
    return t


def activation_refused_capacity() -> Trace:
    t = Trace("activation_refused_capacity",
              'A Fork activation is refused under capacity pressure and takes nothing; the checkpoint stays '
              'intact and a later activation from it succeeds (store contract "任一失败都回到完整 inactive '
              '终态", "Activation 必须为全部 enabled pools 原子取得")',
              config(kv_capacity={"tokens": 4096}))  # M = 64
    t.activate("s0", 1000, 24)
    t.prefill("s0", 1000)  # pages 0..15
    t.finish("s0", retain="c0")
    t.activate("s1", 2900, 100)  # entitlement ceil(3000/64) = 47
    t.prefill("s1", 2900)  # 46 pages (ids 16..61)
    t.pool(allocated=62, reserved=1, available=1)
    # s2 forks c0: a tail copy (1 page) + a reservation of ceil(1064/64) - 16 = 1 page > 1 available.
    t.activate("s2", 1010, 54, src="c0", result={"ok": False, "error": "capacity"})
    t.pool(allocated=62, reserved=1, available=1)  # nothing taken
    t.step("s1", 2900, 2901)
    t.finish("s1")
    t.pool(allocated=16, reserved=0, available=48)
    t.activate("s2", 1010, 54, src="c0")  # now admitted: the tail copy gets the lowest free id, 16
    t.row("s2", table=[*range(15), 16], frontier=1000)
    t.pool(allocated=17, reserved=1, available=46)
    t.step("s2", 1000, 1010)
    t.finish("s2")
    t.release("c0")
    t.pool(allocated=0, reserved=0, available=64)
    return t


def truncate_returns_leases() -> Trace:
    t = Trace("truncate_returns_leases",
              'Truncate unmaps trailing pages into the same active reservation: allocated goes down, reserved '
              'up, available is unchanged, and the last partial page stays (store contract "对 active address '
              'space，解除的 Device leases 回到 同一 active reservation", "最后一个部分页保留")',
              config(kv_capacity={"tokens": 4096}))  # M = 64
    t.activate("s0", 300, 200)  # entitlement ceil(500/64) = 8
    t.pool(allocated=0, reserved=8, available=56)
    t.prefill("s0", 300)  # 5 pages
    t.map("s0", 400)  # pages 5, 6
    t.step("s0", 300, 400)
    t.row("s0", table=range(7), frontier=400)
    t.pool(allocated=7, reserved=1, available=56)
    t.truncate("s0", 200)  # ceil(200/64) = 4 pages stay (block 3 partial); pages 4, 5, 6 dematerialize
    t.row("s0", table=[0, 1, 2, 3, -1, -1, -1], frontier=200)
    t.pool(allocated=4, reserved=4, available=56)
    t.map("s0", 264)  # block 4 again, from the same reservation: lowest free id 4
    t.step("s0", 200, 264)
    t.row("s0", table=range(5), frontier=264)
    t.pool(allocated=5, reserved=3, available=56)
    t.finish("s0")
    t.pool(allocated=0, reserved=0, available=64)
    return t


def prefix_chain_four_sequences() -> Trace:
    t = Trace("prefix_chain_four_sequences",
              'A conversation of four turns, each a Fork of the previous turn\'s checkpoint: full pages are '
              'shared down the chain, each partial tail is copied, and release frees a page only with its last '
              'reference (store contract "Shared source或仍需保留的 private source使用 Fork", "Release 逐个解除 '
              'logical references")',
              config(kv_capacity={"tokens": 8192}))  # M = 128
    t.activate("s0", 130, 10)  # 3 pages
    t.prefill("s0", 130)  # pages 0, 1, 2 (block 2: 2 columns)
    t.finish("s0", retain="c0")
    t.activate("s1", 200, 10, src="c0")  # shares 0, 1; tail copied to 3; entitlement 4
    t.row("s1", table=[0, 1, 3], frontier=130)
    t.prefill("s1", 200, start=130)  # block 3 on page 4
    t.finish("s1", retain="c1")  # c1: [0, 1, 3, 4], block 3 holds 8 columns
    t.activate("s2", 270, 10, src="c1")  # shares 0, 1, 3; tail copied to 5; entitlement 5
    t.row("s2", table=[0, 1, 3, 5], frontier=200)
    t.prefill("s2", 270, start=200)  # block 4 on page 6
    t.finish("s2", retain="c2")  # c2: [0, 1, 3, 5, 6], block 4 holds 14 columns
    t.activate("s3", 330, 10, src="c2")  # shares 0, 1, 3, 5; tail copied to 7; entitlement 6
    t.row("s3", table=[0, 1, 3, 5, 7], frontier=270)
    t.prefill("s3", 330, start=270)  # block 5 on page 8
    t.row("s3", table=[0, 1, 3, 5, 7, 8], frontier=330)
    t.pool(allocated=9, reserved=0, available=119)  # each shared page billed once
    t.finish("s3")  # 7, 8
    t.pool(allocated=7, reserved=0, available=121)
    t.release("c0")  # only page 2 loses its last reference
    t.pool(allocated=6, reserved=0, available=122)
    t.release("c1")  # page 4
    t.pool(allocated=5, reserved=0, available=123)
    t.release("c2")
    t.pool(allocated=0, reserved=0, available=128)
    return t


def auto_capacity() -> Trace:
    # B(M) = B_min + (M - M_min) B_step with B_min = 64 pages * 131072 B + two 256 B slab alignment allowances
    # + the I32 block table (4 rows * 64 * 4 B = 1024 B) = 8390144 B and B_step = 131072 B. With F = 22610944 B
    # and R = 1048576 B: M = min(256, 64 + floor((22610944 - 1048576 - 8390144)/131072)) = 64 + 100 = 164.
    t = Trace("auto_capacity",
              'Automatic kv_capacity: M = min(M_max, M_min + floor((F - R - B_min)/B_step)) = 164 pages from '
              'free and headroom bytes, and the pool admits exactly that much (store contract "Automatic '
              '选择", "B(M)=B_{min}+(M-M_{min})B_{step}")',
              config(kv_capacity={"auto": {"free_bytes": 22610944, "headroom_bytes": 1048576}}))
    t.pool(allocated=0, reserved=0, available=164)
    t.activate("s0", 4000, 96)  # ceil(4096/64) = 64 pages
    t.prefill("s0", 4000)  # 63 pages
    t.activate("s1", 3000, 1096)  # 64 pages
    t.pool(allocated=63, reserved=65, available=36)
    t.activate("s2", 2000, 2096, result={"ok": False, "error": "capacity"})  # 64 > 36
    t.finish("s0")
    t.pool(allocated=0, reserved=64, available=100)
    t.activate("s2", 2000, 2096)
    t.pool(allocated=0, reserved=128, available=36)
    t.prefill("s1", 3000)
    t.prefill("s2", 2000)
    t.finish("s1")
    t.finish("s2")
    t.pool(allocated=0, reserved=0, available=164)
    return t


def k8v4_profile() -> Trace:
    t = Trace("k8v4_profile",
              'The asymmetric K8V4 profile (402 B/token/head): a 4-page checkpoint fills a Host arena of '
              'exactly 4 K8V4 page strides (51456 B each), then a Move restores it (store contract "K8V4 是'
              '封闭的非对称 profile", "不能用 2 * vector_bytes 代替 K8V4 的非对称字节数")',
              config(kv_profile="k8v4", kv_capacity={"tokens": 8192}, host_arena_bytes=4 * K8V4_PAGE))
    t.activate("s0", 250, 6)  # 4 pages
    t.prefill("s0", 250)
    t.finish("s0", retain="c0")
    t.offload("c0", [0, 1, 2, 3])  # 4 * 51456 B: the whole arena
    t.drop_device("c0", [0, 1, 2, 3])
    t.pool(allocated=0, reserved=0, available=128)
    t.activate("s0", 250, 6, src="c0", keep_source=False)  # Move: all 4 pages restored, same identity
    t.row("s0", table=[0, 1, 2, 3], frontier=250)
    t.pool(allocated=4, reserved=0, available=124)
    t.step("s0", 250, 256)
    t.finish("s0", retain="c1")
    t.drop_host("c1", [0, 1, 2, 3])  # Device replicas are current: the Host copies may go
    t.release("c1")
    t.pool(allocated=0, reserved=0, available=128)
    return t


def xfer_phases() -> Trace:
    t = Trace("xfer_phases",
              'Phase-logged replacement transfers: D2H then H2D, each reserve destination -> copy -> verify '
              'epoch and coverage -> publish -> release source (store contract "reserve destination", "Copy '
              '进行时 source 与 destination 都被 pin")',
              config(kv_capacity={"tokens": 8192}, host_arena_bytes=8 * BF16_PAGE))
    t.activate("s0", 200, 56)
    t.prefill("s0", 200)  # pages 0..3
    t.finish("s0", retain="c0")
    t.xfer_all("x1", "d2h", "c0", [0, 1, 2, 3])  # its release_source drops the Device pages
    t.pool(allocated=0, reserved=0, available=128)
    t.xfer("x2", "h2d", "c0", [0, 1, 2, 3], "reserve")  # destination leases come from available
    t.pool(allocated=4, reserved=0, available=124)
    for phase in ("copy", "verify", "publish", "release_source"):
        t.xfer("x2", "h2d", "c0", [0, 1, 2, 3], phase)
    t.activate("s0", 200, 56, src="c0", keep_source=False)  # Move: every page already on Device
    t.row("s0", table=[0, 1, 2, 3], frontier=200)
    t.step("s0", 200, 256)
    t.finish("s0")
    t.pool(allocated=0, reserved=0, available=128)
    return t


def engine_results() -> Trace:
    t = Trace("engine_results",
              'An engine that logs its own choices: rows and page ids in activate/map results are arbitrary and '
              'non-sequential, and observed tables, frontiers and counters follow them (store contract '
              '"Physical IDs 可以任意排列", "table_rows[b] 为 compact row (b) 选择对应 active address-space row")',
              config(kv_capacity={"tokens": 8192}))  # M = 128
    t.activate("s0", 150, 100, result={"ok": True, "rows": {"main": 2}, "pages": {"main": []}})  # 4 pages
    t.map("s0", 150, result={"ok": True, "pages": [17, 3, 40]})
    t.row("s0", table=[17, 3, 40], frontier=0)
    t.step("s0", 0, 150)
    t.map("s0", 200, result={"ok": True, "pages": [9]})
    t.step("s0", 150, 200)
    t.row("s0", table=[17, 3, 40, 9, -1], frontier=200)
    t.activate("s1", 60, 40, result={"ok": True, "rows": {"main": 0}, "pages": {"main": []}})  # 2 pages
    t.map("s1", 60, result={"ok": True, "pages": [5]})
    t.step("s1", 0, 60)
    t.row("s1", table=[5, -1], frontier=60)
    t.pool(allocated=5, reserved=1, available=122)
    t.finish("s0", retain="c0")  # [17, 3, 40, 9], block 3 holds 8 columns
    # Fork: shared pages keep their ids; the engine puts the tail copy on page 63 and uses row 1.
    t.activate("s2", 210, 46, src="c0",
               result={"ok": True, "rows": {"main": 1}, "pages": {"main": [17, 3, 40, 63]}})
    t.row("s2", table=[17, 3, 40, 63], frontier=200)
    t.step("s2", 200, 210)
    t.pool(allocated=6, reserved=1, available=121)
    t.finish("s1")
    t.finish("s2")
    t.release("c0")
    t.pool(allocated=0, reserved=0, available=128)
    return t


def cow_after_truncate() -> Trace:
    t = Trace("cow_after_truncate",
              'A fork regenerates its last 24 tokens: truncating into a shared full page keeps it immutable, '
              'so the engine copies it (COW, 40 committed columns) before writing (store contract "需要写入 '
              'shared partial tail 时必须先 COW", "non-aligned writable tail先建立private COW page")',
              config(kv_capacity={"tokens": 8192}))  # M = 128
    t.activate("s0", 1024, 64)
    t.prefill("s0", 1024)  # 16 full pages
    t.finish("s0", retain="c0")
    t.activate("s1", 1024, 64, src="c0")  # page-aligned fork: all 16 pages shared, no copy; entitlement 17
    t.row("s1", table=range(16), frontier=1024)
    t.pool(allocated=16, reserved=1, available=111)
    t.truncate("s1", 1000)  # block 15 is shared with c0: it stays an immutable member
    t.row("s1", table=range(16), frontier=1000)
    t.cow("s1", 15)  # private copy of s1's 40 columns in block 15: page 16 from global available
    t.row("s1", table=[*range(15), 16], frontier=1000)
    t.pool(allocated=17, reserved=1, available=110)
    t.step("s1", 1000, 1024)
    t.map("s1", 1025)  # page 17 from the reservation
    t.step("s1", 1024, 1025)
    t.row("s1", table=[*range(15), 16, 17], frontier=1025)
    t.pool(allocated=18, reserved=0, available=110)
    t.finish("s1")
    t.release("c0")
    t.pool(allocated=0, reserved=0, available=128)
    return t


def private_after_release() -> Trace:
    t = Trace("private_after_release",
              'A fork outlives its source: once the checkpoint is released the fork is the pages\' only reference, '
              'so they are its private pages and it may cut and rewrite its tail without a copy (store contract '
              '"Release 逐个解除 logical references", "Private tail 的唯一 writer 可以继续在未保护 suffix append")',
              config(kv_capacity={"tokens": 8192}))  # M = 128
    t.activate("s0", 1024, 64)
    t.prefill("s0", 1024)  # 16 full pages 0..15
    t.finish("s0", retain="c0")
    t.activate("s1", 1024, 64, src="c0")  # page-aligned fork: all 16 shared; entitlement 17, reservation 1
    t.pool(allocated=16, reserved=1, available=111)
    t.release("c0")  # s1 is now every page's only reference: nothing is freed
    t.pool(allocated=16, reserved=1, available=111)
    t.truncate("s1", 1000)  # block 15 is private now: cut to 40 columns in place, no unmapping
    t.step("s1", 1000, 1001)  # written in place, no COW
    t.row("s1", table=range(16), frontier=1001)
    t.pool(allocated=16, reserved=1, available=111)
    t.finish("s1")
    t.pool(allocated=0, reserved=0, available=128)
    return t


def unit_fail_commits_nothing() -> Trace:
    t = Trace("unit_fail_commits_nothing",
              'A batched decode unit fails: no frontier moves and the rows unfreeze; the retry commits (store '
              'contract "部分 layers 已写但 unit 没有形成合法 commit 时，新 frontier 不可见")',
              config(kv_capacity={"tokens": 4096}))
    t.activate("s0", 100, 28)
    t.activate("s1", 63, 65)
    t.prefill("s0", 100)
    t.prefill("s1", 63)
    t.map("s1", 64)
    u = t.unit()
    t.launch(u, [("s0", "main", 100, 101), ("s1", "main", 63, 64)])
    t.fail(u)
    t.row("s0", frontier=100)
    t.row("s1", frontier=63)
    u = t.unit()
    t.launch(u, [("s0", "main", 100, 101), ("s1", "main", 63, 64)])
    t.complete(u, [("s0", "main", 101), ("s1", "main", 64)])
    t.map("s1", 65)  # s1 crosses into block 1
    u = t.unit()
    t.launch(u, [("s0", "main", 101, 102), ("s1", "main", 64, 65)])
    t.complete(u, [("s0", "main", 102), ("s1", "main", 65)])
    t.row("s0", table=[0, 1], frontier=102)
    t.row("s1", table=[2, 3], frontier=65)
    t.finish("s0")
    t.finish("s1")
    t.pool(allocated=0, reserved=0, available=64)
    return t


def refusals() -> Trace:
    t = Trace("refusals",
              'Requests a correct store refuses, each recorded as a refusal, not a violation: a prompt beyond '
              'max_context, a map beyond the entitlement, no free execution row, a checkpoint frontier beyond '
              'the prompt, growth with kv_lease_growth off (store contract "只有所需页数超过 entitlement 才失败")',
              config(max_context=2048, max_concurrency=2, kv_capacity={"tokens": 4096}))  # L = 32, M = 64
    t.activate("s0", 2100, 10, result={"ok": False, "error": "context"})
    t.activate("s0", 500, 100)  # ceil(600/64) = 10 pages
    t.prefill("s0", 500)  # 8 pages
    t.map("s0", 700, result={"ok": False, "error": "entitlement"})  # 11 > 10
    t.activate("s1", 300, 20)  # 5 pages
    t.activate("s2", 100, 20, result={"ok": False, "error": "rows"})  # C = 2 rows, both leased
    t.grow("s1", result={"ok": False})  # kv_lease_growth is off
    t.pool(allocated=8, reserved=7, available=49)
    t.finish("s0", retain="c0")
    t.activate("s3", 400, 100, src="c0", result={"ok": False, "error": "frontier"})  # 500 > 400
    t.activate("s3", 520, 40, src="c0")  # row 0 is free again; 7 shared pages + tail copy, entitlement 9
    t.row("s3", table=[*range(7), 8], frontier=500)
    t.prefill("s3", 520, start=500)  # block 8 on page 9
    t.finish("s3")
    t.finish("s1")
    t.release("c0")
    t.pool(allocated=0, reserved=0, available=64)
    return t


def batched_decode_nvfp4() -> Trace:
    t = Trace("batched_decode_nvfp4",
              'Three NVFP4 sequences decode in shared units; a row maps a new page only when it crosses a page '
              'boundary, and frontiers stay token-exact (store contract "Ordinary decode 通常只在跨越 page '
              'boundary 时 materialize 一个新 Main page")',
              config(kv_profile="nvfp4", kv_capacity={"tokens": 8192}))  # M = 128
    t.activate("s0", 62, 66)  # 2 pages
    t.activate("s1", 127, 65)  # 3 pages
    t.activate("s2", 64, 64)  # 2 pages
    t.pool(allocated=0, reserved=7, available=121)
    t.prefill("s0", 62)  # page 0
    t.prefill("s1", 127)  # pages 1, 2
    t.prefill("s2", 64)  # page 3
    f = {"s0": 62, "s1": 127, "s2": 64}
    for _ in range(3):
        for s in ("s0", "s1", "s2"):
            t.map(s, f[s] + 1)
        u = t.unit()
        t.launch(u, [(s, "main", f[s], f[s] + 1) for s in ("s0", "s1", "s2")])
        t.complete(u, [(s, "main", f[s] + 1) for s in ("s0", "s1", "s2")])
        f = {s: v + 1 for s, v in f.items()}
    # Round 1: s2 (64 -> 65) takes page 4; round 2: s1 (128 -> 129) takes page 5; round 3: s0 (64 -> 65)
    # takes page 6. Entitlements 2 + 3 + 2 = 7 pages, all materialized by the end.
    t.row("s0", table=[0, 6], frontier=65)
    t.row("s1", table=[1, 2, 5], frontier=130)
    t.row("s2", table=[3, 4], frontier=67)
    t.pool(allocated=7, reserved=0, available=121)
    for s in ("s0", "s1", "s2"):
        t.finish(s)
    t.pool(allocated=0, reserved=0, available=128)
    return t


def build() -> list[Trace]:
    return [fork_f1000(), move_private_checkpoint(), move_with_shared_prefix(), mtp_speculative_round(),
            dflash_draft_full(), dflash2_main_only(), lease_growth_bounded_completion(), host_offload_restore(),
            activation_refused_capacity(), truncate_returns_leases(), prefix_chain_four_sequences(),
            auto_capacity(), k8v4_profile(), xfer_phases(), engine_results(), cow_after_truncate(),
            private_after_release(), unit_fail_commits_nothing(), refusals(), batched_decode_nvfp4()]
