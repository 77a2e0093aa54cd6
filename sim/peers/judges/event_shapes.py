"""Two shapes of vLLM's KV-event stores the vLLM preset reads (EV-4's entry in ``sim.peers.judges.event_rules``).

* A **sparse store**: a group that keeps only some of its blocks -- a Mamba state group in align mode keeps the
  checkpoint block and nulls the states before it -- publishes one store whose ``block_hashes`` name the blocks it
  keeps while its ``token_ids`` cover every block since the parent (``BlockPool.cache_full_blocks`` skips null and
  masked-out blocks for the hashes, not for the tokens). Each named hash must be the chain digest at one of those
  blocks, in order (EV-7).
* A **placeholder**: block size 0, no tokens, the hash alone -- the offloading connector's legacy payload, which
  ``OffloadingEventsTracker`` also publishes for a full-attention block whose payload it lost.

Pure functions over one event; the checker (``sim.peers.judges.events.EventChecker``) keeps the counts.
"""

from __future__ import annotations

from typing import Any

from kvsim.sim.peers.judges import block_hash as bh

__all__ = ["is_sparse", "sparse_digests", "lost_placeholder"]


def is_sparse(n: int, ntok: int, bs: int) -> bool:
    """A store of ``n`` hashes whose ``ntok`` tokens cover more whole blocks than it names."""
    return bool(n) and ntok > n * bs and ntok % bs == 0


def sparse_digests(scheme: Any, ev: Any, parent_value: Any, prev: Any) -> tuple[list, str | None, Any]:
    """Chain the digest through every block a sparse store's tokens cover, matching its named hashes in order:
    ``(digest of each named block or None, the reason it could not be recomputed or None, the first named hash
    that matched no block or None)``."""
    hashes, bs, toks = ev.block_hashes, ev.block_size, ev.token_ids
    out: list = [None] * len(hashes)
    if scheme is None:
        return out, None, None
    if parent_value is not None and prev is None:
        return out, "the parent's digest was never seen", None
    if any(x is not None for x in (getattr(ev, "extra_keys", None) or ())) or getattr(ev, "lookahead_token_ids",
                                                                                       None):
        return out, "a sparse store's skipped blocks carry no extra keys", None
    j, d = 0, prev
    for p in range(len(toks) // bs):
        block = {"extra_keys": None, "lookahead": None, "lora_name": getattr(ev, "lora_name", None),
                 "cache_salt": getattr(ev, "cache_salt", None), "first": parent_value is None and p == 0}
        try:
            d = scheme.digest(d, toks[p * bs:(p + 1) * bs], block)
        except bh.Unverifiable as exc:
            return out, str(exc), None
        if j < len(hashes) and scheme.carried(hashes[j], d):
            out[j] = d
            j += 1
    return out, None, (hashes[j] if j < len(hashes) else None)


def lost_placeholder(ev: Any, described: set) -> bool:
    """A placeholder store (block size 0, no tokens) of a full-attention block in a medium whose stores carried
    their tokens: a payload the engine lost (EV-4), not the legacy shape vLLM documents."""
    return getattr(ev, "kv_cache_spec_kind", None) == "full_attention" and ev.medium in described
