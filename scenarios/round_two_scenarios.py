"""Scenarios of the second seed-conformance reading: per finding, a correct engine that must pass (legal) and a
buggy engine that must be caught with the right rule at the right event (violation).

Each finding's decision is recorded in the rule catalogue (spec/rules); the scenario's source names the
decision and the store contract's words. Comments derive every observed value. Page ids and Host offsets a
trace leaves out are the engine's choice (DESIGN §6).

This module knows the kvtrace/1 vocabulary (tracebook) and the store contract; it never imports the model.
"""

from __future__ import annotations

from tracebook import Trace, config

BF16_PAGE = 131072  # one bf16 page: 1024 B/token/head x 2 heads x 64 tokens
M128 = {"tokens": 8192}
S4000 = dict(max_context=4000, kv_capacity=M128)  # L = 63 pages; the last page has 32 spare columns
HOST = dict(kv_capacity=M128, host_arena_bytes=8 * BF16_PAGE)


def _checkpoint(t: Trace, seq: str, prompt: int, ckpt: str, pages: list | None = None, budget: int = 0) -> None:
    """`seq` prefills `prompt` tokens (into the engine's `pages`, when given) and is retained as `ckpt`."""
    t.activate(seq, prompt, budget)
    t.map(seq, prompt, result=None if pages is None else {"ok": True, "pages": pages})
    t.step(seq, 0, prompt)
    t.finish(seq, retain=ckpt)


# -- 1. the effective output budget (decision 18) -------------------------------------------------------------

def effective_budget_clamped() -> Trace:
    t = Trace("effective_budget_clamped",
              'The engine logs the raw max_tokens (1000) of a 3900-token prompt under S = 4000 and clamps it to the '
              'effective output budget S - prompt = 100: the activation is legal, the reservation covers prompt + '
              'effective budget = S (store contract "默认 entitlement 预留 prompt 加整个 effective output 预算", '
              '"不会扩大单 sequence 的 logical ceiling (S)"; decision 18)', config(**S4000))
    t.activate("s0", 3900, 1000)  # entitlement ceil(min(4000, 4900)/64) = 63 pages
    t.pool(allocated=0, reserved=63, available=65)
    t.prefill("s0", 3900)  # ceil(3900/64) = 61 pages
    t.advance("s0", 3900, 4000)  # 63 pages: the whole entitlement, frontier exactly S
    t.row("s0", frontier=4000)
    t.pool(allocated=63, reserved=0, available=65)
    t.finish("s0")
    t.pool(allocated=0, reserved=0, available=128)
    return t


def clamped_budget_write_beyond_s() -> Trace:
    t = Trace("AS-6_clamped_budget_write_beyond_s",
              'The engine admits a 3900-token prompt with raw max_tokens 1000 (legal: S only caps it) but then '
              'decodes by the raw budget and writes position 4000 of a sequence whose ceiling is S = 4000: the '
              'violation is reported at that write, the activation and every other event stand (store contract '
              '"不会扩大单 sequence 的 logical ceiling (S)"; decision 18)', config(**S4000))
    t.activate("s0", 3900, 1000)
    t.prefill("s0", 3900)
    t.advance("s0", 3900, 4000)
    t.launch(t.unit(), [("s0", "main", 4000, 4001)], expect="AS-6")
    t.row("s0", table=list(range(63)), frontier=4000)  # the rejected write changed nothing
    t.pool(allocated=63, reserved=0, available=65)
    t.finish("s0")
    return t


def legal() -> list[Trace]:
    return [effective_budget_clamped()]


def violations() -> list[Trace]:
    return [clamped_budget_write_beyond_s()]
