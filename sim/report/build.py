"""Turning replay results into the kvreport/1 dict (DESIGN §8) and the timelines the HTML plots.

Root causes and their consequences are apart (sim.recovery): `violations` lists the root causes, each
with its number `id` within its trace; `consequences` lists the first consequence per desynchronized entity,
each with `of` (the number of the finding it follows from); `stats.findings` and `stats.consequences` count
them (every consequence, listed or not). The verdict counts root causes only.
Deterministic: traces in the order given, violations and refusals in event order, rules in catalogue
order, counters summed over traces. The renderers (report_json / report_junit / report_markdown /
report_html / report_console) take what this module builds.
"""

from __future__ import annotations

from kvsim.kvmodel.store.coverage import Coverage
from kvsim.sim.report.verdict import stamp
from kvsim.spec.catalogue import all_rules


def build_report(results: list) -> dict:
    total = Coverage()
    for r in results:
        total.merge(r.coverage)
    rules = {}
    for rule in all_rules():
        c, e, v = total.counts(rule.id)
        rules[rule.id] = {"title": rule.title, "clause": rule.clause, "evidence": rule.evidence, "checked": c,
                          "exercised": e, "violated": v}
        if rule.subsumed_by:
            rules[rule.id]["subsumed_by"] = list(rule.subsumed_by)
        partial = total.partials.get(rule.id)
        if partial:  # checks that could judge only part of the rule (the trace hid what the rest needs)
            rules[rule.id]["partial"] = partial
    violations = [v for r in results for v in r.violations]
    traces = {}
    for r in results:
        per_rule = {}
        for rule in all_rules():
            c, e, v = r.coverage.counts(rule.id)
            per_rule[rule.id] = {"checked": c, "exercised": e, "violated": v}
        traces[r.path] = {"events": r.events, "refusals": len(r.refusals), "violations": len(r.violations),
                          "consequences": r.suppressed, "rules": per_rule, "pools": r.pools}
    report = {"format": "kvreport/1",
              "inputs": [{"path": r.path, "sha256": r.sha256, "events": r.events} for r in results],
              "verdict": "fail" if violations else "pass",
              "violations": violations,
              "consequences": [c for r in results for c in r.consequences],
              "refusals": [x for r in results for x in r.refusals],
              "rules": rules,
              "stats": {"traces": traces, "findings": len(violations),
                        "consequences": sum(r.suppressed for r in results)}}
    stamp(report)  # callers that add to the report (check, simulate) stamp it again
    return report


def timelines(results: list) -> dict:
    return {r.path: r.timeline for r in results}
