"""Scenarios of the third seed-conformance reading (store contract, seed 000): per finding, a correct engine that
must pass (legal) and a buggy engine that must be caught with the right rule at the right event (violation).

- a DFlash draft with no full-attention layer is legal and has no Draft Full pool (L28-L30, L79; CAP-2, AS-5);
- a prefill chunk mapped ahead and never launched may be trimmed; only a speculative round's mappings may not
  (L195, L239-L241; UNIT-4);
- a truncate during an in-flight unit, read-only or written, breaks the frozen-unit clause (L248-L254; UNIT-1).

Each decision is recorded in the rule's entry (spec/rules); comments derive every observed value (P = 64,
M = 128 pages, entitlement ceil(min(S, prompt + budget)/P), pages named as a lowest-free allocator hands them
out). This module knows the kvtrace/1 vocabulary (tracebook) and the store contract; it never imports the model.
"""

from __future__ import annotations

from tracebook import Trace, config

M128 = {"tokens": 8192}
NO_FULL_LAYERS = {"kind": "dflash", "full_layers": 0}


# -- 1. a DFlash draft without full-attention layers -----------------------------------------------------------

def dflash_without_full_layers() -> Trace:
    t = Trace("dflash_without_full_layers",
              'DFlash whose draft config has no full-attention layer: a legal configuration that allocates no '
              'Draft Full pool, so Main is the only growing pool and verify rounds map and settle Main alone '
              '(store contract, seed 000 L30 "Draft Full, when the selected draft config contains full-attention '
              'layers", L79 "没有 full layer 的 draft 配置不分配此 pool")',
              config(kv_capacity=M128, backend=NO_FULL_LAYERS))
    t.activate("s0", 300, 100)  # entitlement ceil(400/64) = 7 Main pages; no other pool reserves anything
    t.pool("main", allocated=0, reserved=7, available=121)
    t.prefill("s0", 300)  # ceil(300/64) = 5 pages, ids 0..4
    t.advance("s0", 300, 308, commit=305)  # a verify of 8 positions inside page 4, 5 accepted
    t.row("s0", table=range(5), frontier=305)
    t.map("s0", 330)  # the next verify crosses into block 5: page 5 from the reservation
    t.step("s0", 305, 330, commit=320)  # 15 accepted: 320 still needs ceil(320/64) = 5 pages
    t.row("s0", table=range(6), frontier=320)
    t.truncate("s0", 320)  # the settle trims the rejected tail page 5 back into the reservation
    t.row("s0", table=[0, 1, 2, 3, 4, -1], frontier=320)
    t.pool("main", allocated=5, reserved=2, available=121)
    t.finish("s0")
    t.pool("main", allocated=0, reserved=0, available=128)
    return t


def dflash_without_full_layers_maps_draft_full() -> Trace:
    t = Trace("AS-5_dflash_without_full_layers_maps_draft_full",
              'DFlash with no full-attention draft layer: the engine maps Draft Full pages anyway, a pool the '
              'configuration never allocated and the bundle does not hold (store contract, seed 000 L79 "没有 full '
              'layer 的 draft 配置不分配此 pool"; L30)', config(kv_capacity=M128, backend=NO_FULL_LAYERS))
    t.activate("s0", 200, 56)  # ceil(256/64) = 4 Main pages
    t.prefill("s0", 200)  # pages 0..3
    t.map("s0", 200, "draft_full", expect="AS-5")
    t.row("s0", table=[0, 1, 2, 3], frontier=200)  # the rejected fact changed nothing
    t.step("s0", 200, 201)
    t.finish("s0")
    t.pool("main", allocated=0, reserved=0, available=128)
    return t


# -- 2. a prefill chunk mapped ahead, trimmed before it launches ----------------------------------------------

