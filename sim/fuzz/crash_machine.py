"""The `judge-crash` machine: PEER-11's crash classification -- the vLLM and SGLang drivers' ``crash_facts`` and the
engine judge's PEER-11 finding -- over generated tracebacks, against ``sim.fuzz.crash_reference`` (written from the
documented behaviour, importing nothing of kvsim).

Hypothesis draws the engine, a chain of frames below the driver's ``main`` -- each in the engine's package, in a
sibling package whose name starts with the engine's (``vllm_ext``), in the driver script, in another library or in
kvsim -- with line numbers, function names and ``request`` locals (a string id, another value, or none), the
exception's type (SGLang's ``EngineFault`` among them) and message (white space and length drawn), and what the
driver was doing (step, phase, request). The traceback is real: each frame is a function compiled under its file
name, called in a chain, the innermost raising; the driver's ``main`` frame catches it. The driver's facts must
equal the reference's, their classification (crash, driver bug, setup error) the reference's, and a crash must
reach ``EngineJudge.crashed`` as one PEER-11 finding at the crash's step whose context names the exception, the
frame, the request and the traceback. No engine venv is needed: the drivers import their engine only inside
``main``.
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import Any, NoReturn

from hypothesis import strategies as st
from hypothesis.control import current_build_context
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from kvsim.sim.files import write_atomic
from kvsim.sim.fuzz.crash_reference import classify, expected
from kvsim.sim.fuzz.harness import FuzzFailure
from kvsim.sim.fuzz.stats import RUN, declare, reached

SITE = "/opt/venv/lib/python3.11/site-packages"
PLACES = ("engine", "engine", "engine", "lookalike", "driver", "library", "kvsim")
FUNCS = ("schedule", "allocate_slots", "free", "_evict", "step", "update_from_output", "insert", "match_prefix",
         "cache_blocks", "__init__", "<lambda>", "main")
TYPES = ("AssertionError", "ValueError", "KeyError", "RuntimeError", "IndexError", "EngineFault")
declare([f"crash:{e}:{how}" for e in ("vllm", "sglang") for how in ("crash", "bug", "error")]
        + ["crash:sglang:engine-fault"]
        + [f"crash:innermost:{p}" for p in ("engine", "lookalike", "driver", "library", "kvsim")])
WORDS = ("block", "ref_cnt", "  ", "\n", "\t", "x" * 90, "request r7", "assert", "0", "", "évicted")


class _Req:
    def __init__(self, rid: Any) -> None:
        self.request_id = rid


class _Block:
    def __init__(self, bid: Any) -> None:
        self.block_id = bid


class _Node:
    def __init__(self, nid: Any) -> None:
        self.id = nid


def _driver(engine: str) -> Any:
    """The engine's driver script imported as kvsim's module (its ``crash_facts`` is what is fuzzed). The script
    imports its sibling ``ledger`` as the engine venv finds it (its folder first on ``sys.path``), so the import
    runs with that folder in front and leaves no top-level ``ledger`` behind (the two drivers' ledgers differ)."""
    import importlib
    import os
    import sys
    name = f"kvsim.sim.peers.{'vllm' if engine == 'vllm' else 'sglang'}.driver"
    if name in sys.modules:
        return sys.modules[name]
    folder = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "peers",
                          "vllm" if engine == "vllm" else "sglang")
    saved = sys.modules.pop("ledger", None)
    sys.path.insert(0, folder)
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(folder)
        sys.modules.pop("ledger", None)
        if saved is not None:
            sys.modules["ledger"] = saved


def _file(place: str, engine: str, k: int, driver: str) -> str:
    return {"engine": f"{SITE}/{engine}/v1/core/mod{k % 3}.py", "lookalike": f"{SITE}/{engine}_ext/hooks.py",
            "driver": driver, "library": f"{SITE}/torch/nn/functional.py",
            "kvsim": f"{SITE}/kvsim/sim/peers/engines.py"}[place]


def raise_through(frames: list[dict], exc: BaseException) -> BaseException:
    """Raise ``exc`` from a real chain of functions, one per frame (outermost first), each compiled under its file
    name so that its code object reports that file, function and line; the outermost catches and returns it."""
    nxt: Any = None
    for i in range(len(frames) - 1, -1, -1):
        f = frames[i]
        param = "request" if f["request"] is not None or f.get("local") else "req_"
        if i == 0:
            src = "\n" * (f["line"] - 3) + (f"def {f['func']}(nxt, {param}, block, node, exc_):\n    try:\n"
                                            "        return nxt()\n    except BaseException as caught:\n"
                                            "        return caught\n")
        else:
            body = "raise exc_" if i == len(frames) - 1 else "return nxt()"
            src = "\n" * (f["line"] - 2) + f"def {f['func']}(nxt, {param}, block, node, exc_):\n    {body}\n"
        ns: dict = {}
        exec(compile(src, f["file"], "exec"), ns)  # noqa: S102 -- code built here from drawn names, no input
        local = None if f["request"] is None else _Req(f["request"])
        block = None if f.get("block") is None else _Block(f["block"])
        node = None if f.get("node") is None else _Node(f["node"])
        nxt = functools.partial(ns[f["func"]], nxt, local, block, node, exc)
    return nxt()


