"""The obligation ledger: every obligation of seed 002 (cache concepts), clause by clause, and what checks it.

``seed002.toml`` holds one entry per obligation (a seed line may hold several): its id ``L<line>.<k>``, the
seed line, the seed's own section heading above it, a short exact quote of the clause (a substring of that
line), its kind, its status at the round's baseline commit (``before``) and in this tree (``now``), the rule
ids that check it, where it is judged and a one-line note on what is weaker or missing. The figures of a
closing note come from here (``kvsim rules --obligations``), not from prose.

Kinds: ``scheduler`` (a decision a scheduler's plans or events show: tables, ops, hits, publication),
``model`` (the cache subsystem's inner state: pool indexes, the admission planner), ``kernel``, ``runtime``
(the Python runtime, recipes and model code), ``l3`` (the L3 store and its namespace), ``collective``
(reductions across ranks) and ``code`` (identifiers and file placement). Only the first two can be judged
from what a scheduler decides; the others are ``not-checkable`` once a clause rule (``TS-NC-*``) says why.

Statuses: ``faithful`` (a checker enforces the clause as the seed states it, and a test shows it firing),
``weaker`` (checked only in part or under a narrower premise), ``absent`` (nothing checks it),
``contradicts`` (kvsim enforces the opposite), ``not-checkable`` (a clause rule declares why no trace can
show it). ``judged_on``: ``engine`` (checked on a real scheduler's plans or events by ``sim.peers``),
``model`` (only on kvsim's own ``kvmodel.cache`` coordinator and its fuzzing), ``none``.

The loader validates the file's shape and its internal consistency; whether each named rule exists (some
live in ``sim.peers``, which ``spec`` never imports) is ``check_rules``'s job, given the known rule ids, and
whether each quote is in the seed is ``check_seed``'s, given the seed's lines.
"""

from __future__ import annotations

import re
import tomllib
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from importlib import resources
from pathlib import Path

__all__ = ["STATUSES", "KINDS", "JUDGED_ON", "JUDGEABLE", "Obligation", "Section", "Ledger", "ObligationError",
           "load", "check_rules", "check_seed", "clause_lines"]

STATUSES = ("faithful", "weaker", "absent", "contradicts", "not-checkable")
KINDS = ("scheduler", "model", "kernel", "runtime", "l3", "collective", "code")
JUDGEABLE = ("scheduler", "model")  # the kinds a judge of scheduler decisions (or kvsim's model) can check
JUDGED_ON = ("engine", "model", "none")
FIELDS = ("id", "line", "section", "clause", "kind", "before", "now", "rules", "judged_on", "note")
_ID = re.compile(r"^L([1-9][0-9]*)\.([1-9][0-9]*)$")
DEFAULT = "seed002.toml"


class ObligationError(ValueError):
    """A malformed ledger: the message is ``file: entry: reason``."""


@dataclass(frozen=True)
class Section:
    line: int
    title: str


@dataclass(frozen=True)
class Obligation:
    id: str
    line: int
    section: str
    clause: str
    kind: str
    before: str
    now: str
    rules: tuple[str, ...]
    judged_on: str
    note: str

    def as_dict(self) -> dict:
        return {f: list(self.rules) if f == "rules" else getattr(self, f) for f in FIELDS}


@dataclass(frozen=True)
class Ledger:
    seed: str
    baseline: str
    lines: int
    sections: tuple[Section, ...]
    obligations: tuple[Obligation, ...]

    def counts(self, when: str, kinds: Sequence[str] = KINDS) -> dict[str, Counter]:
        """Per section title (seed order), how many obligations of these kinds hold each status ``when``
        ("before" or "now"); sections without any are left out."""
        out: dict[str, Counter] = {s.title: Counter() for s in self.sections}
        for o in self.obligations:
            if o.kind in kinds:
                out[o.section][getattr(o, when)] += 1
        return {title: c for title, c in out.items() if c}

    def totals(self, when: str, kinds: Sequence[str] = KINDS) -> Counter:
        return Counter(getattr(o, when) for o in self.obligations if o.kind in kinds)

    def with_status(self, status: str, when: str = "now") -> list[Obligation]:
        return [o for o in self.obligations if getattr(o, when) == status]


