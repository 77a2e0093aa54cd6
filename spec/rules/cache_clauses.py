"""TS-NC-*: clauses of the cache concepts (seed 002) that no scheduler-level judge can check.

A scheduler's plans (cachetrace/1) and kvsim's cache model show block tables, cache ops, keys and
acknowledgements; they do not show kernels, streams, runtime objects, L3 namespaces or collectives. Each
entry names the clause (with its seed line), why it cannot be judged here, and what nearby rule checks the
scheduler-visible part, so nothing is left out silently.
"""

from __future__ import annotations

from kvsim.spec.catalogue import clause_rule

_WHY_KERNEL = "a kernel's arithmetic and launches are not in any scheduler plan or cache-model state"
_WHY_RUNTIME = "the Python runtime's objects and streams are not observable in a scheduler's plans"

clause_rule("TS-NC-1", "kernel_page_size comes from the kernel registry or config, never from prefix_granularity",
            'cache concepts L27: "All kernel page geometry is registered in one file ... deriving kernel_page_size '
            'from prefix_granularity is a category error and a bug"',
            not_checkable=f"{_WHY_KERNEL}; TS-GEO-1 checks the declared geometry kvsim's model is given")
clause_rule("TS-NC-2", "State-checkpoint kernels: conv-window writes, body/tail scans, packed uploads, int64 ids",
            'cache concepts L84-90: "convolution windows are assembled directly into their destination blocks"; '
            '"Checkpoint writers widen page IDs to int64"; "Recurrent execution partitions the batch into a body '
            'scan and a tail scan"',
            not_checkable=f"{_WHY_KERNEL}; which slots a state group materializes is modelled in kvmodel.cache")
clause_rule("TS-NC-3", "Speculative KDA verification replays the accepted prefix; its workspace is reserved",
            'cache concepts L92: "Speculative KDA verification stores no per-position recurrent states"',
            not_checkable=f"{_WHY_RUNTIME}: verification workspaces are sized by recipes before the arena")
clause_rule("TS-NC-4", "One logical-to-physical mapping point; provenance of prefix_granularity and kv_page_size",
            'cache concepts L96-100: "This mapping should happen at one designated point"; "each quantity is '
            'sourced from its own domain and never laundered through another\'s name"; L343-344',
            not_checkable=f"{_WHY_RUNTIME}: where a value is read from is a property of the code, not of a trace")
clause_rule("TS-NC-5", "Layerwise L2 load fences guard every layer-owned field; the post-verify commit needs none",
            'cache concepts L102-104: "Layerwise L2 load fences guard the first access to every field owned by a '
            'layer"; "A batched post-verification commit is the one side-cache writer that issues no fence"',
            not_checkable=f"{_WHY_RUNTIME}; the scheduler-visible half (a load targets fresh pages; sources held "
                          "until the ACK) is PEER-2 and TS-L2-1")
clause_rule("TS-NC-6", "Host-transfer workspace: transport capability, stream ordering, staging lanes, ready flags",
            'cache concepts L106-110: "Every L2 copy is ordered after the prerequisite stream the caller names"; '
            '"The two kinds use separate staging lanes"; "Ready flags are valid only for a full-geometry H2D '
            'transfer"',
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
clause_rule("TS-NC-11", "Capacity shapes, max_num_seqs across DP, virtual-block translation and zeroing validation",
            'cache concepts L250-278: "Capacity has exactly two shapes"; "Translation from virtual to local IDs is '
            'one operation with shard_count as a parameter"; "The arena\'s zero_blocks() validates every ID"',
            not_checkable=f"{_WHY_RUNTIME}; the allocator half (placement, null block, shard buckets) is "
                          "TS-POOL-1..4 and the capacity arithmetic is checked against the wheel's CapacityModel "
                          "in tests/peers")
clause_rule("TS-NC-12", "Sparse indexers: weights, dispatch and verification state ownership",
            'cache concepts L280-289: "The model owns indexer weights and top-k selection"',
            not_checkable=f"{_WHY_RUNTIME}: model and backend ownership is code structure")
clause_rule("TS-NC-13", "Code-structure audit: page_size grep-zero in the scheduler, directory placement, naming",
            'cache concepts L50: "The identifier page_size must not appear anywhere in tokenspeed-scheduler"; '
            'L291-294, L303-365 (audit 2026-08-16)',
            not_checkable="identifiers and file placement are properties of source code, not of a scheduler's "
                          "decisions; kvsim keeps the same vocabulary in its own model (kvmodel.cache)")
