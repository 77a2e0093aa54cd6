"""REP-*: publication order, pins, Host arena geometry, last replica."""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

from kvsim.kvmodel.store import transfers
from kvsim.spec.catalogue import state_rule, transition_rule

if TYPE_CHECKING:
    from kvsim.kvmodel.store.pages import LogicalKVPage
    from kvsim.kvmodel.store.store import KVStore
    from kvsim.kvmodel.store.transfers import Transfer

transition_rule("REP-1", "Replacement replicas publish in order: reserve, copy, verify, publish, release source",
                'store contract: "reserve destination -> copy page payload -> verify epoch and committed coverage"',
                transfers.xfer,
                decisions="`offload` applies the whole order as one fact; `xfer` logs it phase by phase and any "
                          "phase out of order is the violation.",
                tests=("tests/rules/test_rep.py::test_rep1_keeps_publication_order_both_ways",
                       "tests/rules/test_rep.py::test_rep1_fires_on_publication_before_verification",
                       "tests/rules/test_through_traces.py::test_engine_rule_fires_from_a_trace"),
                context=("xfer", "phase", "after", "block"))


@state_rule("REP-2", "Source and destination are pinned during a copy; pinned pages are not evicted or reused",
            'store contract: "Copy 进行时 source 与 destination 都被 pin"', scope="page",
            decisions="Decision 24 (when pins start; store contract \"Copy 进行时 source 与 destination 都被 pin。Copy "
                      "完成前，destination 不进入 address space 或 execution table；唯一有效 source 也不能先"
                      "释放\", L178, "
                      "and \"只有当 references、replicas 和 transaction pins 均为零时，descriptor 才能回收\", L179): "
                      "the copy transaction begins with \"reserve destination\", and the source may not be released "
                      "at any time before the copy completes, so a transfer pins the page, source and destination "
                      "alike, from `reserve` until `publish` (kvmodel.store.transfers). Drop/offload/transfer of a "
                      "pinned page, and a launch writing into a pinned page (store contract \"source/destination "
                      "pins\"), are violations from `reserve` on. Pins do not forbid reading: Fork or "
                      "Move from a checkpoint an in-flight copy pins is legal; only a page whose h2d restore is "
                      "still in flight (no Device replica yet) makes an activation wait (refusal `busy`).",
            tests=("tests/rules/test_ent.py::test_rep2_keeps_a_map_waiting_while_only_a_pinned_page_group_is_left",
                   "tests/rules/test_rep.py::test_rep2_keeps_pins_while_copying",
                   "tests/rules/test_ent.py::test_rep2_fires_on_an_engine_mapping_onto_a_pinned_page_group",
                   "tests/rules/test_rep.py::test_rep2_fires_on_a_pin_no_transfer_accounts_for",
                   "tests/rules/test_rep.py::test_rep2_fires_on_dropping_a_source_reserved_but_not_yet_copied",
                   "tests/rules/test_through_traces.py::test_engine_rule_fires_from_a_trace"),
            context=("pool", "ckpt", "block", "seq", "page", "tokens", "xfer"))
def rep_2(st: KVStore, page: LogicalKVPage, full: bool) -> str | bool | None:
    if not page.alive:
        return None
    if not st.xfers and not page.pins:
        return None  # no copy in flight, none pinning (the common case, decided without the scan)
    want = 0
    for x in st.xfers.values():
        if page in x.pages and x.phase in ("reserve", "copy", "verify"):
            want += 2  # a source and a destination pin from reserve to publish (decision 24)
    if page.pins != want:
        return f"page {page.handle} has {page.pins} pins, open transfers account for {want}"
    return True if want else None


