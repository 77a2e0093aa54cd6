"""Running a real engine (vLLM, SGLang) in its own venv and process, and judging it as its steps arrive.

kvsim never imports the engine: the engine venv's python runs a driver script shipped in
``kvsim/sim/peers/ENGINE/driver.py`` (which imports only the engine and the standard library). The protocol is JSON
Lines over the child's stdin and stdout: kvsim sends a config object, one ``{"request": ...}`` per workload
row (token ids already expanded from hash ids by ``sim.peers.workload``, exactly as for the TokenSpeed peer),
then ``{"end": true}``; the driver answers ``{"hello": ...}``, one ``{"step": ...}`` line per engine step
(decisions, statistics, the KV-event batches published during the step, seconds inside engine calls), and
``{"done": ...}``, ``{"stalled": [...]}``, ``{"crash": {...}}`` (the engine raised while stepping: a PEER-11
finding, every earlier one kept), ``{"bug": {...}}`` (the driver's own code raised: kvsim's bug, exit 3) or
``{"error": "..."}`` (the engine refused its setup). Each step also carries the engine paths it took (``paths``,
named in ``sim.peers.ENGINE.paths``) and, every ``probe_every`` steps, the engine's deep counters (``probe``,
checked by ``sim.peers.ENGINE.counters`` as PEER-9). Every step goes straight to
``sim.peers.judges.engine_judge.EngineJudge`` and its batches to ``sim.peers.judges.events.EventChecker``; with
``record`` the batches are also written as the subscriber log vLLM/SGLang would produce (wire form, ``ts`` = step).

Three clocks are kept apart, as for TokenSpeed: seconds inside engine calls (the driver's own measure), the
judge's seconds, and everything else (pipes, JSON, the engine's import) as observation. It sits at the top of
``sim.peers``: one runner for every block-table engine, which finds each engine's room (driver, paths, counters,
policy) by name.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from kvsim.sim.peers.judges.engine_judge import EngineJudge
from kvsim.sim.peers.judges.events import EventChecker
from kvsim.sim.peers.workload import VOCAB, Request

__all__ = ["ENGINES", "EngineSpec", "EngineConfig", "EngineOutcome", "EngineError", "DriverBug", "Session",
           "driver_path", "engine_paths", "checker_for", "config_of", "counter_check", "event_checker", "feed",
           "make_judge", "probe", "replay_log", "run_engine", "wire_config", "wire_request"]


@dataclass(frozen=True)
class EngineSpec:
    name: str
    driver: str            # the driver script, relative to kvsim/sim/peers/
    default_block_size: int
    reserved_blocks: int   # blocks of the pool the engine never hands out (vLLM's null block 0)
    same_step_hits: bool   # a hit may name blocks this step's forward computes (vLLM caches at allocation)
    env: tuple[tuple[str, str], ...] = ()


ENGINES = {
    # PYTHONHASHSEED=0: the interpreter's own hash seed fixed, so set orders of bytes keys that reach the output
    # (the Host tier's store events) are the same every run; the driver unsets it before vLLM reads it, so vLLM's
    # NONE_HASH keeps its default seed
    "vllm": EngineSpec("vllm", "vllm/driver.py", 16, 1, True, (("VLLM_TARGET_DEVICE", "cpu"), ("PYTHONHASHSEED", "0"))),
    "sglang": EngineSpec("sglang", "sglang/driver.py", 16, 1, False),
}


class EngineError(Exception):
    """The engine could not be started or stopped with an error; ``str()`` is one line."""


POLICIES = {"vllm": "kvsim.sim.peers.vllm.policy", "sglang": "kvsim.sim.peers.sglang.policy"}
"""Each engine's eviction-policy rule (PEER-12 vLLM's free queue, PEER-13 SGLang's LRU leaves): a module with
``RULES``, ``DECISIONS`` and ``checker(usable_blocks)``."""


def policy_checker(engine: str, usable: int) -> Any:
    """The engine's eviction-policy checker, or None for an engine without one."""
    name = POLICIES.get(engine)
    return None if name is None else importlib.import_module(name).checker(usable)


class DriverBug(RuntimeError):
    """kvsim's own driver code raised (no frame of the traceback lies in the engine): kvsim's bug, exit 3."""


