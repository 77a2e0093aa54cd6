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

__all__ = ["ENGINES", "EngineSpec", "EngineConfig", "EngineOutcome", "EngineError", "DriverBug", "driver_path",
           "engine_paths", "counter_check", "event_checker", "probe", "run_engine"]


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
    out = dict(module.PATHS)
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
    interrupted: str | None = None  # a signal stopped the run: what was judged ("N steps, M of K requests finished")


def driver_path(engine: str) -> Path:
    return Path(__file__).resolve().parent / ENGINES[engine].driver


def _feed(proc: subprocess.Popen, cfg: dict, requests: list[Request]) -> None:
    """Writer thread: the config, the rows as token ids, the end mark (a thread, so neither pipe blocks)."""
    enc = msgspec.json.Encoder()
    stdin = proc.stdin
    if stdin is None:  # Popen was given stdin=PIPE: never None
        return
    try:
        stdin.write(enc.encode(cfg) + b"\n")
        for r in requests:
            req = {"id": r.id, "tokens": r.tokens.tolist(), "max_new_tokens": r.max_new_tokens}
            if r.arrival_step:
                req["arrive"] = r.arrival_step  # submitted before this step (at once when the engine is idle)
            stdin.write(enc.encode({"request": req}) + b"\n")
        stdin.write(b'{"end":true}\n')
        stdin.close()
    except (BrokenPipeError, OSError):
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


def _checker_parse() -> Callable | None:
    """``sim.peers.judges.events``' own reader of a wire batch where it has one (it keeps fields such as group_idx)."""
    from kvsim.sim.peers.judges import events as pe
    parse = getattr(pe, "parse_batch", None)
    return None if parse is None else (lambda batch: parse(batch)[0])


def run_engine(engine: str, python: str, requests: list[Request], cfg: EngineConfig, events: EventChecker,
               record: str | None = None, progress: Callable[[int, int], None] | None = None) -> EngineOutcome:
    """Start the driver under ``python``, judge every step; ``progress(finished, total)`` after each step."""
    spec = ENGINES[engine]
    usable = cfg.num_blocks - spec.reserved_blocks
    groups = None
    if cfg.kv_groups:  # every group of a hybrid run judged by the group judge's plug-in
        from kvsim.sim.peers.judges.group_judge import GroupJudge
        groups = GroupJudge(cfg.kv_groups, usable, counter_check(engine))
    tier = None
    if cfg.offload:  # the Host tier behind the engine, judged by the tier judge's plug-in
        from kvsim.sim.peers.judges.host_judge import HostTierJudge
        tier = HostTierJudge(cfg.offload["blocks"], cfg.num_blocks)
    judge = EngineJudge(cfg.block_size, cfg.num_blocks, events, reserved=spec.reserved_blocks,
                        same_step_hits=spec.same_step_hits, parse=_checker_parse(), probe_check=counter_check(engine),
                        policy=policy_checker(engine, usable) if groups is None and tier is None else None,
                        groups=groups, tier=tier)
    out = EngineOutcome(judge, events)
    clock = time.perf_counter
    t_start = clock()
    t0 = clock()
    for r in requests:
        judge.submit(r.id, r.tokens)
    out.judge_s += clock() - t0
    env = {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}
    env.update(dict(spec.env))
    env["PYTHONUNBUFFERED"] = "1"
    wire: dict[str, Any] = {
        "block_size": cfg.block_size, "num_blocks": cfg.num_blocks, "max_num_seqs": cfg.max_num_seqs,
        "max_num_batched_tokens": cfg.max_num_batched_tokens, "max_model_len": cfg.max_model_len,
        "vocab": VOCAB, "probe_every": cfg.probe_every or max(1, cfg.num_blocks // 1024),
        "clear_at_end": cfg.clear_at_end}
    if cfg.kv_groups:
        wire["kv_groups"] = [g.as_wire() for g in cfg.kv_groups]
    if cfg.offload:
        wire["offload"] = cfg.offload
    try:
        proc = subprocess.Popen([python, str(driver_path(engine))], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env)
    except OSError as exc:
        raise EngineError(f"cannot start {python}: {exc.strerror or exc}") from None
    err_lines: list[bytes] = []

    def drain_stderr() -> None:
        for raw in proc.stderr or ():
            err_lines.append(raw)
            if len(err_lines) > 200:
                del err_lines[:100]
    feeder = threading.Thread(target=_feed, args=(proc, wire, requests), daemon=True)
    errs = threading.Thread(target=drain_stderr, daemon=True)
    feeder.start()
    errs.start()
    dec = msgspec.json.Decoder()
    enc = msgspec.json.Encoder()
    log = open(record, "wb") if record else None
    finished = 0
    error: str | None = None
    bug: dict | None = None
    done = False
    line = 0
    try:
        for raw in proc.stdout or ():
            t0 = clock()
            msg = dec.decode(raw)
            if "step" in msg:
                out.steps += 1
                out.engine_s += msg["engine_s"]
                out.probe_s += msg.get("probe_s", 0.0)
                out.step_costs_ms.append(msg["engine_s"] * 1e3)
                if log:
                    for b in msg["batches"]:
                        log.write(enc.encode(b) + b"\n")
                t1 = clock()
                judge.step(msg, line)
                line += len(msg["batches"])
                t2 = clock()
                out.judge_s += t2 - t1
                out.observe_s += t1 - t0
                finished += len(msg.get("finished", ()))
                if progress:
                    progress(finished, len(requests))
            elif "hello" in msg:
                out.hello = msg["hello"]
            elif "stalled" in msg:
                out.stalled = list(msg["stalled"])
            elif "crash" in msg:
                t0 = clock()
                judge.crashed(msg["crash"], line)
                out.judge_s += clock() - t0
                out.crash = msg["crash"]
                done = True
            elif "bug" in msg:
                bug = msg["bug"]
            elif "error" in msg:
                error = msg["error"]
            elif "done" in msg:
                done = True
    except KeyboardInterrupt:  # SIGINT/SIGTERM: the steps judged so far are the report, marked partial
        out.interrupted = f"{out.steps:,} steps, {finished} of {len(requests)} requests finished"
        proc.kill()
    except BaseException:  # kvsim's own bug while judging: stop the driver (it would block on a full pipe)
        proc.kill()
        raise
    finally:
        if log:
            log.close()
        proc.wait()
        errs.join(timeout=5)
        feeder.join(timeout=5)
    out.wall_s = clock() - t_start
    out.stderr_tail = b"".join(err_lines[-20:]).decode("utf-8", "replace")
    if out.interrupted:  # no end-of-run checks (leaks, unfinished requests): the run did not end
        return out
    if bug is not None:
        where = (bug.get("traceback") or ["?"])[-1]
        raise DriverBug(f"{engine} driver: {bug.get('type')}: {bug.get('message')} at {where} (step "
                        f"{bug.get('step')}, {bug.get('phase')}): kvsim's own driver failed")
    if error is not None or (not done and not out.stalled):
        why = error or f"the driver exited {proc.returncode} without finishing"
        last = [ln for ln in out.stderr_tail.splitlines() if ln.strip()][-1:] or [""]
        raise EngineError(f"{engine} driver: {why}" + (f" ({last[0].strip()[:200]})" if not error else ""))
    t0 = clock()
    judge.finish()
    out.judge_s += clock() - t0
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
