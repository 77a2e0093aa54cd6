"""What a scheduler's KV events show of a state group's Device publications (rules TS-ST-1, TS-ST-2).

With a state group the scheduler folds every group's insertions into one prefix event (seed 002 L193: "the scheduler
folds them into one externally visible prefix event") and announces a prefix page only while every group holds it
(EV-3's entry). A state group holds an entry for a page only where it published a state at the page's end, so a
``BlockStored`` for the page ending at L tokens shows a state published on Device at exactly L -- a publication that
may never reach a Host key or a later hit, the only places TS-ST-1 and TS-ST-2 saw it before. So, for each stored
block (its hash is TokenSpeed's FNV-1a chain, ``judges.block_hash.fnv1a64``, of the page's tokens under its parent):

* TS-ST-2 (L78 "decode itself records and publishes no state checkpoints"; L187 "Ordinary decode publishes
  history-cache Device entries but no state entries"): the only state written at that page's end is a decode's;
* TS-ST-1 (L76 "checkpoint provenance at that exact prefix boundary"): the only state written there is a prefill's
  at a length that is no multiple of prefix_granularity (a prompt's partial tail).

A page some prefill wrote an aligned state for is clean whoever else wrote one; a page no tracked forward wrote a state
for is not judged (counted ``unattributed``). The state's write is recorded by ``state_group.StateGroups``; this module
knows cachetrace/1 records and the event hash, never a scheduler's API.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvsim.sim.peers.cachetrace.causes import PARTIAL_TAIL
from kvsim.sim.peers.cachetrace.view import Findings, RequestView
from kvsim.sim.peers.judges.block_hash import fnv1a64
from kvsim.sim.trace import cachetrace as ct

__all__ = ["StatePublications"]


@dataclass(slots=True)
class _Writes:
    """The states written at one page end, by kind: the first writer of each (request, boundary, plan)."""
    aligned: tuple[str, int, int] | None = None
    unaligned: tuple[str, int, int] | None = None
    decode: tuple[str, int, int] | None = None


class StatePublications:
    def __init__(self, contract: Findings, p: int, group: str) -> None:
        self.c = contract
        self.p = p
        self.group = group
        self.chains: dict[str, list[int]] = {}   # request -> FNV-1a hashes of its whole pages so far
        self.writes: dict[int, _Writes] = {}     # page hash -> the states written at that page's end
        self.stats = {"stored_pages_judged": 0, "unattributed": 0}

    def _page_hash(self, r: RequestView, boundary: int) -> int:
        """The event hash of ``r``'s page ending at ``boundary`` tokens (whole or partial)."""
        p = self.p
        k = (boundary - 1) // p
        chain = self.chains.setdefault(r.rid, [])
        while len(chain) < k:
            i = len(chain)
            chain.append(fnv1a64(chain[-1] if chain else None, [int(t) for t in r.token_slice(i * p, (i + 1) * p)]))
        return fnv1a64(chain[k - 1] if k else None, [int(t) for t in r.token_slice(k * p, boundary)])

    def wrote(self, r: RequestView, boundary: int, prefill: bool) -> None:
        """A forward wrote ``r``'s state after ``boundary`` tokens."""
        if boundary <= 0:
            return
        w = self.writes.setdefault(self._page_hash(r, boundary), _Writes())
        who = (r.rid, boundary, self.c.current_plan)
        if not prefill:
            w.decode = w.decode or who
        elif boundary % self.p:
            w.unaligned = w.unaligned or who
        else:
            w.aligned = w.aligned or who

    def stored(self, events: list, line: int) -> bool:
        """One drained batch: each stored page must end where a prefill wrote an aligned state. Whether any stored
        page was judged."""
        judged = False
        for ev in events:
            if not isinstance(ev, ct.BlockStored):
                if isinstance(ev, ct.AllBlocksCleared):
                    self.writes.clear()
                continue
            for h in ev.block_hashes:
                w = self.writes.get(h) if isinstance(h, int) else None
                if w is None:
                    self.stats["unattributed"] += 1
                    continue
                judged = True
                self.stats["stored_pages_judged"] += 1
                if w.aligned is not None:
                    continue
                rid, at, plan = w.decode or w.unaligned  # type: ignore[misc]
                what = (f"the KV events announce {rid}'s prefix page ending at {at} tokens (hash {h}), so the "
                        f"{self.group} group published a state there on Device")
                tail = PARTIAL_TAIL if at % self.p else None
                about = (("hash", h), ("state", rid, at))  # the same page or state published again
                if w.decode is not None:
                    self.c.find("TS-ST-2", line, f"{what}: only {rid}'s decode wrote one (plan {plan}); decode "
                                "publishes no state", cause=tail, about=about, group=self.group, request=rid)
                else:
                    self.c.find("TS-ST-1", line, f"{what}: {rid}'s prefill wrote it after {at} tokens, not a multiple "
                                f"of prefix_granularity {self.p}: no prefix boundary", cause=tail, about=about,
                                group=self.group, request=rid)
        return judged

    def ended(self, rid: str) -> None:
        self.chains.pop(rid, None)

    def cleared(self) -> None:
        self.writes.clear()
