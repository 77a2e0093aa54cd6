"""The SGLang driver's hybrid part: SGLang's own ``UnifiedRadixCache`` (FULL + SWA + Mamba components) driven by
SGLang's own scheduler pieces, run in the engine's venv (never imported by kvsim; it imports only SGLang, torch
and the standard library). Loaded by ``driver.py`` from its own folder for a ``--kv-groups`` or
``--offload-blocks`` run.

What is SGLang's here, and what the driver plays:

* construction as ``kv_cache_configurator`` and ``registry.create_unified_radix_cache`` do it on CPU tensors: the
  process-wide ``ServerArgs`` published (page size, chunked prefill, the Mamba strategy), ``SWAKVPool`` with
  ``SWATokenToKVPoolAllocator`` (SWA pool ``swa_full_tokens_ratio`` 0.8 of the full one) for a sliding group,
  ``HybridReqToTokenPool`` with its ``MambaPool`` and ``HybridLinearKVPool`` for a state group, and the cache with
  ``tree_components`` FULL (+ SWA) (+ MAMBA) on SGLang's default tree core (Rust; ``SGLANG_UNIFIED_RADIX_TREE_CORE_
  BACKEND=python`` selects the Python one);
* the scheduler's loop (``Scheduler.get_next_batch_to_run`` without overlap): the chunked request checkpointed
  (``stash_chunked_request``), the last prefill batch merged into the running one, a new prefill batch from the
  real ``PrefillAdder`` (``init_next_round_input`` matches and copy-on-writes the Mamba state, ``add_one_req``
  locks), ``ScheduleBatch.init_new`` + ``prepare_for_extend``; else the running batch's ``prepare_for_decode``
  (``retract_decode`` when ``check_decode_mem`` fails, or every N decode forwards under SGLang's own test knob
  ``SGLANG_TEST_RETRACT=1 SGLANG_TEST_RETRACT_INTERVAL=N``); admission reserves output by the scheduler's own
  ``NewTokenRatioTracker`` (decayed per decode, reset by a retraction's estimate); the result through SGLang's own
  ``SchedulerBatchResultProcessor`` (``checkpoint_kv_cache`` / ``release_kv_cache``);
* the model: ``hybrid.Model`` (the forward's deferred Mamba copy-on-write and clear, the states it reads and
  writes, tracked as tags in the state tensors).

A CPU-only shim: ``prepare_for_decode`` pins its Mamba track mask (``track_mask_cpu.pin_memory()``), which torch
refuses without an accelerator ("Cannot access accelerator device when none is available"); ``Tensor.pin_memory``
returns the tensor itself here (pinning is a transfer-speed hint; contents are the same).
"""

import os
import types
from array import array
from typing import Any

CHUNK_TOKENS = 512          # SGLang's chunked_prefill_size in these runs (prompts of the stress workloads are longer)
MAX_RUNNING = 16            # max_running_requests: request rows, and the Mamba pool's sizing
SWA_RATIO = 0.8             # swa_full_tokens_ratio's fallback
MAMBA_RATIO = 3             # MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO
VOCAB = 151936


def group_plan(groups: list) -> dict:
    """The cache the groups ask for: page size, sliding window, Mamba chunk and strategy. Raises ValueError (a
    setup SGLang cannot build: exit 2) where SGLang has no such configuration."""
    full = [g for g in groups if g["kind"] == "full"]
    swa = [g for g in groups if g["kind"] == "sliding"]
    mamba = [g for g in groups if g["kind"] == "mamba"]
    if len(full) != 1 or len(swa) > 1 or len(mamba) > 1:
        raise ValueError("SGLang's unified cache has one FULL component and at most one SWA and one Mamba component")
    ps = full[0]["block_size"]
    if swa and swa[0]["block_size"] != ps:
        raise ValueError(f"SGLang pages the SWA pool in step with the full one: sliding block {swa[0]['block_size']} "
                         f"must equal the full block {ps}")
    plan = {"page": ps, "window": swa[0]["window"] if swa else None, "mamba": None, "strategy": "no_buffer"}
    if mamba:
        chunk = mamba[0]["block_size"]
        if max(chunk, ps) % min(chunk, ps):
            raise ValueError(f"the Mamba chunk {chunk} and the page {ps} must divide one another "
                             "(mamba_cache_chunk_size)")
        plan["mamba"] = chunk
        # no_buffer only supports page_size 1 (arg_groups/mamba_hook.validate_mamba_no_buffer)
        plan["strategy"] = "no_buffer" if ps == 1 else "extra_buffer"
    return plan


