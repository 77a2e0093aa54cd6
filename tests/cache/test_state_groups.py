"""Snapshot-state groups in the cache model (cache concepts L74-L82): sparse materialization with null holes at
absolute slot positions, and publication only of recorded Endpoint/Promoted boundaries, never from decode.

Configuration: P = 8, a full group (bg 8) and a state group with checkpoint_granularity 2 (slots of 2 tokens),
so a P boundary b sits at state slot (b - 1) // 2 and the state matcher needs only that slot.
"""

from __future__ import annotations

from kvsim.kvmodel.cache.acquire_plan import Checkpoints
from kvsim.kvmodel.cache.cache_key import BoundaryKind
from kvsim.kvmodel.cache.config import CacheConfig
from kvsim.kvmodel.cache.coordinator import CacheCoordinator
from kvsim.kvmodel.cache.geometry import GroupGeometry
from kvsim.kvmodel.cache.group_spec import full, state
from kvsim.spec.cache_checking import check_cache

P = 8


def coord() -> CacheCoordinator:
    return CacheCoordinator(CacheConfig(P, (full("kv", 8), state("m", 2)), (1, 1), 64), journal=[])


def state_keys(c: CacheCoordinator) -> dict[int, BoundaryKind]:
    """Published state slots -> kind."""
    return {e.logical_index: e.kind for _, e in c.indexes[1].entries()}


def test_checkpoint_slots_follow_the_seed_arithmetic():
    geo = GroupGeometry(state("m", 2))
    # internal aligned checkpoint floor(19 / 8) * 8 = 16 -> slot 7; final 19 -> slot 9
    assert geo.checkpoint_slots(Checkpoints(0, 19, P)) == [7, 9]
    # the extent ends on a boundary: no internal checkpoint strictly between, the final one is aligned
    assert geo.checkpoint_slots(Checkpoints(8, 16, P)) == [7]
    # a reserve beyond the extent materializes the slot it ends in
    assert geo.checkpoint_slots(Checkpoints(0, 5, P, reserve_tokens=4)) == [2, 4]


def test_prefill_materializes_only_the_aligned_and_final_checkpoints():
    c = coord()
    res = c.admit("a", list(range(1, 20)), 19)
    assert len(res.fresh[0]) == 3  # the full group is dense: 3 blocks of 8
    table = c.tables["a"][1].ids
    assert len(table) == 10 and [s for s, b in enumerate(table) if b] == [7, 9]  # absolute positions, holes else
    assert len(res.fresh[1]) == 2
    assert check_cache(c.state()) == []


def test_only_the_endpoint_is_published_with_provenance():
    c = coord()
    toks = list(range(1, 20))
    c.admit("a", toks, 19)
    c.publish("a", toks, 19)
    assert state_keys(c) == {7: BoundaryKind.ENDPOINT}  # floor(19 / 8) * 8 = 16: the prompt's last aligned one


def test_chunk_boundaries_are_not_published_and_decode_publishes_no_state():
    c = coord()
    toks = list(range(1, 25))  # a 24-token prompt, prefilled in chunks of 12
    c.admit("a", toks, 12)
    c.publish("a", toks, 12)  # boundary 8 is recorded but classified Chunk (the endpoint is 24)
    assert state_keys(c) == {}
    c.admit("a", toks, 24)
    c.publish("a", toks, 24)
    assert state_keys(c) == {11: BoundaryKind.ENDPOINT}
    grown = toks + list(range(100, 108))
    for n in range(25, 33):  # decode up to the next boundary, 32
        assert c.admit("a", grown, n, decode=True) is not None
        c.publish("a", grown, n, decode=True, prompt_tokens=24)
    assert state_keys(c) == {11: BoundaryKind.ENDPOINT}
    assert len(c.indexes[0]) == 4  # the history group publishes decode pages as before
    assert check_cache(c.state()) == []


def test_promoted_boundary_and_provenance_required():
    c = coord()
    toks = list(range(1, 25))
    c.admit("a", toks, 12)
    c.publish("a", toks, 12, kind=BoundaryKind.PROMOTED)  # a promoted boundary publishes though not the endpoint
    assert state_keys(c) == {3: BoundaryKind.PROMOTED}
    c.publish("a", toks, 12, kind=BoundaryKind.PROMOTED)  # the record was consumed: nothing new to publish
    assert len(state_keys(c)) == 1


def test_a_later_request_hits_the_published_state_checkpoint():
    c = coord()
    toks = list(range(1, 20))
    c.admit("a", toks, 19)
    c.publish("a", toks, 19)
    c.free("a")
    probe = c.probe(toks + [7, 7, 7])
    assert probe.hit_tokens == 16
    res = c.admit("b", toks + [7, 7, 7], 22, probe=probe)
    table = c.tables["b"][1].ids
    assert table[7] != 0 and [s for s, b in enumerate(table) if b] == [7, 10]  # input (hit) and final only
    assert len(res.fresh[1]) == 1
    assert check_cache(c.state()) == []


def test_promotion_boundary_is_materialized_and_published_promoted():
    """a caches a 24-token prompt (state only at its endpoint, 24). b shares a's first 16 tokens: the full
    group matches 16 but the state group nothing, so the hit is 0 and 16 is a promotion boundary -- b's
    prefill materializes the state there and publishes it Promoted, and c, sharing those 16 tokens, hits 16."""
    c = coord()
    a = list(range(1, 25))
    c.admit("a", a, 24)
    c.publish("a", a, 24)
    c.free("a")
    b = a[:16] + list(range(90, 102))  # 28 tokens: its own endpoint is 24
    probe = c.probe(b)
    assert probe.hit_tokens == 0 and probe.closed_tokens == 16
    c.admit("b", b, len(b), probe=probe)
    assert [s for s, blk in enumerate(c.tables["b"][1].ids) if blk] == [7, 11, 13]  # promotion, aligned, final
    c.publish("b", b, len(b))
    kinds = sorted((e.logical_index, e.kind) for _, e in c.indexes[1].entries())
    assert kinds == [(7, BoundaryKind.PROMOTED), (11, BoundaryKind.ENDPOINT), (11, BoundaryKind.ENDPOINT)]
    assert c.probe(a[:16] + [70, 71, 72]).hit_tokens == 16
