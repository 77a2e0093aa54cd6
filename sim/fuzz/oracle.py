"""The abstract oracle: what every sequence and checkpoint must hold, and what every pool must count.

A deliberately naive description of the store contract, kept beside the model and compared with it
after every step (`sim.fuzz.refine`). It has no physical ids, no epochs, no generations, no arena
geometry and no tables. It holds:

- every active sequence and every retained checkpoint, per pool, as a list of content (the key of each
  committed position, learned from the model the moment a unit commits it, then owned here: Fork copies
  the list, truncate cuts it, Move hands it over, nothing else may change it);
- per pool, the accounting: each active space's entitlement (membership + reservation, store contract
  "KVAddressSpace" / "kv_lease_growth"), and the leases counted as distinct pages: a page is an identity
  (`Block`) shared by its holders, with a Device residency, an optional Host copy stamped with the
  block's content version at publication, and transfer pins.

It also decides what a correct store must do with each request and fact (refuse or grant a request;
accept or reject a fact), so a fuzzing machine can steer by it rather than by the model under test.
The decisions the seed leaves open follow the rule catalogue's recorded decisions (Move/Fork, the
re-reservation of unmapped shared members, growth rungs, bounded completion).
This module must not know how the model stores anything: it never imports the model. Its decision points
count their visits (`sim.fuzz.stats.reached("store:...")`), so a campaign shows which branches it reached.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvsim.sim.fuzz.stats import declare, reached

P = 64  # "每个 growing pool 为 P=64"


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class Facts:
    """The configuration facts the oracle needs (all taken from the trace header, never from the model)."""

    max_context: int
    max_concurrency: int
    capacity: dict  # pool -> pages
    page_bytes: dict  # pool -> Host stride in bytes
    host_bytes: int
    backend_pool: str | None
    draft_window: int = 0
    growth_window: int | None = None  # tokens: max(prefill_chunk, window); None = kv_lease_growth off
    cushion: int = 0
    speculative: bool = False  # a speculative backend is selected (UNIT-4: only its rounds map provisionally)

    @property
    def L(self) -> int:
        return ceil_div(self.max_context, P)

    @property
    def pools(self) -> tuple:
        return ("main",) if self.backend_pool is None else ("main", self.backend_pool)


BRANCHES = (
    "store:activate:root", "store:activate:fork", "store:activate:move", "store:activate:cow-tail",
    "store:activate:restore", "store:refuse:context", "store:refuse:frontier", "store:refuse:busy-restore",
    "store:refuse:capacity", "store:refuse:busy-pinned", "store:refuse:rows", "store:map:entitlement",
    "store:map:busy", "store:map:granted", "store:grow:disabled", "store:grow:bounded", "store:grow:granted",
    "store:grow:capacity", "store:cow:noop", "store:cow:capacity", "store:cow:busy", "store:cow:granted",
    "store:finish:retain", "store:finish:release", "store:release", "store:offload", "store:offload:replace-stale",
    "store:drop-device", "store:drop-host", "store:xfer:d2h", "store:xfer:h2d", "store:xfer:copy",
    "store:xfer:publish", "store:xfer:release-source", "store:xfer:verify-stale", "store:xfer:abandon",
)
declare(BRANCHES)


def refuse(reason: str) -> str:
    reached(f"store:refuse:{reason}")
    return reason


class Block:
    """One logical page as an identity: who holds it, where its replicas are, how far it is committed."""

    _n = 0
    __slots__ = ("n", "holders", "dev", "host", "version", "cols", "pins", "alive", "drained")

    def __init__(self, cols: int = 0) -> None:
        Block._n += 1
        self.n = Block._n
        self.holders: list = []
        self.dev = True  # a Device replica (always current: writes, cuts and restores keep it so)
        self.host = None  # the content version the Host copy was taken at, or None
        self.version = Block._n * 1000  # bumped whenever the committed columns change
        self.cols = cols  # committed columns (the longest holder's)
        self.pins = 0
        self.alive = True
        self.drained = False  # its lease already went back to a reservation while a copy pins it

    def set_cols(self, cols: int) -> None:
        if cols != self.cols:
            self.cols = cols
            self.version += 1

    @property
    def host_current(self) -> bool:
        return self.host is not None and self.host == self.version

    @property
    def active_holders(self) -> int:
        return sum(1 for s in self.holders if s.active)


@dataclass(eq=False)
class Space:
    """One continuation's content and membership in one pool (an active sequence's or a checkpoint's)."""

    pool: str
    owner: str
    content: list = field(default_factory=list)  # content key per committed position
    blocks: list = field(default_factory=list)  # membership: logical block -> Block
    reservation: int = 0  # active only: pages guaranteed, not yet mapped
    active: bool = True
    unit: str | None = None  # the in-flight unit it is a row of
    write: tuple | None = None  # that row's written [a, b), None for a read-only row
    provisional: int = 0  # tokens mapped for a stage not yet launched (UNIT-4: not trimmed before it runs)

    @property
    def frontier(self) -> int:
        return len(self.content)

    @property
    def entitlement(self) -> int:
        return len(self.blocks) + self.reservation

    def private(self, b: int) -> bool:
        """This space alone may write block b (sole, active holder)."""
        return b < len(self.blocks) and self.blocks[b].holders == [self] and self.active


