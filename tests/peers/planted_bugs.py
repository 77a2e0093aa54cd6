"""Realistic block-manager bugs planted into the real engines at run time (``tests.peers.planted``: an import hook
on PYTHONPATH, the engine venvs untouched), for the actionable-finding tests (tests/peers/test_actionable_engines.py)
and the README's walk-through: each is ``Bug(engine, module, patch, rule, function)`` -- the rule of the root finding
kvsim must report for it and the engine function that finding must name (the planted function itself, or the one
that called it). Each is a mistake an engine developer could make: a reference kept, a link left stale, an
eviction ahead of need, an off-by-one parent, a units mix-up, a missing dedup, a lost page, a split that forgets
to re-parent, a double delete."""

from typing import NamedTuple


class Bug(NamedTuple):
    engine: str
    module: str
    patch: str
    rule: str       # the rule of the first root finding
    function: str   # the engine function its frame names


REFCOUNT_LEAK = Bug("vllm", "vllm.v1.core.block_pool", """
def patch(m):
    def free_blocks(self, ordered_blocks):  # bug: a block shared by another request keeps this request's reference
        first, last = [], []
        for block in ordered_blocks:
            if block.is_null:
                continue
            if block.ref_cnt > 1:
                continue
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                (first if block.block_hash is None else last).append(block)
        self.free_block_queue.prepend_n(first)
        self.free_block_queue.append_n(last)
    m.BlockPool.free_blocks = free_blocks
""", "PEER-14", "free_blocks")
QUEUE_BACKLINK = Bug("vllm", "vllm.v1.core.kv_cache_utils", """
def patch(m):
    def remove(self, block):  # bug: the next block's back link is never repaired
        prev_block = block.prev_free_block
        next_block = block.next_free_block
        if prev_block is None or next_block is None:
            raise RuntimeError(f"remove() called on an invalid block: {block}")
        prev_block.next_free_block = next_block
        block.prev_free_block = block.next_free_block = None
        self.num_free_blocks -= 1
    m.FreeKVCacheBlockQueue.remove = remove
""", "PEER-14", "remove")
EVICT_AHEAD = Bug("vllm", "vllm.v1.core.block_pool", """
def patch(m):
    get_new = m.BlockPool.get_new_blocks
    def get_new_blocks(self, num_blocks):  # bug: "evict ahead" -- the next queued block loses its hash too
        ret = get_new(self, num_blocks)
        nxt = self.free_block_queue.fake_free_list_head.next_free_block
        if self.enable_caching and nxt is not None and nxt.block_id >= 0:
            self._maybe_evict_cached_block(nxt)
        return ret
    m.BlockPool.get_new_blocks = get_new_blocks
""", "PEER-15", "get_new_blocks")
PARENT_OFF_BY_ONE = Bug("vllm", "vllm.v1.core.block_pool", """
def patch(m):
    build = m.BlockPool._build_block_stored_event
    def _build_block_stored_event(self, request, **kw):  # bug: the parent of a stored run is one block too early
        k = kw["start_token_idx"] // kw["block_size"]
        if k >= 2:
            kw["parent_block_hash"] = m.maybe_convert_block_hash(request.block_hashes[k - 2])
        return build(self, request, **kw)
    m.BlockPool._build_block_stored_event = _build_block_stored_event
""", "EV-7", "_build_block_stored_event")
HIT_STAYS_QUEUED = Bug("vllm", "vllm.v1.core.block_pool", """
def patch(m):
    def touch(self, blocks):  # bug: a hit on a free-queue block never takes it out of the queue
        for block in blocks:
            if not block.is_null:
                block.ref_cnt += 1
    m.BlockPool.touch = touch
""", "PEER-14", "touch")
FREE_SHARED = Bug("vllm", "vllm.v1.core.block_pool", """
def patch(m):
    def free_blocks(self, ordered_blocks):  # bug: every freed block returns to the queue, shared ones too
        blocks = [b for b in ordered_blocks if not b.is_null]
        for b in blocks:
            b.ref_cnt -= 1
        self.free_block_queue.append_n(blocks)
    m.BlockPool.free_blocks = free_blocks
""", "PEER-14", "free_blocks")
OVER_ALLOCATE = Bug("vllm", "vllm.v1.core.kv_cache_manager", """
def patch(m):
    alloc = m.KVCacheManager.allocate_slots
    def allocate_slots(self, request, num_new_tokens, *args, **kw):  # bug: one block of slots too many
        kw["num_lookahead_tokens"] = kw.get("num_lookahead_tokens", 0) + 16  # a stray block of 16-token slots
        return alloc(self, request, num_new_tokens, *args, **kw)
    m.KVCacheManager.allocate_slots = allocate_slots
""", "PEER-15", "allocate_slots")
UNLOCK_SHORT = Bug("sglang", "sglang.srt.mem_cache.radix_cache", """
def patch(m):
    def dec_lock_ref(self, node, params=None):  # bug: the walk stops one node short of the root
        delta = 0
        while node != self.root_node and node.parent != self.root_node:
            if node.lock_ref == 1:
                self.evictable_size_ += len(node.key)
                self.protected_size_ -= len(node.key)
                delta += len(node.key)
            node.lock_ref -= 1
            self._update_leaf_status(node)
            node = node.parent
        return m.DecLockRefResult(delta=delta)
    m.RadixCache.dec_lock_ref = dec_lock_ref
""", "PEER-9", "dec_lock_ref")
EVICT_PAGES_AS_TOKENS = Bug("sglang", "sglang.srt.mem_cache.radix_cache", """
def patch(m):
    evict = m.RadixCache.evict
    def evict_pages(self, params):  # bug: the request is read as pages, not tokens
        params.num_tokens = params.num_tokens * self.page_size
        return evict(self, params)
    m.RadixCache.evict = evict_pages
""", "PEER-15", "evict")
FREE_PER_SLOT = Bug("sglang", "sglang.srt.mem_cache.allocator.paged", """
def patch(m):
    def free(self, free_index):  # bug: torch.unique dropped -- a page freed once per token slot
        if free_index.numel() == 0:
            return
        if self.free_group is None:
            self._release_page_ids(free_index // self.page_size)
        else:
            self.free_group.append(self._copy_for_free_group(free_index))
    m.PagedTokenToKVPoolAllocator.free = free
""", "PEER-14", "free")
SEGMENT_LEAK = Bug("sglang", "sglang.srt.mem_cache.allocator.paged", """
def patch(m):
    def free_segment(self, free_index, *, start_pos):  # bug: the segment's last page is never freed
        if free_index.numel() == 0:
            return
        reps = free_index[::self.page_size]
        self.free_page_ids(reps[:-1] // self.page_size)
    m.PagedTokenToKVPoolAllocator.free_segment = free_segment
""", "PEER-14", "free_segment")
SPLIT_OLD_PARENT = Bug("sglang", "sglang.srt.mem_cache.radix_cache", """
def patch(m):
    split = m.RadixCache._split_node
    def split_node(self, key, child, split_len):  # bug: the child keeps its old parent
        parent = child.parent
        new = split(self, key, child, split_len)
        child.parent = parent
        return new
    m.RadixCache._split_node = split_node
""", "PEER-14", "split_node")
DELETE_TWICE = Bug("sglang", "sglang.srt.mem_cache.radix_cache", """
def patch(m):
    delete = m.RadixCache._delete_leaf
    def delete_leaf(self, node):  # bug: the leaf is unlinked twice
        delete(self, node)
        delete(self, node)
    m.RadixCache._delete_leaf = delete_leaf
""", "PEER-11", "_delete_leaf")

ALL = {
    "refcount-leak": REFCOUNT_LEAK,
    "queue-backlink": QUEUE_BACKLINK,
    "evict-ahead": EVICT_AHEAD,
    "parent-off-by-one": PARENT_OFF_BY_ONE,
    "hit-stays-queued": HIT_STAYS_QUEUED,
    "free-shared": FREE_SHARED,
    "over-allocate": OVER_ALLOCATE,
    "unlock-short": UNLOCK_SHORT,
    "evict-pages-as-tokens": EVICT_PAGES_AS_TOKENS,
    "free-per-slot": FREE_PER_SLOT,
    "segment-leak": SEGMENT_LEAK,
    "split-old-parent": SPLIT_OLD_PARENT,
    "delete-twice": DELETE_TWICE,
}
