"""TS-ST-*: snapshot-state groups in the observable contract. Each rule keeps on a legal crafted cachetrace/1 and
fires on a crafted violation; each also fires on the real TokenSpeed wheel's plans perturbed by one injected fault,
and the wheel's own state-group findings are pinned by a run (tests at the end, skipped without the wheel).

Crafted traces use P = 4, a full-attention group "full" (index 0, 20 pages) and the wheel's State group "state"
(index 1, block_granularity 0: a compact row -- input, final state, internal checkpoint), 16 Host pages. Request a
prefills 10 tokens in two chunks: [0, 6) (state row [3, 4]) and [6, 10) with an internal checkpoint at 8
(checkpoint_lengths 2; row [4, 6, 7]: 6 the final state at 10, 7 the checkpoint at 8); its first decode rolls the
row to [6, 8]. Request b shares a's first 8 tokens and hits them: its input state is block 7.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvsim.kvmodel.cache.prefix_hash import prefix_hashes
from kvsim.sim.peers.cachetrace import state_group
from kvsim.sim.peers.cachetrace.causes import PARTIAL_TAIL
from kvsim.sim.peers.cachetrace.contract import Contract
from kvsim.sim.trace import cachetrace as ct
from kvsim.spec.catalogue import all_rules

A = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
B = [1, 2, 3, 4, 5, 6, 7, 8, 40, 41, 42]
H = prefix_hashes(A, 4)  # a's two whole pages: H[1] is the key of the boundary at 8
SAMPLES = Path(__file__).resolve().parents[2] / "sim" / "peers" / "samples"
ST = ("TS-ST-1", "TS-ST-2", "TS-ST-3", "TS-ST-4", "TS-ST-5")


def contract(host=16, bg=0):
    return Contract(ct.Config(scheduler="test", prefix_granularity=4, num_device_pages=20, num_host_pages=host,
                              groups=[ct.Group("full", 4, 20), ct.Group("state", bg, 20, "mamba")]))


def plan(n, ids=(), ext=0, inl=(), pfx=(), full=None, state=None, zero=None, cache=(), ckpt=()):
    pre = {"a": len(A), "b": len(B)}
    tables = {k: v for k, v in (("full", full), ("state", state)) if v}
    return ct.Plan(n, ct.Batch(list(ids), ext, list(inl), list(pfx), [pre[r] for r in ids], [], list(ckpt)),
                   tables, zero or {}, {}, list(cache))


def wb(oid, pairs, groups, keys):
    return ct.CacheOp("WriteBackOp", [oid], pairs, groups=groups, keys=keys, offsets=[0] * len(pairs), pinned=True)


STORE = wb(1, [(1, 1), (2, 2), (7, 3)], [0, 0, 1], [H[0], H[1], H[1]])


def prefill_a(ckpt=True, store=STORE, finish=()):
    """a: chunk [0, 6), chunk [6, 10) with its checkpoint at 8, then one decode (plan 2) that stores pages 0, 1
    and the checkpoint; ``finish`` ends a with that decode."""
    last = plan(1, ["a"], 1, [4], [6], {"a": [1, 2, 5]}, {"a": [4, 6, 7] if ckpt else [4, 6]},
                {"full": [5], "state": [6, 7] if ckpt else [6]}, ckpt=[2] if ckpt else [])
    return [(ct.Submit("a", A, 3), 2), (ct.Submit("b", B, 1), 3),
            (plan(0, ["a"], 1, [6], [0], {"a": [1, 2]}, {"a": [3, 4]}, {"full": [1, 2], "state": [3, 4]}), 4),
            (ct.Result(0, [[]]), 5), (last, 6), (ct.Result(1, [[50]]), 7),
            (plan(2, ["a"], 0, [1], [], state={"a": [6, 8]}, zero={"state": [8]}, cache=[store] if store else []), 8),
            (ct.Result(2, [[51]], list(finish), [1] if store else []), 9)]


def hit_b(state_row=(7, 10)):
    """b is admitted with an 8-token hit: full pages 1, 2 and, as its input state, ``state_row[0]``."""
    return [(plan(3, ["b"], 1, [3], [8], {"b": [1, 2, 9]}, {"b": list(state_row)}, {"full": [9], "state": [10]}), 10),
            (ct.Result(3, [[60]], ["b"]), 11)]


DRAINED = [(plan(90), 90), (ct.Result(90, []), 91)]  # a last plan that schedules nothing and issues no op


def run(steps, c=None):
    c = c or contract()
    for rec, line in steps:
        c.apply(rec, line)
    c.finish(999)
    return c


def found(c, rule=None):
    return sorted({(f.rule, f.line) for f in c.findings if f.rule in ST and (rule is None or f.rule == rule)})


def test_every_state_rule_is_a_catalogue_rule_of_the_cache_scope():
    cat = {r.id: r for r in all_rules()}
    for rid in state_group.RULES:
        assert rid in cat and cat[rid].scope == "cache" and "state_group.StateGroups" in cat[rid].checker_name
        assert "L7" in cat[rid].clause or "L8" in cat[rid].clause or "L18" in cat[rid].clause


@pytest.mark.rule("TS-ST-1", "keeps")
@pytest.mark.rule("TS-ST-2", "keeps")
@pytest.mark.rule("TS-ST-3", "keeps")
@pytest.mark.rule("TS-ST-4", "keeps")
def test_checkpoint_at_the_aligned_boundary_stored_and_hit_is_clean():
    c = run(prefill_a() + hit_b())
    assert found(c) == []
    assert all(c.exercised[r] >= 1 for r in ("TS-ST-1", "TS-ST-2", "TS-ST-3", "TS-ST-4"))
    st = c.summary()["state_groups"]
    assert (st["checkpoints"], st["state_hits"], st["state_stores"], st["decode_state_writes"]) == (1, 1, 1, 1)


@pytest.mark.rule("TS-ST-1", "keeps")
def test_absolute_state_rows_are_read_at_their_positions():
    # block_granularity 4: the state after b tokens sits at slot (b - 1) // 4 (seed L82), null holes elsewhere
    steps = [(ct.Submit("a", A, 3), 2), (ct.Submit("b", B, 1), 3),
             (plan(0, ["a"], 1, [10], [0], {"a": [1, 2, 5]}, {"a": [0, 7, 6]}, {"full": [1, 2, 5], "state": [6, 7]},
                   ckpt=[8]), 4), (ct.Result(0, [[50]], ["a"]), 5),
             (plan(1, ["b"], 1, [3], [8], {"b": [1, 2, 9]}, {"b": [0, 7, 10]}, {"full": [9], "state": [10]}), 6),
             (ct.Result(1, [[60]], ["b"]), 7)]
    c = run(steps, contract(host=0, bg=4))
    assert found(c) == [] and c.summary()["state_groups"]["state_hits"] == 1


@pytest.mark.rule("TS-ST-1", "fires")
def test_state_stored_under_the_key_of_a_partial_page_fires():
    # block 6 holds a's state after 10 tokens: no prefix boundary, whatever key it is stored under
    tail = prefix_hashes(A + [50, 51], 4)[2]
    c = run(prefill_a(store=wb(1, [(6, 1)], [1], [tail])))
    assert found(c) == [("TS-ST-1", 8)] and "not a multiple of prefix_granularity" in c.findings[0].message


@pytest.mark.rule("TS-ST-1", "fires")
def test_state_stored_under_another_boundarys_key_or_from_an_unwritten_block_fires():
    c = run(prefill_a(store=wb(1, [(7, 1)], [1], [H[0]])))  # the checkpoint at 8 under the key of 4
    assert found(c) == [("TS-ST-1", 8)] and "whose prefix key is" in c.findings[0].message
    c = run(prefill_a() + hit_b((3, 10)))  # block 3: a's input state at 0, zeroed and never written
    assert found(c) == [("TS-ST-1", 10)]
    c = run(prefill_a() + hit_b((4, 10)))  # block 4: a's chunk state at 6
    assert found(c) == [("TS-ST-1", 10)] and "after 6 tokens" in c.findings[0].message


@pytest.mark.rule("TS-ST-2", "fires")
def test_a_decode_state_stored_or_hit_fires():
    c = run(prefill_a() + [(plan(3, ["a"], 0, [1], [], cache=[wb(2, [(8, 4)], [1], ["ab" * 32])]), 10),
                           (ct.Result(3, [[52]], ["a"], [2]), 11)])
    assert found(c) == [("TS-ST-2", 10)] and "decode" in c.findings[0].message
    c = run(prefill_a() + hit_b((8, 10)))  # b's input state is the block a's decode writes
    assert found(c) == [("TS-ST-2", 10)]


@pytest.mark.rule("TS-ST-3", "fires")
def test_a_checkpoint_off_the_last_aligned_boundary_fires():
    steps = prefill_a()
    steps[4] = (plan(1, ["a"], 1, [4], [6], {"a": [1, 2, 5]}, {"a": [4, 6, 7]}, {"full": [5], "state": [6, 7]},
                     ckpt=[1]), 6)  # at 7, not floor(10/4)*4 = 8
    c = run(steps[:6])
    assert ("TS-ST-3", 6) in found(c) and "floor(10/4)*4 = 8" in c.findings[0].message
    # an extent ending on a multiple of P has no internal checkpoint: [4, 8) checkpointing at 4 + 3 fires too
    c = contract(host=0)
    for rec, line in [(ct.Submit("a", A, 3), 2), (plan(0, ["a"], 1, [8], [0], {"a": [1, 2]}, {"a": [3, 4, 5]},
                                                       {"full": [1, 2], "state": [3, 4, 5]}, ckpt=[4]), 3)]:
        c.apply(rec, line)
    assert found(c, "TS-ST-3") == [("TS-ST-3", 3)] and "not strictly inside" in c.findings[0].message


@pytest.mark.rule("TS-ST-4", "fires")
def test_a_short_final_tail_without_its_aligned_checkpoint_fires():
    c = run(prefill_a(ckpt=False, store=None))
    assert found(c) == [("TS-ST-4", 6)] and "last aligned checkpoint 8" in c.findings[0].message
    # a one-chunk prefill of the whole prompt writes no state at 8 either
    c = contract(host=0)
    for rec, line in [(ct.Submit("a", A, 3), 2), (plan(0, ["a"], 1, [10], [0], {"a": [1, 2, 5]}, {"a": [3, 4]},
                                                       {"full": [1, 2, 5], "state": [3, 4]}), 3)]:
        c.apply(rec, line)
    assert found(c) == [("TS-ST-4", 3)]


@pytest.mark.rule("TS-ST-4", "keeps")
def test_a_chunk_ending_at_the_aligned_checkpoint_is_its_endpoint():
    c = contract(host=0)
    for rec, line in [(ct.Submit("a", A, 3), 2),
                      (plan(0, ["a"], 1, [8], [0], {"a": [1, 2]}, {"a": [3, 4]}, {"full": [1, 2], "state": [3, 4]}), 3),
                      (ct.Result(0, [[]]), 4),
                      (plan(1, ["a"], 1, [2], [8], {"a": [1, 2, 5]}, {"a": [4, 6]}, {"full": [5], "state": [6]}), 5)]:
        c.apply(rec, line)
    assert found(c) == [] and c.exercised["TS-ST-4"] == 1


@pytest.mark.rule("TS-ST-5", "keeps")
def test_newest_checkpoint_stored_before_the_end_is_clean():
    c = run(prefill_a(finish=["a"]) + DRAINED)
    assert found(c) == [] and c.exercised["TS-ST-5"] == 1
    assert c.summary()["state_groups"]["checkpoints_stored"] == 1


@pytest.mark.rule("TS-ST-5", "keeps")
def test_checkpoint_evicted_before_its_store_or_an_undrained_end_is_not_judged():
    evict = [(plan(3, zero={"state": [7]}), 10), (ct.Result(3, []), 11)]
    c = run(prefill_a(store=None, finish=["a"]) + evict + DRAINED)
    assert found(c) == [] and c.summary()["state_groups"]["checkpoints_evicted_unstored"] == 1
    c = run(prefill_a(store=None, finish=["a"]))  # the trace ends with the decode: not drained
    assert found(c) == []


@pytest.mark.rule("TS-ST-5", "fires")
def test_newest_checkpoint_never_stored_fires_at_a_drained_end():
    c = run(prefill_a(store=wb(1, [(1, 1), (2, 2)], [0, 0], [H[0], H[1]]), finish=["a"]) + DRAINED)
    assert found(c) == [("TS-ST-5", 999)] and "state at 8 tokens" in c.findings[0].message
    c = run(prefill_a(store=wb(1, [(7, 3)], [1], [""]), finish=["a"]) + DRAINED)  # an unkeyed store indexes nothing
    assert found(c) == [("TS-ST-5", 999)]


def stored(*ends):
    """A KV-event batch after plan 2 storing a's pages ending at ``ends`` tokens (TokenSpeed's FNV-1a chain)."""
    from kvsim.sim.peers.judges.block_hash import fnv1a64
    toks = A + [50, 51]
    chain = [fnv1a64(None, toks[0:4])]
    chain.append(fnv1a64(chain[0], toks[4:8]))
    events = [ct.BlockStored([fnv1a64(chain[(n - 1) // 4 - 1] if n > 4 else None, toks[(n - 1) // 4 * 4:n])],
                             chain[(n - 1) // 4 - 1] if n > 4 else None, toks[(n - 1) // 4 * 4:n], 4) for n in ends]
    return [(ct.KvEvents(2, events), 10)]


@pytest.mark.rule("TS-ST-1", "keeps")
@pytest.mark.rule("TS-ST-2", "keeps")
def test_a_stored_page_ending_at_a_prefill_checkpoint_is_clean():
    """The KV events announce a's page ending at 8 (its checkpoint, plan 1): the state group published a prefill
    state at a prefix boundary. A page no tracked forward wrote a state for is not judged."""
    c = run(prefill_a() + stored(8, 4))
    assert found(c) == [] and c.state.pub.stats == {"stored_pages_judged": 1, "unattributed": 1}


@pytest.mark.rule("TS-ST-2", "fires")
@pytest.mark.rule("TS-ST-1", "fires")
def test_a_stored_page_ending_where_a_decode_or_a_prompts_tail_wrote_fires():
    """The page ending at 11 (a's decode wrote the state there, plan 2): TS-ST-2; the page ending at 10 (a's prefill
    wrote its final state there, no prefix boundary): TS-ST-1 -- both the partial tail's cause, one root."""
    c = run(prefill_a() + stored(11, 10))
    assert found(c) == [("TS-ST-1", 10), ("TS-ST-2", 10)]
    two, one = c.findings
    assert "a's prefix page ending at 11 tokens" in two.message and "only a's decode wrote one" in two.message
    assert "ending at 10 tokens" in one.message and one.of == two.id == 1
    assert two.context["cause"] == one.context["cause"] == PARTIAL_TAIL


