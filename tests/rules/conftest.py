"""The `rule` marker and the catalogue check: every rule has a "keeps" test and a "fires" test.

`@pytest.mark.rule("WR-2", "keeps")` names the rule a test is about and which side it shows: legal
behaviour keeps the rule (checked, exercised, never violated), or a crafted violation fires it with that
id. When the whole tests/rules folder runs (no node ids, no -k/-m deselection), the session fails if any
catalogue rule (except those of the physical implementation, tested elsewhere) lacks either kind.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvsim.spec.catalogue import all_rules

KINDS = ("keeps", "fires")
ELSEWHERE = frozenset({"CONS-2", "CONS-3"})  # physical implementation: codec bytes, id order, no gather
HERE = Path(__file__).resolve().parent

_seen: dict[str, set] = {}
_state = {"deselected": False, "errors": [], "missing": None, "from_workers": []}


def pytest_configure(config):
    config.addinivalue_line("markers", 'rule(id, kind): the catalogue rule a test is about; kind "keeps" or "fires"')


def _mine(item) -> bool:
    return HERE in Path(str(item.fspath)).resolve().parents


def pytest_deselected(items):
    if any(_mine(i) for i in items):
        _state["deselected"] = True


def _whole_folder(config) -> bool:
    base = Path(config.invocation_params.dir)
    for arg in config.args:
        if "::" in arg:
            continue
        path = (base / arg).resolve()
        if path == HERE or path in HERE.parents:
            return True
    return False


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    # clause: no checker; TS-*: tests/cache
    ids = {r.id for r in all_rules() if r.kind != "clause" and r.scope != "cache"}
    for item in items:
        if not _mine(item):
            continue
        for mark in item.iter_markers("rule"):
            rid, kind = (list(mark.args) + [None, None])[:2]
            if rid not in ids or kind not in KINDS:
                _state["errors"].append(f"{item.nodeid}: rule marker {mark.args} names no catalogue rule/kind")
                continue
            _seen.setdefault(rid, set()).add(kind)
    if _whole_folder(config) and not _state["deselected"]:
        _state["missing"] = [f"{rid} {kind}" for rid in sorted(ids - ELSEWHERE)
                             for kind in KINDS if kind not in _seen.get(rid, ())]


def pytest_sessionfinish(session, exitstatus):
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: hand the findings to the controller
        workeroutput["rule_problems"] = _problems()
        return
    problems = _problems() + _state["from_workers"]
    if not problems:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_sep("=", "rule catalogue coverage", red=True)
        for line in sorted(set(problems)):
            reporter.write_line(line)
    if session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """xdist controller: collect what each worker found (every worker collects the whole session)."""
    _state["from_workers"].extend(getattr(node, "workeroutput", {}).get("rule_problems", ()))


def _problems() -> list[str]:
    problems = list(_state["errors"])
    if _state["missing"]:
        problems.append("rules without a test: " + ", ".join(_state["missing"]))
    return problems
