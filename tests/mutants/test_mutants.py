"""The seeded bugs of `kvsim selfcheck`: every patch still applies, a mutated copy is what a subprocess
imports (never the tree or the editable install), and a reduced self-check kills and flags end to end."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kvsim.sim.cli import main
from kvsim.sim.fuzz.campaign import MACHINES
from kvsim.sim.selfcheck import COPIED, Mutant, MutantError, load_mutants, materialize, package_root, patched_text

MUTANTS = load_mutants()


def test_at_least_fifteen_mutants_with_distinct_names():
    assert len(MUTANTS) >= 15
    assert len({m.name for m in MUTANTS}) == len(MUTANTS)
    assert all(m.bug and m.machine in MACHINES for m in MUTANTS)


@pytest.mark.parametrize("m", MUTANTS, ids=lambda m: m.name)
def test_every_patch_applies_exactly_once_and_changes_the_file(m):
    root = package_root()
    before = (root / m.file).read_text(encoding="utf-8")
    after = patched_text(root, m)
    assert after != before and before.count(m.old) == 1


def test_a_patch_whose_text_is_gone_is_refused():
    m = Mutant("gone", "nothing", "kvmodel/store/pool.py", "this text is not in the file", "x")
    with pytest.raises(MutantError, match="occurs 0 times"):
        patched_text(package_root(), m)


def test_the_subprocess_imports_the_mutated_copy_not_the_tree(tmp_path):
    m = MUTANTS[0]
    base = materialize(m, tmp_path)
    assert sorted(p.name for p in (base / "kvsim").iterdir() if p.is_dir()) == sorted(COPIED)
    assert (package_root() / m.file).read_text(encoding="utf-8").count(m.old) == 1  # the tree is untouched
    code = ("import kvsim.kvmodel, pathlib; print(kvsim.kvmodel.__file__); "
            f"print({m.new!r} in pathlib.Path(kvsim.kvmodel.__file__).parents[1].joinpath({m.file!r}).read_text())")
    out = subprocess.run([sys.executable, "-c", code], cwd=base, capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(base)}).stdout.split()
    assert out[0].startswith(str(base)) and out[1] == "True"


def test_reduced_selfcheck_kills_flags_and_reports(tmp_path, capsys):
    out = tmp_path / "selfcheck.json"
    rc = main(["selfcheck", "--only", "entitlement-returned-early", "reservation-leaked-at-finish",
               "--budget", "60", "--json", str(out)])
    got = json.loads(out.read_text())
    assert rc == 0, got
    assert got["killed"] == got["total"] == 2 and got["median_seconds"] is not None
    assert {m["name"] for m in got["mutants"]} == {"entitlement-returned-early", "reservation-leaked-at-finish"}
    assert all(m["rule"] and m["steps"] > 0 for m in got["mutants"])
    assert got["faults"] and all(f["flagged"] for f in got["faults"])
    assert set(got) >= {"mutants", "faults", "killed", "total", "median_seconds"}
    assert "killed" in capsys.readouterr().out
