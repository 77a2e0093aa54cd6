"""Bugs planted into vLLM's hybrid coordinator, its sliding-window and Mamba managers, its CPU offloading manager
and its offloading connector at run time (``tests.peers.planted``: an import hook on PYTHONPATH, the engine venv
untouched), each modelled on a bug an engine developer could write: ``(module, patch source)`` pairs."""

# the coordinator reports the longest group's own hit instead of the common one (vllm PR 45614's shape: a later
# group raises the hit beyond what another group can serve)
VLLM_HIT_RAISED = ("vllm.v1.core.kv_cache_coordinator", """
def patch(module):
    find = module.HybridKVCacheCoordinator.find_longest_cache_hit
    def find_longest_cache_hit(self, block_hashes, max_cache_hit_length):
        blocks, hit, uncached = find(self, block_hashes, max_cache_hit_length)
        if uncached > 0:
            return blocks, hit + uncached, 0
        return blocks, hit, uncached
    module.HybridKVCacheCoordinator.find_longest_cache_hit = find_longest_cache_hit
""")
# the sliding window drops one block more than the window allows (an off-by-one block in get_num_skipped_tokens)
VLLM_WINDOW_SHORT = ("vllm.v1.core.single_type_kv_cache_manager", """
def patch(module):
    def get_num_skipped_tokens(self, num_computed_tokens):
        return max(0, num_computed_tokens - self.sliding_window + 1 + self.block_size)
    module.SlidingWindowManager.get_num_skipped_tokens = get_num_skipped_tokens
""")
# the Mamba manager frees the block holding the running state one step early (<= for <)
VLLM_STATE_FREED = ("vllm.v1.core.single_type_kv_cache_manager", """
def patch(module):
    from vllm.utils.math_utils import cdiv
    base = module.SingleTypeKVCacheManager.remove_skipped_blocks
    def remove_skipped_blocks(self, request_id, processed_computed_tokens, num_prompt_tokens=None):
        base(self, request_id, processed_computed_tokens, num_prompt_tokens)
        idx = self.last_state_block_idx.get(request_id)
        if idx is not None and idx <= cdiv(processed_computed_tokens, self.block_size) - 1:
            blocks = self.req_to_blocks[request_id]
            if blocks[idx] != self._null_block:
                self.block_pool.free_blocks([blocks[idx]])
                blocks[idx] = self._null_block
    module.MambaManager.remove_skipped_blocks = remove_skipped_blocks
""")
# the Mamba manager lets a request hit a checkpoint another request computes in the same step (the deferral of
# get_num_blocks_to_allocate dropped)
VLLM_STATE_SAME_STEP = ("vllm.v1.core.single_type_kv_cache_manager", """
def patch(module):
    module.MambaManager.new_step_starts = lambda self: None
    base = module.MambaManager.cache_blocks
    def cache_blocks(self, request, num_tokens, retention_interval=None, *, replay_boundaries):
        base(self, request, num_tokens, retention_interval, replay_boundaries=replay_boundaries)
        self.cached_blocks_this_step.clear()
    module.MambaManager.cache_blocks = cache_blocks
""")
# the CPU offloading manager never publishes a completed store (complete_store leaves the chunk write-pending)
VLLM_ACK_NOT_PUBLISHED = ("vllm.v1.kv_offload.cpu.manager", """
def patch(module):
    def complete_store(self, keys, req_context, success=True):
        for key in keys:
            chunk = self._policy.get(key)
            if chunk is not None and not chunk.is_ready:
                self._num_write_pending_chunks -= 1
    module.CPUOffloadingManager.complete_store = complete_store
""")
# the CPU offloading manager publishes a chunk as soon as its store is prepared, before the copy is acknowledged
VLLM_PUBLISHED_BEFORE_ACK = ("vllm.v1.kv_offload.cpu.manager", """
def patch(module):
    prepare = module.CPUOffloadingManager.prepare_store
    def prepare_store(self, keys, req_context):
        out = prepare(self, keys, req_context)
        if out is not None:
            for key in out.keys_to_store:
                chunk = self._policy.get(key)
                if chunk is not None and not chunk.is_ready:
                    chunk.ref_cnt = 0
                    self._policy.mark_evictable(key)
                    self._num_evictable_cache_chunks += 1
        return out
    module.CPUOffloadingManager.prepare_store = prepare_store
""")
# the CPU offloading manager leaves a chunk a load reads evictable (prepare_load no longer pins it)
VLLM_LOAD_NOT_PINNED = ("vllm.v1.kv_offload.cpu.manager", """
def patch(module):
    def _prepare_load(self, keys, req_context, *, record_access):
        chunks = []
        for key in keys:
            chunk = self._policy.get(key)
            chunk.ref_cnt += 1
            chunks.append(chunk)
        if record_access:
            self._record_request_cache_access(keys, req_context, reused_keys=keys)
        return self._get_load_store_spec(keys, chunks)
    module.CPUOffloadingManager._prepare_load = _prepare_load
""")
# the offloading connector stops flushing a store whose source block it hands out again (jobs_to_flush dropped)
VLLM_FLUSH_DROPPED = ("vllm.distributed.kv_transfer.kv_connector.v1.offloading.scheduler", """
def patch(module):
    build = module.OffloadingConnectorScheduler.build_connector_meta
    def build_connector_meta(self, scheduler_output):
        meta = build(self, scheduler_output)
        meta.jobs_to_flush = None
        return meta
    module.OffloadingConnectorScheduler.build_connector_meta = build_connector_meta
""")

