"""Single-request refusals and the per-plan page gauge, judged from cachetrace/1 records (rules TS-ADM-3, TS-POOL-5).

* TS-ADM-3 (cache concepts L250: the CapacityModel's per-request working set "is therefore defined once, in C++, and
  the Scheduler bounds single requests against the pool with the same model"): with the header's
  ``max_single_request_tokens`` (the scheduler's ``CapacityModel.max_single_request_tokens`` over the usable
  pool), a request is refused at submission exactly when its token limit -- prompt plus max_new_tokens, at
  least one new token -- exceeds that bound. A refusal within the bound and an admission beyond it both fire.
* TS-POOL-5 (L42: "The per-step page gauge composes two O(1)-or-cheaper quantities the same way: empty parents
  come from the pool, active parents from the live requests' block tables, and cache-only residency is the
  remainder total - empty - active"): with a plan's ``gauge`` ([empty, active] LCM blocks), the remainder is
  never negative (empty + active <= the usable parents, num_device_pages - 1), and, where every group packs one
  block per parent, active equals the distinct blocks the live requests' rows name -- a state group's rows
  included: an internal checkpoint the plan materializes is a slot of its request's table (L74 "one forward
  materializes it and the final output, with capacity for both secured at admission"; "The table keeps absolute
  slot positions"), so it is active, not cache-only residency. That comparison is skipped while a request is
  retracted (its image is no live table) or blocks handed out fresh to a request outside the batch (a restore's
  growth) are not yet named by a row (the judge cannot tell whose they are). A gauge short by exactly the plan's
  internal checkpoints has one cause (the scheduler keeps checkpoints outside its tables): the first such finding
  is its root, the later ones its consequences.

This module knows cachetrace/1 records, never a scheduler's API.
"""

from __future__ import annotations

from kvsim.sim.peers.cachetrace.view import CapacityView
from kvsim.sim.trace import cachetrace as ct
from kvsim.spec.catalogue import stated

__all__ = ["RULES", "Capacity", "token_limit"]

RULES: dict[str, tuple[str, str]] = stated(("TS-ADM-3", "TS-POOL-5"), "tokenspeed")  # from the catalogue


def token_limit(rec: ct.Submit) -> int:
    """The tokens a request may occupy: its prompt and every token it may produce (at least one)."""
    return len(rec.tokens) + max(rec.max_new_tokens, 1)


class Capacity:
    def __init__(self, contract: CapacityView) -> None:
        self.c = contract
        cfg = contract.config
        self.bound = cfg.max_single_request_tokens
        self.total = cfg.num_device_pages - 1
        self.per_block = all(g.cache_blocks_per_lcm_block == 1 for g in cfg.groups)
        self.exercised = {r: 0 for r in RULES}
        self.stats = {"refused": 0, "gauges": 0, "gauge_compared": 0}

    def submit(self, rec: ct.Submit, line: int) -> None:
        """TS-ADM-3 on one submission (accepted or refused)."""
        if rec.refused is not None:
            self.stats["refused"] += 1
        if self.bound is None:
            return
        self.c.exercised["TS-ADM-3"] += 1
        n = token_limit(rec)
        if rec.refused is not None and n <= self.bound:
            self.c.find("TS-ADM-3", line, f"{rec.request} ({n} tokens with its output) is refused at submission "
                        f"though the CapacityModel bounds one request at {self.bound}: {rec.refused}",
                        request=rec.request, tokens=n)
        elif rec.refused is None and n > self.bound:
            self.c.find("TS-ADM-3", line, f"{rec.request} ({n} tokens with its output) is accepted beyond the "
                        f"CapacityModel's single-request bound {self.bound}", request=rec.request, tokens=n)

    def gauge(self, rec: ct.Plan, line: int) -> None:
        """TS-POOL-5 once the plan's rows are applied."""
        if not rec.gauge:
            return
        if len(rec.gauge) != 2:
            raise ValueError(f"plan {rec.plan}: gauge has {len(rec.gauge)} values, not [empty, active]")
        empty, active = rec.gauge
        self.stats["gauges"] += 1
        self.exercised["TS-POOL-5"] += 1
        if empty + active > self.total:
            self.c.find("TS-POOL-5", line, f"the gauge reports {empty} empty and {active} active parents of "
                        f"{self.total}: cache-only residency total - empty - active = {self.total - empty - active}",
                        empty=empty, active=active)
            return
        c = self.c
        if not self.per_block or any(c.handed.values()) or any(r.image and not r.rows for r in c.reqs.values()):
            return
        live: set[tuple[str, int]] = set()
        for r in c.reqs.values():
            for g, row in r.rows.items():
                live.update((g, b) for b in row if b > 0)
        for g, rows in c.state.rows.items():
            for row in rows.values():
                live.update((g, b) for b in row if b > 0)
        self.stats["gauge_compared"] += 1
        if active == len(live):
            return
        b = rec.batch
        ckpts = sum(1 for x in b.checkpoint_lengths[:b.extends] if x)
        if ckpts and active == len(live) - ckpts:
            c.find("TS-POOL-5", line, f"the gauge reports {active} active parents; the live requests' block tables "
                   f"name {len(live)} blocks (one parent each): the {ckpts} internal state checkpoint(s) this plan "
                   "materializes are counted as cache-only residency, not active", active=active, live=len(live),
                   cause="internal state checkpoints outside the active count")
        else:
            c.find("TS-POOL-5", line, f"the gauge reports {active} active parents; the live requests' block "
                   f"tables name {len(live)} blocks (one parent each)", active=active, live=len(live))
