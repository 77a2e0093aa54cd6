"""Reproducer: the released TokenSpeed scheduler's configuration gate against the cache concepts' configuration
clauses (seed 002 L19, L50, L62, L64, L317-L319, L341). Needs only the wheel (pip install tokenspeed-scheduler).

    python config_gate.py            # one JSON line per probe: accepted, or the error the gate raised

Each probe builds one SchedulerConfig or CacheGroupConfig and hands it to the gate (CacheGroupConfig.validate,
Scheduler, CapacityModel). `kvsim peer tokenspeed --probe-config` runs the same probes, one process each, and
reports where the wheel and the seed disagree (the findings are in sim/peers/samples/README.md).
"""

import json
import sys

import tokenspeed_scheduler as ts

P = 64


def cfg(groups, tok=8192):
    c = ts.SchedulerConfig()
    c.prefix_granularity, c.cache_groups, c.num_device_pages, c.num_host_pages = P, groups, 40, 0
    c.disable_l2_cache, c.max_batch_size, c.max_scheduled_tokens, c.num_snapshot_pages = True, 8, tok, 1
    return c


def full(bg=P, pages=40):
    return ts.CacheGroupConfig("full", bg, pages, ts.AttnKind.Full)


def probe_state_bg_p():  # a snapshot group's block_granularity equals its checkpoint span (L62)
    ts.Scheduler(cfg([full(), ts.CacheGroupConfig("state", P, 40, ts.AttnKind.State)]))


def probe_state_bg_half():  # a positive divisor of P (L64)
    ts.Scheduler(cfg([full(), ts.CacheGroupConfig("state", P // 2, 40, ts.AttnKind.State)]))


def probe_state_bg_0():  # no zero-means-default fallback (L64, L318)
    ts.Scheduler(cfg([full(), ts.CacheGroupConfig("state", 0, 40, ts.AttnKind.State)]))


def probe_state_sliding():  # a State group's retention is full history; the bridge refuses a sliding one (L19, L341)
    ts.CacheGroupConfig("state", 0, 40, ts.AttnKind.State, 128).validate()


def probe_full_bg_0():  # every group states its span (L64, L318)
    ts.Scheduler(cfg([full(0)]))


def probe_swa_bg_0():
    ts.Scheduler(cfg([full(), ts.CacheGroupConfig("swa", 0, 40, ts.AttnKind.SlidingWindow, 128)]))


def probe_full_bg_48():  # not a divisor of P = 64
    ts.Scheduler(cfg([full(48)]))


def probe_full_bg_32():  # a divisor of P
    ts.Scheduler(cfg([full(32)]))


def probe_state_chunk_below_p():  # one-cache-block chunks for a recurrent-state group (L319)
    ts.Scheduler(cfg([full(), ts.CacheGroupConfig("state", 0, 40, ts.AttnKind.State)], tok=P // 2))


def probe_scheduler_without_config():  # Scheduler(config) explicitly; no module default (L319)
    ts.Scheduler()


def probe_capacity_bad_geometry():  # the CapacityModel runs the sizing half of Validate() (L319)
    ts.CapacityModel(cfg([full(48)]))


def probe_capacity_without_pages():  # ... minus the page counts that describe a sized pool
    c = cfg([full(P, 0)])
    c.num_device_pages = 0
    ts.CapacityModel(c)


def probe_scheduler_without_pages():  # Validate() proper needs them
    c = cfg([full(P, 0)])
    c.num_device_pages = 0
    ts.Scheduler(c)


def run(name):
    try:
        globals()["probe_" + name]()
    except Exception as exc:  # noqa: BLE001 - the gate's answer, whatever it raised
        return {"probe": name, "accepted": False, "error": type(exc).__name__, "message": " ".join(str(exc).split())}
    return {"probe": name, "accepted": True}


if __name__ == "__main__":
    names = sys.argv[1:] or [n[len("probe_"):] for n in list(globals()) if n.startswith("probe_")]
    for n in names:
        print(json.dumps(run(n)))
