"""Regressions found by fuzzing the store model, each as the shortest history that showed it."""

from __future__ import annotations

from kvsim.kvmodel.store import KVStore, StoreConfig
from kvsim.spec.checking import Checker

PAGE_BYTES = 131072  # bf16, one layer, two KV heads


def test_release_source_ignores_a_descriptor_reused_after_the_transfer_published():
    """A checkpoint released while a D2H copy pins its page: the page is reclaimed at publication and its
    descriptor may then carry another sequence's page; release_source must not drop that page's replica."""
    st = KVStore(StoreConfig(1024, 2, host_arena_bytes=4 * PAGE_BYTES))
    ck = Checker(st)
    st.activate("a", 64, 0)
    st.map("a", "main", 64)
    st.launch("u", [("a", "main", (0, 64))])
    st.complete("u", [("a", "main", 64)])
    st.finish("a", "k")
    for phase in ("reserve", "copy"):
        st.xfer("x", "d2h", "k", "main", [0], phase)
    st.release("k")  # the page is pinned: it stays until the transfer publishes
    for phase in ("verify", "publish"):
        st.xfer("x", "d2h", "k", "main", [0], phase)
    assert ck.incremental() == []
    st.activate("b", 64, 0)
    st.map("b", "main", 64)  # reuses the reclaimed descriptor (lowest free index)
    page = st.space_of("b", "main").pages[0]
    assert page.device >= 0
    st.xfer("x", "d2h", "k", "main", [0], "release_source")
    assert page.device >= 0, "release_source dropped the Device replica of another sequence's page"
    assert ck.incremental() == [] and ck.audit() == []


def test_release_source_keeps_a_device_source_another_reserved_copy_pins():
    """`kvsim fuzz --machine lockstep --seed 11`: a published D2H copy (x1), a second D2H copy of the same page
    reserved (x2), the checkpoint released, then x1's release_source: x2 pins the Device source from its
    reserve (decision 24, seed 000 L178), so the source is still required and stays until x2 has copied."""
    st = KVStore(StoreConfig(1024, 2, host_arena_bytes=4 * PAGE_BYTES))
    ck = Checker(st)
    st.activate("a", 64, 0)
    st.map("a", "main", 64)
    st.launch("u", [("a", "main", (0, 64))])
    st.complete("u", [("a", "main", 64)])
    st.finish("a", "k")
    page = st.checkpoints["k"].spaces["main"].pages[0]
    for phase in ("reserve", "copy", "verify", "publish"):
        st.xfer("x1", "d2h", "k", "main", [0], phase)
    st.xfer("x2", "d2h", "k", "main", [0], "reserve")
    st.release("k")
    st.xfer("x1", "d2h", "k", "main", [0], "release_source")
    assert page.alive and page.device >= 0, "release_source freed a Device source a reserved copy pins"
    assert ck.incremental() == []
    for phase in ("copy", "verify", "publish", "release_source"):
        st.xfer("x2", "d2h", "k", "main", [0], phase)
    assert not page.alive and st.pools["main"].allocated == 0  # reclaimed when the last pin went
    assert ck.incremental() == [] and ck.audit() == []


def test_two_incarnations_that_truncate_and_rewrite_write_distinct_content_keys():
    """A sequence id reactivated after finishing is a new incarnation: after a destructive truncate its
    rewrites carry content keys of their own, never those of an earlier incarnation's rewrites."""
    st = KVStore(StoreConfig(1024, 2))
    tokens = []
    for _ in range(2):
        st.activate("a", 128, 0)
        st.map("a", "main", 128)
        st.launch("u", [("a", "main", (0, 128))])
        st.complete("u", [("a", "main", 128)])
        st.truncate("a", "main", 100)  # destructive: positions 100.. are rewritten as new content
        tokens.append(st.space_of("a", "main").token)
        st.launch("u", [("a", "main", (100, 128))])
        st.complete("u", [("a", "main", 128)])
        page = st.space_of("a", "main").pages[1]
        tokens.append(page.key_token_at(127 - 64))  # column 63 of block 1
        st.finish("a", None)
    assert tokens[0] != tokens[2] and tokens[1] != tokens[3]
    assert tokens[0] == tokens[1]  # the rewritten column carries the post-truncate token


def _cut_while_copying():
    """`kvsim fuzz --machine host --budget 300 --seed 1`: a D2H copy is reserved and copying when its
    checkpoint is Move-activated and truncated through a pinned page (a new content epoch)."""
    st = KVStore(StoreConfig(1024, 2, host_arena_bytes=8 * PAGE_BYTES))
    st.activate("a", 100, 28)
    st.map("a", "main", 100)
    st.launch("u", [("a", "main", (0, 100))])
    st.complete("u", [("a", "main", 100)])
    st.finish("a", "k")
    for phase in ("reserve", "copy"):
        st.xfer("x", "d2h", "k", "main", [0, 1], phase)
    st.activate("a", 100, 28, "k", keep_source=False)
    st.truncate("a", "main", 90)  # block 1 cut from 36 to 26 columns: new epoch while pinned
    return st


def test_verify_after_a_cut_fails_and_a_failed_verify_abandons_the_copy():
    """Decision 27: the cut is legal; verify must fail (PAGE-3 when reported passed); a failed verify ends the
    transfer unpublished, freeing its Host extent and dropping its pins."""
    import pytest

    from kvsim.kvmodel.store import ContractViolation

    st = _cut_while_copying()
    ck = Checker(st)
    assert ck.incremental() == []
    with pytest.raises(ContractViolation) as info:
        st.xfer("x", "d2h", "k", "main", [0, 1], "verify")
    assert "PAGE-3" in info.value.rules
    st.xfer_verify_failed("x", "d2h", "k", "main", [0, 1])
    pages = st.space_of("a", "main").pages
    assert not st.xfers and all(p.pins == 0 and p.host is None for p in pages)
    assert st.arena.free_bytes == st.arena.capacity
    st.map("a", "main", 128)
    st.launch("v", [("a", "main", (90, 128))])  # the pins are gone: the tail takes writes
    st.complete("v", [("a", "main", 128)])
    assert ck.incremental() == [] and ck.audit() == []
