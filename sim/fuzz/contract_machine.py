"""The `judge-contract` machine: TokenSpeed's cachetrace/1 contract judge (``sim.peers.cachetrace``) over plans a
reference scheduler (``sim.fuzz.ts_reference``, written from seed 002 alone) makes, with one scheduler bug planted
(``ts_faults``) or none.

Hypothesis draws the configuration -- prefix granularity P 2-4, the full group's block granularity (P or a divisor),
6-16 parents, a snapshot-state group or not, a Host tier and L3 or not, the plan's token budget, how far the
header's single-request bound sits below what the pool holds -- then prompts over a three-token vocabulary (so
prefixes repeat), resubmissions of earlier requests' tokens (hits, whole-page prompts) and plans; the run drains.
One fault of ``ts_reference.FAULTS`` whose configuration allows it (or none, one example in five) fires at its first
occasion from a drawn plan. The judge then reads the records as a file: on a clean run it must report nothing; on
a run whose bug fired, nothing before the bug's line, the bug's rule at that line (with ``SAME_LINE``'s rules at
most), and whatever after; a bug that found no occasion is a clean run. A failure is written to the campaign's
found folder as the cachetrace/1 file, which ``kvsim replay`` judges again.
"""

from __future__ import annotations

import hashlib
import io
import json
from typing import NoReturn

from hypothesis import strategies as st
from hypothesis.control import current_build_context
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from kvsim.sim.files import write_atomic
from kvsim.sim.fuzz.harness import FuzzFailure
from kvsim.sim.fuzz.stats import RUN, declare, reached
from kvsim.sim.fuzz.ts_faults import TABLE_FAULTS, FaultyTsRef
from kvsim.sim.fuzz.ts_reference import FAULTS, HOST_FAULTS, L3_FAULTS, SAME_LINE, STATE_FAULTS

VOCAB = 3
# the judge rules the machine makes the contract judge check (premise held on a clean run) and the bugs it plants
JUDGED = ("TS-TBL-1", "TS-POOL-4", "TS-PFX-1", "PEER-1", "PEER-2", "PEER-3", "PEER-4", "TS-ADM-3", "TS-ADM-4",
          "TS-POOL-5", "TS-ST-1", "TS-ST-2", "TS-ST-3", "TS-ST-4", "TS-ST-5", "TS-L2-12", "TS-L2-13", "TS-L2-14")
declare([f"contract:judged:{r}" for r in JUDGED] + [f"contract:fired:{f}" for f in FAULTS])
KINDS = ("plain", "plain", "state", "host", "host-state", "host-state")
SILENT = {"evict-before-empty"}  # a bug that changes the plans even where it shows nothing (judged even then)
NO_STATE = {"rewrite-cached", "hit-whole-prompt", "hit-same-plan"}


def applicable(fault: str, state: bool, host: bool, l3: bool, premise: bool) -> bool:
    """Whether a configuration can show ``fault`` at all."""
    if fault in STATE_FAULTS and not state or fault in HOST_FAULTS and not host or fault in L3_FAULTS and not l3:
        return False
    if fault == "evict-before-empty":
        return premise
    return not (fault in NO_STATE and state)


