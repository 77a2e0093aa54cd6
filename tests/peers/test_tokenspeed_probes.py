"""TokenSpeed's deep counters (PEER-9 through sim/peers/tokenspeed/counters.py), an exception the wheel raises
from its own code (PEER-10, whatever its type) and the run's engine paths -- on the real wheel, with the
inconsistency planted in what the bindings report or in one call."""

import pytest

from kvsim.sim.peers.tokenspeed import counters, paths
from kvsim.sim.peers.tokenspeed.wheel import Guarded
from kvsim.sim.peers.workload import read_mooncake

from .test_engines import TINY

ts = pytest.importorskip("kvsim.sim.peers.tokenspeed")
if not ts.available():
    pytest.skip("tokenspeed-scheduler not installed (pip install -e '.[peers]')", allow_module_level=True)

OK = {"active": 12, "available": 17, "empty": 5, "retracted": 0, "snapshot_free": 0}


def test_counters_consistent_pass():
    assert counters.check(dict(OK), 29, 0) == []
    assert counters.check({**OK, "snapshot_free": 7}, 29, 7) == []
    assert counters.check({**OK, "retracted": 1, "snapshot_free": 3}, 29, 7) == []  # an image is held
    assert counters.check({**OK, "available": 16}, 29, 0, host_tier=True) == []  # a parent an op holds
    assert counters.check({**OK, "available": 16}, 29, 0) != []
    assert counters.check({**OK, "available": 18}, 29, 0, host_tier=True) != []


def test_a_shortfall_only_pinned_checkpoints_or_cache_ops_explain_and_none_once_drained():
    """PEER-9: a parent neither active nor available is explained by an internal state checkpoint of this plan or
    the one before (one parent each), or by a Host tier's ops in flight; never once the run has drained."""
    assert counters.check({**OK, "available": 15}, 29, 0, checkpoints=2) == []
    (found,) = counters.check({**OK, "available": 14}, 29, 0, checkpoints=2)
    assert "26 of 29 usable parents accounted (2 explained by internal state checkpoints" in found[0]
    assert counters.check({**OK, "available": 16}, 29, 0, host_tier=True, drained=True) != []
    (found,) = counters.check({"active": 0, "available": 28, "empty": 20, "retracted": 0, "snapshot_free": 0}, 29, 0,
                              drained=True)
    assert "28 of 29 usable parents accounted once the run has drained" in found[0]
    assert counters.check({"active": 0, "available": 29, "empty": 20, "retracted": 0, "snapshot_free": 0}, 29, 0,
                          host_tier=True, drained=True) == []


@pytest.mark.parametrize(("change", "snap", "words"), [
    ({"active": 13}, 0, "13 active and 17 available LCM blocks: 30 of 29 usable parents accounted"),
    ({"empty": 18}, 0, "18 empty LCM blocks but only 17 available"),
    ({"snapshot_free": 6}, 7, "no request is retracted, yet TokenSpeed's snapshot pool has 6 of 7 blocks free"),
])
def test_counters_inconsistency_fires(change, snap, words):
    (found,) = counters.check({**OK, **change}, 29, snap)
    assert words in found[0]


def test_clean_run_keeps_peer_9_and_counts_its_paths():
    o = ts.run(read_mooncake(TINY), ts.RunConfig(pages=30))
    # a reading after every plan's answer, and one once the run has drained
    assert o.contract.counts["PEER-9"] == 0 and o.contract.exercised["PEER-9"] == o.plans + 1
    assert o.paths["prefix_hit"] > 0 and o.paths["eviction"] > 0 and set(o.paths) == set(paths.PATHS)


def test_planted_counter_drift_fires_peer_9(monkeypatch):
    """The pool reports one parent too many active (a parent counted in both states): PEER-9 every plan, and once
    more when the run has drained."""
    read = counters.read
    monkeypatch.setattr(counters, "read", lambda s: {**read(s), "active": read(s)["active"] + 1})
    o = ts.run(read_mooncake(TINY), ts.RunConfig(pages=30))
    assert o.contract.counts["PEER-9"] == o.plans + 1
    assert "usable parents accounted" in next(f.message for f in o.contract.findings if f.rule == "PEER-9")


def test_a_parent_leaked_at_the_end_fires_peer_9_once_drained(monkeypatch):
    """A Host tier excuses a parent neither active nor available while ops may hold it, not once the run has
    drained: one parent short throughout fires only at the end."""
    read = counters.read

    def short(s):
        got = read(s)
        return {**got, "available": got["available"] - 1, "empty": min(got["empty"], got["available"] - 1)}
    monkeypatch.setattr(counters, "read", short)
    o = ts.run(read_mooncake(TINY), ts.RunConfig(pages=30, host_pages=16))
    assert [f.message for f in o.contract.findings if f.rule == "PEER-9"] == [
        "TokenSpeed reports 0 active and 28 available LCM blocks: 28 of 29 usable parents accounted once the run has "
        "drained"]


def test_state_checkpoints_pinned_outside_the_tables_keep_peer_9():
    """The wheel keeps each internal state checkpoint out of its request's table in the plan that writes it and
    pinned through the plan after (state_workload.jsonl, 512-token chunks: 5 checkpoints, 9 readings one parent
    short): PEER-9 holds; the plan's own gauge leaving it out of the active count is TS-POOL-5's finding."""
    from .test_state_group import SAMPLES
    o = ts.run(read_mooncake(SAMPLES / "state_workload.jsonl"),
               ts.RunConfig(pages=304, state_group=True, stagger=3, max_scheduled_tokens=512))
    c = o.contract
    assert c.counts["PEER-9"] == 0 and c.counts["TS-POOL-5"] == 5 and c.state.stats["checkpoints"] == 5
    assert c.causes.rule_roots["TS-POOL-5"] == 1  # one cause: the first finding its root, four consequences


class _Raising:
    """Stands for the wheel's scheduler whose C++ throws std::out_of_range (pybind11 raises IndexError)."""

    def advance(self, event):
        raise IndexError("vector::_M_range_check")


def test_any_exception_the_wheel_raises_is_peer_10(monkeypatch):
    """An IndexError out of advance on the fifth answer, through the adapter's own guard: PEER-10 names the call
    and the type; the run stops there."""
    getattr_ = Guarded.__getattr__
    calls = {"n": 0}

    def failing(self, name):
        fn = getattr_(self, name)
        if name != "advance":
            return fn

        def advance(event):
            calls["n"] += 1
            if calls["n"] == 5:
                return Guarded(_Raising()).advance(event)
            return fn(event)
        return advance
    monkeypatch.setattr(Guarded, "__getattr__", failing)
    o = ts.run(read_mooncake(TINY), ts.RunConfig(pages=30))
    assert o.engine_error is not None and "IndexError: vector::_M_range_check" in o.engine_error
    assert [f.rule for f in o.contract.findings] == ["PEER-10"] and o.plans == 4