def gauged(active_at_checkpoint: int):
    """prefill_a with the page gauge on its plans: after plan 0 the rows name 4 blocks, after plan 1 (the checkpoint
    at 8) 6 -- full 1, 2, 5 and state 4, 6, 7 -- and after plan 2 5."""
    steps = prefill_a()
    for (rec, _line), active in zip([steps[2], steps[4], steps[6]], [4, active_at_checkpoint, 5], strict=True):
        rec.gauge = [19 - 8, active]
    return steps


@pytest.mark.rule("TS-POOL-5", "keeps")
def test_the_gauge_counts_a_state_rows_blocks_and_its_internal_checkpoint_active():
    """A state group's rows are live tables: the checkpoint a plan materializes is a slot of its request's table
    (seed L74), so the gauge's active count includes it."""
    c = run(gauged(6))
    assert [f for f in c.findings if f.rule == "TS-POOL-5"] == [] and c.capacity.stats["gauge_compared"] == 3


@pytest.mark.rule("TS-POOL-5", "fires")
def test_a_gauge_leaving_the_internal_checkpoint_out_fires_once_per_cause():
    """The wheel's gauge counts the checkpoint as cache-only residency: TS-POOL-5 names the cause; a later plan
    short by its own checkpoints is that root's consequence, not a second finding."""
    c = run(gauged(5))
    (f,) = [f for f in c.findings if f.rule == "TS-POOL-5"]
    assert f.line == 6 and "internal state checkpoint(s) this plan materializes are counted as cache-only" in f.message
    assert f.id == 1 and f.context["cause"] == "internal state checkpoints outside the active count"
    c = run(gauged(4))  # short by two blocks, one plan with one checkpoint: no known cause
    (f,) = [f for f in c.findings if f.rule == "TS-POOL-5"]
    assert "cache-only" not in f.message and "cause" not in f.context