class ContractMachine(RuleBasedStateMachine):
    name = "judge-contract"
    oracles = ("contract",)  # branches: each judge rule checked on a clean run, each bug planted and fired

    @staticmethod
    def catalogue_ids() -> list[str]:
        return []

    def __init__(self) -> None:
        super().__init__()
        self.ref: FaultyTsRef = None  # type: ignore[assignment]
        self.reqs: list[list[int]] = []
        self.actions: list[tuple | None] = []  # submissions (rid, tokens, max_new) and plans (None), in order
        self.faults: list[str] = []
        self.failed = False

    def count(self, label: str) -> None:
        RUN.rules[label] = RUN.rules.get(label, 0) + 1
        RUN.steps += 1

    @initialize(p=st.sampled_from((2, 2, 3, 4)), pages=st.one_of(st.integers(6, 16), st.sampled_from((24, 32))),
                budget=st.integers(3, 12),
                slack=st.integers(0, 3), seed=st.integers(0, 1 << 16), at=st.integers(0, 4),
                kind=st.sampled_from(KINDS), l3=st.booleans(), fine=st.booleans())
    def start(self, p, pages, budget, slack, seed, at, kind, l3, fine) -> None:
        bg = p // 2 if fine and p % 2 == 0 else p
        state, host = "state" in kind, "host" in kind
        l3 = l3 and host
        self.cfg = {"p": p, "bg": bg, "pages": pages, "state": state, "host": host, "l3": l3, "budget": budget,
                    "slack": slack, "seed": seed, "at": at}
        self.ref = self.scheduler(None)
        premise = not state and not host and bg == p
        self.faults = [f for f in FAULTS if applicable(f, state, host, l3, premise)]
        RUN.examples += 1
        self.count(f"config:{kind}" + ("+l3" if l3 else ""))

    def scheduler(self, fault: str | None) -> FaultyTsRef:
        c = self.cfg
        return FaultyTsRef(c["p"], c["bg"], c["pages"], state=c["state"], host_pages=64 if c["host"] else 0,
                           l3=c["l3"], budget=c["budget"], slack=c["slack"], seed=c["seed"], fault=fault,
                           fault_plan=c["at"], vocab=VOCAB)

    def _submit(self, tokens: list[int], max_new: int) -> None:
        rid = f"r{len(self.reqs)}"
        self.reqs.append(tokens)
        self.actions.append((rid, list(tokens), max_new))
        self.ref.submit(rid, tokens, max_new)

    @rule(prompt=st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=14), max_new=st.integers(1, 6))
    def submit(self, prompt, max_new) -> None:
        self.count("submit")
        self._submit(prompt, max_new)

    @precondition(lambda self: self.reqs)
    @rule(i=st.integers(0, 1 << 16), cut=st.integers(0, 5), extra=st.lists(st.integers(0, VOCAB - 1), max_size=5),
          max_new=st.integers(1, 6), aligned=st.booleans())
    def resubmit(self, i, cut, extra, max_new, aligned) -> None:
        """An earlier request's tokens so far (prompt and produced), cut and extended, or cut to a page boundary."""
        self.count("resubmit")
        r = self.ref.running.get(f"r{i % len(self.reqs)}")
        tokens = list(r.tokens) if r is not None else list(self.reqs[i % len(self.reqs)])
        p = self.ref.p
        if aligned and len(tokens) >= p:
            self._submit(tokens[:len(tokens) - len(tokens) % p], max_new)
        else:
            self._submit(tokens[:max(1, len(tokens) - cut)] + extra, max_new)

    @rule(prompt=st.lists(st.integers(0, VOCAB - 1), min_size=2, max_size=10), max_new=st.integers(1, 4))
    def twins(self, prompt, max_new) -> None:
        """The same prompt twice in a row: both may be admitted in one plan (a hit on what the other computes)."""
        self.count("twins")
        self._submit(prompt, max_new)
        self._submit(list(prompt), max_new)

    @rule(delta=st.integers(-1, 1), max_new=st.integers(1, 4), i=st.integers(0, 1 << 16))
    def at_bound(self, delta, max_new, i) -> None:
        """A request whose prompt and output make exactly the header's single-request bound (or one token off)."""
        size = self.ref.bound + delta - max_new
        if size < 1:
            return
        self.count("at-bound")
        base = self.reqs[i % len(self.reqs)] if self.reqs else [0]
        self._submit([base[k % len(base)] for k in range(size)], max_new)

    @rule()
    def plan(self) -> None:
        self.count("plan")
        self.actions.append(None)
        self.ref.plan()

    def teardown(self) -> None:
        """The clean run, then the same submissions and plans once per bug the configuration can show."""
        if self.ref is None or self.failed:
            return
        self.run(self.ref)
        for fault in self.faults:
            ref = self.scheduler(fault)
            for act in self.actions:
                if ref.fired and ref.fired[0][1] > 0:  # what follows a bug's line is not judged: the run ends
                    break
                if act is None:
                    ref.plan()
                else:
                    ref.submit(*act)
            self.run(ref)

    def run(self, ref: FaultyTsRef) -> None:
        if not (ref.fired and ref.fired[0][1] > 0):  # (a plan's answer comes with it: nothing more to judge)
            ref.drain()
        if not ref.idle and not ref.fired:
            self.fail("reference", "STALL", ref.fault, "the reference scheduler stopped making progress (its own bug)",
                      _bytes(ref.records))
        if ref.fault is not None and not ref.fired and ref.fault not in SILENT:
            self.count(f"fault:{ref.fault}")
            return  # a bug with no occasion left the records as the clean run made them: judged there
        self.judge(ref)

    # -- judging ------------------------------------------------------------------------------------------------
    def judge(self, ref: FaultyTsRef) -> None:
        from kvsim.sim.peers.cachetrace.judge import judge_cachetrace
        from kvsim.sim.trace.cachetrace import CacheTraceInputError
        recs = ref.records
        data = _bytes(recs)
        fault = ref.fault
        self.count(f"fault:{fault or 'none'}")
        try:
            j = judge_cachetrace("judge-contract.jsonl", io.BytesIO(data))
        except CacheTraceInputError as exc:
            self.fail("reference", "INPUT", fault, f"the judge refused the reference's records: {exc}", data)
        got = sorted((f.line, f.rule) for f in j.contract.findings)
        got += sorted((f.line, f.rule) for f in j.events.findings)
        fired = ref.fired
        if fired:
            self.count(f"fired:{fault}")
            reached(f"contract:fired:{fault}")
        for rid, n in j.contract.exercised.items():
            if n and fault is None and rid in JUDGED:
                reached(f"contract:judged:{rid}")
        if not fired:
            if got:
                line, rid = got[0]
                self.fail("false-alarm", rid, fault, f"{rid} at line {line} with no scheduler bug planted", data)
            return
        rid, at = fired[0]
        if at < 0:
            at = len(recs)
        self.count(f"rule:{rid}")
        early = [x for x in got if x[0] < at]
        if early:
            self.fail("false-alarm", early[0][1], fault, f"{early[0][1]} at line {early[0][0]}, before the bug fired "
                      f"at line {at}", data)
        there = {r for ln, r in got if ln == at}
        if rid not in there:
            self.fail("missed", rid, fault, f"expected {rid} at line {at}; the judge reported {got[:6]}", data)
        allowed = {rid} | SAME_LINE.get(fault or "", set())
        if fault in TABLE_FAULTS:
            allowed |= {"TS-POOL-5", "TS-ADM-4"}
        if there - allowed:
            other = sorted(there - allowed)[0]
            self.fail("false-alarm", other, fault, f"{other} at line {at} beside {rid}", data)

    def fail(self, kind: str, rule: str, fault: str | None, message: str, data: bytes) -> NoReturn:
        self.failed = True
        text = f"{rule} ({kind}) {fault or 'clean run'}: {message} [{json.dumps(self.cfg, sort_keys=True)}]"
        try:
            final = current_build_context().is_final
        except Exception:  # noqa: BLE001 — outside a Hypothesis test (a direct call)
            final = True
        if final and RUN.found_dir is not None:
            path = RUN.found_dir / f"{self.name}-{hashlib.sha256(data).hexdigest()[:12]}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, data)
            RUN.last_failure = {"kind": kind, "message": text, "rule": rule, "reproduced": True,
                                "trace": str(path), "steps": data.count(b"\n"), "replay": message}
        raise FuzzFailure(text)


def _bytes(records: list[dict]) -> bytes:
    return b"".join(json.dumps(x, separators=(",", ":")).encode() + b"\n" for x in records)
