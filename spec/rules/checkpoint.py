"""CKPT-*: complete continuations, one-at-a-time release, Move versus Fork."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvsim.kvmodel.store import activation, settle
from kvsim.spec.catalogue import clause_rule, state_rule, transition_rule

if TYPE_CHECKING:

    from kvsim.kvmodel.store.address_space import KVAddressSpace
    from kvsim.kvmodel.store.store import KVStore


@state_rule("CKPT-1", "A checkpoint is retained (and hit) only as a complete continuation: Main + backend + StateImage",
            'store contract: "Retain 只有在 Main、backend 与 StateImage 构成同一完整 continuation 时才能发布"',
            scope="space",
            decisions="`finish` with state_image false cannot retain; a retained checkpoint holds an inactive, "
                      "protected space in every enabled pool.",
            tests=("tests/rules/test_ckpt.py::test_ckpt1_keeps_complete_continuations",
                   "tests/rules/test_ckpt.py::test_ckpt1_fires_on_a_checkpoint_without_its_backend",
                   "tests/rules/test_through_traces.py::test_engine_rule_fires_from_a_trace"),
            context=("seq", "ckpt", "pool"))
def ckpt_1(st: KVStore, space: KVAddressSpace, full: bool) -> str | bool | None:
    if space.active:
        return None
    ck = st.checkpoints.get(space.owner)
    if ck is None or not ck.state_image:
        return f"checkpoint {space.owner!r} is retained without a StateImage"
    if tuple(ck.spaces) != st.pool_names or any(s.active for s in ck.spaces.values()):
        return (f"checkpoint {space.owner!r} covers pools {list(ck.spaces)}, the continuation needs "
                f"{list(st.pool_names)}")
    if space.protected != space.committed:
        return f"checkpoint {space.owner!r} ({space.pool}) protects {space.protected} of {space.committed} tokens"
    return True


transition_rule("CKPT-2", "Release drops references one at a time; a double release is a violation",
                'store contract: "Release 逐个解除 logical references，并只在最后引用消失时释放 physical replicas"',
                settle.release,
                decisions="Pages go at their last reference (a page another checkpoint or sequence holds stays). "
                          "A second release, or an activation from a released checkpoint (use after release), is "
                          "CKPT-2 rather than the generic stale handle (TRACE-2); a checkpoint consumed by a Move "
                          "and then referenced is TRACE-2.",
                tests=("tests/rules/test_ckpt.py::test_ckpt2_keeps_release_one_reference_at_a_time",
                       "tests/rules/test_ckpt.py::test_ckpt2_fires_on_a_double_release",
                       "tests/rules/test_through_traces.py::test_engine_rule_fires_from_a_trace"),
                context=("seq", "ckpt"))

transition_rule("CKPT-3", "Move only when no immutable reference to the source survives; otherwise Fork",
                'store contract: "Private source 在最终 post-state 中没有 surviving immutable reference 时，可以 Move"',
                activation.plan_activation,
                decisions="keep_source=false consumes the checkpoint (Move); pages another checkpoint still "
                          "references stay shared and a shared partial tail is copied. An engine that reuses the "
                          "source's partial tail while the source survives broke the rule. Decision 17: a Move "
                          "copies no payload (store contract \"Move 不复制 KV payload，也不改变 logical page "
                          "identity\"): a Move whose result maps any private member, its partial tail included, "
                          "to another Device page than the one it is on is a violation (unless the model had only "
                          "guessed that page's id, which is then adopted). Counted only where the engine's "
                          "Move/Fork choice is judged (an activation result naming pages).",
                tests=("tests/rules/test_ckpt.py::test_ckpt3_keeps_move_without_survivors_fork_otherwise",
                       "tests/rules/test_ckpt.py::test_ckpt3_fires_when_a_surviving_tail_is_moved",
                       "tests/rules/test_through_traces.py::test_engine_rule_fires_from_a_trace"),
                context=("seq", "pool", "block", "page"))

clause_rule("CKPT-4", "DFlash local cyclic K/V and boundary snapshots live in fixed StateImages, not growing pools",
            'store contract: "DFlash/DFlash2 cyclic K/V 使用自己的 CyclicKVCacheLayerView 与 modulo/window 语义"',
            not_checkable="kvtrace/1 carries a StateImage only as `finish.state_image` (whether it was saved, judged "
                          "by CKPT-1) and carries no event for cyclic state, its window or its snapshot; the one "
                          "observable consequence, that DFlash2 maps no paged draft KV, is AS-5.")
