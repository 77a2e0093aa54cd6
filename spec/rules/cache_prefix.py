"""TS-PFX-*: prefix identity (hash framing, chaining, P multiples) and the matchers with convergence.

The checkers re-derive: the SHA-256 chain from the recorded tokens with the framing spelled out here (an
independent second spelling of kvmodel.cache.prefix_hash), and each probe's boundary as the greatest
multiple of prefix_granularity every group supports, from the recorded cached slots.
"""

from __future__ import annotations

import hashlib
import struct
from typing import TYPE_CHECKING

from kvsim.kvmodel.cache.journal import ProbeRecord, PublishRecord
from kvsim.spec.catalogue import Reading, state_rule, transition_rule

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from kvsim.kvmodel.cache.journal import ProbeGroup
    from kvsim.kvmodel.cache.state import CacheState


def chain_hashes(tokens: Sequence[int], p: int) -> list[str]:
    """Hex SHA-256 per whole page: u32 prior-digest length + digest, u32 token count + u32 tokens."""
    out: list[str] = []
    prior = b""
    for i in range(len(tokens) // p):
        page = tokens[i * p:(i + 1) * p]
        prior = hashlib.sha256(struct.pack("<I", len(prior)) + prior + struct.pack(f"<I{len(page)}I", len(page), *page)
                               ).digest()
        out.append(prior.hex())
    return out


@state_rule("TS-PFX-1", "Prefix identity: SHA-256 chained page hashes with the exact framing; keys and hits only "
            "at multiples of prefix_granularity",
            'cache concepts: "two requests share cache only at multiples of this many tokens"; "SHA-256 prefix-page '
            'hashing"', scope="cache",
            decisions="Framing from TokenSpeed's prefix_hasher.h. A published key's "
                      "page offset is its slot modulo P / block_granularity; a probe's bound and hit are multiples "
                      "of P; published tokens are whole pages.",
            readings=(Reading("tokenspeed", "kvsim.sim.peers.cachetrace.hits.PrefixHits.first_extend",
                              title="Prefix hits only at multiples of prefix_granularity, short of the prompt's last "
                                    "token"),),
            tests=("tests/cache/test_rules.py::test_pfx1_keeps_chained_hashes_and_page_multiples",
                   "tests/cache/test_rules.py::test_pfx1_fires_on_unchained_hashes_and_a_mid_page_hit"),
            context=("request", "hit", "cause"))
def ts_pfx_1(st: CacheState, _entity: object | None = None, full: bool = True) -> str | bool | None:
    p = st.config.prefix_granularity
    seen = False
    for r in st.journal:
        if isinstance(r, PublishRecord):
            seen = True
            if len(r.tokens) % p or len(r.page_hashes) != len(r.tokens) // p:
                return f"publication of {len(r.tokens)} tokens as {len(r.page_hashes)} pages of {p}"
            want = chain_hashes(r.tokens, p)
            if list(r.page_hashes) != want:
                i = next(i for i, (a, b) in enumerate(zip(r.page_hashes, want)) if a != b)
                return f"page {i} hashes to {r.page_hashes[i][:16]}…, the chained framing gives {want[i][:16]}…"
            pages = set(want)
            bad = [k for k in r.keys if k.content_hash not in pages]
            if bad:
                return f"key {bad[0]} names no page of the published tokens"
        elif isinstance(r, ProbeRecord):
            seen = True
            if r.bound_tokens % p or r.result.hit_tokens % p or r.result.hit_tokens > r.bound_tokens:
                return f"probe bound {r.bound_tokens} / hit {r.result.hit_tokens} is not a multiple of {p} within bound"
    if st.published is not None:
        for g, entries in enumerate(st.published):
            m = p // st.config.groups[g].block_granularity
            for block, (key, slot) in entries.items():
                seen = True
                if key.page_offset != slot % m or key.group != g:
                    return f"group {g}: block {block} at slot {slot} is published under {key}"
    return True if seen else None


def _lookback(grp: ProbeGroup) -> int:
    """Slots a window group needs cached before a boundary: ceil((W − 1) / block_granularity)."""
    window = grp.window_tokens or 1  # only window groups ask (full history never looks back)
    return -(-(window - 1) // grp.block_granularity)


def supports(grp: ProbeGroup, boundary_slots: int) -> bool:
    """Whether a group can resume at a boundary (in its slots) given the slots cached."""
    if boundary_slots == 0:
        return True
    if grp.window_tokens is None:
        return all(s in grp.cached for s in range(boundary_slots))
    lookback = _lookback(grp)
    return all(s in grp.cached for s in range(max(boundary_slots - lookback, 0), boundary_slots))


def expected_hits(grp: ProbeGroup, boundary_slots: int) -> tuple[bool, ...]:
    if grp.replayable:
        return ()
    if grp.window_tokens is None:
        return (True,) * boundary_slots
    lookback = _lookback(grp)
    run = min(lookback, boundary_slots)
    return (False,) * (boundary_slots - run) + (True,) * run


@state_rule("TS-PFX-2", "Matchers and convergence: the hit is the greatest P-multiple boundary every matched "
            "group supports; full groups hit a hole-free run, window groups their lookback run",
            'cache concepts: "FullAttnMatcher walks left-to-right until the first miss (prefix-closed); SwaMatcher '
            'scans right-to-left for a run backing a resumable boundary (non-closed)"; "converged to the common '
            'prefix length across the matched groups"', scope="cache",
            decisions="A window group resumes at boundary b with ceil((W − 1)/bg) cached slots before b, or a "
                      "shorter run reaching slot 0; W = 2 for state groups; replayable groups are not matched and "
                      "claim no hit.",
            evidence="model",
            tests=("tests/cache/test_rules.py::test_pfx2_keeps_full_window_and_state_matching",
                   "tests/cache/test_rules.py::test_pfx2_fires_on_a_hit_beyond_what_every_group_supports"))
def ts_pfx_2(st: CacheState, _entity: object | None = None, full: bool = True) -> str | bool | None:
    p = st.config.prefix_granularity
    seen = False
    for r in st.journal:
        if not isinstance(r, ProbeRecord):
            continue
        seen = True
        best = 0
        for b in range(r.bound_tokens, 0, -p):
            if all(g.replayable or supports(g, b // g.block_granularity) for g in r.groups):
                best = b
                break
        if r.result.hit_tokens != best:
            return f"probe hit {r.result.hit_tokens} tokens; the groups support {best}"
        for i, (g, probe) in enumerate(zip(r.groups, r.result.probes)):
            want = expected_hits(g, best // g.block_granularity)
            if tuple(probe.hits) != want:
                return f"group {i}: hit pattern {_pattern(probe.hits)} at {best} tokens, expected {_pattern(want)}"
    return True if seen else None


def _pattern(hits: Iterable[bool]) -> str:
    return "".join("H" if h else "." for h in hits) or "(none)"


transition_rule(
    "TS-PFX-3", "A replayable group claims no hit: it re-feeds its whole window, null holes below it, fresh private "
    "pages from it",
    'cache concepts L179: "A replayable group (CacheGroupSpec::replayable) is not matched at all: it never constrains '
    'the boundary and never claims a hit, so its table is empty at first admission and the scheduler materializes it '
    'as a sparse private suffix from the replay window\'s first token"; L185: "Replayable groups ... skip publication '
    'on both tiers -- never registered"; L66: "replayable, set only on a sliding History group"; "the window the '
    'scheduler re-feeds is the retention window itself rather than a second declared number"',
    "kvsim.sim.peers.cachetrace.hits.PrefixHits.replayable_rows",
    decisions="Judged by the peer contract on a real scheduler's plans, at a request's first extend: it re-feeds "
              "exactly min(W, hit) tokens, W the largest sliding_window_tokens of the replayable groups (TokenSpeed's "
              "ReplayTokens(P) = min(W, P)); the replay window's first token is where the forward's input starts "
              "(prefix_lengths; the hit lies replay tokens later). A configuration declaring a replayable group "
              "that is not a sliding window with a window fires once, at the first plan. Slots below it must be "
              "null holes (0) or absent; every slot from it to the row's end names a page handed out fresh "
              "(zeroed, copied or loaded into, in that plan or earlier and not yet named). "
              "The contract never records a replayable page as published, so a later table naming one as cached "
              "content is TS-TBL-1. That a replayable group never constrains the boundary needs the other groups' "
              "index and is checked on kvsim's own coordinator (TS-PFX-2).",
    scope="cache",
    tests=("tests/peers/test_replayable.py::test_hole_below_the_replay_window_and_fresh_pages_from_it_are_clean",
           "tests/peers/test_replayable.py::test_page_below_the_replay_window_fires",
           "tests/peers/test_replayable.py::test_replayable_page_shared_from_an_earlier_request_fires",
           "tests/peers/test_replayable.py::test_replay_shorter_than_the_window_fires",
           "tests/peers/test_replayable.py::test_hole_inside_the_replay_window_fires",
           "tests/peers/test_replayable.py::test_replayable_declared_on_a_full_attention_group_fires"),
    context=("request", "hit", "replay", "group", "slot", "block"))
