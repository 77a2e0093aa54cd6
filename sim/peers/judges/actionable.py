"""What makes a real-engine finding one an engine developer can act on: its place in the engine, its check at
the step the engine's structures broke, and its place among the run's causes.

``Actionable`` rides beside ``sim.peers.judges.engine_judge.EngineJudge`` (which calls it at the start and end of each
step, on each finding, and when the engine raised):

* **frames** (``sim.peers.judges.frames``): every finding about a block (SGLang: page), radix node or request names the
  engine frame that last changed it, from the driver's ledger -- ``(block 47 was last freed by
  vllm/v1/core/block_pool.py:816 in free_blocks, called from ...)`` appended to its message, the frame's text in
  the violation's ``engine_frame``;
* **structure and amounts** (PEER-14, PEER-15; per engine in ``sim.peers.ENGINE.structure``): the engine's own
  free queue, tree, allocator and reference counts as its driver read them after the step (and as it left them
  when it raised), and how much each allocation and eviction took; plus, engine-neutral, no request's table
  holding more blocks than its computed tokens need (``exact_tables``: engines that allocate per step). A
  structure finding that says exactly what it said at the previous step is not filed again (the state has not
  moved; it would only be counted as its own consequence);
* **recovery** (``sim.peers.judges.peer_recovery``): every finding, the event stream's included, is filed as a root or
  as a consequence of an earlier root.

Rule titles and clauses of PEER-14 / PEER-15 come from the catalogue (``spec/rules/peer_structure.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kvsim.sim.peers.judges.frames import Frames, site
from kvsim.sim.peers.judges.peer_recovery import PeerRecovery, Record

if TYPE_CHECKING:
    from kvsim.sim.peers.judges.engine_judge import EngineJudge

__all__ = ["Actionable", "RULE_IDS", "rules"]

RULE_IDS = ("PEER-14", "PEER-15")

Structure = Callable[[dict, dict[int, int], int], list[tuple[str, str, dict, str]]]


def rules() -> tuple[dict[str, tuple[str, str]], dict[str, str]]:
    """(id -> (title, clause), id -> decisions) of the rules this module judges, from the catalogue."""
    import kvsim.spec.rules  # noqa: F401 -- registers the catalogue
    from kvsim.spec.catalogue import get
    out, dec = {}, {}
    for rid in RULE_IDS:
        r = get(rid)
        out[rid] = (r.title, r.clause)
        dec[rid] = r.decisions
    return out, dec


class Actionable:
    """Frames, structure checks and recovery for one engine run (see the module docstring)."""

    def __init__(self, block_size: int, structure: Structure | None = None, exact_tables: bool = False,
                 unit: str = "block") -> None:
        self.bs = block_size
        self.structure = structure
        self.exact_tables = exact_tables
        self.frames = Frames(unit)
        self.recovery = PeerRecovery()
        self.rules, self.decisions = rules()
        # blocks whose engine state was last seen disagreeing with the tables (PEER-14): the pool-wide counters
        # (PEER-9) that disagree while they do are explained by them, and name them
        self.off: dict[int, None] = {}
        self._said: set[tuple] = set()  # the structure findings of the last step, not filed again unchanged
        self._aspect: str | None = None

    # -- findings ----------------------------------------------------------------------------------------------
    def finding(self, rule: str, line: int, step: int, message: str, ctx: dict, aspect: str | None = None) -> str:
        """File an engine finding; returns its message with the frame sentence added where one is known.
        ``aspect``: which frame of its subject to name (``Frames.describe``; ``_file`` sets it for its own)."""
        aspect, self._aspect = aspect or self._aspect, None
        if rule == "PEER-9" and self.off and not any(k in ctx for k in ("block", "blocks", "node", "request")):
            ctx["blocks"] = list(self.off)[:8]  # a pool-wide count off while these blocks are: their consequence
        said = self.frames.describe(ctx, aspect)
        text = message
        place = ""
        frame = None
        if said is not None:
            sentence, frame = said
            text = f"{message} ({sentence})"
            place = site(frame)
        self.recovery.add(Record(rule, line, f"step {step}: {text}", ctx, step, frame=frame), place, base=message)
        return text

    def event_finding(self, rule: str, line: int, message: str, ctx: dict) -> None:
        """File a finding of the event stream (``EventChecker.on_finding``), naming the engine frame that built
        the event where the ledger knows it. (The checker keeps its own message; the report shows this one.)"""
        said = self.frames.published(ctx)
        text, frame = (f"{message} ({said[0]})", said[1]) if said is not None else (message, None)
        self.recovery.add(Record(rule, line, text, dict(ctx), None, op="kv", frame=frame), site(frame),
                          base=message)

    # -- the step ----------------------------------------------------------------------------------------------
    def begin(self, msg: dict) -> None:
        """Before the judge reads a step (or crash) message: the frames it reports."""
        self.frames.update(msg.get("ledger"))

    def end(self, judge: EngineJudge, msg: dict, line: int, crashed: bool = False) -> None:
        """After the judge read the step: the structure the driver reported, and the tables' amounts."""
        if self.structure is not None:
            found = self.structure(msg, judge.named(), self.bs)
            self._track(msg, found)
            now: set[tuple] = set()
            for rule, message, ctx, aspect in found:
                judge.premise[rule] += 1
                same = (rule, message)  # the same statement as at the last step: the state has not moved
                now.add(same)
                if same not in self._said:
                    self._file(judge, rule, line, message, ctx, aspect)
            self._said = now
            if msg.get("ledger") is not None or msg.get("walk") is not None:
                judge.premise["PEER-14"] += 1
        if self.exact_tables and not crashed:
            self._amounts(judge, line)

    def _track(self, msg: dict, found: list) -> None:
        """Keep ``off``: a block the step reported agreeing leaves it, one found disagreeing joins it (a walk
        reports every block: it replaces the set)."""
        off = self.off
        if (msg.get("walk") or {}).get("refs") is not None:
            off.clear()
        for row in (msg.get("ledger") or {}).get("blocks", ()):
            off.pop(row[0], None)
        for _rule, _m, ctx, _a in found:
            if ctx.get("check") in ("ref_cnt", "queued_referenced", "lost", "negative") and "block" in ctx:
                for b in ctx.get("blocks") or [ctx["block"]]:
                    off[b] = None

    def _amounts(self, judge: EngineJudge, line: int) -> None:
        """PEER-15, engine-neutral: a table the step changed holds no more blocks than its computed tokens need
        (vLLM's ``allocate_slots`` asks for cdiv(computed + new tokens, block_size); SGLang's rows grow by whole
        pages for the tokens scheduled)."""
        bs = self.bs
        for rid in judge.tables_changed():
            r = judge.reqs.get(rid)
            if r is None or not r.table:
                continue
            judge.premise["PEER-15"] += 1
            need = -(-r.computed // bs)
            if len(r.table) > need:
                self._file(judge, "PEER-15", line, f"{rid} holds {len(r.table)} blocks after the step; its "
                           f"{r.computed} computed tokens need {need}: an allocation took more than the tokens it "
                           "was for", {"request": rid, "block": r.table[-1], "holds": len(r.table), "needs": need,
                                       "check": "over_allocation"}, "request")

    def _file(self, judge: EngineJudge, rule: str, line: int, message: str, ctx: dict, aspect: str | None) -> None:
        """A finding of this module through the judge (counted and recovered like every other), naming the
        ``aspect`` of its subject's frames."""
        self._aspect = aspect
        judge.find(rule, line, message, **ctx)


def attach(judge: Any, act: Actionable) -> None:
    """Hook ``act`` into a judge's event checker (every KV-event finding goes through the recovery too)."""
    judge.events.on_finding = act.event_finding
