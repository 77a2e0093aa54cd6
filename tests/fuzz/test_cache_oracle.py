"""The naive cache oracle (sim.fuzz.cache_oracle): worked examples from the cache concepts, its import
boundary, and the `cache` / `cache-host` campaigns (clean: nothing found; a policy bug: found)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from kvsim.kvmodel.cache import admission, host_tier
from kvsim.sim.fuzz import cache_oracle
from kvsim.sim.fuzz.cache_oracle import FULL, SLIDING, STATE, CacheOracle, Group
from kvsim.sim.fuzz.campaign import MACHINES, run_campaign

P = 4
A, B, C = [1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]


def oracle(groups, parents=8, host=0) -> CacheOracle:
    return CacheOracle(P, groups, parents, host)


def full(bg=4, k=1):
    return Group(FULL, bg, None, False, k, 1)


def served(o, rid, tokens, extent=None, reserve=0, fresh=None):
    """Admit (fresh blocks: the lowest ones the oracle does not hold), publish everything, keep it live."""
    extent = len(tokens) if extent is None else extent
    plan = o.plan_admit(rid, tokens, extent, reserve, 0)
    assert plan.fits
    if fresh is None:  # one block per parent (k = D = 1): the lowest holes, then empty parents in FIFO order
        fifo = [p for p in o.fifo] + sorted({b for _g, b in plan.victims})
        fresh = []
        for n in plan.need:
            fresh.append(tuple(fifo[:n]))
            fifo = fifo[n:]
    assert o.admit(rid, tokens, extent, reserve, plan, fresh) == []
    o.publish(rid, tokens, extent)
    return plan


def test_the_oracle_never_imports_the_cache_model():
    path = Path(cache_oracle.__file__)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)] + \
        [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [m for m in imported if m and "kvmodel" in m]
    code = ("import sys, kvsim.sim.fuzz.cache_oracle; "
            "print(sorted(m for m in sys.modules if m.startswith('kvsim.kvmodel.cache')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"  # not even through another module


def test_full_history_reuses_left_to_right_up_to_the_hashed_pages():
    o = oracle([full()])
    served(o, "r1", A + B + C + [1])
    assert o.probe(A + B + C + [2])[0] == 12
    assert o.probe(A + B + C)[0] == 8  # (n - 1) // P pages are hashed: the last page is recomputed
    assert o.probe(A + C + B + [1])[0] == 4  # the first miss ends the match


def test_a_window_group_needs_only_the_slots_behind_the_boundary():
    """SwaMatcher: ceil((W - 1) / bg) cached slots behind the boundary (here W = 6, bg = 4: two slots)."""
    o = oracle([full(), Group(SLIDING, 4, 6, False, 1, 1)])
    served(o, "r1", A + B + C + [1])
    o.requests["r1"].tables[1][0] = 0  # the oldest window slot expired while still live
    del o.entries[1][(tuple(A), 0)]
    hit, closed, hits = o.probe(A + B + C + [1])
    assert (hit, closed) == (12, 12) and hits[1] == [False, True, True]


def test_eviction_takes_the_least_recently_used_in_order():
    """Four one-block parents, three cached and idle (epochs 1, 2, 3); a request needing three blocks takes the
    empty parent and evicts the two least recently used, oldest first."""
    o = oracle([full()], parents=4)
    for i, toks in enumerate((A, B, C)):
        served(o, f"w{i}", toks)
        o.free(f"w{i}")
    plan = o.plan_admit("n", list(range(50, 62)), 12, 0, 0)
    assert plan.fits and plan.need == (3,) and plan.victims == ((0, 1), (0, 2))


def test_a_hit_is_protected_and_the_next_oldest_goes():
    o = oracle([full()], parents=4)
    for i, toks in enumerate((A, B, C)):
        served(o, f"w{i}", toks)
        o.free(f"w{i}")
    plan = o.plan_admit("hit", A + [7], 5, 7, 0)  # reuses A's page, needs two more blocks: one is empty
    assert plan.hit == 4 and plan.need == (2,) and plan.victims == ((0, 2),)


def test_finish_queues_the_newest_state_checkpoint_and_stores_evict_host_lru_first():
    o = oracle([full(), Group(STATE, 4, 2, False, 1, 1)], parents=10, host=3)
    served(o, "r", A + B + C + [1], extent=13)
    assert [k[1][0] for k in o.pending if k[0] == 1] == [tuple(A + B + C)]  # the endpoint checkpoint
    o.free("r", finished=True)
    todo, keep, evict, _ = o.plan_store()
    assert len(todo) == 2 and evict == 0 and keep  # two Host pages, the rest stays queued
    o.start_store(1, [1, 2], [])
    assert o.clear() is False  # ClearCache is refused while a store is in flight
    o.ack(1)
    served(o, "r2", C + B + [1], extent=9)  # two more full pages queued; Host holds two of two pages
    todo, _keep, evict, lru = o.plan_store()
    assert len(todo) == 2 and evict == 2 and o.lru_ok(lru[:2])
    assert o.clear() is True and not o.host and not o.pending


def test_the_cache_machines_are_registered_and_a_clean_campaign_finds_nothing(tmp_path):
    assert {"cache", "cache-host"} <= set(MACHINES)
    for name in ("cache", "cache-host"):
        r = run_campaign(name, budget_s=1.0, seed=1, found_dir=tmp_path, rounds=1)
        assert not r.failed, r.failures
        assert r.examples > 0 and r.steps > r.examples
        assert set(r.coverage) >= {"TS-POOL-1", "TS-ADM-1", "TS-PFX-2"}
        assert r.branches and all(n.split(":")[0] in ("cache", "host") for n in r.branches)
        assert r.branches["cache:admit:zero-eviction"] > 0
    assert not list(tmp_path.iterdir())


def test_a_policy_bug_fails_the_cache_machine(monkeypatch, tmp_path):
    """The minimising pass walking the selection oldest first (a wrong but still 'minimal' set) is found."""
    def plan(shadow, need, candidates):
        if admission.fits(shadow, need):
            return admission.AdmissionPlan(True, ())
        chosen = []
        for c in sorted(candidates, key=lambda c: c.order_key):
            chosen.append(c)
            if admission.fits(shadow, need, chosen):
                break
        else:
            return admission.AdmissionPlan(False, ())
        kept = list(chosen)
        for c in chosen:
            trial = [v for v in kept if v is not c]
            if admission.fits(shadow, need, trial):
                kept = trial
        return admission.AdmissionPlan(True, tuple(kept))
    monkeypatch.setattr(admission.AdmissionPlanner, "plan", staticmethod(plan))
    r = run_campaign("cache", budget_s=60.0, seed=0, found_dir=tmp_path)
    assert r.failed and r.failures[0]["rule"] in ("ORACLE-eviction", "TS-ADM-1"), r.failures
    assert Path(r.failures[0]["log"]).exists()


def test_host_eviction_newest_first_fails_the_cache_host_machine(monkeypatch, tmp_path):
    def evict_newest(self, n):
        entries = sorted(((e.last_access_epoch, k.group, e.page, k) for idx in self.indexes
                          for k, e in idx.host_entries()), key=lambda x: x[:3], reverse=True)
        for _, g, page, key in entries[:n]:
            self.indexes[g].host_evict(key)
            self.pool.release(page)
    monkeypatch.setattr(host_tier.HostTier, "_evict_host", evict_newest)
    r = run_campaign("cache-host", budget_s=60.0, seed=0, found_dir=tmp_path)
    assert r.failed and r.failures[0]["rule"] == "ORACLE-host-eviction", r.failures


def test_kvsim_fuzz_shows_each_machines_oracle_branches(tmp_path, monkeypatch, capsys):
    from kvsim.sim.cli import main
    monkeypatch.setenv("KVSIM_REPORTS", str(tmp_path))
    out = tmp_path / "fuzz.json"
    assert main(["fuzz", "--machine", "cache", "--budget", "1", "--json", str(out), "--coverage"]) == 0
    text = capsys.readouterr().out
    assert "oracle branches:" in text and "cache:admit:zero-eviction" in text and "TS-POOL-1" in text
    import json
    m = json.loads(out.read_text())["machines"][0]
    assert m["branches"]["cache:admit:zero-eviction"] > 0 and "store:map:granted" not in m["branches"]


def test_reached_counts_any_oracles_branches():
    from kvsim.sim.fuzz import stats
    stats.declare(("demo:a", "demo:b"))
    stats.RUN.reset(None)
    stats.reached("demo:a")
    stats.reached("demo:a")

    class Machine:
        oracles = ("demo",)
    from kvsim.sim.fuzz.campaign import machine_branches
    assert machine_branches(Machine, stats.RUN.branches) == {"demo:a": 2, "demo:b": 0}


def test_the_store_machines_report_their_oracle_branches_too(tmp_path):
    r = run_campaign("store", budget_s=1.0, seed=1, found_dir=tmp_path, rounds=1)
    assert r.branches["store:activate:root"] > 0 and all(n.startswith("store:") for n in r.branches)
