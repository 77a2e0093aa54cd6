"""The prefix reuse a workload allows, computed from its block ids alone (no store, no scheduler).

Definition (the simulation's prefix reuse must equal this under unbounded capacity): page j (64 tokens)
of request r's prompt is *reusable* when j < floor((prompt_r - 1) / 64) (at least the last prompt token is
always computed) and some earlier request q (file order) holds the same page: both prompts fill page j
(64·(j+1) tokens or more) and their block ids agree on every block up to and including block floor(j/8).
Because the scheduler admits in file order and prefills one request at a time, "earlier in the file" is
"its prefill had completed before r was admitted". Reusable tokens = 64 · reusable pages; a request's
reusable pages always form a prefix of its prompt.

Computed with a dict over id prefixes: for every prefix of k ids seen so far, the most tokens an earlier
request's prompt shares through it, min(512·k, prompt_q); r's common prefix with the earlier requests is
then min(prompt_r, the deepest such value along r's ids).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvsim.sim.workloads.request import BLOCK_TOKENS

P = 64


@dataclass
class Reuse:
    requests: int = 0
    prompt_tokens: int = 0
    prompt_pages: int = 0
    reusable_pages: int = 0

    @property
    def reusable_tokens(self) -> int:
        return self.reusable_pages * P

    @property
    def hit_ratio(self) -> float:
        return self.reusable_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def reusable_pages(requests, max_context: int | None = None) -> Reuse:
    """Count reusable pages over `requests` (Request records in admission order).

    Requests whose prompt exceeds `max_context` are skipped, as the simulation rejects them."""
    nodes: dict[tuple[int, int], int] = {}  # (parent node, block id) -> node (node 0 is the empty prefix)
    best: list[int] = [0]  # node -> the most tokens an earlier prompt shares through that id prefix
    out = Reuse()
    for r in requests:
        n = r.prompt
        if max_context is not None and n > max_context:
            continue
        out.requests += 1
        out.prompt_tokens += n
        out.prompt_pages += -(-n // P)
        common = 0
        node = 0
        for k, h in enumerate(r.hash_ids, 1):
            child = nodes.get((node, h))
            if child is None:
                child = nodes[(node, h)] = len(best)
                best.append(0)
            elif best[child] > common:
                common = best[child]
            node = child
            shared = min(BLOCK_TOKENS * k, n)
            if best[child] < shared:
                best[child] = shared
        out.reusable_pages += min(min(common, n) // P, (n - 1) // P if n else 0)
    return out
