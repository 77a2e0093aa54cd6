"""The observable contract: legal plans pass; each crafted violation fires its rule at its line.

Plans here use P = 4 and one full-attention group of 10 pages (null page 0 included), no Host tier unless a
test says so. Request a computes two pages (blocks 1, 2); b shares a's first page through the same key."""

import pytest

from kvsim.sim.peers.cachetrace.contract import Contract
from kvsim.sim.trace import cachetrace as ct

A = [1, 2, 3, 4, 5, 6, 7, 8, 9]
B = [1, 2, 3, 4, 7, 7, 7, 7, 7]


def contract(pages=10, host_pages=0):
    return Contract(ct.Config(scheduler="test", prefix_granularity=4, groups=[ct.Group("full", 4, pages)],
                              num_device_pages=pages, num_host_pages=host_pages))


def plan(n, ids, ext, inl, pfx, tables=None, zero=None, copy=None, cache=None, aborts=None):
    return ct.Plan(n, ct.Batch(ids, ext, inl, pfx, [len(A)] * len(ids)), {"full": tables or {}},
                   {"full": zero} if zero else {}, {"full": copy} if copy else {}, cache or [], aborts or [])


def run(steps, host_pages=0):
    """steps: (record, line) pairs; returns the (rule, line) findings."""
    c = contract(host_pages=host_pages)
    for rec, line in steps:
        c.apply(rec, line)
    c.finish(999)
    return [(f.rule, f.line) for f in c.findings]


def a_computed():
    """a prefills all 9 tokens in plan 0 (blocks 1, 2, 3); its pages 0 and 1 are published."""
    return [(ct.Submit("a", A, 1), 2), (ct.Submit("b", B, 1), 3),
            (plan(0, ["a"], 1, [9], [0], {"a": [1, 2, 3]}, [1, 2, 3]), 4), (ct.Result(0, [[50]], ["a"]), 5)]


def test_legal_hit_through_the_same_key():
    steps = a_computed() + [(plan(1, ["b"], 1, [5], [4], {"b": [1, 4, 5]}, [4, 5]), 6), (ct.Result(1, [[9]], ["b"]), 7)]
    assert run(steps) == []


def test_legal_swap_to_canonical_and_tail_copy():
    steps = [(ct.Submit("a", A, 2), 2), (ct.Submit("c", A, 2), 3),
             (plan(0, ["a", "c"], 2, [9, 9], [0, 0], {"a": [1, 2, 3], "c": [4, 5, 6]}, [1, 2, 3, 4, 5, 6]), 4),
             (ct.Result(0, [[50], [50]]), 5),
             # c's computed pages swap to a's canonical blocks; first decodes copy the tails
             (plan(1, ["a", "c"], 0, [1, 1], [], {"a": [1, 2, 7], "c": [1, 2, 8]}, copy=[(3, 7), (6, 8)]), 6),
             (ct.Result(1, [[51], [51]], ["a", "c"]), 7)]
    assert run(steps) == []


def test_alias_through_another_key_fires_ts_tbl_1():
    steps = a_computed() + [(plan(1, ["b"], 1, [5], [4], {"b": [2, 4, 5]}, [4, 5]), 6)]
    assert run(steps) == [("TS-TBL-1", 6)]


def test_hit_served_by_a_fresh_copy_of_the_published_block_fires_ts_tbl_1():
    """Seed 002 L154: publication shares the canonical block ("registration neither allocates nor copies
    physical storage"). b hits a's first page, but its slot 0 names block 6, a fresh copy of a's published
    block 1, instead of block 1 itself."""
    steps = a_computed() + [(plan(1, ["b"], 1, [5], [4], {"b": [6, 4, 5]}, [4, 5], [(1, 6)]), 6)]
    assert run(steps) == [("TS-TBL-1", 6)]
    legal = a_computed() + [(plan(1, ["b"], 1, [5], [4], {"b": [1, 4, 5]}, [4, 5]), 6)]  # the canonical block
    assert run(legal) == []


def test_fresh_block_to_two_tables_fires_ts_tbl_1():
    steps = [(ct.Submit("a", A, 1), 2), (ct.Submit("b", B, 1), 3),
             (plan(0, ["a", "b"], 2, [9, 9], [0, 0], {"a": [1, 2, 3], "b": [4, 5, 3]}, [1, 2, 3, 4, 5]), 4)]
    assert set(run(steps)) == {("TS-TBL-1", 4)}  # the fresh block twice, then each write into it


