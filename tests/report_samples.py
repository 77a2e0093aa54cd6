"""A realistic kvreport/1 report and its timelines, built afresh on every call, for the renderer tests.

Two traces (a short fork scenario with two pools, a long decode trace whose timeline is long enough to
need downsampling), several violations (messages with pipes, markup, quotes and a newline), refusals,
and 25 catalogue rules with seed clauses. Counters are derived from the violations and a seeded
generator so that the per-trace and total counters agree, as the replay engine guarantees.

This module must not know how any renderer lays the report out.
"""

from __future__ import annotations

import math
import random

FORK = "scenarios/fork.jsonl"
LONG = "scenarios/long_decode.jsonl"

RULES = [
    ("CAP-1", "capacity resolution (M range, explicit, automatic formulas)", "M_{min}=\\max(L,C)"),
    ("CAP-2", "backend pool sizes", "模型配置和 selected speculative backend 在启动时确定 pool set"),
    ("CAP-3", "allocated + reserved + available = capacity per pool, all >= 0",
     "allocated+reserved+available=capacity"),
    ("CAP-4", "pools fixed and separate", "Growing KV 使用一组启动时固定的 homogeneous pools"),
    ("CAP-5", "byte accounting from the typed plane inventory",
     "Common pool implementation 仍只接收已展开的 KVPageGeometry"),
    ("PAGE-1", "a device lease carries at most one logical page replica",
     "Device page ID 只是当前 Device replica 的物理位置"),
    ("PAGE-2", "stale lease/handle generation refused", "generation 防止 release/reuse 后的 stale handle"),
    ("PAGE-3", "replica validity = same epoch and enough coverage", "Device/Host replica"),
    ("PAGE-4", "descriptor reclaimed only at zero references/replicas/pins", "只有当 references、replicas"),
    ("AS-1", "one active address space per row; rows own no pages", "Inactive checkpoint 不占 execution row"),
    ("AS-2", "committed frontier <= mapped extent <= L*P, token-exact", "Membership 可以大于 committed frontier"),
    ("AS-3", "an active row's block table mirrors its membership", "block table只是 active Device mapping 的执行镜像"),
    ("WR-1", "at most one writer per page", "partial-tail COW destinations"),
    ("WR-2", "shared pages immutable; a shared tail needs a private COW page",
     "Shared source或仍需保留的 private source使用 Fork"),
    ("WR-4", "fork is token-exact (15 shared + 40-column private tail)", "Checkpoint frontier 不向下取整到 960"),
    ("ENT-1", "active entitlement not returned before terminal release",
     "entitlement 不预留 active request 的全部剩余 output 预算"),
    ("ENT-3", "every launch covered by entitlement at the round boundary", "bounded completion"),
    ("ENT-4", "truncated leases return to the same reservation", "解除的 Device leases 回到 同一 active reservation"),
    ("UNIT-1", "frozen tables/memberships/frontiers during a unit",
     "logical memberships 和 readable frontiers 对该 unit 冻结"),
    ("UNIT-2", "frontiers advance only on success", "Unit 成功后，Program 才推进 corresponding committed frontiers"),
    ("REP-1", "publication order reserve -> copy -> verify -> publish -> release", "-> publish replica"),
    ("REP-2", "pins during copy; no eviction of pinned pages", "Copy 进行时 source 与 destination 都被 pin"),
    ("CKPT-2", "release drops references one at a time", "double release"),
    ("TRACE-1", "result divergence between engine and contract", "kvtrace/1"),
    ("TS-POOL-1", "pool indexes equal a recount after every transition", "an empty parent is unbound and in the FIFO"),
]

VIOLATIONS = [
    ("WR-2", FORK, 17, 19, "launch", "write to shared page 3 of s2 at column 40 | no private COW page",
     {"seq": "s2", "pool": "main", "block": 3}),
    ("WR-2", FORK, 23, 25, "launch", "write to shared page 4 of s3 <tail> & no COW",
     {"seq": "s3", "pool": "main", "block": 4, "columns": [40, 63]}),
    ("CAP-3", FORK, 31, 33, "map", 'pool "mtp": allocated 20 + reserved 9 + available 4 != capacity 32',
     {"pool": "mtp", "allocated": 20, "reserved": 9, "available": 4, "capacity": 32}),
    ("TRACE-1", FORK, 40, 42, "activate", "engine said ok where the contract refuses:\nrow 2 already active",
     {"seq": "s4", "row": 2, "expected": "refused", "ok": True, "owner": None}),
    ("PAGE-2", LONG, 1203, 1205, "release", "stale generation 7 for lease 55 (current 8)",
     {"lease": 55, "generation": 7, "current": 8}),
    ("ENT-3", LONG, 4410, 4412, "launch", "launch of s9 not covered by entitlement at the round boundary",
     {"seq": "s9", "pool": "main", "needed": 2, "entitled": 1}),
    ("ENT-3", LONG, 8125, 8127, "launch", "launch of s11 not covered by entitlement at the round boundary",
     {"seq": "s11", "pool": "main", "needed": 3, "entitled": 1}),
]

