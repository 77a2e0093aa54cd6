"""The `judge-hash` machine: the KV-event checker's block-hash recomputation (EV-7, ``sim.peers.judges.block_hash``)
for every engine's scheme, against ``sim.fuzz.hash_reference`` (each engine's documented scheme, written from its
source, importing nothing of kvsim).

Hypothesis draws the scheme -- TokenSpeed's FNV-1a 64 events and SHA-256 prefix framing, vLLM's sha256 (pickle)
and sha256_cbor with the default or a PYTHONHASHSEED seed, values as 64-bit integers or whole digests, groups whose
block is 1, 2 or 4 hash blocks, SGLang's chained sha256 -- the block size, whether the scheme is pinned or
recognised from the stream, then requests: token blocks (ids at the encodings' edges: CBOR heads, 32 bits),
branches off a live block of an earlier request, vLLM's extra keys (multimodal items at any offset, a cache salt,
prompt-embedding digests) and lookahead tokens, and removals of leaf blocks. Each request's blocks are published as one
``BlockStored`` per batch, hashed by the reference. On the stream as published the checker must report nothing and
leave no block unverified; with one leaf block's hash changed, exactly one EV-7, at that line.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, NoReturn

from hypothesis import strategies as st
from hypothesis.control import current_build_context
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from kvsim.sim.files import write_atomic
from kvsim.sim.fuzz import hash_reference as ref
from kvsim.sim.fuzz.harness import FuzzFailure
from kvsim.sim.fuzz.stats import RUN, declare, reached

SCHEMES = ("fnv1a64", "sha256", "vllm-sha256", "vllm-sha256-cbor", "sglang-sha256")
# token ids at the edges of the encodings: CBOR heads (23/24, 255/256, 65535/65536, 32 bits), SGLang's u32 limit,
# FNV-1a's 32-bit token framing
declare([f"hash:{s}:{what}" for s in ("fnv1a64", "sha256", "vllm-sha256", "vllm-sha256-cbor", "sglang-sha256")
         for what in ("clean", "tampered")]
        + [f"hash:vllm:{f}" for f in ("extra-keys", "lookahead", "wide-group", "seed", "digest-values", "recognised")])
EDGES = (23, 24, 255, 256, 65535, 65536, (1 << 32) - 1, 1 << 32, 1 << 40)


class HashMachine(RuleBasedStateMachine):
    name = "judge-hash"
    oracles = ("hash",)  # branches: each scheme judged clean and tampered, vLLM's key features

    @staticmethod
    def catalogue_ids() -> list[str]:
        return []

    def __init__(self) -> None:
        super().__init__()
        self.scheme = ""
        self.reqs: list[dict] = []      # per request: tokens, features, its blocks' values (published or not)
        self.batches: list[list[dict]] = []
        self.live: dict[Any, int] = {}  # published value -> children published under it
        self.failed = False

    def count(self, label: str) -> None:
        RUN.rules[label] = RUN.rules.get(label, 0) + 1
        RUN.steps += 1

    @initialize(scheme=st.sampled_from(SCHEMES), bs=st.integers(1, 8), k=st.sampled_from((1, 1, 2, 4)),
                seed=st.sampled_from((ref.NONE_SEED, ref.NONE_SEED, "0", "42")), as_int=st.booleans(),
                pinned=st.booleans())
    def start(self, scheme, bs, k, seed, as_int, pinned) -> None:
        vllm = scheme.startswith("vllm")
        self.scheme, self.bs = scheme, bs
        self.k = k if vllm and bs % k == 0 and bs // k >= 1 else 1
        self.seed = seed if vllm else ref.NONE_SEED
        self.as_int = as_int or not vllm
        self.pinned = pinned
        self.cfg = {"scheme": scheme, "block_size": bs, "hash_blocks": self.k, "seed": self.seed,
                    "as_int": self.as_int, "pinned": pinned}
        RUN.examples += 1
        self.count(f"scheme:{scheme}")

    def _values(self, req: dict) -> list[Any]:
        """The event values of a request's full blocks, by the reference."""
        s, bs, toks = self.scheme, self.bs, req["tokens"]
        n = (len(toks) - req["lookahead"]) // bs
        if s == "fnv1a64":
            out: list[Any] = []
            for i in range(n):
                out.append(ref.fnv1a64(out[-1] if out else None, toks[i * bs:(i + 1) * bs]))
            return out
        if s == "sha256":
            d = b""
            out = []
            for i in range(n):
                d = ref.prefix_digest(d, toks[i * bs:(i + 1) * bs])
                out.append(d.hex())
            return out
        if s == "sglang-sha256":
            dg: bytes | None = None
            out = []
            for i in range(n):
                dg = ref.sglang_digest(dg, toks[i * bs:(i + 1) * bs])
                out.append(ref.sglang_value(dg))
            return out
        hb = bs // self.k
        chain = ref.vllm_chain(toks, hb, s.endswith("cbor"), self.seed, req["mm"], req["salt"], req["embeds"],
                               req["lookahead"])
        return [ref.vllm_value(chain[(i + 1) * self.k - 1], self.as_int) for i in range(n)]

    def _publish(self, req: dict, first: int) -> None:
        """One BlockStored of the request's blocks from ``first`` on (its parent: block first - 1)."""
        vals = req["values"]
        if first >= len(vals):
            return
        bs = self.bs
        ev: dict = {"type": "BlockStored", "block_hashes": vals[first:],
                    "parent_block_hash": vals[first - 1] if first else None,
                    "token_ids": req["tokens"][first * bs:len(vals) * bs], "block_size": bs, "lora_id": None,
                    "medium": "GPU"}
        if self.scheme.startswith("vllm"):
            if self.k == 1 and (req["mm"] or req["embeds"] or req["salt"]):
                ev["extra_keys"] = [ref.vllm_event_extra(req["mm"], i * bs, (i + 1) * bs + req["lookahead"],
                                                         req["salt"], req["embeds"].get(i * bs))
                                    for i in range(first, len(vals))]
            elif req["salt"] and first == 0:
                ev["extra_keys"] = [[req["salt"]] if i == 0 else None for i in range(first, len(vals))]
            if req["lookahead"]:
                la = req["lookahead"]
                ev["lookahead_token_ids"] = [req["tokens"][(i + 1) * bs:(i + 1) * bs + la]
                                             for i in range(first, len(vals))]
        for v in vals[first:]:
            self.live[v] = 0
        if first:
            self.live[vals[first - 1]] = self.live.get(vals[first - 1], 0) + 1
        req["published"] = len(self.batches)
        self.batches.append([ev])

    @rule(blocks=st.integers(1, 4), tokens=st.lists(st.integers(0, 9), min_size=1, max_size=32), big=st.booleans(),
          mm=st.lists(st.tuples(st.sampled_from(("img-a", "img-b", "aud")), st.integers(0, 20), st.integers(1, 9)),
                      max_size=2),
          salt=st.one_of(st.none(), st.sampled_from(("s1", "tenant-7"))), embeds=st.booleans(),
          lookahead=st.integers(0, 2), branch=st.integers(-1, 1 << 16))
    def request(self, blocks, tokens, big, mm, salt, embeds, lookahead, branch) -> None:
        """A request's blocks: fresh, or after a live block of an earlier one (the same features)."""
        vllm = self.scheme.startswith("vllm")
        bs = self.bs
        edges = EDGES if self.scheme != "sha256" else EDGES[:-2]  # TokenSpeed's prefix framing is u32 only
        toks = [edges[t % len(edges)] if big and i % 3 == 0 else t
                for i, t in enumerate((tokens * (blocks * bs))[:blocks * bs])]
        parents = [r for r in self.reqs if r["values"] and all(v in self.live for v in r["values"][:1])]
        base = parents[branch % len(parents)] if parents and branch >= 0 else None
        if base is not None:
            cut = 1 + branch % len(base["values"])
            if not all(v in self.live for v in base["values"][:cut]):
                base = None
        if base is not None:
            req = {**base, "tokens": base["tokens"][:cut * bs] + toks}
            first = cut
            self.count("branch")
        else:
            feats = vllm and not (self.k > 1 and (mm or embeds))
            req = {"tokens": toks, "mm": sorted(mm, key=lambda m: m[1]) if feats else [],
                   "salt": salt if vllm else None,
                   "embeds": {i * bs: hashlib.sha256(repr(toks[i * bs:(i + 1) * bs]).encode()).digest()
                              for i in range(blocks)} if feats and embeds and self.k == 1 else {},
                   "lookahead": 0}
            first = 0
        if vllm and lookahead and self.k == 1:
            req["lookahead"] = lookahead
            req["tokens"] = req["tokens"] + [7] * lookahead
        elif base is not None:
            req["lookahead"] = 0
        req["values"] = self._values(req)
        if base is not None and req["values"][:first] != base["values"][:first]:
            return  # a lookahead changed the shared blocks' keys: not a branch of that block after all
        while first < len(req["values"]) and req["values"][first] in self.live:  # a cached prefix is not stored again
            first += 1
        if any(v in self.live for v in req["values"][first:]):
            return
        self.count("request" + ("+extra" if req.get("mm") or req.get("embeds") or req.get("salt") else ""))
        self.reqs.append(req)
        self._publish(req, first)

    @precondition(lambda self: self.live)
    @rule(i=st.integers(0, 1 << 16))
    def remove(self, i) -> None:
        """A leaf block (no child published under it) leaves the cache."""
        leaves = sorted((v for v, n in self.live.items() if n == 0), key=str)
        if not leaves:
            return
        v = leaves[i % len(leaves)]
        del self.live[v]
        for r in self.reqs:
            if v in r["values"]:
                j = r["values"].index(v)
                if j and r["values"][j - 1] in self.live:
                    self.live[r["values"][j - 1]] -= 1
                break
        self.count("remove")
        self.batches.append([{"type": "BlockRemoved", "block_hashes": [v], "medium": "GPU"}])

    # -- judging ---------------------------------------------------------------------------------------------------
    def teardown(self) -> None:
        if not self.scheme or self.failed or not self.batches:
            return
        got, ev = self.judge(self.batches)
        if got:
            self.fail("false-alarm", got[0][1], f"{got[0][1]} at line {got[0][0]} on a stream hashed as the engine "
                      "documents", self.batches)
        if ev.stats["unverifiable"]:
            self.fail("unverified", "EV-7", f"{ev.stats['unverifiable']} blocks left unverified "
                      f"({ev.unverifiable_reasons}) on a stream every block of which recomputes", self.batches)
        self.count("clean")
        reached(f"hash:{self.scheme}:clean")
        if self.scheme.startswith("vllm"):
            feats = {"extra-keys": any(b.get("extra_keys") for batch in self.batches for b in batch),
                     "lookahead": any(b.get("lookahead_token_ids") for batch in self.batches for b in batch),
                     "wide-group": self.k > 1, "seed": self.seed != ref.NONE_SEED, "digest-values": not self.as_int,
                     "recognised": not self.pinned}
            for f, on in feats.items():
                if on:
                    reached(f"hash:vllm:{f}")
        named: dict[Any, int] = {}  # value -> the last line naming it (stored, removed or as a parent)
        for n, batch in enumerate(self.batches):
            for b in batch:
                for v in b["block_hashes"] + [b.get("parent_block_hash")]:
                    named[v] = n
        leaves = [(n, b) for n, batch in enumerate(self.batches) for b in batch if b["type"] == "BlockStored"
                  and self.live.get(b["block_hashes"][-1], 1) == 0 and named[b["block_hashes"][-1]] == n]
        roots = [n for n, batch in enumerate(self.batches) for b in batch
                 if b["type"] == "BlockStored" and b["parent_block_hash"] is None]
        if not self.pinned:  # a scheme is recognised from an untouched root block only
            leaves = [(n, b) for n, b in leaves if any(r != n for r in roots)]
        if not leaves:
            return
        line, evt = leaves[len(leaves) // 2]
        bad = [list(b) for b in self.batches]
        tampered = dict(evt, block_hashes=evt["block_hashes"][:-1] + [_flip(evt["block_hashes"][-1])])
        bad[line] = [tampered]
        got, _ev = self.judge(bad)
        if got != [(line + 1, "EV-7")]:
            self.fail("missed" if (line + 1, "EV-7") not in got else "false-alarm", "EV-7",
                      f"one block's hash changed at line {line + 1}: the checker reported {got[:6]}", bad)
        self.count("rule:EV-7")
        reached(f"hash:{self.scheme}:tampered")

    def judge(self, batches: list) -> tuple[list, Any]:
        from kvsim.sim.peers.judges.events import EventChecker, parse_batch
        hbs = self.bs // self.k if self.pinned and self.k > 1 else None
        ev = EventChecker(block_size=self.bs, hash_scheme=self.scheme if self.pinned else "auto", hash_seed=self.seed,
                          hash_block_size=hbs)
        for n, batch in enumerate(batches):
            ev.sequence(n, n + 1)
            ev.batch(parse_batch({"seq": n, "events": batch})[0], n + 1)
        ev.flush()
        return sorted((f.line, f.rule) for f in ev.findings), ev

    def fail(self, kind: str, rule: str, message: str, batches: list) -> NoReturn:
        self.failed = True
        text = f"{rule} ({kind}) {message} [{json.dumps(self.cfg, sort_keys=True)}]"
        try:
            final = current_build_context().is_final
        except Exception:  # noqa: BLE001 — outside a Hypothesis test (a direct call)
            final = True
        if final and RUN.found_dir is not None:
            data = "".join(json.dumps({"seq": n, "events": b}, default=lambda x: x.hex()) + "\n"
                           for n, b in enumerate(batches)).encode()
            path = RUN.found_dir / f"{self.name}-{hashlib.sha256(data).hexdigest()[:12]}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, data)
            RUN.last_failure = {"kind": kind, "message": text, "rule": rule, "reproduced": True,
                                "trace": str(path), "steps": len(batches), "replay": message}
        raise FuzzFailure(text)


def _flip(value: Any) -> Any:
    """Another value of the same kind."""
    if isinstance(value, bytes):
        return value[:-1] + bytes([value[-1] ^ 1])
    if isinstance(value, str):
        return value[:-1] + ("0" if value[-1] != "0" else "1")
    return value ^ 1
