"""Engine faults injected into a running simulation: fault episodes (`sim.trace.faults`) written into the
simulated event stream between units, each flagged (or not) at its one bad event.

Which faults a configuration supports: a fault's declared needs (a Host arena, the MTP backend,
kv_lease_growth — which the simulation never configures) and a *probe*: the episode alone on a fresh store
of the same configuration must be flagged at its bad event with exactly its declared rule, nothing else,
and end with nothing held. The probe also measures what the episode needs at its peak (pages per pool,
execution rows, one Host extent), so that a live episode runs only when the store has that room: an
episode never takes pages, rows or Host bytes the background workload would miss, and it ends with
everything it held released, so the background goes on exactly as it would have without it.

Placement (seeded, `FaultPlan.seed`): one episode about every `every` engine iterations (a uniform draw in
[every/2, 3·every/2]), the requested faults in a seeded shuffled order, cycle after cycle, until the
workload ends; a fault whose episode finds no room lets the next one in the order go first and stays due
(when none has room, the injection waits for the next boundary). When the workload ends, every
requested fault not injected yet is injected once (least-recently-used checkpoints are released first
when the store lacks room: the background is over by then).

Ids: each injection j renames the episode's `f…` ids to `f{j}…` (`fs0` -> `f12s0`), unique in the stream
(a reused id of an ended sequence would be a stale-handle violation of its own). Page ids the episode
names (`Episode.top`) are the highest ids the model reports free at that moment (the store hands out the
lowest free id first, so its own choices inside the episode never meet them).
This module knows the fault catalogue, the replay's step and the store's public accounting; it knows
nothing of the scheduler beyond its emit, its rows and its checkpoints.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from kvsim.kvmodel.store.errors import InvariantError
from kvsim.sim.replay import TraceReplay
from kvsim.sim.trace.faults import FAULTS, Episode

DEFAULT_EVERY = 200
ALL = "all"


class _Episode(Episode):
    """An episode whose ids carry the injection's number and whose page ids are free in the live pool."""

    def __init__(self, put, pools, main_pool, max_context: int, tag: int | None) -> None:
        super().__init__(put, pools, main_pool.capacity, max_context)
        self._pool = main_pool
        self._tag = "" if tag is None else str(tag)

    def new(self, kind: str) -> str:
        return "f" + self._tag + super().new(kind)[1:]

    def top(self, n: int) -> list[int]:
        pool, p = self._pool, self._next_top
        ids: list[int] = []
        while len(ids) < n and p >= 0:
            if pool.is_free(p):
                ids.append(p)
            p -= 1
        if len(ids) < n:
            raise ValueError(f"the Main pool has fewer than {n} free pages")
        self._next_top = p
        return sorted(ids)


@dataclass(frozen=True)
class Probe:
    """What one fault's episode needs at its peak, measured alone on a fresh store of the configuration."""

    name: str
    rule: str
    pages: dict  # pool -> allocated + reserved pages
    rows: int  # active sequences
    host: int  # Host bytes (one extent)
    events: int


def _pools(config) -> tuple[str, ...]:
    return ("main", "mtp") if config.backend == "mtp" else ("main",)


def probe(name: str, config) -> Probe:
    """Run the fault's episode alone on a fresh store of `config`; ValueError(reason) when the configuration
    does not support it."""
    fault = FAULTS[name]
    if "growth" in fault.needs:
        raise ValueError(f"fault {name} needs kv_lease_growth, which the simulation does not configure")
    if "host" in fault.needs and not config.host_bytes:
        raise ValueError(f"fault {name} needs a Host arena (give --host-bytes)")
    if "mtp" in fault.needs and config.backend != "mtp":
        raise ValueError(f"fault {name} needs the MTP backend (give --backend mtp)")
    rep = TraceReplay(f"<probe {name}>", config.header("fault probe"), recover=True)
    st = rep.st
    pools = _pools(config)
    peak = {p: 0 for p in pools}
    top = [0, 0]  # rows, Host bytes
    n = [0]

    def put(ev) -> int:
        i = n[0]
        rep.step(i, i + 2, ev)
        n[0] = i + 1
        for p in pools:
            pl = st.pools[p]
            peak[p] = max(peak[p], pl.allocated + pl.reserved)
        top[0] = max(top[0], len(st.bundles))
        top[1] = max(top[1], st.arena.capacity - st.arena.free_bytes)
        return i

    try:
        ep = _Episode(put, pools, st.pools["main"], config.max_context, None)
        fault.episode(ep)
    except ValueError as exc:
        raise ValueError(f"fault {name} does not fit this configuration: {exc}") from None
    got = {(v["rule"], v["event"]) for v in rep.result.violations}
    if ep.bad_event is None or got != {(fault.rule, ep.bad_event)}:
        seen = ", ".join(f"{r} at event {e}" for r, e in sorted(got, key=lambda x: x[1])) or "nothing"
        raise ValueError(f"fault {name} is not flagged with exactly {fault.rule} under this configuration "
                         f"(alone on a fresh store it reports {seen})")
    left = st.bundles or st.checkpoints or st.units or any(st.pools[p].allocated or st.pools[p].reserved
                                                           for p in pools)
    if left or st.arena.free_bytes != st.arena.capacity:
        raise ValueError(f"fault {name} leaves state held under this configuration")
    return Probe(name, fault.rule, dict(peak), top[0], top[1], n[0])


