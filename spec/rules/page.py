"""PAGE-*: leases carry one page, stale handles, replica validity, reclamation and leaks, identity."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvsim.kvmodel.store import observe
from kvsim.kvmodel.store.config import PAGE_SIZE
from kvsim.spec.catalogue import state_rule, transition_rule
from kvsim.spec.leaks import leaked

if TYPE_CHECKING:

    from kvsim.kvmodel.store.pages import LogicalKVPage
    from kvsim.kvmodel.store.store import KVStore


def _pending_dest(st: KVStore, pool: str, pid: int) -> bool:
    return any(x.direction == "h2d" and x.pool == pool and pid in x.dest and x.phase in ("reserve", "copy", "verify")
               for x in st.xfers.values())


def leases_carry_their_pages(st: KVStore) -> str | bool | None:
    """Audit form of PAGE-1 over every pool: each leased id's holder is a live page on that id (or the
    destination of an h2d transfer not yet published)."""
    for name, p in st.pools.items():
        for pid in p.leased_ids():
            h = p.holder[pid]
            if h is None or not h.alive or (h.device != pid and not _pending_dest(st, name, pid)):
                return f"{name} page {pid} is leased to {getattr(h, 'handle', None)}, which does not carry it"
    return None


@state_rule("PAGE-1", "A Device page-group lease carries at most one logical page replica",
            'store contract: "每个 Device page-group lease 在所属 pool 中至多承载一个 logical page replica"',
            scope="page", full=leases_carry_their_pages,
            decisions="A lease reserved by an in-flight h2d transfer carries its page before publication. Page ids "
                      "are the engine's (store contract \"Physical IDs 可以任意排列\"): where a trace leaves an id "
                      "out (a map, COW or activation without `pages`, an h2d restore without the xfer result's "
                      "`pages`) the model's lowest free id is a guess, and the first time the engine names the "
                      "page's id (observe table, activation result, xfer result) it is adopted after this rule's "
                      "check: in the pool, named once, carrying no page the engine itself placed "
                      "(kvmodel.store.adopt); a guess standing on the engine's id moves.",
            tests=("tests/rules/test_page.py::test_page1_keeps_one_replica_per_lease",
                   "tests/rules/test_page.py::test_page1_fires_when_two_pages_claim_one_lease",
                   "tests/rules/test_through_traces.py::test_engine_rule_fires_from_a_trace"),
            context=("seq", "pool", "block", "page", "xfer", "ckpt"))
def page_1(st: KVStore, page: LogicalKVPage, full: bool) -> str | bool | None:
    if not page.alive or page.device < 0:
        return None
    holder = st.pools[page.pool].holder[page.device]
    if holder is not page:
        return (f"{page.pool} page {page.device} is claimed by descriptor {page.handle} but carries "
                f"{getattr(holder, 'handle', None)}")
    return True


transition_rule("PAGE-2", "A stale lease or page handle (older generation) is refused",
                'store contract: "generation 防止 release/reuse 后的 stale handle"', observe.observe_row,
                decisions="Leases and descriptors carry generations (DevicePagePool.is_current, "
                          "LogicalPageStore.is_current); in a trace, an engine table entry naming a released "
                          "page id is the stale handle, decided by generation: each row remembers the (id, lease "
                          "generation) last published at each block, so an entry naming that id after its lease "
                          "ended is PAGE-2 even when the id has been leased again since (not AS-3).",
                tests=("tests/rules/test_page.py::test_page2_keeps_generations_on_release_and_reuse",
                       "tests/rules/test_page.py::test_page2_is_counted_when_tables_are_observed",
                       "tests/rules/test_page.py::test_page2_fires_on_a_table_naming_a_released_page",
                       "tests/rules/test_through_traces.py::test_engine_rule_fires_from_a_trace"))


@state_rule("PAGE-3", "A replica is valid for n columns iff its epoch equals the page's and coverage >= n",
            'store contract: "replica.epoch=page.epoch \\quad\\land\\quad replica.coverage\\ge n"', scope="page",
            decisions="Every active holder needs a valid Device replica for the columns it has committed in "
                      "the page; a retained checkpoint needs one valid replica (Device or Host). Decision 27 (verify "
                      "after a cut; store contract \"reserve destination -> copy page payload -> verify epoch and "
                      "committed coverage -> publish replica\", L173-176): pins forbid releasing, evicting or "
                      "writing a copied page (REP-2), not moving its frontier, so a destructive truncate through "
                      "a page a copy pins is legal (its lease handling is ENT-4's decision 26) and gives the page a "
                      "new epoch; the copy is then stale and verify is where that is found. A `verify` reported as "
                      "passed over a copy whose epoch or coverage no longer matches is this violation "
                      "(kvmodel.store.transfers); a correct engine reports the failed verify (`result.ok` false) "
                      "and the copy is abandoned: nothing published, its destination freed, its pins dropped "
                      "(transfers.verify_failed).",
            tests=("tests/rules/test_page.py::test_page3_keeps_valid_replicas_through_offload_and_restore",
                   "tests/rules/test_page.py::test_page3_fires_on_a_stale_device_replica",
                   "tests/rules/test_through_traces.py::test_engine_rule_fires_from_a_trace"),
            context=("ckpt", "pool", "block", "xfer", "page"))
def page_3(st: KVStore, page: LogicalKVPage, full: bool) -> str | bool | None:
    if not page.alive or not page.holders:
        return None
    dev_ok = page.device >= 0 and page.dev_epoch == page.epoch
    if dev_ok and page.dev_cov >= PAGE_SIZE:
        return True  # a full valid Device replica serves every holder (no holder needs more than P columns)
    base = page.block * PAGE_SIZE
    for h in page.holders:
        n = h.committed - base
        n = 0 if n < 0 else PAGE_SIZE if n > PAGE_SIZE else n
        if dev_ok and page.dev_cov >= n:
            continue
        if h.active:
            if not page.device_valid(n):
                return f"{h.owner!r} ({h.pool}) block {page.block}: Device replica invalid for {n} columns"
        elif not (page.device_valid(n) or page.host_valid(n)):
            return f"checkpoint {h.owner!r} ({h.pool}) block {page.block}: no replica valid for {n} columns"
    return True


@state_rule("PAGE-4", "A descriptor is reclaimed only at zero references, replicas and pins; nothing leaks",
            'store contract: "只有当 references、replicas 和 transaction pins 均为零时，descriptor 才能回收并推进 '
            'generation"',
            scope="page", full=leaked, evidence="model",
            decisions="Guards the model: reclamation and leases are the model's own bookkeeping (a trace reports no "
                      "descriptors). The audit builds the ownership graph (networkx) from live address spaces and open "
                      "transfers; every lease and Host slice must be reachable.",
            tests=("tests/rules/test_page.py::test_page4_keeps_reclaiming_at_the_last_reference",
                   "tests/rules/test_page.py::test_page4_fires_on_a_leaked_lease"),
            context=("pool", "page", "block"))
def page_4(st: KVStore, page: LogicalKVPage, full: bool) -> str | bool | None:
    if not page.alive:
        if page.device >= 0 or page.host is not None or page.holders or page.pins:
            return f"reclaimed descriptor {page.handle} still holds references, replicas or pins"
        return None
    if not page.holders and not page.pins:
        return f"descriptor {page.handle} has no references or pins but was not reclaimed"
    if page.device < 0 and page.host is None and not page.pins:
        return f"descriptor {page.handle} is referenced but has no replica"
    return True


def distinct_identities(st: KVStore) -> str | bool | None:
    """Audit form of PAGE-5 over every space and pool."""
    for space in st.all_spaces():
        seen = set()
        for page in space.pages:
            if page in seen:
                return f"{space.owner!r} ({space.pool}) maps descriptor {page.handle} twice"
            seen.add(page)
    for store in st.page_stores.values():
        epochs: dict = {}
        for p in store.live_pages():
            if p.epoch in epochs:
                return f"{store.pool}: pages {epochs[p.epoch].handle} and {p.handle} share epoch {p.epoch}"
            epochs[p.epoch] = p
    return None


@state_rule("PAGE-5", "Logical identity, content epoch and physical page id are independent",
            'store contract: "Logical page identity、content epoch与physical page ID彼此独立"', scope="page",
            full=distinct_identities, evidence="model",
            decisions="Guards the model (a trace names physical ids only; identities and epochs are the model's). "
                      "Checked as: a page sits at its own block index in every holder (its physical id may "
                      "change, its identity does not); the audit also checks that a space never maps one "
                      "descriptor twice and that live pages of a pool have distinct content epochs.",
            tests=("tests/rules/test_page.py::test_page5_keeps_identity_across_physical_moves",
                   "tests/rules/test_page.py::test_page5_fires_when_membership_order_is_scrambled"),
            context=("pool", "page", "block"))
def page_5(st: KVStore, page: LogicalKVPage, full: bool) -> str | bool | None:
    if not page.alive or not page.holders:
        return None
    b = page.block
    try:  # a plain loop: the fastest form for pages of shared prefixes, which have tens of holders
        for h in page.holders:
            if h.pages[b] is not page:
                break
        else:
            return True
    except IndexError:
        pass
    h = next(h for h in page.holders if b >= len(h.pages) or h.pages[b] is not page)
    return f"page {page.handle} (block {b}) is referenced by {h.owner!r} ({h.pool}) at another position"
