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

import ast
import functools
import importlib.machinery
import os
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass

KINDS = ("state", "transition", "clause")
# What a rule's firing is evidence of: "engine" (reachable from trace facts: it judges the engine that
# recorded the trace), "model" (only hand-edited or buggy model state can fire it: it guards the model
# itself, and its counters are no engine coverage), "none" (a clause recorded but not checkable from
# traces; `not_checkable` says why).
EVIDENCE = ("engine", "model", "none")
SCOPES = ("config", "pool", "page", "space", "row", "store", "cache", "none")  # cache: a kvmodel.cache CacheState
_ID = re.compile(r"^(CAP|PAGE|AS|WR|ENT|UNIT|REP|CKPT|CONS|TRACE|TS-(POOL|PFX|ADM|GEO|RET|TBL|L2|ST|NC)|PEER)"
                 r"-[1-9][0-9]*$")


@dataclass(frozen=True)
class Rule:
    id: str
    title: str
    clause: str
    kind: str
    checker: Callable | str | None  # a function; a dotted path (checked by `sim`); None for a clause
    scope: str = "none"  # what a state checker is applied to
    decisions: str = ""  # how the model fills what the seed leaves open
    full_checker: Callable | None = None  # audit-only global form (recounts, reachability)
    evidence: str = "engine"  # see EVIDENCE
    not_checkable: str = ""  # why no kvtrace/1 trace can carry what the clause requires
    subsumed_by: tuple = ()  # rules that fire first wherever this one's premise holds in a trace

    @property
    def checker_name(self) -> str:
        fn = self.checker
        if fn is None:
            return ""
        return fn if isinstance(fn, str) else f"{fn.__module__}.{fn.__qualname__}"

    def as_dict(self) -> dict:
        return {"id": self.id, "title": self.title, "clause": self.clause, "kind": self.kind,
                "checker": self.checker_name, "decisions": self.decisions, "evidence": self.evidence,
                "not_checkable": self.not_checkable, "subsumed_by": list(self.subsumed_by),
                "state_form": "guards the model" if self.kind == "state" and self.evidence == "engine" else ""}


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
    if r.evidence not in EVIDENCE:
        raise InvalidRule(f"rule {r.id}: evidence {r.evidence!r} is not one of {EVIDENCE}")
    if (r.kind == "clause") != (r.evidence == "none") or (r.evidence == "none") != bool(r.not_checkable):
        raise InvalidRule(f"rule {r.id}: a clause rule (evidence 'none') and only it gives a not_checkable reason")
    if r.kind == "clause":
        if r.checker is not None:
            raise InvalidRule(f"rule {r.id}: a clause rule has no checker")
    elif not (callable(r.checker) or (isinstance(r.checker, str) and r.kind == "transition" and "." in r.checker)):
        raise InvalidRule(f"rule {r.id}: checker must be callable (or, for a transition rule checked by the "
                          "simulator, a dotted name)")
    if r.kind == "state" and r.scope == "none":
        raise InvalidRule(f"rule {r.id}: a state rule needs a scope")
    _REGISTRY[r.id] = r
    return r


def unresolved() -> list[str]:
    """One line per rule whose dotted checker name names no definition in the installed source.

    Not checked at import: a catalogue entry that cannot be resolved fails the test suite
    (tests/test_catalogue_links.py), never a user's command.
    """
    return [f"rule {r.id}: checker {r.checker!r} names no function (fix the dotted name)"
            for r in sorted(_REGISTRY.values(), key=_order) if isinstance(r.checker, str) and not resolves(r.checker)]


def resolves(dotted: str) -> bool:
    """Whether a dotted name (module path, then classes/functions inside) names a definition in the source."""
    return locate(dotted) is not None


def locate(dotted: str) -> tuple[str, int] | None:
    """(source file, line) of the definition a dotted name (module path, then classes/functions inside) names,
    or None.

    Read from the module's source (its syntax tree), never imported: the catalogue must not import `sim`, and
    importing a checker's module would import its parent packages (and with them the lockstep's physical
    planes: seconds of start-up for every command). The module's file is found the way the import system would
    find it, without running any module (`_module_file`), so it works under every install: a plain or strict
    editable install, pip's default editable install (an import hook with no folders), a wheel. Each source
    file is parsed once.
    """
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        origin = _module_file(parts[:cut])
        if origin is None:
            continue
        body, line = _definitions(origin), 1
        for name in parts[cut:]:
            node = next((n for n in body if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name == name), None)
            if node is None:
                return None
            body, line = (node.body if isinstance(node, ast.ClassDef) else []), node.lineno
        return origin, line
    return None


