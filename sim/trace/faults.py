"""Engine faults: realistic bug classes of KV-cache stores, injected into a generated workload.

Each fault is a record (name, the rule the replay must report, the bug class it models, the configuration
features it needs) plus an *episode*: a short, self-contained request written into the middle of a legal
generated workload (`sim.trace.generate`) in which exactly one event is the engine's bug. Episodes use
their own sequence, checkpoint, unit and transfer ids (`f…`) and end with everything they hold released.
After the bad event they continue as the engine would under replay's error recovery (sim.recovery): where
the engine's claim fixes the state (a commit or write inside the sequence's own mapped pages, a retain),
replay adopts it and the episode goes on from it; elsewhere the fact is not applied and the events after it
are the engine's correct retry or its ordinary continuation. The fault model is data (FAULTS); the seed of
the generator chooses where the episode lands.

Where an episode must name page ids (a stale table, a page handed out twice, a fork's page list) the engine
chooses them from the top of the Main pool, `Episode.top`: the background workload holds at most
(C - 1)·L pages and the store hands out the lowest free id first, so those ids are free until the episode
leases them (the model adopts an engine's choice after checking it is free).
The simulation (`sim.simulate.inject`) injects the same episodes into a running workload, renaming their
ids per injection and taking the highest page ids the live pool has free. Episodes write every pool of the
configuration (`Episode.pools`): under MTP a unit writes both pools and a root activation's result lists no
page in either; the two fork episodes that name Main's page table only are not MTP episodes.
This module knows the kvtrace/1 vocabulary and the contract's arithmetic, never the model's internals.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kvsim.kvmodel.store.errors import InvariantError
from kvsim.sim.trace.stream import event_from_builtins

MTP_DRAFT_WINDOW = 4


class Episode:
    """Writes one fault episode's events; remembers the index of the one bad event."""

    def __init__(self, put, pools: tuple[str, ...], capacity: int, max_context: int) -> None:
        self._put = put  # put(event) -> index of the event written
        self.pools = pools
        self.max_context = max_context
        self._next_top = capacity - 1
        self._n = {"s": 0, "c": 0, "u": 0, "x": 0}
        self.bad_event: int | None = None

    def new(self, kind: str) -> str:
        self._n[kind] += 1
        return f"f{kind}{self._n[kind] - 1}"

    def top(self, n: int) -> list[int]:
        """n page ids the engine chooses from the top of the Main pool (ascending)."""
        ids = list(range(self._next_top - n + 1, self._next_top + 1))
        self._next_top -= n
        return ids

    def ev(self, op: str, bad: bool = False, **fields) -> int:
        obj = {"op": op, **{k: v for k, v in fields.items() if v is not None}}
        index = self._put(event_from_builtins(obj))
        if bad:
            if self.bad_event is not None:
                raise InvariantError("an episode has exactly one bad event", f"a second at event {index}")
            self.bad_event = index
        return index

    # -- the engine's ordinary moves ------------------------------------------------------------
    def activate(self, seq, prompt, budget, src=None, keep=None, pages=None, bad: bool = False) -> int:
        # a root activation leases no page in any pool; a page list names Main's table
        result = None if pages is None else {"ok": True, "pages": {"main": list(pages)} if pages else
                                             {p: [] for p in self.pools}}
        return self.ev("activate", bad, seq=seq, prompt=prompt, budget=budget, keep_source=keep, result=result,
                       **{"from": src})

    def map(self, seq, tokens, pool: str = "main", pages=None, ok=None, bad: bool = False) -> int:
        result = {"ok": True, "pages": list(pages)} if pages is not None else ({"ok": True} if ok else None)
        return self.ev("map", bad, seq=seq, pool=pool, tokens=tokens, result=result)

    def launch(self, unit, seq, a, b, bad: bool = False) -> int:
        rows = [{"seq": seq, "pool": p, "write": [a, b]} for p in self.pools]
        return self.ev("launch", bad, unit=unit, rows=rows)

    def complete(self, unit, seq, frontier, bad: bool = False) -> int:
        return self.ev("complete", bad, unit=unit, commit=[{"seq": seq, "pool": p, "frontier": frontier}
                                                           for p in self.pools])

    def step(self, seq, a, b, pages=None) -> None:
        """Map up to b (Main pages chosen by the engine when given), then one unit writing [a, b)."""
        for p in self.pools:
            self.map(seq, b, p, pages=pages if p == "main" else None)
        u = self.new("u")
        self.launch(u, seq, a, b)
        self.complete(u, seq, b)

    def checkpoint(self, tokens: int, pages=None) -> str:
        """A request prefills `tokens` and is retained; returns the checkpoint id."""
        seq, ckpt = self.new("s"), self.new("c")
        self.activate(seq, tokens, 24, pages=[] if pages is not None else None)
        self.step(seq, 0, tokens, pages)
        self.ev("finish", seq=seq, retain=ckpt)
        return ckpt

    def xfer(self, xid, ckpt, blocks, phase, bad: bool = False) -> int:
        return self.ev("xfer", bad, xfer=xid, dir="d2h", ckpt=ckpt, pool="main", blocks=list(blocks), phase=phase)