@state_rule("REP-3", "Host arena extents are in bounds and disjoint; plans are checked against geometry",
            'store contract: "Plan 必须针对完整 release/allocation recipe 验证 extent geometry"', scope="store",
            decisions="Host placement is the engine's (kvmodel.store.host_place). Decision 22 (store contract "
                      "\"Host replica 使用 logical-order packed HostKVPageLayout\", L165): a copy's pages are one "
                      "packed extent of n page strides in logical block order, whatever order the trace lists the "
                      "blocks in: offsets that follow a listed order [1, 0] (block 1 before block 0) are the "
                      "violation, and the model's own guesses pack in logical order too; partial release frees "
                      "page slices. With the engine's `offsets` (offload / d2h xfer result) the extent is checked "
                      "for real: packed, inside the arena, overlapping no extent the engine placed (one the model "
                      "guessed moves away). Decision 23 (store contract \"Plan 必须针对完整 release/allocation recipe "
                      "验证 extent geometry；free_bytes 只是占用摘要，不是可分配性的充分证明\", L170-171): without "
                      "offsets, when every live extent was placed where the engine said, the model knows the layout "
                      "and the plan needs a hole of n strides (any fit: placement is the engine's, so no first-fit "
                      "choice is imposed), else REP-3 although free bytes suffice. Only where the model's own "
                      "guesses stand in the layout does it fall back to free bytes (which do not depend on "
                      "placement) and count the check as partial (kvreport `rules.REP-3.partial`); it never blames "
                      "the engine for the model's own fragmentation.",
            tests=("tests/rules/test_rep.py::test_rep3_keeps_disjoint_extents_and_split_releases",
                   "tests/rules/test_rep.py::test_rep3_keeps_plans_on_the_known_layout_and_counts_guessed_ones_partial",
                   "tests/rules/test_rep.py::test_rep3_keeps_a_replica_packed_in_logical_order_whatever_the_listed_order",
                   "tests/rules/test_rep.py::test_rep3_fires_on_overlapping_host_extents",
                   "tests/rules/test_rep.py::test_rep3_fires_on_a_plan_no_hole_of_the_known_layout_holds",
                   "tests/rules/test_rep.py::test_rep3_fires_on_a_replica_packed_in_listed_not_logical_order",
                   "tests/rules/test_through_traces.py::test_engine_rule_fires_from_a_trace"),
            context=("pool", "offsets", "offset", "ckpt", "xfer"))
def rep_3(st: KVStore, touched: dict[int, int] | None, full: bool) -> str | bool | None:
    """Whole arena in the audit (`full`), else only the extents the last operation touched (`st.t_host`).

    Store contract: "Host arena 是有界 variable-size allocator" — every extent in bounds, disjoint from the
    others and from the free extents, and the bytes accounted for (live + free = capacity).

    The incremental form is O(touched · log E): each touched live extent is checked against its neighbours in
    the model's sorted index of live extents and against the free extents (bisection), each touched freed
    offset's free extent against its live neighbours, and the byte accounting on the model's counters. The
    audit scans everything and recounts those counters and the index: it stays the complete check.
    """
    if full or not isinstance(touched, dict):
        return _rep_3_whole(st)
    return _rep_3_touched(st, touched)


def _overlap(off: int, size: int, cap: int) -> str:
    return f"host extent [{off}, {off + size}) overlaps another or leaves the arena of {cap} B"


def _live_size(st: KVStore, off: int) -> int | str | None:
    """Size of the live extent starting at `off` (a slice or a pending d2h destination), None if none does,
    or the message if the slice there is not its page's replica."""
    page = st.host_slices.get(off)
    if page is not None:
        if page.host is None or page.host.offset != off:
            return f"host slice at {off} is not the replica of its page {page.handle}"
        return page.host.size
    x = st.host_dests.get(off)
    if x is not None and x.phase in ("reserve", "copy", "verify"):  # the audit matches host_dests to x.dest
        return st.pools[x.pool].page_bytes
    return None


def _rep_3_touched(st: KVStore, touched: dict[int, int]) -> str | bool | None:
    arena = st.arena
    cap = arena.capacity
    order = st.host_order
    seen_free = set()  # free extents already checked (a released run coalesces into one)
    for off in sorted(touched):
        size = _live_size(st, off)
        if isinstance(size, str):
            return size
        i = bisect.bisect_left(order, off)
        indexed = i < len(order) and order[i] == off
        if size is None:  # released or moved away: the free extent now there meets no live extent
            if indexed:
                return f"host extent index lists {off}, where no live extent starts"
            free = arena.free_extent_at(off) if off < cap else None
            if free is not None and free[0] not in seen_free:
                fo, fs = free
                seen_free.add(fo)
                k = bisect.bisect_left(order, fo)
                for j in (k - 1, k):
                    if 0 <= j < len(order):
                        lo = order[j]
                        ls = _live_size(st, lo)
                        if isinstance(ls, int) and lo < fo + fs and fo < lo + ls:
                            return _overlap(max(lo, fo), ls if lo > fo else fs, cap)
            continue
        if off >= cap:  # the model's own placeholders (guessed placement), never the engine's extents
            if off not in st.host_guessed:
                return f"host extent [{off}, {off + size}) leaves the arena of {cap} B"
            continue
        if not indexed:
            return f"host extent [{off}, {off + size}) is missing from the host extent index"
        if off + size > cap:
            return _overlap(off, size, cap)
        if i > 0:
            prev = order[i - 1]
            ps = _live_size(st, prev)
            if not isinstance(ps, int):
                return ps or f"host extent index lists {prev}, where no live extent starts"
            if prev + ps > off:
                return _overlap(off, size, cap)
        if i + 1 < len(order) and order[i + 1] < off + size:
            nxt = order[i + 1]
            ns = _live_size(st, nxt)
            return ns if isinstance(ns, str) else _overlap(nxt, ns or 0, cap)
        free = arena.overlapping(off, size)
        if free is not None:
            return _overlap(*max(free, (off, size)), cap)
    if st.host_live_bytes + arena.free_bytes != cap:
        return f"host arena accounts for {st.host_live_bytes + arena.free_bytes} B of {cap} B"
    return True if st.host_slices else None


