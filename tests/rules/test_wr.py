"""WR-*: one writer per page, shared pages immutable (COW first), protected columns, token-exact fork.

Seed: "任一 logical page 同时至多一个 writer", "存在多个 address-space references 的 full page immutable；
需要写入 shared partial tail 时必须先 COW", "Published checkpoint所需coverage不可被writer覆盖" and the worked
example "checkpoint frontier (F=1000)": 15 shared full pages, a private tail with 40 copied columns,
"Checkpoint frontier 不向下取整到 960".
"""

from __future__ import annotations

import pytest

from tests.rules.builders import (
    assert_detected,
    assert_kept,
    assert_violation,
    committed,
    new_store,
    retained,
    run,
    small,
    touch,
)


def shared_tail(st):
    """c retains 128 tokens; s forks it and truncates to 100, keeping block 1 as a shared immutable member."""
    retained(st, "c", 128)
    run(st, ("activate", "s", 128, 100, {"source": "c"}), ("truncate", "s", "main", 100))
    return st.space_of("s", "main")


# -- WR-1 -----------------------------------------------------------------------------------------

@pytest.mark.rule("WR-1", "keeps")
def test_wr1_keeps_one_writer_per_page():
    st = small()
    committed(st, "a", 100, budget=100)
    committed(st, "b", 100, budget=100)
    run(st, ("map", "a", "main", 192), ("launch", "u", [("a", "main", (100, 192)), ("b", "main", (100, 128))]),
        ("complete", "u", [("a", "main", 192), ("b", "main", 128)]))
    for seq in ("a", "b"):
        space = st.space_of(seq, "main")
        assert all(p.writer is space and p.holders == [space] for p in space.pages)
    assert_kept(st, "WR-1")


@pytest.mark.rule("WR-1", "fires")
def test_wr1_fires_when_a_page_has_a_foreign_writer():
    st = small()
    committed(st, "a", 100)
    committed(st, "b", 100)
    page = st.space_of("a", "main").pages[1]
    page.writer = st.space_of("b", "main")  # b may now write a's tail
    touch(st, pages=[page])
    assert_detected(st, "WR-1")


@pytest.mark.rule("WR-1", "keeps")
def test_wr1_private_again_after_release_is_writable():
    st = small()
    shared_tail(st)
    run(st, ("release", "c"), ("cow", "s", "main", 1),
        ("launch", "u", [("s", "main", (100, 128))]), ("complete", "u", [("s", "main", 128)]))


# -- WR-2 -----------------------------------------------------------------------------------------

@pytest.mark.rule("WR-2", "keeps")
def test_wr2_keeps_shared_pages_immutable_cow_first():
    st = small()
    space = shared_tail(st)
    shared = space.pages[1]
    assert shared.refs == 2 and shared.writer is None
    run(st, ("cow", "s", "main", 1), ("launch", "u", [("s", "main", (100, 128))]),
        ("complete", "u", [("s", "main", 128)]))
    private = space.pages[1]
    assert private is not shared and private.writer is space and private.committed == 64
    assert shared.refs == 1 and shared.committed == 64 and shared.writer is None  # the checkpoint's copy intact
    assert_kept(st, "WR-2")


@pytest.mark.rule("WR-2", "fires")
def test_wr2_fires_when_a_shared_page_gets_a_writer():
    st = small()
    retained(st, "c", 128)
    run(st, ("activate", "s", 128, 64, {"source": "c"}))
    space = st.space_of("s", "main")
    page = space.pages[0]
    page.writer = space  # a fork that made the shared page writable
    touch(st, pages=[page])
    assert_detected(st, "WR-2")


def test_wr2_fires_on_a_write_into_a_shared_tail_without_cow():
    st = small()
    shared_tail(st)
    assert_violation(st, "WR-2", "launch", "u", [("s", "main", (100, 128))])


# -- WR-3 -----------------------------------------------------------------------------------------