def engine_paths(engine: str, groups: list | None = None, host: bool = False) -> dict[str, str]:
    """The engine paths its driver counts, with what each one is (``sim.peers.ENGINE.paths``); with ``groups``
    (``--kv-groups``) each group's own paths too (``gN.<path>``, the module's ``group_paths``), with ``host``
    (``--offload-blocks``) the Host tier's (``host.<path>``, its ``HOST_PATHS``)."""
    module = importlib.import_module(f"kvsim.sim.peers.{engine}.paths")
    base = getattr(module, "base_paths", None)
    out = base(groups, host) if base is not None else dict(module.PATHS)
    if groups:
        out.update(module.group_paths(groups))
    if host:
        out.update(module.HOST_PATHS)
    return out


def counter_check(engine: str) -> Callable[[dict, dict[int, int]], list[tuple[str, dict]]]:
    """The engine's PEER-9 check of the deep counters its driver reads (``sim.peers.ENGINE.counters``)."""
    return importlib.import_module(f"kvsim.sim.peers.{engine}.counters").check


@dataclass
class EngineConfig:
    block_size: int
    num_blocks: int                 # the pool, reserved blocks included
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    max_model_len: int = 1 << 20
    probe_every: int = 0            # deep counters every N steps (0: one probe per 1,024 blocks of pool)
    clear_at_end: bool = True       # end with the engine's ClearCache once every request finished
    kv_groups: list | None = None   # --kv-groups: the cache groups (sim.peers.kv_groups.GroupSpec), None: one full
    offload: dict | None = None     # --offload-blocks: the Host tier ({"blocks", "ack_delay", "seed", ...})


@dataclass
class EngineOutcome:
    judge: EngineJudge
    events: EventChecker
    hello: dict = field(default_factory=dict)
    steps: int = 0
    stalled: list[str] = field(default_factory=list)
    engine_s: float = 0.0
    judge_s: float = 0.0
    observe_s: float = 0.0
    wall_s: float = 0.0
    step_costs_ms: list[float] = field(default_factory=list)
    stderr_tail: str = ""
    probe_s: float = 0.0            # seconds the driver spent reading the deep counters (judge cost)
    crash: dict | None = None       # the engine's exception (PEER-11), when it raised
    bug: dict | None = None         # the driver's own code raised (kvsim's bug)
    error: str | None = None        # the engine refused its setup
    interrupted: str | None = None  # a signal stopped the run: what was judged ("N steps, M of K requests finished")


def driver_path(engine: str) -> Path:
    return Path(__file__).resolve().parent / ENGINES[engine].driver


def wire_request(r: Request) -> dict:
    """A request as the driver (and a kvsim-peer/1 log) carries it."""
    req = {"id": r.id, "tokens": r.tokens.tolist(), "max_new_tokens": r.max_new_tokens}
    if r.arrival_step:
        req["arrive"] = r.arrival_step  # submitted before this step (at once when the engine is idle)
    return req


