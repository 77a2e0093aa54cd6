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
