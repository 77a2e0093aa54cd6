"""Running the state rules: incrementally on what an operation touched, or as a full audit.

Incremental checking costs O(entities the last operation touched): the model records touched pools,
pages, address spaces and rows, and each state rule's predicate runs on those of its scope. The full
audit runs every predicate on every entity in its global form (recounts, whole rows, reachability with
networkx) and must agree with the incremental checks (tests/test_checking_agreement.py).
Checkers only read the model; findings carry the rule id, a message and the entities involved.
"""

from __future__ import annotations

from kvsim.kvmodel.store.errors import Finding

from kvsim.spec.catalogue import all_rules


def _ctx_page(page):
    return {"pool": page.pool, "page": page.device, "block": getattr(page, "block", None)}


def _ctx_space(space):
    return {("seq" if space.active else "ckpt"): space.owner, "pool": space.pool}


_CTX = {"page": _ctx_page, "space": _ctx_space, "pool": lambda name: {"pool": name},
        "row": lambda key: {"pool": key[0], "row": key[1]}, "store": lambda _: {}, "config": lambda _: {}}


# Operations that change only a few fields: the state rules whose premises those fields enter. Every
# other operation (activate, map, cow, truncate, finish, release, Host tier) runs every state rule on
# what it touched. launch freezes spaces into a unit (UNIT-1); complete commits frontiers and page
# columns and ends the unit (UNIT-1's premise, a space in flight, no longer holds); fail only ends the
# unit; grow changes reservations (pool counters included).
FOCUS = {
    "launch": ("UNIT-1",),
    "fail": (),
    "complete": ("AS-2", "ENT-4", "PAGE-3", "WR-3", "REP-4"),
    "grow": ("UNIT-1", "ENT-1", "CAP-3"),
}
SCOPES = ("config", "pool", "page", "space", "row", "store")


def _compile(scoped: list, live_only: bool = False):
    """One function checking an operation's rules on the entities it touched (the per-event hot path).

    `scoped` is [(touched-set attribute, [(rule, checker, coverage cell), ...]), ...]. The generated
    function is equivalent to running `Checker._run(rules, getattr(st, attr), False, out)` per scope and
    then `st.reset_touched()`; it is generated once per operation plan with every checker and counter
    bound by name, so the per-event loop pays no dispatch over rules or scopes.
    """
    env = {"Finding": Finding, "CTX": _CTX}
    src = ["def run(st, out):"]
    k = 0
    for attr, rules in scoped:
        src += [f"    ents = st.{attr}", "    if ents:"]
        if attr == "t_spaces" and not live_only:  # finish/release may leave dead spaces touched
            src.append("        ents = [s for s in ents if s.active or s.owner in st.checkpoints]")
        src.append("        n = len(ents)")
        body = ["        for e in ents:"]
        for rule, fn, cnt in rules:
            env[f"f{k}"], env[f"c{k}"], env[f"rule{k}"] = fn, cnt, rule
            src.append(f"        c{k}[0] += n")
            body += [f"            r = f{k}(st, e, False)",
                     "            if r is not None:",
                     f"                c{k}[1] += 1",
                     "                if r is not True:",
                     f"                    out.append(Finding(rule{k}.id, r, CTX[rule{k}.scope](e)))",
                     f"                    c{k}[2] += 1"]
            k += 1
        src += body
    src.append("    st.reset_touched()")
    exec("\n".join(src), env)  # noqa: S102 - source built above from constants only
    return env["run"]


class Checker:
    """Evaluates state rules against one KVStore and counts into its Coverage."""

    def __init__(self, store):
        self.st = store
        self.by_scope: dict[str, list] = {s: [] for s in SCOPES}
        for rule in all_rules():
            if rule.kind == "state" and rule.scope in self.by_scope:  # cache-scope rules: spec.cache_checking
                self.by_scope[rule.scope].append(rule)
        # the Coverage cells of every state rule, fetched once: the hot path adds to them directly
        self._counts = {r.id: store.cov.cell(r.id) for rules in self.by_scope.values() for r in rules}
        attrs = (("pool", "t_pools"), ("page", "t_pages"), ("space", "t_spaces"), ("row", "t_rows"))

        def plan(ids):  # focused operations (ids given) never end an address space
            return _compile([(a, [(r, r.checker, self._counts[r.id]) for r in self.by_scope[sc]
                                  if ids is None or r.id in ids])
                             for sc, a in attrs if any(ids is None or r.id in ids for r in self.by_scope[sc])],
                            live_only=ids is not None)
        self._plans = {op: plan(ids) for op, ids in FOCUS.items()}
        self._plan_all = plan(None)

    def _run(self, rules, entities, full: bool, out: list) -> None:
        st = self.st
        n = len(entities)
        for rule, fn, cnt in rules:
            ex = 0
            for e in entities:
                r = fn(st, e, full)
                if r is not None:
                    ex += 1
                    if r is not True:
                        out.append(Finding(rule.id, r, _CTX[rule.scope](e)))
                        cnt[2] += 1
            cnt[0] += n
            cnt[1] += ex

    def _scoped(self, rules) -> list:
        return [(r, r.checker, self._counts[r.id]) for r in rules]

    def incremental(self, op: str | None = None) -> list[Finding]:
        """State rules on the entities touched since the last check (by operation `op`, if known); consumes
        the touched sets."""
        st = self.st
        out: list[Finding] = []
        run = self._plans.get(op)
        if run is None:
            if st.t_host:  # Host-tier state is one arena: its rules run on the whole store
                self._run(self._scoped(self.by_scope["store"]), (None,), False, out)
            run = self._plan_all
        run(st, out)
        return out

    def audit(self) -> list[Finding]:
        """Every state rule on every entity, in its global form."""
        st = self.st
        out: list[Finding] = []
        by = {sc: self._scoped(rules) for sc, rules in self.by_scope.items()}
        self._run(by["config"], (None,), True, out)
        self._run(by["pool"], list(st.pools), True, out)
        pages = [p for s in st.page_stores.values() for p in s.pages]
        self._run(by["page"], pages, True, out)
        self._run(by["space"], list(st.all_spaces()), True, out)
        rows = [(name, r) for name, t in st.tables.items() for r in range(t.rows)]
        self._run(by["row"], rows, True, out)
        self._run(by["store"], (None,), True, out)
        for rule in (r for rules in self.by_scope.values() for r in rules if r.full_checker is not None):
            msg = rule.full_checker(st)
            st.cov.check(rule.id, exercised=True)
            if msg:
                out.append(Finding(rule.id, msg, {}))
                st.cov.violate(rule.id)
        from kvsim.spec.rules.page import page_1_pool
        for name in st.pools:
            msg = page_1_pool(st, name)
            if msg:
                out.append(Finding("PAGE-1", msg, {"pool": name}))
                st.cov.violate("PAGE-1")
        return out

    def config(self) -> list[Finding]:
        out: list[Finding] = []
        self._run(self._scoped(self.by_scope["config"]), (None,), True, out)
        return out
