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
