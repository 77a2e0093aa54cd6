"""The `simulate` fuzz machine: small random workloads served by `kvsim simulate`'s engine and by an independent
reference of its policy (`sim.fuzz.sim_reference`, written from the README alone), which must agree exactly.

Per request, in the order they happen, both report the facts the README's scheduler defines:

* ``("admit", rid, iteration, matched pages, free pages)``: admitted (FIFO) at that iteration, reusing that many
  full pages (at most floor((prompt − 1)/64)), with that many pages free once its prefill holds its
  reservation (prompt + output, less the reused pages);
* ``("reject", rid, reason)``: empty, longer than max_context, or more pages than the store has;
* ``("retain", rid, iteration, free pages, how)``: the prefill done, its prompt retained, the decode
  continuation activated by Fork or Move ("none": no output), and the pages free afterwards;
* ``("served", rid, iteration)``: the decode done.

The engine's side is read from its run (the admission's activation, the lanes, the pool's available pages),
never recomputed; the reference computes its own. Pages free after every admission and retention compare
the two accountings (shared prefixes, copy-on-write tails, released checkpoints) and the iterations compare
the admission order and its timing, so a different reservation, match or eviction choice shows as the first
differing fact. Every step of the engine is also judged by the store model with every rule of the catalogue
(`kvsim simulate` replays its events as `kvsim replay` does): a violation fails the run too.

A failing run is written as a Mooncake workload `<found>/simulate-<hash>.jsonl`; the failure's `command`
(`kvsim simulate FILE --pages ... --concurrency ... --max-context ... --prefill-chunk ...`) serves it again,
its `replay` names the first differing fact, the broken rule ("violation") or the crash ("crash", INTERNAL).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st
from hypothesis.control import current_build_context
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from kvsim.sim.files import write_atomic
from kvsim.sim.fuzz.sim_reference import ReferenceScheduler
from kvsim.sim.fuzz.stats import RUN

P = 64
BLOCK = 512
MAX_REQUESTS = 14


@dataclass(frozen=True)
class Setup:
    """The simulated engine: capacity in pages, execution rows, S, prefill chunk, admission policy."""
    pages: int
    concurrency: int
    max_context: int
    chunk: int
    admission: str = "evict"

    def flags(self) -> str:
        return (f"--pages {self.pages} --concurrency {self.concurrency} --max-context {self.max_context} "
                f"--prefill-chunk {self.chunk} --admission {self.admission} --layers 1 --kv-heads 2")


def engine_facts(rows: list, setup: Setup, audit_every: int | None = 64) -> tuple[list, dict, list]:
    """Serve `rows` (arrival s, prompt, output, block ids) with `kvsim simulate`'s engine: (facts, stats, the
    violations the store model reported). Every rule runs after every event, and the full audit every
    `audit_every` events (None: the engine's default period)."""
    from kvsim.sim.simulate.engine import SimConfig, Simulation
    from kvsim.sim.workloads.request import Request

    cfg = SimConfig(max_context=setup.max_context, concurrency=setup.concurrency, pages=setup.pages,
                    prefill_chunk=setup.chunk, admission=setup.admission, layers=1, kv_heads=2)
    sim = Simulation(cfg, source="kvsim fuzz --machine simulate", audit_every=audit_every)
    facts: list = []
    admit, reject, done, emit = sim._admit, sim._reject, sim._prefill_done, sim._emit

    def on_admit(r, keys):
        ok = admit(r, keys)
        pf = sim.prefill
        if ok and pf is not None and pf.rid == r.rid:
            facts.append(("admit", r.rid, sim.units, pf.frontier // P, sim.pool.available))
        return ok

    def on_reject(r, output, why, kind):
        facts.append(("reject", r.rid, kind))
        return reject(r, output, why, kind)

    def on_done(pf):
        done(pf)
        how = "none" if pf.output == 0 else "fork" if f"k{pf.rid}" in sim.ckpts else "move"
        facts.append(("retain", pf.rid, sim.units, sim.pool.available, how))

    def on_emit(ev):
        emit(ev)
        if ev.__class__.__name__ == "Finish" and ev.seq.startswith("d"):
            facts.append(("served", int(ev.seq[1:]), sim.units))

    sim._admit, sim._reject, sim._prefill_done, sim._emit = on_admit, on_reject, on_done, on_emit  # type: ignore[method-assign]
    reqs = [Request(i, a, n, o, tuple(b)) for i, (a, n, o, b) in enumerate(rows)]
    result = sim.run(reqs)
    RUN.coverage.merge(sim.st.cov)
    trace: Any = result.trace  # sim.replay.TraceResult
    return facts, result.stats, trace.violations


def reference_facts(rows: list, setup: Setup) -> tuple[list, dict]:
    ref = ReferenceScheduler(setup.pages, setup.concurrency, setup.max_context, setup.chunk,
                             admission=setup.admission)
    out = ref.run(rows)
    return out["facts"], out["stats"]


STAT_KEYS = ("requests", "rejected", "prompt_tokens", "reused_tokens", "iterations", "checkpoints_evicted",
             "checkpoints_left")


def compare(rows: list, setup: Setup, audit_every: int | None = 64) -> str | None:
    """The first disagreement between the engine and the reference (or a rule the engine broke), else None."""
    got, stats, violations = engine_facts(rows, setup, audit_every)
    if violations:
        v = violations[0]
        return f"store rule {v['rule']} at event {v['event']} ({v['op']}): {v['message']}"
    want, ref_stats = reference_facts(rows, setup)
    for i, (g, w) in enumerate(zip(got, want)):
        if g != w:
            return f"fact {i}: engine {g}, reference {w}"
    if len(got) != len(want):
        i = min(len(got), len(want))
        extra = got[i] if len(got) > i else want[i]
        return f"fact {i}: {'engine' if len(got) > i else 'reference'} only: {extra}"
    for k in STAT_KEYS:
        if stats[k] != ref_stats[k]:
            return f"stats {k}: engine {stats[k]}, reference {ref_stats[k]}"
    return None


def write_workload(rows: list, setup: Setup, found_dir) -> str:
    """The failing workload as Mooncake JSONL (timestamps in ms), named by its content."""
    lines = [json.dumps({"timestamp": round(a * 1000.0), "input_length": n, "output_length": o,
                         "hash_ids": list(b)}) + "\n" for a, n, o, b in rows]
    data = "".join(lines).encode()
    digest = hashlib.sha256(data + setup.flags().encode()).hexdigest()[:12]
    path = found_dir / f"simulate-{digest}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, data)
    return str(path)


class SimulationFailure(AssertionError):
    """The engine and the reference disagree, or the engine broke a store rule."""


class SimulateMachine(RuleBasedStateMachine):
    """Requests arrive one rule at a time (a fresh prefix, a prefix shared with an earlier request, a repeat of
    one, an oversized or empty prompt); at the end the workload is served by both sides and compared."""

    name = "simulate"
    oracles: tuple = ()  # its oracle is the reference scheduler, compared whole per run: no branch counters

    def __init__(self) -> None:
        super().__init__()
        self.setup: Setup | None = None
        self.rows: list = []
        self.clock = 0  # milliseconds
        self.next_id = 0

    @initialize(data=st.data())
    def start(self, data) -> None:
        concurrency = data.draw(st.integers(2, 4), label="concurrency")
        max_context = data.draw(st.sampled_from([256, 512, 1024]), label="max_context")
        rows = max_context // P  # the store's capacity lies in [L, C·L] (CAP-1)
        pages = data.draw(st.integers(rows, concurrency * rows), label="pages")
        chunk = data.draw(st.sampled_from([128, 256, 8192]), label="chunk")  # a multiple of 128 (ENT-3)
        admission = data.draw(st.sampled_from(["evict", "wait"]), label="admission")
        self.setup = Setup(pages, concurrency, max_context, chunk, admission)
        RUN.examples += 1

    def count(self, label: str) -> None:
        RUN.rules[label] = RUN.rules.get(label, 0) + 1
        RUN.steps += 1

    def _blocks(self, n: int, data) -> list:
        need = -(-n // BLOCK)
        mode = data.draw(st.integers(0, 3), label="prefix")
        base: list = []
        if mode and self.rows:
            base = list(data.draw(st.sampled_from(self.rows), label="shared")[3])
            if mode == 1:  # share part of it
                base = base[:data.draw(st.integers(0, len(base)), label="shared blocks")]
        out = base[:need]
        while len(out) < need:
            self.next_id += 1
            out.append(self.next_id)
        return out

    @precondition(lambda self: self.setup is not None)
    @rule(data=st.data())
    def arrive(self, data) -> None:
        setup = self.setup
        if setup is None:
            raise RuntimeError("the machine's setup rule has not run")
        if len(self.rows) >= MAX_REQUESTS:  # small workloads: each step serves the whole workload again
            return
        kind = data.draw(st.integers(0, 15), label="kind")
        if kind < 10:
            n = data.draw(st.integers(1, setup.max_context), label="prompt")
        elif kind < 14:  # whole pages: where the (n - 1) // P cap bites
            n = P * data.draw(st.integers(1, setup.max_context // P), label="pages")
        elif kind == 14:
            n = 0
        else:
            n = setup.max_context + data.draw(st.integers(1, 64), label="beyond")
        o = data.draw(st.integers(0, 24), label="output")
        self.clock += data.draw(st.sampled_from([0, 0, 4, 10, 30, 100]), label="gap ms")  # Mooncake: whole ms
        self.rows.append((self.clock / 1000.0, n, o, self._blocks(n, data) if n > 0 else []))
        self.count("simulate:arrive" if 0 < n <= setup.max_context else "simulate:arrive-rejected")

    def teardown(self) -> None:
        """Serve the whole workload on both sides once (the engine checks every store rule at every event)."""
        if self.setup is None or not self.rows:
            return
        try:
            why = compare(self.rows, self.setup)
        except Exception as exc:  # noqa: BLE001 — a crash inside the engine (or the reference): fail replayably
            why = f"crash {type(exc).__name__}: {exc}"
        if why is not None:
            self.fail(why)

    def fail(self, why: str):
        setup = self.setup
        if setup is None:
            raise RuntimeError("the machine's setup rule has not run")
        text = f"{why} ({len(self.rows)} requests; {setup.flags()})"
        final = True
        try:
            final = current_build_context().is_final
        except Exception:  # noqa: BLE001 — outside a Hypothesis test (a direct call)
            final = True
        if final and RUN.found_dir is not None:
            path = write_workload(self.rows, setup, RUN.found_dir)
            store, crash = why.startswith("store rule "), why.startswith("crash ")
            rule = why.split()[2] if store else "INTERNAL" if crash else "ORACLE-reference"
            command = f"kvsim simulate {path} {setup.flags()}"
            kind = "violation" if store else "crash" if crash else "reference"
            RUN.last_failure = {"kind": kind, "rule": rule, "message": text,
                                "reproduced": store, "trace": path, "steps": len(self.rows),
                                "replay": why, "command": command}
            text = f"{rule} — workload {path}: {text}"
        raise SimulationFailure(text)