def test_block_granularity_zero_is_only_a_state_groups():
    with pytest.raises(ValueError, match="block_granularity 0"):
        Contract(ct.Config(scheduler="t", prefix_granularity=4, num_device_pages=20,
                           groups=[ct.Group("full", 0, 20)]))


def test_a_state_group_trace_round_trips_through_cachetrace(tmp_path):
    path = tmp_path / "t.cachetrace.jsonl"
    c = contract()
    w = ct.CacheTraceWriter(path, ct.Header(format=ct.FORMAT, config=c.config))
    for rec, _line in prefill_a() + hit_b():
        w.write(rec)
    w.close()
    header, lines = ct.read_cachetrace(path)
    again = Contract(header.config)
    for n, rec in lines:
        again.apply(rec, n)  # type: ignore[arg-type]
    again.finish(n)
    assert header.config.groups[1].block_granularity == 0 and found(again) == []
    bad = tmp_path / "bad.jsonl"
    bad.write_text(path.read_text().replace('"attn_kind":"mamba"', '"attn_kind":"full"'))
    with pytest.raises(ct.CacheTraceInputError, match="block_granularity 0"):
        ct.read_cachetrace(bad)


# -- the real wheel ------------------------------------------------------------------------------------------------

FAULT_RUNS = {
    "foreign-state-hit": {}, "decode-state-hit": {}, "misplaced-checkpoint": {}, "skip-endpoint": {},
    "unkeyed-state-store": {"host_pages": 64},
}