def test_write_into_a_shared_block_fires_ts_tbl_1():
    steps = a_computed()[:3] + [(plan(0, ["a"], 1, [6], [0], {"a": [1, 2]}, [1, 2]), 4),
                                (ct.Result(0, [[]]), 5),
                                # b hits page 0 (block 1, legal) but its table also names a's partial block 2
                                (plan(1, ["b", "a"], 2, [5, 3], [4, 6], {"b": [1, 2, 3], "a": [1, 2, 3]}, [3]), 6)]
    found = run(steps)
    assert ("TS-TBL-1", 6) in found


def test_null_block_fires_ts_pool_4():
    steps = a_computed()[:2] + [(plan(0, ["a"], 1, [9], [0], {"a": [1, 0, 3]}, [1, 3, 0]), 4)]
    assert sorted(run(steps)) == [("TS-POOL-4", 4), ("TS-POOL-4", 4)]


def test_full_attention_minus_one_mid_row_fires_ts_pool_4():
    """Seed 002 L165 "full attention never expires": -1 only as trailing padding; a live row never loses a slot."""
    legal = a_computed()[:2] + [(plan(0, ["a"], 1, [9], [0], {"a": [1, 2, 3, -1, -1]}, [1, 2, 3]), 4)]
    assert run(legal) == []  # trailing padding
    mid = a_computed()[:2] + [(plan(0, ["a"], 1, [9], [0], {"a": [1, -1, 3]}, [1, 3]), 4)]
    assert run(mid) == [("TS-POOL-4", 4)]
    live = [(ct.Submit("a", A, 3), 2), (plan(0, ["a"], 1, [9], [0], {"a": [1, 2, 3]}, [1, 2, 3]), 4),
            (ct.Result(0, [[50]]), 5)]
    assert run(live + [(plan(1, ["a"], 0, [1], [], {"a": [1, 2, 3]}), 6)]) == []  # a decode in page 2
    lost = live + [(plan(1, ["a"], 0, [1], [], {"a": [1, -1, 3]}), 6)]  # the decode's row punches block 2 out
    assert run(lost) == [("TS-POOL-4", 6)]
    dropped = live + [(plan(1, ["a"], 0, [1], [], {"a": [1, 2]}), 6)]  # slot 2 dropped from a live row
    assert run(dropped) == [("TS-POOL-4", 6)]


def test_hit_not_a_multiple_of_p_fires_ts_pfx_1():
    steps = a_computed() + [(plan(1, ["b"], 1, [6], [3], {"b": [1, 4, 5]}, [4, 5]), 6)]
    assert ("TS-PFX-1", 6) in run(steps)


def test_hit_of_the_whole_prompt_fires_ts_pfx_1():
    steps = [(ct.Submit("a", A[:8], 1), 2), (ct.Submit("b", A[:8], 1), 3),
             (plan(0, ["a"], 1, [8], [0], {"a": [1, 2]}, [1, 2]), 4), (ct.Result(0, [[50]], ["a"]), 5),
             (plan(1, ["b"], 1, [0], [8], {"b": [1, 2]}), 6)]
    assert run(steps) == [("TS-PFX-1", 6)]


def test_block_beyond_the_pool_fires_peer_1():
    steps = a_computed()[:2] + [(plan(0, ["a"], 1, [9], [0], {"a": [1, 2, 12]}, [1, 2, 12]), 4)]
    assert sorted(run(steps)) == [("PEER-1", 4), ("PEER-1", 4)]


def test_zeroing_a_live_block_fires_peer_2():
    steps = [(ct.Submit("a", A, 3), 2), (ct.Submit("b", B, 1), 3),
             (plan(0, ["a"], 1, [9], [0], {"a": [1, 2, 3]}, [1, 2, 3]), 4), (ct.Result(0, [[50]]), 5),
             (plan(1, ["b", "a"], 1, [9, 1], [0], {"b": [4, 5, 3]}, [4, 5, 3]), 6)]
    assert set(run(steps)) == {("PEER-2", 6), ("TS-TBL-1", 6)}  # and both then write into block 3


