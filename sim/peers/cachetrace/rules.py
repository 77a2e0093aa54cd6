"""The cachetrace/1 contract's rules as its report lists them: each rule the contract judges itself (TS-TBL-1,
TS-POOL-4, TS-PFX-1, TS-PFX-3, PEER-1 ... PEER-4, PEER-9, PEER-10) and every part's own (the Host tier's TS-L2-*,
retraction's TS-ADM-2, the write-back policy's TS-L2-12, eviction's TS-ADM-4, the state groups' TS-ST-*, capacity's
TS-ADM-3 and TS-POOL-5, L3 reads' TS-L2-13/14), each with its title and seed clause as this judge states it (its
entry in the one catalogue, spec.rules), in the order the report lists them; and the record of one finding. The
contract counts its findings and premises by these ids.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvsim.sim.peers.cachetrace import capacity, eviction, host_tier, l3_reads, retraction, state_group, store_policy
from kvsim.spec.catalogue import stated

__all__ = ["RULES", "Finding"]

RULES: dict[str, tuple[str, str]] = {
    **stated(("TS-TBL-1", "TS-POOL-4", "TS-PFX-1", "TS-PFX-3", "PEER-1", "PEER-2", "PEER-3", "PEER-4", "PEER-9",
              "PEER-10"), "tokenspeed"),
    **host_tier.RULES,
    **retraction.RULES,
    **store_policy.RULES,
    **stated((eviction.RULE,), "tokenspeed"),
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