@dataclass(eq=False)
class Seq:
    seq: str
    spaces: dict
    ceiling: int
    bounded_at: int | None = None
    prompt: int = 0


@dataclass(eq=False)
class Xfer:
    xid: str
    direction: str
    ckpt: str
    pool: str
    blocks: list  # Block objects
    indices: list  # their logical block numbers
    phase: str = "reserve"
    snap: list = field(default_factory=list)  # versions copied
    dest_leases: int = 0  # h2d: Device leases taken at reserve, not yet published


PHASES = ("reserve", "copy", "verify", "publish", "release_source")


class Oracle:
    def __init__(self, facts: Facts) -> None:
        self.f = facts
        self.seqs: dict[str, Seq] = {}
        self.ckpts: dict[str, dict] = {}  # ckpt -> {pool: Space}
        self.ended_seqs: set = set()
        self.released: set = set()
        self.moved: set = set()
        self.units: dict[str, list] = {}  # unit -> [Space]
        self.xfers: dict[str, Xfer] = {}
        self.ended_xfers: set = set()
        self.blocks: dict[str, list] = {p: [] for p in facts.pools}  # every live Block, per pool
        self.host_used = 0

    # -- accounting ---------------------------------------------------------------------------------
    def allocated(self, pool: str) -> int:
        return (sum(1 for b in self.blocks[pool] if b.dev and not b.drained)
                + sum(x.dest_leases for x in self.xfers.values() if x.pool == pool))

    def reserved(self, pool: str) -> int:
        return sum(s.spaces[pool].reservation for s in self.seqs.values())

    def available(self, pool: str) -> int:
        return self.f.capacity[pool] - self.allocated(pool) - self.reserved(pool)

    def counters(self, pool: str) -> dict:
        return {"allocated": self.allocated(pool), "reserved": self.reserved(pool), "available": self.available(pool)}

    def live_spaces(self):
        """(kind, owner, pool, Space) of every active sequence and retained checkpoint, in a fixed order."""
        for name in sorted(self.seqs):
            for pool, s in self.seqs[name].spaces.items():
                yield "seq", name, pool, s
        for name in sorted(self.ckpts):
            for pool, s in self.ckpts[name].items():
                yield "ckpt", name, pool, s

    # -- pages: the few ways a page comes and goes ----------------------------------------------------
    def _new_block(self, pool: str, holder: Space, cols: int = 0) -> Block:
        b = Block(cols)
        b.holders.append(holder)
        self.blocks[pool].append(b)
        return b

    def _drop_holder(self, blk: Block, space: Space, to_reservation: bool = False) -> None:
        """One reference goes; the last one takes the replicas (a freed lease into the same reservation when
        active; also for a page a copy pins, whose page group stays the copy's until publish). A page others
        still hold frees no lease: the entitlement shrinks by it (ENT-4's entry)."""
        blk.holders.remove(space)
        if not blk.holders:
            if blk.dev and blk.pins == 0:
                blk.dev = False
                if to_reservation:
                    space.reservation += 1
            elif blk.dev and to_reservation and not blk.drained:  # a copy pins it: the lease goes back to the
                blk.drained = True  # same reservation at once, the page group stays the copy's (ENT-4, decision 26)
                space.reservation += 1
            self._maybe_reclaim(blk, space.pool)
            return
        if len(blk.holders) == 1 and blk.holders[0].active:
            self._make_private(blk, blk.holders[0])

    def _make_private(self, blk: Block, holder: Space) -> None:
        b = holder.blocks.index(blk)
        cols = min(max(holder.frontier - b * P, 0), P)
        if blk.cols > cols:
            blk.set_cols(cols)

    def _maybe_reclaim(self, blk: Block, pool: str) -> None:
        if blk.holders or blk.pins:
            return
        blk.dev = False
        if blk.host is not None:
            self.host_used -= self.f.page_bytes[pool]
            blk.host = None
        blk.alive = False
        self.blocks[pool].remove(blk)

    def _cut_to(self, space: Space, frontier: int) -> None:
        keep = ceil_div(frontier, P)
        while len(space.blocks) > keep:
            self._drop_holder(space.blocks.pop(), space, to_reservation=space.active)
        if frontier % P and keep:
            last = space.blocks[keep - 1]
            if len(last.holders) == 1 and last.cols > frontier % P:
                last.set_cols(frontier % P)
        del space.content[frontier:]

    def _release_space(self, space: Space) -> None:
        while space.blocks:
            self._drop_holder(space.blocks.pop(), space)

    # -- requests: a plan (None = granted, else the refusal) then the application -------------------------
    def entitlements(self, prompt: int, ceiling: int) -> dict:
        f = self.f
        pages = ceil_div(ceiling, P)
        main = pages if f.growth_window is None else min(pages, ceil_div(min(ceiling, prompt + f.growth_window), P)
                                                         + f.cushion)
        return self._backend(main)

    def _backend(self, main: int) -> dict:
        out = {"main": main}
        if self.f.backend_pool == "mtp":
            out["mtp"] = min(self.f.L, main + ceil_div(self.f.draft_window - 1, P))
        elif self.f.backend_pool == "draft_full":
            out["draft_full"] = main
        return out

    def plan_activate(self, prompt: int, budget: int, src: str | None, keep: bool):
        """The refusal reason, or (ceiling, {pool: (members, cows, restores, reservation)})."""
        f = self.f
        if prompt > f.max_context:  # "不会扩大单 sequence 的 logical ceiling (S)"; the budget is clamped
            return refuse("context")  # to the effective output budget min(budget, S - prompt) (AS-6 decision 18)
        ceiling = min(f.max_context, prompt + budget)
        ck = self.ckpts.get(src) if src is not None else None
        if ck is not None:
            if ck["main"].frontier > prompt:
                return refuse("frontier")
            if any(b.pins and not b.dev for s in ck.values() for b in s.blocks):  # copy pins allow reading;
                reached("store:refuse:busy-restore")
                return "busy"  # only a page whose Host-to-Device restore is in flight cannot be mapped yet
        ent = self.entitlements(prompt, ceiling)
        move = ck is not None and not keep
        plans = {}
        for pool in f.pools:
            members: list[tuple] = []
            cows = restores = 0
            if ck is not None:
                sp = ck[pool]
                tail = sp.frontier % P
                for i, blk in enumerate(sp.blocks):
                    refs_after = len(blk.holders) if move else len(blk.holders) + 1
                    if i == len(sp.blocks) - 1 and tail and refs_after > 1:
                        members.append(("cow", blk, tail))
                        cows += 1
                        reached("store:activate:cow-tail")
                    else:
                        members.append(("keep", blk))
                        restores += 0 if blk.dev else 1
            reservation = max(0, ent[pool] - len(members))
            if restores:
                reached("store:activate:restore")
            if restores + cows + reservation > self.available(pool):
                return refuse("capacity")
            if self.pinned_short(pool, restores + cows):
                reached("store:refuse:busy-pinned")
                return "busy"
            plans[pool] = (members, reservation)
        if len(self.seqs) >= f.max_concurrency:
            return refuse("rows")
        reached("store:activate:" + ("root" if ck is None else "move" if move else "fork"))
        return ceiling, plans, prompt

    def activate(self, seq: str, plan, src: str | None, keep: bool) -> None:
        ceiling, plans, prompt = plan
        ck = self.ckpts.get(src) if src is not None else None
        move = ck is not None and not keep
        spaces = {}
        for pool, (members, reservation) in plans.items():
            source = ck[pool] if ck is not None else None
            if move:
                if source is None:
                    raise ValueError("a Move activation needs its source checkpoint")
                space = source
                space.blocks, space.owner, space.active = [], seq, True
            else:
                space = Space(pool, seq, list(source.content) if source is not None else [])
            blocks = []
            for m in members:
                if m[0] == "cow":
                    blocks.append(self._new_block(pool, space, m[2]))
                    if move:
                        self._drop_holder(m[1], space)
                else:
                    blk = m[1]
                    blk.dev = True  # a restore from the Host copy, when it had none
                    if not move:
                        blk.holders.append(space)
                    blocks.append(blk)
            space.blocks = blocks
            space.reservation = reservation
            spaces[pool] = space
        self.seqs[seq] = Seq(seq, spaces, ceiling, prompt=prompt)
        self.ended_seqs.discard(seq)
        if move and src is not None:
            del self.ckpts[src]
            self.moved.add(src)

    def free_groups(self, pool: str) -> int:
        """Page groups a new lease can take: capacity minus the allocated ones and those whose lease went back
        to a reservation while a copy still pins them (ENT-4, decision 26)."""
        drained = sum(1 for b in self.blocks[pool] if b.dev and b.drained)
        return self.f.capacity[pool] - self.allocated(pool) - drained

    def pinned_short(self, pool: str, n: int) -> bool:
        """A request that needs n new page groups waits (`busy`) while only pinned ones are left."""
        return n > 0 and self.free_groups(pool) < n

    def plan_map(self, seq: str, pool: str, tokens: int):
        s = self.seqs[seq].spaces[pool]
        need = ceil_div(tokens, P)
        if need > len(s.blocks) and need > s.entitlement:
            reached("store:map:entitlement")
            return "entitlement"
        if need > len(s.blocks) and self.pinned_short(pool, need - len(s.blocks)):
            reached("store:map:busy")
            return "busy"
        reached("store:map:granted")
        return None

    def speculative_round(self, q: Seq, pool: str) -> bool:
        """A mapping now reaches a provisional frontier: a speculative backend, the prompt committed, not Draft
        Full (seed 000 L79, L195, L239-L241: only a verify's / the MTP lead's mappings are provisional; a prefill
        chunk mapped ahead may be trimmed)."""
        return self.f.speculative and pool != "draft_full" and q.spaces[pool].frontier >= q.prompt

    def map(self, seq: str, pool: str, tokens: int) -> None:
        q = self.seqs[seq]
        s = q.spaces[pool]
        speculative = self.speculative_round(q, pool)
        if ceil_div(tokens, P) <= len(s.blocks):
            if speculative and tokens > s.provisional and tokens > s.frontier:
                s.provisional = tokens
            return
        while len(s.blocks) < ceil_div(tokens, P):
            s.blocks.append(self._new_block(pool, s))
            s.reservation -= 1
        if speculative:
            s.provisional = max(s.provisional, tokens)

    def trims_provisional(self, seq: str, pool: str, frontier: int) -> bool:
        """A truncate to `frontier` would unmap blocks a provisional frontier still needs (UNIT-4: "不能为满足
        某个后续阶段更短的覆盖需求而提前裁剪 verify 的映射")."""
        s = self.seqs[seq].spaces[pool]
        return s.provisional > 0 and ceil_div(frontier, P) < min(len(s.blocks), ceil_div(s.provisional, P))

    def plan_grow(self, seq: str):
        """{pool: new entitlement}, or ("growth-disabled", None) / ("capacity", bounded_at)."""
        f, q = self.f, self.seqs[seq]
        if f.growth_window is None:
            reached("store:grow:disabled")
            return ("growth-disabled", None)
        main = q.spaces["main"]
        if q.bounded_at is not None:
            reached("store:grow:bounded")
            return ("capacity", q.bounded_at)
        pages = ceil_div(q.ceiling, P)
        for extra in (f.growth_window, 128, 64):
            want = ceil_div(min(q.ceiling, main.frontier + extra), P) + f.cushion
            target = self._backend(min(pages, max(main.entitlement, want)))
            target = {p: max(target[p], s.entitlement) for p, s in q.spaces.items()}
            if all(target[p] - s.entitlement <= self.available(p) for p, s in q.spaces.items()):
                reached("store:grow:granted")
                return target
        reached("store:grow:capacity")
        return ("capacity", min(q.ceiling, main.entitlement * P))

    def grow(self, seq: str, plan) -> None:
        q = self.seqs[seq]
        if isinstance(plan, tuple):
            if plan[1] is not None:
                q.bounded_at = plan[1]
            return
        for p, target in plan.items():
            q.spaces[p].reservation += target - q.spaces[p].entitlement

    def plan_cow(self, seq: str, pool: str, block: int):
        s = self.seqs[seq].spaces[pool]
        if len(s.blocks[block].holders) <= 1:
            reached("store:cow:noop")
            return "noop"
        if self.available(pool) < 1:
            reached("store:cow:capacity")
            return "capacity"
        busy = self.pinned_short(pool, 1)
        reached("store:cow:busy" if busy else "store:cow:granted")
        return "busy" if busy else None

    def cow(self, seq: str, pool: str, block: int) -> None:
        s = self.seqs[seq].spaces[pool]
        old = s.blocks[block]
        s.blocks[block] = self._new_block(pool, s, max(0, min(P, s.frontier - block * P)))
        self._drop_holder(old, s)

    # -- facts ------------------------------------------------------------------------------------------
    def writable_end(self, seq: str, pool: str) -> int:
        """The furthest b such that writing [frontier, b) is legal now (frontier itself when none is).

        A page an in-flight copy pins (its source or destination) takes no write (store contract L178,
        "both pinned while copying"; REP-2): reading it stays legal, writing it does not.
        """
        q = self.seqs[seq]
        s = q.spaces[pool]
        end = s.frontier
        b = s.frontier // P
        while s.private(b) and not s.blocks[b].pins:
            end = (b + 1) * P
            b += 1
        if pool == "main" and q.bounded_at is not None:
            end = min(end, max(q.bounded_at, s.frontier))
        return end

    def launch(self, unit: str, rows: list) -> None:
        spaces = []
        for seq, pool, write in rows:
            s = self.seqs[seq].spaces[pool]
            s.unit, s.write = unit, write
            if write is not None:
                s.provisional = 0  # the stage that needed the mapping has launched
            spaces.append(s)
        self.units[unit] = spaces

    def complete(self, unit: str, commits: list, learned: dict) -> None:
        """commits [(seq, pool, frontier)]; learned[(seq, pool)] = the model's keys of the new positions."""
        for seq, pool, frontier in commits:
            s = self.seqs[seq].spaces[pool]
            lo = s.frontier
            if frontier > lo:
                s.content.extend(learned[(seq, pool)])
                for b in range(lo // P, ceil_div(frontier, P)):
                    blk = s.blocks[b]
                    blk.set_cols(max(blk.cols, min(P, frontier - b * P)))
        self.fail(unit)

    def fail(self, unit: str) -> None:
        for s in self.units.pop(unit):
            s.unit = s.write = None

    def truncate(self, seq: str, pool: str, frontier: int) -> None:
        self._cut_to(self.seqs[seq].spaces[pool], frontier)

    def finish(self, seq: str, retain: str | None) -> None:
        q = self.seqs.pop(seq)
        self.ended_seqs.add(seq)
        reached("store:finish:release" if retain is None else "store:finish:retain")
        for s in q.spaces.values():
            s.reservation = 0
            s.active = False
        for s in q.spaces.values():
            if retain is None:
                self._release_space(s)
            else:
                s.owner = retain
                self._cut_to(s, s.frontier)
        if retain is not None:
            self.ckpts[retain] = q.spaces
            self.released.discard(retain)
            self.moved.discard(retain)

    def release(self, ckpt: str) -> None:
        reached("store:release")
        for s in self.ckpts.pop(ckpt).values():
            self._release_space(s)
        self.released.add(ckpt)

    # -- Host tier --------------------------------------------------------------------------------------
    def host_free(self) -> int:
        return self.f.host_bytes - self.host_used

    def offload_todo(self, ckpt: str, pool: str, blocks: list) -> list:
        return [self.ckpts[ckpt][pool].blocks[b] for b in blocks if not self.ckpts[ckpt][pool].blocks[b].host_current]

    def offload(self, ckpt: str, pool: str, blocks: list) -> None:
        todo = self.offload_todo(ckpt, pool, blocks)
        stride = self.f.page_bytes[pool]
        self.host_used += len(todo) * stride
        reached("store:offload")
        for blk in todo:
            if blk.host is not None:
                reached("store:offload:replace-stale")
                self.host_used -= stride
            blk.host = blk.version

    def drop_device(self, ckpt: str, pool: str, blocks: list) -> None:
        reached("store:drop-device")
        for b in blocks:
            self.ckpts[ckpt][pool].blocks[b].dev = False

    def drop_host(self, ckpt: str, pool: str, blocks: list) -> None:
        reached("store:drop-host")
        for b in blocks:
            self.ckpts[ckpt][pool].blocks[b].host = None
            self.host_used -= self.f.page_bytes[pool]

    def xfer_reserve(self, xid: str, direction: str, ckpt: str, pool: str, blocks: list) -> None:
        objs = [self.ckpts[ckpt][pool].blocks[b] for b in blocks]
        x = Xfer(xid, direction, ckpt, pool, objs, list(blocks))
        reached(f"store:xfer:{direction}")
        if direction == "d2h":
            self.host_used += len(objs) * self.f.page_bytes[pool]
        else:
            x.dest_leases = len(objs)
        for blk in objs:
            blk.pins += 2  # source and destination pins from reserve to publish (REP-2, decision 24)
        self.xfers[xid] = x

    def xfer_phase(self, xid: str, phase: str) -> None:
        x = self.xfers[xid]
        stride = self.f.page_bytes[x.pool]
        if phase in ("copy", "publish", "release_source"):
            reached(f"store:xfer:{phase.replace('_', '-')}")
        if phase == "copy":
            x.snap = [blk.version for blk in x.blocks]
        elif phase == "publish":
            for blk, v in zip(x.blocks, x.snap):
                if x.direction == "d2h":
                    if blk.host is not None:
                        self.host_used -= stride
                    blk.host = v
                else:
                    blk.dev = True
                blk.pins -= 2
            x.dest_leases = 0
            for blk in x.blocks:
                self._maybe_reclaim(blk, x.pool)
        elif phase == "release_source":
            for blk in x.blocks:
                if not blk.alive:
                    continue
                if x.direction == "d2h":
                    # a source an active sequence still reads, or another open transfer pins (a copy reserved
                    # from it), is still required (REP-4, decision 24)
                    if not blk.active_holders and not blk.pins:
                        blk.dev = False
                elif blk.host is not None:
                    blk.host = None
                    self.host_used -= stride
            del self.xfers[xid]
            self.ended_xfers.add(xid)
        x.phase = phase

    def verify_stale(self, xid: str) -> bool:
        """Whether a block changed since it was copied (a destructive cut while the copy ran): then `verify
        epoch and committed coverage` must fail (store contract L175; PAGE-3 / decision 27)."""
        x = self.xfers[xid]
        stale = any(blk.alive and blk.version != v for blk, v in zip(x.blocks, x.snap, strict=True))
        if stale:
            reached("store:xfer:verify-stale")
        return stale

    def xfer_abandon(self, xid: str) -> None:
        """A failed verify: the copy is never published; its destination goes back, its pins drop."""
        x = self.xfers.pop(xid)
        reached("store:xfer:abandon")
        if x.direction == "d2h":
            self.host_used -= len(x.blocks) * self.f.page_bytes[x.pool]
        x.dest_leases = 0
        for blk in x.blocks:
            blk.pins -= 2
        for blk in x.blocks:
            self._maybe_reclaim(blk, x.pool)
        self.ended_xfers.add(xid)

    def next_phase(self, xid: str) -> str | None:
        x = self.xfers[xid]
        i = PHASES.index(x.phase)
        return PHASES[i + 1] if i + 1 < len(PHASES) else None