def test_page_zeroed_twice_in_a_plan_fires_peer_2():
    steps = a_computed()[:2] + [(plan(0, ["a"], 1, [9], [0], {"a": [1, 2, 3]}, [1, 2, 3, 3]), 4)]
    assert run(steps) == [("PEER-2", 4)]


@pytest.mark.parametrize("ops,done,want", [
    ([[7], [7]], [7], [("PEER-3", 4)]),      # issued twice
    ([[7]], [7, 7], [("PEER-3", 5)]),        # acknowledged twice
    ([[7]], [8], [("PEER-3", 5), ("PEER-3", 999)]),  # acknowledged but never issued; 7 never acknowledged
    ([[7]], [7], []),
])
def test_cache_op_acknowledgement_peer_3(ops, done, want):
    cache = [ct.CacheOp("WriteBackOp", ids) for ids in ops]
    steps = [(ct.Submit("a", A, 5), 2), (plan(0, ["a"], 1, [9], [0], {"a": [1, 2, 3]}, [1, 2, 3], cache=cache), 4),
             (ct.Result(0, [[50]], [], done), 5)]
    assert sorted(f for f in run(steps) if f[0] == "PEER-3") == want  # (an op without pages is also TS-L2-3)


def test_hit_on_a_page_computed_in_the_same_plan_fires_peer_4():
    steps = [(ct.Submit("a", A, 1), 2), (ct.Submit("b", B, 1), 3),
             (plan(0, ["a", "b"], 2, [9, 5], [0, 4], {"a": [1, 2, 3], "b": [1, 4, 5]}, [1, 2, 3, 4, 5]), 4)]
    found = run(steps)
    assert ("PEER-4", 4) in found


def test_tail_hit_with_matching_content_is_only_a_granularity_finding():
    # b's first 6 tokens equal a's: a tail hit of 6 copies a's partial block 2 into b's block 4
    b = A[:6] + [0, 0, 0]
    steps = [(ct.Submit("a", A[:6], 1), 2), (ct.Submit("b", b, 1), 3),
             (plan(0, ["a"], 1, [6], [0], {"a": [1, 2]}, [1, 2]), 4), (ct.Result(0, [[50]], ["a"]), 5),
             (plan(1, ["b"], 1, [3], [6], {"b": [1, 4, 5]}, [5], [(2, 4)]), 6)]
    assert run(steps) == [("TS-PFX-1", 6)]


def test_tail_hit_with_other_content_fires_peer_4():
    b = A[:5] + [0, 0, 0, 0]  # shares only 5 tokens, but the scheduler claims 6
    steps = [(ct.Submit("a", A[:6], 1), 2), (ct.Submit("b", b, 1), 3),
             (plan(0, ["a"], 1, [6], [0], {"a": [1, 2]}, [1, 2]), 4), (ct.Result(0, [[50]], ["a"]), 5),
             (plan(1, ["b"], 1, [3], [6], {"b": [1, 4, 5]}, [5], [(2, 4)]), 6)]
    assert sorted(run(steps)) == [("PEER-4", 6), ("TS-PFX-1", 6)]


def test_abort_ends_the_table():
    steps = [(ct.Submit("a", A, 3), 2), (ct.Submit("b", B, 1), 3),
             (plan(0, ["a"], 1, [9], [0], {"a": [1, 2, 3]}, [1, 2, 3], aborts=[ct.Abort("a", "x")]), 4),
             (ct.Result(0, [[]]), 5),
             (plan(1, ["b"], 1, [9], [0], {"b": [3, 2, 1]}, [1, 2, 3]), 6)]
    assert run(steps) == []


def test_load_back_brings_the_written_back_content():
    """a's pages 0-1 are written back to Host pages 40, 41 and later loaded into fresh Device pages 6, 7:
    b may name 6 at slot 0 (same key) but not 7 (a's page 1 is not b's)."""
    ops = [ct.CacheOp("WriteBackOp", [1], [(1, 40), (2, 41)])]
    load = [ct.CacheOp("LoadBackOp", [2], [(40, 6), (41, 7)])]
    ok = a_computed()[:4] + [(plan(1, [], 0, [], [], cache=ops), 6), (ct.Result(1, [], [], [1]), 7),
                             (plan(2, ["b"], 1, [5], [4], {"b": [6, 4, 5]}, [4, 5], cache=load), 8),
                             (ct.Result(2, [[9]], ["b"], [2]), 9)]
    assert run(ok, 64) == []
    bad = ok[:6] + [(plan(2, ["b"], 1, [1], [8], {"b": [6, 7, 5]}, [5], cache=load), 8)]
    assert ("TS-TBL-1", 8) in run(bad, 64)


