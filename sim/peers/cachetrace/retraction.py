"""TS-ADM-2: each retraction adds admission headroom to its victim's next admission, judged from plans.

Cache concepts L254: "what stops an overcommitted workload from repeatedly rebuilding, briefly decoding and
re-retracting the same prompt is the escalating admission headroom each retraction adds to the victim's next
admission". L252: "Aggregate prompt and decode growth must still fit the recipe's reported token capacity."

What a plan shows of an admission is the request's first full-history table row after it: the pages secured
for it. Beyond the tokens the request holds (prompt plus the tokens its results produced), that row secures
``len(row) * block_granularity - tokens`` tokens of headroom, rounded up to whole blocks and including any
constant reserve (the decode slot, overlap protection). So the judge compares what it can see:

* a readmission -- the first row after a retraction snapshot -- must secure strictly more than the request's
  previous admission did, or already cover the rest of its generation: ``max_new_tokens`` minus what it
  produced, less one (the last token a request produces is never fed back, so it takes no slot);
* a fresh admission is the baseline and is not judged (the seed states no first-admission headroom);
* a growth row after an admission (decode spending the headroom) is not an admission.

Rounding cannot make an escalation of one block or more look flat, so a scheduler that escalates by at least
one block is never flagged; an escalation of less than a block may be invisible, and then the rule fires
only if the secured space did not grow at all. The documented step of TokenSpeed's scheduler
(``min(RemainingNewTokens(), 4096 * (1 + retraction_count))``, scheduler.md §4) is not required: the seed
states escalation, not its size.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvsim.spec.catalogue import stated

__all__ = ["RULES", "Headroom"]

RULES: dict[str, tuple[str, str]] = stated(("TS-ADM-2",), "tokenspeed")  # from the catalogue


@dataclass
class _Victim:
    max_new: int
    retractions: int = 0
    secured: int | None = None       # headroom tokens its latest admission secured (None: not admitted yet)
    awaiting: bool = True            # the next full-history row is an admission
    history: list[int] = field(default_factory=list)  # secured headroom per admission, in order


class Headroom:
    """Per request: retractions seen (``SnapshotOp``s naming it) and the headroom each admission secured."""

    def __init__(self) -> None:
        self.reqs: dict[str, _Victim] = {}
        # readmissions judged; of them, those that secured more than the previous admission (escalated) and
        # those that covered the rest of the generation (covered; a readmission may be both)
        self.stats = {"retractions": 0, "readmissions": 0, "escalated": 0, "covered": 0, "max_retractions": 0}

    def submit(self, rid: str, max_new_tokens: int) -> None:
        self.reqs[rid] = _Victim(max_new_tokens)

    def retract(self, rid: str) -> None:
        v = self.reqs.get(rid)
        if v is None:
            return
        v.retractions += 1
        v.awaiting = True
        self.stats["retractions"] += 1
        self.stats["max_retractions"] = max(self.stats["max_retractions"], v.retractions)

    def end(self, rid: str) -> None:
        self.reqs.pop(rid, None)

    def admit(self, rid: str, row_tokens: int, tokens: int, generated: int) -> str | None:
        """The first full-history row after an admission: ``row_tokens`` slots' worth of tokens for a request
        holding ``tokens`` tokens, ``generated`` of them produced. Returns the violation message of a
        readmission that did not escalate, else None (also when this row is no admission)."""
        v = self.reqs.get(rid)
        if v is None or not v.awaiting:
            return None
        v.awaiting = False
        secured = row_tokens - tokens
        remaining = max(v.max_new - generated - 1, 0)  # slots the rest of its generation needs
        previous = v.secured
        v.secured = secured
        v.history.append(secured)
        if v.retractions == 0 or previous is None:
            return None
        self.stats["readmissions"] += 1
        self.stats["escalated"] += secured > previous
        self.stats["covered"] += secured >= remaining
        if secured < remaining and secured <= previous:
            return (f"{rid} is readmitted after retraction {v.retractions} with {secured} tokens of headroom beyond "
                    f"its {tokens} tokens, no more than the {previous} its previous admission secured, and short of "
                    f"the {remaining} slots the rest of its generation needs: the retraction added no headroom")
        return None
