"""PEER-20 ... PEER-22, PEER-24: the cache groups of a hybrid model (full, sliding window, state), judged on vLLM and
SGLang.

``kvsim peer vllm|sglang --kv-groups SPEC`` builds the engine's own hybrid configuration and reports every
request's block table in every group, as the step's forward reads it. The checkers are the group judge's
(sim.peers.judges.group_judge.GroupJudge, named by dotted path: the catalogue never imports sim). Quotes are from the
cache concepts (seed 002, which has no headings: cited by line) and from the engines' source. Aliasing across
groups and per-group accounting extend PEER-8 and PEER-9 (their entries live with the engine judge).
"""

from __future__ import annotations

from kvsim.spec.catalogue import transition_rule

_GJ = "kvsim.sim.peers.judges.group_judge.GroupJudge"

transition_rule(
    "PEER-20", "A prefix hit is one every cache group can serve: no group raises the common hit",
    'cache concepts L179: "ProbePrefix is a read-only lookup of prefix hits per group on both tiers, converged to '
    'the common prefix length across the matched groups"; L185: "Prefix-closed groups match first; non-closed '
    'groups (SWA, Mamba) match only within the boundary the closed groups settled"; L155: "SwaMatcher scans '
    'right-to-left for a run backing a resumable boundary"; vllm/v1/core/kv_cache_coordinator.py '
    'HybridKVCacheCoordinator.find_longest_cache_hit: "Each attention type either accepts the current candidate '
    'length or reduces it"; sglang/srt/mem_cache/unified_radix_cache.py UnifiedRadixCache.match_prefix',
    f"{_GJ}.hits",
    decisions="Judged at each request's first scheduling and at every resumption, with hit H (the computed tokens it "
              "starts from). Every full group but the first (whose hit PEER-7 judges) names, in every slot below H, "
              "a block holding exactly that prefix block, computed by an earlier forward or by the same step's (vLLM "
              "publishes a block when it allocates it, and writes every layer's KV before attending); every "
              "sliding-window group of window W names such blocks in each slot covering [H - W + 1, H) -- the run "
              "a resumable boundary needs -- and its other slots below H are null or hold their own block. A table "
              "too short to reach H in any group is a hit that group cannot serve. A state group's part is PEER-22's "
              "(the state after exactly H tokens). A hit below what every group could serve is allowed behaviour "
              "(a miss, seen in the hit ratio), never a finding: the rule is that no group raises the hit. A hit "
              "raised beyond what every group holds also hits content the first group lacks (PEER-7 at the same "
              "step, judged first): one cause, so the PEER-20 finding about that request at that step is the root "
              "and the PEER-7 its first consequence (sim.peers.judges.peer_recovery.OUTRANKS).",
    scope="cache",
    tests=("tests/peers/test_group_judge.py::test_legal_run_keeps_every_rule",
           "tests/peers/test_group_judge.py::test_a_hit_the_window_group_cannot_serve_fires_peer_20",
           "tests/peers/test_group_judge.py::test_a_window_slot_holding_another_prefix_fires_peer_20",
           "tests/peers/test_actionable.py::test_a_raised_common_hit_outranks_the_first_groups_content_finding_of_its_"
           "step",
           "tests/peers/test_hybrid_engines.py::test_a_planted_hybrid_bug_is_caught_by_its_rule",
           "tests/peers/test_sglang_hybrid.py::test_clean_hybrid_sglang_passes_with_every_group_path_reached",
           "tests/peers/test_sglang_hybrid.py::test_a_planted_sglang_hybrid_bug_is_caught_by_its_rule"),
    context=("block", "group", "hit", "request", "slot"))

