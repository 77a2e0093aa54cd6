"""AS-*: execution rows, frontiers, the block-table mirror, atomic activation, separate Main/backend."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvsim.kvmodel.store import activation
from kvsim.kvmodel.store.config import PAGE_SIZE
from kvsim.kvmodel.store.tables import HOLE
from kvsim.spec.catalogue import state_rule, transition_rule

if TYPE_CHECKING:

    from kvsim.kvmodel.store.address_space import KVAddressSpace
    from kvsim.kvmodel.store.store import KVStore


@state_rule("AS-1", "Inactive spaces hold no row; one active space per row; rows own no pages",
            'store contract: "Inactive address space不占execution row；execution row不拥有logical pages"',
            scope="space",
            tests=("tests/rules/test_as.py::test_as1_keeps_rows_for_active_spaces_only",
                   "tests/rules/test_as.py::test_as1_fires_when_a_checkpoint_keeps_a_row",
                   "tests/rules/test_through_traces.py::test_engine_rule_fires_from_a_trace"),
            context=("seq", "pool", "row", "ckpt"))
def as_1(st: KVStore, space: KVAddressSpace, full: bool) -> str | bool | None:
    if not space.active:
        return f"inactive {space.owner!r} ({space.pool}) holds row {space.row}" if space.row >= 0 else None
    t = st.tables[space.pool]
    if not 0 <= space.row < t.rows or t.owner[space.row] is not space:
        return f"active {space.owner!r} ({space.pool}) row {space.row} is not leased to it"
    return True


@state_rule("AS-2", "protected <= committed frontier <= mapped extent <= L·P, token-exact",
            'store contract: "Valid frontier精确到token；page boundary不改变Attention或checkpoint语义"', scope="space",
            decisions="Membership may exceed the committed frontier (pre-materialized chunk or speculative window).",
            tests=("tests/rules/test_as.py::test_as2_keeps_token_exact_frontiers_below_the_mapped_extent",
                   "tests/rules/test_as.py::test_as2_fires_when_the_frontier_passes_the_mapped_extent",
                   "tests/rules/test_through_traces.py::test_engine_rule_fires_from_a_trace"),
            context=("seq", "ckpt", "pool"))
def as_2(st: KVStore, space: KVAddressSpace, full: bool) -> str | bool | None:
    if not (0 <= space.protected <= space.committed <= len(space.pages) * PAGE_SIZE <= st.L * PAGE_SIZE
            and space.committed <= st.S):
        return (f"{space.owner!r} ({space.pool}): protected {space.protected}, committed {space.committed}, mapped "
                f"{len(space.pages) * PAGE_SIZE}, L·P {st.L * PAGE_SIZE} are out of order")
    return True


@state_rule("AS-3", "An active row's block table mirrors its membership; holes elsewhere",
            'store contract: "Address space 拥有 logical order；block table只是 active Device mapping 的执行镜像"',
            scope="row",
            decisions="Incrementally, the members a step touched and the first entry past the membership are "
                      "compared; the audit compares whole rows, leased or not.",
            tests=("tests/rules/test_as.py::test_as3_keeps_the_table_mirroring_membership",
                   "tests/rules/test_as.py::test_as3_fires_on_a_stale_entry_past_the_membership",
                   "tests/rules/test_through_traces.py::test_engine_rule_fires_from_a_trace"),
            context=("seq", "pool", "row"))
def as_3(st: KVStore, key: tuple[str, int], full: bool) -> str | bool | None:
    pool, row = key
    t = st.tables[pool]
    owner = t.owner[row]
    entries = t.table[row]
    n = 0 if owner is None else len(owner.pages)
    if owner is not None:
        pages = owner.pages
        blocks = range(n) if full else [p.block for p in st.t_pages if p.alive and p.block < n and pages[p.block] is p]
        for b in blocks:
            if entries[b] != pages[b].device:
                return f"{pool} row {row} block {b} maps {entries[b]}, membership has page {pages[b].device}"
    if full:
        for b in range(n, len(entries)):
            if entries[b] != HOLE:
                return f"{pool} row {row} block {b} maps {entries[b]} outside the membership"
    elif n < len(entries) and entries[n] != HOLE:
        return f"{pool} row {row} block {n} maps {entries[n]} outside the membership"
    return True if owner is not None else None


@state_rule("AS-4", "Activation is atomic over every enabled pool; a failure leaves the source intact",
            'store contract: "Activation 必须为全部 enabled pools 原子取得"', scope="space",
            decisions="State form: an active bundle holds an active space in exactly the enabled pools. The "
                      "transition is plan-then-apply (kvmodel.store.activation), so a refusal or violation "
                      "changes nothing; an engine result covering only some pools is a violation.",
            tests=("tests/rules/test_as.py::test_as4_keeps_activation_atomic_over_pools",
                   "tests/rules/test_as.py::test_as4_fires_on_a_partial_bundle",
                   "tests/rules/test_through_traces.py::test_engine_rule_fires_from_a_trace"),
            context=("seq", "missing", "extra", "ckpt", "pool"))
def as_4(st: KVStore, space: KVAddressSpace, full: bool) -> str | bool | None:
    if not space.active:
        return None
    bundle = st.bundles.get(space.owner)
    if bundle is None or bundle.spaces.get(space.pool) is not space:
        return f"active space {space.uid} ({space.pool}) belongs to no active bundle"
    if tuple(bundle.spaces) != st.pool_names or not all(s.active for s in bundle.spaces.values()):
        return f"bundle {bundle.seq!r} is partial: pools {list(bundle.spaces)}, enabled {list(st.pool_names)}"
    return True


@state_rule("AS-5", "Main and backend reserve/materialize/commit/truncate separately; backend kept while active",
            'store contract: "Main与backend pools分别reserve、materialize、commit和truncate", '
            '"Active sequence 不能按 request 临时关闭 selected backend"', scope="space",
            decisions="An operation naming a pool the bundle does not hold is a violation "
                      "(kvmodel.store.mapping.active_space).",
            tests=("tests/rules/test_as.py::test_as5_keeps_main_and_backend_separate",
                   "tests/rules/test_as.py::test_as5_fires_when_pools_share_one_space",
                   "tests/rules/test_through_traces.py::test_engine_rule_fires_from_a_trace"),
            context=("seq", "pool", "ckpt"))
def as_5(st: KVStore, space: KVAddressSpace, full: bool) -> str | bool | None:
    if space.active:
        bundle = st.bundles.get(space.owner)
        holder = None if bundle is None else bundle.spaces
    else:
        ck = st.checkpoints.get(space.owner)
        holder = None if ck is None else ck.spaces
    if holder is None:
        return f"space {space.uid} ({space.pool}) belongs to no bundle or checkpoint"
    others = [s for p, s in holder.items() if p != space.pool]
    if any(s is space or s.pool == space.pool for s in others) or holder.get(space.pool) is not space:
        return f"space {space.uid} ({space.pool}) is shared between pools of {space.owner!r}"
    return True if others else None



transition_rule("AS-6", "No sequence exceeds the per-sequence ceiling S: prompt + budget, writes and commits stay <= S",
                'store contract: "Page rounding 只增加 physical padding， 不会扩大单 sequence 的 logical ceiling (S)"',
                activation.plan_activation,
                decisions="Decision 18 (effective budget; store contract \"默认 entitlement 预留 prompt 加整个 "
                          "effective output 预算\", \"Page rounding 只增加 physical padding， 不会扩大单 sequence 的 "
                          "logical ceiling (S)\"): the budget a trace logs is the raw max_tokens; the effective "
                          "output budget is min(budget, S − prompt), so S only caps the request and an activation "
                          "with prompt + budget "
                          "> S is legal (entitlement ceil(min(S, prompt + budget)/P), ENT-1). Only a prompt beyond S "
                          "must be refused (reason `context`); an engine that activates it anyway broke the rule. A "
                          "launch writing beyond S or a commit beyond S (possible inside the last page when S is not a "
                          "multiple of P) is the violation, reported at that write (kvmodel.store.units), never as a "
                          "refused activation followed by stale-handle findings.",
                tests=("tests/rules/test_as.py::test_as6_keeps_activations_up_to_s",
                       "tests/rules/test_as.py::test_as6_keeps_a_raw_budget_clamped_to_s",
                       "tests/rules/test_as.py::test_as6_fires_on_an_engine_admitting_a_prompt_beyond_s",
                       "tests/rules/test_as.py::test_as6_fires_at_the_write_beyond_s_of_a_clamped_budget",
                       "tests/rules/test_through_traces.py::test_engine_rule_fires_from_a_trace"),
                context=("seq", "pool", "write", "unit"))
