"""TS-NC-*: clauses of the cache concepts (seed 002) that no scheduler-level judge can check.

A scheduler's plans (cachetrace/1) and kvsim's cache model show block tables, cache ops, keys and
acknowledgements; they do not show kernels, streams, runtime objects, Python-side declarations, L3
namespaces, the L3 client's replies and key sets, collectives or the serving process around the scheduler. Each
entry names the clause (with its seed line), why it cannot be judged here, and what nearby rule checks the
scheduler-visible part, so nothing is left out silently.
"""

from __future__ import annotations

from kvsim.spec.catalogue import clause_rule

_WHY_KERNEL = "a kernel's arithmetic and launches are not in any scheduler plan or cache-model state"
_WHY_RUNTIME = "the Python runtime's objects and streams are not observable in a scheduler's plans"

clause_rule("TS-NC-1", "kernel_page_size comes from the kernel registry or config, never from prefix_granularity",
            'cache concepts L27: "All kernel page geometry is registered in one file ... deriving kernel_page_size '
            'from prefix_granularity is a category error and a bug"; L29 (DeepSeek V4): "nothing derives from '
            'prefix_granularity"; "any positive multiple of the kernel page is accepted (asserted at backend '
            'construction and in the recipe\'s check_layout)"; "the registry constant itself, not a second copy of '
            'the number"',
            not_checkable=f"{_WHY_KERNEL}, and a backend asserts the multiple when it is built; TS-GEO-1 checks the "
                          "declared geometry kvsim's model is given")
clause_rule("TS-NC-2", "State-checkpoint kernels: conv-window writes, body/tail scans, packed uploads, int64 ids, "
                      "slot gathers",
            'cache concepts L84-90: "convolution windows are assembled directly into their destination blocks"; '
            '"Checkpoint writers widen page IDs to int64"; "Recurrent execution partitions the batch into a body '
            'scan and a tail scan"; L74: "State consumers may gather only the declared input/output slots"',
            not_checkable=f"{_WHY_KERNEL}; which slots a state group materializes (and which it leaves as null "
                          "holes) is modelled in kvmodel.cache")
clause_rule("TS-NC-3", "Speculative KDA verification replays the accepted prefix; its workspace is reserved",
            'cache concepts L92: "Speculative KDA verification stores no per-position recurrent states"',
            not_checkable=f"{_WHY_RUNTIME}: verification workspaces are sized by recipes before the arena")
clause_rule("TS-NC-4", "One logical-to-physical mapping point; provenance of prefix_granularity and kv_page_size",
            'cache concepts L96-100: "This mapping should happen at one designated point"; "each quantity is '
            'sourced from its own domain and never laundered through another\'s name"; L343-344; L300: "There is '
            'exactly one logical→physical mapping point in Python. Adding a second one is a bug"',
            not_checkable=f"{_WHY_RUNTIME}: where a value is read from is a property of the code, not of a trace")
clause_rule("TS-NC-5", "Layerwise L2 load fences guard every layer-owned field; the post-verify commit needs none",
            'cache concepts L102-104: "Layerwise L2 load fences guard the first access to every field owned by a '
            'layer"; "A batched post-verification commit is the one side-cache writer that issues no fence"',
            not_checkable=f"{_WHY_RUNTIME}; the scheduler-visible half (a load targets fresh pages; sources held "
                          "until the ACK) is PEER-2 and TS-L2-1")
clause_rule("TS-NC-6", "Host-transfer workspace: transport capability, stream ordering, staging lanes, ready flags",
            'cache concepts L106-110: "Every L2 copy is ordered after the prerequisite stream the caller names"; '
            '"The two kinds use separate staging lanes"; "Ready flags are valid only for a full-geometry H2D '
            'transfer"; L112: "the runtime refuses an op with nothing to copy"',
            not_checkable=f"{_WHY_RUNTIME}; what the scheduler decides about the same copies (pinned or "
                          "stream-ordered sources, launch order, one transfer per op) is TS-L2-1..3")
clause_rule("TS-NC-7", "The L3 namespace covers checkpoint, layout, quantization, parallel widths and runtime epoch",
            'cache concepts L189: "The hashed namespace (storage_key_prefix) covers the loaded checkpoint ... and '
            'L3_RUNTIME_COMPAT"; "Object keys are {tsl3v1-<sha256>}_{content_hash}|g{group}|o{page_offset}|'
            'r{tp_rank}|c{cp_rank}"',
            not_checkable="the namespace is a digest of model files and server options the scheduler never sees; "
                          "plans carry content hashes (judged by TS-L2-6), not object keys")
