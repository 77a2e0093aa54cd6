"""The cachetrace/1 contract's rules as data: each rule the contract judges itself (TS-TBL-1, TS-POOL-4, TS-PFX-1,
TS-PFX-3, PEER-1 ... PEER-4, PEER-9, PEER-10) and every part's own table (the Host tier's TS-L2-*, retraction's
TS-ADM-2, the write-back policy's TS-L2-12, eviction's TS-ADM-4, the state groups' TS-ST-*, capacity's TS-ADM-3 and
TS-POOL-5, L3 reads' TS-L2-13/14), each with its title and seed clause, in the order the report lists them; and
the record of one finding. The contract counts its findings and premises by these ids.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvsim.sim.peers.cachetrace import capacity, eviction, host_tier, l3_reads, retraction, state_group, store_policy

__all__ = ["RULES", "Finding"]

RULES: dict[str, tuple[str, str]] = {
    "TS-TBL-1": ("no two live tables alias a block except through the same cache key; no live table names "
                 "a freed block", "may replace one with the key's existing canonical block"),
    "TS-POOL-4": ("null block 0 never handed out, zeroed or named by a full-attention table; a full-attention "
                  "row holds -1 only as trailing padding and never loses a slot",
                  "a replicated group translates to itself minus the null block"),
    "TS-PFX-1": ("prefix hits only at multiples of prefix_granularity, short of the prompt's last token",
                 "two requests share cache only at multiples of this many tokens"),
    "TS-PFX-3": ("a replayable group claims no hit: it re-feeds its whole window, null holes below it, fresh "
                 "private pages from it",
                 "never claims a hit, so its table is empty at first admission and the scheduler materializes it "
                 "as a sparse private suffix from the replay window's first token"),
    "PEER-1": ("every block id lies within its group's pages (capacity never exceeded)",
               "its capacity belongs to the global empty-parent FIFO rather than any group"),
    "PEER-2": ("pages to zero and copy destinations are fresh: no other live table names them",
               "a load targets freshly acquired pages"),
    "PEER-3": ("every cache op is issued once and acknowledged exactly once",
               "neither side dedups or invents an acknowledgement"),
    "PEER-4": ("a prefix hit covers only pages some request computed in an earlier plan",
               "the FIFO data plane orders any hitter's forward after the writer"),
    "PEER-9": ("the scheduler's own pool counters agree with each other (active + available parents never exceed "
               "the usable pool, short only by parents pinned outside the tables, by none once drained; empty <= "
               "available; no snapshot block held with no request retracted)",
               "cache-only residency is the remainder total - empty - active"),
    "PEER-10": ("the scheduler completes every call on a legal sequence of answers, without an internal error",
                "A pinned op's sources stay cached and unevictable until the ACK, so its copy overlaps whatever "
                "the round does next"),
    **host_tier.RULES,
    **retraction.RULES,
    **store_policy.RULES,
    eviction.RULE: (eviction.TITLE, 'seed 002 L199: "first check whether existing local holes plus empty '
                       'parents fit with zero eviction; otherwise select eviction candidates until the plan fits"'),
    **state_group.RULES,
    **capacity.RULES,
    **l3_reads.RULES,
}


@dataclass
class Finding:
    """One finding: a root (``id``, numbered within its trace) or the consequence of root ``of``
    (``causes.Causes``)."""
    rule: str
    line: int
    plan: int
    message: str
    context: dict = field(default_factory=dict)
    id: int = 0
    of: int | None = None

    def as_dict(self, trace: str) -> dict:
        out = {"rule": self.rule, "trace": trace, "event": self.plan, "line": self.line, "op": "plan",
               "message": self.message, "context": self.context}
        if self.of is not None:
            out["of"] = self.of
        elif self.id:
            out["id"] = self.id
        return out
