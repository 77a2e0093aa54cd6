"""The stateful fuzzing machines: the store model driven through kvtrace/1, judged by the oracle.

`StoreMachine` runs every transaction of the store contract — activation (root, Fork, Move, with Host
restores), map, launch / complete / fail (speculative rounds over Main and the backend pool), truncate,
grow, cow, finish (retain / release), release, offload / drop / phase-by-phase transfers — and an
illegal variant of each, which must be rejected with a rule and leave the whole state exactly as it
was. Handles live in Bundles (sequences, checkpoints, units, transfers); a stale handle turns a rule
into an illegal attempt. Hypothesis selects rules by swarm testing; the configuration (profile,
backend, capacity, growth, concurrency, Host arena) is drawn per run, tight ones first.
The machine steers by the oracle (what a correct store holds), never by the model under test. After
every step: every rule of the catalogue on what the step touched (`TraceReplay.step`) and the refinement
check (`sim.fuzz.refine`); at the end of a run, the full audit. `HostMachine` weights the Host tier and
draws small arenas; `LockstepMachine` also runs the physical pools (`sim.lockstep`) at small dimensions
under every profile and checks retained checkpoints' Device pages bit-exact (`sim.fuzz.physical`).
"""

from __future__ import annotations

from hypothesis import reject, strategies as st
from hypothesis.control import current_build_context
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, invariant, multiple, precondition, rule

from kvsim.kvmodel.store import PROFILES
from kvsim.sim.fuzz.driver import Driver, write_counterexample
from kvsim.sim.fuzz.oracle import Facts, Oracle, ceil_div
from kvsim.sim.fuzz.refine import differences
from kvsim.sim.fuzz.stats import RUN
from kvsim.sim.fuzz.view import ModelView
from kvsim.sim.trace import records as kt

P = 64


class FuzzFailure(AssertionError):
    """The model disagreed with the oracle or broke a rule; names the kind, the rule replay reports and the
    written counterexample (on the final, shrunk run)."""


# -- configurations ---------------------------------------------------------------------------------------
BACKENDS = st.one_of(st.just(kt.BackendOff()), st.builds(kt.BackendMTP, draft_window=st.sampled_from((1, 2, 3, 65, 130))),
                     st.just(kt.BackendDFlash(full_layers=1, kv_heads=1, head_dim=128)), st.just(kt.BackendDFlash2()))


@st.composite
def configs(draw, host_pages=st.sampled_from((0, 0, 1, 2, 3, 6)), heads: int = 2, profiles=st.sampled_from(PROFILES),
            contexts=st.sampled_from((128, 192, 256, 320, 512))):
    """A kvtrace/1 config: small and mostly tight (capacity at or just above M_min, few rows)."""
    S = draw(contexts)
    C = draw(st.integers(1, 3))
    L = ceil_div(S, P)
    m_min, m_max = max(L, C), C * L
    M = min(m_max, m_min + draw(st.sampled_from((0, 0, 1, 2, L, 2 * L))))
    growth = draw(st.one_of(st.none(), st.builds(kt.KVLeaseGrowth, window=st.sampled_from((64, 128, 256)),
                                                 cushion_pages=st.integers(0, 2))))
    cfg = kt.Config(max_context=S, max_concurrency=C, page_size=P, kv_profile=draw(profiles), backend=draw(BACKENDS),
                    model=kt.Model(full_attention_layers=1, kv_heads=heads, head_dim=256),
                    kv_capacity=kt.KVCapacity(tokens=M * P), kv_lease_growth=growth, prefill_chunk=128)
    from kvsim.kvmodel.store import ConfigError, resolve_capacity
    from kvsim.sim.trace.config import store_config
    try:
        layout = resolve_capacity(store_config(cfg)).layout
    except ConfigError:  # a geometry the model does not support (it says which rule): draw another
        reject()
    pages = draw(host_pages)
    if pages:
        stride = max(g.page_bytes for g in layout.pools)
        cfg = kt.Config(**{**{f: getattr(cfg, f) for f in cfg.__struct_fields__},
                           "host_arena_bytes": pages * stride + draw(st.integers(0, 999))})
    return cfg


def pool_capacity(cfg: kt.Config) -> dict:
    """Pages per pool from the header alone (store contract "MTP physical pages": M + C·ceil((K-1)/P))."""
    M = cfg.kv_capacity.tokens // P
    b = cfg.backend
    if isinstance(b, kt.BackendMTP):
        return {"main": M, "mtp": M + cfg.max_concurrency * ceil_div(b.draft_window - 1, P)}
    if isinstance(b, kt.BackendDFlash) and b.full_layers:
        return {"main": M, "draft_full": M}
    return {"main": M}


def facts_for(cfg: kt.Config, view: ModelView) -> Facts:
    cap = pool_capacity(cfg)
    b = cfg.backend
    backend = "mtp" if isinstance(b, kt.BackendMTP) else "draft_full" if "draft_full" in cap else None
    g = cfg.kv_lease_growth
    return Facts(cfg.max_context, cfg.max_concurrency, cap, {p: view.page_bytes(p) for p in cap}, cfg.host_arena_bytes,
                 backend, b.draft_window if isinstance(b, kt.BackendMTP) else 0,
                 None if g is None else max(cfg.prefill_chunk, g.window), 0 if g is None else g.cushion_pages)


