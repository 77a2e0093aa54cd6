"""Judge machines: who judges the judge. The reference engine (`sim.fuzz.refengine`) runs random request
streams; a single fault is planted; the judge must report exactly that fault, at its place, with its rule,
and nothing on a clean stream.

* `judge-events` (`EventsJudgeMachine`): the engine's KV-event batches, with sequence numbers, go through
  `sim.peers.judges.events.EventChecker` (block size, hash scheme and, where the fault allows, capacity pinned).
  One stream fault of `sim.fuzz.event_faults` (or none, one example in four) is planted after the run: the
  findings must equal the fault's implied (rule, line) list, or agree with it up to its line where the
  fault has consequences.
* `judge-engine` (`EngineJudgeMachine`): the driver step messages go through `sim.peers.judges.engine_judge`'s
  EngineJudge (with its EventChecker). One engine bug of `refengine.ENGINE_FAULTS` fires at the first
  occasion from a drawn step: no finding before that step, the bug's rule at it (with `SAME_STEP`'s
  consequences at most), none at all when it never fired.

Hypothesis draws the pool (block size 1-4, 3-12 blocks), the hash scheme, the allocation mode, prompts over
a three-token vocabulary (so prefixes repeat), resubmissions of earlier requests' tokens (hits), steps and
ClearCache when idle. A failure is written to the campaign's found folder as the stream or the step log
(JSON lines) and names the rule: the one missed, or the one reported falsely.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from typing import NoReturn

from hypothesis import strategies as st
from hypothesis.control import current_build_context
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from kvsim.sim.files import write_atomic
from kvsim.sim.fuzz.event_faults import STREAM_FAULTS, UNCOUNTED, plant
from kvsim.sim.fuzz.harness import FuzzFailure
from kvsim.sim.fuzz.refengine import ENGINE_FAULTS, SCHEMES, RefEngine
from kvsim.sim.fuzz.stats import RUN

VOCAB = 3
MAX_STEPS = 400  # a run's drain is bounded (every request fits the pool: it always finishes)
# what an engine bug may also break in the step it fires: a same-step hit through the block an aliasing
# request overwrote; a child block stored in the same step under the block whose store was dropped (EV-5 when
# a ClearCache had dropped that hash before)
SAME_STEP = {"alias-block": {"PEER-7"}, "dropped-store": {"EV-3", "EV-5"}}


class _RefMachine(RuleBasedStateMachine):
    """Random request streams through the reference engine; the judging is the subclass's."""

    name = "judge"
    oracles: tuple = ()  # its coverage is its own rule counts (CampaignResult.rules), no oracle branches

    @staticmethod
    def catalogue_ids() -> list[str]:
        """No store catalogue rules: the campaign reports no store coverage or blind spots for it."""
        return []
    faults: tuple = ()

    def __init__(self) -> None:
        super().__init__()
        self.eng: RefEngine = None  # type: ignore[assignment]
        self.log: list = []  # ("submit", rid, tokens) | ("step", msg), in order
        self.reqs: list[list[int]] = []
        self.failed = False

    def count(self, label: str) -> None:
        RUN.rules[label] = RUN.rules.get(label, 0) + 1
        RUN.steps += 1

    @initialize(bs=st.integers(1, 4), blocks=st.integers(3, 12), scheme=st.sampled_from(SCHEMES),
                 lazy=st.booleans(), pick=st.integers(0, 1 << 16),
                 same_step=st.booleans(), data=st.data())
    def start(self, bs, blocks, scheme, lazy, pick, same_step, data) -> None:
        # about one example in five is clean; the others plant one fault, every kind about equally often
        clean = (None,) * max(1, len(self.faults) // 4)
        self.fault = data.draw(st.sampled_from(clean + self.faults))
        self.pick, self.same_step = pick, same_step
        self.cfg = {"block_size": bs, "num_blocks": blocks, "scheme": scheme, "lazy": lazy,
                    "fault": self.fault, "pick": pick, "same_step_hits": same_step}
        self.eng = self.engine(bs, blocks, scheme, lazy)
        RUN.examples += 1
        self.count(f"fault:{self.fault or 'none'}")

    def engine(self, bs: int, blocks: int, scheme: str, lazy: bool) -> RefEngine:
        return RefEngine(bs, blocks, scheme, lazy)

    def _submit(self, tokens: list[int], max_new: int) -> None:
        eng = self.eng
        room = (eng.num_blocks - 1) * eng.bs  # every request's lifetime fits the pool
        max_new = max(1, min(max_new, room - 1))
        tokens = tokens[:max(1, room + 1 - max_new)]
        rid = f"r{len(self.reqs)}"
        self.reqs.append(tokens)
        eng.submit(rid, tokens, max_new)
        self.log.append(("submit", rid, list(tokens)))

    @rule(prompt=st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=12), max_new=st.integers(1, 5))
    def submit(self, prompt, max_new) -> None:
        self.count("submit")
        self._submit(prompt, max_new)

    @precondition(lambda self: self.reqs)
    @rule(i=st.integers(0, 1 << 16), cut=st.integers(0, 16), extra=st.lists(st.integers(0, VOCAB - 1), max_size=4),
          max_new=st.integers(1, 5), aligned=st.booleans())
    def resubmit(self, i, cut, extra, max_new, aligned) -> None:
        """An earlier request's tokens so far (prompt and produced), cut and extended, or cut to a block
        boundary (a fully cached, block-aligned prompt): prefix hits."""
        self.count("resubmit")
        rid = f"r{i % len(self.reqs)}"
        r = self.eng.running.get(rid)
        tokens = list(r.tokens) if r is not None else list(self.reqs[i % len(self.reqs)])
        if aligned and len(tokens) >= self.eng.bs:
            self._submit(tokens[:len(tokens) - len(tokens) % self.eng.bs], max_new)
        else:
            self._submit(tokens[:max(1, len(tokens) - cut % 4)] + extra, max_new)

    @rule()
    def step(self) -> None:
        self.count("step")
        self.log.append(("step", self.eng.step()))

    @precondition(lambda self: self.eng is not None and self.eng.idle)
    @rule(now=st.integers(0, 3))
    def clear(self, now) -> None:
        if now:  # ClearCache now and then: most idle moments keep the cache
            return
        self.count("clear")
        self.log.append(("step", self.eng.clear()))

    def teardown(self) -> None:
        if self.eng is None or self.failed:
            return
        for _ in range(MAX_STEPS):
            if self.eng.idle:
                break
            self.log.append(("step", self.eng.step()))
        if self.eng.idle and (self.pick >> 3) % 2:  # half the runs end with ClearCache of what they cached
            self.log.append(("step", self.eng.clear()))
        self.judge()

    def judge(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    # -- failing ----------------------------------------------------------------------------------
    def fail(self, kind: str, rule: str, message: str, lines: list) -> NoReturn:
        self.failed = True
        text = f"{rule} ({kind}) {message} [{json.dumps(self.cfg, sort_keys=True)}]"
        try:
            final = current_build_context().is_final
        except Exception:  # noqa: BLE001 — outside a Hypothesis test (a direct call)
            final = True
        if final and RUN.found_dir is not None:
            data = "".join(json.dumps(x, sort_keys=True) + "\n" for x in lines).encode()
            path = RUN.found_dir / f"{self.name}-{hashlib.sha256(data).hexdigest()[:12]}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, data)
            RUN.last_failure = {"kind": kind, "message": text, "rule": rule, "reproduced": True, "trace": str(path),
                                "steps": len(self.log), "replay": message}
        raise FuzzFailure(text)


class EventsJudgeMachine(_RefMachine):
    name = "judge-events"
    faults = tuple(STREAM_FAULTS)

    def judge(self) -> None:
        from kvsim.sim.peers.judges.events import EventChecker, parse_batch
        clean = [(s, evs) for _tag, *rest in self.log if _tag == "step"
                 for s, evs in zip(rest[0]["seqs"], (b[1] for b in rest[0]["batches"]), strict=True)]
        scheme, usable = self.cfg["scheme"], self.cfg["num_blocks"] - 1
        want: list[tuple[str, int]]
        planted = None if self.fault is None else plant(clean, self.fault, self.pick, scheme)
        if planted is None:
            self.count(f"planted:{self.fault}-no-occasion" if self.fault else "planted:none")
            stream, want, also = clean, [], frozenset[str]()
        else:
            self.count(f"planted:{self.fault}")
            stream, want, also = planted
        ev = EventChecker(block_size=self.cfg["block_size"], hash_scheme=scheme,
                          capacity=None if self.fault in UNCOUNTED else usable)
        got = []
        for k, (seq, events) in enumerate(stream):
            ev.sequence(seq, k + 1)
            ev.batch(parse_batch({"seq": seq, "events": events})[0], k + 1)
            got += [(f.rule, f.line) for f in ev.drain()]
        ev.flush()
        got += [(f.rule, f.line) for f in ev.drain()]
        for rid in sorted({r for r, _ in want}):
            self.count(f"rule:{rid}")  # the judge rules a planted fault made the checker report
        lines = [{"seq": s, "events": e} for s, e in stream]
        start = min((ln for _r, ln in want), default=0)
        missed = Counter(want) - Counter(got)
        extra = Counter(x for x in Counter(got) - Counter(want) if x[0] not in also or x[1] < start)
        if not missed and not extra:
            return
        if missed:
            rule, line = sorted(missed)[0]
            self.fail("missed", rule, f"{self.fault}: expected {rule} at line {line}; the checker reported "
                      f"{sorted(got)[:6]}", lines)
        rule, line = sorted(extra, key=lambda x: (x[1], x[0]))[0]
        self.fail("false-alarm", rule, f"{self.fault or 'clean stream'}: {rule} at line {line} not implied "
                  f"by the stream (expected {sorted(want)})", lines)


class EngineJudgeMachine(_RefMachine):
    name = "judge-engine"
    faults = tuple(ENGINE_FAULTS)

    def engine(self, bs: int, blocks: int, scheme: str, lazy: bool) -> RefEngine:
        # the bug fires from a drawn early step; an alias of a slot not computed in its step (reserve mode only:
        # lazy tables have no such slot) is seen by the fresh-block check alone
        return RefEngine(bs, blocks, scheme, lazy, fault=self.fault, fault_step=self.pick % 8,
                         alias_later=not lazy and bool((self.pick >> 5) % 2))

    def judge(self) -> None:
        import numpy as np

        from kvsim.sim.peers.judges.engine_judge import EngineJudge
        from kvsim.sim.peers.judges.events import EventChecker, parse_batch
        bs, blocks = self.cfg["block_size"], self.cfg["num_blocks"]
        ev = EventChecker(block_size=bs, hash_scheme=self.cfg["scheme"], capacity=blocks - 1)
        j = EngineJudge(bs, blocks, ev, same_step_hits=self.same_step, parse=lambda b: parse_batch(b)[0])
        before = 0
        step_of_line: dict[int, int] = {}
        got: list[tuple[int, str]] = []
        for entry in self.log:
            if entry[0] == "submit":
                j.submit(entry[1], np.array(entry[2], dtype=np.int64))
                continue
            msg = entry[1]
            j.step(msg, before)
            for k in range(len(msg["batches"])):
                step_of_line[before + k + 1] = msg["step"]
            before += len(msg["batches"])
            got += [(step_of_line[f.line], f.rule) for f in ev.drain()]
        got += [(f.step, f.rule) for f in j.findings]
        got.sort()
        fired = self.eng.fired
        self.count(f"fired:{self.fault}" if fired else "fired:none")
        if fired:
            self.count(f"rule:{fired[0][0]}")  # the judge rules a planted bug made the judge report
        lines = [{"config": self.cfg}] + [{"submit": e[1], "tokens": e[2]} if e[0] == "submit" else e[1]
                                          for e in self.log]
        if not fired:
            if got:
                step, rule = got[0]
                self.fail("false-alarm", rule, f"{self.fault or 'clean run'}: {rule} at step {step} with no "
                          "engine bug planted", lines)
            return
        rule, at = fired[0]
        early = [x for x in got if x[0] < at]
        if early:
            self.fail("false-alarm", early[0][1], f"{self.fault}: {early[0][1]} at step {early[0][0]}, before "
                      f"the bug fired at step {at}", lines)
        there = {r for s, r in got if s == at}
        allowed = {rule} | SAME_STEP.get(self.fault, set())
        if rule not in there:
            self.fail("missed", rule, f"{self.fault}: expected {rule} at step {at}; the judge reported "
                      f"{got[:6]}", lines)
        if there - allowed:
            other = sorted(there - allowed)[0]
            self.fail("false-alarm", other, f"{self.fault}: {other} at step {at} beside {rule}", lines)
