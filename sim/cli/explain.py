"""`kvsim explain RULE`: one catalogue entry in full -- what the rule says, the seed clause or engine source it
rests on, its decisions, what a finding of it means and how to read one, where its checker is, its tests.

Every id any command reports (store rules, TS-*, EV-*, PEER-*) is an entry of the one catalogue (spec.rules).
A checker's place is read through the import system (spec.catalogue.where), never from a source folder, so it
works however kvsim is installed, and is shown relative to the package (the repository's layout). An id that is
no entry is an input error (exit 2) naming the closest ids.
"""

from __future__ import annotations

import difflib
import json
import sys
import textwrap

from kvsim.sim.cli.common import EXIT_OK, InputError
from kvsim.spec.catalogue import Rule, all_rules, families, get, phrase, where
from kvsim.spec.findings import FORMS, Form, forms_of, means

WIDTH = 100
EVIDENCE = {"engine": "judges the engine under test (reachable from what it recorded or did)",
            "model": "guards kvsim's own model (only hand-edited or buggy model state fires it)",
            "none": "a clause no recorded trace can carry: not checked"}
JUDGE_NAMES = {"replay": "kvtrace/1 replay (the store model)", "model": "the cache model",
               "tokenspeed": "the TokenSpeed cachetrace/1 contract judge", "probe": "TokenSpeed's configuration probe",
               "engine": "the vLLM / SGLang step judge", "events": "the KV-event judge"}


def add_parser(sub) -> None:
    ex = sub.add_parser("explain", help="one rule's catalogue entry: its clause, what a finding means and how to "
                        "read one, where its checker is, its tests")
    ex.add_argument("rule", metavar="RULE", help="a rule id, as a finding names it (PEER-9, EV-3, WR-2, ...; any case)")
    ex.add_argument("--json", action="store_true", help="print the entry as JSON")
    ex.set_defaults(fn=run)


def run(args) -> int:
    rule = lookup(args.rule)
    if args.json:
        sys.stdout.write(json.dumps(explained(rule), indent=2, ensure_ascii=False) + "\n")
    else:
        sys.stdout.write(text(rule))
    return EXIT_OK


def lookup(word: str) -> Rule:
    """The entry of id `word` (any case), or InputError naming the closest ids (or the family's listing)."""
    rid = word.strip().upper()
    ids = [r.id for r in all_rules()]
    if rid in ids:
        return get(rid)
    if families(word):
        raise InputError(f"kvsim explain: {word!r} is a rule family, not a rule: `kvsim rules {word}` lists it")
    close = difflib.get_close_matches(rid, ids, n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(close)}?" if close else "`kvsim rules` lists every id"
    raise InputError(f"kvsim explain: no rule {word!r} in the catalogue; {hint}")


def checkers(rule: Rule) -> list[dict]:
    """Each checker of the rule: its judge, dotted name, and place (path:line relative to the package)."""
    return [{"judge": judge, "checker": dotted, "where": where(dotted) or ""} for judge, dotted in rule.checkers()]


def reading(rule: Rule, form: Form) -> dict:
    """How to read a finding of `rule` reported by `form`'s judge: its fields, and the context keys it explains."""
    return {"judge": form.judge, "reported_by": form.reported_by, "means": means(rule, form), "event": form.event,
            "line": form.line, "op": form.op, "also": form.also,
            "context": {k: form.keys[k] for k in rule.context if k in form.keys}}


def explained(rule: Rule) -> dict:
    """The entry as JSON: the catalogue's fields, each checker's place, and how to read each judge's findings."""
    out = rule.as_dict()
    out["where"] = checkers(rule)
    out["findings"] = [reading(rule, f) for f in forms_of(rule)]
    for r, x in zip(out["readings"], rule.readings):
        r["title"] = r["title"] or rule.title
        r["where"] = where(x.checker) or ""
    return out


def _para(label: str, body: str, indent: int = 2) -> str:
    pad = " " * indent
    return textwrap.fill(f"{label}{body}", WIDTH, initial_indent=pad, subsequent_indent=pad + "  ",
                         break_on_hyphens=False, break_long_words=False) + "\n"


def text(rule: Rule) -> str:
    """The entry for a reader: one paragraph per field, wrapped at WIDTH columns."""
    out = [textwrap.fill(f"{rule.id}  {rule.title}", WIDTH, subsequent_indent="    ", break_on_hyphens=False) + "\n",
           _para("", f"family {rule.family} · {rule.kind} rule · {EVIDENCE[rule.evidence]}")]
    if rule.subsumed_by:
        out.append(_para("subsumed by: ", ", ".join(rule.subsumed_by) + " (they fire first where its premise holds)"))
    out.append(_para("rests on: ", rule.clause))
    if rule.decisions:
        out.append(_para("decisions: ", rule.decisions))
    if rule.not_checkable:
        out.append(_para("not checkable: ", rule.not_checkable))
        return "".join(out)
    for c in checkers(rule):
        form = FORMS[c["judge"]]
        out.append("\n" + _para("judged by ", f"{JUDGE_NAMES[c['judge']]} -- reported by {form.reported_by}"))
        out.append(_para("checker: ", f"{c['checker']} ({c['where'] or 'not found: run the link tests'})", 4))
        own = next((x for x in rule.readings if x.judge == c["judge"]), None)
        if own is not None and own.title:
            out.append(_para("in its words: ", own.title, 4))
        if own is not None and own.clause:
            out.append(_para("rests on: ", own.clause, 4))
        if own is not None and own.decisions:
            out.append(_para("decisions: ", own.decisions, 4))
        said = phrase(own.title if own is not None and own.title else rule.title)
        out.append(_para("a finding means: ", f"{means(rule, form)}: {said}", 4))
        out.append(_para("reading one: ", f"`event` is {form.event}; `line` is {form.line}; `op` is {form.op}"
                         + (f"; {form.also}" if form.also else ""), 4))
        keys = reading(rule, form)["context"]
        if keys:
            out.append("    context:\n")
            width = max(len(k) for k in keys)
            out += [_para(f"{k:<{width}}  ", v, 6) for k, v in keys.items()]
    out.append("\n  tests:\n" + "".join(f"    {t}\n" for t in rule.tests) if rule.tests else "")
    return "".join(out)
