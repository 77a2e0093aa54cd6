"""The `judge-policy` machine: the engines' eviction-policy checkers (PEER-12 vLLM's free queue, PEER-13 SGLang's LRU
over unlocked leaves) and their deep counters (PEER-9, ``sim.peers.vllm.counters`` / ``sim.peers.sglang.counters``)
through the engine judge, against reference engines that keep those structures: ``ref_queue.VllmQueueRef`` (the
reference engine over vLLM's ``FreeKVCacheBlockQueue``) and ``ref_radix.RadixRef`` (SGLang's radix tree).

Hypothesis draws the engine, the pool (block size 1-4; 4-12 blocks for vLLM, 6-16 pages for SGLang), prompts over a
three-token vocabulary, resubmissions of earlier prompts (hits), steps and (vLLM, idle) ClearCache. The same
submissions and steps are then replayed once clean and once per bug of that engine (``POLICY_FAULTS``,
``RADIX_FAULTS``: out-of-order eviction, eviction before an empty block, a release head first, a touched block left
in the queue, counter drift, an MRU or locked eviction, a lock count or leaf set gone stale), each firing at its
first occasion and stopping the run: on the clean run the judge reports nothing; on a faulty one nothing before the
bug's step, its rule at that step (``SAME_STEP``'s at most).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, NoReturn

import numpy as np
from hypothesis import strategies as st
from hypothesis.control import current_build_context
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from kvsim.sim.files import write_atomic
from kvsim.sim.fuzz.harness import FuzzFailure
from kvsim.sim.fuzz.ref_queue import POLICY_FAULTS, VllmQueueRef
from kvsim.sim.fuzz.ref_queue import SAME_STEP as QUEUE_SAME_STEP
from kvsim.sim.fuzz.ref_radix import RADIX_FAULTS, SAME_STEP, RadixRef
from kvsim.sim.fuzz.stats import RUN, declare, reached

VOCAB = 3
MAX_STEPS = 300
declare([f"policy:judged:{e}:{r}" for e, rules in (("vllm", ("PEER-12", "PEER-9")), ("sglang", ("PEER-13", "PEER-9")))
         for r in rules] + [f"policy:fired:{f}" for f in (*POLICY_FAULTS, *RADIX_FAULTS)])


class PolicyMachine(RuleBasedStateMachine):
    name = "judge-policy"
    oracles = ("policy",)  # branches: each checker judged on a clean run, each bug planted and fired

    @staticmethod
    def catalogue_ids() -> list[str]:
        return []

    def __init__(self) -> None:
        super().__init__()
        self.engine = ""
        self.actions: list[tuple] = []
        self.prompts: list[list[int]] = []
        self.failed = False

    def count(self, label: str) -> None:
        RUN.rules[label] = RUN.rules.get(label, 0) + 1
        RUN.steps += 1

    @initialize(engine=st.sampled_from(("vllm", "sglang")), bs=st.integers(1, 4), blocks=st.integers(4, 16),
                lazy=st.booleans(), at=st.integers(0, 4))
    def start(self, engine, bs, blocks, lazy, at) -> None:
        self.engine, self.bs, self.blocks, self.lazy, self.at = engine, bs, blocks, lazy, at
        self.cfg = {"engine": engine, "block_size": bs, "blocks": blocks, "lazy": lazy, "at": at}
        RUN.examples += 1
        self.count(f"engine:{engine}")

    @rule(prompt=st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=14), n=st.integers(1, 5))
    def submit(self, prompt, n) -> None:
        self.count("submit")
        self.prompts.append(prompt)
        self.actions.append(("submit", f"r{len(self.prompts) - 1}", list(prompt), n))

    @precondition(lambda self: self.prompts)
    @rule(i=st.integers(0, 1 << 16), cut=st.integers(0, 4), extra=st.lists(st.integers(0, VOCAB - 1), max_size=4),
          n=st.integers(1, 5))
    def resubmit(self, i, cut, extra, n) -> None:
        self.count("resubmit")
        base = self.prompts[i % len(self.prompts)]
        self.prompts.append(base[:max(1, len(base) - cut)] + extra)
        self.actions.append(("submit", f"r{len(self.prompts) - 1}", list(self.prompts[-1]), n))

    @rule()
    def step(self) -> None:
        self.count("step")
        self.actions.append(("step",))

    @rule()
    def clear(self) -> None:
        self.actions.append(("clear",))

    # -- replays ---------------------------------------------------------------------------------------------------
    def teardown(self) -> None:
        if not self.engine or self.failed:
            return
        faults = POLICY_FAULTS if self.engine == "vllm" else RADIX_FAULTS
        for fault in (None, *faults):
            self.replay(fault)

    def build(self, fault: str | None) -> Any:
        if self.engine == "vllm":
            return VllmQueueRef(self.bs, self.blocks, self.lazy, fault=fault, fault_step=self.at)
        return RadixRef(self.bs, self.blocks, fault=fault, fault_step=self.at)

    def replay(self, fault: str | None) -> None:
        from kvsim.sim.peers.judges.engine_judge import EngineJudge
        from kvsim.sim.peers.judges.events import EventChecker, parse_batch
        eng = self.build(fault)
        bs, blocks = self.bs, self.blocks
        vllm = self.engine == "vllm"
        if vllm:
            from kvsim.sim.peers.vllm import counters, policy
            ev = EventChecker(block_size=bs, hash_scheme="fnv1a64", capacity=blocks - 1, duplicate_copies=True)
        else:
            from kvsim.sim.peers.sglang import counters, policy  # type: ignore[no-redef]
            ev = EventChecker(block_size=bs, capacity=blocks - 1)
        j = EngineJudge(bs, blocks, ev, same_step_hits=vllm, parse=lambda b: parse_batch(b)[0],
                        policy=policy.checker(blocks - 1), probe_check=counters.check)
        log: list = [{"config": self.cfg, "fault": fault}]
        before = 0
        got: list[tuple[int, str]] = []
        step_of_line: dict[int, int] = {}
        room = (blocks - 1) * bs

        def feed(msg: dict) -> None:
            nonlocal before
            log.append(msg)
            j.step(msg, before)
            for k in range(len(msg["batches"])):
                step_of_line[before + k + 1] = msg["step"]
            before += len(msg["batches"])
            got.extend((step_of_line[f.line], f.rule) for f in ev.drain())

        for act in self.actions:
            if eng.fired:
                break
            if act[0] == "submit":
                _s, rid, prompt, n = act
                if vllm:  # every request's lifetime fits the pool: it always finishes
                    n = max(1, min(n, room - 1))
                    prompt = prompt[:max(1, room + 1 - n)]
                    j.submit(rid, np.array(prompt, dtype=np.int64))
                else:
                    prompt = prompt[:room]
                eng.submit(rid, prompt, n)
                log.append({"submit": rid, "tokens": prompt, "n": n})
            elif act[0] == "step":
                feed(eng.step())
            elif vllm and eng.idle:
                feed(eng.clear())
        for _ in range(MAX_STEPS):  # drain
            if eng.fired or eng.idle:
                break
            feed(eng.step())
        got += [(f.step, f.rule) for f in j.findings]
        got.sort()
        if fault is None:  # what the clean run made the judge check
            for rid in ("PEER-9", "PEER-12", "PEER-13"):
                if j.premise.get(rid):
                    reached(f"policy:judged:{self.engine}:{rid}")
        self.count(f"fault:{fault or 'none'}")
        self.judge(fault, eng.fired, got, log)

    def judge(self, fault: str | None, fired: list, got: list, log: list) -> None:
        if not fired:
            if got:
                step, rid = got[0]
                self.fail("false-alarm", rid, fault, f"{rid} at step {step} with no bug planted", log)
            return
        self.count(f"fired:{fault}")
        reached(f"policy:fired:{fault}")
        rid, at = fired[0]
        self.count(f"rule:{rid}")
        early = [x for x in got if x[0] < at]
        if early:
            self.fail("false-alarm", early[0][1], fault, f"{early[0][1]} at step {early[0][0]}, before the bug fired "
                      f"at step {at}", log)
        there = {r for s, r in got if s == at}
        if rid not in there:
            self.fail("missed", rid, fault, f"expected {rid} at step {at}; the judge reported {got[:6]}", log)
        extra = there - {rid} - SAME_STEP.get(fault or "", set()) - QUEUE_SAME_STEP.get(fault or "", set())
        if extra:
            self.fail("false-alarm", sorted(extra)[0], fault, f"{sorted(extra)[0]} at step {at} beside {rid}", log)

    def fail(self, kind: str, rule: str, fault: str | None, message: str, log: list) -> NoReturn:
        self.failed = True
        text = f"{rule} ({kind}) {fault or 'clean run'}: {message} [{json.dumps(self.cfg, sort_keys=True)}]"
        try:
            final = current_build_context().is_final
        except Exception:  # noqa: BLE001 — outside a Hypothesis test (a direct call)
            final = True
        if final and RUN.found_dir is not None:
            data = "".join(json.dumps(x, sort_keys=True, default=str) + "\n" for x in log).encode()
            path = RUN.found_dir / f"{self.name}-{hashlib.sha256(data).hexdigest()[:12]}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, data)
            RUN.last_failure = {"kind": kind, "message": text, "rule": rule, "reproduced": True,
                                "trace": str(path), "steps": len(log), "replay": message}
        raise FuzzFailure(text)
