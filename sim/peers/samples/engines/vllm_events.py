"""Write KV-event logs of vLLM's real KV-cache manager (run with the vLLM venv's python, never kvsim's).

Drives ``vllm.v1.core.kv_cache_manager.KVCacheManager`` the way vLLM's scheduler does -- for each step,
``get_computed_blocks`` then ``allocate_slots`` for each waiting request, one decode token per running
request, ``free`` at the finish -- with KV events on, and writes each step's ``take_events()`` as one
``KVEventBatch`` encoded by vLLM's own msgspec Structs (JSON, the native object-event form). The prompts
are fixed token lists, so the same vLLM gives the same bytes.

    VLLM_TARGET_DEVICE=cpu VENV/bin/python vllm_events.py SCENARIO OUT.jsonl    (bulk:N for N requests)
    VLLM_TARGET_DEVICE=cpu VENV/bin/python vllm_events.py --publish ENDPOINT REPLAY_ENDPOINT

``--publish`` runs the ``clean`` scenario through vLLM's own ``ZmqEventPublisher`` instead (PUB on
ENDPOINT, ROUTER replay on REPLAY_ENDPOINT; ipc:// or loopback only): it publishes the first three batches,
prints ``READY`` and waits for a line on stdin (a subscriber has connected), publishes the rest, and serves
replays until stdin closes.

Imports only vLLM and the standard library.
"""

from __future__ import annotations

import os
import sys
from typing import Any

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")

import msgspec  # noqa: E402  (vLLM's own dependency)
import torch  # type: ignore[import-not-found]  # noqa: E402
from vllm.distributed.kv_events import KVEventBatch  # type: ignore[import-not-found]  # noqa: E402
from vllm.sampling_params import SamplingParams  # type: ignore[import-not-found]  # noqa: E402
from vllm.utils.hashing import get_hash_fn_by_name  # type: ignore[import-not-found]  # noqa: E402
from vllm.v1.core import kv_cache_utils  # type: ignore[import-not-found]  # noqa: E402
from vllm.v1.core.kv_cache_manager import KVCacheManager  # type: ignore[import-not-found]  # noqa: E402
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash  # type: ignore[import-not-found]  # noqa: E402
from vllm.v1.kv_cache_interface import (  # type: ignore[import-not-found]  # noqa: E402
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    SlidingWindowSpec,
)
from vllm.v1.request import Request  # type: ignore[import-not-found]  # noqa: E402

BS = 16


def prompt(seed: int, n: int) -> list[int]:
    """n token ids from a small LCG keyed by seed (ids in 1..31999)."""
    x, out = seed * 2654435761 % 2**32, []
    for _ in range(n):
        x = (1103515245 * x + 12345) % 2**31
        out.append(1 + x % 31999)
    return out


def manager(num_blocks: int, hybrid: bool, block_size: int = BS, lookahead: int = 0) -> KVCacheManager:
    full = FullAttentionSpec(block_size=block_size, num_kv_heads=1, head_size=8, dtype=torch.float16)
    groups = [KVCacheGroupSpec(["full.0"], full)]
    if hybrid:
        swa = SlidingWindowSpec(block_size=BS, num_kv_heads=1, head_size=8, dtype=torch.float16, sliding_window=32)
        groups.append(KVCacheGroupSpec(["swa.0"], swa))
    cfg = KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=groups)
    return KVCacheManager(cfg, max_model_len=4096, scheduler_block_size=block_size, hash_block_size=BS,
                          enable_caching=True, enable_kv_cache_events=True, num_hash_lookahead_tokens=lookahead)


class Publisher:
    """A file-like sink that hands each encoded batch to vLLM's ZMQ publisher (decoded back to its Struct)."""

    def __init__(self, endpoint: str, replay: str) -> None:
        from vllm.distributed.kv_events import ZmqEventPublisher

        self.pub = ZmqEventPublisher(0, endpoint=endpoint, replay_endpoint=replay)
        self.batches = 0

    def write(self, data: bytes) -> None:
        if data == b"\n":
            return
        self.batches += 1
        if self.batches == 4:  # the first three went out before any subscriber: it must replay them
            print("READY", flush=True)
            sys.stdin.readline()
        self.pub.publish(msgspec.json.decode(data, type=KVEventBatch))


class Driver:
    """A minimal scheduler loop over the real manager: admit, prefill in one chunk, decode, free."""

    def __init__(self, mgr: KVCacheManager, hash_name: str, out: Any, lookahead: int = 0) -> None:
        self.mgr, self.out, self.ts = mgr, out, 0.0
        self.hasher = get_request_block_hasher(BS, get_hash_fn_by_name(hash_name), lookahead)
        self.enc = msgspec.json.Encoder()

    def request(self, rid: str, tokens: list[int], max_tokens: int, **kw: Any) -> Request:
        extra = kw.pop("extra_args", None)
        sp = SamplingParams(max_tokens=max_tokens, extra_args=extra)
        return Request(rid, tokens, sp, None, block_hasher=self.hasher, **kw)

    def flush(self) -> None:
        events = self.mgr.take_events()
        if events:
            self.ts += 1.0
            self.out.write(self.enc.encode(KVEventBatch(ts=self.ts, events=events, data_parallel_rank=0)))
            self.out.write(b"\n")

    def run(self, req: Request, outputs: list[int]) -> None:
        """Serve one request alone: prefill (from its prefix hit), decode ``outputs``, free."""
        blocks, hit, _ = self.mgr.get_computed_blocks(req)
        new = req.num_tokens - hit
        if self.mgr.allocate_slots(req, new, hit, blocks) is None:
            raise SystemExit("pool too small")
        req.num_computed_tokens = req.num_tokens
        self.flush()
        for t in outputs:
            req.append_output_token_ids(t)
            if self.mgr.allocate_slots(req, 1) is None:
                raise SystemExit("pool too small")
            req.num_computed_tokens = req.num_tokens
            self.flush()
        self.mgr.free(req)
        self.flush()


