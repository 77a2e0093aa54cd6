"""A request's first extend, judged by its prefix hit: rules TS-PFX-1, TS-PFX-3, PEER-4 and TS-TBL-1's canonical
share.

* TS-PFX-1 (prefix_granularity "defines the identity boundary of cached prefixes: two requests share cache
  only at multiples of this many tokens"): prefix hits are multiples of P and never reach the prompt's last
  token.
* TS-PFX-3 (cache concepts L179: a replayable group "never claims a hit, so its table is empty at first
  admission and the scheduler materializes it as a sparse private suffix from the replay window's first
  token"; L185: replayable groups "skip publication on both tiers"; L66: the re-fed window "is the retention
  window itself"): at a request's first extend it re-feeds min(W, hit) tokens, and a replayable group's row
  holds null holes below the slot of the replay window's first token and fresh pages from there; its pages
  are never published, so no later table may name one as cached content.
* PEER-4 hits bounded by the trace: every hit page's prefix key was computed by some request in an earlier
  plan (the data plane orders a hitter's forward after the writer); a hit ending inside a page reuses a
  partial page whose last write holds this prompt's tokens.
* TS-TBL-1 (seed 002 L154, "registration neither allocates nor copies physical storage"): a hit's whole prefix
  pages are served by the published canonical block itself, never by a fresh copy of it.

``contract.Contract`` owns one ``PrefixHits`` (which reads it through ``view.PrefixHitsView``) and hands it each
request's first extend, and each submission for the trace's own bound on hits (a request's longest whole-page
prefix some earlier prompt had, reported beside the hit ratio). This module knows cachetrace/1 records, never a
scheduler's API.
"""

from __future__ import annotations

from typing import Any

from kvsim.kvmodel.cache.prefix_hash import hashed_pages
from kvsim.sim.peers.cachetrace.causes import PARTIAL_TAIL
from kvsim.sim.peers.cachetrace.view import PrefixHitsView, RequestView

__all__ = ["PrefixHits"]


