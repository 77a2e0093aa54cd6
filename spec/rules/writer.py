"""WR-*: one writer per page, shared pages immutable, protected columns, token-exact fork."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvsim.kvmodel.store import activation
from kvsim.kvmodel.store.config import PAGE_SIZE
from kvsim.spec.catalogue import state_rule, transition_rule

if TYPE_CHECKING:

    from kvsim.kvmodel.store.pages import LogicalKVPage
    from kvsim.kvmodel.store.store import KVStore


@state_rule("WR-1", "At most one writer per logical page, and only its sole active holder",
            'store contract: "任一 logical page 同时至多一个 writer"', scope="page", evidence="model",
            decisions="Guards the model: the writer derives from the holders (the sole active holder writes), so a "
                      "trace's write into a page with other holders is WR-2 and one into another space's page "
                      "cannot be named by a trace; only model state can fire WR-1. The writer is explicit state; it "
                      "must be the page's only holder and active. A launch "
                      "writing a page it is not the writer of is a violation (kvmodel.store.units).",
            tests=("tests/rules/test_wr.py::test_wr1_keeps_one_writer_per_page",
                   "tests/rules/test_wr.py::test_wr1_private_again_after_release_is_writable",
                   "tests/rules/test_wr.py::test_wr1_fires_when_a_page_has_a_foreign_writer"),
            context=("pool", "page", "block"))
def wr_1(st: KVStore, page: LogicalKVPage, full: bool) -> str | bool | None:
    w = page.writer
    if not page.alive or w is None:
        return None
    if len(page.holders) != 1 or page.holders[0] is not w or not w.active:
        return f"page {page.handle} has writer {w.owner!r} but holders {[h.owner for h in page.holders]}"
    return True


@state_rule("WR-2", "Shared pages are immutable; a non-aligned shared tail is copied (COW) before writing",
            'store contract: "存在多个 address-space references 的 full page immutable； 需要写入 shared partial tail '
            '时必须先 COW"',
            scope="page",
            decisions="A launch writing a block whose page has several references is the violation; `cow` "
                      "(a kvtrace/1 extension) replaces the member with a private copy first.",
            tests=("tests/rules/test_wr.py::test_wr2_keeps_shared_pages_immutable_cow_first",
                   "tests/rules/test_wr.py::test_wr2_fires_when_a_shared_page_gets_a_writer",
                   "tests/rules/test_through_traces.py::test_engine_rule_fires_from_a_trace"),
            context=("pool", "page", "block"))
def wr_2(st: KVStore, page: LogicalKVPage, full: bool) -> str | bool | None:
    if not page.alive or len(page.holders) <= 1:
        return None
    if page.writer is not None:
        return f"shared page {page.handle} ({page.refs} references) has writer {page.writer.owner!r}"
    return True


@state_rule("WR-3", "Checkpoint-protected columns are never overwritten",
            'store contract: "Published checkpoint所需coverage不可被writer覆盖"', scope="page",
            evidence="model", subsumed_by=("WR-2", "UNIT-3"),
            decisions="Subsumed from traces (reported as such, never as exercised): protected columns come only from "
                      "retained checkpoints (an active space protects nothing, and only active spaces write or "
                      "truncate), so a page with protected columns that a writer reaches is also held by that "
                      "checkpoint: it has two references and no writer, and the write is WR-2; a write below the "
                      "writer's own frontier is UNIT-3; truncate applies to active spaces only. The launch still "
                      "names WR-3 beside WR-2 when the written columns are protected; the state form guards the "
                      "model (protected columns are committed content). Protected columns are derived from the "
                      "holders' checkpoint-protected frontiers (a "
                      "retained checkpoint protects its committed frontier); they must be committed content. A "
                      "write or truncate below them is the transition violation.",
            tests=("tests/rules/test_wr.py::test_wr3_keeps_protected_columns",
                   "tests/rules/test_wr.py::test_wr3_fires_when_protected_columns_are_lost"),
            context=("seq", "pool", "block", "protected", "page"))
def wr_3(st: KVStore, page: LogicalKVPage, full: bool) -> str | bool | None:
    if not page.alive:
        return None
    holders = page.holders
    if len(holders) == 1 and not holders[0].protected:
        return None  # one holder protecting nothing (page.protected == 0, decided without the scan)
    if page.committed >= PAGE_SIZE:  # protected columns never exceed P: only whether any exist is open
        base = page.block * PAGE_SIZE
        for h in holders:
            if h.protected > base:
                return True
        return None
    prot = page.protected
    if prot <= 0:
        return None
    if prot > page.committed:
        return f"page {page.handle} protects {prot} columns but has only {page.committed} committed"
    return True


transition_rule("WR-4", "Fork is token-exact: full pages shared, partial tail copied, frontier not rounded",
                'store contract: "checkpoint frontier (F=1000)" — 15 shared full pages + a 40-column private tail',
                activation.plan_pool,
                decisions="An engine result mapping floor(F/P) pages for a fork at a non-aligned F (tail dropped) "
                          "is the violation; the tail copy keeps the source's content keys.",
                tests=("tests/rules/test_wr.py::test_wr4_keeps_token_exact_fork_from_an_engine_result",
                       "tests/rules/test_wr.py::test_wr4_fires_on_a_fork_rounded_to_960",
                       "tests/rules/test_through_traces.py::test_engine_rule_fires_from_a_trace"),
                context=("seq", "pool", "frontier"))
