"""TS-ST-6..8 and TS-GEO-2: runtime and kernel clauses of the cache concepts that a NumPy reference can hold
(kvmodel.cache.state_scan, kvmodel.cache.slot_mapping). Each checker compares an implementation handed to it with
the reference; none of them sees TokenSpeed's own kernels, which are not in any plan. The slot mapping is run on the
wheel's real block tables in the tests."""

from __future__ import annotations

from kvsim.kvmodel.cache import slot_mapping, state_scan
from kvsim.spec.catalogue import transition_rule

transition_rule(
    "TS-ST-6", "The body/tail split equals the ordinary scan; negative packing and gather indices write zeros",
    'cache concepts L84: "Recurrent execution partitions the batch into a body scan and a tail scan when an internal '
    'checkpoint is needed"; "only crossing rows enter the packed tail scan, initialized directly from their body '
    'final states. Body and tail outputs are restored to original token order, so every valid token is evaluated '
    'exactly once while the aligned and final states are both retained"; "Negative token indices make packing write '
    'zeros; negative inverse sources make gathering write zero output padding"; L86: "Such an inactive slot has a '
    'negative checkpoint destination and output map; its dummy scan result cannot overwrite the body\'s final '
    'state"', state_scan.check_split_scan,
    decisions="The recurrence is a stand-in h_t = 0.5 h_(t-1) + x_t (order-dependent, state-carrying). An "
              "implementation of the split passes when its outputs equal the unsplit scan's token for token, its "
              "aligned state equals the unsplit state at the checkpoint and its final state the unsplit final state; "
              "packing and gathering (check_pack_gather) write zero for every negative index, never x[-1]. The "
              "merged capacity graph (L86, check_capacity_scan against state_scan.capacity_scan) gives every "
              "request a tail slot: one without an internal checkpoint runs a dummy scan whose checkpoint "
              "destination and output map are -1, and the masked writer (write_masked) drops it -- its "
              "continuation state stays the body's (the unsplit final state) and no checkpoint is written for it. "
              "The kernels' layouts, staging buffers and graph capture are not modelled.",
    evidence="model", scope="cache",
    tests=("tests/cache/test_state_reference.py::test_split_scan_reference_and_a_packed_spelling_agree_with_the_ordinary_scan",
           "tests/cache/test_state_reference.py::test_a_tail_from_zero_a_token_run_twice_or_wrapping_negative_indices_fires",
           "tests/cache/test_state_reference.py::test_inactive_capacity_slots_leave_the_bodys_final_state",
           "tests/cache/test_state_reference.py::test_a_dummy_scan_overwriting_the_final_state_fires"))

transition_rule(
    "TS-ST-7", "At most one internal checkpoint per request, the last aligned one inside the extent",
    'cache concepts L84: "At most one internal checkpoint per eligible request is selected"; L82: "the last internal '
    'reusable checkpoint is at floor(after / prefix_granularity) * prefix_granularity, strictly between before and '
    'after"', state_scan.check_selection,
    decisions="An implementation returns the positions it materializes for an extent [before, after): none when no "
              "multiple of P lies strictly inside, else exactly floor(after/P)*P. On the wheel the plan carries one "
              "checkpoint length per extend (so never two) and TS-ST-3 judges its position.",
    evidence="model", scope="cache",
    tests=("tests/cache/test_state_reference.py::test_the_last_aligned_checkpoint_alone_is_selected",
           "tests/cache/test_state_reference.py::test_every_aligned_boundary_or_the_extent_end_selected_fires"))

transition_rule(
    "TS-ST-8", "The snapshot is selected at the prefix boundary and addressed by the state block span",
    'cache concepts L352: "Prefix reuse also requires the state-checkpoint mapping point to select the snapshot at '
    'the contract\'s prefix boundary, independently of its state-block span"; L82: "Its slot is (checkpoint - 1) / '
    'block_granularity. The two granularities need not be equal. Selecting the snapshot by a smaller state-group span '
    'would leave the prefix-boundary state unwritten while the coordinator publishes it"',
    state_scan.check_snapshot_slots,
    decisions="For (before, after, P, bg): the slot is (floor(after/P)*P - 1) // bg when that boundary lies strictly "
              "inside the extent, else none. Selecting at floor(after/bg)*bg (the block span) fires whenever bg < P "
              "puts a block boundary past the prefix boundary.",
    evidence="model", scope="cache",
    tests=("tests/cache/test_state_reference.py::test_snapshot_slot_selected_at_p_and_addressed_by_the_block_span",
           "tests/cache/test_state_reference.py::test_snapshot_selected_by_the_state_block_span_fires"))

transition_rule(
    "TS-GEO-2", "Token slots are table[pos // span] * span + pos % span, page-size invariant, -1 where no block is",
    'cache concepts L344: "The slot arithmetic itself lives in the mapping layer in exactly two spellings of one '
    'invariant (table[req, pos // P] * P + pos % P, which is page-size invariant) ... failing closed to the -1 skip '
    'sentinel for group buffers with no dummy page"; L68: "row i of a request\'s table covers tokens [i * '
    'block_granularity, (i + 1) * block_granularity)"', slot_mapping.check_mapping,
    decisions="The token-shaped resolve of a row: a position past the row, on padding (-1) or on a null hole (0) "
              "resolves to -1 (the router's spelling fails to the dummy page 0 instead); the same row expanded to "
              "kernel pages of any k dividing block_granularity resolves every position to the same slot. Checked "
              "on the wheel's recorded block tables; the runtime's own resolve is not in a plan.",
    evidence="model", scope="cache",
    tests=("tests/cache/test_state_reference.py::test_wheel_tables_resolve_page_size_invariantly_with_holes_failing_closed",
           "tests/cache/test_state_reference.py::test_an_unmasked_or_page_local_mapping_fires_on_the_wheel_tables"))