# -- the episodes: each docstring names the bug class (research/anchors.md §4) ---------------------------

def stale_table_after_truncate(e: Episode) -> None:
    """After a truncate released blocks 4..6 the engine's table still maps them (vllm#42273)."""
    s, ids = e.new("s"), e.top(7)
    e.activate(s, 300, 200, pages=[])
    e.step(s, 0, 300, ids[:5])
    e.step(s, 300, 400, ids[5:])
    e.ev("truncate", seq=s, pool="main", frontier=200)
    e.ev("observe", True, seq=s, pool="main", table=ids)
    e.ev("finish", seq=s)


def double_release(e: Episode) -> None:
    """A retained checkpoint is released twice (vllm#1556 "Double free!")."""
    c = e.checkpoint(300)
    e.ev("release", ckpt=c)
    e.ev("release", True, ckpt=c)


def publish_before_copy(e: Episode) -> None:
    """A D2H replica is published before its payload was copied (vllm PR #46278: no stream barrier)."""
    c, x = e.checkpoint(200), e.new("x")
    e.xfer(x, c, range(4), "reserve")
    e.xfer(x, c, range(4), "publish", bad=True)
    for phase in ("copy", "verify", "publish", "release_source"):
        e.xfer(x, c, range(4), phase)
    e.ev("release", ckpt=c)


def release_source_before_publish(e: Episode) -> None:
    """The D2H transfer frees the Device source before the Host replica is published (publication order)."""
    c, x = e.checkpoint(200), e.new("x")
    for phase in ("reserve", "copy", "verify"):
        e.xfer(x, c, range(4), phase)
    e.xfer(x, c, range(4), "release_source", bad=True)
    e.xfer(x, c, range(4), "publish")
    e.xfer(x, c, range(4), "release_source")
    e.ev("release", ckpt=c)


def reuse_during_inflight_transfer(e: Episode) -> None:
    """A block's Device page is evicted while a D2H copy of it is in flight (vllm#46951)."""
    c, x = e.checkpoint(200), e.new("x")
    e.xfer(x, c, range(4), "reserve")
    e.xfer(x, c, range(4), "copy")
    e.ev("drop_device", True, ckpt=c, pool="main", blocks=[1])
    for phase in ("verify", "publish", "release_source"):
        e.xfer(x, c, range(4), phase)
    e.ev("release", ckpt=c)


def host_only_last_replica_dropped(e: Episode) -> None:
    """After the Device copies were dropped, the Host copy of a block is dropped too (vllm#42571)."""
    c = e.checkpoint(200)
    e.ev("offload", ckpt=c, pool="main", blocks=[0, 1, 2, 3])
    e.ev("drop_device", ckpt=c, pool="main", blocks=[0, 1, 2, 3])
    e.ev("drop_host", True, ckpt=c, pool="main", blocks=[2])
    e.ev("release", ckpt=c)