@pytest.mark.parametrize("name", sorted(FAULT_RUNS))
def test_injected_state_fault_fires_its_rule_on_the_wheel(name):
    """state_workload.jsonl with a 512-token chunk budget (whole-page hits on Endpoints, no partial tail reused): its
    TS-ST findings are only the partial tail's -- states the KV events show published at a tail -- and each fault
    adds a finding of its rule that is not."""
    pytest.importorskip("tokenspeed_scheduler")
    from kvsim.sim.peers import tokenspeed as T
    from kvsim.sim.peers.tokenspeed import faults
    from kvsim.sim.peers.workload import read_mooncake

    reqs = read_mooncake(SAMPLES / "state_workload.jsonl")
    kw = {"pages": 400, "state_group": True, "stagger": 3, "max_scheduled_tokens": 512, **FAULT_RUNS[name]}
    clean = T.run(reqs, T.RunConfig(**kw))
    bad = T.run(reqs, T.RunConfig(**kw, fault=name))
    rule = faults.NAMES[name]
    # the clean run's own TS-ST-1/2 findings are the states the KV events show published on Device (at partial
    # tails, and m5's decode state at 704): the fault's is one more, of another cause
    assert clean.contract.exercised[rule] >= 1
    seen = {(f.rule, f.message) for f in clean.contract.findings}
    new = [f for f in bad.contract.findings if f.rule == rule and (f.rule, f.message) not in seen]
    assert bad.fault_applied and new, (name, bad.contract.summary()["violations_by_rule"])
    assert all(f.context.get("cause") != PARTIAL_TAIL for f in new)


