"""The refinement check: the model, read through `ModelView`, must hold exactly what the oracle holds.

After every step: per pool, allocated / reserved / available equal the oracle's counts; every active
sequence and retained checkpoint of the oracle is live in the model with the same committed frontier and,
read through a valid Device or Host replica, the same content; each member page has exactly the valid
replicas the oracle expects (a Host copy is current until the content changes); the model has no live
sequence or checkpoint the oracle lacks. Each difference becomes the `observe` event that states the oracle's view,
so the written counterexample shows the model what it should have held and replay names the rule.
"""

from __future__ import annotations

from kvsim.sim.trace import records as kt


def differences(oracle, view) -> tuple[list, list[str]]:
    """(observe events stating the oracle's view where the model differs, descriptions of each difference)."""
    events: list[kt.Event] = []
    notes: list[str] = []
    for pool in oracle.f.pools:
        want, got = oracle.counters(pool), view.counters(pool)
        if want != got:
            events.append(kt.Observe(pool=pool, **want))
            notes.append(f"{pool} counters: oracle {want}, model {got}")
    for kind, owner, pool, space in oracle.live_spaces():
        f = view.frontier(kind, owner, pool)
        keys, lost = view.content(kind, owner, pool) if f is not None else ([], None)
        if f != space.frontier or keys != space.content:
            who = {"seq": owner} if kind == "seq" else {"ckpt": owner}
            events.append(kt.Observe(pool=pool, frontier=space.frontier, content=tuple(space.content), **who))
            why = ("not live in the model" if f is None else f"frontier {f} (oracle {space.frontier})"
                   if f != space.frontier else f"position {lost} unreadable" if lost is not None else
                   f"content differs at position {_first_diff(keys, space.content)}")
            notes.append(f"{kind} {owner} ({pool}): {why}")
    for kind, owner, pool, space in oracle.live_spaces():
        got = view.replicas(kind, owner, pool)
        if len(got) != len(space.blocks):
            notes.append(f"{kind} {owner} ({pool}): {len(got)} member pages, the oracle has {len(space.blocks)}")
            continue
        for b, (blk, (dev, host)) in enumerate(zip(space.blocks, got)):
            if (dev, host) == (blk.dev, blk.host_current):
                continue
            notes.append(f"{kind} {owner} ({pool}) block {b}: valid replicas Device {dev} / Host {host}, the oracle "
                         f"has Device {blk.dev} / Host {blk.host_current}")
            if kind == "ckpt" and host and not blk.host_current and dev and not blk.pins and not blk.active_holders:
                # a probe: dropping the Device copy must be refused (its Host copy is stale); if the model drops
                # it, the oracle's counters show what it should have kept
                events += [kt.DropDevice(ckpt=owner, pool=pool, blocks=(b,)),
                           kt.Observe(pool=pool, **oracle.counters(pool))]
    for s in sorted(view.seqs() - set(oracle.seqs)):
        notes.append(f"seq {s} is live in the model only")
    for c in sorted(view.ckpts() - set(oracle.ckpts)):
        notes.append(f"ckpt {c} is live in the model only")
    return events, notes


def _first_diff(a: list, b: list) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
