"""One cause, one finding, in the contract judge (sim/peers/cachetrace/causes.py): a finding naming a cause or an
entity an earlier root marked is that root's consequence -- counted apart, never a violation -- and the report's
headline says "N findings (M consequences suppressed)". Crafted findings first, then the state-group traces of
tests/peers/test_state_group.py, then the retraction run on the real wheel (skipped without it)."""

from __future__ import annotations

import pytest

from kvsim.sim.peers.cachetrace.causes import PARTIAL_TAIL, Causes
from kvsim.sim.peers.cachetrace.rules import Finding
from kvsim.sim.peers.report import build
from kvsim.sim.trace import cachetrace as ct

from .test_state_group import SAMPLES, A, plan, prefill_a, run, wb


def test_a_finding_without_a_cause_or_entity_is_always_a_root():
    c = Causes()
    fs = [Finding("TS-ST-3", n, n, "m") for n in (3, 5)]
    assert [c.file(f) for f in fs] == [True, True] and [f.id for f in fs] == [1, 2] and c.suppressed == 0


def test_the_same_cause_or_a_marked_entity_makes_a_consequence_of_the_earliest_root():
    c = Causes()
    a, b, d, e = (Finding(r, n, n, "m") for r, n in (("TS-ST-1", 3), ("TS-PFX-1", 5), ("TS-ST-2", 7), ("PEER-2", 9)))
    assert c.file(a, PARTIAL_TAIL, [("block", "state", 16)])
    assert not c.file(b, PARTIAL_TAIL) and b.of == 1            # the same cause, another rule
    assert not c.file(d, None, [("block", "state", 16)]) and d.of == 1  # an entity the root marked
    assert c.file(e, None, [("block", "full", 3)]) and e.id == 2  # a new cause on unmarked entities
    assert c.suppressed == 2 and c.per_root == {1: 2} and c.rule_roots == {"TS-ST-1": 1, "PEER-2": 1}
    assert [(f.rule, via) for f, via in c.first] == [("TS-PFX-1", PARTIAL_TAIL), ("TS-ST-2", "block state 16")]


def test_the_first_consequence_per_root_cause_and_rule_is_listed_the_rest_counted():
    c = Causes()
    c.file(Finding("TS-ST-1", 1, 1, "m"), PARTIAL_TAIL)
    for n in range(2, 8):
        c.file(Finding("TS-ST-2" if n % 2 else "TS-PFX-1", n, n, "m"), PARTIAL_TAIL)
    assert c.suppressed == 6 and [f.line for f, _ in c.first] == [2, 3]


def tail_key(tokens):
    """The key a partial tail of a's prompt (then 50, 51) is published under: its partial page's digest."""
    from kvsim.kvmodel.cache.prefix_hash import page_digest
    return page_digest(bytes.fromhex(prefix_keys()[1]), tokens).hex()


def test_a_partial_tails_findings_report_as_one_root_and_its_consequences():
    """Two findings of the partial-tail cause -- a's prefill state after 10 tokens and its decode state after 11,
    each stored under its own partial page's key: the report lists the first as a violation with its id, the second
    under ``consequences`` with ``of``; the rule counts one violation and one consequence; the headline says so."""
    steps = prefill_a(store=wb(1, [(1, 1), (2, 2), (6, 3)], [0, 0, 1], [*prefix_keys(), tail_key(A[8:10])]))
    steps += [(plan(3, ["a"], 0, [1], [], cache=[wb(2, [(8, 4)], [1], [tail_key(A[8:10] + [50])])]), 10),
              (ct.Result(3, [[52]], ["a"], [2]), 11)]
    c = run(steps)
    assert [(f.rule, f.line, f.id, f.of) for f in c.findings] == [("TS-ST-1", 8, 1, None), ("TS-ST-2", 10, 0, 1)]
    rep = build([{"path": "t", "events": 11}], "t", c, None)
    assert [(v["rule"], v["line"], v["id"]) for v in rep["violations"]] == [("TS-ST-1", 8, 1)]
    assert [(v["rule"], v["line"], v["of"], v["entity"]) for v in rep["consequences"]] == \
        [("TS-ST-2", 10, 1, PARTIAL_TAIL)]
    assert rep["rules"]["TS-ST-2"]["violated"] == 0 and rep["rules"]["TS-ST-2"]["consequences"] == 1
    assert rep["stats"]["consequences"] == 1 and rep["stats"]["findings"] == 1
    assert rep["headline"].startswith("FAIL: 1 violation of 1 rule") and "1 finding (1 consequence suppressed)" in \
        rep["headline"]


