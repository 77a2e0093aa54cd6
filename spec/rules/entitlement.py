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
                      "state form recounts the model's own reservations. Entitlement = membership + reservation; default ceil(min(S, prompt+budget)/P) pages, "
                      "MTP may lead by ceil((K−1)/P), Draft Full equals Main. The pool's reserved is the sum of "
                      "active reservations (recounted whenever the pool's counters moved); only finish returns a "
                      "reservation to global available.")
def ent_1(st: KVStore, space: KVAddressSpace, full: bool) -> str | bool | None:
    if not space.active:
        return f"inactive {space.owner!r} ({space.pool}) holds a reservation of {space.reservation}" \
            if space.reservation else None
    if space.reservation < 0 or space.entitlement > st.L:
        return f"{space.owner!r} ({space.pool}): reservation {space.reservation}, entitlement {space.entitlement} > L"
    if full or space.pool in st.t_pools:  # recount when reservations of this pool may have moved
        total = sum(s.reservation for b in st.bundles.values() for s in b.spaces.values() if s.pool == space.pool)
        if total != st.pools[space.pool].reserved:
            return f"{space.pool}: active reservations sum to {total}, the pool counts {st.pools[space.pool].reserved} reserved"
    return True


transition_rule("ENT-2", "ensure_mapped_to_tokens is a lower bound that fails only beyond the entitlement",
                'store contract: "ensure_mapped_to_tokens() 的参数是本阶段所需覆盖范围的下界"', mapping.ensure_mapped,
                decisions="A refusal while the entitlement covers the request, or mapping more/fewer new pages "
                          "than needed, is a violation.")

transition_rule("ENT-3", "Launches are covered by entitlement at the round boundary; growth only there; bounded completion",
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
                          "stays within the entitlement.")


@state_rule("ENT-4", "Truncated leases return to the same reservation; the last partial page is kept",
            'store contract: "对 active address space，解除的 Device leases 回到 同一 active reservation"', scope="space",
            evidence="model",
            decisions="Guards the model: an engine that keeps truncated leases is caught by its counters (TRACE-1 at "
                      "`observe`). Decision (destructive truncate into a forked prefix, a kvtrace/1 extension): unmapping a "
                      "member another address space still holds (or a copy still pins) frees no lease, and the "
                      "entitlement shrinks by that page, always; nothing moves between the reservation and global "
                      "available (store contract \"两者不改变其他 requests 可用的 global capacity\"). An engine reports "
                      "it through unchanged reserved/available counters, and must refuse a later map beyond the "
                      "smaller entitlement (ENT-2); a `cow` of a shared member takes its page from global "
                      "available. State form: an active space keeps at least ceil(committed/P) pages. Transition "
                      "(kvmodel.store.settle.cut_to, KVStore.drop_ref): a private unmapped page dematerializes into "
                      "the reservation; an unmapped shared page frees no lease and the entitlement shrinks by it.")
def ent_4(st: KVStore, space: KVAddressSpace, full: bool) -> str | bool | None:
    if len(space.pages) * PAGE_SIZE < space.committed:
        return (f"{space.owner!r} ({space.pool}) keeps {len(space.pages)} pages for frontier {space.committed} "
                f"(needs {ceil_div(space.committed, PAGE_SIZE)})")
    return True if space.active else None