def _rep_3_whole(st: KVStore) -> str | bool | None:
    arena = st.arena
    for off, page in st.host_slices.items():
        if page.host is None or page.host.offset != off:
            return f"host slice at {off} is not the replica of its page {page.handle}"
    spans = [(off, page.host.size) for off, page in st.host_slices.items()]  # type: ignore[union-attr]  # checked above
    pending: dict[int, Transfer] = {}
    for x in st.xfers.values():
        if x.direction == "d2h" and x.phase in ("reserve", "copy", "verify"):
            stride = st.pools[x.pool].page_bytes
            spans += [(d, stride) for d in x.dest]
            pending.update((d, x) for d in x.dest)
    beyond = [(off, size) for off, size in spans if off >= arena.capacity]
    for off, size in beyond:  # the model's own placeholders (guessed placement), never the engine's extents
        if off not in st.host_guessed:
            return f"host extent [{off}, {off + size}) leaves the arena of {arena.capacity} B"
    if sum(size for _, size in beyond) != st.host_virtual:
        return (f"host placeholders account for {sum(size for _, size in beyond)} B, the model counts "
                f"{st.host_virtual} B")
    live = sorted((off, size) for off, size in spans if off < arena.capacity)
    free = arena.free_extents()
    spans = sorted(live + free)
    end = 0
    for off, size in spans:
        if off < end or off + size > arena.capacity:
            return _overlap(off, size, arena.capacity)
        end = off + size
    if sum(s for _, s in spans) != arena.capacity:
        return f"host arena accounts for {sum(s for _, s in spans)} B of {arena.capacity} B"
    # the counters and the index the incremental form reads (kvmodel.store.host_place keeps them)
    if sum(s for _, s in free) != arena.free_bytes:
        return f"host free extents hold {sum(s for _, s in free)} B, the arena counts {arena.free_bytes} B free"
    if sum(s for _, s in live) != st.host_live_bytes:
        return f"host extents in the arena hold {sum(s for _, s in live)} B, the model counts {st.host_live_bytes} B"
    if [off for off, _ in live] != st.host_order:
        return "the host extent index differs from the live extents in the arena"
    if pending.keys() != st.host_dests.keys() or any(st.host_dests[d] is not x for d, x in pending.items()):
        return "the pending host destinations differ from the open d2h transfers' destinations"
    return True if st.host_slices else None


@state_rule("REP-4", "A host-only page keeps its last replica; a Device replica drops only when safe",
            'store contract: "唯一有效 source 也不能先释放"', scope="page",
            decisions="State form: every referenced page has a replica valid for its committed columns. A "
                      "Device replica may drop only with a current Host replica and no active reference or pin "
                      "(kvmodel.store.transfers). A d2h transfer's `release_source` releases the Device sources "
                      "no longer required (store contract \"release source when no longer required\"): a page "
                      "an active sequence still reads keeps its Device replica, and so does a page another open "
                      "transfer pins (decision 24: a copy pins its source from `reserve`, \"唯一有效 source 也不能"
                      "先释放\", seed 000 L178; found by `kvsim fuzz --machine lockstep --seed 11`: a d2h copy "
                      "reserved from the page, then the earlier copy's `release_source`, then the later copy had no "
                      "Device source). An h2d transfer's `release_source` "
                      "frees the Host source only while the restored Device copy is valid; once that copy was "
                      "dropped again the Host replica is the last one and freeing it is the violation.",
            tests=("tests/rules/test_rep.py::test_rep4_keeps_the_last_replica",
                   "tests/rules/test_rep.py::test_rep4_fires_when_a_host_only_page_has_no_valid_replica",
                   "tests/rules/test_through_traces.py::test_engine_rule_fires_from_a_trace"),
            context=("position", "ckpt", "pool", "block", "xfer", "seq", "page"))
def rep_4(st: KVStore, page: LogicalKVPage, full: bool) -> str | bool | None:
    if not page.alive or not page.holders:
        return None
    n = page.committed
    if page.device >= 0 and page.dev_epoch == page.epoch and page.dev_cov >= n:  # device_valid(n), inlined
        return True
    if not page.host_valid(n):
        return f"page {page.handle} has no replica valid for its {n} committed columns"
    return True
