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
