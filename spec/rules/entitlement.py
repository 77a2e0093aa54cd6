"""ENT-*: entitlement accounting, ensure_mapped_to_tokens, round-boundary growth, truncate returns."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvsim.kvmodel.store import mapping, units
from kvsim.kvmodel.store.config import PAGE_SIZE, ceil_div
from kvsim.spec.catalogue import state_rule, transition_rule

if TYPE_CHECKING:

    from kvsim.kvmodel.store.address_space import KVAddressSpace
    from kvsim.kvmodel.store.store import KVStore


@state_rule("ENT-1", "Active entitlement is not returned to global available before terminal release",
            'store contract: "Active entitlement在terminal release前不进入global available capacity"', scope="space",
            evidence="model",
            decisions="Guards the model: the engine's counters are judged by CAP-3 and TRACE-1 at `observe`; this "
                      "state form recounts the model's own reservations. Entitlement = membership + reservation; "
                      "default ceil(min(S, prompt+budget)/P) pages "
                      "(prompt + the effective output budget min(budget, S − prompt): decision 18, AS-6), "
                      "MTP may lead by ceil((K−1)/P), Draft Full equals Main. The pool's reserved is the sum of "
                      "active reservations (recounted whenever the pool's counters moved); only finish returns a "
                      "reservation to global available.",
            tests=("tests/rules/test_ent.py::test_ent1_keeps_entitlement_until_terminal_release",
                   "tests/rules/test_ent.py::test_ent1_fires_when_an_inactive_space_keeps_a_reservation"),
            context=("seq", "ckpt", "pool"))
def ent_1(st: KVStore, space: KVAddressSpace, full: bool) -> str | bool | None:
    if not space.active:
        return f"inactive {space.owner!r} ({space.pool}) holds a reservation of {space.reservation}" \
            if space.reservation else None
    if space.reservation < 0 or space.entitlement > st.L:
        return f"{space.owner!r} ({space.pool}): reservation {space.reservation}, entitlement {space.entitlement} > L"
    if full or space.pool in st.t_pools:  # recount when reservations of this pool may have moved
        total = sum(s.reservation for b in st.bundles.values() for s in b.spaces.values() if s.pool == space.pool)
        if total != st.pools[space.pool].reserved:
            return (f"{space.pool}: active reservations sum to {total}, the pool counts "
                    f"{st.pools[space.pool].reserved} reserved")
    return True


transition_rule("ENT-2", "ensure_mapped_to_tokens is a lower bound that fails only beyond the entitlement",
                'store contract: "ensure_mapped_to_tokens() 的参数是本阶段所需覆盖范围的下界"', mapping.ensure_mapped,
                decisions="A refusal while the entitlement covers the request, or mapping more/fewer new pages "
                          "than needed, is a violation.",
                tests=("tests/rules/test_ent.py::test_ent2_keeps_ensure_mapped_as_a_lower_bound",
                       "tests/rules/test_ent.py::test_ent2_fires_when_the_engine_maps_pages_already_covered",
                       "tests/rules/test_through_traces.py::test_engine_rule_fires_from_a_trace"),
                context=("seq", "pool", "tokens"))

transition_rule("ENT-3", "Launches are covered by entitlement at the round boundary; growth only there; bounded "
                "completion",
                'store contract: "每个 launch 在 round boundary 上要求 entitlement 覆盖该步所需 pages"', units.launch,
                decisions="kv_lease_growth: window max(prefill_chunk, window) tokens + cushion pages. The contract "
                          "fixes no growth step (\"按需扩充\"): an engine's accepted growth is judged only by whether "
                          "it fits global available (and adopted when the `grow` result names the new entitlement, or "
                          "else read from the engine's next pool counters, kvmodel.store.observe), "
                          "its refusal only when the whole window would have fit (TRACE-1); without the engine's "
                          "word the model grows by rungs of extra tokens (window, 128, 64) like NInfer, all pools "
                          "atomically (kvmodel.store.mapping). Bounded completion: a refused growth fixes the "
                          "window's frontier F = min(ceiling, max(committed, (Main entitlement − cushion)·P)) (the "
                          "cushion is not part of the window: it covers the step about to launch and one forced "
                          "control span); in every pool that writes (Main, Draft Full; MTP with its K−1 lead) writes "
                          "starting at or before F are the step about to launch, one write per space may start "
                          "beyond F (the forced control span), any further one is the violation, and every write "
                          "stays within the entitlement.",
                tests=("tests/rules/test_ent.py::test_ent3_keeps_launches_covered_and_growth_at_round_boundaries",
                       "tests/rules/test_ent.py::test_ent3_keeps_bounded_completion_at_the_covered_frontier",
                       "tests/rules/test_ent.py::test_ent3_fires_on_a_launch_beyond_the_entitlement",
                       "tests/rules/test_through_traces.py::test_engine_rule_fires_from_a_trace"),
                context=("seq", "unit", "bounded_at", "covered", "pool", "write"))


transition_rule("ENT-5", "kv_lease_growth leases at most the frontier + the bounded window + the per-lane cushion",
                'store contract: "Generation 只租用「当前 frontier 加一个 bounded window（约 4096 tokens）'
                '加一个 per-lane cushion」的 page count"', mapping.check_engine_growth,
                decisions="Decision 25 (bounded growth; store contract L196-199, \"window 之外、尚未取得的 "
                          "output budget 不计入 active entitlement\", and L342 \"启用 kv_lease_growth 时它只在 "
                          "decode-round边界按需增大\"): "
                          "at a growth (a round boundary) a bundle may lease at most ceil(min(ceiling, committed + "
                          "window)/P) + cushion Main pages (window = max(prefill_chunk, window); MTP with its "
                          "ceil((K−1)/P) lead, Draft Full equal to Main), never less than it already holds. The "
                          "contract fixes no step, so any growth up to that bound is legal; a lease beyond it (the "
                          "whole remaining budget, say) is the violation, whether the `grow` result states it "
                          "(kvmodel.store.mapping.check_engine_growth) or only the engine's next pool counters "
                          "show it (kvmodel.store.observe). A growth that does not fit global available is TRACE-1 "
                          "first.",
                tests=("tests/rules/test_ent.py::test_ent5_keeps_growth_up_to_frontier_window_and_cushion",
                       "tests/rules/test_ent.py::test_ent5_fires_on_a_stated_lease_beyond_the_window",
                       "tests/rules/test_ent.py::test_ent5_fires_on_counters_showing_a_lease_beyond_the_window",
                       "tests/rules/test_through_traces.py::test_engine_rule_fires_from_a_trace"),
                context=("seq", "pool", "entitlement", "bound"))


@state_rule("ENT-4", "Truncated leases return to the same reservation; the last partial page is kept",
            'store contract: "对 active address space，解除的 Device leases 回到 同一 active reservation"',
            scope="space",
            evidence="model",
            decisions="Guards the model: an engine that keeps truncated leases is caught by its counters (TRACE-1 at "
                      "`observe`). Decision 16 (destructive truncate into a forked prefix, a kvtrace/1 extension): "
                      "unmapping a member another address space still holds frees no lease, and the entitlement "
                      "shrinks by that page, always; nothing moves between the reservation and global "
                      "available (store contract \"两者不改变其他 requests 可用的 global capacity\"). An engine "
                      "reports "
                      "it through unchanged reserved/available counters, and must refuse a later map beyond the "
                      "smaller entitlement (ENT-2); a `cow` of a shared member takes its page from global "
                      "available. State form: an active space keeps at least ceil(committed/P) pages. "
                      "Decision 26 (truncate of a copy-pinned private page; store contract \"对 active address "
                      "space，解除的 Device leases 回到 同一 active reservation，而不是全局 available "
                      "capacity\", L240, and \"Copy 进行时 source 与 destination 都被 pin\", L178): its lease "
                      "goes back to the same reservation at once (allocated − 1, reserved + 1, the entitlement "
                      "unchanged), exactly as for an unpinned page; the page "
                      "group itself stays the copy's until `publish` (DevicePagePool.drain) and only then can be "
                      "materialized again: a request that needs a page group while only pinned ones are left waits "
                      "(refusal `busy`), and an engine that maps anyway takes a pinned page group (REP-2). "
                      "Transition (kvmodel.store.settle.cut_to, KVStore.drop_ref): a private unmapped "
                      "page dematerializes into the reservation; an unmapped shared page frees no lease and the "
                      "entitlement shrinks by it.",
            tests=("tests/rules/test_ent.py::test_ent4_keeps_truncated_leases_in_the_same_reservation",
                   "tests/rules/test_ent.py::test_ent4_keeps_a_truncated_copy_pinned_lease_in_the_same_reservation",
                   "tests/rules/test_ent.py::test_ent4_truncated_shared_members_shrink_the_entitlement_deterministically",
                   "tests/rules/test_ent.py::test_ent4_fires_when_the_last_partial_page_is_trimmed"),
            context=("seq", "ckpt", "pool"))
def ent_4(st: KVStore, space: KVAddressSpace, full: bool) -> str | bool | None:
    if len(space.pages) * PAGE_SIZE < space.committed:
        return (f"{space.owner!r} ({space.pool}) keeps {len(space.pages)} pages for frontier {space.committed} "
                f"(needs {ceil_div(space.committed, PAGE_SIZE)})")
    return True if space.active else None

