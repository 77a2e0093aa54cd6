"""The self-check: seeded bugs of the model (mutants) must be killed by a fuzz machine, and every engine fault
of the trace generator must be flagged by replay.

A mutant is a small patch — (file, exact old text, new text) — modelled on a real bug class (the records
live in `tests/mutants/catalogue.py`). It is applied to a COPY of the package: `kvmodel/`, `spec/`, `sim/`,
`gpu/` and `scenarios/` are copied into `TMP/<mutant>/kvsim/` (plus an `__init__.py`), the patch is
applied there (the old text must occur exactly once), and a subprocess with `PYTHONPATH=TMP/<mutant>` runs
one fuzz campaign (`kvsim.sim.fuzz.campaign.run_campaign`) against it; the subprocess reports which
`kvsim.kvmodel` it imported, and a run that did not import the copy is an error, never a kill. The time to
kill is the campaign's time to its first failure: shrinking is skipped (`Phase.shrink` off), since a kill
needs no minimal example. Mutants run in parallel processes (`workers`). Engine faults
(`sim.trace.faults`) are generated and replayed in this process.
This module knows the fuzz campaign's public entry point and the generator; it never edits the tree.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

COPIED = ("kvmodel", "spec", "sim", "gpu", "scenarios")

KILL = """
import json, sys, time
from pathlib import Path
from hypothesis import Phase
import kvsim.kvmodel
import kvsim.sim.fuzz.campaign as campaign
settings_of = campaign.profile_settings
campaign.profile_settings = lambda name, **kw: settings_of(
    name, phases=(Phase.explicit, Phase.reuse, Phase.generate), **kw)
r = campaign.run_campaign(machine=sys.argv[1], budget_s=float(sys.argv[2]), seed=int(sys.argv[3]),
                          profile="ci", database=None, found_dir=Path(sys.argv[4]))
f = r.failures[0] if r.failures else {}
print(json.dumps({"module": kvsim.kvmodel.__file__, "killed": r.failed, "rule": f.get("rule") or None,
                  "kind": f.get("kind"), "message": (f.get("message") or "")[:300], "steps": r.steps,
                  "examples": r.examples, "seconds": round(r.seconds, 3)}))
"""


class MutantError(Exception):
    """A mutant that no longer applies (its old text is gone or ambiguous), or a copy that was not used."""


@dataclass(frozen=True)
class Mutant:
    name: str
    bug: str  # the real bug class it models
    file: str  # relative to the package root, e.g. "kvmodel/store/pool.py"
    old: str  # exact text, occurring exactly once
    new: str
    machine: str = "store"


def package_root() -> Path:
    """The folder holding kvmodel/, spec/, sim/, gpu/, scenarios/ of the running kvsim."""
    import kvsim.kvmodel
    return Path(kvsim.kvmodel.__file__).resolve().parents[1]


def mutants_file(root: Path | None = None) -> Path:
    return (root or package_root()) / "tests" / "mutants" / "catalogue.py"


def load_mutants(path: Path | None = None) -> list[Mutant]:
    """The `MUTANTS` records of `tests/mutants/catalogue.py` (plain dicts)."""
    path = path or mutants_file()
    if not path.exists():
        raise MutantError(f"{path}: no mutant catalogue (the self-check runs from a source checkout)")
    spec = importlib.util.spec_from_file_location("kvsim_mutant_catalogue", path)
    if spec is None or spec.loader is None:
        raise MutantError(f"{path}: cannot be loaded as a Python module")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return [Mutant(**m) for m in mod.MUTANTS]


def patched_text(root: Path, m: Mutant) -> str:
    """The mutated file's text; MutantError unless the old text occurs exactly once."""
    text = (root / m.file).read_text(encoding="utf-8")
    n = text.count(m.old)
    if n != 1:
        raise MutantError(f"{m.name}: the old text occurs {n} times in {m.file} (expected exactly once)")
    return text.replace(m.old, m.new)