def wire_config(cfg: EngineConfig) -> dict:
    """The driver's config object (a hybrid run's cache groups and Host tier included)."""
    wire: dict[str, Any] = {
        "block_size": cfg.block_size, "num_blocks": cfg.num_blocks, "max_num_seqs": cfg.max_num_seqs,
        "max_num_batched_tokens": cfg.max_num_batched_tokens, "max_model_len": cfg.max_model_len,
        "vocab": VOCAB, "probe_every": cfg.probe_every or max(1, cfg.num_blocks // 1024),
        "clear_at_end": cfg.clear_at_end}
    if cfg.kv_groups:
        wire["kv_groups"] = [g.as_wire() for g in cfg.kv_groups]
    if cfg.offload:
        wire["offload"] = cfg.offload
    return wire


def _feed(stdin: Any, lines: list[bytes]) -> None:
    """Writer thread: one trial's config, requests and end mark (a thread, so neither pipe blocks)."""
    try:
        for ln in lines:
            stdin.write(ln)
        stdin.flush()
    except (BrokenPipeError, OSError, ValueError):
        pass  # the driver died: its stdout says why


def event_checker(engine: str, block_size: int | None, capacity: int, host_chunks: int = 0) -> EventChecker:
    """The KV-event checker for an engine's stream: its preset where ``sim.peers.judges.events`` has one (hash
    scheme, allowances), else block size and capacity with structure-only checks. ``block_size`` None: each
    group's first store declares its own (a ``--kv-groups`` run)."""
    from kvsim.sim.peers.judges import events as pe
    preset = getattr(pe, "PRESETS", {}).get(engine)
    checker: Any = pe.EventChecker
    if preset is not None and preset.reuse_reports:
        # the driver never sets kv_cache_report_mode="full": a parent-less store of live blocks is a second copy
        # (a request recomputing blocks a group of a hybrid model could not serve), never a reuse report
        import dataclasses
        preset = dataclasses.replace(preset, reuse_reports=False)
    caps = {"CPU": host_chunks} if host_chunks else None  # a Host tier's events: its own capacity
    if preset is not None:
        return checker(block_size=block_size, capacity=capacity, preset=preset, capacities=caps)
    return checker(block_size=block_size, hash_scheme="none", capacity=capacity)


def checker_for(engine: str, cfg: EngineConfig) -> EventChecker:
    """``event_checker`` for a run of ``cfg``: each group's own block size in a hybrid run, a Host tier's own
    capacity."""
    usable = cfg.num_blocks - ENGINES[engine].reserved_blocks
    return event_checker(engine, None if cfg.kv_groups else cfg.block_size, usable,
                         cfg.offload["blocks"] if cfg.offload else 0)


def _checker_parse() -> Callable | None:
    """``sim.peers.judges.events``' own reader of a wire batch where it has one (it keeps fields such as group_idx)."""
    from kvsim.sim.peers.judges import events as pe
    parse = getattr(pe, "parse_batch", None)
    return None if parse is None else (lambda batch: parse(batch)[0])


def structure_check(engine: str) -> Callable | None:
    """The engine's PEER-14 / PEER-15 check of the structures its driver's ledger reads
    (``sim.peers.ENGINE.structure``), None for an engine without one."""
    try:
        return importlib.import_module(f"kvsim.sim.peers.{engine}.structure").check
    except ModuleNotFoundError:
        return None


def make_judge(engine: str, cfg: EngineConfig, events: EventChecker) -> EngineJudge:
    """The step judge of one run of ``engine`` (live or re-judged from its kvsim-peer/1 log): decisions, events,
    deep counters, eviction policy (one full-attention group and no Host tier), a hybrid run's cache groups and
    Host tier, and the frames, structure checks and recovery of ``sim.peers.judges.actionable``."""
    from kvsim.sim.peers.judges.actionable import Actionable
    spec = ENGINES[engine]
    usable = cfg.num_blocks - spec.reserved_blocks
    groups = None
    if cfg.kv_groups:  # every group of a hybrid run judged by the group judge's plug-in
        from kvsim.sim.peers.judges.group_judge import GroupJudge
        groups = GroupJudge(cfg.kv_groups, usable, counter_check(engine), tag_states=engine == "sglang")
    tier = None
    if cfg.offload:  # the Host tier behind the engine, judged by the tier judge's plug-in
        from kvsim.sim.peers.judges.host_judge import HostTierJudge
        tier = HostTierJudge(cfg.offload["blocks"], cfg.num_blocks)
    act = Actionable(cfg.block_size, structure=structure_check(engine), exact_tables=not cfg.kv_groups,
                     unit="page" if engine == "sglang" else "block")
    return EngineJudge(cfg.block_size, cfg.num_blocks, events, reserved=spec.reserved_blocks,
                       same_step_hits=spec.same_step_hits, parse=_checker_parse(), probe_check=counter_check(engine),
                       policy=policy_checker(engine, usable) if groups is None and tier is None else None, act=act,
                       groups=groups, tier=tier)


def feed(out: EngineOutcome, msg: dict, line: int) -> str | None:
    """One driver message into the run's judge (``line``: its kvsim-peer/1 line); returns what ended the trial
    ("done", "crash", "bug", "error") or None."""
    judge = out.judge
    if "step" in msg:
        out.steps += 1
        out.engine_s += msg.get("engine_s", 0.0)
        out.probe_s += msg.get("probe_s", 0.0)
        out.step_costs_ms.append(msg.get("engine_s", 0.0) * 1e3)
        judge.step(msg, 0, at=line)
        return None
    if "hello" in msg:
        out.hello = msg["hello"]
    elif "stalled" in msg:
        out.stalled = list(msg["stalled"])
    elif "crash" in msg:
        judge.crashed(msg["crash"], line, msg)
        out.crash = msg["crash"]
        return "crash"
    elif "bug" in msg:
        out.bug = msg["bug"]
        return "bug"
    elif "error" in msg:
        out.error = msg["error"]
        return "error"
    elif "done" in msg:
        return "done"
    return None


class Session:
    """One driver process under the engine venv's ``python``, running trial after trial (``trial``): the engine
    is imported once, its scheduler or cache rebuilt for each trial. ``close`` ends it."""

    def __init__(self, engine: str, python: str, env: dict | None = None) -> None:
        spec = ENGINES[engine]
        self.engine = engine
        base = {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}
        base.update(dict(spec.env))
        base.update(env or {})
        base["PYTHONUNBUFFERED"] = "1"
        try:
            self.proc = subprocess.Popen([python, str(driver_path(engine))], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=base)
        except OSError as exc:
            raise EngineError(f"cannot start {python}: {exc.strerror or exc}") from None
        self.err_lines: list[bytes] = []
        self.errs = threading.Thread(target=self._drain, daemon=True)
        self.errs.start()
        self.trials = 0
        self.dead = False

    def _drain(self) -> None:
        for raw in self.proc.stderr or ():
            self.err_lines.append(raw)
            if len(self.err_lines) > 200:
                del self.err_lines[:100]

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.errs.join(timeout=5)

    def kill(self) -> None:
        self.proc.kill()
        self.dead = True

    def trial(self, requests: list[Request], cfg: EngineConfig, events: EventChecker, log: Any = None,
              run: dict | None = None, progress: Callable[[int, int], None] | None = None,
              wire: Any = None) -> EngineOutcome:
        """Drive ``requests`` once on a fresh scheduler and judge every step. ``log``: a ``peer_log.Writer`` (its
        stream may be None: the lines are still counted, findings name them); ``run``: the header's run facts;
        ``wire``: a binary stream the published KV-event batches are written to as a subscriber log (the
        engine's wire form, ``ts`` = the step), for ``kvsim events``."""
        from kvsim.sim.peers.peer_log import Writer
        if self.dead:
            raise EngineError(f"{self.engine} driver: its process is gone")
        spec = ENGINES[self.engine]
        log = log if log is not None else Writer(None)
        judge = make_judge(self.engine, cfg, events)
        out = EngineOutcome(judge, events)
        clock = time.perf_counter
        t_start = clock()
        config = wire_config(cfg)
        reqs = [wire_request(r) for r in requests]
        log.header(self.engine, config, {"reserved": spec.reserved_blocks, "same_step_hits": spec.same_step_hits},
                   run or {})
        t0 = clock()
        for r, w in zip(requests, reqs, strict=True):
            judge.submit(r.id, r.tokens)
            log.request(w)
        out.judge_s += clock() - t0
        enc = msgspec.json.Encoder()
        lines = [enc.encode(config) + b"\n"] + [enc.encode({"request": w}) + b"\n" for w in reqs] + [b'{"end":true}\n']
        stdin = self.proc.stdin
        feeder = threading.Thread(target=_feed, args=(stdin, lines), daemon=True)
        feeder.start()
        dec = msgspec.json.Decoder()
        finished = 0
        ended: str | None = None
        stdout = self.proc.stdout
        try:
            while stdout is not None:
                raw = stdout.readline()
                if not raw:
                    break
                t0 = clock()
                msg = dec.decode(raw)
                line = log.message(msg)
                if wire is not None:
                    for b in msg.get("batches", ()):
                        wire.write(enc.encode(b) + b"\n")
                t1 = clock()
                ended = feed(out, msg, line)
                t2 = clock()
                out.judge_s += t2 - t1
                out.observe_s += t1 - t0
                if "step" in msg:
                    finished += len(msg.get("finished", ()))
                    if progress:
                        progress(finished, len(requests))
                if ended is not None:
                    break
        except KeyboardInterrupt:  # SIGINT/SIGTERM: the steps judged so far are the report, marked partial
            out.interrupted = f"{out.steps:,} steps, {finished} of {len(requests)} requests finished"
            self.kill()
        except BaseException:  # kvsim's own bug while judging: stop the driver (it would block on a full pipe)
            self.kill()
            raise
        finally:
            feeder.join(timeout=5)
        self.trials += 1
        out.wall_s = clock() - t_start
        out.stderr_tail = b"".join(self.err_lines[-20:]).decode("utf-8", "replace")
        if out.interrupted:  # no end-of-run checks (leaks, unfinished requests): the run did not end
            return out
        if ended in (None, "bug", "error"):
            self.dead = True
            self.proc.wait()
        if out.bug is not None:
            bug = out.bug
            where = (bug.get("traceback") or ["?"])[-1]
            raise DriverBug(f"{self.engine} driver: {bug.get('type')}: {bug.get('message')} at {where} (step "
                            f"{bug.get('step')}, {bug.get('phase')}): kvsim's own driver failed")
        if ended is None or ended == "error":
            why = out.error or f"the driver exited {self.proc.returncode} without finishing"
            last = [ln for ln in out.stderr_tail.splitlines() if ln.strip()][-1:] or [""]
            raise EngineError(f"{self.engine} driver: {why}" + (f" ({last[0].strip()[:200]})" if not out.error else ""))
        t0 = clock()
        judge.finish()
        out.judge_s += clock() - t0
        return out


def run_engine(engine: str, python: str, requests: list[Request], cfg: EngineConfig, events: EventChecker,
               record: Any = None, progress: Callable[[int, int], None] | None = None,
               run: dict | None = None, wire: Any = None) -> EngineOutcome:
    """Start the driver under ``python``, judge every step of one run; ``progress(finished, total)`` after each
    step. ``record``: a path the run's kvsim-peer/1 log is written to; ``wire``: a path for its KV-event batches
    as a subscriber log."""
    from kvsim.sim.peers.peer_log import Writer
    with Session(engine, python) as session, contextlib.ExitStack() as files:
        log = files.enter_context(open(record, "wb")) if record is not None else None
        batches = files.enter_context(open(wire, "wb")) if wire is not None else None
        return session.trial(requests, cfg, events, Writer(log), run, progress, batches)


def config_of(c: dict) -> EngineConfig:
    """The EngineConfig a driver config object (``wire_config``, a kvsim-peer/1 header's ``config``) stands for;
    KeyError / TypeError / ValueError when it is malformed."""
    groups = None
    if c.get("kv_groups"):
        from kvsim.sim.peers.kv_groups import GroupSpec
        groups = [GroupSpec(str(g["kind"]), int(g["block_size"]), int(g.get("window") or 0)) for g in c["kv_groups"]]
    return EngineConfig(block_size=int(c["block_size"]), num_blocks=int(c["num_blocks"]),
                        max_num_seqs=int(c["max_num_seqs"]), max_num_batched_tokens=int(c["max_num_batched_tokens"]),
                        max_model_len=int(c["max_model_len"]), probe_every=int(c["probe_every"]),
                        clear_at_end=bool(c["clear_at_end"]), kv_groups=groups, offload=c.get("offload") or None)


def replay_log(head: dict, reqs: list[dict], messages: Any) -> EngineOutcome:
    """Re-judge a kvsim-peer/1 log without the engine: the same judge, fed the recorded messages."""
    import numpy as np
    engine = head["engine"]
    cfg = config_of(head["config"])
    events = checker_for(engine, cfg)
    judge = make_judge(engine, cfg, events)
    out = EngineOutcome(judge, events)
    for r in reqs:
        judge.submit(r["id"], np.asarray(r["tokens"], dtype=np.int64))
    ended = None
    for line, msg in messages:
        ended = feed(out, msg, line)
        if ended is not None:
            break
    if ended in ("done", "crash"):
        judge.finish()
    return out


def probe(python: str, engine: str, timeout: float = 60.0) -> str | None:
    """None when ``python`` runs and finds the engine's package (without importing it: that costs seconds);
    otherwise one line saying why not."""
    if not Path(python).exists():
        return f"{python} does not exist (build it with scripts/install-engine {engine} VENV)"
    code = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({engine!r}) is None)"
    try:
        r = subprocess.run([python, "-c", code], capture_output=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"cannot run {python}: {exc}"
    if r.returncode:
        return f"{python} has no {engine} package (scripts/install-engine {engine} VENV builds one)"
    return None
