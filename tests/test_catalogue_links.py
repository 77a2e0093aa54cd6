"""Catalogue links: every rule id the code names is a catalogue rule, and every name the catalogue holds resolves.

The registry validates at import what it can (model rule tuples, dotted checker names, FOCUS entries);
this test adds what needs the source: every rule-id literal in the package (the ids the model, the
checkers, replay and the scenarios raise or count) is defined in the catalogue.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from kvsim.spec import catalogue, checking
from kvsim.spec.catalogue import InvalidRule, all_rules, locate, require, resolves, transition_rule, unresolved

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("kvmodel", "spec", "sim", "gpu", "scenarios")
RULE_ID = re.compile(r"""["']((?:CAP|PAGE|AS|WR|ENT|UNIT|REP|CKPT|CONS|TRACE|TS-[A-Z0-9]+|EV|PEER)-[0-9]+)["']""")


def _literals() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                for rid in RULE_ID.findall(line):
                    found.setdefault(rid, []).append(f"{path.relative_to(ROOT)}:{n}")
    return found


def test_every_rule_id_the_code_names_is_in_the_catalogue():
    ids = {r.id for r in all_rules()}
    found = _literals()
    scanned = {rid for rid in ids if RULE_ID.fullmatch(f'"{rid}"')}  # the families the scan looks for
    assert len(found) >= len(scanned) // 2  # the scan sees the code (not an empty tree)
    unknown = {rid: where[:3] for rid, where in found.items() if rid not in ids}
    assert not unknown, f"rule ids used but not defined: {unknown}"


def _import_dotted(name: str):
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(name)


def test_every_dotted_checker_name_imports():
    dotted = [r.checker for r in all_rules() if isinstance(r.checker, str)]
    assert dotted
    for name in dotted:
        assert callable(_import_dotted(name)), name


def test_every_dotted_checker_name_resolves_in_the_source_without_importing_it():
    assert unresolved() == []


def test_a_bad_dotted_name_is_reported_by_the_link_check_not_at_import(monkeypatch):
    assert resolves("kvsim.sim.lockstep.Lockstep.check_row")
    path, line = locate("kvsim.sim.lockstep.Lockstep.check_row")
    assert path.endswith("lockstep.py") and "def check_row" in Path(path).read_text().splitlines()[line - 1]
    monkeypatch.setattr(catalogue, "_REGISTRY", dict(catalogue._REGISTRY))
    transition_rule("CONS-99", "t", "c", "kvsim.sim.lockstep.Lockstep.check_rows")  # registers: no crash
    assert [m for m in unresolved() if "CONS-99" in m] == \
        ["rule CONS-99: checker 'kvsim.sim.lockstep.Lockstep.check_rows' names no function (fix the dotted name)"]


def test_a_focus_naming_no_rule_fails(monkeypatch):
    monkeypatch.setitem(checking.FOCUS, "launch", ("UNIT-1", "UNIT-9"))
    with pytest.raises(InvalidRule, match=r"FOCUS\['launch'\] names UNIT-9"):
        checking._validate_focus()
    monkeypatch.setitem(checking.FOCUS, "launch", ("UNIT-2",))  # a transition rule: never run by a checker
    with pytest.raises(InvalidRule, match="not state rules"):
        checking._validate_focus()


def test_a_model_tuple_naming_no_rule_fails():
    with pytest.raises(InvalidRule, match="WR-77"):
        require(("WR-1", "WR-77"), "a tuple")


def test_cons2_and_cons3_judge_kvsims_own_kernels_not_the_engine():
    """Decision 19: a trace never shows an engine's kernels, so these rules are kvsim self-checks."""
    from kvsim.spec.catalogue import get

    for rid in ("CONS-2", "CONS-3"):
        assert get(rid).evidence == "model", rid
    assert all(r.evidence != "engine" for r in all_rules() if r.id in ("CONS-2", "CONS-3"))


# The plane-order and address clauses of the store contract (its 4.3 closed orders, the Device replica's
# plane layout and the consumer's translation): each has a rule or a not-checkable entry (decision 20).
PLANE_CLAUSES = ("所有 registered growing pools 使用 (P=64)，并选择两种 closed orders 之一",
                 "Main Text 与 MTP 使用 page-major", "DFlash Full 使用 head-major page run", "Page-major 地址为",
                 "Head-major 地址为",
                 "Code 与 scale planes 使用同一个 (g)", "Device replica 使用 4 的 consumer-native plane layout",
                 "logical_block = position >> 6")


@pytest.mark.parametrize("phrase", PLANE_CLAUSES)
def test_plane_order_and_address_clauses_are_catalogued(phrase):
    holders = [r for r in all_rules() if phrase in r.clause]
    assert holders, f"no catalogue entry cites {phrase!r}"
    assert all(r.kind == "clause" and r.not_checkable or r.kind == "state" for r in holders)


def test_plane_clauses_are_the_seeds_words():
    seeds = ROOT.parent / "shared" / "seeds"
    texts = sorted(seeds.glob("000_*.txt")) if seeds.is_dir() else []
    if not texts:
        pytest.skip("the seeds are not beside the repository")
    text = texts[0].read_text(encoding="utf-8")
    for phrase in PLANE_CLAUSES:
        assert phrase in text, phrase
