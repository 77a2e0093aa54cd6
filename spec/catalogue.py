"""The rule catalogue: rules as records, one registry, validated at import.

Each rule: id (a contract: add more, never renumber), one-line title, the seed clause it comes from (a
phrase one can search for in the seed), kind (`state`: a predicate over the model state, checked
incrementally on touched entities and by the full audit; `transition`: checked when an operation is
applied, by the model function named as its checker), the checker itself, and the semantic decisions
taken where the seed is silent. Counters live in `kvmodel.store.coverage.Coverage`.
A rule's checker is found from its id in one step: grep the id; it sits on the `@state_rule(...)`
decorator of its checker or in the `transition_rule(...)` call naming it.

Every id any command reports is an entry here (DESIGN §7): the store rules, TS-*, EV-* and PEER-*. A peer
judge's rules are entries whose checker it names by dotted path; where a second judge checks the same id in
its own words (the cache model and the TokenSpeed contract judge both check TS-TBL-1; each engine's judge
reads PEER-9 for its own counters), the entry carries a `Reading` per such judge. Each entry also names its
tests (pytest node ids, file::function: a test shows it kept by legal behaviour or fired by a crafted
violation) and the context keys its findings carry (spec.findings says what each key means).
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
_ID = re.compile(r"^(CAP|PAGE|AS|WR|ENT|UNIT|REP|CKPT|CONS|TRACE|TS-(POOL|PFX|ADM|GEO|RET|TBL|L2|ST|NC)|EV|PEER)"
                 r"-[1-9][0-9]*$")
# Who reports a rule's findings (spec.findings describes each one's findings): kvtrace/1 replay (the store
# rules), the cache model (TS-* state predicates, run by the fuzz machines and the tests), the TokenSpeed
# cachetrace/1 contract judge, TokenSpeed's configuration probe, the vLLM/SGLang step judge, the KV-event judge.
JUDGES = ("replay", "model", "tokenspeed", "probe", "engine", "events")
_TEST = re.compile(r"^tests/[A-Za-z0-9_/]+\.py::[A-Za-z_][A-Za-z0-9_]*$")
_KEY = re.compile(r"^[a-z][a-z0-9_]*$")


@dataclass(frozen=True)
class Reading:
    """One more judge's check of a rule, in that judge's words where they differ from the entry's (empty: the
    entry's own): the cache model checks TS-POOL-4 on its pool, the TokenSpeed contract judge on a scheduler's
    plans; PEER-9 reads TokenSpeed's pool counters one way and vLLM's and SGLang's another."""
    judge: str
    checker: str  # a dotted name, as a peer judge's entry names its checker
    title: str = ""
    clause: str = ""
    decisions: str = ""


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
    tests: tuple[str, ...] = ()  # pytest node ids (tests/....py::test_name) keeping and firing it
    context: tuple[str, ...] = ()  # the keys of a finding's `context` (spec.findings.GLOSSARY says what each is)
    readings: tuple[Reading, ...] = ()  # other judges checking this id in their own words

    @property
    def family(self) -> str:
        return self.id.rsplit("-", 1)[0]

    @property
    def checker_name(self) -> str:
        fn = self.checker
        if fn is None:
            return ""
        return fn if isinstance(fn, str) else f"{fn.__module__}.{fn.__qualname__}"

    @property
    def judge(self) -> str:
        """Who reports this rule's findings (one of JUDGES), read from where its checker lives; "" for a clause."""
        return judge_of(self.checker_name, self.scope)

    def checkers(self) -> list[tuple[str, str]]:
        """(judge, dotted checker name) of the entry, then of each reading, each pair once."""
        own = [(self.judge, self.checker_name)] if self.checker is not None else []
        return list(dict.fromkeys(own + [(r.judge, r.checker) for r in self.readings]))

    def stated(self, judge: str) -> tuple[str, str, str]:
        """(title, clause, decisions) as `judge`'s report lists them: its reading's words where it has them,
        else the entry's; the title as a phrase (`phrase`)."""
        r = next((x for x in self.readings if x.judge == judge), None)
        title = (r.title if r else "") or self.title
        return phrase(title), (r.clause if r else "") or self.clause, (r.decisions if r else "") or self.decisions

    def as_dict(self) -> dict:
        return {"id": self.id, "family": self.family, "title": self.title, "clause": self.clause, "kind": self.kind,
                "checker": self.checker_name, "judge": self.judge, "decisions": self.decisions,
                "evidence": self.evidence, "not_checkable": self.not_checkable, "subsumed_by": list(self.subsumed_by),
                "state_form": "guards the model" if self.kind == "state" and self.evidence == "engine" else "",
                "readings": [{"judge": r.judge, "checker": r.checker, "title": r.title, "clause": r.clause,
                              "decisions": r.decisions} for r in self.readings],
                "context": list(self.context), "tests": list(self.tests)}


def phrase(title: str) -> str:
    """A title as a peer report lists it, a phrase: the first letter in lower case unless the first word is a
    name (``SGLang's``, ``AllBlocksCleared``, ``Validate()``: another capital, a digit, a call or an underscore)."""
    first = title.split(" ", 1)[0]
    named = any(c.isupper() or c.isdigit() or c in "(_" for c in first[1:])
    return title if named else title[:1].lower() + title[1:]