# -- SGLang 0.5.23's unified radix cache (kvsim peer sglang --kv-groups) ------------------------------------------
# the SWA component accepts a match boundary one page short of the sliding window (the validator's `>=` against the
# window less a page): a hit longer than the live SWA run backs (Python tree core: the validators are its Python)
SGLANG_SWA_HIT_RAISED = ("sglang.srt.mem_cache.unified_cache.components.swa", """
def patch(module):
    def create_match_validator(self, match_device_only=False):
        window = self.sliding_window_size - self.tree_core.page_size
        ct = self.component_type
        state = {"len": float("inf")}
        def validator(node):
            cd = node.component_data[ct]
            if cd.value is None and (match_device_only or cd.host_value is None):
                state["len"] = 0
                return False
            state["len"] += len(node.key)
            return state["len"] >= window
        return validator
    module.SWAComponent.create_match_validator = create_match_validator
""")
# a running request's out-of-window SWA pages are freed one page early (the window less a page kept)
SGLANG_SWA_WINDOW_SHORT = ("sglang.srt.mem_cache.common", """
def patch(module):
    free = module.free_swa_out_of_window_slots
    def free_swa_out_of_window_slots(req, pre_len, *, sliding_window_size, page_size, **kw):
        return free(req, pre_len, sliding_window_size=sliding_window_size - page_size, page_size=page_size, **kw)
    module.free_swa_out_of_window_slots = free_swa_out_of_window_slots
""")
# a prefix hit on a cached Mamba state loses its copy-on-write: the request starts from its own (zeroed) slot
SGLANG_MAMBA_COW_DROPPED = ("sglang.srt.mem_cache.unified_cache.components.mamba", """
def patch(module):
    finalize = module.MambaComponent.finalize_match_result_in_cache
    def finalize_match_result_in_cache(self, params, result):
        result = finalize(self, params, result)
        req = params.req
        if req is not None and req.kv.mamba_cow_src_index is not None:
            req.kv.mamba_cow_src_index = None
            req.kv.mamba_needs_clear = True
        return result
    module.MambaComponent.finalize_match_result_in_cache = finalize_match_result_in_cache
""")
# a chunked request's checkpoint (extra_buffer) names the key length instead of the tracked state's length: the
# tree gets the last tracked state under a node ending later (the no_buffer branch's cache_len = token_ids_len)
SGLANG_MAMBA_CHECKPOINT_LENGTH = ("sglang.srt.mem_cache.unified_cache.components.mamba", """
def patch(module):
    prepare = module.MambaComponent.prepare_for_caching_req
    def prepare_for_caching_req(self, req, insert_params, token_ids_len, is_finished):
        got = prepare(self, req, insert_params, token_ids_len, is_finished)
        if got and not is_finished and self.cache.enable_mamba_extra_buffer:
            return token_ids_len
        return got
    module.MambaComponent.prepare_for_caching_req = prepare_for_caching_req
""")
