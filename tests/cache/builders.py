"""Small configurations and helpers shared by the cache tests."""

from __future__ import annotations

from kvsim.kvmodel.cache.config import CacheConfig
from kvsim.kvmodel.cache.coordinator import CacheCoordinator
from kvsim.kvmodel.cache.group_spec import full, sliding, state
from kvsim.kvmodel.store.coverage import Coverage
from kvsim.spec.cache_checking import check_cache

P = 4


def hybrid_config(num_parents: int = 24, shards: int = 1) -> CacheConfig:
    """Full (bg 4, packing 2), sliding (bg 2, window 4, packing 2), Mamba state (bg 4, packing 1)."""
    return CacheConfig(P, (full("full", 4, shard_count=shards), sliding("swa", 2, 4), state("mamba", 4)),
                       (2, 2, 1), num_parents)


def coordinator(num_parents: int = 24, layers=(), shards: int = 1) -> CacheCoordinator:
    return CacheCoordinator(hybrid_config(num_parents, shards), journal=[], layers=layers)


def findings(state, rule_id: str):
    return [f for f in check_cache(state) if f.rule == rule_id]


def assert_kept(state, rule_id: str) -> None:
    cov = Coverage()
    found = [f for f in check_cache(state, cov) if f.rule == rule_id]
    assert not found, found
    checked, exercised, _ = cov.counts(rule_id)
    assert checked == 1 and exercised == 1, f"{rule_id} was vacuous"


def assert_fires(state, rule_id: str, fragment: str = "") -> None:
    found = findings(state, rule_id)
    assert found, f"{rule_id} did not fire"
    assert fragment in found[0].message, found[0].message


def tokens(n: int, base: int = 0) -> list[int]:
    return [base + i for i in range(n)]


def warm(c: CacheCoordinator, request: str, toks, reserve: int = 0):
    """Admit a whole prompt, publish it, and return the admission."""
    r = c.admit(request, toks, len(toks), reserve)
    assert r is not None
    c.publish(request, toks, len(toks))
    return r