class CrashMachine(RuleBasedStateMachine):
    name = "judge-crash"
    oracles = ("crash",)  # branches: each classification per engine, each kind of innermost frame

    @staticmethod
    def catalogue_ids() -> list[str]:
        return []

    def __init__(self) -> None:
        super().__init__()
        self.engine = ""
        self.frames: list[dict] = []
        self.failed = False

    def count(self, label: str) -> None:
        RUN.rules[label] = RUN.rules.get(label, 0) + 1
        RUN.steps += 1

    @initialize(engine=st.sampled_from(("vllm", "sglang")), line=st.integers(3, 400))
    def start(self, engine, line) -> None:
        self.engine = engine
        self.mod = _driver(engine)
        self.frames = [{"file": self.mod.__file__, "func": "main", "line": line, "request": None, "place": "driver"}]
        RUN.examples += 1
        self.count(f"engine:{engine}")

    @rule(place=st.sampled_from(PLACES), func=st.sampled_from(FUNCS), line=st.integers(2, 2000),
          request=st.one_of(st.none(), st.sampled_from(("r0", "r1", "cmpl-9", "")), st.integers(0, 3)),
          block=st.one_of(st.none(), st.integers(-1, 40), st.sampled_from(("7", 2.0))),
          node=st.one_of(st.none(), st.integers(0, 40), st.sampled_from(("3", None))))
    def call(self, place, func, line, request, block, node) -> None:
        """One more frame below the innermost one."""
        if len(self.frames) >= 10:
            return
        self.count(f"frame:{place}")
        self.frames.append({"file": _file(place, self.engine, len(self.frames), self.mod.__file__),
                            "func": func if func != "<lambda>" else "anonymous", "line": line, "request": request,
                            "place": place, "block": block, "node": node})

    @precondition(lambda self: len(self.frames) >= 2)
    @rule(kind=st.sampled_from(TYPES), words=st.lists(st.sampled_from(WORDS), max_size=8),
          step=st.one_of(st.none(), st.integers(0, 50)), phase=st.sampled_from(("setup", "step", "clear")),
          request=st.one_of(st.none(), st.sampled_from(("w1", "w2"))))
    def crash(self, kind, words, step, phase, request) -> None:
        """The innermost frame raises; the driver reports it; the judge judges it."""
        mod = self.mod
        fault = kind == "EngineFault"
        cls: Any = getattr(mod, "EngineFault", RuntimeError) if fault else __builtins__[kind]  # type: ignore[index]
        exc = cls(" ".join(words) * (3 if len(words) > 6 else 1))
        where = {"step": step, "request": request, "phase": phase}
        caught = raise_through(self.frames, exc)
        package = f"{SITE}/{self.engine}"
        got = mod.crash_facts(caught, package, where)
        want = expected(self.engine, self.frames, type(caught).__name__, str(caught), package, mod.__file__, where,
                        engine_fault=fault and self.engine == "sglang")
        how = classify(want, where)
        self.count(f"class:{how}")
        reached(f"crash:{self.engine}:{'engine-fault' if fault and self.engine == 'sglang' else how}")
        reached(f"crash:innermost:{self.frames[-1]['place']}")
        self.count(f"frame-named:{bool(want['frame'])}")
        if got != want:
            diff = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
            self.fail(diff[0], f"{self.engine} crash_facts: {diff[0]} is {got.get(diff[0])!r}, the documented "
                      f"classification gives {want.get(diff[0])!r}")
        if how == "crash":
            self.judged(got)

    def judged(self, facts: dict) -> None:
        """A crash reaches the engine judge as exactly one PEER-11 finding at its step, naming what it was."""
        from kvsim.sim.peers.judges.engine_judge import EngineJudge
        from kvsim.sim.peers.judges.events import EventChecker
        j = EngineJudge(4, 8, EventChecker(block_size=4, capacity=7))
        j.crashed(facts, 0)
        f = j.findings
        ctx = {"exception": facts["type"], "frame": facts["frame"], "request": facts["request"],
               "traceback": list(facts["traceback"]),
               **{k: facts[k] for k in ("block", "node") if facts.get(k) is not None}}
        step = facts["step"] if facts["step"] is not None else -1
        if len(f) != 1 or f[0].rule != "PEER-11" or f[0].step != step or f[0].context != ctx:
            self.fail("finding", f"EngineJudge.crashed gave {[(x.rule, x.step, x.context) for x in f]}; expected one "
                      f"PEER-11 at step {step} with {ctx}")
        if facts["frame"] not in f[0].message or facts["type"] not in f[0].message:
            self.fail("finding", f"the PEER-11 message {f[0].message!r} names neither the frame nor the exception")
        self.count("rule:PEER-11")

    def fail(self, what: str, message: str) -> NoReturn:
        self.failed = True
        text = f"PEER-11 ({what}) {message}"
        try:
            final = current_build_context().is_final
        except Exception:  # noqa: BLE001 — outside a Hypothesis test (a direct call)
            final = True
        if final and RUN.found_dir is not None:
            data = (json.dumps({"engine": self.engine, "frames": self.frames}, sort_keys=True) + "\n").encode()
            path = RUN.found_dir / f"{self.name}-{hashlib.sha256(data).hexdigest()[:12]}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, data)
            RUN.last_failure = {"kind": what, "message": text, "rule": "PEER-11", "reproduced": True,
                                "trace": str(path), "steps": len(self.frames), "replay": message}
        raise FuzzFailure(text)
