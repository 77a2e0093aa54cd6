"""PEER-9 on TokenSpeed's deep counters: what the wheel's bindings expose about its Device pool and snapshot
pool, read after every plan's answer (a handful of calls into C++, cheap enough for every plan).

The bindings (tokenspeed-scheduler 0.1.42) give the LCM-parent pool's ``active_lcm_blocks`` (parents some
request or pinned op holds), ``available_lcm_blocks`` (parents that can be handed out: empty or holding only
evictable cached blocks) and ``empty_lcm_blocks`` (parents with no occupied slot), and
``snapshot_pool_free_blocks``, documented by the wheel as "a leak check: every block belongs to some suspended
request's image". Seed 002 l.38: "its capacity belongs to the global empty-parent FIFO rather than any group";
l.193: the scheduler "keeps no residency counters of its own" beyond what the event carries. Judged:

* ``active + available`` equals the usable pool (num_device_pages less the null page): a parent is held or can
  be handed out, never lost between the two. With a Host tier the sum may fall short (never exceed): parents
  the cache ops of a plan still hold count as neither (seen on the wheel with --host-pages, one or two parents
  while write-backs are in flight; the bindings document no third state), so only the excess is judged there;
* ``empty <= available``: an empty parent can always be handed out;
* with no request retracted, the snapshot pool is wholly free (``snapshot_pool_free_blocks`` equals
  num_snapshot_pages less the null page): an image nobody can restore is a leak.

The wheel does not expose its tree's lock counts or its free list, so nothing deeper is read.
"""

from __future__ import annotations

from typing import Any

__all__ = ["check", "read"]


def read(sched: Any) -> dict:
    """The counters, from the scheduler object (``tokenspeed_scheduler.Scheduler``)."""
    return {"active": sched.active_lcm_blocks(), "available": sched.available_lcm_blocks(),
            "empty": sched.empty_lcm_blocks(), "retracted": sched.retracted_size(),
            "snapshot_free": sched.snapshot_pool_free_blocks()}


def check(probe: dict, usable: int, snapshot_usable: int, host_tier: bool = False) -> list[tuple[str, dict]]:
    """The PEER-9 findings (message, context) of one reading: ``usable`` Device parents, ``snapshot_usable``
    snapshot-pool blocks (0: no snapshot pool), ``host_tier`` whether cache ops may hold parents."""
    out: list[tuple[str, dict]] = []
    act, avail, empty = probe["active"], probe["available"], probe["empty"]
    if act + avail > usable or (act + avail < usable and not host_tier):
        out.append((f"TokenSpeed reports {act} active and {avail} available LCM blocks: {act + avail} of {usable} "
                    "usable parents accounted", {"active": act, "available": avail, "usable": usable}))
    if empty > avail:
        out.append((f"TokenSpeed reports {empty} empty LCM blocks but only {avail} available",
                    {"empty": empty, "available": avail}))
    if snapshot_usable and not probe["retracted"] and probe["snapshot_free"] != snapshot_usable:
        out.append((f"no request is retracted, yet TokenSpeed's snapshot pool has {probe['snapshot_free']} of "
                    f"{snapshot_usable} blocks free", {"snapshot_free": probe["snapshot_free"],
                                                         "snapshot_usable": snapshot_usable}))
    return out
