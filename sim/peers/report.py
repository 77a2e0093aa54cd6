"""kvreport/1-style reports for peer runs, cachetrace/1 replays and KV-event logs.

The same top-level shape as the store replay's report (DESIGN §8): inputs, verdict, violations (rule,
trace, event, line, op, message, context), rules with their counters, stats. Where the events fold a
sliding-window or state group (EV-3's entry), ``hazards`` lists the router-compatibility hazard once per
cause (``id``, ``class``, ``consequences``) and ``consequences`` its later orphans (each with ``of``), counted
in ``stats.hazards`` / ``stats.consequences`` beside ``stats.findings``; the verdict fails on violations only.
The contract's findings follow the same discipline (``cachetrace.causes``): ``violations`` lists its roots (each
with ``id``), ``consequences`` the first consequence per root, cause or entity and rule (each with ``of``), counted in
``stats.consequences``; a rule's ``violated`` counts its roots, ``consequences`` the rest.
Deterministic unless the caller adds a ``timing`` section (wall-clock figures of a live run, kept apart under
``stats.timing``).
This module knows the judges' findings and summaries, not how they were produced. It sits at the top of
``sim.peers``: it reads the judges of both rooms (``cachetrace``, ``judges``) for every engine, and belongs to none.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from kvsim.sim.peers.cachetrace import contract as pc
from kvsim.sim.peers.judges import events as pe
from kvsim.sim.report.verdict import stamp

__all__ = ["build", "file_sha256", "percentiles"]


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def percentiles(values: list[float], qs=(50, 90, 99, 100)) -> dict:
    """Nearest-rank percentiles, rounded to microseconds when the values are milliseconds."""
    if not values:
        return {}
    s = sorted(values)
    return {f"p{q}": round(s[min(len(s) - 1, max(0, -(-q * len(s) // 100) - 1))], 3) for q in qs}


def build(inputs: list[dict], trace: str, contract: pc.Contract | None, events: pe.EventChecker | None,
          stats: dict | None = None) -> dict:
    """The report of one judged input (``trace`` names it in violations)."""
    violations = []
    rules: dict[str, dict] = {}
    if contract is not None:  # its roots; what follows from one (cachetrace.causes) is counted apart
        violations += [f.as_dict(trace) for f in contract.findings if f.of is None]
        st = contract.stats
        roots = contract.causes.rule_roots
        for rid, (title, clause) in pc.RULES.items():  # checked and exercised both count plans
            rules[rid] = {"title": title, "clause": clause, "checked": st["plans"],
                          "exercised": contract.exercised[rid], "violated": roots.get(rid, 0)}
            if contract.counts[rid] > roots.get(rid, 0):
                rules[rid]["consequences"] = contract.counts[rid] - roots.get(rid, 0)
    if events is not None:
        events.flush()
        violations += [f.as_dict(trace) for f in events.findings]
        es = events.stats
        for rid, rule in pe.CATALOGUE.items():  # checked and exercised both count batches
            rules[rid] = {"title": rule.title, "clause": rule.clause, "decisions": rule.decisions,
                          "checked": es["batches"], "exercised": events.exercised[rid],
                          "violated": events.counts[rid]}
    violations.sort(key=lambda v: (v["line"], v["rule"]))
    total = sum(r["violated"] for r in rules.values())
    out_stats = dict(stats or {})
    hazards: list[dict] = []
    if events is not None and events.folded_groups:  # EV-3's entry: the fold's orphans, one cause, one hazard
        n = events.consequence_count
        hazards = [{**f.as_dict(trace), "id": i, "class": "router-compatibility", "consequences": n if i == 1 else 0}
                   for i, f in enumerate(events.hazards, start=1)]
        out_stats.update(findings=len(violations), hazards=len(hazards), consequences=n)
    found_after: list[dict] = []
    if contract is not None:
        out_stats["scheduler"] = contract.summary()
        if contract.causes.suppressed:  # one cause, one finding: "N findings (M consequences suppressed)"
            out_stats["findings"] = len(violations)
            out_stats["consequences"] = int(out_stats.get("consequences", 0) or 0) + contract.causes.suppressed
            found_after = [{**f.as_dict(trace), "entity": via} for f, via in contract.causes.first]
    if events is not None:
        out_stats["kv_events"] = events.summary()
    if total > len(violations):
        out_stats["violations_not_listed"] = total - len(violations)
    report = {"format": "kvreport/1", "inputs": inputs, "verdict": "fail" if total else "pass",
              "violations": violations, "refusals": [], "rules": rules, "stats": out_stats}
    if events is not None and events.folded_groups:
        report["hazards"] = hazards  # not violations: the verdict does not fail on them (EV-3's entry)
        report["consequences"] = [{**c, "trace": trace} for c in events.consequences]
    if found_after:
        report["consequences"] = found_after + [*(report.get("consequences") or [])]
    stamp(report)
    return report


def add_engine_judge(report: dict, judge, trace: str) -> dict:
    """Add an ``EngineJudge``'s findings, rule counters (PEER-5 ... PEER-9, its engine's policy rule) and summary
    (``stats.scheduler``) to a report ``build`` made for the same run's event stream; the verdict fails on any
    violation. A judge with recovery (``sim.peers.judges.actionable``) lists root causes only: ``violations`` are the
    roots (each with ``id``), ``consequences`` the first consequence per entity (each with ``of``), both counted
    in ``stats`` (``findings``, ``consequences``); a rule's ``violated`` counts its roots."""
    from kvsim.sim.peers.judges import engine_judge as ej

    act = getattr(judge, "act", None)
    if act is None:
        report["violations"] += [f.as_dict(trace) for f in judge.findings]
    else:
        rec = act.recovery
        report["violations"] = [r.as_dict(trace) for r in rec.roots]
        for v in report["violations"]:
            v["consequences"] = rec.per_root.get(v["id"], 0)
        report["consequences"] = [{**c, "trace": trace} for c in rec.first]
        for rid, cell in report["rules"].items():  # the event stream's rules: their roots only
            if rid in judge.events.counts:
                cell["violated"] = rec.rule_roots.get(rid, 0)
                cell["consequences"] = judge.events.counts[rid] - cell["violated"]
    report["violations"].sort(key=lambda v: (v["line"], v.get("id", 0), v["rule"]))
    steps = judge.stats["steps"]
    for rid, (title, clause) in getattr(judge, "rules", ej.RULES).items():
        decisions = getattr(judge, "decisions", ej.DECISIONS)[rid]
        violated = judge.counts[rid] if act is None else act.recovery.rule_roots.get(rid, 0)
        report["rules"][rid] = {"title": title, "clause": clause, "decisions": decisions, "checked": steps,
                                "exercised": judge.premise[rid], "violated": violated}
        if act is not None:
            report["rules"][rid]["consequences"] = judge.counts[rid] - violated
    report["stats"]["scheduler"] = judge.summary()
    report["stats"].pop("violations_not_listed", None)
    if act is not None:
        report["stats"]["findings"] = len(act.recovery.roots)
        report["stats"]["consequences"] = act.recovery.suppressed
    else:
        total = sum(r["violated"] for r in report["rules"].values())
        listed = len(report["violations"])
        if total > listed:
            report["stats"]["violations_not_listed"] = total - listed
    stamp(report)
    return report