def _module_file(names: list[str]) -> str | None:
    """The .py file of module ``a.b.c``, or None: each level's spec is asked of the import system's finders
    (``sys.meta_path``, given the parent's search locations) without importing any of the packages, so the
    answer does not depend on how the distribution was installed (folders on the path, setuptools' editable
    finder, a wheel)."""
    locations = None
    spec = None
    for i in range(len(names)):
        full = ".".join(names[: i + 1])
        module = sys.modules.get(full)
        spec = getattr(module, "__spec__", None) if module is not None else None
        if spec is None:
            spec = _find_spec(full, locations)
        if spec is None:
            return None
        locations = spec.submodule_search_locations
        if locations is None and i < len(names) - 1:
            return None
    origin = spec.origin if spec is not None else None
    return origin if origin and origin.endswith(".py") and os.path.isfile(origin) else None


def _find_spec(fullname: str, locations: object) -> importlib.machinery.ModuleSpec | None:
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        try:
            spec = find(fullname, locations)
        except (ImportError, ValueError, TypeError, AttributeError):
            continue
        if spec is not None:
            return spec
    return None


@functools.cache
def _definitions(origin: str) -> list[ast.stmt]:
    with open(origin, encoding="utf-8") as f:
        return ast.parse(f.read()).body


def require(ids: Iterable[str], where: str) -> None:
    """Every id in `ids` is a registered rule, or InvalidRule naming `where` (a model tuple, a focus entry)."""
    missing = [i for i in ids if i not in _REGISTRY]
    if missing:
        raise InvalidRule(f"{where} names {', '.join(missing)}, which the catalogue does not define")


def state_rule(rule_id: str, title: str, clause: str, scope: str, decisions: str = "",
               full: Callable | None = None, evidence: str = "engine", subsumed_by: tuple = ()
               ) -> Callable[[Callable], Callable]:
    """Decorator: register the decorated predicate as the checker of a state rule.

    The predicate is called as fn(store, entity, full) and returns None (premise vacuous, pass), True
    (premise held, pass) or a one-line message (violated).
    """
    def deco(fn: Callable) -> Callable:
        _register(Rule(rule_id, title, clause, "state", fn, scope, decisions, full, evidence,
                       subsumed_by=tuple(subsumed_by)))
        return fn
    return deco


def transition_rule(rule_id: str, title: str, clause: str, checker: Callable | str, decisions: str = "",
                    evidence: str = "engine", scope: str = "none") -> Rule:
    """Register a transition rule whose checker is the model function enforcing it; a rule checked by the
    simulator (lockstep) or a peer judge names its checker by dotted path, so the catalogue never imports
    `sim`. Scope "cache" marks a rule of the cache concepts (tested with the cache and peer tests)."""
    return _register(Rule(rule_id, title, clause, "transition", checker, scope, decisions, evidence=evidence))


def clause_rule(rule_id: str, title: str, clause: str, not_checkable: str, decisions: str = "") -> Rule:
    """Register a contract clause that no kvtrace/1 trace can carry, with the reason (nothing silently left
    out): it has no checker and no counters."""
    return _register(Rule(rule_id, title, clause, "clause", None, "none", decisions, evidence="none",
                          not_checkable=not_checkable))


FAMILY_ORDER = ("CAP", "PAGE", "AS", "WR", "ENT", "UNIT", "REP", "CKPT", "CONS", "TRACE",
                "TS-POOL", "TS-PFX", "TS-ADM", "TS-GEO", "TS-RET", "TS-TBL", "TS-L2", "TS-ST", "TS-NC", "PEER")


def _order(r: Rule) -> tuple[int, int]:
    fam, n = r.id.rsplit("-", 1)
    return FAMILY_ORDER.index(fam), int(n)


def all_rules() -> list[Rule]:
    """Every registered rule in catalogue order (family order of DESIGN §7, then number).

    The families register on import of `kvsim.spec` (its __init__ imports `kvsim.spec.rules`), which
    happens before this module can be imported: the registry is complete whenever it can be read.
    """
    return sorted(_REGISTRY.values(), key=_order)


def get(rule_id: str) -> Rule:
    return _REGISTRY[rule_id]