REFUSALS = [
    (FORK, 5, "map", "entitlement"),
    (FORK, 12, "activate", "no free row"),
    (LONG, 300, "map", "entitlement"),
    (LONG, 301, "reserve", "capacity"),
    (LONG, 2900, "map", "entitlement"),
]

EVENTS = {FORK: 48, LONG: 9000}
POOLS = {FORK: {"main": 64, "mtp": 32}, LONG: {"main": 512}}
UNCHECKED = {FORK: {"TS-POOL-1", "CKPT-2"}, LONG: {"TS-POOL-1", "WR-4", "CAP-5"}}
VACUOUS = {"UNIT-1"}  # checked, but its premise never held


def _timeline(trace: str) -> dict:
    """A pool timeline that keeps allocated + reserved + available = capacity (event indices increasing)."""
    rng = random.Random(f"timeline:{trace}")
    events = [i for i in range(EVENTS[trace]) if i % 3 != 1 or trace == FORK]
    pools = {}
    for pool, capacity in POOLS[trace].items():
        allocated, reserved = 0, 0
        series = {"allocated": [], "reserved": [], "available": []}
        for step, _ in enumerate(events):
            # demand swings between light and near-full load, so the plot shows pressure and relief
            target = capacity * (0.55 + 0.4 * math.sin(step / max(len(events) / 3.0, 8.0)))
            drift = 1 if allocated < target else -1
            allocated = max(0, min(capacity, allocated + drift * rng.choice((0, 1, 2)) + rng.choice((-1, 0, 1))))
            reserved = max(0, min(capacity - allocated, reserved + rng.choice((-2, -1, 0, 1, 2))))
            series["allocated"].append(allocated)
            series["reserved"].append(reserved)
            series["available"].append(capacity - allocated - reserved)
        pools[pool] = {"capacity": capacity, **series}
    return {"event": events, "pools": pools}


def sample_timelines() -> dict:
    """The timelines dict for the two sample traces."""
    return {trace: _timeline(trace) for trace in (FORK, LONG)}


def sample_report(passing: bool = False) -> dict:
    """A kvreport/1 dict; with passing=True the same traces with no violation."""
    violations = [] if passing else [
        {"rule": rule, "trace": trace, "event": event, "line": line, "op": op, "message": message,
         "context": dict(context)}
        for rule, trace, event, line, op, message, context in VIOLATIONS
    ]
    refusals = [{"trace": t, "event": e, "op": op, "reason": reason} for t, e, op, reason in REFUSALS]
    timelines = sample_timelines()
    traces = {}
    for trace in (FORK, LONG):
        rng = random.Random(f"counters:{trace}")
        rules = {}
        for rule_id, _, _ in RULES:
            violated = sum(1 for v in violations if v["trace"] == trace and v["rule"] == rule_id)
            checked = 0 if rule_id in UNCHECKED[trace] else rng.randint(violated + 1, EVENTS[trace])
            exercised = 0 if not checked or rule_id in VACUOUS else rng.randint(violated, checked)
            rules[rule_id] = {"checked": checked, "exercised": exercised, "violated": violated}
        pools = {}
        for pool, line in timelines[trace]["pools"].items():
            pools[pool] = {"capacity": line["capacity"], "peak_allocated": max(line["allocated"]),
                           "peak_reserved": max(line["reserved"]), "min_available": min(line["available"])}
        traces[trace] = {
            "events": EVENTS[trace],
            "refusals": sum(1 for r in refusals if r["trace"] == trace),
            "violations": sum(1 for v in violations if v["trace"] == trace),
            "rules": rules,
            "pools": pools,
        }
    totals = {
        rule_id: {
            "title": title,
            "clause": clause,
            **{key: sum(traces[t]["rules"][rule_id][key] for t in traces)
               for key in ("checked", "exercised", "violated")},
        }
        for rule_id, title, clause in RULES
    }
    return {
        "format": "kvreport/1",
        "inputs": [{"path": trace, "sha256": f"{i + 1:x}" * 64, "events": EVENTS[trace]}
                   for i, trace in enumerate((FORK, LONG))],
        "verdict": "pass" if passing else "fail",
        "violations": violations,
        "refusals": refusals,
        "rules": totals,
        "stats": {"traces": traces},
    }