def test_first_extend_writing_into_a_published_block_fires_ts_tbl_1():
    """b names a's published block 1 at the slot its key covers but reports hit 0, so its first extend writes
    into it: a write into published content, even before anything of b is computed."""
    steps = a_computed() + [(plan(1, ["b"], 1, [9], [0], {"b": [1, 4, 5]}, [4, 5]), 6)]
    assert run(steps) == [("TS-TBL-1", 6)]


def _replay_config():
    return ct.Config(scheduler="test", prefix_granularity=4, num_device_pages=10,
                     groups=[ct.Group("full", 4, 10), ct.Group("swa", 4, 10, "sliding", 4, replayable=True)])


def test_replay_window_rewrites_only_the_replayable_group():
    """b hits a's 8 tokens with a 4-token replay window: its input starts at 4 (prefix_lengths) and re-feeds
    [4, 8) into its private replayable rows; the shared group's write floor is the hit, 8, so a's published
    block 2 is not rewritten. Without the replay length the same plan writes into block 2."""
    def steps(replay):
        b = ct.Batch(["b"], 1, [6], [4] if replay else [8], [10], [4] if replay else [])
        return [(ct.Submit("a", A, 1), 2), (ct.Submit("b", A[:8] + [40, 41], 1), 3),
                (ct.Plan(0, ct.Batch(["a"], 1, [9], [0], [9]), {"full": {"a": [1, 2, 3]}, "swa": {"a": [4, 5, 6]}},
                         {"full": [1, 2, 3], "swa": [4, 5, 6]}), 4), (ct.Result(0, [[50]], ["a"]), 5),
                (ct.Plan(1, b, {"full": {"b": [1, 2, 7]}, "swa": {"b": [0, 8, 9]}}, {"full": [7], "swa": [8, 9]}), 6),
                (ct.Result(1, [[60]], ["b"]), 7)]

    def judge(recs):
        c = Contract(_replay_config())
        for rec, line in recs:
            c.apply(rec, line)
        return [(f.rule, f.line) for f in c.findings]

    assert judge(steps(True)) == []
    # without replay the input [8, 14) never reaches block 2 either; but an 8-token hit must re-feed the 4-token
    # window (TS-PFX-3)
    assert judge(steps(False)) == [("TS-PFX-3", 6)]
    bad = steps(True)
    bad[4] = (ct.Plan(1, ct.Batch(["b"], 1, [6], [4], [10]), {"full": {"b": [1, 2, 7]}, "swa": {"b": [0, 8, 9]}},
                      {"full": [7], "swa": [8, 9]}), 6)  # the same input with no replay length rewrites block 2
    assert judge(bad) == [("TS-PFX-3", 6), ("TS-TBL-1", 6)]  # (and a 4-token hit re-feeding nothing)


def test_an_engine_error_record_is_peer_10_and_ends_the_judgement():
    """cachetrace/1 ``error``: the scheduler failed a call; what it left open (an unacknowledged op) is no
    further finding."""
    steps = a_computed()[:3] + [(plan(1, [], 0, [], [], cache=[ct.CacheOp("WriteBackOp", [1], [(1, 40)])]), 6),
                                (ct.EngineError(1, "advance", "one cache block location cannot change cache key"), 7)]
    c = contract(host_pages=64)
    for rec, line in steps:
        c.apply(rec, line)
    c.finish(8)
    assert [(f.rule, f.line) for f in c.findings] == [("PEER-10", 7)]
    assert "failed advance after plan 1" in c.findings[0].message


def test_a_clean_run_keeps_peer_10():
    c = contract()
    for rec, line in a_computed():
        c.apply(rec, line)
    c.finish(9)
    assert c.findings == [] and c.exercised["PEER-10"] == 1 and c.counts["PEER-10"] == 0