def publish(plan: dict, folder: str) -> None:
    """The process-wide ServerArgs the scheduler process publishes (runtime_context.get_context())."""
    from sglang.srt.runtime_context import get_context
    from sglang.srt.server_args import ServerArgs
    sa = ServerArgs(model_path=folder, device="cpu", page_size=plan["page"], disable_overlap_schedule=True,
                    chunked_prefill_size=CHUNK_TOKENS, mamba_radix_cache_strategy=plan["strategy"])
    if plan["mamba"]:
        sa._mamba_cache_chunk_size = plan["mamba"]  # honoured as-is (arg_groups/overrides.mamba_cache_chunk_size)
    get_context().set_server_args(sa)


def cpu_shim() -> None:
    import torch
    torch.Tensor.pin_memory = lambda self, *a, **k: self  # see the module docstring


class Engine:
    """SGLang's pools, cache and batch-result processor for one run."""

    def __init__(self, cfg: dict, plan: dict) -> None:
        import torch
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams
        from sglang.srt.mem_cache.unified_cache.components import ComponentType
        from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
        from sglang.srt.runtime_context import get_exec

        self.torch = torch
        self.plan = plan
        self.ps = ps = plan["page"]
        self.pages = cfg["num_blocks"] - 1           # page 0 is SGLang's padding slot
        full_tokens = self.pages * ps
        self.swa_pages = int(self.pages * SWA_RATIO) if plan["window"] else 0
        self.extra_buffer = bool(get_exec().mamba.enable_mamba_extra_buffer)
        self.mamba_slots = 0
        comps = [ComponentType.FULL]
        dtype = torch.float16
        if plan["mamba"]:
            from sglang.srt.configs.mamba_utils import Mamba2CacheParams, Mamba2StateDType, Mamba2StateShape
            from sglang.srt.mem_cache.memory_pool import HybridReqToTokenPool
            shape = Mamba2StateShape.create(tp_world_size=1, intermediate_size=2, n_groups=1, num_heads=1, head_dim=1,
                                            state_size=1, conv_kernel=2)
            params = Mamba2CacheParams(shape=shape, layers=[0], dtype=Mamba2StateDType(conv=torch.float32,
                                                                                         temporal=torch.float32))
            self.mamba_slots = MAMBA_RATIO * MAX_RUNNING
            self.rtp = HybridReqToTokenPool(size=MAX_RUNNING, mamba_size=self.mamba_slots,
                                            mamba_spec_state_size=MAX_RUNNING, max_context_len=cfg["max_model_len"] + 4,
                                            device="cpu", enable_memory_saver=False, cache_params=params,
                                            mamba_layer_ids=[0], enable_mamba_extra_buffer=self.extra_buffer,
                                            enable_overlap_schedule=False)
            comps.append(ComponentType.MAMBA)
        else:
            from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
            self.rtp = ReqToTokenPool(size=MAX_RUNNING, max_context_len=cfg["max_model_len"] + 4, device="cpu",
                                      enable_memory_saver=False)
        if plan["window"]:
            from sglang.srt.mem_cache.allocator.swa import SWATokenToKVPoolAllocator
            from sglang.srt.mem_cache.swa_memory_pool import SWAKVPool
            swa_tokens = self.swa_pages * ps
            self.kv = SWAKVPool(size=full_tokens, size_swa=swa_tokens, page_size=ps, dtype=dtype, head_num=1,
                                head_dim=1, swa_attention_layer_ids=[0], full_attention_layer_ids=[1], device="cpu")
            self.alloc = SWATokenToKVPoolAllocator(full_tokens, swa_tokens, page_size=ps, dtype=dtype, device="cpu",
                                                   kvcache=self.kv, need_sort=False, req_to_token_pool=self.rtp)
            comps.insert(1, ComponentType.SWA)
        else:
            if plan["mamba"]:
                from sglang.srt.mem_cache.memory_pool import HybridLinearKVPool
                self.kv = HybridLinearKVPool(page_size=ps, size=full_tokens, dtype=dtype, head_num=1, head_dim=1,
                                             full_attention_layer_ids=[1], device="cpu",
                                             mamba_pool=self.rtp.mamba_pool, enable_memory_saver=False)
            else:
                from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool
                self.kv = MHATokenToKVPool(size=full_tokens, page_size=ps, dtype=dtype, head_num=1, head_dim=1,
                                           layer_num=1, device="cpu", enable_memory_saver=False)
            if ps == 1:
                from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
                self.alloc = TokenToKVPoolAllocator(full_tokens, dtype, "cpu", self.kv, False)
            else:
                from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator
                self.alloc = PagedTokenToKVPoolAllocator(full_tokens, ps, dtype, "cpu", self.kv, False)
        self.components = tuple(comps)
        params = CacheInitParams(disable=False, req_to_token_pool=self.rtp, token_to_kv_pool_allocator=self.alloc,
                                 page_size=ps, enable_kv_cache_events=True, sliding_window_size=plan["window"],
                                 tree_components=self.components, enable_mamba_extra_buffer=self.extra_buffer,
                                 chunked_prefill_size=CHUNK_TOKENS)
        self.params = params
        self.tree = UnifiedRadixCache(params)
        self.core = type(self.tree.tree_core).__name__
        self.model_config = types.SimpleNamespace(
            vocab_size=VOCAB, is_encoder_decoder=False, self_opened_think_start_ids=None, think_end_ids=None,
            context_len=cfg["max_model_len"],
            hf_text_config=types.SimpleNamespace(mamba_chunk_size=plan["mamba"] or 64))
        self.proc = self._processor()

    def _processor(self) -> Any:
        """SGLang's own batch-result processor (a frozen dataclass of the scheduler's collaborators); the streamer,
        metrics and logprob collaborators are inert (nothing is streamed to a client)."""
        from sglang.srt.disaggregation.utils import DisaggregationMode
        from sglang.srt.managers.scheduler_components.batch_result_processor import SchedulerBatchResultProcessor

        class Inert:
            num_generated_tokens = 0
            forward_ct_decode = 0
            enable_metrics = False

            def __getattr__(self, name: str) -> Any:
                return lambda *a, **k: None

        inert = Inert()
        return SchedulerBatchResultProcessor(
            is_generation=True, disaggregation_mode=DisaggregationMode.NULL, enable_overlap=False,
            enable_overlap_mlx=False, model_config=self.model_config, token_to_kv_pool_allocator=self.alloc,
            tree_cache=self.tree, hisparse_coordinator=None, req_to_token_pool=self.rtp, decode_offload_manager=None,
            metrics_collector=None, metrics_reporter=inert, draft_worker=None, model_worker=None,
            logprob_result_processor=inert, output_streamer=inert, beam_coordinator=inert, abort_request=None)

    def request(self, rid: str, tokens: list, max_new: int) -> Any:
        from sglang.srt.managers.schedule_batch import Req
        from sglang.srt.sampling.sampling_params import SamplingParams
        sp = SamplingParams(max_new_tokens=max_new, ignore_eos=True, temperature=0.0)
        sp.normalize(None)
        return Req(rid, "", array("q", tokens), sp, vocab_size=VOCAB)

    def full_free_pages(self) -> int:
        """Pages of the full pool the allocator holds free plus those the tree may evict (as the plain driver's
        ``free_blocks``)."""
        avail = self.alloc.full_available_size() if self.plan["window"] else self.alloc.available_size()
        return (avail + self.tree.full_evictable_size()) // self.ps

    def full_total_pages(self) -> int:
        total = self.tree.total_size()
        return (total[0] if isinstance(total, tuple) else total) // self.ps


