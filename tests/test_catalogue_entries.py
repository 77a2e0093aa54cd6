"""One catalogue: every rule id any command can report is an entry of spec/rules, and every entry is complete.

`kvsim rules` lists every id the code can put in a report (store rules, TS-*, EV-*, PEER-*: the literals of the
package and its bundled data, and every id a peer judge counts); each entry's tests exist and include every test
marked with its id; every path an entry names is a file of the repository; every context key the code puts in a
finding is named by its rule's entry and explained (spec.findings); `kvsim explain` prints any entry with its
checker's place, relative to the package.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from kvsim.sim.cli import main
from kvsim.sim.cli.explain import explained, text
from kvsim.spec.catalogue import FAMILY_ORDER, Rule, all_rules, get, phrase, stated, where
from kvsim.spec.findings import FORMS, meaning

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("kvmodel", "spec", "sim", "gpu", "scenarios")
FAMILY = "|".join(re.escape(f) for f in sorted(FAMILY_ORDER, key=len, reverse=True))
ANY_ID = re.compile(rf"\b((?:{FAMILY})-[1-9][0-9]*)\b")
SOURCES = (".py", ".json", ".jsonl", ".toml", ".md")


def _mentions() -> dict[str, list[str]]:
    """Every rule id the package's code and data name (quoted or not), with where."""
    found: dict[str, list[str]] = {}
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*")):
            if path.suffix not in SOURCES or not path.is_file():
                continue
            for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
                for rid in ANY_ID.findall(line):
                    found.setdefault(rid, []).append(f"{path.relative_to(ROOT)}:{n}")
    return found


def _judged_ids() -> dict[str, tuple[str, ...]]:
    """The ids each peer judge counts its findings by (its report's rule table), per judge."""
    from kvsim.sim.peers.cachetrace import contract
    from kvsim.sim.peers.judges import engine_rules, event_rules, group_judge, host_judge
    from kvsim.sim.peers.sglang import policy as sglang_policy
    from kvsim.sim.peers.tokenspeed import config_probe
    from kvsim.sim.peers.vllm import policy as vllm_policy

    return {"tokenspeed": tuple(contract.RULES), "probe": tuple(config_probe.RULES),
            "engine": (*engine_rules.RULES, *vllm_policy.RULES, *sglang_policy.RULES, *group_judge.RULE_IDS,
                       *host_judge.RULE_IDS),
            "events": tuple(event_rules.CATALOGUE)}


def test_kvsim_rules_lists_every_id_any_report_can_name(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("KVSIM_REPORTS", str(tmp_path))
    assert main(["rules", "--json"]) == 0
    listed = [r["id"] for r in json.loads(capsys.readouterr().out)]
    assert len(listed) == len(set(listed)) == len(all_rules())
    named = _mentions()
    assert {"WR-2", "TS-L2-1", "EV-3", "PEER-9", "PEER-1"} <= set(named)  # the scan sees every family's code
    unknown = {rid: where[:3] for rid, where in named.items() if rid not in listed}
    assert not unknown, f"ids the code names that kvsim rules does not list: {unknown}"
    for judge, ids in _judged_ids().items():
        assert set(ids) <= set(listed), judge


def test_every_peer_judge_reports_its_rules_in_the_catalogues_words():
    """No second copy: each judge's table is the catalogue's statement of the rule for that judge."""
    for judge, ids in _judged_ids().items():
        for rid in ids:
            assert judge in {j for j, _ in get(rid).checkers()}, (judge, rid)
    from kvsim.sim.peers.cachetrace import contract
    from kvsim.sim.peers.judges import engine_rules, event_rules

    assert contract.RULES == stated(contract.RULES, "tokenspeed")
    assert engine_rules.DECISIONS["PEER-9"] == get("PEER-9").stated("engine")[2]
    assert {rid: (r.title, r.clause, r.decisions) for rid, r in event_rules.CATALOGUE.items()} == \
        {rid: get(rid).stated("events") for rid in event_rules.IDS}


def test_a_report_title_is_the_entrys_as_a_phrase():
    assert phrase("The engine under test completes") == "the engine under test completes"
    assert phrase("A removal names a live block") == "a removal names a live block"
    for name in ("SGLang's radix cache", "vLLM evicts", "AllBlocksCleared empties", "Validate() is", "L3 gets"):
        assert phrase(name) == name
    assert get("PEER-9").stated("tokenspeed")[0].startswith("the scheduler's own pool counters")
    assert get("PEER-9").stated("engine")[0].startswith("the scheduler's prefix-cache stats")
    assert get("TS-TBL-1").stated("tokenspeed")[:2] == (phrase(get("TS-TBL-1").title), get("TS-TBL-1").clause)


def _test_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and n.name.startswith("test")}


