"""The vLLM driver's hybrid part: several KV cache groups (``--kv-groups``), run in the engine's venv.

Loaded by ``driver.py`` from its own folder (never imported by kvsim; it imports only vLLM, torch and the
standard library). It builds the hand-made ``KVCacheConfig`` of the groups kvsim asked for -- one
``FullAttentionSpec``, ``SlidingWindowSpec`` or ``MambaSpec`` (``mamba_cache_mode="align"``: the mode vLLM's
prefix caching needs for state groups) per group, all sharing one block pool, as vLLM's
``HybridKVCacheCoordinator`` drives them -- and reports, per step:

* ``tables``: every scheduled request's block table in every group as the step's forward reads it (after
  ``schedule()``), as changes ``[group, request, first changed slot, block ids from there]`` against what
  was last sent (0 is vLLM's null block: a slot a sliding window dropped, a state the Mamba manager skipped);
* ``writes``: Mamba state blocks a forward exports beyond its frontier (none in this configuration: internal
  prefill checkpoints need ``num_prefill_checkpoint_blocks``, left at 0);
* ``paths``: per-group engine paths (``gN.<path>``) counted from the tables and thin wrappers;
* at probe steps, each group's count of hash entries in the pool's cached-block map (``cached``).

The judge reads the tables, never vLLM's objects.
"""

import math
from typing import Any

# per-group paths by kind (names shared with kvsim's sim.peers.vllm.paths GROUP_PATHS)
GROUP_PATHS = {"full": ("hit", "eviction"),
               "sliding": ("hit", "hit_beyond_window", "window_drop", "eviction"),
               "mamba": ("hit", "partial_hit", "state_free", "cow", "eviction")}
COORDINATOR_PATHS = ("hit_lowered",)


def kv_cache_groups(groups: list) -> list:
    """One KVCacheGroupSpec per group, layers named apart."""
    import torch
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheGroupSpec, MambaSpec, SlidingWindowSpec

    out = []
    for i, g in enumerate(groups):
        bs = g["block_size"]
        if g["kind"] == "full":
            spec: Any = FullAttentionSpec(block_size=bs, num_kv_heads=1, head_size=1, dtype=torch.float16)
            layer = f"model.layers.{i}.self_attn.attn"
        elif g["kind"] == "sliding":
            spec = SlidingWindowSpec(block_size=bs, num_kv_heads=1, head_size=1, dtype=torch.float16,
                                     sliding_window=g["window"])
            layer = f"model.layers.{i}.self_attn.attn"
        else:
            spec = MambaSpec(block_size=bs, shapes=((1,),), dtypes=(torch.float16,), mamba_cache_mode="align")
            layer = f"model.layers.{i}.mixer"
        out.append(KVCacheGroupSpec([layer], spec))
    return out


def sizes(groups: list) -> tuple[int, int]:
    """(scheduler block size, hash block size): the LCM and the GCD of the groups' block sizes."""
    bss = [g["block_size"] for g in groups]
    return math.lcm(*bss), math.gcd(*bss)


def has_mamba(groups: list) -> bool:
    return any(g["kind"] == "mamba" for g in groups)