class Loop:
    """The scheduler's loop over SGLang's own admission, batches and result processing (no overlap)."""

    def __init__(self, eng: Engine, cfg: dict) -> None:
        self.eng = eng
        self.waiting: list = []
        self.running: Any = None
        self.last: Any = None
        self.chunked: Any = None
        self.budget = cfg["max_num_batched_tokens"]
        self.preempted: list[str] = []
        self.resumed: set[str] = set()     # retracted requests admitted again in this step
        self.retracted: set[str] = set()
        from sglang.srt.managers.scheduler_components.new_token_ratio_tracker import NewTokenRatioTracker
        self.ratio = NewTokenRatioTracker.from_config()  # the scheduler's own: admission reserves this share of output
        from sglang.srt.environ import envs
        # SGLang's own test knob (SGLANG_TEST_RETRACT, _INTERVAL): retract a decode batch every N forwards
        self.test_retract = envs.SGLANG_TEST_RETRACT.get() and max(1, envs.SGLANG_TEST_RETRACT_INTERVAL.get())
        self.forward_ct = 0

    def busy(self) -> bool:
        return bool(self.waiting or self.chunked is not None or (self.running is not None and self.running.reqs)
                    or (self.last is not None and self.last.reqs))

    def _empty_batch(self) -> Any:
        from sglang.srt.managers.schedule_batch import ScheduleBatch
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
        e = self.eng
        return ScheduleBatch.init_new([], e.rtp, e.alloc, e.tree, e.model_config, False, SpeculativeAlgorithm.NONE)

    def next_batch(self, where: dict) -> tuple[Any, str]:
        """``Scheduler.get_next_batch_to_run``: (batch, "extend" | "decode") or (None, "")."""
        from sglang.srt.mem_cache.common import checkpoint_kv_cache
        e = self.eng
        self.preempted = []
        if self.chunked is not None and self.chunked.extend_end > self.chunked.prefix_len:
            where.update(phase="stash_chunked_request", request=self.chunked.rid)
            checkpoint_kv_cache(self.chunked, e.tree)
        if self.last is not None and self.last.forward_mode.is_extend():
            self.last.filter_batch(reqs_to_exclude=[self.chunked] if self.chunked is not None else [])
            if self.last.reqs and self.last is not self.running:
                if self.running is None or not self.running.reqs:
                    self.running = self.last
                else:
                    self.running.merge_batch(self.last)
        if self.running is not None:
            self.running.filter_batch()
        where.update(phase="get_new_batch_prefill", request=None)
        batch = self._prefill(where)
        if batch is not None:
            return batch, "extend"
        if self.running is not None and self.running.reqs:
            where.update(phase="update_running_batch", request=None)
            self.forward_ct += 1
            forced = bool(self.test_retract) and self.forward_ct % self.test_retract == 0 and len(self.running.reqs) > 1
            if forced or not self.running.check_decode_mem():
                retracted, self.ratio.current, aborted = self.running.retract_decode()
                if aborted:
                    raise RuntimeError(f"retract_decode aborted {[r.rid for r in aborted]}")
                self.preempted = sorted(r.rid for r in retracted)
                self.waiting[:0] = sorted(retracted, key=lambda r: r.rid)
                self.retracted.update(self.preempted)
                if not self.running.reqs:
                    return None, ""
            else:
                self.ratio.decay_step()
            self.running.prepare_for_decode()
            return self.running, "decode"
        return None, ""

    def _prefill(self, where: dict) -> Any:
        from sglang.srt.managers.schedule_batch import ScheduleBatch
        from sglang.srt.managers.schedule_policy import AddReqResult, PrefillAdder
        from sglang.srt.speculative.spec_info import SpeculativeAlgorithm
        e = self.eng
        running = self.running if self.running is not None else self._empty_batch()
        adder = PrefillAdder(e.ps, e.tree, e.alloc, running, self.ratio.current, self.budget, CHUNK_TOKENS,
                             max_running_requests=MAX_RUNNING)
        if self.chunked is not None:
            where["request"] = self.chunked.rid
            self.chunked.init_next_round_input()
            self.chunked = adder.add_chunked_req(self.chunked)
        mamba_alloc = getattr(e.rtp, "mamba_allocator", None)
        if mamba_alloc is not None:
            mamba_alloc.alloc_group_begin(len(self.waiting))
        for req in self.waiting:
            if adder.budget_state() == AddReqResult.OTHER:
                break
            held = sum(r.kv.holds_kv for r in adder.can_run_list)
            if len(adder.can_run_list) >= e.rtp.available_size() + held:
                break
            where["request"] = req.rid
            req.init_next_round_input(e.tree)
            res = adder.add_one_req(req, has_chunked_req=self.chunked is not None, truncation_align_size=None)
            if res != AddReqResult.CONTINUE:
                if not (adder.can_run_list and req is adder.can_run_list[-1]):
                    req.kv.mamba_cow_src_index = None   # the scheduler's own revert of an unadmitted match
                    req.kv.mamba_needs_clear = False
                    if req.kv.holds_mamba:
                        e.rtp.mamba_allocator.free(req.kv.mamba_pool_idx.unsqueeze(-1))
                        req.kv.mamba_pool_idx = None
                break
        if mamba_alloc is not None:
            mamba_alloc.alloc_group_end()
        if not adder.can_run_list:
            return None
        admitted = set(map(id, adder.can_run_list))
        self.resumed = {r.rid for r in adder.can_run_list if r.rid in self.retracted}
        self.retracted -= self.resumed
        self.waiting = [r for r in self.waiting if id(r) not in admitted]
        if adder.new_chunked_req is not None:
            self.chunked = adder.new_chunked_req
        if self.chunked is not None:
            self.chunked.inflight_middle_chunks += 1
        batch = ScheduleBatch.init_new(adder.can_run_list, e.rtp, e.alloc, e.tree, e.model_config, False,
                                       SpeculativeAlgorithm.NONE, chunked_req=self.chunked)
        where["phase"] = "prepare_for_extend"
        batch.prepare_for_extend()
        return batch

    def results(self, batch: Any, kind: str, tokens: list[int], where: dict) -> None:
        """The forward's sampled tokens through SGLang's batch-result processor (checkpoint or release)."""
        from sglang.srt.managers.utils import GenerationBatchResult
        torch = self.eng.torch
        where.update(phase=f"process_batch_result_{'prefill' if kind == 'extend' else 'decode'}", request=None)
        result = GenerationBatchResult(next_token_ids=torch.tensor(tokens, dtype=torch.int64),
                                       extend_input_len_per_req=[r.extend_len for r in batch.reqs]
                                       if kind == "extend" else None)
        if kind == "extend":
            self.eng.proc.process_batch_result_prefill(batch, result)
        else:
            self.eng.proc.process_batch_result_decode(batch, result)
        self.last = batch

    def clear(self) -> None:
        """``Scheduler.flush_cache`` with every request finished: the tree's reset, the request pool's clear (its
        Mamba slots too), the allocator's clear."""
        self.last = None
        self.eng.tree.reset()
        self.eng.rtp.clear()
        self.eng.alloc.clear()
        self.eng.rtp.reset_aux_cache_allocator()


