"""The rule catalogue: rules as records, one registry, validated at import.

Each rule: id (a contract: add more, never renumber), one-line title, the seed clause it comes from (a
phrase one can search for in the seed), kind (`state`: a predicate over the model state, checked
incrementally on touched entities and by the full audit; `transition`: checked when an operation is
applied, by the model function named as its checker), the checker itself, and the semantic decisions
taken where the seed is silent. Counters live in `kvmodel.store.coverage.Coverage`.
A rule's checker is found from its id in one step: grep the id; it sits on the `@state_rule(...)`
decorator of its checker or in the `transition_rule(...)` call naming it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

KINDS = ("state", "transition")
SCOPES = ("config", "pool", "page", "space", "row", "store", "cache", "none")  # cache: a kvmodel.cache CacheState
_ID = re.compile(r"^(CAP|PAGE|AS|WR|ENT|UNIT|REP|CKPT|CONS|TRACE|TS-(POOL|PFX|ADM|GEO|RET|TBL))-[1-9][0-9]*$")


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    clause: str
    kind: str
    checker: Callable
    scope: str = "none"  # what a state checker is applied to
    decisions: str = ""  # how the model fills what the seed leaves open
    full_checker: Callable | None = None  # audit-only global form (recounts, reachability)

    @property
    def checker_name(self) -> str:
        fn = self.checker
        return fn if isinstance(fn, str) else f"{fn.__module__}.{fn.__qualname__}"

    def as_dict(self) -> dict:
        return {"id": self.id, "title": self.title, "clause": self.clause, "kind": self.kind,
                "checker": self.checker_name, "decisions": self.decisions}


class InvalidRule(ValueError):
    """A malformed catalogue entry; names the rule and what is wrong."""


_REGISTRY: dict[str, Rule] = {}


def _register(r: Rule) -> Rule:
    if not _ID.match(r.id):
        raise InvalidRule(f"rule id {r.id!r} does not match FAMILY-N")
    if r.id in _REGISTRY:
        raise InvalidRule(f"rule {r.id} is defined twice ({_REGISTRY[r.id].checker_name} and {r.checker_name})")
    if r.kind not in KINDS or r.scope not in SCOPES:
        raise InvalidRule(f"rule {r.id}: kind {r.kind!r} / scope {r.scope!r} is not one of {KINDS} / {SCOPES}")
    if not r.title or "\n" in r.title or not r.clause:
        raise InvalidRule(f"rule {r.id}: a one-line title and a seed clause are required")
    if not (callable(r.checker) or (isinstance(r.checker, str) and r.kind == "transition" and "." in r.checker)):
        raise InvalidRule(f"rule {r.id}: checker must be callable (or, for a transition rule checked by the "
                          "simulator, a dotted name)")
    if r.kind == "state" and r.scope == "none":
        raise InvalidRule(f"rule {r.id}: a state rule needs a scope")
    _REGISTRY[r.id] = r
    return r


def state_rule(rule_id: str, title: str, clause: str, scope: str, decisions: str = "",
               full: Callable | None = None):
    """Decorator: register the decorated predicate as the checker of a state rule.

    The predicate is called as fn(store, entity, full) and returns None (premise vacuous, pass), True
    (premise held, pass) or a one-line message (violated).
    """
    def deco(fn):
        _register(Rule(rule_id, title, clause, "state", fn, scope, decisions, full))
        return fn
    return deco


def transition_rule(rule_id: str, title: str, clause: str, checker: Callable | str, decisions: str = "") -> Rule:
    """Register a transition rule whose checker is the model function enforcing it; a rule checked by the
    simulator (lockstep) names its checker by dotted path, so the catalogue never imports `sim`."""
    return _register(Rule(rule_id, title, clause, "transition", checker, "none", decisions))


FAMILY_ORDER = ("CAP", "PAGE", "AS", "WR", "ENT", "UNIT", "REP", "CKPT", "CONS", "TRACE",
                "TS-POOL", "TS-PFX", "TS-ADM", "TS-GEO", "TS-RET", "TS-TBL")


def _order(r: Rule):
    fam, n = r.id.rsplit("-", 1)
    return FAMILY_ORDER.index(fam), int(n)


def all_rules() -> list[Rule]:
    """Every registered rule in catalogue order (family order of DESIGN §7, then number)."""
    from kvsim.spec import rules  # noqa: F401  (importing registers every family)
    return sorted(_REGISTRY.values(), key=_order)


def get(rule_id: str) -> Rule:
    all_rules()
    return _REGISTRY[rule_id]