def no_reference_on_fork(e: Episode) -> None:
    """Fork takes no reference on the shared pages: after the checkpoint's release the engine hands one of
    them, still carried by the fork, to another request (vllm#37076 use-after-free)."""
    ids = e.top(18)
    c = e.checkpoint(1024, ids[:16])
    f, g = e.new("s"), e.new("s")
    e.activate(f, 1024, 64, src=c)
    e.ev("release", ckpt=c)
    e.activate(g, 100, 28, pages=[])
    e.map(g, 100, pages=[ids[0], ids[16]], bad=True)
    e.step(g, 0, 100, ids[16:])
    e.ev("finish", seq=g)
    e.ev("finish", seq=f)


def cow_skipped_for_partial_tail(e: Episode) -> None:
    """Fork maps the source's partial tail page instead of a private copy (missing COW)."""
    ids = e.top(16)
    c = e.checkpoint(1000, ids)
    f = e.new("s")
    e.activate(f, 1000, 64, src=c, pages=ids, bad=True)
    e.activate(f, 1000, 64, src=c)
    e.step(f, 1000, 1001)
    e.ev("finish", seq=f)
    e.ev("release", ckpt=c)


def fork_drops_partial_tail(e: Episode) -> None:
    """Fork maps only the source's full pages, as if F were rounded down to a page boundary."""
    ids = e.top(16)
    c = e.checkpoint(1000, ids)
    f = e.new("s")
    e.activate(f, 1000, 64, src=c, pages=ids[:15], bad=True)
    e.activate(f, 1000, 64, src=c)
    e.step(f, 1000, 1001)
    e.ev("finish", seq=f)
    e.ev("release", ckpt=c)


def fork_frontier_rounded_to_page(e: Episode) -> None:
    """The engine reports a fork of F = 1000 at frontier 960."""
    c, f = e.checkpoint(1000), e.new("s")
    e.activate(f, 1000, 64, src=c)
    e.ev("observe", True, seq=f, pool="main", frontier=960)
    e.step(f, 1000, 1001)
    e.ev("finish", seq=f)
    e.ev("release", ckpt=c)


def writer_not_cleared_at_finish(e: Episode) -> None:
    """The finished request is still its tail page's writer: the next batch appends through its row."""
    c, s = e.new("c"), e.new("s")
    e.activate(s, 200, 24)
    e.step(s, 0, 200)
    e.ev("finish", seq=s, retain=c)
    e.launch(e.new("u"), s, 200, 201, bad=True)
    e.ev("release", ckpt=c)


def released_checkpoint_still_indexed(e: Episode) -> None:
    """A prefix index still lists a released checkpoint and activates a request from it."""
    c, s = e.checkpoint(300), e.new("s")
    e.ev("release", ckpt=c)
    e.activate(s, 320, 64, src=c, bad=True)
    e.activate(s, 320, 64)
    e.step(s, 0, 320)
    e.ev("finish", seq=s)


def mtp_lead_beyond_l(e: Episode) -> None:
    """MTP's draft pages lead Main's by ceil((K-1)/P) past the L-page ceiling."""
    s, S = e.new("s"), e.max_context
    e.activate(s, 100, S - 100)
    e.step(s, 0, 100)
    e.map(s, S + MTP_DRAFT_WINDOW - 1, "mtp", ok=True, bad=True)
    e.ev("finish", seq=s)


def growth_inside_step(e: Episode) -> None:
    """kv_lease_growth extends the window while the request's unit is in flight."""
    s, u = e.new("s"), e.new("u")
    e.activate(s, 300, 100)
    e.map(s, 300)
    e.launch(u, s, 0, 300)
    e.ev("grow", True, seq=s)
    e.complete(u, s, 300)
    e.ev("grow", seq=s)
    e.ev("finish", seq=s)


def commit_beyond_written(e: Episode) -> None:
    """A verify unit wrote [0, 100) but the engine publishes frontier 102."""
    s, u = e.new("s"), e.new("u")
    e.activate(s, 100, 28)
    for p in e.pools:
        e.map(s, 100, p)
    e.launch(u, s, 0, 100)
    e.complete(u, s, 102, bad=True)  # replay adopts the published frontier (it lies in the mapped pages)
    e.ev("finish", seq=s)