def env_core() -> str:
    return os.environ.get("SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND", "rust")


def run(cfg: dict, given: list, send: Any, where: dict, token: Any, sibling: Any, t_start: float,
        trial: int = 0) -> int:
    """The run: ``given`` is ``(arrive step, id, tokens, max new tokens)`` per request in workload order; one step line
    per scheduler iteration (``send``), then ``done`` or ``stalled``. Exceptions propagate to the driver's handler."""
    import time

    import msgspec
    import sglang

    groups = cfg["kv_groups"]
    plan = group_plan(groups)
    cpu_shim()
    import tempfile
    folder = tempfile.mkdtemp(prefix="kvsim-sglang-")
    publish(plan, folder)
    hyb = sibling("hybrid")
    eng = Engine(cfg, plan)
    model = hyb.Model(eng)
    obs = hyb.Observer(eng, groups, model)
    loop = Loop(eng, cfg)
    every = max(1, int(cfg.get("probe_every", 1)))
    main = next(i for i, g in enumerate(groups) if g["kind"] == "full")
    send({"hello": {"engine": f"sglang {sglang.__version__}", "block_size": eng.ps, "num_blocks": cfg["num_blocks"],
                    "usable_blocks": eng.pages, "hash_algo": "sha256", "paths": sorted(obs.n), "probe_every": every,
                    "import_s": round(time.perf_counter() - t_start, 3),
                    "tree_core": eng.core, "mamba_strategy": plan["strategy"] if plan["mamba"] else None,
                    "swa_pages": eng.swa_pages, "mamba_slots": eng.mamba_slots, "trial": trial}})
    clock = time.perf_counter

    def events(step: int) -> list:
        evs = eng.tree.take_events()
        return [[step, [msgspec.to_builtins(e) for e in evs]]] if evs else []

    reqs: dict[str, Any] = {}
    arrivals = given[::-1]
    seen: set[str] = set()
    step, idle = 0, 0
    pre = events(0)
    while arrivals or loop.busy():
        while arrivals and (arrivals[-1][0] <= step or not loop.busy()):
            _a, rid, toks, max_new = arrivals.pop()
            reqs[rid] = eng.request(rid, toks, max_new)
            loop.waiting.append(reqs[rid])
        where.update(step=step, phase="schedule", request=None)
        t0 = clock()
        batch, kind = loop.next_batch(where)
        t1 = clock()
        msg = _step(step, batch, kind, loop, obs, model, seen, main, token, where)
        t2 = clock()
        if batch is not None:
            toks = [token(r.rid, len(r.output_ids)) for r in batch.reqs]
            before = {r.rid: len(r.output_ids) for r in batch.reqs}
            loop.results(batch, kind, toks, where)
            msg["tokens"] = {r.rid: int(r.output_ids[-1]) for r in batch.reqs if len(r.output_ids) > before[r.rid]}
        t3 = clock()
        _after(msg, batch, reqs, obs, main, eng)
        msg["engine_s"] = (t1 - t0) + (t3 - t2)
        msg["batches"] = pre + events(step)
        pre = []
        done = set(msg["finished"])  # released: a finished request's slot the tree took still reads as its own
        if step % every == 0 or not (arrivals or loop.busy()):  # PEER-9's pools and counters: judge time
            t4 = clock()
            live = [r for r in reqs.values() if r.rid not in done and (r.kv.holds_kv or r.kv.holds_mamba)]
            msg["groups"]["pools"] = obs.pools(live)
            msg["groups"]["probe"] = obs.probe()
            msg["probe_s"] = clock() - t4
        msg["paths"] = obs.take_paths()
        send(msg)
        for rid in msg["finished"]:
            del reqs[rid]
        step += 1
        idle = 0 if batch is not None else idle + 1
        if idle >= 64:
            send({"stalled": sorted([*reqs, *(rid for _a, rid, _t, _n in arrivals)])})
            return 0
    if cfg.get("clear_at_end"):
        where.update(step=step, phase="flush_cache", request=None)
        t0 = clock()
        loop.clear()
        t1 = clock()
        obs.n["clear_cache"] += 1
        msg = {"step": step, "engine_s": t1 - t0, "new": [], "cached": [], "tables": [], "scheduled": {}, "tokens": {},
               "finished": [], "preempted": [], "stats": None, "cleared": True,
               "free_blocks": eng.full_free_pages(), "cached_blocks": eng.full_total_pages(),
               "batches": events(step), "groups": {"tables": [], "after": [], "pools": obs.pools([]),
                                                   "states": model.take(), "published": obs.take_published(),
                                                   "probe": obs.probe()},
               "paths": obs.take_paths()}
        send(msg)
        step += 1
    send({"done": {"steps": step, "trial": trial}})
    return 0


