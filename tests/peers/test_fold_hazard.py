"""EV-3's two classes of orphan (the entry in sim/peers/judges/event_rules.py): where an engine folds a sliding-window
or state group into each prefix event (seed 002 L193), a store under a parent the stream does not hold is designed --
one router-compatibility hazard per stream, every later orphan its consequence, counted apart, the verdict passing;
without such a group, or under a partial-tail parent, it stays a violation. No engine needed."""

from kvsim.sim.peers.cachetrace.judge import folds_groups
from kvsim.sim.peers.judges.events import EventChecker, parse_event
from kvsim.sim.peers.report import build
from kvsim.sim.trace import cachetrace as ct


def store(hashes, parent, n_tokens):
    return parse_event({"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent,
                        "token_ids": list(range(n_tokens)), "block_size": 4})


STREAM = [
    (1, [store([10, 11], None, 8)]),           # a root chain: announced
    (2, [store([21], 20, 4)]),                 # parent 20 never announced: the window dropped page 20
    (3, [store([31, 32], 30, 8)]),             # the same fold, another request
    (4, [store([12], 11, 4)]),                 # under a live parent: fine
    (5, [parse_event({"type": "BlockRemoved", "block_hashes": [12]}), store([13], 12, 4)]),  # removed, not re-held
]


def judge(folded: bool, stream=STREAM) -> EventChecker:
    c = EventChecker(block_size=4, folded_groups=folded)
    for line, events in stream:
        c.batch(events, line)
    return c


def test_without_a_fold_every_orphan_is_an_ev3_violation():
    c = judge(False)
    assert [(f.rule, f.line) for f in c.findings] == [("EV-3", 2), ("EV-3", 3), ("EV-3", 5)]
    assert c.hazards == [] and build([], "log", None, c)["verdict"] == "fail"


def test_a_fold_is_one_hazard_with_its_consequences_counted_apart():
    c = judge(True)
    assert c.findings == [] and c.counts["EV-3"] == 0
    assert [(h.rule, h.line) for h in c.hazards] == [("EV-3", 2)] and c.consequence_count == 2
    rep = build([{"path": "log", "sha256": None, "events": 5}], "log", None, c)
    assert rep["verdict"] == "pass" and rep["violations"] == []
    assert [(h["id"], h["line"], h["class"], h["consequences"]) for h in rep["hazards"]] == [
        (1, 2, "router-compatibility", 2)]
    assert [(x["line"], x["of"]) for x in rep["consequences"]] == [(3, 1), (5, 1)]
    assert rep["stats"]["findings"] == 0 and rep["stats"]["hazards"] == 1 and rep["stats"]["consequences"] == 2
    from kvsim.sim.report.markdown import render_markdown
    md = render_markdown(rep)
    assert "### Router-compatibility hazards (not violations)" in md and "2 consequences counted apart" in md
    assert rep["headline"] == ("PASS: no violation (1 log, 5 batches); 1 router-compatibility hazard (EV-3 at line 2; "
                               "2 consequences counted apart)")


def test_a_partial_tail_parent_stays_a_violation_under_a_fold():
    stream = [(1, [store([10], None, 3)]), (2, [store([11], 10, 4)])]  # block 10 holds 3 of 4 tokens
    c = EventChecker(block_size=4, partial_tails=True, folded_groups=True)
    for line, events in stream:
        c.batch(events, line)
    assert [(f.rule, f.line) for f in c.findings] == [("EV-3", 2)] and c.hazards == []


def test_the_fold_is_read_off_the_cachetrace_header():
    def cfg(*groups):
        return ct.Config(scheduler="tokenspeed-scheduler", prefix_granularity=4, groups=list(groups),
                         num_device_pages=10)
    full = ct.Group("full", 4, 10)
    assert not folds_groups(cfg(full))
    assert folds_groups(cfg(full, ct.Group("swa", 4, 10, "sliding", 8)))
    assert not folds_groups(cfg(full, ct.Group("swa", 4, 10, "sliding", 8, replayable=True)))  # never published
    assert folds_groups(cfg(full, ct.Group("state", 4, 10, "mamba")))