def load(path: str | Path | None = None) -> Ledger:
    """Read and validate a ledger (default: the packaged seed002.toml); ObligationError says what is wrong."""
    if path is None:
        name = DEFAULT
        data = resources.files(__package__).joinpath(DEFAULT).read_bytes()
    else:
        name = str(path)
        data = Path(path).read_bytes()
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ObligationError(f"{name}: not a TOML file ({exc})") from None
    return _validate(doc, name)


def _validate(doc: dict, name: str) -> Ledger:
    def bad(where: str, why: str) -> ObligationError:
        return ObligationError(f"{name}: {where}: {why}")

    for key, typ in (("seed", str), ("baseline", str), ("lines", int), ("section", list), ("obligation", list)):
        if not isinstance(doc.get(key), typ):
            raise bad("header", f"'{key}' must be a {typ.__name__}")
    sections: list[Section] = []
    for i, s in enumerate(doc["section"]):
        if not (isinstance(s, dict) and isinstance(s.get("line"), int) and isinstance(s.get("title"), str)
                and s["title"]):
            raise bad(f"section {i + 1}", "needs an integer 'line' and a non-empty 'title'")
        if sections and s["line"] <= sections[-1].line:
            raise bad(f"section {s['title']!r}", "sections must be in seed order")
        sections.append(Section(s["line"], s["title"]))
    if not sections:
        raise bad("header", "no sections")
    titles = [s.title for s in sections]
    if len(set(titles)) != len(titles):
        raise bad("header", "two sections share a title")
    obligations: list[Obligation] = []
    last = (0, 0)
    for i, e in enumerate(doc["obligation"]):
        where = f"obligation {e.get('id', i + 1)}" if isinstance(e, dict) else f"obligation {i + 1}"
        if not isinstance(e, dict) or set(e) != set(FIELDS):
            got = sorted(e) if isinstance(e, dict) else type(e).__name__
            raise bad(where, f"fields must be exactly {', '.join(FIELDS)} (got {got})")
        o = Obligation(**{**e, "rules": tuple(e["rules"]) if isinstance(e["rules"], list) else e["rules"]})
        _check_entry(o, sections, doc["lines"], partial(bad, where))
        pos = (o.line, int(o.id.rsplit(".", 1)[1]))  # the id's shape was checked above
        if pos[0] == last[0] and pos[1] != last[1] + 1 or pos[0] != last[0] and (pos[0] < last[0] or pos[1] != 1):
            raise bad(where, f"ids must run in seed order, L<line>.1, .2, ... (after L{last[0]}.{last[1]})")
        last = pos
        obligations.append(o)
    return Ledger(doc["seed"], doc["baseline"], doc["lines"], tuple(sections), tuple(obligations))


