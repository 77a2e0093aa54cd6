"""Violation scenarios of error recovery: one cause, one finding (sim.recovery).

Each shows a false-alarm-shaped violation followed by the sequence's ordinary life. Where the engine's claim
determines the state, replay adopts it and the rest of the trace is judged as usual (no consequence); where
it does not, the entities the fact named are desynchronized and their later failures are consequences of
that one finding, counted apart (``meta.consequences``), while a second, unrelated bug is still reported.
"""

from __future__ import annotations

from tracebook import Trace, config

M128 = {"tokens": 8192}
M64 = {"tokens": 4096}


def commit_beyond_written_then_life() -> Trace:
    t = Trace("UNIT-2_recovery_commit_beyond_written_then_normal_life",
              'The engine publishes frontier 106 after a unit wrote [100, 104), then decodes, retains and forks '
              'as usual: replay adopts the published frontier and reports the one finding (store contract "Unit '
              '成功后，Program 才推进 corresponding committed frontiers")', config(kv_capacity=M128))
    t.activate("s0", 100, 200)
    t.prefill("s0", 100)
    t.map("s0", 128)
    u = t.unit()
    t.launch(u, [("s0", "main", 100, 104)])
    t.complete(u, [("s0", "main", 106)], expect="UNIT-2")
    t.row("s0", frontier=106)  # adopted: the frontier the engine published
    for a in range(106, 112):
        t.step("s0", a, a + 1)
    t.finish("s0", retain="c0")
    t.activate("s1", 160, 64, src="c0")  # Fork of c0 at 112
    t.advance("s1", 112, 160)
    t.row("s1", frontier=160)
    t.finish("s1")
    t.release("c0")
    t.pool(allocated=0, reserved=0, available=128)
    t.consequences = 0
    return t


def retain_without_state_image_then_resume() -> Trace:
    t = Trace("CKPT-1_recovery_retain_then_resume",
              'The engine retains s0 without its StateImage, then resumes the checkpoint by Move and finishes: '
              'replay adopts the retained checkpoint and reports the one finding (store contract "Retain 只有在 '
              'Main、backend 与 StateImage 构成同一完整 continuation 时才能发布")', config(kv_capacity=M128))
    t.activate("s0", 300, 20)
    t.prefill("s0", 300)
    t.finish("s0", retain="c0", state_image=False, expect="CKPT-1")
    t.ckpt("c0", frontier=300)  # adopted: c0 is retained, as the engine says
    t.activate("s1", 310, 20, src="c0", keep_source=False)  # Move of c0
    t.advance("s1", 300, 310)
    t.finish("s1")
    t.pool(allocated=0, reserved=0, available=128)
    t.consequences = 0
    return t


def _beyond_entitlement(t: Trace) -> str:
    """s0 (entitlement 8 pages) is mapped to 10 pages by the engine: not applied (the claim needs two pages the
    contract cannot give s0); s0 is desynchronized by that finding. Returns the unit that writes them."""
    t.activate("s0", 300, 200)
    t.prefill("s0", 300)  # pages 0..4
    t.map("s0", 600, result={"ok": True, "pages": [5, 6, 7, 8, 9]}, expect="ENT-2")
    t.row("s0", frontier=300)  # the model's s0 as before the rejected map
    u = t.unit()
    # consequence 1: the write needs pages the model never mapped (ENT-3 on s0)
    t.launch(u, [("s0", "main", 300, 600)])
    # consequence 2: the model never launched that unit (TRACE-2 on the unit, which names s0)
    t.complete(u, [("s0", "main", 600)])
    return u


def desync_consequences_once() -> Trace:
    t = Trace("ENT-2_recovery_consequences_counted_apart",
              'The engine maps s0 beyond its entitlement, then writes, commits and observes what it mapped: the '
              'model cannot follow (the pages are not s0\'s to take), so s0 is desynchronized and its later '
              'failures are consequences of the one finding, while s1 lives normally beside it (store contract '
              '"新增页只把当前 address 的 reservation 转成 allocation")', config(kv_capacity=M64))
    t.activate("s1", 64, 64)
    _beyond_entitlement(t)
    # consequence 3: the engine's counters hold s0's 10 pages (the model: 5 allocated, 3 reserved)
    t.pool(allocated=10, reserved=2, available=52)
    t.row("s0", frontier=600)  # consequence 4: the model's s0 stands at 300
    t.prefill("s1", 64)
    t.advance("s1", 64, 65)
    t.row("s1", frontier=65)
    t.finish("s1")
    t.finish("s0")
    t.consequences = 4
    return t


def second_bug_still_found() -> Trace:
    t = Trace("ENT-2_PAGE-1_recovery_second_bug_still_reported",
              'After s0 is desynchronized by a map beyond its entitlement, the allocator hands s1 page 2, which '
              'still carries s0\'s block 2: an unrelated bug on another sequence is its own finding, not a '
              'consequence (store contract "新增页只把当前 address 的 reservation 转成 allocation", "每个 Device '
              'page-group lease 在所属 pool 中至多承载一个 logical page replica")', config(kv_capacity=M64))
    t.activate("s0", 300, 200, result={"ok": True, "rows": {"main": 0}, "pages": {"main": []}})
    t.map("s0", 300, result={"ok": True, "pages": [0, 1, 2, 3, 4]})
    t.step("s0", 0, 300)
    t.map("s0", 600, result={"ok": True, "pages": [5, 6, 7, 8, 9]}, expect="ENT-2")
    t.row("s0", table=[0, 1, 2, 3, 4], frontier=300)  # the model's s0 as before the rejected map
    t.activate("s1", 100, 28, result={"ok": True, "rows": {"main": 1}, "pages": {"main": []}})
    t.map("s1", 100, result={"ok": True, "pages": [20, 2]}, expect="PAGE-1")
    t.row("s1", table=[-1, -1], frontier=0)  # not applied either
    t.finish("s0")
    t.consequences = 0
    return t


def build() -> list[Trace]:
    return [commit_beyond_written_then_life(), retain_without_state_image_then_resume(), desync_consequences_once(),
            second_bug_still_found()]
