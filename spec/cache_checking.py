"""Running every TS-* rule (the cache concepts) on a cache-model state.

API (stable):

    check_cache(state, coverage=None, rules=None) -> list[Finding]

`state` is a kvmodel.cache.state.CacheState: the configuration (required), and optionally the BlockPool,
the live block tables (request → per-group block ids, 0 = null hole), the published entries per group
(block → (CacheKey, slot)), the live blocks per group when there is no pool, the layer bindings, and
`journal`, the operation records (kvmodel.cache.journal: AcquireRecord, ProbeRecord, PublishRecord,
AdmitRecord, ReclaimRecord) written since the last check. CacheCoordinator.state() builds one and drains
the model's journal; a validator of a real scheduler builds one from what it observed.
Every rule of scope "cache" (or only the ids in `rules`) runs once, in catalogue order; a rule whose
facts are absent is vacuous.
Returns one Finding(rule id, one-line message, {}) per violated rule; with a Coverage, counts
checked / exercised / violated per rule. Reads the state only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvsim.kvmodel.store.errors import Finding
from kvsim.spec.catalogue import all_rules

if TYPE_CHECKING:
    from collections.abc import Iterable

    from kvsim.kvmodel.cache.state import CacheState
    from kvsim.kvmodel.store.coverage import Coverage


def cache_rules() -> list:
    """The TS-* state rules (predicates over a CacheState), in catalogue order; the TS-L2 transition rules are
    judged on cachetrace/1 by sim.peers.cachetrace.host_tier."""
    return [r for r in all_rules() if r.scope == "cache" and r.kind == "state"]


def check_cache(state: CacheState, coverage: Coverage | None = None, rules: Iterable[str] | None = None
                ) -> list[Finding]:
    out: list[Finding] = []
    for rule in cache_rules():
        if rules is not None and rule.id not in rules:
            continue
        r = rule.checker(state, None, True)
        if coverage is not None:
            coverage.check(rule.id, exercised=r is not None)
        if r is not None and r is not True:
            out.append(Finding(rule.id, r, {}))
            if coverage is not None:
                coverage.violate(rule.id)
    return out