# -- the store machine ------------------------------------------------------------------------------------
class StoreMachine(RuleBasedStateMachine):
    name = "store"
    lockstep = False
    config_strategy = configs()

    seqs = Bundle("seqs")
    ckpts = Bundle("ckpts")
    units = Bundle("units")
    xfers = Bundle("xfers")

    def __init__(self):
        super().__init__()
        self.driver = None
        self.failed = False
        self.ids = 0

    # -- plumbing -----------------------------------------------------------------------------------
    def observer_factory(self, cfg):
        return None

    @initialize(cfg=config_strategy)
    def setup(self, cfg):
        self.start(cfg)

    def start(self, cfg):
        header = kt.Header(format="kvtrace/1", config=cfg, meta={"source": f"kvsim fuzz --machine {self.name}"})
        self.driver = Driver(header, self.observer_factory(cfg))
        self.view = ModelView(self.driver.st)
        self.oracle = Oracle(facts_for(cfg, self.view))
        self.pools = self.oracle.f.pools
        RUN.examples += 1

    def fresh(self, prefix: str) -> str:
        self.ids += 1
        return f"{prefix}{self.ids}"

    def count(self, label: str) -> None:
        RUN.rules[label] = RUN.rules.get(label, 0) + 1
        RUN.steps += 1

    def fail(self, kind: str, message: str):
        self.failed = True
        try:
            events, notes = differences(self.oracle, self.view)
        except Exception:  # noqa: BLE001 — a crashing model cannot be read; the trace still replays
            events, notes = [], []
        data = self.driver.trace_bytes(events)
        text = f"{kind}: {message}" + (f" [{'; '.join(notes[:4])}]" if notes and kind != "refinement" else "")
        final = False
        try:
            final = current_build_context().is_final
        except Exception:  # noqa: BLE001 — outside a Hypothesis test (a direct call)
            final = True
        latest = None if RUN.found_dir is None else RUN.found_dir / f"{self.name}-latest.jsonl"
        if not final and latest is not None:  # a runner that never marks its last run (HypoFuzz): the latest
            latest.parent.mkdir(parents=True, exist_ok=True)  # failing run, which is the shrunk one at the end
            latest.write_bytes(data)
        if final and RUN.found_dir is not None:
            if latest.exists():
                latest.unlink()
            ce = write_counterexample(self.name, data, RUN.found_dir, lockstep=self.lockstep)
            RUN.last_failure = {"kind": kind, "message": text, "rule": ce.rule or f"ORACLE-{kind}",
                                "reproduced": bool(ce.rule), "trace": ce.path, "steps": self.driver.steps,
                                "replay": ce.message}
            text = f"{RUN.last_failure['rule']} ({kind}) — counterexample {ce.path}: {text}"
        raise FuzzFailure(text)

    def do(self, label: str, ev, expect: str, record=None) -> bool:
        """Step `ev`; expect 'ok' (must pass), 'reject' (must be rejected, state unchanged) or 'either'
        (may be rejected by REP-3 only). Returns whether the model applied it."""
        self.count(label)
        before = self.view.snapshot() if expect != "ok" else None
        try:
            viol = self.driver.step(ev, record)
        except Exception as exc:  # noqa: BLE001 — a crash inside the model or a checker
            self.fail("crash", f"{label}: {type(exc).__name__}: {exc}")
        if expect == "ok":
            if viol:
                self.fail("violation", f"{label}: {viol[0]['rule']}: {viol[0]['message']}")
            return True
        if not viol:
            if expect == "reject":
                self.fail("accepted", f"{label}: the model accepted an illegal {ev.op}")
            return True
        if expect == "either" and any(v["rule"] != "REP-3" for v in viol):
            self.fail("violation", f"{label}: {viol[0]['rule']}: {viol[0]['message']}")
        if self.view.snapshot() != before:
            self.fail("changed", f"{label}: rejected ({viol[0]['rule']}) but the state changed")
        self.driver.forget_last()
        return False

    def request(self, label: str, ev, granted: bool, result) -> bool:
        """Step a request; the record carries the oracle's answer. Returns whether the model granted it."""
        self.count(label)
        before = self.view.snapshot()
        n = len(self.driver.replay.result.refusals)
        try:
            viol = self.driver.step(ev, ev.__class__(**{**_fields(ev), "result": result}))
        except Exception as exc:  # noqa: BLE001
            self.fail("crash", f"{label}: {type(exc).__name__}: {exc}")
        if viol:
            self.fail("violation", f"{label}: {viol[0]['rule']}: {viol[0]['message']}")
        refused = len(self.driver.replay.result.refusals) > n
        if refused == granted:
            self.fail("outcome", f"{label}: the model {'refused' if refused else 'granted'} {ev.op} "
                      f"{_fields(ev)}; the oracle {'grants' if granted else 'refuses'} it")
        if refused and ev.op != "grow" and self.view.snapshot() != before:
            self.fail("changed", f"{label}: refused but the state changed")
        return not refused

    def observe(self, data) -> None:
        """Sometimes the engine reports what a correct store holds (the oracle's view): pool counters, or a
        sequence's or checkpoint's frontier and content; a correct model agrees (TRACE-1, AS-2, REP-4 premises)."""
        o = self.oracle
        if data.draw(st.integers(0, 3)) < 3:
            return
        spaces = list(o.live_spaces())
        if spaces and data.draw(st.booleans()):
            kind, owner, pool, s = data.draw(st.sampled_from(spaces))
            who = {"seq": owner} if kind == "seq" else {"ckpt": owner}
            ev = kt.Observe(pool=pool, frontier=s.frontier, content=tuple(s.content), **who)
        else:
            pool = data.draw(st.sampled_from(self.pools))
            ev = kt.Observe(pool=pool, **o.counters(pool))
        self.do("observe", ev, "ok")

    # -- refinement after every step ----------------------------------------------------------------
    @invariant()
    def refines(self):
        if self.driver is None or self.failed:
            return
        events, notes = differences(self.oracle, self.view)
        if notes:
            self.fail("refinement", "; ".join(notes[:6]))

    def teardown(self):
        if self.driver is None:
            return
        RUN.coverage.merge(self.driver.st.cov)
        if not self.failed:
            found = self.driver.audit()
            if found:
                self.fail("audit", f"{found[0].rule}: {found[0].message}")

    # -- handles ------------------------------------------------------------------------------------
    def steer(self, handle, live, data):
        """Mostly a live handle (the bundle's stale ones make the illegal attempts, one time in eight)."""
        live = sorted(live)
        if live and handle not in live and data.draw(st.integers(0, 7)) < 7:
            return data.draw(st.sampled_from(live))
        return handle

    def live_seq(self, seq):
        return self.oracle.seqs.get(seq)

    def space(self, seq, pool):
        return self.oracle.seqs[seq].spaces[pool]

    def busy(self, seq) -> bool:
        return any(s.unit is not None for s in self.oracle.seqs[seq].spaces.values())

    # -- activation ---------------------------------------------------------------------------------
    @rule(target=seqs, data=st.data())
    def activate_root(self, data):
        S = self.oracle.f.max_context
        if len(self.oracle.seqs) >= self.oracle.f.max_concurrency and data.draw(st.integers(0, 3)) < 3:
            return multiple()  # every row is leased: mostly do something else
        gate = data.draw(st.integers(0, 15))
        prompt = data.draw(st.integers(S + 1, S + 64) if gate == 15 else st.integers(0, S) if gate > 10
                           else st.integers(0, S // 2))
        budget = data.draw(st.integers(0, S) if data.draw(st.integers(0, 3)) == 3 else st.integers(0, S // 4))
        return self.activate("activate", self.fresh("s"), prompt, budget, None, True)

    @rule(target=seqs, ck=ckpts, keep=st.booleans(), data=st.data())
    def activate_from(self, ck, keep, data):
        o = self.oracle
        ck = self.steer(ck, o.ckpts, data)
        if ck not in o.ckpts:  # released or moved: a stale checkpoint (CKPT-2 / TRACE-2)
            self.do("activate_from:stale", kt.Activate(seq=self.fresh("s"), prompt=1, budget=1, from_=ck), "reject")
            return multiple()
        wide = data.draw(st.integers(0, 3)) == 3
        extra = data.draw(st.integers(-2, 300) if wide else st.integers(0, 16))
        budget = data.draw(st.integers(0, 300) if wide else st.integers(0, 64))
        prompt = max(0, o.ckpts[ck]["main"].frontier + extra)
        return self.activate("activate_from:" + ("fork" if keep else "move"), self.fresh("s"), prompt, budget, ck, keep)

    @precondition(lambda self: self.driver is not None and (self.oracle.ckpts or self.oracle.seqs))
    @rule(data=st.data())
    def branch(self, data):
        """Retain a sequence and continue it (Fork or Move): the prefix-sharing path engines take most."""
        o = self.oracle
        cands = sorted(c for c in o.ckpts if o.ckpts[c]["main"].frontier)
        if not cands or data.draw(st.booleans()):
            done = [n for n in sorted(o.seqs) if not self.busy(n) and o.seqs[n].spaces["main"].frontier]
            if done:
                name, ck = data.draw(st.sampled_from(done)), self.fresh("k")
                self.do("branch:retain", kt.Finish(seq=name, retain=ck), "ok")
                o.finish(name, ck)
                cands = [ck]
        if not cands:
            return
        ck = data.draw(st.sampled_from(cands))
        if o.f.host_bytes and data.draw(st.booleans()):  # keep a Host copy of the continuation first
            pool = data.draw(st.sampled_from(self.pools))
            idle = [i for i, b in enumerate(o.ckpts[ck][pool].blocks) if b.dev and not b.pins]
            if idle and len(o.offload_todo(ck, pool, idle)) * o.f.page_bytes[pool] <= o.host_free():
                if self.do("branch:offload", kt.Offload(ckpt=ck, pool=pool, blocks=tuple(idle)), "either"):
                    o.offload(ck, pool, idle)
        keep = data.draw(st.integers(0, 2)) > 0  # Fork twice as often as Move
        prompt = o.ckpts[ck]["main"].frontier + data.draw(st.integers(0, 8))
        seq = self.fresh("s")
        budget = data.draw(st.integers(0, 64))
        plan = o.plan_activate(prompt, budget, ck, keep)
        if not isinstance(plan, str) and data.draw(st.integers(0, 2)) == 2:
            self.follow(seq, prompt, budget, ck, keep, plan, data)
        else:
            self.activate("branch:" + ("fork" if keep else "move"), seq, prompt, budget, ck, keep)
        if seq in o.seqs and data.draw(st.booleans()):  # rewrite part of the continued prefix
            for pool, s in o.seqs[seq].spaces.items():
                f = data.draw(st.integers(0, s.frontier))
                self.do("branch:truncate", kt.Truncate(seq=seq, pool=pool, frontier=f), "ok")
                o.truncate(seq, pool, f)
            if data.draw(st.booleans()):  # and checkpoint the rewritten continuation again
                again = self.fresh("k")
                self.do("branch:retain-again", kt.Finish(seq=seq, retain=again), "ok")
                o.finish(seq, again)
        self.observe(data)

    def follow(self, seq, prompt, budget, ck, keep, plan, data) -> None:
        """The engine chose the pages of a continuation itself (its activation result lists them): the model
        adopts them when they are free and keep every shared or moved page's identity; an engine that
        drops the partial tail (WR-4), moves a tail it had to copy (CKPT-3) or hands out a leased page
        (PAGE-1) is rejected."""
        o = self.oracle
        pages, used = {}, set()
        for pool, (members, _) in plan[1].items():
            src = self.view.device_ids("ckpt", ck, pool)
            free = [i for i in self.view.free_ids(pool) if i not in used]
            ids = []
            for i, m in enumerate(members):
                if m[0] == "keep" and m[1].dev:
                    ids.append(src[i])
                else:
                    ids.append(free.pop(0))
                    used.add(ids[-1])
            pages[pool] = ids
        members, src = plan[1]["main"][0], self.view.device_ids("ckpt", ck, "main")
        fresh = [i for i, m in enumerate(members) if m[0] == "cow" or not m[1].dev]
        leased = [d for d in src if d >= 0]
        options = ["legal", "legal"] + (["leased"] if fresh and leased else []) + \
            (["dropped-tail", "moved-tail"] if members and members[-1][0] == "cow" and src[-1] >= 0 else [])
        variant = data.draw(st.sampled_from(options))
        ids = list(pages["main"])
        if variant == "leased":
            ids[fresh[0]] = leased[-1] if leased[-1] != ids[fresh[0]] else leased[0]
        elif variant == "dropped-tail":
            ids = ids[:-1]
        elif variant == "moved-tail":
            ids[-1] = src[-1]
        pages["main"] = ids
        ev = kt.Activate(seq=seq, prompt=prompt, budget=budget, from_=ck, keep_source=keep,
                         result=kt.ActivateResult(ok=True, pages={p: tuple(v) for p, v in pages.items()}))
        if variant == "legal":
            self.do("branch:engine-pages", ev, "ok")
            o.activate(seq, plan, ck, keep)
        else:
            self.do(f"branch:engine-{variant}", ev, "reject")

    @rule(seq=seqs, gate=st.integers(0, 3))
    def activate_twice(self, seq, gate):
        if gate == 3 and self.live_seq(seq) is not None:  # already active (TRACE-2)
            self.do("activate:active", kt.Activate(seq=seq, prompt=0, budget=1), "reject")

    def activate(self, label, seq, prompt, budget, src, keep):
        plan = self.oracle.plan_activate(prompt, budget, src, keep)
        granted = not isinstance(plan, str)
        ev = kt.Activate(seq=seq, prompt=prompt, budget=budget, from_=src, keep_source=keep)
        res = kt.ActivateResult(ok=True) if granted else kt.ActivateResult(ok=False, error=plan)
        if self.request(label if granted else f"{label}:refused", ev, granted, res):
            self.oracle.activate(seq, plan, src, keep)
            return seq
        return multiple()

    # -- mapping, growth, COW -------------------------------------------------------------------------
    @rule(seq=seqs, data=st.data())
    def map(self, seq, data):
        seq = self.steer(seq, self.oracle.seqs, data)
        q = self.live_seq(seq)
        pool = data.draw(st.sampled_from(self.pools))
        if q is None or q.spaces[pool].unit is not None:
            self.do("map:" + ("stale" if q is None else "in-flight"), kt.Map(seq=seq, pool=pool, tokens=1), "reject")
            return
        s = q.spaces[pool]
        tokens = data.draw(st.integers(0, (s.entitlement + 1) * P))
        refusal = self.oracle.plan_map(seq, pool, tokens)
        res = kt.MapResult(ok=True) if refusal is None else kt.MapResult(ok=False, error=refusal)
        if self.request("map" if refusal is None else "map:refused", kt.Map(seq=seq, pool=pool, tokens=tokens),
                        refusal is None, res):
            self.oracle.map(seq, pool, tokens)

    @rule(seq=seqs, data=st.data())
    def grow(self, seq, data):
        seq = self.steer(seq, self.oracle.seqs, data)
        q = self.live_seq(seq)
        if q is None:
            self.do("grow:stale", kt.Grow(seq=seq), "reject")
            return
        if self.busy(seq):
            if self.oracle.f.growth_window is not None:  # growth only at round boundaries (ENT-3)
                self.do("grow:in-flight", kt.Grow(seq=seq), "reject")
            return
        plan = self.oracle.plan_grow(seq)
        granted = not isinstance(plan, tuple)
        res = kt.GrowResult(ok=True) if granted else kt.GrowResult(ok=False, bounded_at=plan[1])
        self.request("grow" if granted else f"grow:{plan[0]}", kt.Grow(seq=seq), granted, res)
        self.oracle.grow(seq, plan)

    @rule(seq=seqs, data=st.data())
    def cow(self, seq, data):
        seq = self.steer(seq, self.oracle.seqs, data)
        q = self.live_seq(seq)
        pool = data.draw(st.sampled_from(self.pools))
        if q is None or q.spaces[pool].unit is not None:
            self.do("cow:" + ("stale" if q is None else "in-flight"), kt.Cow(seq=seq, pool=pool, block=0), "reject")
            return
        s = q.spaces[pool]
        shared = [b for b in range(len(s.blocks)) if not s.private(b)]
        if not s.blocks or data.draw(st.integers(0, 9)) == 9:
            self.do("cow:beyond", kt.Cow(seq=seq, pool=pool, block=len(s.blocks)), "reject")
            return
        block = data.draw(st.sampled_from(shared)) if shared and data.draw(st.integers(0, 3)) < 3 else \
            data.draw(st.integers(0, len(s.blocks) - 1))
        plan = self.oracle.plan_cow(seq, pool, block)
        granted = plan != "capacity"
        res = kt.CowResult(ok=True) if granted else kt.CowResult(ok=False, error="capacity")
        label = "cow" if plan is None else f"cow:{plan}"
        ev = kt.Cow(seq=seq, pool=pool, block=block)
        self.count(label)
        try:
            viol = self.driver.step(ev, ev if granted else kt.Cow(seq=seq, pool=pool, block=block, result=res))
        except Exception as exc:  # noqa: BLE001
            self.fail("crash", f"{label}: {type(exc).__name__}: {exc}")
        if viol:
            self.fail("violation", f"{label}: {viol[0]['rule']}: {viol[0]['message']}")
        if plan is None:
            self.oracle.cow(seq, pool, block)

    # -- GPU units ------------------------------------------------------------------------------------
    def free_spaces(self):
        return [(name, pool) for name, q in sorted(self.oracle.seqs.items()) for pool, s in q.spaces.items()
                if s.unit is None]

    @precondition(lambda self: self.driver is not None and self.free_spaces())
    @rule(target=units, data=st.data())
    def launch(self, data):
        free = self.free_spaces()
        names = sorted({n for n, _ in free})
        chosen = data.draw(st.lists(st.sampled_from(names), min_size=1, max_size=min(3, len(names)), unique=True))
        rows = []
        for name in chosen:
            pools = [p for n, p in free if n == name]
            if len(pools) > 1 and data.draw(st.integers(0, 3)) == 3:
                pools = [data.draw(st.sampled_from(pools))]  # a phase that writes only one pool
            for pool in pools:
                s = self.space(name, pool)
                end = self.oracle.writable_end(name, pool)
                b = data.draw(st.integers(s.frontier, end))
                # an empty write still names its page (the model holds it to WR-2): a read-only row instead
                rows.append((name, pool, None if b == s.frontier or data.draw(st.integers(0, 7)) == 7
                             else (s.frontier, b)))
        unit = self.fresh("u")
        ev = kt.Launch(unit=unit, rows=tuple(kt.LaunchRow(seq=n, pool=p, write=w) for n, p, w in rows))
        self.do("launch:speculative" if len({n for n, _, _ in rows}) < len(rows) else "launch", ev, "ok")
        self.oracle.launch(unit, rows)
        return unit

    @precondition(lambda self: self.driver is not None and self.free_spaces())
    @rule(data=st.data())
    def decode_round(self, data):
        """An engine round for one sequence: map ahead, launch over every pool, complete (speculative:
        each pool accepts its own prefix), then settle (trim what was mapped beyond the frontier)."""
        o = self.oracle
        names = sorted({n for n, _ in self.free_spaces() if not self.busy(n)})
        if not names:
            return
        name = data.draw(st.sampled_from(names))
        q = o.seqs[name]
        k = data.draw(st.integers(1, 2 * P))
        for pool, s in q.spaces.items():
            tokens = min(s.entitlement * P, s.frontier + k)
            refusal = o.plan_map(name, pool, tokens)
            res = kt.MapResult(ok=True) if refusal is None else kt.MapResult(ok=False, error=refusal)
            if self.request("round:map", kt.Map(seq=name, pool=pool, tokens=tokens), refusal is None, res):
                o.map(name, pool, tokens)
        rows = [(name, pool, (s.frontier, o.writable_end(name, pool))) for pool, s in q.spaces.items()]
        rows = [(n, p, None if w[0] == w[1] else w) for n, p, w in rows]
        unit = self.fresh("u")
        self.do("round:launch", kt.Launch(unit=unit, rows=tuple(kt.LaunchRow(seq=n, pool=p, write=w)
                                                                 for n, p, w in rows)), "ok")
        o.launch(unit, rows)
        if data.draw(st.integers(0, 9)) == 9:
            self.do("round:fail", kt.Fail(unit=unit), "ok")
            o.fail(unit)
            return
        commits = [(n, p, o.seqs[n].spaces[p].frontier if w is None else
                    w[1] if data.draw(st.integers(0, 2)) == 2 else data.draw(st.integers(w[0], w[1])))
                   for n, p, w in rows]
        self.commit(unit, commits, "round:complete")
        if data.draw(st.booleans()):
            for pool, s in q.spaces.items():
                self.do("round:settle", kt.Truncate(seq=name, pool=pool, frontier=s.frontier), "ok")
                o.truncate(name, pool, s.frontier)
        self.observe(data)

    def commit(self, unit, commits, label):
        o = self.oracle
        ev = kt.Complete(unit=unit, commit=tuple(kt.CommitRow(seq=n, pool=p, frontier=f) for n, p, f in commits))
        self.do(label, ev, "ok")
        learned = {}
        for n, p, f in commits:
            s = self.space(n, p)
            if f > s.frontier:
                keys, _ = self.view.content("seq", n, p)
                new = keys[s.frontier:f]
                learned[(n, p)] = new + [0] * (f - s.frontier - len(new))  # unreadable: refinement reports it
                self.fresh_keys(n, p, s.frontier, learned[(n, p)])
        o.complete(unit, commits, learned)

    @precondition(lambda self: self.driver is not None and self.oracle.seqs)
    @rule(data=st.data())
    def launch_illegal(self, data):
        o = self.oracle
        free = self.free_spaces()
        busy = [(n, p) for n, q in sorted(o.seqs.items()) for p, s in q.spaces.items() if s.unit is not None]
        options = (["busy"] if busy else []) + ([] if free and data.draw(st.integers(0, 7)) < 7 else ["stale"])
        for n, p in free:
            s = self.space(n, p)
            if s.frontier:
                options.append("below")
            if len(s.blocks) * P > s.frontier:
                options.append("gap")
            options.append("beyond")
            if s.frontier // P < len(s.blocks) and not s.private(s.frontier // P):
                options.append("shared")
        kind = data.draw(st.sampled_from(sorted(set(options))))
        unit = self.fresh("u")
        if kind == "stale":
            row = kt.LaunchRow(seq=self.fresh("s"), pool="main", write=(0, 1))
        elif kind == "busy":
            n, p = data.draw(st.sampled_from(busy))
            row = kt.LaunchRow(seq=n, pool=p, write=None)
        else:
            n, p = data.draw(st.sampled_from([(n, p) for n, p in free if _fits(self.space(n, p), kind)]))
            s = self.space(n, p)
            F, top = s.frontier, len(s.blocks) * P
            w = {"below": (max(0, F - data.draw(st.integers(1, P))), F),
                 "gap": (F + 1, max(F + 1, top)),
                 "beyond": (F, top + data.draw(st.integers(1, P))),
                 "shared": (F, F + 1)}[kind]
            row = kt.LaunchRow(seq=n, pool=p, write=w)
        self.do(f"launch:illegal-{kind}", kt.Launch(unit=unit, rows=(row,)), "reject")

    @rule(unit=units, data=st.data())
    def complete(self, unit, data):
        o = self.oracle
        unit = self.steer(unit, o.units, data)
        if unit not in o.units:
            self.do("complete:stale", kt.Complete(unit=unit, commit=()), "reject")
            return
        spaces = o.units[unit]
        if data.draw(st.integers(0, 9)) == 9:  # an illegal commit: beyond the written extent (UNIT-2)
            s = data.draw(st.sampled_from(spaces))
            end = s.write[1] if s.write else s.frontier
            ev = kt.Complete(unit=unit, commit=(kt.CommitRow(seq=s.owner, pool=s.pool, frontier=end + 1),))
            self.do("complete:beyond-written", ev, "reject")
            return
        commits = []
        for s in spaces:
            end = s.write[1] if s.write else s.frontier
            f = end if data.draw(st.booleans()) else data.draw(st.integers(s.frontier, end))
            commits.append((s.owner, s.pool, f))
        self.commit(unit, commits, "complete")

    def fresh_keys(self, seq, pool, lo, keys) -> None:
        """New content never repeats content another live continuation holds at the same position."""
        for kind, owner, p, s in self.oracle.live_spaces():
            if p != pool or (kind == "seq" and owner == seq):
                continue
            for i, k in enumerate(keys):
                if lo + i < len(s.content) and s.content[lo + i] == k:
                    self.fail("content", f"{seq} ({pool}) committed position {lo + i} with the content key {kind} "
                              f"{owner} holds there (a write must be new content)")

    @rule(unit=units, data=st.data())
    def fail_unit(self, unit, data):
        unit = self.steer(unit, self.oracle.units, data)
        if unit not in self.oracle.units:
            self.do("fail:stale", kt.Fail(unit=unit), "reject")
            return
        self.do("fail", kt.Fail(unit=unit), "ok")
        self.oracle.fail(unit)

    # -- truncate, finish, release --------------------------------------------------------------------
    @rule(seq=seqs, data=st.data())
    def truncate(self, seq, data):
        seq = self.steer(seq, self.oracle.seqs, data)
        q = self.live_seq(seq)
        pool = data.draw(st.sampled_from(self.pools))
        if q is None:
            self.do("truncate:stale", kt.Truncate(seq=seq, pool=pool, frontier=0), "reject")
            return
        s = q.spaces[pool]
        if s.unit is not None:  # never trims a unit's mappings before it settles (UNIT-4)
            self.do("truncate:in-flight", kt.Truncate(seq=seq, pool=pool, frontier=s.frontier), "reject")
            return
        how = data.draw(st.integers(0, 9))
        if how == 9:
            self.do("truncate:forward", kt.Truncate(seq=seq, pool=pool, frontier=s.frontier + 1), "reject")
            return
        f = s.frontier if how < 4 else data.draw(st.integers(0, s.frontier))  # settle (trim) or destructive
        self.do("truncate:settle" if f == s.frontier else "truncate", kt.Truncate(seq=seq, pool=pool, frontier=f), "ok")
        self.oracle.truncate(seq, pool, f)

    @rule(target=ckpts, seq=seqs, retain=st.booleans(), how=st.integers(0, 9), data=st.data())
    def finish(self, seq, retain, how, data):
        o = self.oracle
        seq = self.steer(seq, o.seqs, data)
        if seq not in o.seqs:
            self.do("finish:stale", kt.Finish(seq=seq), "reject")
            return multiple()
        if self.busy(seq):
            self.do("finish:in-flight", kt.Finish(seq=seq), "reject")
            return multiple()
        if retain and how == 9:
            self.do("finish:no-state-image", kt.Finish(seq=seq, retain=self.fresh("k"), state_image=False), "reject")
            return multiple()
        if retain and how == 8 and o.ckpts:
            self.do("finish:retain-live-id", kt.Finish(seq=seq, retain=sorted(o.ckpts)[0]), "reject")
            return multiple()
        ck = self.fresh("k") if retain else None
        self.do("finish:retain" if retain else "finish", kt.Finish(seq=seq, retain=ck), "ok")
        o.finish(seq, ck)
        return ck if ck else multiple()

    @rule(ck=ckpts, data=st.data())
    def release(self, ck, data):
        o = self.oracle
        ck = self.steer(ck, o.ckpts, data)
        if ck not in o.ckpts:
            self.do("release:" + ("double" if ck in o.released else "moved"), kt.Release(ckpt=ck), "reject")
            return
        self.do("release", kt.Release(ckpt=ck), "ok")
        o.release(ck)

    # -- Host tier ------------------------------------------------------------------------------------
    def pick_blocks(self, ck, data):
        """(pool, blocks, out_of_range) of a live checkpoint."""
        pools = [p for p in self.pools if self.oracle.ckpts[ck][p].blocks] or list(self.pools)
        pool = data.draw(st.sampled_from(pools))
        n = len(self.oracle.ckpts[ck][pool].blocks)
        if n == 0 or data.draw(st.integers(0, 15)) == 15:
            return pool, [n], True
        return pool, data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=3, unique=True)), False

    @rule(ck=ckpts, data=st.data())
    def offload(self, ck, data):
        o = self.oracle
        ck = self.steer(ck, o.ckpts, data)
        if ck not in o.ckpts:
            self.do("offload:stale", kt.Offload(ckpt=ck, pool="main", blocks=(0,)), "reject")
            return
        pool, blocks, bad = self.pick_blocks(ck, data)
        ev = kt.Offload(ckpt=ck, pool=pool, blocks=tuple(blocks))
        objs = [] if bad else [o.ckpts[ck][pool].blocks[b] for b in blocks]
        if bad or any(b.pins for b in objs) or not all(b.dev for b in objs):
            self.do("offload:illegal", ev, "reject")
            return
        need = len(o.offload_todo(ck, pool, blocks)) * o.f.page_bytes[pool]
        if need > o.host_free():  # free bytes alone cannot hold it: the arena must refuse (REP-3)
            self.do("offload:arena-full", ev, "reject")
        elif self.do("offload", ev, "either"):
            o.offload(ck, pool, blocks)

    @precondition(lambda self: self.driver is not None and self.oracle.f.host_bytes and self.oracle.ckpts)
    @rule(data=st.data())
    def evict(self, data):
        """Offload a checkpoint's idle pages and drop their Device replicas (a later activation restores them),
        or bring Host-only pages back by a phase-by-phase h2d transfer."""
        o = self.oracle
        ck = data.draw(st.sampled_from(sorted(o.ckpts)))
        pool = data.draw(st.sampled_from(self.pools))
        blocks = o.ckpts[ck][pool].blocks
        idle = [i for i, b in enumerate(blocks) if b.dev and not b.pins and not b.active_holders]
        away = [i for i, b in enumerate(blocks) if not b.dev and not b.pins and b.host_current]
        if away and data.draw(st.booleans()):
            picks = data.draw(st.lists(st.sampled_from(away), min_size=1, max_size=3, unique=True))
            if len(picks) > o.available(pool):
                return
            xid = self.fresh("x")
            base = dict(xfer=xid, dir="h2d", ckpt=ck, pool=pool, blocks=tuple(picks))
            self.do("evict:h2d-reserve", kt.Xfer(**base, phase="reserve"), "ok")
            o.xfer_reserve(xid, "h2d", ck, pool, picks)
            for phase in ("copy", "verify", "publish", "release_source"):
                self.do(f"evict:h2d-{phase}", kt.Xfer(**base, phase=phase), "ok")
                o.xfer_phase(xid, phase)
            return
        if not idle:
            return
        picks = data.draw(st.lists(st.sampled_from(idle), min_size=1, max_size=4, unique=True))
        if len(o.offload_todo(ck, pool, picks)) * o.f.page_bytes[pool] > o.host_free():
            return
        if not self.do("evict:offload", kt.Offload(ckpt=ck, pool=pool, blocks=tuple(picks)), "either"):
            return
        o.offload(ck, pool, picks)
        self.do("evict:drop_device", kt.DropDevice(ckpt=ck, pool=pool, blocks=tuple(picks)), "ok")
        o.drop_device(ck, pool, picks)

    @rule(ck=ckpts, data=st.data())
    def drop_device(self, ck, data):
        o = self.oracle
        ck = self.steer(ck, o.ckpts, data)
        if ck not in o.ckpts:
            self.do("drop_device:stale", kt.DropDevice(ckpt=ck, pool="main", blocks=(0,)), "reject")
            return
        pool, blocks, bad = self.pick_blocks(ck, data)
        ev = kt.DropDevice(ckpt=ck, pool=pool, blocks=tuple(blocks))
        objs = [] if bad else [o.ckpts[ck][pool].blocks[b] for b in blocks]
        legal = not bad and all(b.dev and not b.pins and not b.active_holders and b.host_current for b in objs)
        if self.do("drop_device" if legal else "drop_device:illegal", ev, "ok" if legal else "reject") and legal:
            o.drop_device(ck, pool, blocks)

    @rule(ck=ckpts, data=st.data())
    def drop_host(self, ck, data):
        o = self.oracle
        ck = self.steer(ck, o.ckpts, data)
        if ck not in o.ckpts:
            self.do("drop_host:stale", kt.DropHost(ckpt=ck, pool="main", blocks=(0,)), "reject")
            return
        pool, blocks, bad = self.pick_blocks(ck, data)
        ev = kt.DropHost(ckpt=ck, pool=pool, blocks=tuple(blocks))
        objs = [] if bad else [o.ckpts[ck][pool].blocks[b] for b in blocks]
        legal = not bad and all(b.host is not None and b.dev and not b.pins for b in objs)
        if self.do("drop_host" if legal else "drop_host:illegal", ev, "ok" if legal else "reject") and legal:
            o.drop_host(ck, pool, blocks)

    @rule(target=xfers, ck=ckpts, d2h=st.booleans(), data=st.data())
    def xfer_reserve(self, ck, d2h, data):
        o = self.oracle
        ck = self.steer(ck, o.ckpts, data)
        direction = "d2h" if d2h else "h2d"
        xid = self.fresh("x")
        if ck not in o.ckpts:
            ev = kt.Xfer(xfer=xid, dir=direction, ckpt=ck, pool="main", blocks=(0,), phase="reserve")
            self.do("xfer:stale", ev, "reject")
            return multiple()
        pool, blocks, bad = self.pick_blocks(ck, data)
        ev = kt.Xfer(xfer=xid, dir=direction, ckpt=ck, pool=pool, blocks=tuple(blocks), phase="reserve")
        objs = [] if bad else [o.ckpts[ck][pool].blocks[b] for b in blocks]
        if d2h:
            legal = not bad and all(b.dev and not b.pins for b in objs)
            arena = legal and len(objs) * o.f.page_bytes[pool] > o.host_free()
        else:
            legal = (not bad and all(b.host_current and not b.dev and not b.pins for b in objs)
                     and len(objs) <= o.available(pool))
            arena = False
        if not legal or arena:
            self.do(f"xfer:{direction}-{'arena-full' if arena else 'illegal'}", ev, "reject")
            return multiple()
        if not self.do(f"xfer:{direction}-reserve", ev, "either" if d2h else "ok"):
            return multiple()
        o.xfer_reserve(xid, direction, ck, pool, blocks)
        return xid

    @rule(x=xfers, data=st.data())
    def xfer_next(self, x, data):
        o = self.oracle
        x = self.steer(x, o.xfers, data)
        if x not in o.xfers:
            ev = kt.Xfer(xfer=x, dir="d2h", ckpt="k0", pool="main", blocks=(0,), phase="copy")
            self.do("xfer:ended", ev, "reject")
            return
        xo = o.xfers[x]
        nxt = o.next_phase(x)
        base = dict(xfer=x, dir=xo.direction, ckpt=xo.ckpt, pool=xo.pool, blocks=tuple(xo.indices))
        if data.draw(st.integers(0, 7)) == 7:  # out of the publication order (REP-1)
            wrong = data.draw(st.sampled_from([p for p in ("reserve", "copy", "verify", "publish", "release_source")
                                               if p != nxt and p != "reserve"]))
            self.do("xfer:out-of-order", kt.Xfer(**base, phase=wrong), "reject")
            return
        ev = kt.Xfer(**base, phase=nxt)
        if nxt == "release_source" and xo.direction == "d2h" and any(b.alive and b.active_holders for b in xo.blocks):
            self.do("xfer:release-referenced-source", ev, "reject")  # REP-4
            return
        self.do(f"xfer:{nxt}", ev, "ok")
        o.xfer_phase(x, nxt)


def _fits(s, kind: str) -> bool:
    if kind == "below":
        return s.frontier > 0
    if kind == "gap":
        return len(s.blocks) * P > s.frontier
    if kind == "shared":
        return s.frontier // P < len(s.blocks) and not s.private(s.frontier // P)
    return True


def _fields(ev) -> dict:
    return {f: getattr(ev, f) for f in ev.__struct_fields__}


class HostMachine(StoreMachine):
    """The Host arena and replica publication under interleaved transfers, drops and restores: small
    arenas (one to three pages of the widest stride, an odd remainder) and Host rules drawn twice as often."""

    name = "host"
    config_strategy = configs(host_pages=st.sampled_from((1, 2, 3, 4)))

    @initialize(cfg=config_strategy)
    def setup(self, cfg):
        self.start(cfg)

    @rule(ck=StoreMachine.ckpts, data=st.data())
    def offload_again(self, ck, data):
        self.offload(ck, data)

    @rule(ck=StoreMachine.ckpts, data=st.data())
    def drop_device_again(self, ck, data):
        self.drop_device(ck, data)

    @rule(ck=StoreMachine.ckpts, data=st.data())
    def drop_host_again(self, ck, data):
        self.drop_host(ck, data)

    @rule(x=StoreMachine.xfers, data=st.data())
    def xfer_next_again(self, x, data):
        self.xfer_next(x, data)