def judge_of(checker: str, scope: str = "none") -> str:
    """Who reports the findings of a rule checked by `checker` (a dotted name): see JUDGES."""
    if not checker:
        return ""
    if ".sim.peers.tokenspeed.config_probe." in checker:
        return "probe"
    if ".sim.peers.cachetrace." in checker or ".sim.peers.tokenspeed." in checker:
        return "tokenspeed"
    if ".sim.peers.judges.events." in checker:
        return "events"
    if ".sim.peers." in checker:
        return "engine"
    return "model" if scope == "cache" else "replay"


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
    if r.kind == "clause" and (r.tests or r.readings):
        raise InvalidRule(f"rule {r.id}: a clause rule has no checker, so no tests and no readings")
    bad = [t for t in r.tests if not _TEST.match(t)] + [k for k in r.context if not _KEY.match(k)]
    if bad or len(set(r.tests)) != len(r.tests):
        raise InvalidRule(f"rule {r.id}: tests are distinct 'tests/....py::test_name', context keys identifiers "
                          f"({bad[:1] or 'a test named twice'})")
    for x in r.readings:
        own_words = bool(x.title or x.clause or x.decisions)
        if x.judge not in JUDGES or "." not in x.checker or (x.judge == r.judge and not own_words):
            raise InvalidRule(f"rule {r.id}: reading {x.judge!r} needs a judge of {JUDGES}, a dotted checker, and "
                              "its own words when its judge is the entry's")
    _REGISTRY[r.id] = r
    return r


def unresolved() -> list[str]:
    """One line per rule whose dotted checker name names no definition in the installed source.

    Not checked at import: a catalogue entry that cannot be resolved fails the test suite
    (tests/test_catalogue_links.py), never a user's command.
    """
    return [f"rule {r.id}: checker {name!r} names no function (fix the dotted name)"
            for r in sorted(_REGISTRY.values(), key=_order)
            for name in ([r.checker] if isinstance(r.checker, str) else []) + [x.checker for x in r.readings]
            if not resolves(name)]


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


def where(dotted: str) -> str | None:
    """``path:line`` of the definition a dotted name names, the path relative to the package (the repository's
    layout: kvsim.sim.peers.x is sim/peers/x.py), never a machine path; None when it names nothing."""
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        origin = _module_file(parts[:cut])
        if origin is None:
            continue
        found = locate(dotted)
        if found is None:
            return None
        inner = parts[1:cut] if parts[0] == "kvsim" else parts[:cut]
        rel = "/".join(inner + ["__init__"] if os.path.basename(origin) == "__init__.py" else inner) + ".py"
        return f"{rel}:{found[1]}"
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
               full: Callable | None = None, evidence: str = "engine", subsumed_by: tuple = (),
               tests: tuple[str, ...] = (), context: tuple[str, ...] = (), readings: tuple[Reading, ...] = ()
               ) -> Callable[[Callable], Callable]:
    """Decorator: register the decorated predicate as the checker of a state rule.

    The predicate is called as fn(store, entity, full) and returns None (premise vacuous, pass), True
    (premise held, pass) or a one-line message (violated).
    """
    def deco(fn: Callable) -> Callable:
        _register(Rule(rule_id, title, clause, "state", fn, scope, decisions, full, evidence,
                       subsumed_by=tuple(subsumed_by), tests=tuple(tests), context=tuple(context),
                       readings=tuple(readings)))
        return fn
    return deco


def transition_rule(rule_id: str, title: str, clause: str, checker: Callable | str, decisions: str = "",
                    evidence: str = "engine", scope: str = "none", tests: tuple[str, ...] = (),
                    context: tuple[str, ...] = (), readings: tuple[Reading, ...] = ()) -> Rule:
    """Register a transition rule whose checker is the model function enforcing it; a rule checked by the
    simulator (lockstep) or a peer judge names its checker by dotted path, so the catalogue never imports
    `sim`. Scope "cache" marks a rule of the cache concepts (tested with the cache and peer tests)."""
    return _register(Rule(rule_id, title, clause, "transition", checker, scope, decisions, evidence=evidence,
                          tests=tuple(tests), context=tuple(context), readings=tuple(readings)))


def clause_rule(rule_id: str, title: str, clause: str, not_checkable: str, decisions: str = "") -> Rule:
    """Register a contract clause that no kvtrace/1 trace can carry, with the reason (nothing silently left
    out): it has no checker and no counters."""
    return _register(Rule(rule_id, title, clause, "clause", None, "none", decisions, evidence="none",
                          not_checkable=not_checkable))


FAMILY_ORDER = ("CAP", "PAGE", "AS", "WR", "ENT", "UNIT", "REP", "CKPT", "CONS", "TRACE",
                "TS-POOL", "TS-PFX", "TS-ADM", "TS-GEO", "TS-RET", "TS-TBL", "TS-L2", "TS-ST", "TS-NC", "EV", "PEER")
# Names for several families at once (`kvsim rules store`, `kvsim rules TS`)
FAMILY_GROUPS = {"store": FAMILY_ORDER[:10], "TS": tuple(f for f in FAMILY_ORDER if f.startswith("TS-"))}


def families(word: str) -> tuple[str, ...]:
    """The families a word names, in catalogue order: a family (``PEER``, ``ts-l2``: any case), ``TS`` (every
    TS-* family) or ``store`` (the store contract's); () when it names none."""
    up = word.upper()
    group = next((fams for name, fams in FAMILY_GROUPS.items() if name.upper() == up), None)
    return group if group is not None else tuple(f for f in FAMILY_ORDER if f == up)


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


def stated(ids: Iterable[str], judge: str) -> dict[str, tuple[str, str]]:
    """{id: (title, clause)} as `judge`'s report lists the rules `ids` (Rule.stated), in the order given: the
    peer judges' rule tables, derived from the catalogue."""
    return {rid: get(rid).stated(judge)[:2] for rid in ids}
