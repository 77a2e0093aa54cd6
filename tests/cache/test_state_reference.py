"""TS-ST-6..8 and TS-GEO-2: the NumPy references of the state-checkpoint kernels and of the slot mapping. Each keeps on
the reference (or a correct second spelling) and fires on a crafted wrong implementation; the slot mapping runs on
the real TokenSpeed wheel's block tables recorded in sim/peers/samples/findings/ (holes and padding included)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kvsim.kvmodel.cache import slot_mapping as sm
from kvsim.kvmodel.cache import state_scan as ss

FINDINGS = Path(__file__).resolve().parents[2] / "sim" / "peers" / "samples" / "findings"
RNG = np.random.default_rng(7)
XS = [RNG.standard_normal(n) for n in (40, 17, 33, 64)]
CK = [32, None, 16, 48]  # per request, the checkpoint offset inside its extent (None: no internal checkpoint)


# -- TS-ST-6: the body/tail split ------------------------------------------------------------------------------------

def packed_split(xs, ckpt):
    """A second spelling: one packed body scan over every row, then a packed tail scan of the crossing rows, outputs
    scattered back through an inverse map (as the compact path does)."""
    outs = [np.zeros(len(x)) for x in xs]
    aligned, finals = [None] * len(xs), [0.0] * len(xs)
    body_end = [c if c is not None else len(x) for x, c in zip(xs, ckpt, strict=True)]
    for i, x in enumerate(xs):
        y, h = ss.scan(ss.pack(x, np.arange(body_end[i])))
        outs[i][:body_end[i]] = y
        if ckpt[i] is None:
            finals[i] = h
        else:
            aligned[i] = h
    for i, x in enumerate(xs):
        if ckpt[i] is not None:
            y, finals[i] = ss.scan(x[ckpt[i]:], aligned[i])
            outs[i][ckpt[i]:] = ss.gather(y, np.arange(len(x) - ckpt[i]))
    return outs, aligned, finals


@pytest.mark.rule("TS-ST-6", "keeps")
def test_split_scan_reference_and_a_packed_spelling_agree_with_the_ordinary_scan():
    assert ss.check_split_scan(ss.split_scan, XS, CK) is None
    assert ss.check_split_scan(packed_split, XS, CK) is None
    idx = np.array([3, -1, 0, -5, 7])
    assert ss.check_pack_gather(ss.pack, ss.gather, XS[0], idx) is None
    assert list(ss.pack(XS[0], idx)[[1, 3]]) == [0.0, 0.0]


@pytest.mark.rule("TS-ST-6", "fires")
def test_a_tail_from_zero_a_token_run_twice_or_wrapping_negative_indices_fires():
    def tail_from_zero(xs, ckpt):
        outs, aligned, finals = [], [], []
        for x, c in zip(xs, ckpt, strict=True):
            yb, hb = ss.scan(x[:c] if c else x)
            yt, ht = ss.scan(x[c:]) if c else (np.zeros(0), hb)  # not initialized from the body's final state
            outs.append(np.concatenate([yb, yt]))
            aligned.append(hb if c else None)
            finals.append(ht)
        return outs, aligned, finals

    def overlap(xs, ckpt):  # the tail re-runs the checkpoint's token
        outs, aligned, finals = ss.split_scan(xs, ckpt)
        for i, (x, c) in enumerate(zip(xs, ckpt, strict=True)):
            if c:
                _, hb = ss.scan(x[:c])
                y, finals[i] = ss.scan(x[c - 1:], hb)
                outs[i] = np.concatenate([outs[i][:c], y[1:]])
        return outs, aligned, finals

    assert "outputs differ" in ss.check_split_scan(tail_from_zero, XS, CK)
    assert "outputs differ" in ss.check_split_scan(overlap, XS, CK)  # the checkpoint token evaluated twice

    def aligned_lost(xs, ckpt):  # the body's state at the boundary is overwritten by the final one
        outs, aligned, finals = ss.split_scan(xs, ckpt)
        return outs, [f if a is not None else None for a, f in zip(aligned, finals, strict=True)], finals

    assert "aligned state at 32 is not retained" in ss.check_split_scan(aligned_lost, XS, CK)
    idx = np.array([3, -1, 0])
    msg = ss.check_pack_gather(lambda x, i: x[i], ss.gather, XS[0], idx)  # x[-1] is the last token, not padding
    assert msg is not None and msg.startswith("pack: entry 1 (index -1)")


# -- TS-ST-6: the merged capacity graph's inactive slots (seed L86) ----------------------------------------------------

def _capacity_with(writer):
    """The capacity path with its continuation-state writer replaced: ``writer(finals, out_dest, tail_final)``."""
    def impl(xs, ckpt):
        n = len(xs)
        outs, written, _ = ss.capacity_scan(xs, ckpt)
        body = np.array([ss.scan(x if c is None else x[:c])[1] for x, c in zip(xs, ckpt, strict=True)])
        tail = np.array([ss.scan(x[-1:] if c is None else x[c:], body[i])[1]
                         for i, (x, c) in enumerate(zip(xs, ckpt, strict=True))])
        out_dest = np.array([i if c is not None else -1 for i, c in enumerate(ckpt)])
        return outs, written, list(writer(body.copy(), out_dest, tail))[:n]
    return impl


@pytest.mark.rule("TS-ST-6", "keeps")
def test_inactive_capacity_slots_leave_the_bodys_final_state():
    """Every request gets a tail slot; the one without an internal checkpoint (request 1) scans a dummy and the
    masked writer drops it: the continuation state is the ordinary scan's for all four, a checkpoint only for
    the three that have one."""
    assert ss.check_capacity_scan(ss.capacity_scan, XS, CK) is None
    outs, written, finals = ss.capacity_scan(XS, CK)
    assert sorted(written) == [0, 2, 3] and np.isclose(finals[1], ss.scan(XS[1])[1])
    assert ss.check_capacity_scan(_capacity_with(ss.write_masked), XS, CK) is None
    assert ss.check_capacity_scan(ss.capacity_scan, XS, [None] * 4) is None  # a batch without any checkpoint


@pytest.mark.rule("TS-ST-6", "fires")
def test_a_dummy_scan_overwriting_the_final_state_fires():
    def unmasked(buf, dest, values):  # buf[dest] = values: dest -1 wraps to the last row
        buf[dest] = values
        return buf

    def every_row(buf, dest, values):  # the inactive slot written back to its own row
        return values

    why = ss.check_capacity_scan(_capacity_with(unmasked), XS, [None, 32, 16, None])  # row 3 takes a dummy
    assert why is not None and why.startswith("request 3: the inactive slot's dummy scan overwrote")
    why = ss.check_capacity_scan(_capacity_with(every_row), XS, CK)
    assert why == (f"request 1: the inactive slot's dummy scan overwrote the body's final state "
                   f"({ss.scan(XS[1][-1:], ss.scan(XS[1])[1])[1]} != {ss.scan(XS[1])[1]})")

    def ghost_checkpoint(xs, ckpt):
        outs, written, finals = ss.capacity_scan(xs, ckpt)
        return outs, {**written, 1: 0.0}, finals
    assert "no internal checkpoint, yet its inactive slot wrote" in ss.check_capacity_scan(ghost_checkpoint, XS, CK)


# -- TS-ST-7: one checkpoint per request --------------------------------------------------------------------------

CASES = [(0, 100, 16), (80, 100, 16), (64, 128, 16), (96, 100, 16), (0, 15, 16), (512, 640, 64), (33, 47, 16)]


@pytest.mark.rule("TS-ST-7", "keeps")
def test_the_last_aligned_checkpoint_alone_is_selected():
    assert ss.check_selection(lambda b, a, p: [c] if (c := ss.select_checkpoint(b, a, p)) else [], CASES) is None
    assert [ss.select_checkpoint(*c) for c in CASES] == [96, 96, None, None, None, None, None]  # 128, 640: the end


@pytest.mark.rule("TS-ST-7", "fires")
def test_every_aligned_boundary_or_the_extent_end_selected_fires():
    every = ss.check_selection(lambda b, a, p: [c for c in range((b // p + 1) * p, a, p)], CASES)
    assert every is not None and "at most one" in every
    end = ss.check_selection(lambda b, a, p: [a // p * p] if b < a // p * p <= a else [], [(64, 128, 16)])
    assert end is not None and "checkpoint 128" in end


# -- TS-ST-8: snapshot slot at the prefix boundary ------------------------------------------------------------------

SLOTS = [(0, 100, 64, 16), (0, 100, 64, 64), (64, 200, 64, 32), (0, 50, 64, 16), (100, 130, 64, 16)]


@pytest.mark.rule("TS-ST-8", "keeps")
def test_snapshot_slot_selected_at_p_and_addressed_by_the_block_span():
    assert ss.check_snapshot_slots(ss.snapshot_slot, SLOTS) is None
    assert [ss.snapshot_slot(*c) for c in SLOTS] == [3, 0, 5, None, 7]


@pytest.mark.rule("TS-ST-8", "fires")
def test_snapshot_selected_by_the_state_block_span_fires():
    def by_span(before, after, p, bg):  # "Selecting the snapshot by a smaller state-group span"
        c = after // bg * bg
        return (c - 1) // bg if before < c < after else None
    msg = ss.check_snapshot_slots(by_span, SLOTS)
    assert msg is not None and msg.startswith("[0, 100) P=64 block_granularity=16: slot 5")


# -- TS-GEO-2: slot arithmetic on the wheel's real block tables ------------------------------------------------------

def wheel_rows(name):
    """Every block-table row the released wheel recorded in a findings sample, per group, and the group spans."""
    lines = (FINDINGS / name).read_text().splitlines()
    spans = {g["id"]: g["block_granularity"] for g in json.loads(lines[0])["config"]["groups"]}
    rows: dict[str, list[list[int]]] = {g: [] for g in spans}
    for line in lines[1:]:
        rec = json.loads(line)
        for g, rs in rec.get("tables", {}).items():
            rows[g] += list(rs.values())
    return rows, spans


@pytest.mark.rule("TS-GEO-2", "keeps")
def test_wheel_tables_resolve_page_size_invariantly_with_holes_failing_closed():
    rows, spans = wheel_rows("swa_orphans.cachetrace.jsonl")  # full and sliding rows; the sliding ones hold holes
    assert any(0 in r for r in rows["swa"]) and sum(len(rs) for rs in rows.values()) >= 6
    for g, rs in rows.items():
        assert sm.check_mapping(sm.token_slots, rs, spans[g], kernels=(1, 16, 32, 64)) is None
    row = rows["swa"][-1]
    slots = sm.token_slots(row, np.arange(len(row) * 64), 64)
    hole = row.index(0)
    assert (slots[hole * 64:(hole + 1) * 64] == -1).all()
    assert (sm.token_slots(row, np.arange(len(row) * 64), 64, dummy=True)[hole * 64] == 0)


@pytest.mark.rule("TS-GEO-2", "fires")
def test_an_unmasked_or_page_local_mapping_fires_on_the_wheel_tables():
    rows, spans = wheel_rows("swa_orphans.cachetrace.jsonl")

    def unmasked(row, pos, span):  # no sentinel: a hole resolves into the null block, padding to negative slots
        r = np.asarray(list(row) + [-1] * 2)
        return np.where(pos >= 0, r[np.clip(pos // span, 0, len(r) - 1)] * span + pos % span, -1)

    def block_offset(row, pos, span):  # forgets the in-block offset
        got = sm.token_slots(row, pos, span)
        return np.where(got >= 0, got - pos % span, got)

    msg = sm.check_mapping(unmasked, rows["swa"], spans["swa"])
    assert msg is not None and "the reference to -1" in msg
    assert sm.check_mapping(block_offset, rows["full"], spans["full"]) is not None
    with pytest.raises(ValueError, match="does not divide"):
        sm.expand(rows["full"][0], 64, 48)


def test_every_reference_rule_is_tested_both_ways():
    ids = {"TS-ST-6", "TS-ST-7", "TS-ST-8", "TS-GEO-2"}
    marks = {(m.args[0], m.args[1]) for f in globals().values() if callable(f)
             for m in getattr(f, "pytestmark", []) if m.name == "rule"}
    assert {(rid, k) for rid in ids for k in ("keeps", "fires")} <= marks
