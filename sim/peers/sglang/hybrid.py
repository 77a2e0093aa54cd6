"""The SGLang driver's observation of its hybrid cache (``--kv-groups``), run in the engine's venv (never imported by
kvsim; it imports only SGLang, torch and the standard library). Loaded by ``driver.py`` beside ``unified.py``.

Two jobs, one class each:

* ``Model`` plays the forward on the Mamba state pool (SGLang's model runner is not run): before an extend it runs
  the runner's own deferred copy-on-write and clear (``ModelRunner._maybe_execute_deferred_mamba_cow_and_clear``),
  then for every row it reads the state the kernel would read -- the request's slot,
  ``req_index_to_mamba_index_mapping`` -- and writes the state after the forward there, and, with the
  ``extra_buffer`` strategy, the tracked states into ``mamba_track_indices`` as the kernels pick them (an extend
  row: the final state when the tracked length is a whole number of state chunks past the prefix, else the state
  at the last chunk boundary; a decode row: the final state). A state is a *tag*, an integer written into the SSM
  tensor, so SGLang's own copies (copy-on-write, donation to the tree, ping-pong slots) carry it; each tag written
  is reported with the request and token count it stands for, each read with the position it was read at.
* ``Observer`` reports every scheduled request's table in every group as the forward reads it (full pages, the SWA
  pages through ``full_to_swa_index_mapping`` -- 0 where the window dropped them -- and the Mamba slots a request
  holds), the changes the result processing made (``after``), each pool's free slots and the slots only the tree
  holds (``pools``), the Mamba states published into the tree (a wrapper on ``UnifiedRadixCache.insert``, the
  cache's Python method under either tree core), and the per-group paths.

Block ids are disjoint across pools: full pages ``1 .. P``, SWA pages ``P + 1 + page``, Mamba slots
``P + S + 2 + slot``.
"""

from typing import Any

# per-group paths by kind (names shared with kvsim's sim.peers.sglang.paths GROUP_PATHS)
GROUP_PATHS = {"full": ("hit", "eviction"),
               "sliding": ("hit", "hit_beyond_window", "window_drop", "eviction"),
               "mamba": ("hit", "cow", "checkpoint", "track", "eviction")}
BASE_PATHS = ("whole_prompt_hit", "second_copy", "hit_lowered", "preemption", "clear_cache")


def runner_method(name: str) -> Any:
    """A method of SGLang's ``ModelRunner`` compiled alone from ``model_executor/model_runner.py`` (its own file name,
    so a traceback names SGLang's lines) in a namespace holding the names it uses."""
    import ast
    import os

    import sglang
    from sglang.srt.mem_cache.memory_pool import HybridReqToTokenPool
    path = os.path.join(os.path.dirname(sglang.__file__), "srt", "model_executor", "model_runner.py")
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelRunner")
    fn = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name)
    fn.decorator_list = []
    future = ast.ImportFrom(module="__future__", names=[ast.alias(name="annotations")], level=0)
    module = ast.Module(body=[future, fn], type_ignores=[])
    ast.fix_missing_locations(module)
    ns: dict = {"HybridReqToTokenPool": HybridReqToTokenPool}
    exec(compile(module, path, "exec"), ns)  # noqa: S102 -- SGLang's own method, from its installed source
    return ns[name]


