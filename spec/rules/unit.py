"""UNIT-*: frozen state during a GPU unit, commits after success, legal writes, no early trim of a speculative round."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvsim.kvmodel.store import settle, units
from kvsim.spec.catalogue import clause_rule, state_rule, transition_rule

if TYPE_CHECKING:

    from kvsim.kvmodel.store.address_space import KVAddressSpace
    from kvsim.kvmodel.store.store import KVStore


def _units_hold_their_rows(st: KVStore) -> str | bool | None:
    """Audit form: every row of every in-flight unit is cached on its space (the other direction of unit_1)."""
    rows: dict = {}
    for u in st.units.values():
        for r in u.rows:
            rows.setdefault(r.space, []).append(r)
    for sp, rs in rows.items():
        if sp.in_flight not in rs or sp.readers != len(rs) - 1 or (len(rs) > 1 and any(r.a is not None for r in rs)):
            return (f"{sp.owner!r} ({sp.pool}) is a row of {len(rs)} in-flight units, but its in-flight mark "
                    f"and reader count ({sp.readers}) disagree, or a written row shares it")
    return None


@state_rule("UNIT-1", "Tables, memberships, frontiers, replicas and rows are frozen during a unit",
            'store contract (seed 000 L248-L254): "从 block-table publication 到 GPU unit 完成", "Mapping、frontier '
            'commit、truncate 和 row recycling 都发生在 GPU boundary"', scope="space",
            decisions="A written row needs its space to itself: a space written by an in-flight unit belongs to "
                      "no other unit. Decision: read-only rows of several in-flight units may share a space (the "
                      "contract forbids mutation during a unit, \"selected rows 的 table entries 不变化\", not "
                      "readers). map/grow/cow/truncate/finish on a space any unit holds, written or read-only, are "
                      "violations until the last such unit completes or fails (kvmodel.store.mapping.frozen_check). "
                      "One rule per clause: a truncate while a verify is in flight also precedes its settle (L241, "
                      "\"等待 GPU 工作完成后\"), but the clause it breaks first is this one (L254 names truncate), "
                      "so it is UNIT-1 like map, grow, cow and finish, never UNIT-4.",
            full=_units_hold_their_rows,
            tests=("tests/rules/test_unit.py::test_unit1_keeps_rows_frozen_during_a_unit",
                   "tests/rules/test_unit.py::test_unit1_fires_when_a_frontier_moves_inside_a_unit",
                   "tests/rules/test_through_traces.py::test_engine_rule_fires_from_a_trace"),
            context=("seq", "pool", "unit", "ckpt"))
def unit_1(st: KVStore, space: KVAddressSpace, full: bool) -> str | bool | None:
    r = space.in_flight
    if r is None:
        return None
    u = st.units.get(r.unit)
    rows = None if u is None else u.rows
    if rows is None or not (0 <= r.index < len(rows) and rows[r.index] is r) or r.space is not space:
        # the cache disagrees with KVStore.units
        return f"{space.owner!r} ({space.pool}) is marked in unit {r.unit!r}, which does not hold it"
    if r.num_pages != len(space.pages) or r.committed != space.committed or r.row != space.row \
            or r.reservation != space.reservation:
        was = (r.num_pages, r.committed, r.row, r.reservation)
        now = (len(space.pages), space.committed, space.row, space.reservation)
        return (f"{space.owner!r} ({space.pool}) changed during unit {r.unit!r}: (pages, committed, row, "
                f"reservation) {was} -> {now}")
    return True


transition_rule("UNIT-2", "Frontiers advance only when a unit succeeds, and only up to its written extent",
                'store contract: "Unit 成功后，Program 才推进 corresponding committed frontiers"', units.complete,
                decisions="A commit below the current frontier, beyond the row's write end, for a row not in the "
                          "unit, or a truncate that would raise a frontier, is a violation.",
                tests=("tests/rules/test_unit.py::test_unit2_keeps_commits_after_success_only",
                       "tests/rules/test_unit.py::test_unit2_fires_on_a_commit_beyond_the_written_extent",
                       "tests/rules/test_through_traces.py::test_engine_rule_fires_from_a_trace"),
                context=("seq", "pool", "frontier", "unit", "written"))

transition_rule("UNIT-3", "Writes go only to mapped positions >= the committed frontier",
                'store contract: "KV Store 从该 active address space 的 reservation materialize 全部必需 pages"',
                units.launch,
                decisions="A write [a, b) needs b <= mapped extent and a >= committed frontier.",
                tests=("tests/rules/test_unit.py::test_unit3_keeps_writes_in_mapped_positions_from_the_frontier",
                       "tests/rules/test_unit.py::test_unit3_fires_on_a_write_below_the_frontier",
                       "tests/rules/test_through_traces.py::test_engine_rule_fires_from_a_trace"),
                context=("seq", "pool", "write", "unit"))

transition_rule("UNIT-4", "A speculative round's mappings are not trimmed before it runs and settles",
                'store contract (seed 000 L239-L241): "投机终止先...等待 GPU 工作完成后 发布 committed frontier，'
                '再裁掉未提交的尾页。不能为满足某个后续阶段更短的覆盖需求而提前裁剪 verify 的映射"',
                settle.truncate,
                decisions="The violation is a truncate that unmaps blocks a provisional frontier still needs (L239 "
                          "\"NeededPages_s= \\left\\lceil \\frac{\\max(CommittedFrontier_s,ProvisionalFrontier_s)}{P}"
                          "\\right\\rceil\"). Decision: a provisional frontier belongs to a speculative round only "
                          "(kvmodel.store.mapping.speculative_round): with a speculative backend selected, once a "
                          "space has committed its whole prompt, the largest ensure_mapped_to_tokens request since "
                          "its last written launch (a verify's mapping on Main, the draft lead on MTP, L79 "
                          "\"provisional lead\"), cleared when a unit writing the space launches. Draft Full has none "
                          "(L79 \"Draft Full 没有这种 provisional lead\"). An ordinary prefill chunk mapped ahead "
                          "(L195 \"预先 materialize 一个 prefill chunk\"), and any mapping with the backend off, is "
                          "membership beyond the committed frontier with no provisional frontier: its trailing "
                          "mappings may be unmapped (L240 \"Trailing mappings 可以解除\"), as L241 forbids early "
                          "trimming only for a verify's mappings. A trim while the round's unit is in flight breaks "
                          "the frozen-unit clause first and is UNIT-1 (one rule per clause).",
                tests=("tests/rules/test_unit.py::test_unit4_keeps_settle_after_the_round_and_lets_a_prefill_chunk_go",
                       "tests/rules/test_unit.py::test_unit4_fires_on_trimming_a_verify_mapping_before_it_runs",
                       "tests/rules/test_through_traces.py::test_engine_rule_fires_from_a_trace"),
                context=("seq", "pool", "frontier", "provisional"))

clause_rule("UNIT-5", "Pages added at one boundary are published in one batch, before the consumer",
            'store contract: "同一 boundary新增多个 pages或重新激活完整 membership时使用批量 publication"',
            not_checkable="A trace records the mapping request (`map`) and the unit (`launch`), not the table "
                          "publications between them, so their batching is invisible; the order (mapping before "
                          "the consumer, no rewrite of a row in flight) is judged by UNIT-1 and UNIT-3.")
