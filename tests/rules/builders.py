"""Store factories and helpers for the per-rule tests: legal histories, violations, corruptions.

`run(store, step, ...)` applies legal transactions and checks the state rules incrementally after each;
`assert_violation` performs a forbidden operation and checks the rule id and that nothing changed;
`assert_detected` checks that a corrupted state is reported both incrementally (on what the test marks
touched) and by the full audit. Nothing here knows any one rule's meaning.
"""

from __future__ import annotations

import pytest

from kvsim.kvmodel.store import (
    BackendConfig,
    CapacityPolicy,
    ContractViolation,
    GrowthConfig,
    KVStore,
    Refusal,
    StoreConfig,
)
from kvsim.spec.checking import Checker

P = 64
PAGE_BYTES_BF16 = 1024 * 2 * P  # one Main page group: 1 layer, 2 KV heads, D = 256, BF16


def config(max_context: int = 4096, max_concurrency: int = 4, backend: str = "off", draft_window: int = 3,
           full_layers: int = 1, growth: GrowthConfig | None = None, profile: str = "bf16",
           tokens: int | None = None, host_pages: int = 0, **kw) -> StoreConfig:
    """A small store configuration; `host_pages` sizes the Host arena in BF16 Main page strides."""
    if backend == "mtp":
        b = BackendConfig("mtp", draft_window=draft_window)
    elif backend in ("dflash", "dflash2"):
        b = BackendConfig(backend, full_layers=full_layers)
    else:
        b = BackendConfig(backend)
    return StoreConfig(max_context=max_context, max_concurrency=max_concurrency, kv_profile=profile, backend=b,
                       capacity=CapacityPolicy(tokens=tokens), growth=growth,
                       host_arena_bytes=host_pages * PAGE_BYTES_BF16, **kw)


def new_store(**kw) -> KVStore:
    return KVStore(config(**kw))


def small(**kw) -> KVStore:
    """Two lanes of 1024 tokens (L = 16, M = 32): small enough to reason about page by page."""
    kw.setdefault("max_concurrency", 2)
    kw.setdefault("max_context", 1024)
    return new_store(**kw)


def run(store: KVStore, *steps):
    """Apply legal steps (op, *args[, {kwargs}]); each must succeed and leave no incremental finding."""
    checker = Checker(store)
    out = []
    for step in steps:
        op, args = step[0], list(step[1:])
        kwargs = args.pop() if args and isinstance(args[-1], dict) else {}
        result = getattr(store, op)(*args, **kwargs)
        assert not isinstance(result, Refusal), f"{op}{tuple(args)} refused: {result}"
        findings = checker.incremental(op)
        assert findings == [], f"{op}{tuple(args)}: {findings}"
        out.append(result)
    return out


def committed(store: KVStore, seq: str, frontier: int, prompt: int | None = None, budget: int = 128,
              unit: str | None = None, pools=("main",)) -> None:
    """Activate `seq` from root and commit `frontier` tokens in every listed pool through one unit."""
    prompt = frontier if prompt is None else prompt
    budget = min(budget, store.config.max_context - prompt)  # the effective budget (AS-6, decision 18)
    steps = [("activate", seq, prompt, budget)]
    steps += [("map", seq, pool, frontier) for pool in pools]
    unit = unit or f"u-{seq}"
    steps.append(("launch", unit, [(seq, pool, (0, frontier)) for pool in pools]))
    steps.append(("complete", unit, [(seq, pool, frontier) for pool in pools]))
    run(store, *steps)


def retained(store: KVStore, ckpt: str, frontier: int, seq: str | None = None, pools=("main",)) -> None:
    """A retained checkpoint `ckpt` whose continuation has `frontier` committed tokens."""
    seq = seq or f"s-{ckpt}"
    committed(store, seq, frontier, pools=pools)
    run(store, ("finish", seq, ckpt))


def audit_clean(store: KVStore) -> None:
    findings = Checker(store).audit()
    assert findings == [], findings


def assert_kept(store: KVStore, rule: str, exercised: bool = True) -> None:
    """The rule was evaluated (and its premise held, when asked) and never violated; the audit is clean."""
    audit_clean(store)
    checked, ex, violated = store.cov.counts(rule)
    assert checked > 0, f"{rule} was never checked"
    if exercised:
        assert ex > 0, f"{rule} was checked {checked} times but never exercised"
    assert violated == 0, f"{rule} counted {violated} violations"


def assert_violation(store: KVStore, rule: str, op: str, *args, **kwargs) -> ContractViolation:
    """Performing `op` raises ContractViolation naming `rule`, and the model state is unchanged."""
    before = store.snapshot()
    with pytest.raises(ContractViolation) as info:
        getattr(store, op)(*args, **kwargs)
    assert rule in info.value.rules, info.value.findings
    assert store.snapshot() == before, f"{op} changed the state although it was refused as a violation"
    assert store.cov.counts(rule)[2] > 0
    return info.value


def assert_refused(store: KVStore, reason: str, op: str, *args, **kwargs) -> Refusal:
    """A request a correct store may refuse: a Refusal with `reason`, and nothing changed."""
    before = store.snapshot()
    result = getattr(store, op)(*args, **kwargs)
    assert isinstance(result, Refusal) and result.reason == reason, result
    assert store.snapshot() == before
    return result


def touch(store: KVStore, pages=(), spaces=(), pools=(), rows=(), host=()) -> None:
    """Forget what the last operation touched and mark the corrupted entities instead; `host`: the touched
    Host extents' offsets (a mapping offset -> size, as `t_host` records them, or just offsets)."""
    store.reset_touched()
    for p in pages:
        store.t_pages[p] = None
    for s in spaces:
        store.t_spaces[s] = None
    for name in pools:
        store.t_pools[name] = None
    for key in rows:
        store.t_rows[key] = None
    store.t_host = dict(host) if isinstance(host, dict) else {off: _host_size(store, off) for off in host}


def _host_size(store: KVStore, off: int) -> int:
    page = store.host_slices.get(off)
    return page.host.size if page is not None and page.host is not None else 0


def rules_of(findings) -> set[str]:
    return {f.rule for f in findings}


def assert_detected(store: KVStore, rule: str, incremental: bool = True) -> None:
    """Both the incremental check (on what `touch` marked) and the full audit report `rule`."""
    if incremental:
        inc = Checker(store).incremental()
        assert rule in rules_of(inc), f"incremental check missed {rule}: {inc}"
    aud = Checker(store).audit()
    assert rule in rules_of(aud), f"audit missed {rule}: {aud}"


def assert_config_detected(store: KVStore, rule: str) -> None:
    """Config-scope rules are startup facts: the scoped check is Checker.config(), then the audit."""
    cfg = Checker(store).config()
    assert rule in rules_of(cfg), f"config check missed {rule}: {cfg}"
    aud = Checker(store).audit()
    assert rule in rules_of(aud), f"audit missed {rule}: {aud}"
