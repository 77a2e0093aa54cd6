"""TS-ADM-4: TokenSpeed evicts only when the admission does not fit without eviction.

Seed 002 L40: "Admission first checks the indexed free-slot and empty-parent counts. If the request fits, it
does not enumerate eviction candidates"; L199 (AdmissionPlanner): "first check whether existing local holes
plus empty parents fit with zero eviction; otherwise select eviction candidates until the plan fits ...
yielding a minimal eviction set". L36: "A parent with zero occupants is unbound, so its capacity belongs to
the global empty-parent FIFO". So a plan that evicts a cached block has used every empty page first: no page
that was free and empty when the plan began may be left unused by a plan that evicts.

What the plans show (cachetrace/1): the pages each plan zeroes or copies into (handed out fresh), the tables,
and -- kept by ``contract.Contract``, read through ``view.EvictionView`` -- which live table names each page and
which prefix key each page's computed content carries. A fresh page whose content key no live table names is an
eviction when that key sits in no other page (a key held by two pages may be a duplicate the index already dropped:
"Register canonicalizes ... the caller's ref is replaced by the canonical block", research/tokenspeed.md §3,
so such pages are left out of both sides). A page is free and empty when no live table names it, it carries
no computed content, no forward wrote into it since it was last handed out (a written page without a full
page's key may be a published partial tail: "The partial last page is published as a tail",
research/tokenspeed.md §7) and it was not handed out to a request that has not named it yet.

The premise is a pool where one page is one parent and nothing else holds pages: a single full-attention group
whose block granularity is the prefix granularity, no Host tier, no retraction snapshots. There the zero-
eviction check is exact (an admission that needs more pages than are empty evicts exactly the shortfall and
then takes every empty page); with LCM packing, Host pins or request-reclaimable blocks it is not judged.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from kvsim.sim.peers.cachetrace.view import EvictionView

if TYPE_CHECKING:
    from kvsim.sim.trace import cachetrace as ct

RULE = "TS-ADM-4"  # its title and clause: its catalogue entry (spec.rules.cache_admission)


def premise(config: ct.Config) -> str | None:
    """The one group judged (None: the configuration is outside the rule's premise)."""
    if len(config.groups) != 1 or config.num_host_pages or config.num_snapshot_pages > 1 \
            or config.max_retracted_requests:
        return None
    g = config.groups[0]
    if g.attn_kind != "full" or g.replayable or g.block_granularity != config.prefix_granularity \
            or g.cache_blocks_per_lcm_block != 1:
        return None
    return g.id


def check(contract: EvictionView, rec: ct.Plan, group: str) -> str | None:
    """Before the plan's fresh pages drop their content: None, or why the plan evicts out of order (one line).
    Cheap on plans that evict nothing (a scan of the pool only when one does)."""
    fresh = list(rec.zero.get(group, ())) + [d for _, d in rec.copy.get(group, ())]
    if not fresh:
        return None
    content, hold = contract.content[group], contract.holders[group]
    evicted = [b for b in fresh if b in content and not hold.get(b, 0)]
    if not evicted:
        return None
    keys = Counter(content.values())
    certain = [b for b in evicted if keys[content[b]] == 1]
    if not certain:
        return None
    contract.exercised[RULE] += 1
    taken = set(fresh)
    handed, written = contract.handed[group], contract.writer[group]
    total = contract.groups[group].total_pages
    for b in range(1, total):
        if b not in taken and b not in content and b not in written and not hold.get(b, 0) and b not in handed:
            return (f"{group} page {certain[0]}, cached and named by no live table, is evicted while page {b} is "
                    f"free and empty: the admission fits with zero eviction first (empty pages before victims)")
    return None
