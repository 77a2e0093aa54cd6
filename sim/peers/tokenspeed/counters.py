"""PEER-9 on TokenSpeed's deep counters: what the wheel's bindings expose about its Device pool and snapshot
pool, read after every plan's answer (a handful of calls into C++, cheap enough for every plan).

The bindings (tokenspeed-scheduler 0.1.42) give the LCM-parent pool's ``active_lcm_blocks`` (distinct parents the
tables of requests holding pages name: ``NumActiveLcmBlocks(request_tables)``), ``available_lcm_blocks`` (empty
parents and parents whose every child is an unpinned cache entry) and ``empty_lcm_blocks`` (parents with no
occupied slot), and ``snapshot_pool_free_blocks``, documented by the wheel as "a leak check: every block belongs to
some suspended request's image". Seed 002 L36: an unbound parent's "capacity belongs to the global empty-parent
FIFO rather than any group"; L42: the pool's parents are empty, active (the live requests' block tables) or
cache-only residency, the remainder; L38: who holds a child "is a CacheBlockRef ownership fact that lives with the
holders" (a request table, a prefix-cache entry, an in-flight transfer), and "held only by the cache" is asked of
the index for "eviction policy and leak checks". So a cache-only parent another holder pins is neither active nor
available, and the bindings count no third state. Judged:

* ``active + available`` never exceeds the usable pool (num_device_pages less the null page): no parent is counted
  held and free at once;
* it falls short only by parents kvsim knows a holder outside the tables keeps pinned: with a Host tier, parents
  the plan's cache ops hold until their ACK (seen as one or two parents while write-backs are in flight; not
  counted: any shortfall passes there); with a state group, one parent per internal checkpoint the plan or the
  plan before materialized. Seen on the wheel: the checkpoint's parent is out of the request's table in the plan
  that writes it (the row the plan emits names it, the active count does not: TS-POOL-5's finding, seed L42/L74)
  and still pinned through the plan after, whose admission publishes it (L98 "Publication rides inside Admit");
  the plan after that, it is an ordinary cache entry. Anything more is a parent lost between the two;
* once the run ends drained (nothing live, every op acknowledged) the sum is exact, Host tier or not: a parent
  still neither active nor available then has leaked;
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


def check(probe: dict, usable: int, snapshot_usable: int, host_tier: bool = False, checkpoints: int = 0,
          drained: bool = False) -> list[tuple[str, dict]]:
    """The PEER-9 findings (message, context) of one reading: ``usable`` Device parents, ``snapshot_usable``
    snapshot-pool blocks (0: no snapshot pool), ``host_tier`` whether cache ops may hold parents, ``checkpoints``
    the internal state checkpoints this plan and the one before materialized (one pinned parent each),
    ``drained`` whether the run has ended with nothing live and every op acknowledged."""
    out: list[tuple[str, dict]] = []
    act, avail, empty = probe["active"], probe["available"], probe["empty"]
    short = usable - act - avail
    if short < 0 or (short > 0 and (drained or (not host_tier and short > checkpoints))):
        why = ("" if short <= 0 else " once the run has drained" if drained else
               f" ({checkpoints} explained by internal state checkpoints pinned outside the tables)" if checkpoints
               else "")
        out.append((f"TokenSpeed reports {act} active and {avail} available LCM blocks: {act + avail} of {usable} "
                    f"usable parents accounted{why}", {"active": act, "available": avail, "usable": usable}))
    if empty > avail:
        out.append((f"TokenSpeed reports {empty} empty LCM blocks but only {avail} available",
                    {"empty": empty, "available": avail}))
    if snapshot_usable and not probe["retracted"] and probe["snapshot_free"] != snapshot_usable:
        out.append((f"no request is retracted, yet TokenSpeed's snapshot pool has {probe['snapshot_free']} of "
                    f"{snapshot_usable} blocks free", {"snapshot_free": probe["snapshot_free"],
                                                         "snapshot_usable": snapshot_usable}))
    return out