def prefix_keys():
    from kvsim.kvmodel.cache.prefix_hash import prefix_hashes
    h = prefix_hashes(A, 4)
    return [h[0], h[1]]


def test_findings_of_another_cause_stay_roots():
    """a's decode state after 12 tokens (a prefix boundary, P = 4) stored under a key: TS-ST-2 without the partial
    tail's cause, a root of its own beside the tail's; so is a state stored under a key not its partial page's."""
    steps = prefill_a(store=wb(1, [(1, 1), (2, 2), (6, 3)], [0, 0, 1], [*prefix_keys(), tail_key(A[8:10])]))
    steps += [(plan(3, ["a"], 0, [1], [], state={"a": [0, 8]}), 10), (ct.Result(3, [[52]]), 11),
              (plan(4, ["a"], 0, [1], [], cache=[wb(2, [(8, 4)], [1], ["ef" * 32])]), 12),
              (ct.Result(4, [[53]], ["a"], [2]), 13)]
    c = run(steps)
    assert [(f.rule, f.line, f.id, f.of) for f in c.findings] == [("TS-ST-1", 8, 1, None), ("TS-ST-2", 12, 2, None)]
    assert "cause" not in c.findings[1].context and "after 12 tokens" in c.findings[1].message
    c = run(prefill_a(store=wb(1, [(6, 3)], [1], ["cd" * 32])))  # the state after 10 under a foreign key
    assert [(f.rule, f.id) for f in c.findings] == [("TS-ST-1", 1)] and "cause" not in c.findings[0].context


def test_the_retraction_runs_partial_tail_findings_group_under_one_root():
    """tiny_workload.jsonl with a State group, a Host tier and forced retraction (the run of issue 31: 33 findings,
    all but TS-ST-3 from the wheel publishing partial tails; with the gauge's TS-POOL-5 and the state publications
    the KV events show, 65): 3 findings -- the partial tail's root (TS-ST-1 at line 10), TS-ST-3 at 18, the gauge's
    TS-POOL-5 at 7 -- and 62 consequences suppressed."""
    pytest.importorskip("tokenspeed_scheduler")
    from kvsim.sim.peers import tokenspeed as T
    from kvsim.sim.peers.workload import read_mooncake

    out = T.run(read_mooncake(SAMPLES / "tiny_workload.jsonl"),
                T.RunConfig(pages=352, host_pages=16, stagger=3, snapshot_pages=16, max_retracted=2,
                            force_retraction=7, max_scheduled_tokens=256, state_group=True))
    c = out.contract
    tail = [f for f in c.findings if f.context.get("cause") == PARTIAL_TAIL]
    assert len(tail) == 60 and {f.rule for f in tail} == {"TS-PFX-1", "TS-ST-1", "TS-ST-2"}
    roots = sorted((f.rule, f.line) for f in c.findings if f.of is None)
    assert roots == [("TS-POOL-5", 7), ("TS-ST-1", 10), ("TS-ST-3", 18)]
    assert c.causes.suppressed == 62 and sum(c.counts.values()) == 65
    rep = build([{"path": "run", "events": out.plans}], "run", c, out.events)
    assert "3 findings (62 consequences suppressed)" in rep["headline"]
    assert "1 router-compatibility hazard (EV-3 at line 12; 9 consequences counted apart)" in rep["headline"]