@pytest.mark.rule("WR-3", "keeps")
def test_wr3_keeps_protected_columns():
    st = small()
    retained(st, "c", 100)
    run(st, ("activate", "s", 100, 100, {"source": "c"}), ("map", "s", "main", 200),
        ("launch", "u", [("s", "main", (100, 200))]), ("complete", "u", [("s", "main", 200)]))
    ck = st.checkpoints["c"].spaces["main"]
    assert [p.protected for p in ck.pages] == [64, 36] and ck.pages[1].committed == 36
    assert st.space_of("s", "main").pages[1] is not ck.pages[1]  # the append went to the private tail
    assert_kept(st, "WR-3")


@pytest.mark.rule("WR-3", "fires")
def test_wr3_fires_when_protected_columns_are_lost():
    st = small()
    retained(st, "c", 100)
    page = st.checkpoints["c"].spaces["main"].pages[1]
    page.committed = 20  # a writer cut the tail below the 36 columns the checkpoint protects
    touch(st, pages=[page])
    assert_detected(st, "WR-3")


def test_wr3_fires_on_a_write_below_protected_columns():
    st = small()
    shared_tail(st)
    assert_violation(st, "WR-3", "launch", "u", [("s", "main", (100, 128))])


# -- WR-4 -----------------------------------------------------------------------------------------

@pytest.mark.rule("WR-4", "keeps")
def test_wr4_keeps_token_exact_fork_from_an_engine_result():
    st = new_store()
    retained(st, "c", 1000)
    src = [p.device for p in st.checkpoints["c"].spaces["main"].pages]
    engine = src[:15] + [40]  # 15 shared full pages and a fresh page for the 40-column tail
    run(st, ("activate", "s", 1000, 24, {"source": "c", "pages": {"main": engine}}))
    assert [p.device for p in st.space_of("s", "main").pages] == engine
    assert_kept(st, "WR-4")


@pytest.mark.rule("WR-4", "fires")
def test_wr4_fires_on_a_fork_rounded_to_960():
    st = new_store()
    retained(st, "c", 1000)
    src = [p.device for p in st.checkpoints["c"].spaces["main"].pages]
    assert_violation(st, "WR-4", "activate", "s", 1000, 24, source="c", pages={"main": src[:15]})


def test_wr4_fork_at_1000_worked_example():
    """Fork at F = 1000: 15 shared full pages, a private tail with 40 copied columns, frontier 1000."""
    st = new_store()
    retained(st, "c", 1000)
    source = st.checkpoints["c"].spaces["main"]
    run(st, ("activate", "s", 1000, 24, {"source": "c"}))
    space = st.space_of("s", "main")
    assert space.committed == 1000 and len(space.pages) == 16
    assert space.pages[:15] == source.pages[:15]
    assert all(p.refs == 2 and p.writer is None and p.committed == 64 for p in space.pages[:15])
    tail, src_tail = space.pages[15], source.pages[15]
    assert tail is not src_tail and tail.device != src_tail.device
    assert (tail.committed, tail.dev_cov, tail.refs, tail.writer) == (40, 40, 1, space)
    assert [tail.key_token_at(c) for c in range(40)] == [src_tail.key_token_at(c) for c in range(40)]
    assert source.committed == source.protected == 1000  # the source checkpoint stays whole
    run(st, ("launch", "u", [("s", "main", (1000, 1024))]), ("complete", "u", [("s", "main", 1024)]))
    assert src_tail.committed == 40 and tail.committed == 64  # appends only touch the private tail


def test_wr4_move_at_1000_continues_in_place():
    """Private Move: no copy, the same logical pages, and the tail's writer appends at position 1000."""
    st = new_store()
    retained(st, "c", 1000)
    pages = list(st.checkpoints["c"].spaces["main"].pages)
    run(st, ("activate", "s", 1000, 24, {"source": "c", "keep_source": False}))
    space = st.space_of("s", "main")
    assert space.pages == pages and space.committed == 1000 and "c" not in st.checkpoints
    assert all(p.refs == 1 and p.writer is space for p in pages)
    run(st, ("launch", "u", [("s", "main", (1000, 1024))]), ("complete", "u", [("s", "main", 1024)]))