class PrefixHits:
    def __init__(self, contract: PrefixHitsView) -> None:
        self.c = contract
        config = contract.config
        self.replayable = [g.id for g in config.groups if g.replayable]
        self.replay_window = max((g.sliding_window_tokens or 0 for g in config.groups if g.replayable), default=0)
        self.declared = [g.id for g in config.groups if g.replayable and (g.attn_kind != "sliding" or
                                                                          not g.sliding_window_tokens)]
        self.replay_rows = 0  # replayable rows judged at a first extend (TS-PFX-3's premise)
        self.seen_keys: set[bytes] = set()   # every prompt page key submitted so far (the trace's bound)

    def _find(self, rule: str, line: int, message: str, **ctx: Any) -> None:
        self.c.find(rule, line, message, **ctx)

    def trace_bound(self, r: RequestView, prompt: int) -> int:
        """A submitted request's longest whole-page prefix some earlier prompt had, in tokens (the trace's own
        bound on its hit, reported beside the hit ratio); its prompt's page keys join the trace's."""
        p = self.c.p
        pages = hashed_pages(prompt, p)
        bound, chain = 0, True
        for i in range(pages):
            d = r.digest(i, p)
            if chain and d in self.seen_keys:
                bound += 1
            else:
                chain = False
        for i in range(hashed_pages(prompt + 1, p)):
            key = r.digest(i, p)
            if key is not None:  # hashed pages lie within the prompt: every key is known
                self.seen_keys.add(key)
        return bound * p

    def configuration(self, line: int) -> None:
        """TS-PFX-3, once, on the first plan: the configuration itself (seed 002 L66)."""
        if self.declared:
            for g in self.declared:
                self._find("TS-PFX-3", line, f"group {g} is declared replayable but is not a sliding-window group "
                           "with a window: replayable is set only on a sliding History group", group=g)
            self.declared = []

    def first_extend(self, rid: str, r: RequestView, hit: int, copied: dict, line: int) -> None:
        """The hit of ``rid``'s first extend (after the Host tier judged what its loads served): a multiple of P
        short of the prompt's last token (TS-PFX-1), a partial page's content this prompt's (PEER-4), whole pages
        served by the canonical block (TS-TBL-1), every hit page published by an earlier plan (PEER-4)."""
        p = self.c.p
        if hit % p:
            self.c.find("TS-PFX-1", line, f"{rid} hits {hit} tokens, not a multiple of {p}", cause=PARTIAL_TAIL,
                        request=rid, hit=hit)
            self._tail_hit(rid, r, hit, copied, line)
        if hit >= p:
            self._hit_shares_canonical(rid, r, hit, copied, line)
        if hit >= r.prefill:
            self._find("TS-PFX-1", line, f"{rid} hits {hit} of its {r.prefill} prompt tokens: the last token "
                       "must be computed", request=rid, hit=hit)
        for i in range(min(hit, r.prefill) // p):
            if r.digest(i, p) not in self.c.published:
                self._find("PEER-4", line, f"{rid} hits page {i}, which no request computed in an earlier plan",
                           request=rid, page=i, hit=hit)
                break

    def _tail_hit(self, rid: str, r: RequestView, hit: int, copied: dict, line: int) -> None:
        """A hit that ends inside a page reuses a partial page: its content must be this prompt's tokens.

        The reused page reaches the request either as a copy destination (its source's last writer is
        compared) or directly (then its own last writer is)."""
        p = self.c.p
        k = hit // p
        for g, row in r.rows.items():
            bg = self.c.groups[g].block_granularity
            slot = (k * p) // bg + (hit - k * p) // bg
            if bg < p or slot >= len(row) or self.c.groups[g].replayable:  # replayed rows are regenerated
                continue
            blk = row[slot]
            src = copied.get(g, {}).get(blk, blk)
            w = self.c.writer[g].get(src)
            ok = False
            if w is not None:
                sreq, si = w
                same_prefix = k == 0 or sreq.digest(k - 1, p) == r.digest(k - 1, p)
                mine = r.token_slice(k * p, hit)
                theirs = sreq.token_slice(k * p, hit)
                ok = si == slot and same_prefix and sreq.computed >= hit and list(mine) == list(theirs)
            if not ok:
                self._find("PEER-4", line, f"{rid} hits {hit} tokens through {g} block {src}, whose last write "
                           "does not hold this prompt's partial page", request=rid, group=g, block=src, hit=hit)

    def _hit_shares_canonical(self, rid: str, r: RequestView, hit: int, copied: dict, line: int) -> None:
        """TS-TBL-1 (seed 002 L154: "A cache entry is metadata plus an owning CacheBlockRef that publishes an
        existing block for reuse; registration neither allocates nor copies physical storage"): a hit's whole
        prefix pages are served by the published canonical block itself, never by a fresh copy of it. A copy
        destination whose source holds published content, named at a slot below the hit's last whole page, is
        that fresh copy (a tail hit's partial-page copy lies above it and is TS-PFX-1's)."""
        whole = hit // self.c.p * self.c.p
        for g, row in r.rows.items():
            grp = self.c.groups[g]
            into = copied.get(g)
            if grp.replayable or not into:
                continue
            content = self.c.content[g]
            for i in range(min(len(row), whole // grp.block_granularity)):
                src = into.get(row[i])
                if src is not None and src in content:
                    self._find("TS-TBL-1", line, f"{rid}'s {g} slot {i} is a hit served by block {row[i]}, a fresh "
                               f"copy of published block {src}: publication shares the canonical block",
                               request=rid, group=g, slot=i, block=row[i], source=src)

    def replayable_rows(self, rid: str, start: int, replay: int, tables: dict, private: dict[str, set[int]],
                        line: int) -> None:
        """TS-PFX-3: at its first extend a request re-feeds exactly ``min(W, hit)`` tokens (W the largest
        replayable window: "the window the scheduler re-feeds is the retention window itself", L66), and its
        replayable rows are null holes below the slot of the replay window's first token (``start``, where the
        input begins) and fresh pages from it."""
        hit = start + replay
        want = min(self.replay_window, hit)
        if replay != want:
            self.replay_rows += 1
            self._find("TS-PFX-3", line, f"{rid} re-feeds {replay} tokens before its {hit}-token hit; a replayable "
                       f"group's window is {self.replay_window} tokens, so it must re-feed {want}", request=rid,
                       hit=hit, replay=replay)
            return
        for g in self.replayable:
            row = tables.get(g, {}).get(rid)
            if row is None:
                continue
            self.replay_rows += 1
            first = start // self.c.groups[g].block_granularity
            for i, blk in enumerate(row):
                if i < first and blk > 0:
                    self._find("TS-PFX-3", line, f"{rid}'s replayable {g} row names block {blk} at slot {i}, below the "
                               f"replay window's first slot {first}: a replayable group claims no hit", request=rid,
                               group=g, slot=i, block=blk)
                    return
                if i >= first and blk > 0 and blk not in private[g]:
                    self._find("TS-PFX-3", line, f"{rid}'s replayable {g} row names block {blk} at slot {i}, which was "
                               "not handed out fresh: a replayable group's suffix is private", request=rid, group=g,
                               slot=i, block=blk)
                    return
                if i >= first and blk <= 0:
                    self._find("TS-PFX-3", line, f"{rid}'s replayable {g} row has no page at slot {i}, inside the "
                               "replay window it must regenerate", request=rid, group=g, slot=i)
                    return
