"""PEER-12, PEER-13: each real engine's own eviction policy, judged on every eviction of a `kvsim peer` run.

The checkers are the peer judges' (named by dotted path: the catalogue never imports sim). Each is written from
the engine's own source and documentation -- vLLM's FreeKVCacheBlockQueue and block pool, SGLang's
RadixCache.evict and its LRU strategy -- not from kvsim's cache model; the seed lines cited are the cache
concepts' statement of the same policy. Every eviction a run shows is judged: the evicted block must be one
the engine's policy allows at that moment. A hit ratio below `kvsim simulate`'s at the same capacity is a
softer, separate signal (reported beside the verdict, never a violation).
"""

from __future__ import annotations

from kvsim.spec.catalogue import transition_rule

transition_rule(
    "PEER-12", "vLLM evicts the head of its free queue: cached blocks least recently freed first, a request's "
    "tail blocks before its head, never while a block without content is free",
    'vllm/v1/core/kv_cache_utils.py FreeKVCacheBlockQueue: "The least recent used block is at the front (LRU) ... '
    'the one with more hash tokens (the tail of a block chain) is at the front. Note that we maintain this order by '
    'reversing the block order when free blocks of a request"; block_pool.py free_blocks: "FIFO reuse of cached '
    'blocks for LRU eviction behavior"; cache concepts L36: "its capacity belongs to the global empty-parent FIFO"; '
    'L199: "LRU access epoch"',
    "kvsim.sim.peers.vllm.policy.FreeQueue.before",
    decisions="Judged by `kvsim peer vllm` on every step in which a block that held cached content (a full block "
              "some forward computed) is handed out fresh: that is vLLM's eviction of it. The judge keeps its own "
              "copy of the free queue, built from the step messages only: a request's release appends its cached "
              "blocks in reverse table order and prepends blocks without content (partial, or never used); a hit "
              "takes a block out; allocation pops the head. So no block without content may be left free from "
              "before the step when a cached one is evicted, and no cached block freed strictly earlier may stay: "
              "cached blocks are ranked by release -- the step (preemptions before finishes), then within one "
              "request's release the reversed table position; blocks released by different requests in the same "
              "step are unordered. Findings name the evicted block and the block vLLM should have evicted first.",
    scope="cache",
    tests=("tests/peers/test_eviction_policy.py::test_vllm_tail_first_eviction_keeps_peer_12",
           "tests/peers/test_eviction_policy.py::test_vllm_releases_in_one_step_by_two_requests_are_unordered",
           "tests/peers/test_eviction_policy.py::test_vllm_head_first_eviction_fires_peer_12",
           "tests/peers/test_eviction_policy.py::test_vllm_evicting_while_an_empty_block_is_free_fires_peer_12"),
    context=("request", "block", "ahead"))

transition_rule(
    "PEER-13", "SGLang's radix cache evicts only unlocked leaves, least recently accessed first",
    'sglang/srt/mem_cache/radix_cache.py RadixCache.evict: "eviction_heap = [(self.eviction_strategy.get_priority'
    '(node), node) for node in leaves]" over evictable_leaves (no live child, lock_ref 0); evict_policy.py '
    'LRUStrategy.get_priority: node.last_access_time; cache concepts L199: "select eviction candidates ... using '
    'one policy: LRU access epoch"; L38: "held only by the cache"',
    "kvsim.sim.peers.sglang.policy.judge_eviction",
    decisions="Judged by `kvsim peer sglang` on every evict call, from the tree the driver read just before it "
              "(each node's parent, lock_ref, the rank of last_access_time, pages per node) and the nodes the call "
              "removed: the removed set must be a prefix of an LRU peeling of the unlocked leaves (equal access "
              "times in any order, a parent joining once its last child is gone) -- no locked node, no node with a "
              "kept child, no node removed while an unlocked leaf accessed earlier stays. How many tokens a call "
              "frees is not judged here (PEER-9 counts the pool).",
    scope="cache",
    tests=("tests/peers/test_eviction_policy.py::test_sglang_lru_peeling_keeps_peer_13",
           "tests/peers/test_eviction_policy.py::test_sglang_equal_access_times_are_either_order",
           "tests/peers/test_eviction_policy.py::test_sglang_out_of_policy_eviction_fires_peer_13"),
    context=("call", "need"))
