"""What a peer run exercised: the engine paths its driver saw taken (``sim.peers.ENGINE.paths``) and the judge's
rules that had something to judge (``exercised`` > 0 in the report's rule counters).

A PASS only speaks for the paths the run took: bugs in a whole-prompt hit, a second copy of a hash or an
eviction beside a referenced block stay silent on a workload that never reaches them. The report's
``stats.coverage`` lists every path with its count, and the verdict's headline names the paths never taken
with a hint to what reaches them (the stress workload ``STRESS_HINT``, the engine's own options).
"""

from __future__ import annotations

__all__ = ["STRESS_HINT", "coverage", "coverage_line"]

STRESS_HINT = ("a stress workload reaches more paths: synthetic:prefix-stress[:SEED] with a pool small enough "
               "to evict")


def coverage(paths: dict[str, str], taken: dict[str, int], rules: dict[str, dict],
             reach: dict[str, str] | None = None, stress: bool = False) -> dict:
    """``stats.coverage`` of one run: each known path's count (in the engine's order), how many were taken, the
    ones never taken, and the judge's rules whose premise never arose (nothing for them to judge). The hint
    names what reaches a path never taken: the engine's own option for it (``reach``, e.g. a Host tier for
    write-backs) and, unless the run already used it (``stress``), the stress workload."""
    counts = {name: int(taken.get(name, 0)) for name in paths}
    missing = [name for name, n in counts.items() if not n]
    idle = sorted(rid for rid, r in rules.items() if r.get("checked") and not r.get("exercised"))
    how = [f"{name}: {reach[name]}" for name in missing if reach and name in reach]
    hint = "; ".join(([] if stress else [STRESS_HINT]) + (["options that reach the rest: " + "; ".join(how)]
                                                            if how else []))
    return {"engine_paths": counts, "paths": len(counts), "exercised": len(counts) - len(missing),
            "not_exercised": missing, "rules_exercised": sum(1 for r in rules.values() if r.get("exercised")),
            "rules": len(rules), "rules_not_exercised": idle, "hint": (hint or None) if missing else None}


def coverage_line(cov: dict) -> str:
    """One console line: the paths taken with their counts, the ones never taken, the idle rules."""
    taken = ", ".join(f"{k} {v:,}" for k, v in cov["engine_paths"].items() if v) or "none"
    line = f"engine paths: {cov['exercised']} of {cov['paths']} exercised ({taken})"
    if cov["not_exercised"]:
        line += f"; not exercised: {', '.join(cov['not_exercised'])}"
    line += f"; judge rules with something to judge: {cov['rules_exercised']} of {cov['rules']}"
    if cov["rules_not_exercised"]:
        line += f" (idle: {', '.join(cov['rules_not_exercised'])})"
    return line
