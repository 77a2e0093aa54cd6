"""The seed-002 obligation ledger (spec/obligations/seed002.toml) and `kvsim rules --obligations`.

The ledger is data a closing note quotes, so its consistency is tested here: every rule it names exists,
statuses and kinds are from the fixed sets, ids run in seed order, clauses no judge can check are covered
by a clause rule that cites their line (or say they are not), and every quote is the seed's own words when
the seed is beside the repository.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvsim.sim.cli import main
from kvsim.sim.cli.rules import known_rules
from kvsim.spec import obligations as ob
from kvsim.spec.catalogue import all_rules

ROOT = Path(__file__).resolve().parents[1]
SEED = next((p for d in (ROOT.parent, ROOT.parent.parent) for p in sorted((d / "shared" / "seeds").glob("002_*.txt"))),
            None)
LEDGER = ob.load()
BOX = set("─│┌┐└┘├┤┬┴┼━┃┏┓┗┛┡┩╇╈┣┫╋═║╔╗╚╝")


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "ledger.toml"
    p.write_text(text, encoding="utf-8")
    return p


def packaged_text() -> str:
    from importlib import resources
    return resources.files("kvsim.spec.obligations").joinpath(ob.DEFAULT).read_text(encoding="utf-8")


# -- the packaged ledger --------------------------------------------------------------------------------------

def test_ledger_is_packaged_and_covers_the_seed():
    assert LEDGER.seed == "002" and LEDGER.lines == 365 and len(LEDGER.obligations) > 300
    assert {o.kind for o in LEDGER.obligations} == set(ob.KINDS)
    assert [s.line for s in LEDGER.sections] == sorted(s.line for s in LEDGER.sections)


def test_ids_are_unique_and_in_seed_order():
    ids = [o.id for o in LEDGER.obligations]
    assert len(ids) == len(set(ids))
    keys = [(o.line, int(o.id.split(".")[1])) for o in LEDGER.obligations]
    assert keys == sorted(keys)
    assert all(o.id.startswith(f"L{o.line}.") for o in LEDGER.obligations)


def test_statuses_kinds_and_judges_are_from_the_fixed_sets():
    for o in LEDGER.obligations:
        assert o.kind in ob.KINDS and o.before in ob.STATUSES and o.now in ob.STATUSES, o.id
        assert o.judged_on in ob.JUDGED_ON, o.id
        assert (o.judged_on != "none") == (o.now in ("faithful", "weaker")), o.id


def test_every_named_rule_exists():
    known = known_rules()
    catalogue = {r.id for r in all_rules()}
    named = {r for o in LEDGER.obligations for r in o.rules}
    assert named <= set(known), sorted(named - set(known))
    assert all(r in catalogue for r in named if r.startswith("TS-")), "TS rules live in spec.catalogue"
    assert ob.check_rules(LEDGER, known) == []


def test_faithful_and_weaker_obligations_name_a_checking_rule():
    known = known_rules()
    for o in LEDGER.obligations:
        if o.now in ("faithful", "weaker"):
            assert any(known[r][0] in ("engine", "model") for r in o.rules), o.id
        if o.now in ("weaker", "contradicts"):
            assert o.note, o.id


def test_unjudgeable_clauses_are_not_checkable_under_a_clause_rule_citing_their_line():
    known = known_rules()
    uncovered = []
    for o in LEDGER.obligations:
        if o.kind in ob.JUDGEABLE:
            assert o.now != "not-checkable", f"{o.id}: a {o.kind} clause is judged or absent, not excused"
            continue
        assert o.now in ("not-checkable", "absent"), o.id
        if o.now == "absent":
            assert o.note.startswith("no not-checkable entry"), o.id
            uncovered.append(o.id)
            continue
        clause = [r for r in o.rules if known[r][0] == "none"]
        assert clause, f"{o.id} names no clause rule"
        assert any(o.line in ob.clause_lines(known[r][1]) for r in clause), f"{o.id}: no clause rule cites L{o.line}"
    assert uncovered == [o.id for o in LEDGER.with_status("absent") if o.kind not in ob.JUDGEABLE]


def test_sections_are_the_nearest_heading_above_each_line():
    for o in LEDGER.obligations:
        heading = max((s for s in LEDGER.sections if s.line <= o.line), key=lambda s: s.line)
        assert o.section == heading.title, o.id


def test_clauses_and_headings_are_the_seeds_words():
    if SEED is None:
        pytest.skip("seed 002 is not beside the repository")
    lines = SEED.read_text(encoding="utf-8").splitlines()
    assert ob.check_seed(LEDGER, lines) == []
    for o in LEDGER.obligations:
        assert o.clause in lines[o.line - 1], o.id


def test_counts_add_up_per_section_and_in_total():
    for when in ("before", "now"):
        per = LEDGER.counts(when)
        assert sum(sum(c.values()) for c in per.values()) == len(LEDGER.obligations)
        assert sum(LEDGER.totals(when).values()) == len(LEDGER.obligations)
        judged = LEDGER.totals(when, ob.JUDGEABLE)
        other = LEDGER.totals(when, tuple(k for k in ob.KINDS if k not in ob.JUDGEABLE))
        assert judged + other == LEDGER.totals(when)
    assert LEDGER.totals("before")["not-checkable"] == 0  # the baseline declared no seed-002 clause uncheckable


# -- the validator ----------------------------------------------------------------------------------------

ENTRY = """
[[obligation]]
id = "L13.1"
line = 13
section = "Logical world"
clause = "two requests share cache"
kind = "scheduler"
before = "faithful"
now = "faithful"
rules = ["TS-PFX-1"]
judged_on = "engine"
note = ""
"""
HEAD = 'seed = "002"\nbaseline = "abc"\nlines = 20\n[[section]]\nline = 7\ntitle = "Logical world"\n'


def test_a_minimal_ledger_loads(tmp_path):
    led = ob.load(write(tmp_path, HEAD + ENTRY))
    assert [o.id for o in led.obligations] == ["L13.1"] and led.counts("now") == {"Logical world": {"faithful": 1}}


@pytest.mark.parametrize("old, new, why", [
    ('now = "faithful"', 'now = "fine"', "now 'fine' is not one of"),
    ('kind = "scheduler"', 'kind = "gpu"', "kind 'gpu' is not one of"),
    ('id = "L13.1"', 'id = "L14.1"', "id must be L13.<k>"),
    ('section = "Logical world"', 'section = "Elsewhere"', "sits under 'Logical world'"),
    ('rules = ["TS-PFX-1"]', "rules = []", "names the rules that check it"),
    ('judged_on = "engine"', 'judged_on = "none"', "judged on the engine or the model"),
    ('kind = "scheduler"', 'kind = "kernel"', "a kernel clause is not-checkable"),
    ('line = 13', 'line = 99', "must be a seed line in 1..20"),
    ('note = ""', '', "fields must be exactly"),
])
def test_a_malformed_entry_is_refused_with_its_reason(tmp_path, old, new, why):
    with pytest.raises(ob.ObligationError, match=why.replace("(", r"\(").replace(".", r"\.")):
        ob.load(write(tmp_path, HEAD + ENTRY.replace(old, new)))


def test_ids_out_of_order_are_refused(tmp_path):
    second = ENTRY.replace('"L13.1"', '"L13.3"')
    with pytest.raises(ob.ObligationError, match="seed order"):
        ob.load(write(tmp_path, HEAD + ENTRY + second))


def test_an_unknown_rule_and_an_uncited_line_are_reported(tmp_path):
    led = ob.load(write(tmp_path, HEAD + ENTRY.replace("TS-PFX-1", "TS-PFX-99")))
    assert ob.check_rules(led, known_rules()) == ["L13.1: names TS-PFX-99, which no catalogue defines"]
    kernel = (ENTRY.replace('kind = "scheduler"', 'kind = "kernel"')
              .replace('now = "faithful"', 'now = "not-checkable"')
              .replace('"TS-PFX-1"', '"TS-NC-12"').replace('judged_on = "engine"', 'judged_on = "none"'))
    led = ob.load(write(tmp_path, HEAD + kernel))
    assert ob.check_rules(led, known_rules()) == ["L13.1: no named clause rule (TS-NC-12) cites line 13"]


def test_a_quote_not_in_the_seed_is_reported(tmp_path):
    led = ob.load(write(tmp_path, HEAD + ENTRY))
    lines = [""] * 20
    lines[6] = "Logical world"
    lines[12] = "two requests share cache only at multiples"
    assert ob.check_seed(led, lines) == []
    lines[12] = "two requests share nothing"
    assert ob.check_seed(led, lines) == ["L13.1: 'two requests share cache' is not in seed line 13"]


def test_the_packaged_file_round_trips_through_the_validator(tmp_path):
    assert ob.load(write(tmp_path, packaged_text())) == LEDGER


# -- the command line -------------------------------------------------------------------------------------

def test_cli_prints_the_counts_per_section_plain_when_piped(capsys):
    assert main(["rules", "--obligations"]) == 0
    out = capsys.readouterr().out
    assert not BOX & set(out)
    lines = out.splitlines()
    assert lines[0].startswith(f"seed 002 obligations ({len(LEDGER.obligations)}) by section: before (")
    assert lines[1].split() == ["line", "section", *ob.STATUSES]
    total = next(ln for ln in lines if ln.split()[:2] == ["all", "sections"])
    tb, tn = LEDGER.totals("before"), LEDGER.totals("now")
    assert total.split()[2:] == [w for st in ob.STATUSES for w in (str(tb[st]), "->", str(tn[st]))]
    for s, c in LEDGER.counts("now").items():
        row = next(ln for ln in lines if f" {s} " in ln or ln.endswith(s))
        assert row.split()[-15:][2::3] == [str(c[st]) for st in ob.STATUSES], s
    assert any(ln.split()[:3] == ["scheduler", "and", "model"] for ln in lines)


def test_cli_output_is_deterministic(capsys):
    main(["rules", "--obligations"])
    first = capsys.readouterr().out
    main(["rules", "--obligations"])
    assert capsys.readouterr().out == first


def test_cli_lists_one_status(capsys):
    assert main(["rules", "--obligations", "--list", "absent", "--kind", "scheduler"]) == 0
    out = capsys.readouterr().out.splitlines()
    want = [o for o in LEDGER.with_status("absent") if o.kind == "scheduler"]
    assert len(out) == len(want) > 0
    assert all(ln.startswith(f"{o.id} scheduler: {o.clause}") for ln, o in zip(out, want, strict=True))


def test_cli_json(capsys):
    assert main(["rules", "--obligations", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["obligations"] == len(LEDGER.obligations) and doc["baseline"] == LEDGER.baseline
    assert doc["total"]["now"] == {st: LEDGER.totals("now")[st] for st in ob.STATUSES}
    assert sum(doc["faithful_now_judged_on"].values()) == LEDGER.totals("now")["faithful"]
    assert main(["rules", "--obligations", "--list", "weaker", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in rows] == [o.id for o in LEDGER.with_status("weaker")]


@pytest.mark.parametrize("argv, where", [
    (["rules", "--list", "absent"], "kvsim rules: --list: only with --obligations"),
    (["rules", "--kind", "scheduler"], "kvsim rules: --kind: only with --obligations"),
    (["rules", "--obligations", "--list", "fine"], "--list"),
])
def test_cli_bad_flags_exit_2_on_one_line(argv, where, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert where in err and len(err.strip().splitlines()) == 1
