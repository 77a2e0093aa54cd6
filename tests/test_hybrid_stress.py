"""synthetic:hybrid-stress[:SEED]: seeded, every shape present and each what it claims to be (extensions keep the
earlier prompt whole, cuts end on a 16-token unit that is no 64-token block, returns repeat an old prompt),
generation linear in the requests asked for, and every command reads it."""

from __future__ import annotations

import time
from collections import Counter

import numpy as np
import pytest

from kvsim.sim.cli import main
from kvsim.sim.peers.workload import read_stress
from kvsim.sim.workloads import WorkloadInputError, open_workload
from kvsim.sim.workloads import hybrid_stress as hs
from kvsim.sim.workloads.open import default_requests, resolve

ROWS = hs.rows(120, 0)


def test_seeded_and_every_shape_present():
    assert hs.rows(120, 0) == ROWS and hs.rows(120, 1) != ROWS
    assert hs.rows(40, 0) == ROWS[:40]  # a shorter run is a prefix of a longer one
    kinds = Counter(r.kind for r in ROWS)
    assert set(kinds) == set(hs.KINDS) and min(kinds.values()) >= 4
    assert [r.step for r in ROWS] == sorted(r.step for r in ROWS)


def _diverge(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    d = np.nonzero(a[:n] != b[:n])[0]
    return int(d[0]) if len(d) else n


def test_shapes_are_what_they_claim():
    reqs = read_stress("hybrid-stress", 0, 120)
    assert [r.id for r in reqs[:3]] == ["h0", "h1", "h2"]
    for r in ROWS:
        mine = reqs[r.rid].tokens
        if r.kind == "extend":  # some earlier prompt is a proper prefix of this one
            assert any(o.prompt < r.prompt and np.array_equal(mine[:o.prompt], reqs[o.rid].tokens)
                       for o in ROWS[:r.rid])
        elif r.kind == "cut":
            cut = max(_diverge(mine, reqs[o.rid].tokens) for o in ROWS[:r.rid])
            assert cut % hs.UNIT == 0 and cut % hs.BLOCK, (r.rid, cut)
        elif r.kind == "return":
            src = [o for o in ROWS[:r.rid] if o.segments == r.segments]
            assert src and r.rid - src[-1].rid >= hs.RETURN_AFTER or \
                any(r.rid - o.rid >= hs.RETURN_AFTER for o in src)
        elif r.kind == "long":
            assert r.prompt >= 800 and r.output >= 100


def test_generation_is_linear_in_the_requests_asked_for():
    t0 = time.perf_counter()
    hs.rows(500, 3)
    small = time.perf_counter() - t0
    t0 = time.perf_counter()
    big = hs.rows(5000, 3)
    assert big[:500] == hs.rows(500, 3)
    assert time.perf_counter() - t0 < max(1.0, 40 * small)  # a generous bound: no quadratic look-back


def test_names_defaults_and_every_reader():
    assert resolve("synthetic:hybrid-stress") == ("synthetic", ("hybrid-stress", 0))
    assert resolve("synthetic:hybrid-stress:7") == ("synthetic", ("hybrid-stress", 7))
    assert default_requests("synthetic:hybrid-stress") == hs.DEFAULT_REQUESTS
    with pytest.raises(WorkloadInputError, match="hybrid-stress:SEED"):
        resolve("synthetic:hybrid-stress:x")
    got = list(open_workload("synthetic:hybrid-stress:0", 30))
    assert len(got) == 30 and got[3] == ROWS[3].request()
    assert main(["simulate", "synthetic:hybrid-stress", "--requests", "30", "--quiet"]) == 0
    assert main(["peer", "tokenspeed", "synthetic:hybrid-stress", "--requests", "12", "--quiet", "--no-timing"]) == 0