def scenario(name: str, out: Any) -> None:
    hash_name = "sha256_cbor" if name == "cbor" else "sha256"
    init_none_hash(get_hash_fn_by_name(hash_name))
    if name in ("clean", "cbor", "hybrid", "wide", "lookahead"):
        # wide: a hybrid whose full-attention blocks hold 32 tokens, hashed in 16-token hash blocks (the
        # sliding-window group's size); lookahead: each hash also covers the token after its block
        look = 1 if name == "lookahead" else 0
        mgr = manager(28 if name in ("hybrid", "wide") else 14, name in ("hybrid", "wide"),
                      2 * BS if name == "wide" else BS, look)
        d = Driver(mgr, hash_name, out, look)
        base = prompt(1, 3 * BS + 5)
        for i, (toks, outs) in enumerate([
                (base, [7, 8, 9]),                                   # stores 3 blocks, then a 4th while decoding
                (base + prompt(2, 20), [11]),                        # hits 3 blocks, stores its own tail
                (prompt(3, 2 * BS + 3), [5, 6]),
                (base[:2 * BS] + prompt(4, 40), [3]),                # a branch off block 2
                (prompt(5, 5 * BS + 1), [1, 2]),                     # evicts
                (prompt(6, 6 * BS + 9), [4]),                        # evicts more
                (base + prompt(2, 20), [11])]):                      # the old prefix, partly evicted
            d.run(d.request(f"r{i}", toks, len(outs)), outs)
        salted = d.request("salted", prompt(7, 2 * BS + 2), 1, cache_salt="tenant-a")
        d.run(salted, [9])
    elif name == "restore_live":
        # a fully cached, block-aligned prompt: vLLM recomputes its last block and stores that hash again
        d = Driver(manager(16, False), hash_name, out)
        toks = prompt(8, 2 * BS)
        a = d.request("a", toks, 4)
        blocks, hit, _ = d.mgr.get_computed_blocks(a)
        d.mgr.allocate_slots(a, a.num_tokens - hit, hit, blocks)
        a.num_computed_tokens = a.num_tokens
        d.flush()                                              # a holds its 2 blocks (live, stored)
        d.run(d.request("b", list(toks), 1), [3])              # b hits 1 block, recomputes block 2: stored again
        for t in (1, 2):
            a.append_output_token_ids(t)
            d.mgr.allocate_slots(a, 1)
            a.num_computed_tokens = a.num_tokens
        d.flush()
        d.mgr.free(a)
        d.flush()
        d.run(d.request("c", prompt(9, 13 * BS), 1), [4])      # evicts everything: one removal per copy
    elif name == "report_full":
        # kv_cache_report_mode="full": a prefix-cache hit is re-announced as BlockStored of live blocks
        d = Driver(manager(16, False), hash_name, out)
        base = prompt(10, 3 * BS + 4)
        d.run(d.request("a", base, 1), [5])
        d.run(d.request("b", base + [7, 7, 7], 1, extra_args={"kv_cache_report_mode": "full"}), [6])
        d.run(d.request("c", prompt(11, 14 * BS), 1), [4])     # evicts: one removal per block
    elif name == "multimodal":
        # two requests with an image placeholder (identifier "img-a", then "img-b") over blocks 1-2 of a
        # shared text prefix: the mm extra keys (identifier, offset in the block) split the hashes
        from vllm.multimodal.inputs import (  # type: ignore[import-not-found]
            MultiModalFeatureSpec,
            PlaceholderRange,
        )
        d = Driver(manager(14, False), hash_name, out)
        text = prompt(12, 4 * BS + 3)
        for i, ident in enumerate(("img-a", "img-b", "img-a")):
            mm = [MultiModalFeatureSpec(data=None, modality="image", identifier=ident,
                                        mm_position=PlaceholderRange(offset=BS + 5, length=20))]
            d.run(d.request(f"m{i}", list(text), 1, mm_features=mm), [2])
    elif name.startswith("bulk:"):
        # N requests drawn from a tree of shared prefixes (for measuring, not committed)
        d = Driver(manager(2048, False), hash_name, out)
        prompts: list[list[int]] = []
        for i in range(int(name[5:])):
            x = (i * 7919) % 101
            base = prompts[x % len(prompts)] if prompts and x < 80 else []
            keep = base[:(x * 13) % (len(base) + 1)]
            toks = keep + prompt(1000 + i, 40 + (x * 37) % 400)
            prompts.append(toks)
            d.run(d.request(f"q{i}", toks, 2), [1, 2])
    else:
        raise SystemExit(f"unknown scenario {name}")


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--publish":
        sink = Publisher(sys.argv[2], sys.argv[3])
        scenario("clean", sink)
        sys.stdin.read()  # serve replays until the caller closes stdin
        sink.pub.shutdown()
        raise SystemExit(0)
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    with open(sys.argv[2], "wb") as f:
        scenario(sys.argv[1], f)
    print(f"{sys.argv[2]}: vLLM {__import__('vllm').__version__}, none-hash seed "
          f"{kv_cache_utils.get_none_hash_seed()!r}")
