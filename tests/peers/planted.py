"""Plant a bug into a real engine at run time, never into its venv: a ``sitecustomize`` module in a temporary
folder put on PYTHONPATH (the driver inherits kvsim's environment) installs an import hook that runs the
engine module as usual, then replaces one function. The shared engine venvs stay untouched."""

from __future__ import annotations

import textwrap
from pathlib import Path

HOOK = '''
import importlib.abc, importlib.util, sys

TARGET = {target!r}


def patch(mod):
{patch}


class _Loader(importlib.abc.Loader):
    def __init__(self, real):
        self.real = real

    def create_module(self, spec):
        return self.real.create_module(spec)

    def exec_module(self, module):
        self.real.exec_module(module)
        patch(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        spec.loader = _Loader(spec.loader)
        return spec


sys.meta_path.insert(0, _Finder())
'''


def plant(folder: Path, target: str, patch: str) -> str:
    """Write the hook into ``folder``; returns the PYTHONPATH entry. ``patch`` is the body of ``patch(mod)``,
    ``mod`` being the imported ``target`` module."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(HOOK.format(target=target, patch=textwrap.indent(patch.strip(), "    ")))
    return str(folder)


# vLLM: a finished request's blocks go back head first (the reversal dropped), so its shared prefix blocks are
# evicted before its private tail (single_type_kv_cache_manager.free)
VLLM_HEAD_FIRST = ("vllm.v1.core.single_type_kv_cache_manager", """
def free(self, request_id):
    self.block_pool.free_blocks(self.pop_blocks_for_free(request_id))
mod.SingleTypeKVCacheManager.free = free
""")
# vLLM: freed cached blocks go to the queue's head instead of its tail (block_pool.free_blocks prepends all)
VLLM_CACHED_TO_HEAD = ("vllm.v1.core.block_pool", """
real = mod.BlockPool.free_blocks
def free_blocks(self, ordered_blocks):
    blocks = [b for b in ordered_blocks if not b.is_null]
    for b in blocks:
        b.ref_cnt -= 1
    self.free_block_queue.prepend_n([b for b in blocks if b.ref_cnt == 0])
mod.BlockPool.free_blocks = free_blocks
""")
# SGLang: the eviction heap keyed by the negated access time -- most recently used first (evict_policy.py)
SGLANG_MRU = ("sglang.srt.mem_cache.evict_policy", """
mod.LRUStrategy.get_priority = lambda self, node: -node.last_access_time
""")