def _check_entry(o: Obligation, sections: Sequence[Section], lines: int,
                 bad: Callable[[str], ObligationError]) -> None:
    """One entry's fields and the consistency of its statuses, rules and judge; raises bad(reason)."""
    for f in ("id", "section", "clause", "kind", "before", "now", "judged_on", "note"):
        if not isinstance(getattr(o, f), str):
            raise bad(f"'{f}' must be a string")
    if not isinstance(o.line, int) or not 1 <= o.line <= lines:
        raise bad(f"'line' must be a seed line in 1..{lines}")
    m = _ID.match(o.id)
    if m is None or int(m.group(1)) != o.line:
        raise bad(f"id must be L{o.line}.<k>")
    if not o.clause.strip():
        raise bad("empty clause")
    if not isinstance(o.rules, tuple) or not all(isinstance(r, str) and r for r in o.rules):
        raise bad("'rules' must be a list of rule ids")
    if len(set(o.rules)) != len(o.rules):
        raise bad("a rule is named twice")
    if o.kind not in KINDS:
        raise bad(f"kind {o.kind!r} is not one of {', '.join(KINDS)}")
    for when in ("before", "now"):
        if getattr(o, when) not in STATUSES:
            raise bad(f"{when} {getattr(o, when)!r} is not one of {', '.join(STATUSES)}")
    if o.judged_on not in JUDGED_ON:
        raise bad(f"judged_on {o.judged_on!r} is not one of {', '.join(JUDGED_ON)}")
    heading = max((s for s in sections if s.line <= o.line), key=lambda s: s.line, default=None)
    if heading is None or heading.title != o.section:
        raise bad(f"section {o.section!r}, but line {o.line} sits under {heading.title if heading else 'none'!r}")
    if o.now in ("faithful", "weaker") and not o.rules:
        raise bad(f"a {o.now} obligation names the rules that check it")
    if o.now in ("faithful", "weaker") and o.judged_on == "none":
        raise bad(f"a {o.now} obligation is judged on the engine or the model")
    if o.now not in ("faithful", "weaker") and o.judged_on != "none":
        raise bad(f"judged_on {o.judged_on!r}, but nothing checks a {o.now} obligation")
    if o.now == "not-checkable" and not o.rules:
        raise bad("a not-checkable obligation names the clause rule that says why")
    if o.kind not in JUDGEABLE and o.now not in ("not-checkable", "absent"):
        raise bad(f"a {o.kind} clause is not-checkable (or absent while no clause rule covers it)")
    if o.kind not in JUDGEABLE and o.now == "absent" and not o.note.startswith("no not-checkable entry"):
        raise bad(f"an uncovered {o.kind} clause says so: its note starts 'no not-checkable entry'")
    if o.now in ("weaker", "contradicts") and not o.note:
        raise bad(f"a {o.now} obligation's note says what is missing")


def clause_lines(citation: str) -> set[int]:
    """The seed lines a rule's citation names: ``L27``, ``L84-90``, ``L303-365``, ``l.193``."""
    out: set[int] = set()
    for a, b in re.findall(r"\b(?:L|l\.)(\d+)(?:-(\d+))?", citation):
        out.update(range(int(a), int(b or a) + 1))
    return out


def check_rules(ledger: Ledger, known: Mapping[str, tuple[str, str]]) -> list[str]:
    """Problems with the named rules, given ``known``: rule id -> (evidence, seed citation). Every id must be
    known; a not-checkable obligation must name a clause rule (evidence "none") whose citation covers its
    line; a faithful or weaker one must name a checking rule (evidence "engine" or "model")."""
    problems: list[str] = []
    for o in ledger.obligations:
        missing = [r for r in o.rules if r not in known]
        if missing:
            problems.append(f"{o.id}: names {', '.join(missing)}, which no catalogue defines")
            continue
        clause = [r for r in o.rules if known[r][0] == "none"]
        if o.now == "not-checkable":
            if not clause:
                problems.append(f"{o.id}: not-checkable, but names no clause rule")
            elif not any(o.line in clause_lines(known[r][1]) for r in clause):
                problems.append(f"{o.id}: no named clause rule ({', '.join(clause)}) cites line {o.line}")
        elif o.now in ("faithful", "weaker") and len(clause) == len(o.rules):
            problems.append(f"{o.id}: {o.now}, but names only clause rules")
    return problems


def check_seed(ledger: Ledger, seed_lines: Sequence[str]) -> list[str]:
    """Problems against the seed text: a section title that is not its line, a quote not in its line."""
    problems: list[str] = []
    if len(seed_lines) != ledger.lines:
        problems.append(f"the seed has {len(seed_lines)} lines, the ledger says {ledger.lines}")
    for s in ledger.sections:
        if s.line > len(seed_lines) or seed_lines[s.line - 1].strip() != s.title:
            problems.append(f"section {s.title!r} is not line {s.line}")
    for o in ledger.obligations:
        if o.line > len(seed_lines) or o.clause not in seed_lines[o.line - 1]:
            problems.append(f"{o.id}: {o.clause!r} is not in seed line {o.line}")
    return problems