transition_rule(
    "PEER-21", "Each group keeps what its retention needs: full groups every block below the frontier, sliding "
    "groups the window the next queries read",
    'cache concepts L165: "ExpiredBlocksAt(spec, num_computed_tokens) is the retention policy (full attention never '
    'expires; SWA and Mamba-at-window-2 slide out whole pages)"; L160: "executes retention (ReclaimExpired punches '
    'the first N slots to null holes)"; L239: "a group must retain every token its layers can see ... '
    '(window_left + 1 <= sliding_window_tokens, matching GroupGeometry::ExpiredBlocksAt)"; L66: "retention keeps '
    'exactly what the queries after the boundary read"; vllm/v1/core/single_type_kv_cache_manager.py '
    'SlidingWindowManager.get_num_skipped_tokens, SingleTypeKVCacheManager.remove_skipped_blocks; '
    'sglang/srt/mem_cache/common.py free_swa_out_of_window_slots ("keep max(window, page) rounded up to whole '
    'pages")',
    f"{_GJ}.retention",
    decisions="Judged on every forward, per scheduled request computing tokens [c0, c1): a full group's table has a "
              "non-null block in every slot below c1; a sliding-window group of window W has, in every slot "
              "covering [c0 - W + 1, c1), a non-null block, and each such slot below c0 holds its prefix block "
              "(the keys and values those queries read). Dropping a slot wholly before c0 - W + 1 is allowed "
              "('may drop the rest'), keeping it too; whether a dropped block went back to the pool is PEER-9's "
              "count. A table shorter than c1's blocks is a forward writing where its table names nothing.",
    scope="cache",
    tests=("tests/peers/test_group_judge.py::test_legal_run_keeps_every_rule",
           "tests/peers/test_group_judge.py::test_a_full_group_slot_turning_null_fires_peer_21",
           "tests/peers/test_group_judge.py::test_a_window_slot_dropped_while_the_queries_read_it_fires_peer_21",
           "tests/peers/test_sglang_hybrid.py::test_clean_hybrid_sglang_passes_with_every_group_path_reached",
           "tests/peers/test_sglang_hybrid.py::test_a_planted_sglang_hybrid_bug_is_caught_by_its_rule"),
    context=("block", "computed", "end", "group", "request", "slot"))

transition_rule(
    "PEER-22", "A state group reads and hits only a state a forward wrote at exactly that boundary, in an earlier "
    "step",
    'cache concepts L76: "Computed state publication requires an Endpoint or Promoted boundary and checkpoint '
    'provenance at that exact prefix boundary ... Allocated slots and completed hashes alone are not proof"; L74: '
    '"publishing an unwritten intermediate checkpoint would break position identity"; L82: "Its slot is '
    '(checkpoint - 1) / block_granularity"; L155: "Mamba needs no matcher of its own: it is SwaMatcher at window '
    '2 -- keep the live state page plus its snapshot"; vllm/v1/core/single_type_kv_cache_manager.py MambaManager '
    '(align mode): find_longest_cache_hit, remove_skipped_blocks ("The block allocated in the previous step is '
    'used to copy Mamba states into the block allocated in the current step"), get_num_blocks_to_allocate ("Mamba '
    'can\'t rely on blocks generated by other requests in the current step")',
    f"{_GJ}.states",
    decisions="The judge's model of a state group with blocks of B tokens: a forward computing [c0, c1) of a request "
              "reads the state after c0 tokens from slot (c0 - 1) // B and writes the state after c1 tokens into "
              "slot (c1 - 1) // B of its table (vLLM's align-mode invariant 'slot p holds the state after exactly "
              "(p + 1) * block_size tokens', the prompt's last chunk and decode advancing inside their slot); a "
              "copy-on-write copies a state whole. Judged before every forward with c0 > 0 -- a hit included, "
              "c0 being the hit -- that slot names a block holding the state after exactly c0 tokens of this "
              "request's own tokens, written by a forward of an earlier step (a state the same step computes is "
              "not there yet), and that the output slot names a block. Which boundaries an engine keeps "
              "(Endpoint, Promoted, block-aligned checkpoints) is not judged: a hit lost because no checkpoint was "
              "kept there is allowed behaviour (vllm issue 45238's symptom is a miss, not a wrong hit). SGLang's "
              "reading (UnifiedRadixCache's Mamba component: one running state slot per request, a cached state "
              "copied into it on a hit, copies donated to the tree): no position names a state, so the driver, "
              "playing the model, writes each state as a tag into SGLang's own state tensor "
              "(sim.peers.judges.state_tags) and the rule is judged on what each forward reads: starting at c0 > 0, "
              "the state after exactly c0 tokens of the request's own sequence (any request's with that prefix), "
              "written by a forward of an earlier step; starting at 0, the zeroed state (SGLang clears a fresh "
              "request's slot).",
    scope="cache",
    tests=("tests/peers/test_group_judge.py::test_legal_run_keeps_every_rule",
           "tests/peers/test_group_judge.py::test_a_hit_on_a_state_never_written_there_fires_peer_22",
           "tests/peers/test_group_judge.py::test_a_hit_on_a_state_the_same_step_computes_fires_peer_22",
           "tests/peers/test_group_judge.py::test_a_hit_on_the_state_after_another_boundary_fires_peer_22",
           "tests/peers/test_group_judge.py::test_a_running_state_freed_fires_peer_22",
           "tests/peers/test_state_tags.py::test_tags_keep_a_run_that_reads_and_publishes_the_right_states",
           "tests/peers/test_state_tags.py::test_a_state_read_after_another_boundary_fires_peer_22",
           "tests/peers/test_state_tags.py::test_a_state_no_forward_wrote_fires_peer_22",
           "tests/peers/test_state_tags.py::test_a_first_forward_from_a_state_never_zeroed_fires_peer_22",
           "tests/peers/test_state_tags.py::test_a_state_read_of_another_prefix_fires_peer_22",
           "tests/peers/test_sglang_hybrid.py::test_clean_hybrid_sglang_passes_with_every_group_path_reached",
           "tests/peers/test_sglang_hybrid.py::test_a_planted_sglang_hybrid_bug_is_caught_by_its_rule"),
    context=("block", "computed", "end", "group", "request", "slot", "tag", "state_after", "writer"))