def rewrite_committed_position(e: Episode) -> None:
    """Off-by-one decode position: the step writes [99, 101) over committed position 99."""
    s, u = e.new("s"), e.new("u")
    e.activate(s, 100, 28)
    e.step(s, 0, 100)
    e.launch(u, s, 99, 101, bad=True)  # replay adopts the launch: the unit runs, as the engine says
    e.complete(u, s, 101)
    e.ev("finish", seq=s)


def map_while_unit_in_flight(e: Episode) -> None:
    """The next prefill chunk is materialized and the row republished while the row's unit is in flight."""
    s, u = e.new("s"), e.new("u")
    e.activate(s, 300, 100)
    for p in e.pools:
        e.map(s, 128, p)
    e.launch(u, s, 0, 128)
    e.map(s, 256, bad=True)
    e.complete(u, s, 128)
    e.step(s, 128, 256)
    e.ev("finish", seq=s)


def decode_skips_a_position(e: Episode) -> None:
    """A decode step writes position F + 1 while the frontier is F: it reads a position nobody wrote."""
    s, u = e.new("s"), e.new("u")
    e.activate(s, 130, 24)
    e.step(s, 0, 130)
    e.launch(u, s, 131, 132, bad=True)  # replay adopts the launch: the unit runs, as the engine says
    e.ev("fail", unit=u)  # and the engine drops its result
    u2 = e.new("u")
    e.launch(u2, s, 130, 131)
    e.complete(u2, s, 131)
    e.ev("finish", seq=s)


def retain_without_state_image(e: Episode) -> None:
    """The request is retained although its StateImage was not saved: no complete continuation."""
    s = e.new("s")
    e.activate(s, 300, 20)
    e.step(s, 0, 300)
    c = e.new("c")
    e.ev("finish", True, seq=s, retain=c, state_image=False)  # replay adopts the retained checkpoint
    e.ev("release", ckpt=c)


@dataclass(frozen=True)
class Fault:
    """One engine bug class: the rule replay must report at the bad event, and what the episode needs."""

    name: str
    rule: str
    episode: Callable[[Episode], None]
    needs: frozenset = frozenset()  # of "host", "mtp", "growth"

    @property
    def bug(self) -> str:
        return (self.episode.__doc__ or "").split("\n")[0].strip()


def _f(name, rule, episode, *needs) -> Fault:
    return Fault(name, rule, episode, frozenset(needs))


FAULTS: dict[str, Fault] = {f.name: f for f in (
    _f("stale-table-after-truncate", "PAGE-2", stale_table_after_truncate),
    _f("double-release", "CKPT-2", double_release),
    _f("publish-before-copy", "REP-1", publish_before_copy, "host"),
    _f("release-source-before-publish", "REP-1", release_source_before_publish, "host"),
    _f("reuse-during-inflight-transfer", "REP-2", reuse_during_inflight_transfer, "host"),
    _f("host-only-last-replica-dropped", "REP-4", host_only_last_replica_dropped, "host"),
    _f("no-reference-on-fork", "PAGE-1", no_reference_on_fork),
    _f("cow-skipped-for-partial-tail", "CKPT-3", cow_skipped_for_partial_tail),
    _f("fork-drops-partial-tail", "WR-4", fork_drops_partial_tail),
    _f("fork-frontier-rounded-to-page", "AS-2", fork_frontier_rounded_to_page),
    _f("writer-not-cleared-at-finish", "TRACE-2", writer_not_cleared_at_finish),
    _f("released-checkpoint-still-indexed", "CKPT-2", released_checkpoint_still_indexed),
    _f("mtp-lead-beyond-l", "ENT-2", mtp_lead_beyond_l, "mtp"),
    _f("growth-inside-step", "ENT-3", growth_inside_step, "growth"),
    _f("commit-beyond-written", "UNIT-2", commit_beyond_written),
    _f("rewrite-committed-position", "UNIT-3", rewrite_committed_position),
    _f("map-while-unit-in-flight", "UNIT-1", map_while_unit_in_flight),
    _f("decode-skips-a-position", "CONS-1", decode_skips_a_position),
    _f("retain-without-state-image", "CKPT-1", retain_without_state_image),
)}
