"""Eviction-policy bugs planted into the real engines at run time (``tests.peers.planted``: an import hook on
PYTHONPATH, the engine venvs untouched), each modelled on what an engine developer could write: ``(module,
patch source)`` pairs for ``planted.plant``."""

# vLLM: a finished request's blocks go back head first (the reversal dropped from
# single_type_kv_cache_manager.free), so its shared prefix blocks are evicted before its private tail
VLLM_HEAD_FIRST = ("vllm.v1.core.single_type_kv_cache_manager", """
def patch(module):
    def free(self, request_id):
        self.block_pool.free_blocks(self.pop_blocks_for_free(request_id))
    module.SingleTypeKVCacheManager.free = free
""")
# vLLM: freed cached blocks go to the free queue's head instead of its tail (block_pool.free_blocks prepends all)
VLLM_CACHED_TO_HEAD = ("vllm.v1.core.block_pool", """
def patch(module):
    def free_blocks(self, ordered_blocks):
        blocks = [b for b in ordered_blocks if not b.is_null]
        for b in blocks:
            b.ref_cnt -= 1
        self.free_block_queue.prepend_n([b for b in blocks if b.ref_cnt == 0])
    module.BlockPool.free_blocks = free_blocks
""")
# SGLang: the eviction heap keyed by the negated access time -- most recently used leaf first (evict_policy.py)
SGLANG_MRU = ("sglang.srt.mem_cache.evict_policy", """
def patch(module):
    module.LRUStrategy.get_priority = lambda self, node: -node.last_access_time
""")