def _step(step: int, batch: Any, kind: str, loop: Loop, obs: Any, model: Any, seen: set[str], main: int, token: Any,
          where: dict) -> dict:
    """The step's decisions as the forward reads them: first schedulings with their hits, added pages, every group's
    table changes; then the model's forward on the state pool."""
    new, cached, scheduled = [], [], {}
    changes: list[list] = []
    swaps: list[list] = []
    if batch is not None:
        fresh = {r.rid for r in batch.reqs if r.rid not in seen or r.rid in loop.resumed}
        known = {r.rid: len(obs.sent[main].get(r.rid, [])) for r in batch.reqs}
        changes = obs.changes(batch.reqs, fresh)
        primary = {rid: (start, blocks) for g, rid, start, blocks in changes if g == main}
        for i, r in enumerate(batch.reqs):
            if kind == "extend":
                c0, c1 = r.prefix_len, r.extend_end
            else:
                c1 = int(batch.seq_lens_cpu[i])
                c0 = c1 - 1
            scheduled[r.rid] = c1 - c0
            start, blocks = primary.get(r.rid, (0, []))
            if r.rid not in seen:
                new.append([r.rid, c0, obs.sent[main].get(r.rid, [])])
                obs.hit(r, c0)
                if c0 and c0 == (len(r.origin_input_ids) - 1) // obs.eng.ps * obs.eng.ps:
                    obs.n["whole_prompt_hit"] += 1
                seen.add(r.rid)
            elif r.rid in loop.resumed:
                cached.append([r.rid, True, obs.sent[main].get(r.rid, []), c0])
            elif blocks:
                # pages added at the end; slots below the old length a checkpoint swapped before the allocation (a
                # chunked request's stash, freeing the duplicates the allocation may reuse) come first, as swaps
                old = known[r.rid]
                now = obs.sent[main][r.rid]
                if start < old:
                    swaps.append([r.rid, now[:old]])
                if now[old:]:
                    cached.append([r.rid, False, now[old:], c0])
        loop.resumed = set()
        where["phase"] = "forward"
        model.forward(batch, kind)
    if loop.preempted:
        obs.n["preemption"] += len(loop.preempted)
        obs.forget(loop.preempted)
    return {"step": step, "new": new, "cached": cached, "scheduled": scheduled, "tokens": {}, "finished": [],
            "preempted": list(loop.preempted), "stats": None, "groups": {"tables": changes}, "swaps": swaps}


