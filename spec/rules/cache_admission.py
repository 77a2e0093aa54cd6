"""TS-ADM-1: the AdmissionPlanner — zero-eviction fast path, hits protected, eviction order, minimal set.
TS-ADM-2: each retraction adds admission headroom to its victim's next admission.

The TS-ADM-1 checker recounts the fit from the recorded shadow counts with its own arithmetic and re-sorts the
recorded candidates; it does not call the planner. TS-ADM-2 is the peer judge's (sim.peers.cachetrace.retraction, named
by dotted path: the catalogue never imports sim), read from a real scheduler's cachetrace/1 plans.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvsim.kvmodel.cache.journal import AdmitRecord
from kvsim.spec.catalogue import state_rule, transition_rule

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from kvsim.kvmodel.cache.admission import EvictionCandidate, PoolShadow
    from kvsim.kvmodel.cache.state import CacheState


def fit(shadow: PoolShadow, need: Sequence[int], victims: Iterable[EvictionCandidate]) -> bool:
    """Σ_g ceil(max(need_g − free_g, 0) / slots_per_parent_g) ≤ empty parents, after the victims leave."""
    occ = dict(shadow.occupancy)
    free = list(shadow.free_slots)
    empty = shadow.empty_parents
    for v in victims:
        occ[v.parent] -= 1
        if occ[v.parent] == 0:
            empty += 1
            free[v.group] -= shadow.slots_per_parent[v.group] - 1
        else:
            free[v.group] += 1
    parents = 0
    for g, n in enumerate(need):
        short = max(n - free[g], 0)
        parents += (short + shadow.slots_per_parent[g] - 1) // shadow.slots_per_parent[g]
    return parents <= empty


def _key(c: EvictionCandidate) -> tuple:
    return (c.epoch, int(c.tier), c.rank, c.group, c.parent, c.child)


@state_rule("TS-ADM-1", "Admission: zero-eviction fast path; hits protected; victims in eviction order; a minimal "
            "eviction set",
            'cache concepts: "first check whether existing local holes plus empty parents fit with zero eviction"; '
            '"while protecting the current prefix hits"; "walk the selected blocks in reverse and restore every '
            'block that is not strictly required, yielding a minimal eviction set"', scope="cache",
            decisions="Order: (access epoch, tier uncached < probationary < established < closed prefix, rank, "
                      "group, parent, child). The victims lie within the shortest fitting prefix of that order and "
                      "include its last element; dropping any one victim breaks the fit; a refusal means even "
                      "every candidate does not fit.",
            evidence="model",
            tests=("tests/cache/test_rules.py::test_adm1_keeps_the_fast_path_and_a_minimal_eviction_set",
                   "tests/cache/test_rules.py::test_adm1_fires_on_a_surplus_victim_and_on_evicting_with_room"))
def ts_adm_1(st: CacheState, _entity: object | None = None, full: bool = True) -> str | bool | None:
    seen = False
    for r in st.journal:
        if not isinstance(r, AdmitRecord):
            continue
        seen = True
        victims = r.plan.victims
        hit = [v for v in victims if (v.group, v.block) in r.protected]
        if hit or any((c.group, c.block) in r.protected for c in r.candidates):
            return "a current prefix hit is an eviction candidate"
        if fit(r.shadow, r.need, ()):
            if victims or not r.plan.fits:
                return f"need {list(r.need)} fits with zero eviction, yet the plan evicts {len(victims)} / refuses"
            continue
        order = sorted(r.candidates, key=_key)
        k = next((i + 1 for i in range(len(order)) if fit(r.shadow, r.need, order[:i + 1])), None)
        if not r.plan.fits:
            if k is not None:
                return f"admission refused though evicting the first {k} candidates fits"
            continue
        if k is None or not fit(r.shadow, r.need, victims):
            return f"the plan's {len(victims)} victims do not make need {list(r.need)} fit"
        prefix = set(map(_key, order[:k]))
        if any(_key(v) not in prefix for v in victims) or _key(order[k - 1]) not in set(map(_key, victims)):
            return "victims are not drawn from the shortest fitting prefix of the eviction order"
        for v in victims:
            if fit(r.shadow, r.need, [x for x in victims if x is not v]):
                return f"victim block {v.block} of group {v.group} is not required (the set is not minimal)"
    return True if seen else None


transition_rule(
    "TS-ADM-2", "A retracted request's next admission secures more headroom than its last, or its whole remaining "
    "generation",
    'cache concepts L254: "what stops an overcommitted workload from repeatedly rebuilding, briefly decoding and '
    're-retracting the same prompt is the escalating admission headroom each retraction adds to the victim\'s next '
    'admission"', "kvsim.sim.peers.cachetrace.retraction.Headroom.admit",
    decisions="An admission's headroom is what its first full-history table row secures beyond the tokens the "
              "request holds (prompt plus produced): len(row) x block_granularity - tokens, whole blocks and any "
              "constant reserve included. A retraction is a SnapshotOp naming the request; its readmission is the "
              "request's next full-history row. That readmission must secure strictly more than the previous "
              "admission did, or at least the slots the rest of its generation needs (max_new_tokens - produced - "
              "1: the last token produced is never fed back). Fresh admissions are the baseline and are not judged. "
              "The size of each step is not required (TokenSpeed "
              "documents min(RemainingNewTokens, 4096 x (1 + retractions)) in scheduler.md §4; the seed states only "
              "escalation); an escalation of less than one block can be hidden by rounding.",
    scope="cache",
    tests=("tests/peers/test_retraction.py::test_readmission_with_more_headroom_is_clean",
           "tests/peers/test_retraction.py::test_readmission_covering_the_rest_of_the_generation_is_clean",
           "tests/peers/test_retraction.py::test_readmission_with_no_more_headroom_fires"),
    context=("request", "group"))

transition_rule(
    "TS-ADM-4", "An admission evicts only when it does not fit with zero eviction: no empty page left while a "
    "cached one is taken",
    'cache concepts L40: "Admission first checks the indexed free-slot and empty-parent counts. If the request fits, '
    'it does not enumerate eviction candidates"; L199: "first check whether existing local holes plus empty parents '
    'fit with zero eviction; otherwise select eviction candidates until the plan fits ... yielding a minimal '
    'eviction set"; L36: "A parent with zero occupants is unbound, so its capacity belongs to the global '
    'empty-parent FIFO"', "kvsim.sim.peers.cachetrace.eviction.check",
    decisions="Judged by the peer contract on a real scheduler's plans, before each plan's fresh pages (zeroed or "
              "copied into) drop their content: a fresh page whose computed content key sits in no other page and "
              "that no live table names is an eviction; if any page that was free and empty at the plan's start "
              "(named by no live table, no computed content, not handed to a request that has not named it yet) "
              "is left unused by that plan, the admission could have fit with zero eviction. Premise: one "
              "full-attention group, block granularity = prefix granularity, one page per parent, no Host tier "
              "or snapshots (there the check is exact); pages whose key is held twice (a duplicate the index may "
              "have dropped) are left out. The LRU-epoch order among victims is not judged: the plans do not show "
              "the access epochs (a request's own epoch carries over: TokenSpeed's coordinator/cache_admission.cpp "
              "takes the request's own epoch, or a new one).",
    scope="cache",
    tests=("tests/peers/test_ts_eviction.py::test_evicting_once_the_empty_pages_are_used_keeps_ts_adm_3",
           "tests/peers/test_ts_eviction.py::test_a_written_partial_tail_is_not_counted_empty",
           "tests/peers/test_ts_eviction.py::test_evicting_while_an_empty_page_stays_fires_ts_adm_3"),
    context=("group",))
