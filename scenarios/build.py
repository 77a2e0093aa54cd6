"""Builds the bundled kvtrace/1 scenarios: `python scenarios/build.py [OUTDIR]` (default: this folder).

Legal scenarios (OUTDIR/*.jsonl) are engine traces a correct store produces; each must replay with no
violation. Violation scenarios (OUTDIR/violations/*.jsonl, named after the rule they trigger) are small
traces in which one engine bug breaks the store contract; their header's ``meta.expect`` lists exactly the
(rule, event, line) triples the replay must report. Every `observe` states what the store contract
requires at that point (tables, frontiers, pool counters); the comments derive each value.

Output is deterministic (same bytes on every run). The scenario definitions live in `legal_scenarios.py`,
`violation_scenarios.py`, `conformance_scenarios.py`, `recovery_scenarios.py`, `round_two_scenarios.py` and
`round_three_scenarios.py`; this module only writes
them. It knows nothing of the model: replaying is `kvsim check`.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # run as a script: find tracebook and the project packages

import conformance_scenarios as conformance  # noqa: E402
import legal_scenarios as legal  # noqa: E402
import recovery_scenarios as recovery  # noqa: E402
import round_three_scenarios as round_three  # noqa: E402
import round_two_scenarios as round_two  # noqa: E402
import violation_scenarios as violations  # noqa: E402


def scenarios():
    """(subfolder, Trace) for every scenario, in a fixed order."""
    out = ([("", t) for t in legal.build() + conformance.legal() + round_two.legal() + round_three.legal()]
           + [("violations", t) for t in violations.build() + conformance.violations() + recovery.build()
              + round_two.violations() + round_three.violations()])
    names = [(sub, t.name) for sub, t in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise SystemExit(f"duplicate scenario names: {dup}")
    for sub, t in out:
        if (sub == "violations") != t.is_violation:
            raise SystemExit(f"{t.name}: a violation scenario must expect a violation, a legal one none")
    return out


def build(outdir: Path) -> list[Path]:
    written = []
    for sub, trace in scenarios():
        folder = outdir / sub if sub else outdir
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{trace.name}.jsonl"
        trace.write(path)
        written.append(path)
    return written


def main(argv: list[str]) -> int:
    outdir = Path(argv[0]) if argv else HERE
    written = build(outdir)
    legal_n = sum(1 for p in written if p.parent.name != "violations")
    print(f"wrote {legal_n} legal and {len(written) - legal_n} violation scenarios under {outdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