def _after(msg: dict, batch: Any, reqs: dict, obs: Any, main: int, eng: Engine) -> None:
    """After the result processing: finished requests, the tables the checkpoints rewrote (the primary group's as
    whole tables, swapped blocks being the tree's copies), states read, written and published, the pool's counts."""
    after: list[list] = []
    swapped: set[str] = set()
    obs.n["second_copy"] += len(msg["swaps"])
    if batch is not None:
        finished = sorted(r.rid for r in batch.reqs if r.finished() and r.rid in reqs)
        msg["finished"] = finished
        live = [r for r in batch.reqs if r.rid not in finished and r.kv.holds_kv]
        after = obs.changes(live, set())
        for g, rid, _start, _blocks in after:
            if g == main:
                swapped.add(rid)
        obs.n["second_copy"] += len(swapped)
        swapped -= set(finished)
        obs.forget(finished)
    tables = [[rid, obs.sent[main][rid]] for rid in sorted(swapped)]
    msg["tables"] = tables
    msg["groups"]["after"] = after
    msg["groups"]["states"] = obs.model.take()
    msg["groups"]["published"] = obs.take_published()
    msg["free_blocks"] = eng.full_free_pages()
    msg["cached_blocks"] = eng.full_total_pages()
    msg["tree"] = {"evictable": eng.tree.full_evictable_size(), "protected": eng.tree.full_protected_size(),
                   "total": eng.full_total_pages() * eng.ps}
