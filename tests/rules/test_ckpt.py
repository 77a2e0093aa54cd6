"""CKPT-*: complete continuations, one-at-a-time release, Move versus Fork.

Seed: "Retain 只有在 Main、backend 与 StateImage 构成同一完整 continuation 时才能发布", "Release 逐个解除
logical references，并只在最后引用消失时释放 physical replicas" and "Private source 在最终 post-state 中
没有 surviving immutable reference 时，可以 Move" / "Shared source或仍需保留的 private source使用 Fork".
"""

from __future__ import annotations

import pytest

from tests.rules.builders import assert_detected, assert_kept, assert_violation, committed, retained, run, small, touch

# -- CKPT-1 ---------------------------------------------------------------------------------------

@pytest.mark.rule("CKPT-1", "keeps")
def test_ckpt1_keeps_complete_continuations():
    st = small(backend="mtp", draft_window=3)
    committed(st, "a", 100, pools=("main", "mtp"))
    run(st, ("finish", "a", "c", {"state_image": True}))
    ck = st.checkpoints["c"]
    assert set(ck.spaces) == {"main", "mtp"} and ck.state_image
    assert all(not s.active and s.protected == s.committed == 100 for s in ck.spaces.values())
    run(st, ("activate", "b", 100, 28, {"source": "c"}))  # a hit on the complete continuation
    assert_kept(st, "CKPT-1")


@pytest.mark.rule("CKPT-1", "fires")
def test_ckpt1_fires_on_a_checkpoint_without_its_backend():
    st = small(backend="mtp", draft_window=3)
    retained(st, "c", 100, pools=("main", "mtp"))
    ck = st.checkpoints["c"]
    mtp = ck.spaces.pop("mtp")  # retained Main without the MTP continuation
    while mtp.pages:
        st.drop_ref(mtp.pages.pop(), mtp)
    touch(st, spaces=[ck.spaces["main"]])
    assert_detected(st, "CKPT-1")


def test_ckpt1_fires_on_a_retain_without_state_image():
    st = small(backend="mtp", draft_window=3)
    committed(st, "a", 100, pools=("main", "mtp"))
    assert_violation(st, "CKPT-1", "finish", "a", "c", state_image=False)


# -- CKPT-2 ---------------------------------------------------------------------------------------

@pytest.mark.rule("CKPT-2", "keeps")
def test_ckpt2_keeps_release_one_reference_at_a_time():
    st = small()
    retained(st, "c", 100)
    run(st, ("activate", "s", 100, 28, {"source": "c"}))
    shared, tail = st.checkpoints["c"].spaces["main"].pages
    pool = st.pools["main"]
    allocated = pool.allocated
    run(st, ("release", "c"))
    assert shared.alive and shared.refs == 1 and shared.device >= 0  # s still refers: its replica stays
    assert not tail.alive and pool.allocated == allocated - 1  # the last reference went: replica released
    assert_kept(st, "CKPT-2", exercised=False)  # the premise (an already released checkpoint) is the violation


@pytest.mark.rule("CKPT-2", "fires")
def test_ckpt2_fires_on_a_double_release():
    st = small()
    retained(st, "c", 100)
    run(st, ("release", "c"))
    assert_violation(st, "CKPT-2", "release", "c")


def test_ckpt2_fires_on_a_hit_after_release():
    st = small()
    retained(st, "c", 100)
    run(st, ("release", "c"))
    assert_violation(st, "CKPT-2", "activate", "s", 100, 28, source="c")


# -- CKPT-3 ---------------------------------------------------------------------------------------

@pytest.mark.rule("CKPT-3", "keeps")
def test_ckpt3_keeps_move_without_survivors_fork_otherwise():
    st = small()
    retained(st, "c", 100)
    c_pages = list(st.checkpoints["c"].spaces["main"].pages)
    fork = run(st, ("activate", "s", 100, 28, {"source": "c", "pages": {"main": [c_pages[0].device, 9]}}))[0]
    assert fork["mode"] == {"main": "fork"} and st.space_of("s", "main").pages[1] is not c_pages[1]
    run(st, ("finish", "s", "d"))
    d_pages = list(st.checkpoints["d"].spaces["main"].pages)
    move = run(st, ("activate", "t", 100, 28, {"source": "d", "keep_source": False}))[0]
    space = st.space_of("t", "main")
    assert move["mode"] == {"main": "move"} and space.pages == d_pages and "d" not in st.checkpoints
    assert d_pages[0].refs == 2 and d_pages[0].writer is None  # c still shares block 0: immutable
    assert d_pages[1].writer is space  # the private tail continues in place
    assert_kept(st, "CKPT-3")


@pytest.mark.rule("CKPT-3", "fires")
def test_ckpt3_fires_when_a_surviving_tail_is_moved():
    st = small()
    retained(st, "c", 100)
    ids = [p.device for p in st.checkpoints["c"].spaces["main"].pages]
    assert_violation(st, "CKPT-3", "activate", "s", 100, 28, source="c", pages={"main": ids})
