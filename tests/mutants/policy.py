"""Seeded bugs of the engines' eviction-policy checkers (PEER-12 sim/peers/vllm/policy.py, PEER-13
sim/peers/sglang/policy.py) and deep counters (PEER-9 sim/peers/vllm/counters.py, sim/peers/sglang/counters.py) for
`kvsim selfcheck`, in the record format of `catalogue.py` (which concatenates them). Each is killed by the
`judge-policy` machine (sim/fuzz/policy_machine.py, against the reference engines sim/fuzz/ref_queue.py and
sim/fuzz/ref_radix.py). Plain data: no kvsim import here.
"""

MUTANTS = [
    dict(name="policy-vllm-empty-block-ignored", machine="judge-policy",
         bug="PEER-12 forgets the blocks freed without content: a cached block evicted while one of them waits at "
             "the queue's head passes",
         file="sim/peers/vllm/policy.py",
         old="        empty = next((b for b in self.empty if b not in prepended), None)  # free since before the step",
         new="        empty = None"),
    dict(name="policy-vllm-release-not-reversed", machine="judge-policy",
         bug="PEER-12 ranks a finished request's blocks in table order: vLLM's tail-first release (free_blocks of the "
             "reversed table) reads as head-first and a correct eviction is reported",
         file="sim/peers/vllm/policy.py",
         old="            for pos, blk in enumerate(reversed(r.table)):",
         new="            for pos, blk in enumerate(r.table):"),
    dict(name="policy-vllm-earlier-release-ignored", machine="judge-policy",
         bug="PEER-12 compares an evicted block only with its own release: a block freed in a later step evicted "
             "before one freed earlier passes",
         file="sim/peers/vllm/policy.py",
         old="            ahead = first if first is not None and first[1] < ep else None",
         new="            ahead = None"),
    dict(name="policy-sglang-locked-leaf-evictable", machine="judge-policy",
         bug="PEER-13 peels locked leaves too: the eviction of a leaf a running request locks passes",
         file="sim/peers/sglang/policy.py",
         old="    heap = [(n[2], i) for i, n in enumerate(nodes) if kids[i] == 0 and n[1] == 0]",
         new="    heap = [(n[2], i) for i, n in enumerate(nodes) if kids[i] == 0]"),
    dict(name="policy-sglang-mru-order", machine="judge-policy",
         bug="PEER-13 peels the most recently accessed leaf first: SGLang's LRU evictions are reported",
         file="sim/peers/sglang/policy.py",
         old="    heap = [(n[2], i) for i, n in enumerate(nodes) if kids[i] == 0 and n[1] == 0]",
         new="    heap = [(-n[2], i) for i, n in enumerate(nodes) if kids[i] == 0 and n[1] == 0]"),
    dict(name="counters-vllm-walk-one-way", machine="judge-policy",
         bug="vLLM's free queue walk compared with num_free_blocks one way only: a block counted free but missing "
             "from the queue passes",
         file="sim/peers/vllm/counters.py",
         old="    elif walk != count:",
         new="    elif walk > count:"),
    dict(name="counters-vllm-ref-sum-one-way", machine="judge-policy",
         bug="ref_cnt summed over vLLM's pool compared one way only: a block referenced once too often passes",
         file="sim/peers/vllm/counters.py",
         old="    if probe[\"ref_sum\"] != want:",
         new="    if probe[\"ref_sum\"] < want:"),
    dict(name="counters-sglang-lock-ref-unchecked", machine="judge-policy",
         bug="SGLang's per-node lock_ref is never compared with the locks the scheduler holds: a dec_lock_ref that "
             "stops short of the root passes",
         file="sim/peers/sglang/counters.py",
         old="    if probe[\"lock_mismatch\"]:",
         new="    if False:"),
    dict(name="counters-sglang-evictable-unchecked", machine="judge-policy",
         bug="SGLang's evictable_size_ counter is not compared with the tree: a deleted leaf's tokens left in it pass",
         file="sim/peers/sglang/counters.py",
         old="    for kind in (\"evictable\", \"protected\"):",
         new="    for kind in (\"protected\",):"),
    dict(name="counters-sglang-leaf-set-off-by-one", machine="judge-policy",
         bug="SGLang's evictable_leaves compared with the tree's unlocked leaves with one difference allowed: a node "
             "that never joined the set passes",
         file="sim/peers/sglang/counters.py",
         old="    if probe[\"leaves_differ\"]:",
         new="    if probe[\"leaves_differ\"] > 1:"),
]