def recover(report: dict) -> dict:
    """One cause, one finding (``sim.peers.judges.peer_recovery``) for the findings of a report that no judge filed
    yet: the contract's roots keep their numbers (``cachetrace.causes`` filed them, its consequences name them);
    the event stream's findings are filed here, numbered after them -- a root gets ``id``, the rest go to
    ``consequences`` (the first per entity) and ``stats``; a rule's ``violated`` counts its roots."""
    from kvsim.sim.peers.judges.peer_recovery import PeerRecovery, Record

    rec = PeerRecovery()
    first_id = max((int(v.get("id") or 0) for v in report["violations"]), default=0)
    kept: list[dict] = []
    for v in sorted(report["violations"], key=lambda v: (v["line"], v["rule"])):
        if v.get("op") != "kv":
            kept.append(v)
            continue
        r = Record(v["rule"], v["line"], v["message"], dict(v.get("context") or {}), None, op="kv")
        if rec.add(r) is not None:
            kept.append({**v, "id": first_id + r.id, "consequences": 0})
    for v in kept:
        if v.get("op") == "kv" and "id" in v:
            v["consequences"] = rec.per_root.get(v["id"] - first_id, 0)
    report["violations"] = kept
    if rec.suppressed:
        trace = kept[0]["trace"] if kept else ""
        report["consequences"] = list(report.get("consequences") or []) + [
            {**c, "of": c["of"] + first_id, "trace": trace} for c in rec.first]
        for rid, cell in report["rules"].items():
            if rid.startswith("EV-") and cell["violated"]:
                after = cell["violated"] - rec.rule_roots.get(rid, 0)
                if after > 0:
                    cell["consequences"] = after
                    cell["violated"] -= after
        stats = report["stats"]
        stats["findings"] = len(kept)
        stats["consequences"] = int(stats.get("consequences", 0) or 0) + rec.suppressed
    stamp(report)
    return report