class Model:
    """The forward's state reads and writes on the Mamba pool, as tags."""

    def __init__(self, eng: Any) -> None:
        self.eng = eng
        self.on = bool(eng.plan["mamba"])
        self.tag = 0
        self.writes: list[list] = []   # [tag, request, tokens]
        self.reads: list[list] = []    # [request, tokens before the forward, tag read]
        self.track = 0
        self.cow = 0                   # hits whose state was copied from a tree node into the request's slot
        if self.on:
            temporal = eng.rtp.mamba_pool.mamba_cache.temporal
            self.cell = temporal.view(temporal.shape[0], temporal.shape[1], -1)
            self.chunk = eng.plan["mamba"]

    @property
    def cow_and_clear(self) -> Any:
        """``ModelRunner._maybe_execute_deferred_mamba_cow_and_clear``, SGLang's own code compiled from its source
        file (importing ``model_runner`` needs the serving stack: uvicorn, fastapi, opentelemetry)."""
        fn = getattr(self, "_cow_and_clear", None)
        if fn is None:
            fn = self._cow_and_clear = runner_method("_maybe_execute_deferred_mamba_cow_and_clear")
        return fn

    def _slot(self, req: Any) -> int:
        rtp = self.eng.rtp
        idx = rtp.req_index_to_mamba_index_mapping[req.kv.req_pool_idx:req.kv.req_pool_idx + 1]
        return int(rtp.translate_mamba_indices(idx)[0])

    def _put(self, slot: int, rid: str, t: int) -> int:
        self.tag += 1
        self.cell[0, slot, 0] = float(self.tag)
        self.writes.append([self.tag, rid, t])
        return self.tag

    def read(self, slot: int) -> int:
        return int(self.cell[0, slot, 0].item())

    def forward(self, batch: Any, kind: str) -> None:
        """The states this forward reads and writes (``kind``: extend | decode)."""
        if not self.on:
            return
        rtp = self.eng.rtp
        if kind == "extend":
            runner = type("Runner", (), {"req_to_token_pool": rtp, "is_draft_worker": False})()
            fb = type("Fwd", (), {})()
            fb.forward_mode = batch.forward_mode
            fb.mamba_clear_indices = batch.mamba_clear_indices
            fb.mamba_cow_src_indices = batch.mamba_cow_src_indices
            fb.mamba_cow_dst_indices = batch.mamba_cow_dst_indices
            if batch.mamba_cow_src_indices is not None:
                self.cow += int(batch.mamba_cow_src_indices.numel())
            self.cow_and_clear(runner, fb)
        track = None
        if self.eng.extra_buffer and batch.mamba_track_indices is not None:
            dst = rtp.translate_mamba_indices(batch.mamba_track_indices).tolist()
            mask = batch.mamba_prefill_track_mask_cpu if kind == "extend" else batch.mamba_track_mask_cpu
            track = (dst, mask, batch.mamba_track_seqlens_cpu if kind == "extend" else None)
        for i, r in enumerate(batch.reqs):
            if kind == "extend":
                c0, c1 = r.prefix_len, r.extend_end
            else:
                c1 = int(batch.seq_lens_cpu[i])
                c0 = c1 - 1
            slot = self._slot(r)
            self.reads.append([r.rid, c0, self.read(slot)])
            final = self._put(slot, r.rid, c1)
            if track is None or not track[1] or not track[1][i]:
                continue
            self.track += 1
            dst = track[0][i]
            if kind == "decode":
                self.cell[0, dst, 0] = float(final)
                continue
            lens = int(track[2][i]) - c0  # type: ignore[index]
            if lens % self.chunk == 0:
                self.cell[0, dst, 0] = float(final)
            else:
                self._put(dst, r.rid, c0 + lens // self.chunk * self.chunk)

    def take(self) -> dict:
        out = {"reads": self.reads, "writes": self.writes}
        self.reads, self.writes = [], []
        return out


CURRENT: list = [None]   # the observer of the trial running in this process
WRAPPED: list = []       # the class-level wrappers, installed once per process (several trials run in one)


def wrap() -> None:
    """Thin wrappers, class-level in this process, reporting to the current trial's observer: the request being
    checkpointed, the Mamba state each insert hands the tree, each match a component lowered, each eviction per
    component."""
    from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache as U
    checkpoint, insert, evict, match = U.checkpoint_into_tree, U.insert, U._evict, U._match_tree

    def checkpoint_noted(self_: Any, req: Any, *a: Any, **k: Any) -> None:
        obs = CURRENT[0]
        obs.current = req
        try:
            checkpoint(self_, req, *a, **k)
        finally:
            obs.current = None

    def insert_noted(self_: Any, params: Any) -> Any:
        obs = CURRENT[0]
        value = getattr(params, "mamba_value", None)
        tag = obs.model.read(int(value.view(-1)[0])) if value is not None and obs.model.on else None
        res = insert(self_, params)
        if tag is not None and not res.mamba_exist and obs.current is not None:
            obs.published.append([tag, obs.current.rid, len(params.key)])
            obs.n[f"g{obs.g('mamba')}.checkpoint"] += 1
        return res

    def evict_noted(self_: Any, params: Any, *a: Any, **k: Any) -> Any:
        obs = CURRENT[0]
        res = evict(self_, params, *a, **k)
        for kind, got in (("full", res.num_tokens_evicted), ("sliding", res.swa_num_tokens_evicted),
                          ("mamba", res.mamba_num_evicted)):
            g = obs.g(kind)
            if g >= 0 and got:
                obs.n[f"g{g}.eviction"] += got
        return res

    def match_noted(self_: Any, params: Any) -> Any:
        res = match(self_, params)
        if res.full_kv_hit_length > res.device_prefix_len + res.host_hit_length:
            CURRENT[0].n["hit_lowered"] += 1
        return res
    U.checkpoint_into_tree, U.insert = checkpoint_noted, insert_noted
    U._evict, U._match_tree = evict_noted, match_noted


class Observer:
    """Per-group tables, pools, publications and paths of one run."""

    def __init__(self, eng: Any, groups: list, model: Model) -> None:
        self.eng = eng
        self.groups = groups
        self.model = model
        self.kinds = [g["kind"] for g in groups]
        self.sent: list[dict[str, list[int]]] = [{} for _ in groups]
        self.swa_off = eng.pages + 1
        self.mamba_off = eng.pages + eng.swa_pages + 2
        self.n = {p: 0 for p in BASE_PATHS}
        for i, g in enumerate(groups):
            for p in GROUP_PATHS[g["kind"]]:
                self.n[f"g{i}.{p}"] = 0
        self.published: list[list] = []   # [tag, request, tokens] of each state the tree took
        self.current: Any = None           # the request being checkpointed
        CURRENT[0] = self
        if not WRAPPED:
            WRAPPED.append(True)
            wrap()

    def g(self, kind: str) -> int:
        return self.kinds.index(kind) if kind in self.kinds else -1

    # -- tables ----------------------------------------------------------------------------------------------------
    def table(self, g: int, r: Any) -> list[int]:
        """Request ``r``'s table in group ``g`` as the forward reads it."""
        e = self.eng
        kind = self.kinds[g]
        if not r.kv.holds_kv and kind != "mamba":
            return []
        if kind == "mamba":
            slots = []
            if r.kv.holds_mamba:
                slots.append(int(r.kv.mamba_pool_idx))
            buf = getattr(r.kv, "mamba_ping_pong_track_buffer", None)
            if buf is not None:
                slots += [int(x) for x in buf.view(-1).tolist()]
            return [self.mamba_off + s for s in slots]
        ps = e.ps
        n = r.kv.kv_allocated_len
        starts = e.rtp.req_to_token[r.kv.req_pool_idx, :n:ps].to(e.torch.int64)
        if kind == "full":
            return (starts // ps).tolist()
        swa = e.alloc.full_to_swa_index_mapping[starts] // ps
        return [int(p) + self.swa_off if p > 0 else 0 for p in swa.tolist()]

    def changes(self, reqs: list, fresh: set[str]) -> list[list]:
        """Table changes of ``reqs`` since last sent (``fresh``: requests whose tables start anew)."""
        out: list[list] = []
        for g in range(len(self.groups)):
            sent = self.sent[g]
            for r in reqs:
                now = self.table(g, r)
                old = [] if r.rid in fresh else sent.get(r.rid, [])
                k, m = 0, min(len(now), len(old))
                while k < m and now[k] == old[k]:
                    k += 1
                if k == len(now) == len(old) and r.rid not in fresh:
                    continue
                if self.kinds[g] == "sliding":
                    self.n[f"g{g}.window_drop"] += sum(1 for i in range(k, m) if old[i] and not now[i])
                out.append([g, r.rid, k, now[k:]])
                sent[r.rid] = now
        return out

    def hit(self, r: Any, hit: int) -> None:
        """Paths of a request first scheduled with ``hit`` tokens."""
        if not hit:
            return
        for g, kind in enumerate(self.kinds):
            t = self.sent[g].get(r.rid, [])
            if kind == "mamba":
                self.n[f"g{g}.hit"] += 1
                continue
            self.n[f"g{g}.hit"] += 1
            if kind == "sliding" and t and not t[0]:
                self.n[f"g{g}.hit_beyond_window"] += 1

    def forget(self, rids: list[str]) -> None:
        for sent in self.sent:
            for rid in rids:
                sent.pop(rid, None)

    # -- pools -----------------------------------------------------------------------------------------------------
    def pools(self, live: list) -> list[list]:
        """``[group, free slots, slots only the tree holds, usable]`` per pool: the allocator's free slots, and the
        tree's values (full pages, their SWA peers, Mamba slots) no live request's table names (tensor set ops)."""
        e = self.eng
        torch = e.torch
        ps = e.ps
        empty = torch.empty((0,), dtype=torch.int64)
        rows = [e.rtp.req_to_token[r.kv.req_pool_idx, :r.kv.kv_allocated_len:ps].to(torch.int64)
                for r in live if r.kv.holds_kv]
        starts = torch.cat(rows) if rows else empty          # the page-start tokens live requests name
        tree_full = e.tree.all_values_flatten().to(torch.int64)
        tree_starts = tree_full[tree_full % ps == 0]
        out = []
        for g, kind in enumerate(self.kinds):
            if kind == "full":
                free = (e.alloc.full_available_size() if e.plan["window"] else e.alloc.available_size()) // ps
                held, named, usable = torch.unique(tree_starts // ps), torch.unique(starts // ps), e.pages
            elif kind == "sliding":
                free = e.alloc.swa_available_size() // ps
                mapping = e.alloc.full_to_swa_index_mapping
                held, named = mapping[tree_starts] // ps, mapping[starts] // ps
                held, named, usable = torch.unique(held[held > 0]), torch.unique(named[named > 0]), e.swa_pages
            else:
                free = e.rtp.mamba_allocator.available_size()
                held = torch.unique(e.tree.all_mamba_values_flatten().view(-1).to(torch.int64))
                slots = [b - self.mamba_off for r in live for b in self.table(g, r)]
                named, usable = torch.tensor(sorted(set(slots)), dtype=torch.int64), e.mamba_slots
            out.append([g, free, int(torch.isin(held, named, invert=True).sum()), usable])
        return out

    def probe(self) -> dict:
        """The tree's own counters per component against its values (tokens; Mamba: slots)."""
        e = self.eng
        t = e.tree
        full = int(e.tree.all_values_flatten().numel())
        out = {"core": e.core, "full": [t.full_evictable_size(), t.full_protected_size(), full]}
        if e.plan["window"]:
            mapping = e.alloc.full_to_swa_index_mapping[e.tree.all_values_flatten().to(e.torch.int64)]
            out["sliding"] = [t.swa_evictable_size(), t.swa_protected_size(), int((mapping > 0).sum())]
        if e.plan["mamba"]:
            out["mamba"] = [t.mamba_evictable_size(), t.mamba_protected_size(),
                            int(e.tree.all_mamba_values_flatten().numel())]
        return out

    def take_paths(self) -> dict:
        out = {k: v for k, v in self.n.items() if v}
        for k in out:
            self.n[k] = 0
        g = self.g("mamba")
        for name in ("track", "cow"):
            got = getattr(self.model, name)
            if got:
                out[f"g{g}.{name}"] = out.get(f"g{g}.{name}", 0) + got
                setattr(self.model, name, 0)
        return out

    def take_published(self) -> list[list]:
        out, self.published = self.published, []
        return out