clause_rule("TS-NC-8", "L3 completions and flushes are reduced across TP/CP/PP (and DP for flush) before they apply",
            'cache concepts L189: "WriteBackDone / LoadBackDone are intersected across every cache-owning rank"; '
            '"MIN-reduce a non-mutating CanClearCache / CacheIsClearable probe"; L193: "a different lane '
            'completing cannot release its pages"',
            not_checkable="collectives run between ranks outside one scheduler; a single scheduler's trace shows "
                          "one rank. Its local half -- ClearCache refused with write-backs in flight -- is TS-L2-8")
clause_rule("TS-NC-9", "The cache pipeline layers -> group -> pack -> bind, declared once per family",
            'cache concepts L203-230: "Every model family\'s cache is built by the same four-stage pipeline"; '
            '"No round-trip reconciliation"; "Recipes do not inspect the hardware"',
            not_checkable=f"{_WHY_RUNTIME}: recipes run before the scheduler exists; kvsim checks their result "
                          "(group specs, packing) through TS-GEO-1 and TS-POOL-*")
clause_rule("TS-NC-10", "Storage vs visibility: a group retains what its layers see; replay visibility; block drafters",
            'cache concepts L232-248: "a group must retain every token its layers can see"; "Visibility for '
            'replayed rows starts at the replay window\'s first token"; "Block drafters ... write their KV at the '
            'target\'s cache locations"',
            not_checkable=f"{_WHY_RUNTIME}: layer masks and drafters are model code; the scheduler-visible write "
                          "floor for shared groups is judged by TS-TBL-1 in the peer contract")
clause_rule("TS-NC-11", "Capacity shapes, max_num_seqs across DP, virtual-block translation, ID validation in "
                       "batch metadata and zeroing",
            'cache concepts L250-278: "Capacity has exactly two shapes"; "Translation from virtual to local IDs is '
            'one operation with shard_count as a parameter"; "The arena\'s zero_blocks() validates every ID"; L70: '
            '"With DCP virtual-block placement, CacheBatchMetadata validates exported IDs against each group\'s '
            'virtual block count"',
            not_checkable=f"{_WHY_RUNTIME}; the allocator half (placement, null block, shard buckets) is "
                          "TS-POOL-1..4, every table id within its group's pages is PEER-1, and the capacity "
                          "arithmetic is checked against the wheel's CapacityModel in tests/peers")
clause_rule("TS-NC-12", "Sparse indexers: weights, dispatch and verification state ownership",
            'cache concepts L280-289: "The model owns indexer weights and top-k selection"',
            not_checkable=f"{_WHY_RUNTIME}: model and backend ownership is code structure")
clause_rule("TS-NC-13", "Code structure: naming, page_size grep-zero, layering, what each structure holds, placement",
            'cache concepts L50: "The identifier page_size must not appear anywhere in tokenspeed-scheduler"; '
            'L291-294, L303-365 (audit 2026-08-16); naming: L9: "a quantity counting storage must not borrow one of '
            'these names"; L18: "vocabulary is only legal here"; L48: "scheduling, FSM, and config-consuming '
            'code must not reason about it"; L52: "belong in cache-group type names, on either side of the '
            'bridge"; L124: "a page word asserts that the consumer is paged KV-cache attention"; '
            'L130: "State-based attention has no pages and therefore no page table"; L133: "Use page_table when '
            '(and only when) the consumer is paged KV-cache attention"; layering and ownership: L38: "The pool '
            'knows which child slots are occupied, never who holds them"; L68: "Consumers outside the cache layer '
            'treat the ids as opaque"; L144: "neither side holds the other\'s data structures"; L149: '
            '"cache/allocator/ perceives no logical token quantity at all"; L150: "The conversion between the two '
            'lives in the coordinator\'s GroupGeometry"; L155: "Probe takes the L3 hit set as a required '
            'argument"; "A matcher only reads the group\'s index"; L160: "GroupAllocator is physical placement '
            'only, and there is exactly one of it — no subclasses"; L164: "the manager executes the plan without '
            'deriving anything"; L167: "The index never sees a BlockTable; the allocator remains its only '
            'mutator"; L175: "It holds no per-request state"; L181: "Publication fields are request-scoped"; L195: '
            '"one CacheGroup per CacheGroupSpec (group_id = index)"; "enable_l3_storage is a required argument"; '
            'L201: "entries must not be inserted, erased, or re-keyed during traversal"; "A full traversal costs '
            'O(N)"; rules of thumb L298-301: "Never mix the two in one interface without an explicit mapping"',
            not_checkable="identifiers, file placement, which structure holds, reads or mutates what, API "
                          "signatures and the cost of an internal pass are properties of source code, not of a "
                          "scheduler's decisions; kvsim keeps the same vocabulary in its own model (kvmodel.cache), "
                          "and what the layering protects in the plans (hits at P multiples, opaque block ids "
                          "within range) is TS-PFX-1 and PEER-1")
