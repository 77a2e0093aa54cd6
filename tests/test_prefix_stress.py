"""synthetic:prefix-stress[:SEED]: seeded, every shape present, and each shape is what it claims to be -- in the
simulation's block ids and in the token ids the peers drive engines with."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from kvsim.sim.cli import main
from kvsim.sim.peers.workload import read_prefix_stress
from kvsim.sim.workloads import WorkloadInputError, open_workload
from kvsim.sim.workloads import prefix_stress as ps
from kvsim.sim.workloads.open import default_requests, resolve

ROWS = ps.rows(200, 0)


def test_seeded_and_every_shape_present():
    assert ps.rows(200, 0) == ROWS and ps.rows(200, 1) != ROWS
    assert ps.rows(50, 0) == ROWS[:50]  # a shorter run is a prefix of a longer one
    kinds = Counter(r.kind for r in ROWS)
    assert set(kinds) == set(ps.KINDS) and min(kinds.values()) >= 5
    assert [r.arrival for r in ROWS] == sorted(r.arrival for r in ROWS)
    assert [r.step for r in ROWS] == sorted(r.step for r in ROWS) and ROWS[-1].step > 0


def test_repeats_are_exact_and_page_aligned():
    for r in ROWS:
        if r.kind == "repeat":
            assert r.prompt % ps.PAGE == 0 and any(o.segments == r.segments for o in ROWS[:r.rid])


def _tokens(r):
    return read_prefix_stress(0, r.rid + 1)[r.rid].tokens


def _diverge(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    d = np.nonzero(a[:n] != b[:n])[0]
    return int(d[0]) if len(d) else n


def test_splits_diverge_inside_a_block_and_on_a_page_boundary():
    reqs = read_prefix_stress(0)
    seen = {"split-block": 0, "split-node": 0}
    for r in ROWS:
        if r.kind not in seen:
            continue
        mine = reqs[r.rid].tokens
        cut = max(_diverge(mine, reqs[o.rid].tokens) for o in ROWS[:r.rid])
        if r.kind == "split-block":
            assert cut % ps.BLOCK, (r.rid, cut)          # inside a 16-token block
        else:
            assert cut % ps.PAGE == 0 and cut > 0, (r.rid, cut)  # on a page boundary, inside the source's node
        seen[r.kind] += 1
    assert min(seen.values()) >= 5


def _common_tail(a: tuple, b: tuple) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[-1 - n] == b[-1 - n]:
        n += 1
    return n


def test_a_moved_message_repeats_its_tokens_after_another_prefix():
    reqs = read_prefix_stress(0)
    moved = [r for r in ROWS if r.kind == "moved"]
    assert len(moved) >= 5
    for r in moved:
        src = max((o for o in ROWS[:r.rid] if o.kind in ("shared", "long")),
                  key=lambda o: _common_tail(o.segments, r.segments))
        k = _common_tail(src.segments, r.segments)
        msg = sum(s[2] for s in r.segments[len(r.segments) - k:])
        mine, theirs = reqs[r.rid].tokens, reqs[src.rid].tokens
        assert k and np.array_equal(mine[-msg:], theirs[-msg:])           # the same tokens ...
        assert (len(mine) - msg) % ps.PAGE == 0 and (len(theirs) - msg) % ps.PAGE == 0  # ... from a block start
        assert not np.array_equal(mine[:ps.PAGE], theirs[:ps.PAGE])         # ... after another system prompt


def test_window_ids_name_equal_windows_equally():
    seg = ((ps.STRESS_ID_BASE, 0, 512), (ps.STRESS_ID_BASE + 1, 0, 100))
    assert ps.window_ids(seg) == (ps.STRESS_ID_BASE, ps.STRESS_ID_BASE + 1)
    spliced = ((ps.STRESS_ID_BASE, 0, 300), (ps.STRESS_ID_BASE + 2, 0, 300))
    ids = ps.window_ids(spliced)
    assert len(ids) == 2 and ids[0] >= ps.WINDOW_ID_BASE and ids == ps.window_ids(spliced)
    assert ids[0] != ps.window_ids(((ps.STRESS_ID_BASE, 0, 301), (ps.STRESS_ID_BASE + 2, 0, 299)))[0]
    for r in ROWS:
        assert len(r.request().hash_ids) == -(-r.prompt // 512)


def test_names_and_defaults():
    assert resolve("synthetic:prefix-stress") == ("synthetic", ("prefix-stress", 0))
    assert resolve("synthetic:prefix-stress:7") == ("synthetic", ("prefix-stress", 7))
    assert default_requests("synthetic:prefix-stress") == 200 and default_requests("synthetic") == 1000
    with pytest.raises(WorkloadInputError, match="prefix-stress:SEED"):
        resolve("synthetic:prefix-stress:x")
    got = list(open_workload("synthetic:prefix-stress:0"))
    assert len(got) == 200 and got[3] == ROWS[3].request()
    assert len(read_prefix_stress(0, 10, max_output=5)) == 10
    assert all(r.max_new_tokens <= 5 for r in read_prefix_stress(0, 10, max_output=5))


def test_simulate_and_a_bad_seed(capsys):
    assert main(["simulate", "synthetic:prefix-stress:2", "--requests", "40", "--pages", "40", "--max-context",
                 "2560", "--concurrency", "8", "--quiet"]) == 0
    assert main(["peer", "tokenspeed", "synthetic:prefix-stress:x", "--quiet"]) == 2
    assert "prefix-stress:SEED" in capsys.readouterr().err


def test_tokenspeed_submits_at_arrival_steps_and_reports_the_gap(tmp_path):
    rec, rep = tmp_path / "r.jsonl", tmp_path / "r.json"
    assert main(["peer", "tokenspeed", "synthetic:prefix-stress", "--requests", "30", "--pages", "25", "--record",
                 str(rec), "--json", str(rep), "--quiet", "--no-timing"]) == 0
    import json
    lines = [json.loads(x) for x in rec.read_text().splitlines()[1:]]
    steps = {f"s{r.rid}": r.step for r in ROWS[:30]}
    plans, at = 0, {}
    for x in lines:
        plans += x["op"] == "plan"
        if x["op"] == "submit":
            at[x["request"]] = plans
    # each is submitted before the plan its step names, earlier only when the scheduler sat idle
    assert all(at[r] <= steps[r] for r in steps) and sum(at[r] == steps[r] for r in steps) > 20
    assert at["s0"] == 0 and steps["s0"] > 0  # the idle scheduler takes the first request at once
    gap = json.loads(rep.read_text())["stats"]["policy_gap"]
    assert gap["capacity_tokens"] == 24 * 64 and "simulate_hit_ratio" in gap
    assert gap["gap_points"] == round(100 * (gap["engine_hit_ratio"] - gap["simulate_hit_ratio"]), 2)


def test_compare_puts_each_row_beside_simulate(tmp_path):
    import json
    out = tmp_path / "c.json"
    main(["peer", "compare", "synthetic:prefix-stress", "--requests", "30", "--blocks", "96", "--json", str(out),
          "--quiet"])
    rows = json.loads(out.read_text())["rows"]
    sim = next(r for r in rows if r["engine"] == "kvsim simulate")
    for r in rows:
        if r is not sim:
            assert r["gap_to_simulate_points"] == round(100 * (r["hit_ratio"] - sim["hit_ratio"]), 2)


def test_generation_looks_only_at_recent_candidates_so_it_is_linear(monkeypatch):
    """Each draw chooses among the RECENT latest candidates (kept as they come), never a scan of every row made
    so far: a million requests take seconds, not hours. Counted, not timed: how often a row's prompt length is
    read (a scan per repeat read it for every earlier row, quadratically) stays proportional to the rows."""
    reads = [0]
    length = ps.StressRow.prompt.fget

    def counted(self):
        reads[0] += 1
        return length(self)
    monkeypatch.setattr(ps.StressRow, "prompt", property(counted))
    for n in (1000, 4000):
        reads[0] = 0
        assert len(ps.rows(n, 0)) == n
        assert reads[0] <= 4 * n, (n, reads[0])


def test_peer_workload_generation_reports_progress():
    from kvsim.sim.peers.workload import PROGRESS_EVERY
    ticks: list[int] = []
    reqs = read_prefix_stress(0, 2 * PROGRESS_EVERY + 5, progress=ticks.append)
    assert len(reqs) == 2 * PROGRESS_EVERY + 5 and sum(ticks) == 2 * PROGRESS_EVERY


def test_every_name_simulate_reads_feeds_the_peers_and_an_excerpt_is_its_file():
    """`kvsim peer` takes the names `kvsim simulate` takes: a bundled Mooncake excerpt gives exactly the
    requests its file does; Azure and synthetic rows become prompts of their block ids' tokens."""
    from kvsim.sim.peers.workload import read_mooncake, read_workload
    from kvsim.sim.workloads.open import excerpt_path

    named = read_workload(open_workload("excerpt:conversation", 30), 30)
    filed = read_mooncake(str(excerpt_path("conversation")), 30)
    assert [r.id for r in named] == [r.id for r in filed]
    assert all(np.array_equal(a.tokens, b.tokens) and a.max_new_tokens == b.max_new_tokens
               for a, b in zip(named, filed, strict=True))
    for name in ("excerpt:azure-code", "synthetic:4"):
        reqs = read_workload(open_workload(name, 12), 12)
        assert len(reqs) == 12 and all(len(r.tokens) > 0 and r.max_new_tokens >= 1 for r in reqs)
