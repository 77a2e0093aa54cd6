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
    assert o.contract.counts["PEER-9"] == 0 and o.contract.exercised["PEER-9"] == o.plans
    assert o.paths["prefix_hit"] > 0 and o.paths["eviction"] > 0 and set(o.paths) == set(paths.PATHS)


def test_planted_counter_drift_fires_peer_9(monkeypatch):
    """The pool reports one parent too many active (a parent counted in both states): PEER-9 every plan."""
    read = counters.read
    monkeypatch.setattr(counters, "read", lambda s: {**read(s), "active": read(s)["active"] + 1})
    o = ts.run(read_mooncake(TINY), ts.RunConfig(pages=30))
    assert o.contract.counts["PEER-9"] == o.plans
    assert "usable parents accounted" in next(f.message for f in o.contract.findings if f.rule == "PEER-9")


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