clause_rule("TS-NC-14", "Declaration shapes stop at the bridge: row geometry or checkpoint_granularity, folded",
            'cache concepts L16: "a group declares it through one of two shapes (Python CacheGroupSpec)"; L19: '
            '"declaring fictional row geometry for it is a bug, not a convention"; "retention is always '
            'full_history"; L21: "exactly three (family, retention) combinations exist"; "state is not a routing '
            'label"; L34: "The view is defined by the consumer, not by the block"; L62: "Neither '
            'checkpoint_granularity nor rows_per_page / entry_stride_tokens enters tokenspeed-scheduler at all"; '
            '"a snapshot group\'s block_granularity equals its checkpoint_granularity numerically, a paged '
            'group\'s equals rows_per_page × entry_stride_tokens"',
            not_checkable="rows_per_page, entry_stride_tokens and checkpoint_granularity live on the Python "
                          "CacheGroupSpec and are folded before the bridge: a scheduler's plans and cachetrace/1's "
                          "header carry only each group's kind and block_granularity, so the shape a group was "
                          "declared in, the exactness of the fold, a state group's declared retention and the view "
                          "a consumer takes cannot be seen. kvsim's own CacheGroupSpec holds the same shapes "
                          "(CacheConfigError) and TS-GEO-1 checks the folded geometry it is given")
clause_rule("TS-NC-15", "The L3 client: store replies, the key shadow and the unread set, prefix hashing without L3",
            'cache concepts L189: "A truncated batch_is_exist reply is a failed put, not an implicit success"; '
            '"Host eviction does not drop the L3 key"; "The scheduler\'s L3 key shadow is bounded to Host page '
            'capacity"; "A single registration keeps the earliest contiguous prefix keys so prefix-closed matchers '
            'still hit"; "Unregister removes keys from both the live set and the LRU order deque"; "A positive but '
            'short Mooncake byte count is a miss, not a success"; "Successfully restored pages in a mixed prefetch '
            'stay readable"; "A later Host backup forgets an unread entry only when the object was absent and this '
            'put created it"; "The unread set is also bounded to Host CacheBlock capacity"; "Host-only and '
            '--disable-kvstore admission must not hash prefixes or copy group_keys"',
            not_checkable="what the object store answers (existence, byte counts, whether a put created the "
                          "object) is in no plan or result, nor are the scheduler's L3 key shadow, its unread set "
                          "or the hashing it skips: a key wrongly dropped or kept unread shows only as a prefetch "
                          "never issued, which a negative store answer explains as well. That a failed prefetch "
                          "publishes nothing is TS-L2-10")
clause_rule("TS-NC-16", "The serving process around the scheduler: weight loads, CP request intake, store mounts",
            'cache concepts L189: "A live weight load flushes Device/Host first so new parameters cannot reuse the '
            'previous checkpoint"; "only cp_rank==0 owns request I/O and load reporting"; "Mooncake '
            'global_segment_size is divided by attention TP × CP × PP"; "the loop withholds that stream from '
            'execute so the peer does not land suffix-only KV on empty prefix pages"',
            not_checkable="weight loads, which CP rank reads requests, the object store's mount size and what the "
                          "event loop hands to execute belong to the serving process, outside the plans one "
                          "scheduler emits; an accepted or refused ClearCache is judged by TS-L2-8 and PEER-4, and "
                          "the D-role retraction is a plan decision, not excused here")