@dataclass(frozen=True)
class FaultPlan:
    """Which faults to inject, how often (engine iterations), with which placement seed."""

    names: tuple[str, ...]
    every: int = DEFAULT_EVERY
    seed: int = 0
    skipped: tuple = ()  # (name, reason): faults `all` left out under the configuration
    probes: dict = field(default_factory=dict, compare=False, repr=False)

    def meta(self) -> dict:
        return {"names": list(self.names), "every": self.every, "seed": self.seed,
                "skipped": [name for name, _ in self.skipped]}


def plan_faults(requested, config, every: int = DEFAULT_EVERY, seed: int = 0) -> FaultPlan:
    """Resolve the requested fault names (`all`: every fault the configuration supports) into a plan.
    ValueError(reason) for an unknown name, a fault the configuration cannot host, or a bad period."""
    if every < 1:
        raise ValueError(f"the fault period must be at least 1 iteration, got {every}")
    names: list[str] = []
    for r in requested:
        for name in (sorted(FAULTS) if r == ALL else [r]):
            if name not in FAULTS:
                raise ValueError(f"unknown fault {name!r}; known: {', '.join(sorted(FAULTS))} or {ALL}")
            if name not in names:
                names.append(name)
    explicit = {r for r in requested if r != ALL}
    probes, skipped = {}, []
    for name in names:
        try:
            probes[name] = probe(name, config)
        except ValueError as exc:
            if name in explicit:
                raise
            skipped.append((name, str(exc)))
    if not probes:
        raise ValueError("no requested fault can be injected under this configuration")
    return FaultPlan(tuple(n for n in names if n in probes), every, seed, tuple(skipped), probes)


class Injector:
    """Injects a plan's episodes into one simulation at its unit boundaries and scores them at the end."""

    def __init__(self, sim, plan: FaultPlan) -> None:
        self.sim = sim
        self.plan = plan
        self.probes = {n: plan.probes.get(n) or probe(n, sim.config) for n in plan.names}
        self.rng = random.Random(plan.seed ^ 0xFA17_5EED)
        self.order: list[str] = []  # faults due (each at most once), the next one last
        self.next_at = self._gap()
        self.injected: list[tuple[str, str, int, int]] = []  # (name, rule, bad event, events written)
        self.waits = 0
        self.not_injected: list[str] = []

    def _gap(self) -> int:
        e = self.plan.every
        return self.rng.randint(max(1, e // 2), e + e // 2)

    def _room(self, pr: Probe) -> bool:
        st = self.sim.st
        if any(st.pools[p].available < n for p, n in pr.pages.items()):
            return False
        if self.sim.config.concurrency - len(st.bundles) < pr.rows:
            return False
        return pr.host == 0 or st.arena.largest_extent >= pr.host

    def _inject(self, name: str) -> None:
        sim = self.sim

        def put(ev) -> int:
            sim._emit(ev)
            return sim.events - 1

        first = sim.events
        ep = _Episode(put, sim.pools, sim.pool, sim.config.max_context, len(self.injected))
        FAULTS[name].episode(ep)
        if ep.bad_event is None:  # FAULTS episodes always write theirs: fault_runs_alone checked it
            raise InvariantError("a fault episode writes its bad event", f"{name} wrote none")
        self.injected.append((name, FAULTS[name].rule, ep.bad_event, sim.events - first))

    def boundary(self) -> None:
        """Called between units: inject the next episode when it is due and the store has its room."""
        if self.sim.s["iterations"] < self.next_at:
            return
        order = self.order
        for attempt in range(2):
            if not order or attempt:
                cycle = [n for n in self.plan.names if n not in order]  # each fault is due at most once
                self.rng.shuffle(cycle)
                order[:0] = cycle  # the next cycle, behind the faults still waiting for room
            for i in range(len(order) - 1, -1, -1):
                if self._room(self.probes[order[i]]):
                    self._inject(order.pop(i))
                    self.next_at = self.sim.s["iterations"] + self._gap()
                    return
        self.waits += 1

    def drain(self) -> None:
        """The workload is over: inject once every requested fault not injected yet."""
        done = {name for name, *_ in self.injected}
        sim = self.sim
        for name in self.plan.names:
            if name in done:
                continue
            pr = self.probes[name]
            while not self._room(pr) and sim.ckpts:
                sim._release(next(iter(sim.ckpts.values())))
            if self._room(pr):
                self._inject(name)
            else:
                self.not_injected.append(name)

    def stats(self, violations) -> dict:
        """faults_injected / faults_flagged (the bad event reported with exactly the declared rule), each miss,
        and the violations no injected fault accounts for (the background must have none)."""
        at: dict[int, set] = {}
        for v in violations:
            at.setdefault(v["event"], set()).add(v["rule"])
        flagged, missed, bad = 0, [], set()
        by_name: dict[str, int] = {}
        for name, rule, event, _ in self.injected:
            bad.add(event)
            by_name[name] = by_name.get(name, 0) + 1
            got = at.get(event, set())
            if got == {rule}:
                flagged += 1
            else:
                missed.append({"fault": name, "rule": rule, "event": event, "line": event + 2,
                               "reported": sorted(got)})
        return {"faults_injected": len(self.injected), "faults_flagged": flagged, "faults_missed": missed,
                "faults_not_injected": list(self.not_injected),
                "faults_skipped": {name: why for name, why in self.plan.skipped},
                "faults_by_name": dict(sorted(by_name.items())),
                "fault_events": sum(n for *_, n in self.injected), "fault_waits": self.waits,
                "violations_unexpected": sum(1 for v in violations if v["event"] not in bad)}

