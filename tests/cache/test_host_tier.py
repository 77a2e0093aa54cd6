"""The Host (L2) tier of the cache model: one index per group serving both tiers, the store queue and its
policy (cache concepts L187), store tickets pinning Device sources until the ACK, ClearCache refusal.

Configuration: P = 4; full (bg 4), sliding (bg 2, window 4), state (bg 4); 8 Host pages (7 usable).
"""

from __future__ import annotations

from kvsim.kvmodel.cache.config import CacheConfig
from kvsim.kvmodel.cache.coordinator import CacheCoordinator
from kvsim.kvmodel.cache.group_spec import full, sliding, state
from kvsim.spec.cache_checking import check_cache

P = 4


def coord(host_pages: int = 8, replayable: bool = False) -> CacheCoordinator:
    return CacheCoordinator(CacheConfig(P, (full("full", 4), sliding("swa", 2, 4, replayable=replayable),
                                            state("mamba", 4)), (2, 2, 1), 24, num_host_pages=host_pages),
                            journal=[])


def groups_of(op) -> list[int]:
    return sorted(t.group for t in op.transfers)


def test_prefill_publication_streams_full_sliding_and_endpoint_state():
    c = coord()
    toks = [1, 2, 3, 4, 5, 6, 7, 8, 9]
    c.admit("a", toks, 9)
    c.publish("a", toks, 9)
    op = c.start_pending_stores()
    # full: 2 pages; sliding: 4 slots of 2 tokens; state: the endpoint at 8
    assert groups_of(op) == [0, 0, 1, 1, 1, 1, 2]
    for t in op.transfers:  # each source is the key's canonical Device block, pinned by the ticket
        assert c.indexes[t.group].find(t.key).block == t.device_block
        assert c.refs.count(t.group, t.device_block) == 3  # table, index, ticket
    assert not c.can_clear_cache() and c.clear_cache() is False  # refused while in flight, nothing changed
    assert c.start_pending_stores() is None  # a store skips keys already in flight
    c.complete_store(op.op_id)
    assert sum(len(idx.host_entries()) for idx in c.indexes) == 7
    assert c.refs.count(op.transfers[0].group, op.transfers[0].device_block) == 2
    c.publish("a", toks, 9)
    assert c.start_pending_stores() is None  # ... and keys already on Host
    assert check_cache(c.state()) == []


def test_decode_streams_sliding_but_not_full_pages_until_finish():
    c = coord(host_pages=32)
    toks = [1, 2, 3, 4, 5]
    c.admit("a", toks, 5)
    c.publish("a", toks, 5)
    c.complete_store(c.start_pending_stores().op_id)
    grown = toks + [6, 7, 8]
    for n in (6, 7, 8):
        c.admit("a", grown, n, decode=True)
        c.publish("a", grown, n, decode=True, prompt_tokens=5)
    op = c.start_pending_stores()
    assert groups_of(op) == [1, 1]  # page 1's two sliding slots; full page 1 waits for the finish
    c.complete_store(op.op_id)
    c.free("a", finished=True)  # the finish queue: the decode-completed full page (and nothing state)
    op = c.start_pending_stores()
    assert groups_of(op) == [0]
    c.complete_store(op.op_id)


def test_replayable_group_never_streams():
    c = coord(replayable=True)
    toks = [1, 2, 3, 4, 5, 6, 7, 8, 9]
    c.admit("a", toks, 9)
    c.publish("a", toks, 9)
    c.free("a", finished=True)
    op = c.start_pending_stores()
    assert 1 not in groups_of(op)


def test_host_pool_short_evicts_oldest_host_entries_then_queues_the_rest():
    c = coord(host_pages=4)  # 3 usable Host pages
    toks = [1, 2, 3, 4, 5, 6, 7, 8, 9]
    c.admit("a", toks, 9)
    c.publish("a", toks, 9)
    op = c.start_pending_stores()
    assert len(op.transfers) == 3 and len(c.host.pending) == 4  # the rest stays queued
    c.complete_store(op.op_id)
    op2 = c.start_pending_stores()
    assert len(op2.transfers) == 3  # the three Host entries were evicted to make room
    assert sum(len(idx.host_entries()) for idx in c.indexes) == 0
    c.complete_store(op2.op_id)
    assert c.clear_cache() is True
    assert sum(len(idx.host_entries()) for idx in c.indexes) == 0 and c.host.pool.free == 3
