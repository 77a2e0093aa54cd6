"""TS-ADM-3 and TS-POOL-5: the scheduler's single-request bound and its per-plan page gauge, judged on a real
scheduler's plans (sim.peers.cachetrace.capacity.Capacity, named by dotted path: the catalogue never imports sim)."""

from __future__ import annotations

from kvsim.spec.catalogue import transition_rule

_C = "kvsim.sim.peers.cachetrace.capacity.Capacity"

transition_rule(
    "TS-ADM-3", "A request is refused at submission exactly when it exceeds the CapacityModel's single-request bound",
    'cache concepts L250: "The per-request working set ... is therefore defined once, in C++, and the Scheduler '
    'bounds single requests against the pool with the same model" (the seed cites TokenSpeed\'s scheduler design '
    'document, §1.4); "parents_needed '
    '... hands the group specs ... to the scheduler\'s own CapacityModel"', f"{_C}.submit",
    decisions="The cachetrace/1 header's max_single_request_tokens is what the scheduler's CapacityModel, built "
              "from the same SchedulerConfig, answers for the usable pool (num_device_pages - 1 LCM blocks): the "
              "model recipes size pools with. A request's token limit is its prompt plus max_new_tokens, at least "
              "one new token (a request produces one). A submission the scheduler refuses (a `submit` record with "
              "`refused`) must exceed the bound, and one it accepts must not. Without the bound in the header "
              "nothing is judged.",
    scope="cache",
    tests=("tests/peers/test_scheduler_clauses.py::test_refusals_exactly_beyond_the_bound_are_clean",
           "tests/peers/test_scheduler_clauses.py::test_a_refusal_within_the_bound_or_an_admission_beyond_it_fires"),
    context=("request", "tokens"))

transition_rule(
    "TS-POOL-5", "The page gauge's cache-only remainder total - empty - active is non-negative; active is the live "
    "tables' blocks",
    'cache concepts L42: "The per-step page gauge composes two O(1)-or-cheaper quantities the same way: empty parents '
    'come from the pool, active parents from the live requests\' block tables, and cache-only residency is the '
    'remainder total - empty - active"; L313: "NumActiveLcmBlocks(request_tables), NumAvailableLcmBlocks, '
    'TotalLcmBlocks"', f"{_C}.gauge",
    decisions="A plan's `gauge` is the scheduler's [empty_lcm_blocks, active_lcm_blocks] once the plan is built; "
              "total is the usable parents, num_device_pages - 1 (the null page reserved). Judged: empty + active "
              "<= total (the cache-only remainder is a count), and, when every group packs one block per parent, "
              "active equals the distinct (group, block) pairs the live requests' rows name after the plan, a "
              "state group's rows included: an internal checkpoint a plan materializes is a slot of its request's "
              "table (L74: \"one forward materializes it and the final output, with capacity for both secured at "
              "admission\"; \"The table keeps absolute slot positions\"), active, not cache-only residency. "
              "Before issue 31 a state group skipped the comparison (\"its compact row is not the wheel's "
              "occupancy accounting\"); with the state rows counted the wheel's gauge agrees on every plan but "
              "those that materialize a checkpoint, where it is short by exactly their number (the wheel's active "
              "count reads its own tables, which keep the checkpoint apart): a finding of the wheel, named by its "
              "cause, whose later instances are the first one's consequences. The comparison is skipped while a "
              "request is retracted (its image is no live table) or while blocks handed out fresh to a request "
              "outside the batch (a restore's growth) are not yet named by a row. Whether the cache-only remainder "
              "equals the blocks the prefix index holds is not judged: evictions without re-grant are not in the "
              "plans.",
    scope="cache",
    tests=("tests/peers/test_scheduler_clauses.py::test_gauge_whose_active_parents_are_the_live_blocks_is_clean",
           "tests/peers/test_scheduler_clauses.py::test_gauge_with_a_negative_remainder_or_other_active_count_fires",
           "tests/peers/test_state_group.py::test_the_gauge_counts_a_state_rows_blocks_and_its_internal_checkpoint_active",
           "tests/peers/test_state_group.py::test_a_gauge_leaving_the_internal_checkpoint_out_fires_once_per_cause"),
    context=("empty", "active", "live", "cause"))