transition_rule(
    "PEER-24", "A state group publishes into its index only the state a forward wrote at exactly the node's "
    "boundary",
    'cache concepts L76: "Computed state publication requires an Endpoint or Promoted boundary and checkpoint '
    'provenance at that exact prefix boundary ... Allocated slots and completed hashes alone are not proof"; L74: '
    '"publishing an unwritten intermediate checkpoint would break position identity"; L83: "An internal '
    'checkpoint written at floor(after/P)*P is a valid publication source"; '
    'sglang/srt/mem_cache/unified_cache/components/mamba.py MambaComponent.prepare_for_caching_req ("Donate the '
    'mamba index to the radix cache"), commit_insert_component_data; unified_radix_cache.py checkpoint_into_tree '
    '(the key truncated to the effective cache length, then page-aligned)',
    "kvsim.sim.peers.judges.state_tags.StateTags.step",
    decisions="Where a state group keeps its cached states in a radix tree (SGLang's UnifiedRadixCache), a "
              "checkpoint hands the tree one state per node: PEER-22 judges it only when a later hit reads it, so a "
              "wrong state published and evicted unread, or read by no request whose check could tell, goes "
              "unseen. Judged at each insert that leaves the tree holding the request's state (not when the node "
              "already had one): the state in the slot the tree takes, as its tag says (sim.peers.judges."
              "state_tags), is the state after exactly L tokens of that request's sequence, L being the length of "
              "the key the node ends at. Which boundaries get a state (every checkpoint with no_buffer, the track "
              "grid with extra_buffer) is not judged.",
    scope="cache",
    tests=("tests/peers/test_state_tags.py::test_tags_keep_a_run_that_reads_and_publishes_the_right_states",
           "tests/peers/test_state_tags.py::test_a_state_published_for_another_boundary_fires_peer_24",
           "tests/peers/test_state_tags.py::test_a_state_no_forward_wrote_published_fires_peer_24",
           "tests/peers/test_sglang_hybrid.py::test_clean_hybrid_sglang_passes_with_every_group_path_reached",
           "tests/peers/test_sglang_hybrid.py::test_a_planted_sglang_hybrid_bug_is_caught_by_its_rule"),
    context=("group", "length", "request", "state_after", "tag"))