def prefill_chunk_trimmed_before_launch() -> Trace:
    t = Trace("prefill_chunk_trimmed_before_launch",
              'Chunked prefill under DFlash2: the engine maps its second 128-token chunk ahead, then replans the '
              'round and trims those mappings before any unit wrote them; an ordinary prefill chunk is membership '
              'beyond the committed frontier with no provisional frontier, so its trailing mappings may go and '
              'their leases return to the same reservation (store contract, seed 000 L195 "预先 materialize 一个 '
              'prefill chunk", L240 "Trailing mappings 可以解除", L241 forbids early trimming of a verify\'s '
              'mappings only; UNIT-4\'s entry)', config(kv_capacity=M128, backend={"kind": "dflash2"}))
    t.activate("s0", 300, 100)  # entitlement ceil(400/64) = 7 pages
    t.map("s0", 128)  # chunk 1: pages 0, 1
    t.step("s0", 0, 128)
    t.map("s0", 256)  # chunk 2 mapped ahead: pages 2, 3
    t.pool(allocated=4, reserved=3, available=121)
    t.truncate("s0", 128)  # replanned: blocks 2 and 3 unmapped, their leases back to s0's reservation
    t.row("s0", table=[0, 1, -1, -1], frontier=128)
    t.pool(allocated=2, reserved=5, available=121)
    t.advance("s0", 128, 192)  # a shorter chunk: page 2
    t.advance("s0", 192, 300)  # the rest of the prompt: pages 3, 4
    t.row("s0", table=range(5), frontier=300)
    t.pool(allocated=5, reserved=2, available=121)
    t.advance("s0", 300, 308, commit=304)  # the prompt is committed: this map is a verify's, then settled
    t.truncate("s0", 304)  # ceil(304/64) = 5 pages: nothing to unmap
    t.row("s0", table=range(5), frontier=304)
    t.finish("s0")
    t.pool(allocated=0, reserved=0, available=128)
    return t


# -- 3. a truncate during an in-flight read-only unit ----------------------------------------------------------

def truncate_beside_a_reader() -> Trace:
    t = Trace("truncate_beside_a_reader",
              'A read-only unit reads s0; meanwhile s1, which the unit does not select, is truncated, and s0 is '
              'truncated only after the reader completed: only the unit\'s selected rows are frozen (store '
              'contract, seed 000 L248-L251 "从 block-table publication 到 GPU unit 完成", "selected rows 的 table '
              'entries 不变化", L254 "truncate ... 发生在 GPU boundary")', config(kv_capacity=M128))
    t.activate("s0", 128, 64)  # ceil(192/64) = 3 pages
    t.prefill("s0", 128)  # pages 0, 1
    t.activate("s1", 200, 56)  # ceil(256/64) = 4 pages
    t.prefill("s1", 200)  # pages 2..5
    t.pool(allocated=6, reserved=1, available=121)
    t.launch("r1", [("s0", "main")])  # reads s0 [0, 128)
    t.truncate("s1", 130)  # s1 is no row of r1: ceil(130/64) = 3 pages kept, page 5 back to s1's reservation
    t.row("s1", table=[2, 3, 4, -1], frontier=130)
    t.pool(allocated=5, reserved=2, available=121)
    t.complete("r1", [])
    t.truncate("s0", 100)  # at the GPU boundary: still 2 pages, frontier 100
    t.row("s0", table=[0, 1], frontier=100)
    t.finish("s0")
    t.finish("s1")
    t.pool(allocated=0, reserved=0, available=128)
    return t


def truncate_while_read() -> Trace:
    t = Trace("UNIT-1_truncate_while_read",
              'The engine truncates s0 while a read-only unit that selected s0 is still in flight: the reader\'s '
              'membership and readable frontier are frozen until it completes (store contract, seed 000 L251 '
              '"logical memberships 和 readable frontiers 对该 unit 冻结", L254 "Mapping、frontier commit、truncate '
              '和 row recycling 都发生在 GPU boundary"): UNIT-1, as for map, grow, cow and finish',
              config(kv_capacity=M128))
    t.activate("s0", 128, 64)
    t.prefill("s0", 128)  # pages 0, 1
    t.launch("r1", [("s0", "main")])
    t.truncate("s0", 100, expect="UNIT-1")
    t.row("s0", table=[0, 1], frontier=128)  # the rejected fact changed nothing
    t.complete("r1", [])
    t.truncate("s0", 100)  # at the boundary it is legal
    t.row("s0", frontier=100)
    t.finish("s0")
    return t


def legal() -> list[Trace]:
    return [dflash_without_full_layers(), prefill_chunk_trimmed_before_launch(), truncate_beside_a_reader()]


def violations() -> list[Trace]:
    return [dflash_without_full_layers_maps_draft_full(), truncate_while_read()]