def _rule_marks() -> dict[str, set[str]]:
    """rule id -> the tests carrying @pytest.mark.rule(id, ...), as file::function."""
    marks: dict[str, set[str]] = {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        for fn in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(fn, ast.FunctionDef):
                continue
            for d in fn.decorator_list:
                if isinstance(d, ast.Call) and ast.unparse(d.func).endswith("mark.rule") and d.args \
                        and isinstance(d.args[0], ast.Constant):
                    marks.setdefault(d.args[0].value, set()).add(f"{path.relative_to(ROOT)}::{fn.name}")
    return marks


def test_every_rule_with_a_checker_names_tests_that_exist():
    cache: dict[str, set[str]] = {}
    missing = []
    for rule in all_rules():
        if rule.kind == "clause":
            assert not rule.tests, rule.id
            continue
        assert rule.tests, f"{rule.id} has a checker but names no test"
        for node in rule.tests:
            file, func = node.split("::")
            path = ROOT / file
            if file not in cache:
                cache[file] = _test_functions(path) if path.is_file() else set()
            if func not in cache[file]:
                missing.append(f"{rule.id}: {node}")
    assert not missing, missing


def test_every_test_marked_with_a_rule_is_named_by_its_entry():
    marks = _rule_marks()
    assert len(marks) > 80  # the scan sees the marked tests
    left_out = {rid: sorted(tests - set(get(rid).tests)) for rid, tests in marks.items()
                if tests - set(get(rid).tests)}
    assert not left_out, left_out


PATH = re.compile(r"(?<![\w./-])((?:kvmodel|spec|sim|gpu|scenarios|tests|scripts|reports|research|docs|notes|shared)"
                  r"/[\w./*-]*[\w*])")


def _texts(rule: Rule) -> list[str]:
    return [rule.title, rule.clause, rule.decisions, rule.not_checkable,
            *(t for r in rule.readings for t in (r.title, r.clause, r.decisions))]


def test_every_path_an_entry_names_is_a_file_of_the_repository():
    """Citations name files the repository ships (the seeds and research notes live outside it: an entry cites
    a seed by its number and line, an engine by its own source path, e.g. vllm/v1/core/block_pool.py)."""
    bad = []
    for rule in all_rules():
        for body in _texts(rule):
            for path in PATH.findall(body):
                if "*" in path or not (ROOT / path).exists():
                    bad.append(f"{rule.id}: {path}")
    assert not bad, bad


def test_a_path_outside_the_repository_is_caught():
    assert PATH.findall("see research/tokenspeed.md §6 and sim/peers/ENGINE/counters.py") == \
        ["research/tokenspeed.md", "sim/peers/ENGINE/counters.py"]
    assert not (ROOT / "sim/peers/ENGINE/counters.py").exists()


FINDERS = {"violation", "find", "_find", "_diverged"}
NOT_CONTEXT = {"about"}  # the contract judge's find(): the entities a cause marks (causes.Causes), not kept


def _rule_arg(call: ast.Call) -> tuple[int, str] | None:
    """(position, id) of the rule-id literal among a call's first two arguments (``find("WR-2", ...)``, a plug-in's
    ``_find(judge, "TS-L2-1", ...)``), or None."""
    for i, a in enumerate(call.args[:2]):
        if isinstance(a, ast.Constant) and isinstance(a.value, str) and ANY_ID.fullmatch(a.value):
            return i, a.value
    return None


def _finding_keys() -> dict[str, set[str]]:
    """rule id -> the keyword names the code gives a finding of it (violation(...), find(...), ...)."""
    out: dict[str, set[str]] = {}
    for pkg in ("kvmodel", "spec", "sim"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                found = _rule_arg(n) if isinstance(n, ast.Call) else None
                if found is None:
                    continue
                at, rid = found
                name = ast.unparse(n.func).rsplit(".", 1)[-1]
                if name in FINDERS:
                    out.setdefault(rid, set()).update(k.arg for k in n.keywords if k.arg and k.arg not in NOT_CONTEXT)
                elif name == "Finding" and at == 0 and len(n.args) >= 3 and isinstance(n.args[2], ast.Dict):
                    out.setdefault(rid, set()).update(k.value for k in n.args[2].keys if isinstance(k, ast.Constant))
    return out


def test_every_context_key_a_finding_carries_is_named_and_explained():
    keys = _finding_keys()
    assert {"EV-3", "PEER-1", "TS-L2-3", "WR-4"} <= set(keys)  # the scan sees every judge's findings
    unnamed = {rid: sorted(ks - set(get(rid).context)) for rid, ks in keys.items() if ks - set(get(rid).context)}
    assert not unnamed, unnamed
    unexplained = [(r.id, k) for r in all_rules() for k in r.context if not meaning(r, k)]
    assert not unexplained, unexplained


def test_explain_prints_peer_9_and_ev_3_with_their_checkers_place(capsys):
    for rid, place in (("PEER-9", "sim/peers/judges/engine_judge.py:"), ("EV-3", "sim/peers/judges/events.py:"),
                       ("PEER-9", "sim/peers/tokenspeed/counters.py:")):
        assert main(["explain", rid]) == 0
        out = capsys.readouterr().out
        rule = get(rid)
        flat = " ".join(out.split())
        assert out.startswith(f"{rid}  ") and rule.title in flat and " ".join(rule.clause.split()) in flat
        line = re.search(re.escape(place) + r"([0-9]+)\)", flat)
        assert line, flat[:400]
        assert str(ROOT) not in out  # never a machine path
        assert "tests/" in out and "a finding means:" in out and "reading one:" in out
    assert main(["explain", "ev-3", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["id"] == "EV-3" and doc["where"] == [{"judge": "events", "checker": get("EV-3").checker_name,
                                                     "where": where(get("EV-3").checker_name)}]
    assert doc["findings"][0]["context"] == {"parent": FORMS["events"].keys["parent"]}


def test_the_place_explain_shows_is_the_checkers_definition():
    for rule in all_rules():
        for _judge, dotted in rule.checkers():
            place = where(dotted)
            assert place and not place.startswith("/"), (rule.id, dotted)
            file, line = place.rsplit(":", 1)
            name = dotted.rsplit(".", 1)[-1]
            assert re.match(rf"\s*(async )?def {name}\b", (ROOT / file).read_text().splitlines()[int(line) - 1]), place


@pytest.mark.parametrize("rule", [r.id for r in all_rules()])
def test_explain_prints_every_entry(rule):
    entry = get(rule)
    out = text(entry)
    assert out.startswith(f"{rule}  ") and out.endswith("\n")
    assert all(len(line) <= 100 or " " not in line.strip() for line in out.splitlines() if "tests/" not in line)
    doc = explained(entry)
    assert json.loads(json.dumps(doc)) == doc and [w["where"] for w in doc["where"]] == \
        [where(d) for _j, d in entry.checkers()]


@pytest.mark.parametrize("word, says", [("PEER-99", "did you mean PEER-9"), ("ev-33", "did you mean EV-3"),
                                         ("XYZ", "`kvsim rules` lists every id"),
                                         ("TS-L2", "a rule family, not a rule: `kvsim rules TS-L2` lists it")])
def test_explain_an_unknown_id_is_one_line_and_exit_2(word, says, capsys):
    assert main(["explain", word]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and says in captured.err, captured.err


@pytest.mark.parametrize("argv, families", [
    (["rules", "PEER", "--json"], {"PEER"}),
    (["rules", "--json", "ev"], {"EV"}),
    (["rules", "EV", "--json", "peer"], {"EV", "PEER"}),
    (["rules", "TS", "--json"], {f for f in FAMILY_ORDER if f.startswith("TS-")}),
    (["rules", "store", "--json"], set(FAMILY_ORDER[:10])),
])
def test_rules_lists_the_families_asked_for(argv, families, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("KVSIM_REPORTS", str(tmp_path))
    assert main(argv) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["family"] for r in rows} == families
    assert len(rows) == sum(1 for r in all_rules() if r.family in families)


@pytest.mark.parametrize("argv", [["rules", "NOPE"], ["rules", "PEER", "--obligations"]])
def test_rules_with_a_bad_family_is_one_line_and_exit_2(argv, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("kvsim rules: ")
