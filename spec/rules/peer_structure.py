"""PEER-14, PEER-15: a real engine's own structures whole at every step, and the amounts it allocates and evicts.

The checkers are the peer judges' (named by dotted path: the catalogue never imports sim): per engine
``sim/peers/ENGINE/structure.py`` over what the engine's driver reads from its own structures after every step
and when it raised (``sim/peers/ENGINE/ledger.py``, run inside the engine's process), and the engine-neutral
table check of ``sim/peers/judges/actionable.py``. Each rests on what the engine's own code asserts or documents, and on
the cache concepts' pool invariants; a bug that corrupts a structure silently is reported at the step it broke,
not steps later when the engine trips over it (PEER-11).
"""

from __future__ import annotations

from kvsim.spec.catalogue import transition_rule

_A = "tests/peers/test_actionable.py::"

transition_rule(
    "PEER-14", "The engine's own block structures are whole at every step: free queue, radix tree, page "
    "ownership and reference counts",
    'vllm/v1/core/kv_cache_utils.py FreeKVCacheBlockQueue: "The implementation guaranteed that the fake head and '
    'tail are NEVER got popped, so we could safely assume each real blocks in the queue has prev and next blocks"; '
    'block_pool.py touch: "ref_cnt=0 means this block is in the free list", get_new_blocks: "assert block.ref_cnt == '
    '0"; sglang/srt/mem_cache/allocator/paged.py free_page_ids: "Free exactly these pages; no page twice"; '
    'radix_cache.py _delete_leaf: "assert v == node, f\'parent does not have child key\'"; cache concepts L36 '
    '(an empty parent is "unbound and in the FIFO"), L272 (the allocator "counts all nonnull refs in the request '
    'table"), L38 (leak checks ask the index)',
    "kvsim.sim.peers.vllm.structure.check",
    decisions="Judged after every engine step (and on the structures the engine left when it raised) from what the "
              "driver reads in the engine's process. vLLM: every block a step touched (or whose free-queue "
              "neighbour changed) has both free-queue links pointing back at it or neither, is in the free queue "
              "exactly when its ref_cnt is 0 (never negative), and has a ref_cnt equal to the number of live "
              "tables naming it; the sentinels stay linked; every probe, the queue walked from its head reaches its "
              "tail without a cycle, every block with ref_cnt 0 is in it, every hashed block is in the cached-block "
              "map, and every block's ref_cnt equals the live tables naming it. SGLang (sim.peers.sglang.structure."
              "check), every probe and when it raised: every page 1..N is owned exactly once -- free in the "
              "allocator, in one tree node's value, or private to one running request's row past its tree-owned "
              "part -- every tree node is its parent's child under the key SGLang files it by, its value as long as "
              "its key, its lock_ref never negative, and evictable_leaves lists only nodes in the tree. The finding "
              "names the block, page or node and the engine frame that last changed it (sim.peers.judges.frames).",
    scope="cache",
    tests=(f"{_A}test_legal_structures_pass_and_are_exercised",
           f"{_A}test_a_crafted_vllm_structure_violation_fires_peer14_naming_the_frame",
           f"{_A}test_the_walk_finds_what_no_step_touched",
           f"{_A}test_a_crash_message_judges_structure_not_the_unseen_tables",
           f"{_A}test_a_crafted_sglang_structure_violation_fires_peer14",
           f"{_A}test_a_broken_link_names_the_neighbour_whose_pointer_went_stale",
           "tests/peers/test_actionable_engines.py::test_a_planted_bug_gives_few_roots_naming_the_engine_frame_and_"
           "its_log_rejudges_the_same"),
    context=("block", "blocks", "node", "check", "ref_cnt", "named", "neighbour", "in_free", "in_tree", "in_rows"))

transition_rule(
    "PEER-15", "The engine allocates what the tokens need and evicts only what an allocation needs",
    'vllm/v1/core/kv_cache_manager.py allocate_slots: the blocks for "num_computed_tokens + num_new_tokens + '
    'num_lookahead_tokens"; block_pool.py get_new_blocks pops the queue\'s head and evicts what it pops '
    '(_maybe_evict_cached_block); sglang/srt/mem_cache/radix_cache.py evict: "while num_evicted < num_tokens and '
    'len(eviction_heap)"; cache concepts L199 ("a minimal eviction set"), L40 ("first check whether existing local '
    'holes plus empty parents fit with zero eviction")',
    "kvsim.sim.peers.judges.actionable.Actionable.end",
    decisions="A request's table, after any step that changed it, holds at most ceil(computed tokens / block size) "
              "blocks (both engines allocate per step for the tokens scheduled; no lookahead here). vLLM "
              "(sim.peers.vllm.structure.check): a block's cached hash is removed only as the free queue hands the "
              "block out, or by reset_prefix_cache. SGLang (sim.peers.sglang.structure.check): an evict call for N "
              "tokens frees at least N when the tree had unlocked leaves left, and what it freed less its largest "
              "victim stays under N (it stops at the first leaf that reaches N). How many blocks the policy rules "
              "judge is PEER-12 / PEER-13's; this rule judges how much.",
    scope="cache",
    tests=(f"{_A}test_legal_structures_pass_and_are_exercised", f"{_A}test_a_stray_eviction_fires_peer15",
           f"{_A}test_an_over_allocated_table_fires_peer15", f"{_A}test_sglang_eviction_amount"),
    context=("block", "node", "request", "check", "holds", "needs", "call", "need", "freed"))
