"""Running the state rules: incrementally on what an operation touched, or as a full audit.

Incremental checking costs O(entities the last operation touched): the model records touched pools,
pages, address spaces, rows and Host extents, and each state rule's predicate runs on those of its scope. The full
audit runs every predicate on every entity in its global form (recounts, whole rows) and then each rule's
audit-only `full=` form (reachability with networkx, pool-wide recounts); it must agree with the
incremental checks (tests/test_model_properties.py checks both after every fuzzed step).
Both go through one loop, `_check`, over rules bound once to their coverage cells.
One change is not marked touched: a page that loses one of its references and stays shared and writerless
(`KVStore.drop_ref`). Every page-scope state rule is a condition on the page's own fields and on each of
its holders, so a smaller holder set cannot make one fail (tests/test_model_properties.py removes each
holder of such pages in legal stores and checks every page rule); the audit still sees every page.
Checkers only read the model; findings carry the rule id, a message and the entities involved.
This module knows nothing of traces or reports.
"""

from __future__ import annotations

from operator import attrgetter
from typing import TYPE_CHECKING

from kvsim.kvmodel.store.errors import Finding
from kvsim.spec.catalogue import InvalidRule, all_rules, require

if TYPE_CHECKING:
    from collections.abc import Iterable

    from kvsim.kvmodel.store.address_space import KVAddressSpace
    from kvsim.kvmodel.store.pages import LogicalKVPage
    from kvsim.kvmodel.store.store import KVStore


def _ctx_page(page: LogicalKVPage) -> dict[str, object]:
    return {"pool": page.pool, "page": page.device, "block": getattr(page, "block", None)}


def _ctx_space(space: KVAddressSpace) -> dict[str, object]:
    return {("seq" if space.active else "ckpt"): space.owner, "pool": space.pool}


_CTX = {"page": _ctx_page, "space": _ctx_space, "pool": lambda name: {"pool": name},
        "row": lambda key: {"pool": key[0], "row": key[1]}, "store": lambda _: {}, "config": lambda _: {}}


# Operations that change only a few fields: the state rules whose premises those fields enter. Every
# other operation (activate, map, cow, truncate, finish, release, Host tier) runs every state rule on
# what it touched. launch freezes spaces into a unit (UNIT-1); complete commits frontiers and page
# columns and ends the unit (UNIT-1: the rows' in-flight marks are gone); fail only ends the unit; grow
# changes reservations (pool counters included). tests/rules/test_focus.py corrupts what each focused
# operation writes and shows that its focus reports whatever every rule on the touched entities would.
FOCUS = {
    "launch": ("UNIT-1",),
    "fail": ("UNIT-1",),
    "complete": ("UNIT-1", "AS-2", "ENT-4", "PAGE-3", "WR-3", "REP-4"),
    "grow": ("UNIT-1", "ENT-1", "CAP-3"),
}
SCOPES = ("config", "pool", "page", "space", "row", "store")


def _validate_focus() -> None:
    """At import: every FOCUS entry names state rules of the catalogue (a typo would silently skip a rule)."""
    state = {r.id for r in all_rules() if r.kind == "state"}
    for op, ids in FOCUS.items():
        require(ids, f"FOCUS[{op!r}]")
        if not set(ids) <= state:
            raise InvalidRule(f"FOCUS[{op!r}] names {sorted(set(ids) - state)}, which are not state rules")


_validate_focus()


def _live_touched_spaces(st: KVStore) -> list:
    """finish/release may leave ended spaces touched: only live ones are checked."""
    return [s for s in st.t_spaces if s.active or s.owner in st.checkpoints]


def _one(st: KVStore) -> tuple:
    return (None,)


def _host_touched(st: KVStore) -> tuple:
    """The store-scope (Host tier) rules' one entity incrementally: the Host extents touched, offset -> size."""
    return (st.t_host,)


TOUCHED = {"pool": attrgetter("t_pools"), "page": attrgetter("t_pages"), "space": _live_touched_spaces,
           "row": attrgetter("t_rows")}
