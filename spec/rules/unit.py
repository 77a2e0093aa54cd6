"""UNIT-*: frozen state during a GPU unit, commits after success, legal writes, settle before trim."""

from __future__ import annotations

from kvsim.kvmodel.store import settle, units

from kvsim.spec.catalogue import state_rule, transition_rule


@state_rule("UNIT-1", "Tables, memberships, frontiers, replicas and rows are frozen during a unit",
            'store contract: "从 block-table publication 到 GPU unit 完成"', scope="space",
            decisions="A space belongs to at most one in-flight unit; map/grow/cow/finish on it are violations "
                      "until the unit completes or fails (kvmodel.store.mapping.frozen_check).")
def unit_1(st, space, full):
    if space.unit is None:
        return None
    u = st.units.get(space.unit)
    row = space.unit_row
    if u is None or row is None or row[0] is not space or space.frozen is None:
        return f"{space.owner!r} ({space.pool}) is marked in unit {space.unit!r}, which does not hold it"
    f = space.frozen
    if f[0] != len(space.pages) or f[1] != space.committed or f[2] != space.row or f[3] != space.reservation:
        now = (len(space.pages), space.committed, space.row, space.reservation)
        return f"{space.owner!r} ({space.pool}) changed during unit {space.unit!r}: {f} -> {now}"
    return True


transition_rule("UNIT-2", "Frontiers advance only when a unit succeeds, and only up to its written extent",
                'store contract: "Unit 成功后，Program 才推进 corresponding committed frontiers"', units.complete,
                decisions="A commit below the current frontier, beyond the row's write end, for a row not in the "
                          "unit, or a truncate that would raise a frontier, is a violation.")

transition_rule("UNIT-3", "Writes go only to mapped positions >= the committed frontier",
                'store contract: "KV Store 从该 active address space 的 reservation materialize 全部必需 pages"',
                units.launch,
                decisions="A write [a, b) needs b <= mapped extent and a >= committed frontier.")

transition_rule("UNIT-4", "A speculative settle commits accepted frontiers before trimming rejected tails",
                'store contract: "投机终止先...等待 GPU 工作完成后 发布 committed frontier，再裁掉未提交的尾页"',
                settle.truncate,
                decisions="A truncate (trim) of a space whose unit is still in flight is the violation.")