def test_state_group_run_on_the_wheel_reports_its_findings(tmp_path):
    """`kvsim peer tokenspeed --state-group` on the tiny workload (P = 64, a Host tier), 256-token chunks: the
    released wheel (0.1.42) publishes each prompt's end state under its partial tail's key and reuses it on a tail
    hit (TS-ST-1), stores each finished request's running decode state (TS-ST-2), and checkpoints a whole-page
    prompt's last chunk one page short of its end (TS-ST-3: floor((after - 1)/P)*P, where the seed's
    floor(after/P)*P is the end itself). With one chunk per prompt (the default budget) it writes no state at the
    last aligned boundary before a short tail (TS-ST-4)."""
    pytest.importorskip("tokenspeed_scheduler")
    import json

    from kvsim.sim.cli import main

    argv = ["peer", "tokenspeed", str(SAMPLES / "tiny_workload.jsonl"), "--state-group", "--host-pages", "64",
            "--pages", "400", "--stagger", "3", "--no-timing", "--quiet"]
    out = tmp_path / "chunked.json"
    assert main([*argv, "--max-scheduled-tokens", "256", "--json", str(out)]) == 1
    rep = json.loads(out.read_text())
    by = {rid for rid, r in rep["rules"].items() if r["violated"] or r.get("consequences")}  # roots or not
    assert {"TS-ST-1", "TS-ST-2", "TS-ST-3"} <= by and "TS-ST-4" not in by and "TS-ST-5" not in by
    msg = next(v["message"] for v in rep["violations"] if v["rule"] == "TS-ST-3")
    assert "m1's extend [512, 640)" in msg and "at 576" in msg
    out = tmp_path / "whole.json"
    assert main([*argv, "--json", str(out)]) == 1
    assert "TS-ST-4" in {v["rule"] for v in json.loads(out.read_text())["violations"]}


