"""A reference paged prefix cache, small enough to be obviously correct: the engine the judge machines drive.

It plays a block-table engine (vLLM / SGLang shape) from the cache concepts alone (seed 002): a pool of
``num_blocks`` blocks of ``block_size`` tokens with block 0 reserved as the null block (l.264); a request's
prefix hit is its longest run of whole cached blocks from the root, stopping short of the prompt's last
token (l.13: "two requests share cache only at multiples of this many tokens"; the last token's logits are
needed); a block is cached (and published as one ``BlockStored``) when the forward fills it and its parent is
cached, evicted least recently released first when a fresh block is needed (``BlockRemoved``), and
``clear()`` drops everything (l.191 ClearCache; ``AllBlocksCleared``) (l.193: "folds them into one externally
visible prefix event"; l.309: an independent block hash for external events). Requests get every block of
their lifetime at admission (``lazy`` False) or one at a time as decode needs it (``lazy`` True); admission
waits until the whole lifetime fits, so nothing is ever preempted.

Every step yields a driver step message (the form ``sim.peers.judges.engine_judge`` reads: new / cached tables,
scheduled tokens, produced tokens, finished requests, prefix-cache stats, free and cached block counts, the
step's KV-event batch with its sequence number). Event hashes are written here from the engines' published
definitions (research/kv-events.md): ``fnv1a64`` (TokenSpeed: FNV-1a 64 over a has-parent byte, the parent
u64 LE, the token count u64 LE and each token i32 LE) and ``sglang-sha256`` (sha256 over the parent's 32-byte
digest and the tokens as u32 LE; the event carries the first 8 bytes, big-endian, signed).

``faults`` names engine bugs the judge machine plants (``ENGINE_FAULTS``); each fires once, at the first
occasion at or after step ``fault_step``, and records (rule, step) in ``fired``. It imports nothing from
kvsim: the judges it feeds must not be able to agree with it by sharing code (a test enforces that).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

_M64 = (1 << 64) - 1
SCHEMES = ("fnv1a64", "sglang-sha256")

# engine bug -> the rule the engine judge must report at the step it fires
ENGINE_FAULTS = {
    "alias-block": "PEER-8",        # a fresh block handed out while another live request names it
    "hit-beyond-prompt": "PEER-6",  # a fully cached, block-aligned prompt hit to its last token
    "hit-wrong-content": "PEER-7",  # a hit slot names a cached block holding another prefix
    "stats-off": "PEER-9",          # the prefix-cache stats report one block more of hits
    "leak-at-finish": "PEER-9",     # a finishing request keeps one block out of the free count
    "dropped-store": "PEER-9",      # a block cached without its BlockStored
    "block-out-of-range": "PEER-5",  # a table names block id num_blocks
}


def fnv1a64(parent: int | None, tokens: list[int]) -> int:
    data = bytearray(b"\x00" if parent is None else b"\x01" + (parent & _M64).to_bytes(8, "little"))
    data += len(tokens).to_bytes(8, "little")
    for t in tokens:
        data += (t & 0xFFFFFFFF).to_bytes(4, "little")
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & _M64
    return h


def sglang_digest(parent: bytes | None, tokens: list[int]) -> bytes:
    return hashlib.sha256((parent or b"") + b"".join(t.to_bytes(4, "little") for t in tokens)).digest()


def sglang_value(digest: bytes) -> int:
    return int.from_bytes(digest[:8], "big", signed=True)


@dataclass
class Req:
    rid: str
    tokens: list[int]  # prompt, then every produced token
    prompt: int
    max_new: int
    table: list[int] = field(default_factory=list)
    computed: int = 0
    produced: int = 0
    planned: int = 0  # blocks its lifetime needs (lazy: the rest are promised)

    @property
    def lifetime_tokens(self) -> int:
        return self.prompt + self.max_new - 1  # the last produced token is never computed


class RefEngine:
    def __init__(self, block_size: int, num_blocks: int, scheme: str = "fnv1a64", lazy: bool = False,
                 fault: str | None = None, fault_step: int = 0, alias_later: bool = False) -> None:
        self.bs, self.num_blocks, self.scheme, self.lazy = block_size, num_blocks, scheme, lazy
        self.fault, self.fault_step = fault, fault_step
        self.alias_later = alias_later  # alias-block: only a slot the step does not compute into
        self.fired: list[tuple[str, int]] = []
        self.refs = {b: 0 for b in range(1, num_blocks)}
        self.prefix_of: dict[int, tuple] = {}   # cached block -> the whole token prefix it ends
        self.block_of: dict[tuple, int] = {}    # cached prefix -> its block
        self.digest: dict[tuple, object] = {}   # cached prefix -> its hash state (event value or sha digest)
        self.released: list[int] = []           # cached blocks no request names, least recently released first
        self.waiting: list[Req] = []
        self.running: dict[str, Req] = {}
        self.step_no = 0
        self.seq = 0
        self.promised = 0
        self.unpublished: set[tuple] = set()    # dropped-store: cached prefixes whose store was never published

    # -- requests -------------------------------------------------------------------------------------
    def submit(self, rid: str, prompt: list[int], max_new: int) -> None:
        self.waiting.append(Req(rid, list(prompt), len(prompt), max_new))

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    def _blocks(self, tokens: int) -> int:
        return -(-tokens // self.bs)

    def _fire(self, name: str) -> bool:
        if self.fault == name and not self.fired and self.step_no >= self.fault_step:
            self.fired.append((ENGINE_FAULTS[name], self.step_no))
            return True
        return False

    # -- the cache ------------------------------------------------------------------------------------
    def _match(self, r: Req) -> list[int]:
        """Cached blocks of r's longest whole-block prefix, leaving the prompt's last token to compute."""
        bs, out = self.bs, []
        for i in range((r.prompt - 1) // bs):
            blk = self.block_of.get(tuple(r.tokens[:(i + 1) * bs]))
            if blk is None:
                break
            out.append(blk)
        if (self.fault == "hit-beyond-prompt" and r.prompt % bs == 0 and len(out) == r.prompt // bs - 1
                and tuple(r.tokens[:r.prompt]) in self.block_of and self._fire("hit-beyond-prompt")):
            out.append(self.block_of[tuple(r.tokens[:r.prompt])])
        if out and self.fault == "hit-wrong-content":
            others = sorted(b for b in self.prefix_of if b not in out)
            if others and self._fire("hit-wrong-content"):
                out[-1] = others[0]
        return out

    def _available(self, hit: list[int]) -> int:
        return sum(1 for b, n in self.refs.items() if n == 0 and b not in hit) - self.promised

    def _take(self, events: list, holder: Req, later: bool = False) -> int:
        """A fresh block: the lowest free uncached one, else the least recently released cached one. ``later``:
        the slot is not computed in this step."""
        if self.fault == "alias-block" and (later or not self.alias_later):
            named = sorted(b for b, n in self.refs.items() if n > 0 and b not in holder.table)
            if named and self._fire("alias-block"):
                self.refs[named[0]] += 1
                return named[0]
        free = [b for b, n in self.refs.items() if n == 0 and b not in self.prefix_of]
        if free:
            blk = min(free)
        else:
            blk = self.released[0]
            self._uncache(blk, events)
        self.refs[blk] += 1
        return blk

    def _uncache(self, blk: int, events: list) -> None:
        prefix = self.prefix_of.pop(blk)
        del self.block_of[prefix]
        if blk in self.released:
            self.released.remove(blk)
        if prefix in self.unpublished:
            self.unpublished.discard(prefix)
        else:
            events.append({"type": "BlockRemoved", "block_hashes": [self._value(prefix)], "medium": "GPU"})
        del self.digest[prefix]

    def _value(self, prefix: tuple) -> int:
        d = self.digest[prefix]
        return d if isinstance(d, int) else sglang_value(d)  # type: ignore[arg-type]

    def _cache(self, r: Req, i: int, events: list) -> None:
        """Block i of r is full: cache it (one BlockStored) unless its content is cached or its parent is not."""
        bs = self.bs
        prefix = tuple(r.tokens[:(i + 1) * bs])
        parent = prefix[:-bs]
        blk = r.table[i]
        if prefix in self.block_of or (parent and parent not in self.block_of):
            return
        if blk in self.prefix_of:  # (only under alias-block: the block held another prefix, maybe this parent)
            self._uncache(blk, events)
            if parent and parent not in self.block_of:
                return
        toks = list(prefix[-bs:])
        pd = self.digest.get(parent) if parent else None
        if self.scheme == "fnv1a64":
            self.digest[prefix] = fnv1a64(pd, toks)  # type: ignore[arg-type]
        else:
            self.digest[prefix] = sglang_digest(pd, toks)  # type: ignore[arg-type]
        self.block_of[prefix], self.prefix_of[blk] = blk, prefix
        if self._fire("dropped-store"):
            self.unpublished.add(prefix)
            return
        events.append({"type": "BlockStored", "block_hashes": [self._value(prefix)],
                       "parent_block_hash": self._value(parent) if parent else None, "token_ids": toks,
                       "block_size": bs, "lora_id": None, "medium": "GPU"})

    def _touch(self, hit: list[int]) -> None:
        """A hit takes its cached blocks: one more holder each, out of the released list."""
        for blk in hit:
            if self.refs[blk] == 0 and blk in self.released:
                self.released.remove(blk)
            self.refs[blk] += 1

    def _release(self, r: Req) -> None:
        for blk in r.table:
            if not 0 < blk < self.num_blocks:
                continue
            self.refs[blk] -= 1
            if self.refs[blk] == 0 and blk in self.prefix_of:
                self.released.append(blk)
        r.table = []

    def clear(self) -> dict:
        """ClearCache with no request running: every cached block dropped, one AllBlocksCleared."""
        if self.running:
            raise RuntimeError("ClearCache while requests run")
        for blk in list(self.prefix_of):
            prefix = self.prefix_of.pop(blk)
            del self.block_of[prefix], self.digest[prefix]
        self.released.clear()
        self.unpublished.clear()
        return self._message({}, [{"type": "AllBlocksCleared"}])

    # -- one step -------------------------------------------------------------------------------------
    def step(self) -> dict:
        bs, events = self.bs, list[dict]()
        msg: dict = {"new": [], "cached": [], "scheduled": {}, "tokens": {}, "finished": []}
        hits = queries = admitted = 0
        # decode first: every running request computes the token it produced last
        for r in self.running.values():
            n = r.computed + 1
            if n > len(r.table) * bs:
                if r.planned > len(r.table):
                    self.promised -= 1
                blk = self._take(events, r)
                r.table.append(blk)
                msg["cached"].append([r.rid, False, [self._shown(blk)], None])
            msg["scheduled"][r.rid] = 1
        # admission, first come first served, while the whole lifetime fits
        while self.waiting:
            r = self.waiting[0]
            fired = len(self.fired)
            hit = self._match(r)
            planned = self._blocks(r.lifetime_tokens)
            now = max(planned if not self.lazy else self._blocks(r.prompt), len(hit))
            fresh_now = now - len(hit)
            fresh_later = planned - now if planned > now else 0
            if self._available(hit) < fresh_now + fresh_later:
                del self.fired[fired:]  # a faulty hit of this match was not handed out after all
                break
            self.waiting.pop(0)
            self._touch(hit)
            r.table = list(hit)
            for i in range(len(hit), now):
                r.table.append(self._take(events, r, later=i * bs >= r.prompt))
            r.planned = max(planned, now)
            self.promised += fresh_later
            r.computed = len(hit) * bs
            self.running[r.rid] = r
            msg["new"].append([r.rid, r.computed, hit + [self._shown(b) for b in r.table[len(hit):]]])
            msg["scheduled"][r.rid] = r.prompt - r.computed
            admitted += 1
            queries += r.prompt
            hits += r.computed
        # the forward: scheduled tokens computed, full blocks cached
        for rid, n in msg["scheduled"].items():
            r = self.running[rid]
            start, r.computed = r.computed, r.computed + n
            for i in range(start // bs, r.computed // bs):
                self._cache(r, i, events)
        # sampling: one token each; a request with all its tokens finishes
        for rid in msg["scheduled"]:
            r = self.running[rid]
            tok = (sum(r.tokens[-3:]) + len(r.tokens)) % 3
            r.tokens.append(tok)
            r.produced += 1
            msg["tokens"][rid] = tok
        for rid in sorted(msg["scheduled"]):
            r = self.running[rid]
            if r.produced >= r.max_new:
                msg["finished"].append(rid)
                self.promised -= r.planned - len(r.table)
                own = [b for b in r.table if self.refs.get(b) == 1]  # named by no other request
                if own and self._fire("leak-at-finish"):
                    r.table.remove(own[0])  # that block keeps its reference for ever
                self._release(r)
                del self.running[rid]
        if admitted and self._fire("stats-off"):
            hits += bs
        msg["stats"] = {"requests": admitted, "queries": queries, "hits": hits}
        return self._message(msg, events)

    def _shown(self, blk: int) -> int:
        """The block id the step reports (block-out-of-range: one fresh block reported as num_blocks)."""
        if self.fault == "block-out-of-range" and self._fire("block-out-of-range"):
            return self.num_blocks
        return blk

    def _message(self, msg: dict, events: list) -> dict:
        msg["step"] = self.step_no
        msg["free_blocks"] = sum(1 for n in self.refs.values() if n == 0)
        msg["cached_blocks"] = len(self.prefix_of)
        msg["batches"], msg["seqs"] = [], []
        if events:
            msg["batches"].append([self.step_no, events, 0])
            msg["seqs"].append(self.seq)
            self.seq += 1
        self.step_no += 1
        return msg
