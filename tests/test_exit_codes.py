"""Classified exits: a crash inside the model is exit 3 with one line naming the event and line (a traceback
only with `kvsim --debug`), never "violations found"; internal checks raise errors naming the invariant."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kvsim.kvmodel.store import units
from kvsim.kvmodel.store.errors import InvariantError
from kvsim.kvmodel.store.host_arena import HostKVArena
from kvsim.kvmodel.store.pool import DevicePagePool
from kvsim.sim.cli import main
from kvsim.sim.trace.generate import default_header
from kvsim.sim.trace.stream import encode_line

ROOT = Path(__file__).resolve().parents[1]
LINES = [encode_line(default_header(max_context=1024, concurrency=4)).decode().rstrip("\n"),
         '{"op":"activate","seq":"s","prompt":10,"budget":10}',
         '{"op":"map","seq":"s","pool":"main","tokens":10}',
         '{"op":"launch","unit":"u","rows":[{"seq":"s","pool":"main","write":[0,10]}]}',
         '{"op":"complete","unit":"u","commit":[{"seq":"s","pool":"main","frontier":10}]}']


@pytest.fixture
def crashing(tmp_path, monkeypatch):
    monkeypatch.setenv("KVSIM_REPORTS", str(tmp_path / "reports"))

    def broken(st, plan):
        raise InvariantError("a commit advances its pages", "monkeypatched crash")
    monkeypatch.setattr(units, "apply_complete", broken)
    trace = tmp_path / "t.jsonl"
    trace.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    return trace


def test_a_crash_in_the_model_is_exit_3_with_one_line_naming_event_and_line(crashing, capsys):
    rc = main(["replay", str(crashing), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 3
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert f"{crashing}:5:" in err and "event 3 (complete)" in err
    assert "invariant 'a commit advances its pages' broken" in err and "please report it" in err


def test_debug_adds_the_traceback(crashing, capsys):
    assert main(["--debug", "replay", str(crashing), "--quiet"]) == 3
    err = capsys.readouterr().err
    assert "Traceback" in err and "monkeypatched crash" in err


def test_internal_checks_name_their_invariant():
    pool = DevicePagePool("main", 4, 1024)
    pid = pool.lease(object())
    pool.release(pid)
    with pytest.raises(InvariantError, match="'a page is released once' broken: main: double release of page 0"):
        pool.release(pid)
    with pytest.raises(InvariantError, match="reserve <= available"):
        pool.reserve(5)
    arena = HostKVArena(4096)
    with pytest.raises(InvariantError, match="host allocation fits"):
        arena.allocate(8192)


def test_the_package_has_no_bare_assert():
    """`assert` vanishes under `python -O`; internal checks raise InvariantError instead."""
    found = [f"{p.relative_to(ROOT)}:{n.lineno}" for pkg in ("kvmodel", "spec", "sim", "gpu", "scenarios")
             for p in sorted((ROOT / pkg).rglob("*.py"))
             for n in ast.walk(ast.parse(p.read_text(encoding="utf-8"))) if isinstance(n, ast.Assert)]
    assert not found, found