def materialize(m: Mutant, tmp: Path, root: Path | None = None) -> Path:
    """Copy the package into tmp/<name>/kvsim, apply the patch there; returns tmp/<name> (for PYTHONPATH)."""
    root = root or package_root()
    base = tmp / m.name
    dest = base / "kvsim"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in COPIED:
        shutil.copytree(root / folder, dest / folder, ignore=ignore)
    (dest / "__init__.py").write_text('"""kvsim (a mutated copy for the self-check)."""\n', encoding="utf-8")
    (dest / m.file).write_text(patched_text(root, m), encoding="utf-8")
    return base


def kill(m: Mutant, tmp: Path, budget_s: float, seed: int = 0, root: Path | None = None) -> dict:
    """Run one campaign against the mutated copy in a subprocess; the kill record."""
    base = materialize(m, tmp, root)
    env = {**os.environ, "PYTHONPATH": str(base), "PYTHONDONTWRITEBYTECODE": "1"}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", KILL, m.machine, str(budget_s), str(seed), str(base / "found")],
                          cwd=base, env=env, capture_output=True, text=True, timeout=budget_s * 4 + 120)
    wall = time.monotonic() - t0
    shutil.rmtree(base, ignore_errors=True)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return {"name": m.name, "killed": False, "rule": None, "steps": 0, "seconds": round(wall, 3),
                "machine": m.machine, "error": tail[:300]}
    out = json.loads(lines[-1])
    if not Path(out["module"]).resolve().is_relative_to(base.resolve()):
        raise MutantError(f"{m.name}: the subprocess imported {out['module']}, not the mutated copy")
    return {"name": m.name, "killed": out["killed"], "rule": out["rule"], "steps": out["steps"],
            "seconds": out["seconds"], "machine": m.machine, "wall_seconds": round(wall, 3),
            "message": out["message"]}


def check_faults(tmp: Path, events: int = 1500, seed: int = 7) -> list[dict]:
    """Every engine fault: generated, replayed; flagged when its rule is reported at the bad event."""
    from kvsim.sim.replay import replay_trace
    from kvsim.sim.trace.faults import FAULTS
    from kvsim.sim.trace.generate import generate_with, options_for
    out = []
    for name in sorted(FAULTS):
        path = tmp / f"fault-{name}.jsonl"
        g = generate_with(path, options_for(events, seed, name))
        r = replay_trace(path)
        at = [v["rule"] for v in r.violations if v["event"] == g.event]
        out.append({"name": name, "flagged": g.rule in at, "rule": g.rule, "event": g.event,
                    "reported": sorted(set(at))})
        path.unlink()
    return out


def selfcheck(budget_s: float = 60.0, workers: int = 2, seed: int = 0, only=None, faults: bool = True,
              progress=None) -> dict:
    """The whole self-check: faults, then every mutant in `workers` parallel processes."""
    root = package_root()
    mutants = load_mutants(mutants_file(root))
    if only:
        mutants = [m for m in mutants if m.name in set(only)]
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kvsim-selfcheck-") as tmp_name:
        tmp = Path(tmp_name)
        fault_rows = check_faults(tmp) if faults else []
        for m in mutants:
            patched_text(root, m)  # every patch applies before anything runs

        def one(m):
            row = kill(m, tmp, budget_s, seed, root)
            if progress is not None:
                progress(row)
            return row
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            rows = list(pool.map(one, mutants))
    killed = [r for r in rows if r["killed"]]
    return {"mutants": rows, "faults": fault_rows, "killed": len(killed), "total": len(rows),
            "median_seconds": round(statistics.median(r["seconds"] for r in killed), 3) if killed else None,
            "flagged": sum(f["flagged"] for f in fault_rows), "faults_total": len(fault_rows),
            "seconds": round(time.monotonic() - t0, 3), "budget_s": budget_s, "workers": workers, "seed": seed}
