"""REP-*: publication order, pins, Host arena geometry, last replica."""

from __future__ import annotations

from kvsim.kvmodel.store import transfers

from kvsim.spec.catalogue import state_rule, transition_rule

transition_rule("REP-1", "Replacement replicas publish in order: reserve, copy, verify, publish, release source",
                'store contract: "reserve destination -> copy page payload -> verify epoch and committed coverage"',
                transfers.xfer,
                decisions="`offload` applies the whole order as one fact; `xfer` logs it phase by phase and any "
                          "phase out of order is the violation.")


@state_rule("REP-2", "Source and destination are pinned during a copy; pinned pages are not evicted or reused",
            'store contract: "Copy 进行时 source 与 destination 都被 pin"', scope="page",
            decisions="A transfer pins its destination from reserve and its source from copy until publish; "
                      "drop/offload/transfer of a pinned page, and a launch writing into a pinned page (store "
                      "contract \"source/destination pins\"), are violations. Pins do not forbid reading: Fork or "
                      "Move from a checkpoint an in-flight copy pins is legal; only a page whose h2d restore is "
                      "still in flight (no Device replica yet) makes an activation wait (refusal `busy`).")
def rep_2(st, page, full):
    if not page.alive:
        return None
    want = 0
    for x in st.xfers.values():
        if page in x.pages and x.phase in ("reserve", "copy", "verify"):
            want += 2 if x.pinned_source else 1
    if page.pins != want:
        return f"page {page.handle} has {page.pins} pins, open transfers account for {want}"
    return True if want else None


@state_rule("REP-3", "Host arena extents are in bounds and disjoint; plans are checked against geometry",
            'store contract: "Plan 必须针对完整 release/allocation recipe 验证 extent geometry"', scope="store",
            decisions="Host placement is the engine's (kvmodel.store.host_place). A copy's pages are one packed "
                      "extent of n page strides in logical order (\"Host replica 使用 logical-order packed "
                      "HostKVPageLayout\"); partial release frees page slices. With the engine's `offsets` "
                      "(offload / d2h xfer result) the extent is checked for real: packed, inside the arena, "
                      "overlapping no extent the engine placed (one the model guessed moves away). Without them "
                      "the model places the pages itself (first fit, else page by page, else a placeholder beyond "
                      "the arena) and claims REP-3 only when no placement can hold them: the arena's free bytes, "
                      "which do not depend on placement, are short. It never blames the engine for the model's "
                      "own first-fit fragmentation.")
def rep_3(st, _entity, full):
    arena = st.arena
    spans = [(off, page.host.size) for off, page in st.host_slices.items()]
    for x in st.xfers.values():
        if x.direction == "d2h" and x.phase in ("reserve", "copy", "verify"):
            stride = st.pools[x.pool].page_bytes
            spans += [(d, stride) for d in x.dest]
    beyond = [(off, size) for off, size in spans if off >= arena.capacity]
    for off, size in beyond:  # the model's own placeholders (guessed placement), never the engine's extents
        if off not in st.host_guessed:
            return f"host extent [{off}, {off + size}) leaves the arena of {arena.capacity} B"
    if sum(size for _, size in beyond) != st.host_virtual:
        return f"host placeholders account for {sum(size for _, size in beyond)} B, the model counts {st.host_virtual} B"
    spans = [(off, size) for off, size in spans if off < arena.capacity]
    spans += arena.free_extents()
    spans.sort()
    end = 0
    for off, size in spans:
        if off < end or off + size > arena.capacity:
            return f"host extent [{off}, {off + size}) overlaps another or leaves the arena of {arena.capacity} B"
        end = off + size
    if sum(s for _, s in spans) != arena.capacity:
        return f"host arena accounts for {sum(s for _, s in spans)} B of {arena.capacity} B"
    for off, page in st.host_slices.items():
        if page.host is None or page.host.offset != off:
            return f"host slice at {off} is not the replica of its page {page.handle}"
    return True if st.host_slices else None


@state_rule("REP-4", "A host-only page keeps its last replica; a Device replica drops only when safe",
            'store contract: "唯一有效 source 也不能先释放"', scope="page",
            decisions="State form: every referenced page has a replica valid for its committed columns. A "
                      "Device replica may drop only with a current Host replica and no active reference or pin "
                      "(kvmodel.store.transfers). A d2h transfer's `release_source` releases the Device sources "
                      "no longer required (store contract \"release source when no longer required\"): a page "
                      "an active sequence still reads keeps its Device replica. An h2d transfer's `release_source` "
                      "frees the Host source only while the restored Device copy is valid; once that copy was "
                      "dropped again the Host replica is the last one and freeing it is the violation.")
def rep_4(st, page, full):
    if not page.alive or not page.holders:
        return None
    n = page.committed
    if page.device >= 0 and page.dev_epoch == page.epoch and page.dev_cov >= n:  # device_valid(n), inlined
        return True
    if not page.host_valid(n):
        return f"page {page.handle} has no replica valid for its {n} committed columns"
    return True
