"""Reachability of what the store contract allows: the states a held-out bug needs, counted per campaign.

A fuzzer finds a bug only in states it builds. Three families of targets, each counted only on legal steps
(a correct store accepts the event, or refuses a request as the oracle does):

- ``refusal``: every refusal reason the model gives (kvmodel.store.errors.REFUSAL_REASONS but "engine", which
  is an engine's own refusal recorded by replay, never a store's answer), produced by a correct store;
- ``open``: a transfer of each direction (d2h, h2d) in each pool, left open after each of its phases
  (reserve, copy, verify, publish — release_source ends it, so "after publish" is the state in which
  release_source is pending), while each other operation is legally attempted;
- ``append``: a write into a page that still holds a Host copy, by a sequence resumed by Move or by Fork
  from a checkpoint, with no destructive cut (a truncate below its frontier) since;
- ``read-release``: a d2h release_source in each pool while an active sequence reads a source page (a Fork
  or Move made while the copy was open: that source is still required and stays).

`Reach` counts them for one campaign (filled by `sim.fuzz.harness.FuzzMachine`); `table` lists every target
with its count and, for one never reached, why: a state the contract never allows (structural), a
configuration the run never drew, or a state the run did not build.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from kvsim.kvmodel.store.config import PAGE_SIZE as P
from kvsim.kvmodel.store.errors import REFUSAL_REASONS

REASONS = tuple(r for r in REFUSAL_REASONS if r != "engine")
DIRECTIONS = ("d2h", "h2d")
OPEN_PHASES = ("reserve", "copy", "verify", "publish")  # release_source ends a transfer
POOLS = ("main", "mtp", "draft_full")
OTHER_OPS = ("activate", "map", "grow", "cow", "launch", "complete", "fail", "truncate", "finish", "release",
             "offload", "drop_device", "drop_host", "xfer")
ORIGINS = ("move", "fork")

# what each refusal reason needs (for a blind spot's explanation)
NEEDS = {"capacity": "a request beyond the pool's available pages",
         "rows": "an activation while every execution row is leased",
         "entitlement": "a map beyond the sequence's entitlement",
         "context": "an activation whose prompt + budget exceeds S",
         "frontier": "an activation from a checkpoint whose frontier is beyond the prompt",
         "busy": "an activation from a checkpoint while an h2d restore of one of its pages is in flight",
         "growth-disabled": "a grow under a configuration without kv_lease_growth"}
STRUCTURAL = {("append", "fork"): "structural: a Fork copies the source's partial tail into a fresh page (CKPT-3: "
                                  "kvmodel.store.activation.plan_pool copies a tail that keeps another holder), "
                                  "which holds no Host copy, and the pages it shares are full and never appended "
                                  "to; a forked sequence writes a Host-backed page only after a destructive "
                                  "truncate into it (a cut, which makes the Host copy stale first)"}


@dataclass
class Reach:
    """Targets reached in one campaign, and what its configurations made possible."""

    counts: Counter = field(default_factory=Counter)
    pools_drawn: Counter = field(default_factory=Counter)  # pool -> runs whose configuration has it
    host_runs: int = 0  # runs with a Host arena
    growth_off_runs: int = 0

    def configured(self, facts) -> None:
        for p in facts.capacity:
            self.pools_drawn[p] += 1
        self.host_runs += bool(facts.host_bytes)
        self.growth_off_runs += facts.growth_window is None

    def refusal(self, reason: str) -> None:
        self.counts[("refusal", reason.split(":")[0])] += 1

    def other_op(self, oracle, ev) -> None:
        """A legal `ev` is attempted: one count per transfer open at that moment (before `ev` applies)."""
        op = ev.op
        if op == "observe" or not oracle.xfers:
            return
        own = ev.xfer if op == "xfer" else None
        if own is not None and ev.phase == "release_source" and ev.dir == "d2h":
            x = oracle.xfers.get(own)
            if x is not None and any(b.alive and b.active_holders for b in x.blocks):
                self.counts[("read-release", x.pool)] += 1
        for x in oracle.xfers.values():
            if x.xid != own:
                self.counts[("open", x.direction, x.phase, x.pool, op)] += 1

    def append(self, oracle, origin: dict, rows) -> None:
        """A legal launch: its written rows of sequences resumed by Move/Fork (uncut) into Host-backed pages."""
        for seq, pool, write in rows:
            how = origin.get(seq)
            if how is None or write is None or write[0] == write[1]:
                continue
            blocks = oracle.seqs[seq].spaces[pool].blocks
            for b in range(write[0] // P, min(len(blocks), -(-write[1] // P))):
                if blocks[b].host is not None:
                    self.counts[("append", how)] += 1

    def merge(self, other: Reach) -> None:
        self.counts.update(other.counts)
        self.pools_drawn.update(other.pools_drawn)
        self.host_runs += other.host_runs
        self.growth_off_runs += other.growth_off_runs


def targets() -> list[tuple]:
    """Every target, in a fixed order."""
    out: list[tuple] = [("refusal", r) for r in REASONS]
    out += [("open", d, ph, pool, op) for pool in POOLS for d in DIRECTIONS for ph in OPEN_PHASES for op in OTHER_OPS]
    out += [("append", o) for o in ORIGINS]
    out += [("read-release", pool) for pool in POOLS]
    return out


def _why(t: tuple, reach: Reach) -> str:
    if t in STRUCTURAL:
        return STRUCTURAL[t]
    if t[0] == "refusal":
        if t[1] == "growth-disabled" and not reach.growth_off_runs:
            return "no configuration drawn in this run leaves kv_lease_growth off"
        if t[1] == "busy" and not reach.host_runs:
            return "no configuration drawn in this run has a Host arena"
        return f"not built in this run: needs {NEEDS.get(t[1], t[1])}"
    if t[0] in ("open", "read-release"):
        pool = t[3] if t[0] == "open" else t[1]
        if not reach.pools_drawn.get(pool):
            kind = {"mtp": "an MTP backend", "draft_full": "a DFlash backend with full-attention draft layers"}
            return f"no configuration drawn in this run enables the {pool} pool ({kind.get(pool, pool)})"
        if not reach.host_runs:
            return "no configuration drawn in this run has a Host arena"
        return "not built in this run"
    if not reach.host_runs:
        return "no configuration drawn in this run has a Host arena"
    return "not built in this run"


def table(reach: Reach) -> dict:
    """The reachability table: every target with its count; the blind spots with their reason."""
    rows = []
    for t in targets():
        n = reach.counts.get(t, 0)
        row = {"kind": t[0], "target": list(t[1:]), "count": n}
        if not n:
            row["blind_spot"] = _why(t, reach)
        rows.append(row)
    reached = sum(1 for r in rows if r["count"])
    structural = sum(1 for r in rows if r.get("blind_spot", "").startswith("structural"))
    return {"targets": rows, "reached": reached, "total": len(rows), "structural": structural,
            "runs": {"pools": dict(sorted(reach.pools_drawn.items())), "host_arena": reach.host_runs,
                     "growth_off": reach.growth_off_runs}}


def render(machine: str, tab: dict) -> list[str]:
    """Plain lines: refusals, the open-transfer grid (one line per pool × direction × phase: the count per
    other operation), the appends, then the blind spots with their reasons."""
    rows = tab["targets"]
    runs = tab.get("runs", {})
    out = [f"{machine}: reachability {tab['reached']}/{tab['total']} targets reached "
           f"({tab['structural']} structurally impossible); runs drawn per pool {runs.get('pools', {})}, "
           f"with a Host arena {runs.get('host_arena', 0)}, growth off {runs.get('growth_off', 0)}"]
    ref = [r for r in rows if r["kind"] == "refusal"]
    out.append("  refusals: " + ", ".join(f"{r['target'][0]}={r['count']}" for r in ref))
    out.append("  open transfer x other op attempted (legal): " + " ".join(f"{o[:6]:>6}" for o in OTHER_OPS))
    for pool in POOLS:
        for d in DIRECTIONS:
            for ph in OPEN_PHASES:
                cells = [next(r["count"] for r in rows if r["kind"] == "open" and r["target"] == [d, ph, pool, o])
                         for o in OTHER_OPS]
                out.append(f"    {pool:>10} {d} after {ph:<7} " + " ".join(f"{c:>6}" for c in cells))
    app = [r for r in rows if r["kind"] == "append"]
    out.append("  append into a Host-backed page: " + ", ".join(f"after {r['target'][0]}={r['count']}" for r in app))
    rel = [r for r in rows if r["kind"] == "read-release"]
    out.append("  d2h release_source while its source is read: " + ", ".join(f"{r['target'][0]}={r['count']}"
                                                                            for r in rel))
    blind = [r for r in rows if not r["count"]]
    if blind:
        out.append(f"  blind spots ({len(blind)}):")
        grouped: dict[str, list[str]] = {}
        for r in blind:
            grouped.setdefault(r["blind_spot"], []).append(f"{r['kind']}:{'/'.join(r['target'])}")
        for why, names in grouped.items():
            shown = ", ".join(names[:8]) + (f", … ({len(names) - 8} more)" if len(names) > 8 else "")
            out.append(f"    {shown} — {why}")
    return out


__all__ = ["Reach", "render", "table", "targets"]