def test_state_endpoint_before_a_short_tail_is_a_rule_finding_on_the_wheel():
    """The reproducer of the short-tail Endpoint finding (seed L78), now judged: a 40-token prompt (P = 16) run in
    one chunk writes no state at 32, so TS-ST-4 fires; a second prompt sharing the first 32 tokens hits 0."""
    pytest.importorskip("tokenspeed_scheduler")
    import numpy as np

    from kvsim.sim.peers import tokenspeed as T
    from kvsim.sim.peers.workload import Request

    first = list(range(1000, 1040))
    second = first[:32] + list(range(2000, 2020))
    reqs = [Request(f"r{i}", np.array(x, dtype=np.int64), 3, ()) for i, x in enumerate((first, second))]
    out = T.run(reqs, T.RunConfig(pages=400, prefix_granularity=16, state_group=True, stagger=-1))
    assert [(f.rule, f.context["request"]) for f in out.contract.findings if f.rule == "TS-ST-4"] == \
        [("TS-ST-4", "r0"), ("TS-ST-4", "r1")]
    assert out.contract.hits == {"r0": 0, "r1": 0}


def test_state_checkpoints_reproducer_replays_to_its_findings(capsys):
    """sim/peers/samples/findings/state_checkpoints.cachetrace.jsonl (recorded on the wheel, command in the samples
    README): `kvsim replay` reports the State-group findings at the lines the README names, one cause one finding --
    the partial tail's root (TS-ST-2 at 15: the KV events show m0's decode state published on Device) with TS-ST-1 at
    22, 24, 25, 27 and TS-ST-2 at 16, 27, 28 its consequences, the gauge's (TS-POOL-5 at 7) with the one at 19."""
    import re

    from kvsim.sim.cli import main
    from kvsim.sim.peers.cachetrace.judge import judge_cachetrace

    path = SAMPLES / "findings" / "state_checkpoints.cachetrace.jsonl"
    assert main(["replay", str(path)]) == 1
    out = capsys.readouterr().out
    got = sorted({(m[2], int(m[1])) for m in re.finditer(r":(\d+): (TS-[A-Z]+-\d) ", out)})
    assert got == [("TS-POOL-5", 7), ("TS-ST-2", 15), ("TS-ST-3", 7), ("TS-ST-4", 22)]
    assert "4 findings (10 consequences suppressed)" in out
    c = judge_cachetrace(path).contract
    after = sorted({(f.rule, f.line, f.of) for f in c.findings if f.of is not None})
    assert after == [("TS-POOL-5", 19, 2), ("TS-ST-1", 22, 3), ("TS-ST-1", 24, 3), ("TS-ST-1", 25, 3),
                     ("TS-ST-1", 27, 3), ("TS-ST-2", 16, 3), ("TS-ST-2", 27, 3), ("TS-ST-2", 28, 3)]
    # the root: the KV events announce m0's page ending at 642 tokens, its decode's state published on Device
    (root,) = [f for f in c.findings if f.id == 3]
    assert "m0's prefix page ending at 642 tokens" in root.message and "only m0's decode wrote one" in root.message


