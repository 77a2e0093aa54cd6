"""Judging a state group whose states travel by copy, not by block position: SGLang's Mamba component.

SGLang keeps one running state slot per request (``HybridReqToTokenPool``), copies a cached state into it on a
prefix hit (copy-on-write), donates copies of it to the radix tree at checkpoints (``no_buffer``) or tracks states
into ping-pong slots the tree takes over (``extra_buffer``). No block position says which state a slot holds, so
its driver (``sim/peers/sglang/hybrid.py``, playing the model) writes every state as a *tag* into the state tensor
itself and reports, per step (``groups.states`` and ``groups.published``):

* ``writes`` ``[tag, request, t]``: a forward wrote the state after ``t`` tokens of that request's sequence;
* ``reads`` ``[request, c0, tag]``: a forward starting at ``c0`` tokens read that tag (0: the zeroed state);
* ``published`` ``[tag, request, L]``: a checkpoint of that request handed the tree the state in that tag for the
  node ending at ``L`` tokens (``UnifiedRadixCache.insert`` with a Mamba value it kept).

Whatever SGLang copies, the tag goes with it, so this checker needs no model of SGLang's slots. It keeps tag ->
(t, identity, step written), the identity being the group judge's state key (the unit key below t and the tokens
past it), and checks (catalogue ``spec/rules/peer_hybrid.py``):

* PEER-22 (seed 002 L76, L82): a forward starting at ``c0 > 0`` reads the state after exactly ``c0`` tokens of its
  own sequence, written by a forward of an earlier step; one starting at 0 reads the zeroed state;
* PEER-24 (L76 "Computed state publication requires ... checkpoint provenance at that exact prefix boundary", L74
  "publishing an unwritten intermediate checkpoint would break position identity"): a state the tree takes for a
  node ending at ``L`` tokens is the state after exactly ``L`` tokens of that prefix.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvsim.sim.peers.judges.engine_judge import EngineJudge

__all__ = ["StateTags"]


class StateTags:
    """The tag ledger of one run's state group ``group`` (its label for messages)."""

    def __init__(self, group: int, label: str) -> None:
        self.group = group
        self.label = label
        self.tags: dict[int, tuple[int, int, int, str]] = {}   # tag -> (t, identity, step written, writer)

    def step(self, judge: EngineJudge, line: int, step: int, sec: dict, state: Any) -> None:
        """One step's reads (judged against the states earlier steps wrote: a state this step writes is not there
        when its forward starts), then its writes and publications.
        ``state(rid, t)`` is the group judge's identity of the state after ``t`` tokens of request ``rid``."""
        st = sec.get("states") or {}
        g, label = self.group, self.label
        for rid, c0, tag in st.get("reads", ()):
            judge.premise["PEER-22"] += 1
            if c0 == 0:
                if tag:
                    t, _ident, _s, who = self.tags.get(tag, (-1, 0, 0, "?"))
                    judge.find("PEER-22", line, f"{rid} starts its first forward from a state group {g} ({label}) "
                               f"never zeroed: it reads the state after {t} tokens of {who}", request=rid, group=g,
                               computed=0, tag=tag)
                continue
            want = state(rid, c0)
            have = self.tags.get(tag)
            if have is None:
                why = "the zeroed state" if not tag else "a state no forward wrote"
                judge.find("PEER-22", line, f"{rid} resumes its group {g} ({label}) state after {c0} tokens but reads "
                           f"{why}", request=rid, group=g, computed=c0, tag=tag)
            elif have[0] != c0 or have[1] != want:
                judge.find("PEER-22", line, f"{rid} resumes its group {g} ({label}) state after {c0} tokens but reads "
                           f"the state after {have[0]} tokens of " + ("its own sequence" if have[3] == rid else
                                                                      f"{have[3]}'s") +
                           ("" if have[0] != c0 else " (another prefix)"), request=rid, group=g, computed=c0, tag=tag,
                           state_after=have[0], writer=have[3])
        for tag, rid, t in st.get("writes", ()):
            self.tags[tag] = (t, state(rid, t), step, rid)
        for tag, rid, length in sec.get("published", ()):
            judge.premise["PEER-24"] += 1
            have = self.tags.get(tag)
            want = state(rid, length)
            if have is None:
                judge.find("PEER-24", line, f"{rid}'s checkpoint hands the tree a group {g} ({label}) state for the "
                           f"node ending at {length} tokens that no forward wrote", request=rid, group=g,
                           length=length, tag=tag)
            elif have[0] != length or have[1] != want:
                judge.find("PEER-24", line, f"{rid}'s checkpoint hands the tree the group {g} ({label}) state after "
                           f"{have[0]} tokens for the node ending at {length} tokens" +
                           ("" if have[0] != length else " of another prefix"), request=rid, group=g, length=length,
                           tag=tag, state_after=have[0])
