"""The vLLM engine paths a run can exercise, as its driver counts them (``PATHS`` in
``sim/peers/vllm/driver.py``; the names must agree). Each is a path where a block-manager bug hides: a run that
never takes one says nothing about it, and its PASS says so."""

PATHS: dict[str, str] = {
    "hit_evictable": "prefix hits on free-queue (evictable, ref_cnt 0) blocks, taken out of the queue's middle",
    "whole_prompt_hit": "whole-prompt hits: every block short of the prompt's last token was cached",
    "second_copy": "a second physical block cached under a hash the pool already maps",
    "eviction": "evictions of a cached block as the free queue's head is handed out",
    "eviction_next_to_referenced": "evictions of a block whose parent in its chain a running request still holds",
    "preemption": "preemptions (a running request's blocks freed for another's)",
    "clear_cache": "ClearCache (reset_prefix_cache) with every request finished",
}

GROUP_PATHS: dict[str, dict[str, str]] = {
    "full": {"hit": "prefix hits this group served",
             "eviction": "evictions of a cached block of this group"},
    "sliding": {"hit": "prefix hits this group served",
                "hit_beyond_window": "hits longer than the window: leading slots null, the run before the hit kept",
                "window_drop": "slots dropped out of the window (turned null, their blocks freed)",
                "eviction": "evictions of a cached block of this group"},
    "mamba": {"hit": "prefix hits served by a state checkpoint",
              "partial_hit": "hits at a boundary inside a state block (a fine-grained checkpoint)",
              "state_free": "state slots freed behind the running state (turned null)",
              "cow": "copy-on-write of a shared state block before a forward overwrites it",
              "eviction": "evictions of a cached state block"},
}
"""Each group's own paths by kind, counted by ``sim/peers/vllm/hybrid.py`` (its ``GROUP_PATHS``)."""
COORDINATOR_PATHS = {"hit_lowered": "common hits below some group's own hit (HybridKVCacheCoordinator lowered it)"}


def group_paths(groups: list) -> dict[str, str]:
    """The paths of a ``--kv-groups`` run: ``gN.<path>`` for group N, then the coordinator's."""
    out = {f"g{i}.{name}": f"group {i} ({g.label()}): {what}" for i, g in enumerate(groups)
           for name, what in GROUP_PATHS[g.kind].items()}
    return {**out, **COORDINATOR_PATHS}

HOST_PATHS: dict[str, str] = {
    "host.store": "store jobs to the Host tier (GPU blocks copied to CPU chunks)",
    "host.store_skipped": "stores the manager refused (no idle chunk to evict)",
    "host.host_eviction": "Host chunks evicted to make room for a store",
    "host.load": "async load-backs from the Host tier (the request waits for them)",
    "host.load_sync": "load-backs completed before the forward that reads them",
    "host.load_failed": "load-backs that failed (the engine recomputes the request; --fail-loads)",
    "host.flush": "store jobs flushed before a forward that reuses their source block",
    "host.hit_pending": "lookups of a key whose store is still in flight",
    "host.reset": "the Host tier cleared with the cache",
}
"""The Host tier's paths (``--offload-blocks``), counted by ``sim/peers/vllm/offload.py`` (its ``PATHS``)."""