def test_the_ts_st_3_checkpoint_is_what_a_repeat_of_the_prompt_reads():
    """sim/peers/samples/findings/state_repeat.cachetrace.jsonl (recorded on the wheel, command in the samples README):
    m0's 640-token prompt runs its last chunk [512, 640) with its checkpoint at 576 (TS-ST-3, seed L82); m1, the same
    prompt again, hits 576 -- one page short of its last token, which must be computed -- and its input state is
    that checkpoint's block: a state a repeat reads, published at its exact prefix boundary (TS-ST-1 clean)."""
    from kvsim.sim.peers.cachetrace.judge import judge_cachetrace

    path = SAMPLES / "findings" / "state_repeat.cachetrace.jsonl"
    _header, lines = ct.read_cachetrace(path)
    plans = [rec for _n, rec in lines if isinstance(rec, ct.Plan) and rec.batch.extends]
    ck_plan = next(p for p in plans if p.batch.checkpoint_lengths)
    assert ck_plan.batch.requests[0] == "m0" and ck_plan.batch.prefix_lengths[0] + ck_plan.batch.checkpoint_lengths[0] \
        == 576
    checkpoint_block = ck_plan.tables["state"]["m0"][2]
    repeat = next(p for p in plans if p.batch.requests[0] == "m1")
    assert repeat.batch.prefix_lengths[0] == 576 and repeat.tables["state"]["m1"][0] == checkpoint_block
    c = judge_cachetrace(path).contract
    assert c.hits == {"m0": 0, "m1": 576} and c.state.stats["state_hits"] == 1
    assert sorted({f.rule for f in c.findings}) == ["TS-POOL-5", "TS-ST-2", "TS-ST-3"]  # the hit itself is clean


def test_a_chunked_prompt_whose_last_chunk_starts_off_a_page_writes_no_endpoint():
    """state_checkpoints.cachetrace.jsonl: m2's 200-token prompt is cut in two by the 256-token budget it shares with
    m1's 188-token chunk -- [0, 68) and [68, 200) -- and the wheel materializes no state at 192 in the final chunk,
    which starts off a page boundary: TS-ST-4 at line 22 (chunked prompts are not clean; only a final chunk starting
    on a multiple of P carries the Endpoint)."""
    from kvsim.sim.peers.cachetrace.judge import judge_cachetrace

    path = SAMPLES / "findings" / "state_checkpoints.cachetrace.jsonl"
    _header, lines = ct.read_cachetrace(path)
    m2 = [(rec.batch.prefix_lengths[k], rec.batch.input_lengths[k],
           rec.batch.checkpoint_lengths[k] if k < len(rec.batch.checkpoint_lengths) else 0)
          for _n, rec in lines if isinstance(rec, ct.Plan)
          for k, rid in enumerate(rec.batch.requests[:rec.batch.extends]) if rid == "m2"]
    assert m2 == [(0, 68, 0), (68, 132, 0)]
    c = judge_cachetrace(path).contract
    assert [(f.rule, f.line, f.context["request"]) for f in c.findings if f.rule == "TS-ST-4"] == \
        [("TS-ST-4", 22, "m2")]


def test_every_state_rule_is_tested_both_ways():
    marks = {(m.args[0], m.args[1]) for f in globals().values() if callable(f)
             for m in getattr(f, "pytestmark", []) if m.name == "rule"}
    assert {(rid, k) for rid in state_group.RULES for k in ("keeps", "fires")} <= marks


def test_state_group_with_forced_retraction_on_the_wheel():
    """Retraction through the snapshot pool with a State group: the stream-ordered snapshot store copies the state
    rows too (TS-L2-2 counts them as the retracted request's), each retraction's store keys the running decode state
    (TS-ST-2, the finish finding's cause), and the newest prefill checkpoints are stored (TS-ST-5 clean)."""
    pytest.importorskip("tokenspeed_scheduler")
    from kvsim.sim.peers import tokenspeed as T
    from kvsim.sim.peers.workload import read_mooncake

    out = T.run(read_mooncake(SAMPLES / "tiny_workload.jsonl"),
                T.RunConfig(pages=400, host_pages=64, stagger=3, snapshot_pages=16, max_retracted=2,
                            force_retraction=7, max_scheduled_tokens=256, state_group=True))
    c = out.contract
    assert c.headroom.stats["readmissions"] >= 1 and out.engine_error is None and not out.stalled
    assert not [r for r, n in c.counts.items() if n and r.startswith("TS-L2")]
    assert c.counts["TS-ST-5"] == 0 and c.exercised["TS-ST-5"] >= 1 and c.counts["TS-ST-2"] >= 1