FOCUSED_TOUCHED = dict(TOUCHED, space=attrgetter("t_spaces"))  # focused operations never end a space
EVERY = {"config": _one, "pool": lambda st: list(st.pools),
         "page": lambda st: [p for s in st.page_stores.values() for p in s.pages],
         "space": lambda st: list(st.all_spaces()),
         "row": lambda st: [(name, r) for name, t in st.tables.items() for r in range(t.rows)], "store": _one}


def _check(st: KVStore, plan: tuple, full: bool, out: list) -> None:
    """The one checking loop, for incremental checks and the audit alike.

    `plan` is ((entities_of, bound), ...): `entities_of(st)` gives the entities of one scope (what the last
    operation touched, or every entity), `bound` that scope's rules as (rule id, predicate, cell, context).
    """
    for entities_of, bound in plan:
        entities = entities_of(st)
        if not entities:
            continue
        n = len(entities)
        for rule_id, fn, cell, ctx in bound:
            ex = 0
            for e in entities:
                r = fn(st, e, full)
                if r is not None:
                    ex += 1
                    if r is not True:
                        out.append(Finding(rule_id, r, ctx(e)))
                        cell.violated += 1
            cell.checked += n
            cell.exercised += ex


class Checker:
    """Evaluates state rules against one KVStore and counts into its Coverage."""

    def __init__(self, store: KVStore) -> None:
        self.st = store
        self.by_scope: dict[str, list] = {s: [] for s in SCOPES}
        for rule in all_rules():
            if rule.kind == "state" and rule.scope in self.by_scope:  # cache-scope rules: spec.cache_checking
                self.by_scope[rule.scope].append(rule)
        # every state rule bound once to its Coverage cell and context builder: the loop reads no dicts
        self._bound = {sc: tuple((r.id, r.checker, store.cov.cell(r.id), _CTX[sc]) for r in rules)
                       for sc, rules in self.by_scope.items()}
        self._full_forms = tuple(r for rules in self.by_scope.values() for r in rules if r.full_checker is not None)
        self._focused = {op: self._plan(FOCUSED_TOUCHED, ids) for op, ids in FOCUS.items()}
        self._touched = self._plan(TOUCHED)
        self._host = ((_host_touched, self._bound["store"]),)
        self._audit = tuple((EVERY[sc], self._bound[sc]) for sc in SCOPES if self._bound[sc])
        self._config = ((_one, self._bound["config"]),)

    def _plan(self, entities_of: dict, ids: Iterable[str] | None = None) -> tuple:
        """(entities_of, bound rules) per scope of `entities_of` with rules to run (only `ids`, if given)."""
        plan = []
        for sc, get in entities_of.items():
            bound = tuple(b for b in self._bound[sc] if ids is None or b[0] in ids)
            if bound:
                plan.append((get, bound))
        return tuple(plan)

    def incremental(self, op: str | None = None) -> list[Finding]:
        """State rules on the entities touched since the last check (by operation `op`, if known); consumes
        the touched sets."""
        st = self.st
        out: list[Finding] = []
        plan = None if op is None else self._focused.get(op)
        if plan is None:
            if st.t_host:  # Host-tier rules run on the touched extents (the audit: on the whole arena)
                _check(st, self._host, False, out)
            plan = self._touched
        _check(st, plan, False, out)
        st.reset_touched()
        return out

    def audit(self) -> list[Finding]:
        """Every state rule on every entity in its global form, then every rule's audit-only full form."""
        st = self.st
        out: list[Finding] = []
        _check(st, self._audit, True, out)
        for rule in self._full_forms:
            msg = rule.full_checker(st)
            st.cov.check(rule.id, exercised=True)
            if msg:
                out.append(Finding(rule.id, msg, {}))
                st.cov.violate(rule.id)
        return out

    def config(self) -> list[Finding]:
        """The config-scope rules (startup facts), once."""
        out: list[Finding] = []
        _check(self.st, self._config, True, out)
        return out