class Tables:
    """The last table of every (group, request) sent to kvsim, and the per-group path counters."""

    def __init__(self, sched: Any, groups: list) -> None:
        self.sched = sched
        self.groups = groups
        self.coord = sched.kv_cache_manager.coordinator
        self.managers = self.coord.single_type_managers
        self.sent: list[dict[str, list[int]]] = [{} for _ in groups]
        self.primary = next(i for i, g in enumerate(groups) if g["kind"] == "full")
        self.touched: set[str] = set()  # requests whose tables vLLM trimmed in this step (remove_skipped_blocks)
        self.n: dict[str, int] = {}
        for i, g in enumerate(groups):
            for p in GROUP_PATHS[g["kind"]]:
                self.n[f"g{i}.{p}"] = 0
        for p in COORDINATOR_PATHS:
            self.n[p] = 0
        self._wrap()

    def _wrap(self) -> None:
        """Count, class-level in this process: a coordinator hit some group lowered, evictions per group, and
        Mamba copy-on-write redirects."""
        from vllm.v1.core import block_pool as bp
        from vllm.v1.core import kv_cache_coordinator as kc
        from vllm.v1.core import single_type_kv_cache_manager as st
        from vllm.v1.core.kv_cache_utils import get_group_id

        n = self.n
        touched = self.touched
        skip = kc.KVCacheCoordinator.remove_skipped_blocks

        def skip_noted(self_: Any, request_id: str, *args: Any, **kw: Any) -> None:
            touched.add(request_id)  # its table may change although the step does not schedule it
            skip(self_, request_id, *args, **kw)
        kc.KVCacheCoordinator.remove_skipped_blocks = skip_noted

        find = kc.HybridKVCacheCoordinator.find_longest_cache_hit

        def find_counted(self_: Any, *args: Any, **kw: Any) -> Any:
            out = find(self_, *args, **kw)
            if out[2] > 0:
                n["hit_lowered"] += 1
            return out
        kc.HybridKVCacheCoordinator.find_longest_cache_hit = find_counted

        evict = bp.BlockPool._maybe_evict_cached_block

        def evict_counted(self_: Any, block: Any) -> bool:
            key = block.block_hash
            done = evict(self_, block)
            if done and key is not None:
                name = f"g{get_group_id(key)}.eviction"
                if name in n:
                    n[name] += 1
            return done
        bp.BlockPool._maybe_evict_cached_block = evict_counted

        cow = st.SingleTypeKVCacheManager._apply_cow

        def cow_counted(self_: Any, *args: Any, **kw: Any) -> None:
            name = f"g{self_.kv_cache_group_id}.cow"
            if name in n:
                n[name] += 1
            cow(self_, *args, **kw)
        st.SingleTypeKVCacheManager._apply_cow = cow_counted
        move = bp.BlockPool.move_block_hashes

        def move_counted(self_: Any, source: Any, *args: Any, **kw: Any) -> Any:
            if source.block_hash is not None:
                name = f"g{get_group_id(source.block_hash)}.cow"
                if name in n:
                    n[name] += 1
            return move(self_, source, *args, **kw)
        bp.BlockPool.move_block_hashes = move_counted

    def take(self, rids: list[str], new: dict[str, int]) -> list[list]:
        """The table changes of the scheduled requests ``rids`` since the last call; ``new`` maps each request
        first scheduled (or resumed) in this step to its hit, for the hit paths."""
        out: list[list] = []
        n = self.n
        touched, self.touched = self.touched, set()
        rids = rids + sorted(touched.difference(rids).intersection(self.managers[self.primary].req_to_blocks))
        for g, mgr in enumerate(self.managers):
            kind = self.groups[g]["kind"]
            bs = self.groups[g]["block_size"]
            sent = self.sent[g]
            for rid in rids:
                now = [b.block_id for b in mgr.req_to_blocks.get(rid, ())]
                old = sent.get(rid, [])
                if rid in new:
                    old = []
                    hit = new[rid]
                    if hit:
                        covered = [b for b in now[: -(-hit // bs)] if b]
                        if covered:
                            n[f"g{g}.hit"] += 1
                            if kind == "sliding" and now and now[0] == 0:
                                n[f"g{g}.hit_beyond_window"] += 1
                            if kind == "mamba" and hit % bs:
                                n[f"g{g}.partial_hit"] += 1
                k = 0
                m = min(len(now), len(old))
                while k < m and now[k] == old[k]:
                    k += 1
                if k == len(now) == len(old):
                    continue
                dropped = sum(1 for i in range(k, m) if old[i] and not now[i])
                if dropped:
                    if kind == "sliding":
                        n[f"g{g}.window_drop"] += dropped
                    elif kind == "mamba":
                        n[f"g{g}.state_free"] += dropped
                out.append([g, rid, k, now[k:]])
                sent[rid] = now
        return out

    @staticmethod
    def first_scheduled(so: Any) -> dict[str, int]:
        """Requests first scheduled or resumed in this step, with the computed tokens they start from."""
        out = {n.req_id: n.num_computed_tokens for n in so.scheduled_new_reqs}
        cr = so.scheduled_cached_reqs
        for rid, c in zip(cr.req_ids, cr.num_computed_tokens):
            if rid in cr.resumed_req_ids:
                out[rid] = c
        return out

    def section(self, tables: list, msg: dict, pool: Any) -> dict:
        """The step's ``groups`` section: the table changes, and the pool's counts moved out of the step's own
        fields (they count every group's blocks: kvsim's group judge accounts them, not the one-group checks);
        at a probe step each group's cached hash entries too (their cost is the probe's)."""
        import time
        sec: dict = {"tables": tables, "free": msg.pop("free_blocks"), "cached_all": msg.pop("cached_blocks")}
        if "probe" in msg:
            t0 = time.perf_counter()
            sec["probe"] = msg.pop("probe")
            sec["cached"] = self.cached_per_group(pool)
            msg["probe_s"] = msg.get("probe_s", 0.0) + time.perf_counter() - t0
        return sec

    def forget(self, rids: list[str]) -> None:
        """Requests finished or preempted: their tables are gone (a resumed request is sent whole again)."""
        for sent in self.sent:
            for rid in rids:
                sent.pop(rid, None)

    def take_paths(self) -> dict:
        out = {k: v for k, v in self.n.items() if v}
        for k in out:
            self.n[k] = 0
        return out

    def cached_per_group(self, pool: Any) -> list[int]:
        """Hash entries of the pool's cached-block map per group (O(entries): probe steps only)."""
        from vllm.v1.core.kv_cache_utils import get_group_id
        counts = [0] * len(self.groups)
        for key in pool.cached_block_hash_to_block._cache:
            counts[get_group_id(key)] += 1
        return counts
