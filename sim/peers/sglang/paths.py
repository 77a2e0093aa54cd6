"""The SGLang engine paths a run can exercise, as its driver counts them (``PATHS`` in
``sim/peers/sglang/driver.py``; the names must agree). The driver admits a request only when it fits to its
end, so it never retracts one: retraction is no path of this driver."""

PATHS: dict[str, str] = {
    "hit_evictable": "prefix hits (pages) on a matched node no request had locked (evictable)",
    "whole_prompt_hit": "whole-prompt hits: every page short of the prompt's last token was in the tree",
    "second_copy": "pages computed a second time and freed at insert, the tree already holding that content",
    "eviction": "tree leaves evicted for room",
    "eviction_next_to_locked": "evicted leaves whose parent node a running request holds locked",
    "node_split": "radix node splits (a match or insert diverging inside a node)",
    "clear_cache": "ClearCache (the tree's reset and the allocator's clear) with every request finished",
}

UNIFIED_PATHS: dict[str, str] = {
    "whole_prompt_hit": "whole-prompt hits: every page short of the prompt's last token was in the tree",
    "second_copy": "a checkpoint that swapped computed pages for the tree's own copies (the duplicates freed)",
    "hit_lowered": "matches a component (SWA window, Mamba state) cut below the full-KV hit",
    "preemption": "retractions (retract_decode freed a running request's pages for the others)",
    "clear_cache": "ClearCache (flush_cache: the tree's reset, the pools' clear) with every request finished",
}
"""The unified cache's own paths (``--kv-groups``), counted by ``sim/peers/sglang/hybrid.py`` (``BASE_PATHS``)."""

GROUP_PATHS: dict[str, dict[str, str]] = {
    "full": {"hit": "prefix hits this group served", "eviction": "full-KV tokens evicted from the tree"},
    "sliding": {"hit": "prefix hits this group served",
                "hit_beyond_window": "hits longer than the window: leading SWA pages already dropped",
                "window_drop": "SWA pages a running request's window dropped (freed, the slot null)",
                "eviction": "SWA tokens evicted from the tree (tombstones on internal nodes)"},
    "mamba": {"hit": "prefix hits served by a Mamba state copied into the request's slot",
              "cow": "hits whose state was copied (copy-on-write) from a tree node",
              "checkpoint": "Mamba states a checkpoint handed the tree",
              "track": "states tracked into ping-pong slots (extra_buffer)",
              "eviction": "Mamba states evicted from the tree"},
}
"""Each group's paths by kind (``--kv-groups``), counted by ``sim/peers/sglang/hybrid.py`` (its ``GROUP_PATHS``)."""


def base_paths(groups: list | None, host: bool) -> dict[str, str]:
    """The paths every run of this configuration counts: the unified cache's with groups or a Host tier, else the
    plain RadixCache's."""
    return dict(UNIFIED_PATHS) if groups or host else dict(PATHS)


def group_paths(groups: list) -> dict[str, str]:
    """``gN.<path>`` for group N of a ``--kv-groups`` run."""
    return {f"g{i}.{name}": f"group {i} ({g.label()}): {what}" for i, g in enumerate(groups)
            for name, what in GROUP_PATHS[g.kind].items()}
