"""Write KV-event logs of SGLang's real radix cache (run with the SGLang venv's python, never kvsim's).

Drives ``sglang.srt.mem_cache.radix_cache.RadixCache`` (built by its own ``create_simulated`` with KV
events on, a page size P and a small allocator standing in for the KV pool: it hands out and takes back
page-aligned slot indices) with the scheduler's calls -- ``match_prefix``, ``inc_lock_ref``, ``evict`` when
the pool is short, ``insert`` of the computed prompt, ``dec_lock_ref`` at the finish -- and writes each
request's ``kv_events.take()`` as one ``KVEventBatch`` encoded by SGLang's own msgspec Structs (JSON, the
native object-event form). The first batch holds the cache's own ``AllBlocksCleared`` (its reset at
construction). Prompts are fixed token lists: the same SGLang gives the same bytes.

    TORCH_EXTENSIONS_DIR=DIR VENV/bin/python sglang_events.py PAGE_SIZE OUT.jsonl [--clear-only | --bulk=N]

SGLang imports every model config at import time, and two of those import torchvision, which PyPI's
build cannot load beside CPU torch: a stand-in ``torchvision`` (an import hook serving empty modules, no
distribution metadata, so transformers does not detect it) satisfies those imports.
Imports only SGLang, torch and the standard library.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import tempfile
import types
from array import array
from pathlib import Path


class _Anything(type):
    """A class whose every attribute is itself: enough for module-level ``T.InterpolationMode.X`` tables."""

    def __getattr__(cls, name: str) -> type:
        return cls


class _StandIn(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves ``torchvision`` and every submodule as an empty package whose attributes are stand-in classes."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if name == "torchvision" or name.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        mod = types.ModuleType(spec.name)
        mod.__path__ = []
        mod.__version__ = "0.0.0"  # type: ignore[attr-defined]
        mod.__getattr__ = lambda attr: _Anything(attr, (), {})  # type: ignore[method-assign]
        return mod

    def exec_module(self, module: types.ModuleType) -> None:
        return None


sys.meta_path.insert(0, _StandIn())
os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(Path(tempfile.gettempdir()) / "kvsim-sglang-ext"))

import msgspec  # noqa: E402
import torch  # type: ignore[import-not-found]  # noqa: E402
from sglang.srt.disaggregation.kv_events import KVEventBatch  # type: ignore[import-not-found]  # noqa: E402
from sglang.srt.mem_cache.base_prefix_cache import EvictParams, InsertParams, MatchPrefixParams  # type: ignore[import-not-found]  # noqa: E402
from sglang.srt.mem_cache.radix_cache import RadixCache, RadixKey  # type: ignore[import-not-found]  # noqa: E402


def prompt(seed: int, n: int) -> list[int]:
    """n token ids from a small LCG keyed by seed (ids in 1..31999)."""
    x, out = seed * 2654435761 % 2**32, []
    for _ in range(n):
        x = (1103515245 * x + 12345) % 2**31
        out.append(1 + x % 31999)
    return out


class Pool:
    """Slot indices 1..size, handed out and taken back (what RadixCache.evict frees)."""

    device = "cpu"

    def __init__(self, size: int) -> None:
        self.free = list(range(size, 0, -1))

    def alloc(self, n: int) -> torch.Tensor:
        if len(self.free) < n:
            raise SystemExit("pool too small")
        return torch.tensor([self.free.pop() for _ in range(n)], dtype=torch.int64)

    def free_segment(self, value: torch.Tensor, start_pos: int = 0) -> None:
        self.free.extend(int(v) for v in value[start_pos:])

    def available_size(self) -> int:
        return len(self.free)


def serve(cache: RadixCache, pool: Pool, tokens: list[int], page: int) -> None:
    """One request: match, lock, evict what the new part needs, compute, insert, unlock."""
    key = RadixKey(array("q", tokens))
    m = cache.match_prefix(MatchPrefixParams(key=key))
    node, hit = m.last_device_node, m.device_prefix_len
    cache.inc_lock_ref(node)
    need = len(tokens) - hit
    if pool.available_size() < need:
        cache.evict(EvictParams(num_tokens=need - pool.available_size()))
    value = torch.cat([cache.path_device_indices(node), pool.alloc(need)]) if hit else pool.alloc(need)
    aligned = len(tokens) // page * page
    res = cache.insert(InsertParams(key=RadixKey(array("q", tokens[:aligned])), value=value[:aligned]))
    dup = value[hit:res.prefix_len] if res.prefix_len > hit else None
    if dup is not None and len(dup):
        pool.free_segment(dup)  # slots the tree already held (computed twice): given back, as the scheduler does
    pool.free_segment(value[aligned:])
    cache.dec_lock_ref(node)


def main(page: int, out_path: str, clear_only: bool, bulk: int = 0) -> None:
    pool = Pool(12 * 16 if not bulk else 32768)
    cache = RadixCache.create_simulated(mock_allocator=pool, page_size=page, enable_kv_cache_events=True)
    enc = msgspec.json.Encoder()
    with open(out_path, "wb") as out:
        ts = 0.0

        def flush() -> None:
            nonlocal ts
            events = cache.kv_events.take()
            if events:
                ts += 1.0
                out.write(enc.encode(KVEventBatch(ts=ts, events=events, attn_dp_rank=0)) + b"\n")

        if bulk:
            prompts: list[list[int]] = []
            for i in range(bulk):
                x = (i * 7919) % 101
                base_ = prompts[x % len(prompts)] if prompts and x < 80 else []
                toks = base_[:(x * 13) % (len(base_) + 1)] + prompt(1000 + i, 40 + (x * 37) % 400)
                prompts.append(toks)
                serve(cache, pool, toks, page)
                flush()
            return
        base = prompt(1, 3 * 16 + 5)
        requests = [base, base + prompt(2, 20), prompt(3, 2 * 16 + 3), base[:2 * 16] + prompt(4, 40)]
        if not clear_only:
            requests += [prompt(5, 5 * 16 + 1), prompt(6, 6 * 16 + 9), base + prompt(2, 20)]
        else:
            requests = requests[:1]
        for toks in requests:
            serve(cache, pool, toks, page)
            flush()
    print(f"{out_path}: SGLang {__import__('sglang').__version__}, page size {page}")


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        raise SystemExit(__doc__)
    extra = sys.argv[3:]
    main(int(sys.argv[1]), sys.argv[2], extra == ["--clear-only"],
         int(extra[0][7:]) if extra and extra[0].startswith("--bulk=") else 0)
