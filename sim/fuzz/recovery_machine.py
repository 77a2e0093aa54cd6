"""The `recovery` machine: several independent root causes in one legal trace, each reported once, every
consequence blamed on the earliest finding that desynchronized its entity, root-cause ids stable when
unrelated events move.

A legal background (`sim.trace.generate`, its observations dropped, the concurrency raised so the causes fit)
is merged with 1-4 root-cause episodes (`CAUSES`), each on ids of its own, and with joint events that name
the desynchronized sequences of two causes (a batch over both rows, then its completion). Each episode has
exactly one bad event, which replay cannot apply (the contract forbids it and the engine's claim fixes no
state), then events that only fail because it was not applied (TRACE-2 / CKPT-2 of spec/rules: a stale
sequence, unit or checkpoint). Per sim/recovery.py, replay with error recovery must then report:

* exactly one violation group per bad event, with the cause's rule, and none anywhere else;
* every listed consequence (the first per finding and entity) ``of`` the earliest cause among those whose
  entities its event names (a joint event: the cause whose bad event came first);
* for two merges that keep the bad events' order but interleave everything else differently: the same
  root-cause ids for the same causes, the same consequence count.

A difference fails the run and writes the merge that shows it as a kvtrace/1 counterexample.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from hypothesis import strategies as st
from hypothesis.control import current_build_context
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from kvsim.sim.files import write_atomic
from kvsim.sim.fuzz.harness import FuzzFailure
from kvsim.sim.fuzz.stats import RUN

EXTRA_CONCURRENCY = 12  # room for the causes' sequences and checkpoints beside the background's
MAX_CAUSES = 4


@dataclass
class Ev:
    obj: dict
    stream: str            # the background, a cause's name, or a joint event's
    causes: tuple = ()     # the causes whose desynchronized entities it names (a consequence when non-empty)
    bad: bool = False      # the cause's one root-cause event
    gate: bool = False     # from here on the cause's sequences are out of step (joint events wait for it)
    wait: str = ""         # a stream that must have ended before this event (an id used again after its end)


@dataclass
class Cause:
    name: str
    kind: str
    rule: str
    events: list = field(default_factory=list)
    desynced: list = field(default_factory=list)  # sequences the bad event leaves out of step
    base: str = ""         # an id reuse: the cause whose ids it uses again, after that cause's events
    taken: bool = False    # its ids are used again (then no joint batch names its sequences)
    joined: bool = False   # a joint batch names its sequences (then its ids are not used again)


def _life(s: str, u: str, n: int, retain: str | None = None) -> list[dict]:
    """A legal request: activated, prefilled n tokens in one unit, finished (retained as `retain`)."""
    fin: dict = {"op": "finish", "seq": s}
    if retain:
        fin["retain"] = retain
    return [{"op": "activate", "seq": s, "prompt": n, "budget": 64},
            {"op": "map", "seq": s, "pool": "main", "tokens": n},
            {"op": "launch", "unit": u, "rows": [{"seq": s, "pool": "main", "write": [0, n]}]},
            {"op": "complete", "unit": u, "commit": [{"seq": s, "pool": "main", "frontier": n}]}, fin]


def _tail(x: str, u: str, at: int) -> list[dict]:
    """What an engine does next with a sequence it believes live: one decode unit, then finish."""
    return [{"op": "launch", "unit": u, "rows": [{"seq": x, "pool": "main", "write": [at, at + 1]}]},
            {"op": "complete", "unit": u, "commit": [{"seq": x, "pool": "main", "frontier": at + 1}]},
            {"op": "finish", "seq": x}]


def lost_activation(c: Cause) -> None:
    """The engine's trace lost a sequence's activation: its first map names a sequence never activated."""
    x = f"{c.name}x"
    c.events = [Ev({"op": "map", "seq": x, "pool": "main", "tokens": 64}, c.name, bad=True, gate=True)]
    c.events += [Ev(e, c.name, (c.name,)) for e in
                 [{"op": "map", "seq": x, "pool": "main", "tokens": 128}] + _tail(x, f"{c.name}u", 64)]
    c.desynced = [x]


def activation_from_released(c: Cause) -> None:
    """A prefix index still lists a released checkpoint and activates a request from it."""
    p, k, x = f"{c.name}p", f"{c.name}k", f"{c.name}x"
    c.events = [Ev(e, c.name) for e in _life(p, f"{c.name}v", 128, retain=k) + [{"op": "release", "ckpt": k}]]
    c.events.append(Ev({"op": "activate", "seq": x, "prompt": 128, "budget": 64, "from": k}, c.name, bad=True,
                       gate=True))
    c.events += [Ev(e, c.name, (c.name,)) for e in _tail(x, f"{c.name}u", 128)]
    c.desynced = [x]


def double_release(c: Cause) -> None:
    """A retained checkpoint released twice; a request is then activated from it (and runs)."""
    p, k, y = f"{c.name}p", f"{c.name}k", f"{c.name}y"
    c.events = [Ev(e, c.name) for e in _life(p, f"{c.name}v", 128, retain=k) + [{"op": "release", "ckpt": k}]]
    c.events.append(Ev({"op": "release", "ckpt": k}, c.name, bad=True))
    c.events.append(Ev({"op": "activate", "seq": y, "prompt": 128, "budget": 64, "from": k}, c.name, (c.name,),
                       gate=True))
    c.events += [Ev(e, c.name, (c.name,)) for e in _tail(y, f"{c.name}u", 128)]
    c.desynced = [y]


def unit_never_launched(c: Cause) -> None:
    """A completion of a unit the trace never launched, on a live request that then goes on legally."""
    s = f"{c.name}s"
    life = _life(s, f"{c.name}v", 64)
    c.events = [Ev(e, c.name) for e in life[:2]]
    c.events.append(Ev({"op": "complete", "unit": f"{c.name}ghost",
                        "commit": [{"seq": s, "pool": "main", "frontier": 64}]}, c.name, bad=True))
    c.events += [Ev(e, c.name) for e in life[2:]]


# per kind of cause: the ids its events use that an episode may use again (sequence, unit, checkpoint)
REUSABLE = {"lost-activation": {"seq": "x", "unit": "u"}, "unit-never-launched": {"seq": "s", "unit": "ghost"},
            "double-release": {"unit": "u", "ckpt": "k"}, "activation-from-released": {"unit": "u", "ckpt": "k"}}


def reuse(c: Cause, base: Cause, what: str) -> None:
    """An id of ``base`` (``what``: its sequence, unit or checkpoint) used again once base's events are over: a legal
    new incarnation (activated, launched, retained again), then one new root cause on that incarnation -- which
    replay must report as a root cause of its own, never as a consequence of ``base``."""
    n, old = c.name, base.name + REUSABLE[base.kind][what]
    bad: dict[str, object]
    if what == "ckpt":  # retained again, released, released again
        evs = _life(f"{n}p", f"{n}v", 128, retain=old) + [{"op": "release", "ckpt": old}]
        bad, tail, c.rule = {"op": "release", "ckpt": old}, [], "CKPT-2"
    elif what == "seq":  # activated again; a completion of a unit it never launched
        evs = _life(old, f"{n}v", 64)[:4]
        bad = {"op": "complete", "unit": f"{n}ghost", "commit": [{"seq": old, "pool": "main", "frontier": 64}]}
        tail, c.rule = [{"op": "finish", "seq": old}], "TRACE-2"
    else:  # launched again and completed, then completed twice
        evs = [{**e, "unit": old} if "unit" in e else e for e in _life(f"{n}s", old, 64)[:4]]
        bad = {"op": "complete", "unit": old, "commit": [{"seq": f"{n}s", "pool": "main", "frontier": 64}]}
        tail, c.rule = [{"op": "finish", "seq": f"{n}s"}], "TRACE-2"
    c.events = [Ev(e, n, wait=base.name if i == 0 else "") for i, e in enumerate(evs)]
    c.events += [Ev(bad, n, bad=True)] + [Ev(e, n) for e in tail]
    c.base = base.name


CAUSES = {"lost-activation": ("TRACE-2", lost_activation),
          "activation-from-released": ("CKPT-2", activation_from_released),
          "double-release": ("CKPT-2", double_release),
          "unit-never-launched": ("TRACE-2", unit_never_launched)}


@functools.lru_cache(maxsize=64)
def background(seed: int, events: int) -> tuple[dict, tuple[str, ...]]:
    """A legal generated trace: its header (concurrency raised) and its events (observations dropped)."""
    from kvsim.sim.trace.generate import generate_with, options_for
    with tempfile.TemporaryDirectory(prefix="kvsim-recovery-") as tmp:
        path = Path(tmp) / "bg.jsonl"
        generate_with(path, options_for(events, seed))
        lines = path.read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    header["config"]["max_concurrency"] += EXTRA_CONCURRENCY
    header["meta"] = {"source": "kvsim fuzz --machine recovery", "background_seed": seed}
    return header, tuple(ln for ln in lines[1:] if '"op":"observe"' not in ln)


def merge(streams: list[list[Ev]], order: list[str], seed: int) -> list[Ev]:
    """One interleaving: each stream keeps its order; the bad events come in `order` (cause names); a joint
    event waits until the causes it names have put their sequences out of step (their gate events)."""
    rng = random.Random(seed)
    heads = [0] * len(streams)
    index = {s[0].stream: i for i, s in enumerate(streams) if s}
    done: set[str] = set()
    gated: set[str] = set()
    out: list[Ev] = []
    while True:
        ready = []
        for i, s in enumerate(streams):
            if heads[i] == len(s):
                continue
            ev = s[heads[i]]
            if ev.bad and order[len([n for n in order if n in done])] != ev.stream:
                continue
            if ev.stream not in ev.causes and ev.causes and not set(ev.causes) <= gated:
                continue
            if ev.wait and heads[index[ev.wait]] < len(streams[index[ev.wait]]):
                continue
            ready.append(i)
        if not ready:
            break
        i = rng.choice(ready)
        ev = streams[i][heads[i]]
        heads[i] += 1
        if ev.bad:
            done.add(ev.stream)
        if ev.gate:
            gated.add(ev.stream)
        out.append(ev)
    if not all(h == len(s) for h, s in zip(heads, streams, strict=True)):
        raise RuntimeError("a merge left events behind")
    return out


class RecoveryMachine(RuleBasedStateMachine):
    name = "recovery"
    oracles: tuple = ()  # its coverage is its own rule counts (CampaignResult.rules), no oracle branches

    @staticmethod
    def catalogue_ids() -> list[str]:
        """No store catalogue rules: the campaign reports no store coverage or blind spots for it."""
        return []

    def __init__(self) -> None:
        super().__init__()
        self.causes: list[Cause] = []
        self.joints: list[list[Ev]] = []
        self.legals: list[list[Ev]] = []
        self.started = False
        self.failed = False

    def count(self, label: str) -> None:
        RUN.rules[label] = RUN.rules.get(label, 0) + 1
        RUN.steps += 1

    @initialize(seed=st.integers(0, 40), events=st.sampled_from((40, 80, 160)), merges=st.tuples(
        st.integers(0, 1 << 30), st.integers(0, 1 << 30)))
    def start(self, seed, events, merges) -> None:
        self.seed, self.events, self.merges = seed, events, merges
        self.started = True
        RUN.examples += 1

    @precondition(lambda self: self.started and len(self.causes) < MAX_CAUSES)
    @rule(kind=st.sampled_from(sorted(CAUSES)))
    def cause(self, kind) -> None:
        self.count(f"cause:{kind}")
        rule_id, build = CAUSES[kind]
        c = Cause(f"r{len(self.causes)}", kind, rule_id)
        build(c)
        self.causes.append(c)

    @precondition(lambda self: sum(bool(c.desynced) for c in self.causes) >= 2)
    @rule(a=st.integers(0, MAX_CAUSES - 1), b=st.integers(0, MAX_CAUSES - 1))
    def joint(self, a, b) -> None:
        """A batch over the desynchronized rows of two causes, then its completion."""
        ds = [c for c in self.causes if c.desynced and not c.base]
        ca, cb = ds[a % len(ds)], ds[b % len(ds)]
        if ca is cb or ca.taken or cb.taken:  # (a cause whose ids are used again is joined by no batch)
            return
        ca.joined = cb.joined = True
        self.count("joint")
        u = f"j{len(self.joints)}"
        rows = [{"seq": ca.desynced[0], "pool": "main", "write": [300, 301]},
                {"seq": cb.desynced[0], "pool": "main", "write": [300, 301]}]
        commit = [{"seq": r["seq"], "pool": "main", "frontier": 301} for r in rows]
        both = (ca.name, cb.name)
        self.joints.append([Ev({"op": "launch", "unit": u, "rows": rows}, u, both),
                            Ev({"op": "complete", "unit": u, "commit": commit}, u, both)])

    @precondition(lambda self: len(self.causes) < MAX_CAUSES + 2 and any(
        not c.base and not c.taken and not c.joined for c in self.causes))
    @rule(i=st.integers(0, 1 << 16), what=st.sampled_from(("seq", "unit", "ckpt")))
    def reuse(self, i, what) -> None:
        """An id of an earlier cause used again after its end (a sequence, unit or checkpoint), with a new root cause
        on the new incarnation."""
        free = [c for c in self.causes if not c.base and not c.taken and not c.joined and what in REUSABLE[c.kind]]
        if not free:
            return
        base = free[i % len(free)]
        base.taken = True
        c = Cause(f"r{len(self.causes)}", f"{what}-reuse", "")
        reuse(c, base, what)
        self.count(f"reuse:{what}")
        self.causes.append(c)

    @precondition(lambda self: self.started)
    @rule(n=st.integers(1, 512))
    def legal(self, n) -> None:
        """One more unrelated legal request beside the background (a stream of its own)."""
        if len(self.legals) < 8:
            self.count("legal")
            k = f"e{len(self.legals)}"
            self.legals.append([Ev(e, k) for e in _life(f"{k}s", f"{k}u", n)])

    def teardown(self) -> None:
        if not self.started or self.failed or not self.causes:
            return
        header, bg = background(self.seed, self.events)
        streams = ([[Ev(json.loads(ln), "background") for ln in bg]] + [c.events for c in self.causes]
                   + self.joints + self.legals)
        order = [c.name for c in random.Random(self.merges[0] ^ 0x0DE5).sample(self.causes, len(self.causes))]
        for c in self.causes:  # an id reused after its end: its root cause comes after its base's
            if c.base and order.index(c.base) > order.index(c.name):
                order.remove(c.name)
                order.insert(order.index(c.base) + 1, c.name)
        runs = []
        for m in self.merges:
            evs = merge(streams, order, m)
            runs.append((evs, self.judge(header, evs, order)))
        (e1, r1), (e2, r2) = runs
        ids1 = [(v["id"], v["rule"], e1[v["event"]].stream) for v in r1.violations]
        ids2 = [(v["id"], v["rule"], e2[v["event"]].stream) for v in r2.violations]
        if ids1 != ids2 or r1.suppressed != r2.suppressed:
            self.fail("unstable", r2.violations[0]["rule"] if r2.violations else "RECOVERY", header, e2,
                      f"root causes {ids1} (suppressed {r1.suppressed}) in one merge, {ids2} (suppressed "
                      f"{r2.suppressed}) in another that moves only unrelated events")

    def judge(self, header: dict, evs: list[Ev], order: list[str]):
        from kvsim.sim.replay import replay_trace
        data = self.trace_bytes(header, evs)
        with tempfile.TemporaryDirectory(prefix="kvsim-recovery-") as tmp:
            path = Path(tmp) / "recovery.jsonl"
            path.write_bytes(data)
            r = replay_trace(path)
        self.count("replay")
        by_cause = {c.name: c for c in self.causes}
        first_id: dict[str, int] = {}
        for v in r.violations:
            ev = evs[v["event"]] if 0 <= v["event"] < len(evs) else None
            if ev is None or not ev.bad:
                self.fail("not-a-root-cause", v["rule"], header, evs, f"event {v['event']}: {v['rule']} reported "
                          f"as a root cause ({v['message']}); it is " + (
                              f"a consequence of {', '.join(ev.causes)}" if ev is not None and ev.causes else
                              "legal"))
            c = by_cause[ev.stream]
            if v["rule"] != c.rule or ev.stream in first_id:
                self.fail("root-cause", v["rule"], header, evs, f"event {v['event']} ({c.kind}): {v['rule']} "
                          f"reported as violation {v['id']}; expected {c.rule}, once")
            first_id[ev.stream] = v["id"]
            self.count(f"rule:{v['rule']}")
        for name in order:
            if name not in first_id:
                c = by_cause[name]
                self.fail("missed", c.rule, header, evs, f"the {c.kind} root cause is not reported")
        for cons in r.consequences:
            ev = evs[cons["event"]]
            if not ev.causes:
                self.fail("misattributed", cons["rule"], header, evs, f"event {cons['event']} ({ev.stream}) "
                          f"listed as a consequence of {cons['of']}; nothing desynchronized it")
            want = min(first_id[n] for n in ev.causes)
            if cons["of"] != want:
                self.fail("misattributed", cons["rule"], header, evs, f"event {cons['event']}: {cons['rule']} "
                          f"blamed on finding {cons['of']}, the earliest finding that desynchronized "
                          f"{cons['entity']} is {want}")
            self.count("consequence")
        return r

    @staticmethod
    def trace_bytes(header: dict, evs: list[Ev]) -> bytes:
        return (json.dumps(header, sort_keys=True) + "\n" + "".join(
            json.dumps(e.obj, sort_keys=True) + "\n" for e in evs)).encode()

    def fail(self, kind: str, rule: str, header: dict, evs: list[Ev], message: str) -> NoReturn:
        self.failed = True
        text = f"{rule} ({kind}) {message}"
        try:
            final = current_build_context().is_final
        except Exception:  # noqa: BLE001 — outside a Hypothesis test (a direct call)
            final = True
        if final and RUN.found_dir is not None:
            data = self.trace_bytes(header, evs)
            path = RUN.found_dir / f"{self.name}-{hashlib.sha256(data).hexdigest()[:12]}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, data)
            RUN.last_failure = {"kind": kind, "message": text, "rule": rule, "reproduced": True,
                                "trace": str(path), "steps": len(evs), "replay": message}
        raise FuzzFailure(text)
