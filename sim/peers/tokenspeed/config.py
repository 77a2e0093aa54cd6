"""A TokenSpeed run's configuration: ``RunConfig`` (what ``kvsim peer tokenspeed`` sets), the wheel's
``SchedulerConfig`` built from it (``scheduler_config``: a full-attention group, optionally a sliding-window and a
State group, the Host and L3 tiers, retraction) and the cachetrace/1 header recording the same configuration for
the judge (``header``). Group ids are ``GROUP``, ``SWA`` and ``STATE``; ``PLAN_US`` is the simulated clock one plan
advances the L3 runtime by.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvsim.sim.peers.tokenspeed.wheel import engine, version
from kvsim.sim.peers.workload import Request
from kvsim.sim.trace import cachetrace as ct

__all__ = ["GROUP", "SWA", "STATE", "PLAN_US", "RunConfig", "unbounded_pages", "scheduler_config", "header"]

GROUP = "full"
SWA = "swa"
STATE = "state"


@dataclass
class RunConfig:
    pages: int                       # num_device_pages, the null page 0 included
    prefix_granularity: int = 64
    max_batch_size: int = 256
    max_scheduled_tokens: int = 8192
    max_idle_plans: int = 64         # consecutive plans with nothing scheduled before the run counts as stalled
    host_pages: int = 0              # Host (L2) pages; 0 disables the L2 tier and its write-back / load-back ops
    swa_window: int | None = None    # add a sliding-window group "swa" (window in tokens) beside "full"
    stagger: int = 0                 # submit request i before plan i*stagger (0: each before the plan its
                                     # arrival_step names, at once on an idle scheduler -- all before the first
                                     # plan for a Mooncake file;
                                     # -1: one at a time, each once the scheduler is idle)
    swa_replayable: bool = False     # the sliding-window group is replayable (re-fed, never cached)
    ack_delay: int = 0               # hold each cache op's acknowledgement for 0..ack_delay plans (seeded)
    seed: int = 0                    # the ack-delay draws
    snapshot_pages: int = 1          # num_snapshot_pages (1: no snapshot pool, retraction off)
    max_retracted: int = 0           # max_retracted_requests (> 0 needs snapshot_pages > 1)
    force_retraction: int = 0        # debug_force_retraction_interval: retract a decode every N plans (0: off)
    clear_every: int = 0             # request ClearCache after every N-th answer (0: never)
    fault: str | None = None         # inject one named fault into the recorded plans (sim.peers.tokenspeed.faults)
    block_granularity: int | None = None  # tokens per block of every group (None: prefix_granularity)
    l3: bool = False                 # L3 storage below the Host tier, answered by an in-process object store
    l3_miss_rate: float = 0.0        # each L3 get key fails with this probability (seeded by `seed`)
    l3_host_blocks: int = 0          # Host pages L3 gets may hold at once (0: half the usable Host pages)
    l3_wait_plans: int = 0           # plans an L3 op may stay unanswered before the scheduler cancels it (0: never)
    state_group: bool = False        # add the wheel's State group "state" (AttnKind.State, block_granularity 0)
    state_checkpoints: bool = True   # state_checkpoint_in_forward: an extend may materialize an internal checkpoint


def unbounded_pages(requests: list[Request], p: int, groups: int = 1) -> int:
    """A pool that never evicts: every request's prompt and output pages and a tail copy, in every group (the
    groups share one pool of parents), and the null page. ``p`` is the tokens per block."""
    return 1 + groups * sum(-(-(len(r.tokens) + r.max_new_tokens) // p) + 2 for r in requests)


PLAN_US = 1000  # the simulated clock an L3 tick carries: one plan is 1 ms (never the wall clock)


def _bg(cfg: RunConfig) -> int:
    return cfg.block_granularity or cfg.prefix_granularity


def _l3_host_blocks(cfg: RunConfig) -> int:
    return cfg.l3_host_blocks or max(1, (cfg.host_pages - 1) // 2)


def _storage_config(cfg: RunConfig):
    import tokenspeed_scheduler as ts
    wait = (cfg.l3_wait_plans or 1 << 30) * PLAN_US
    high = ts.StoragePressure(1 << 20, 1 << 50, 1 << 50)  # the driver's store never pushes back
    low = ts.StoragePressure(0, 0, 0)
    return ts.StorageConfig(max_operations=64, max_keys_per_operation=4096, max_host_blocks=_l3_host_blocks(cfg),
                            metadata_entries=max(4096, 4 * cfg.host_pages),
                            max_prefetch_tokens=cfg.max_scheduled_tokens, min_prefetch_tokens=cfg.prefix_granularity,
                            wait_timeout_us=wait, ready_timeout_us=wait,
                            pressure_high=high, pressure_low=low)


def scheduler_config(cfg: RunConfig):
    ts = engine()
    c = ts.SchedulerConfig()
    c.prefix_granularity = cfg.prefix_granularity
    bg = _bg(cfg)
    c.cache_groups = [ts.CacheGroupConfig(GROUP, bg, cfg.pages, ts.AttnKind.Full)]
    if cfg.swa_window is not None:
        swa = ts.CacheGroupConfig(SWA, bg, cfg.pages, ts.AttnKind.SlidingWindow, cfg.swa_window)
        swa.replayable = cfg.swa_replayable
        c.cache_groups = c.cache_groups + [swa]
        if cfg.swa_replayable:  # "the window the scheduler re-feeds is the retention window itself"
            c.prefix_replay_tokens = cfg.swa_window
    if cfg.state_group:  # the wheel's snapshot-state group: it declares block_granularity 0 (a compact row)
        c.cache_groups = c.cache_groups + [ts.CacheGroupConfig(STATE, 0, cfg.pages, ts.AttnKind.State)]
        c.state_checkpoint_in_forward = cfg.state_checkpoints
    c.num_device_pages = cfg.pages
    c.num_host_pages = cfg.host_pages
    c.disable_l2_cache = cfg.host_pages == 0
    c.max_batch_size = cfg.max_batch_size
    c.max_scheduled_tokens = cfg.max_scheduled_tokens
    c.enable_mixed_prefill_decode = True
    c.enable_kv_cache_events = True
    c.num_snapshot_pages = cfg.snapshot_pages  # 0 is refused; 1 (the null page alone) disables retraction
    c.max_retracted_requests = cfg.max_retracted
    c.debug_force_retraction_interval = cfg.force_retraction
    if cfg.l3:
        c.enable_l3_storage = True
        c.storage_config = _storage_config(cfg)
    return c


def header(cfg: RunConfig, meta: dict | None = None) -> ct.Header:
    return ct.Header(format=ct.FORMAT, config=ct.Config(
        scheduler=f"tokenspeed-scheduler {version()}", prefix_granularity=cfg.prefix_granularity,
        groups=[ct.Group(GROUP, _bg(cfg), cfg.pages, "full")] + (
            [ct.Group(SWA, _bg(cfg), cfg.pages, "sliding", cfg.swa_window,
                      replayable=cfg.swa_replayable)]
            if cfg.swa_window is not None else []) + (
            [ct.Group(STATE, 0, cfg.pages, "mamba")] if cfg.state_group else []), num_device_pages=cfg.pages,
        num_host_pages=cfg.host_pages, num_snapshot_pages=cfg.snapshot_pages,
        max_retracted_requests=cfg.max_retracted,
        max_batch_size=cfg.max_batch_size, max_scheduled_tokens=cfg.max_scheduled_tokens,
        enable_l3_storage=cfg.l3), meta={**(meta or {}), **(
            {"state_checkpoint_in_forward": cfg.state_checkpoints} if cfg.state_group else {})})
