"""kvsim's driver for vLLM's real scheduler, run as a script by the engine venv's python (never imported by kvsim).

It imports only vLLM (with what vLLM itself ships: torch, msgspec, pyzmq) and the standard library. kvsim
writes JSON lines on stdin: a config object, one ``{"request": {"id", "tokens", "max_new_tokens"[, "arrive"]}}``
per request (``arrive``: the step before which it is submitted, at once when the scheduler is idle), then
``{"end": true}``. The driver builds ``vllm.v1.core.sched.scheduler.Scheduler`` (CPU target, a
tiny local Llama config.json in a temporary folder, ``skip_tokenizer_init``, a hand-built KVCacheConfig with
one full-attention group of ``num_blocks`` blocks, block 0 being vLLM's null block), submits every request,
and steps it: ``schedule()``, a fabricated ModelRunnerOutput (no token for an intermediate prefill chunk, one
synthetic token otherwise) to ``update_from_output()``. KV events travel through vLLM's own ZMQ publisher on
an ``ipc://`` endpoint in that temporary folder, received here by a SUB socket and forwarded.

Per step it writes one JSON line on its stdout: what the scheduler decided (new requests with their computed
tokens and block ids, running requests' new block ids, tokens scheduled, finished and preempted requests),
its prefix-cache stats for the step, the pool's cached-block count, the event batches published during the
step (vLLM's wire form ``[ts, [event, ...], dp_rank]``, ``ts`` replaced by the step number) and the seconds
spent inside scheduler calls. Anything vLLM prints goes to stderr.

Two more things ride on each step line, read from vLLM's own structures in this process:

* ``paths``: how often this step took each engine path a cache bug hides in (``PATHS``), counted by thin
  wrappers around ``BlockPool`` methods (class-level, in this process only) and from the step's decisions;
* ``probe`` (every ``probe_every`` steps and at the last): the free queue walked from its head (its length
  and how many blocks in it have ``ref_cnt > 0``, the first few named), the engine's own free count, and the
  sum of ``ref_cnt`` over the pool's blocks -- kvsim compares them with its own view of the live tables (PEER-9).

With ``clear_at_end`` the run ends with ``reset_prefix_cache()`` once every request has finished (vLLM's
ClearCache), reported as one more step with ``cleared``.

When vLLM raises while stepping, the driver writes ``{"crash": ...}``: the exception type and message, the
innermost frame inside the vllm package (path relative to site-packages), the step and the request being
processed, and the last frames of the traceback; kvsim keeps the findings so far and reports the crash as
PEER-11. An exception with no frame inside vllm is the driver's own bug: ``{"bug": ...}``.
"""

import json
import os
import sys
import tempfile
import time
import traceback
import zlib
from typing import Any

import ledger  # noqa: E402 -- a sibling script module (sim/peers/vllm/ledger.py), found through sys.path[0]

TINY_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
              "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4, "num_hidden_layers": 1,
              "vocab_size": 151936, "max_position_embeddings": 1 << 20, "torch_dtype": "float16",
              "rms_norm_eps": 1e-6, "rope_theta": 10000.0}


def token(rid: str, pos: int, vocab: int) -> int:
    """A synthetic output token, deterministic in (request, position) -- the same formula as kvsim's peers."""
    return zlib.crc32(f"{rid}:{pos}".encode()) % vocab


# the engine paths counted per step (names shared with kvsim's sim.peers.vllm.paths)
PATHS = ("hit_evictable", "whole_prompt_hit", "second_copy", "eviction", "eviction_next_to_referenced",
         "preemption", "clear_cache")


def crash_facts(exc: BaseException, package: str, where: dict) -> dict:
    """The exception as kvsim reports it: type, message, the innermost frame inside ``package`` (a path relative
    to the folder holding it, e.g. site-packages) or None, and the request being processed: the innermost engine
    frame's ``request`` local (a vLLM Request), else the one the driver was handling."""
    root = os.path.dirname(package)
    tb = exc.__traceback__
    frames = []
    rid = None
    block = None
    while tb is not None:
        frames.append(tb)
        tb = tb.tb_next
    engine = None
    for t in reversed(frames):
        fn = t.tb_frame.f_code.co_filename
        if fn.startswith(package + os.sep):
            if engine is None:
                engine = f"{os.path.relpath(fn, root)}:{t.tb_lineno} in {t.tb_frame.f_code.co_name}"
            req = t.tb_frame.f_locals.get("request")
            if rid is None and req is not None and isinstance(getattr(req, "request_id", None), str):
                rid = req.request_id
            got = getattr(t.tb_frame.f_locals.get("block"), "block_id", None)
            if block is None and isinstance(got, int) and got >= 0:
                block = got  # the block the innermost engine frame was handling
    if frames and os.path.abspath(frames[-1].tb_frame.f_code.co_filename) == os.path.abspath(__file__):
        engine = None  # raised in this script's own code: the driver's bug, whatever called it
    tail = []
    for t in frames[-6:]:
        fn = t.tb_frame.f_code.co_filename
        shown = os.path.relpath(fn, root) if fn.startswith(package + os.sep) else os.path.basename(fn)
        tail.append(f"{shown}:{t.tb_lineno} in {t.tb_frame.f_code.co_name}")
    return {"type": type(exc).__name__, "message": " ".join(str(exc).split())[:300], "frame": engine,
            "step": where.get("step"), "request": rid or where.get("request"), "phase": where.get("phase"),
            "traceback": tail, "block": block}


class Paths:
    """Counts of the engine paths a step took (``PATHS``), from wrappers around BlockPool's own methods:
    ``touch`` of a block with ``ref_cnt == 0`` (a hit on a free-queue block), an ``insert`` into the cached-block
    map under a hash it already holds (a second physical copy), an eviction (``_maybe_evict_cached_block``
    returning True), and whether the evicted block's parent in its chain (known from ``cache_full_blocks``) is
    still referenced by a request; ``reset_prefix_cache`` that succeeded."""

    now: "Paths | None" = None   # the trial running now: the wrappers are installed once per process

    def __init__(self) -> None:
        self.n = dict.fromkeys(PATHS, 0)
        self.parent: dict = {}   # block hash -> its parent's block hash (None: the first block)
        Paths.now = self
        if Paths._installed:
            return
        Paths._installed = True
        from vllm.v1.core import block_pool as bp
        from vllm.v1.core.kv_cache_utils import get_block_hash, make_block_hash_with_group_id

        cls, mapcls = bp.BlockPool, bp.BlockHashToBlockMap
        touch, insert, evict = cls.touch, mapcls.insert, cls._maybe_evict_cached_block
        cache_full, reset = cls.cache_full_blocks, cls.reset_prefix_cache

        def touch_counted(self_: Any, blocks: Any) -> None:
            Paths.counts()["hit_evictable"] += sum(1 for b in blocks if not b.is_null and b.ref_cnt == 0)
            touch(self_, blocks)

        def insert_counted(self_: Any, key: Any, block: Any) -> None:
            if self_._cache.get(key) is not None:
                Paths.counts()["second_copy"] += 1
            insert(self_, key, block)

        def cache_full_counted(self_: Any, request: Any, blocks: Any, *args: Any, **kw: Any) -> None:
            num_cached = kw["num_cached_blocks"] if "num_cached_blocks" in kw else args[0]
            num_full = kw["num_full_blocks"] if "num_full_blocks" in kw else args[1]
            hashes = request.block_hashes
            parent = Paths.now.parent if Paths.now is not None else {}
            for i in range(num_cached, min(num_full, len(hashes))):
                parent[hashes[i]] = hashes[i - 1] if i else None
            cache_full(self_, request, blocks, *args, **kw)

        def evict_counted(self_: Any, block: Any) -> bool:
            key = block.block_hash
            done = evict(self_, block)
            if done:
                n = Paths.counts()
                n["eviction"] += 1
                parent = Paths.now.parent if Paths.now is not None else {}
                up = parent.get(get_block_hash(key)) if key is not None else None
                if up is not None:
                    pb = self_.cached_block_hash_to_block.get_one_block(make_block_hash_with_group_id(up, 0))
                    if pb is not None and pb.ref_cnt > 0:
                        n["eviction_next_to_referenced"] += 1
            return done

        def reset_counted(self_: Any) -> bool:
            done = reset(self_)
            Paths.counts()["clear_cache"] += bool(done)
            return done

        cls.touch = touch_counted
        mapcls.insert = insert_counted
        cls.cache_full_blocks = cache_full_counted
        cls._maybe_evict_cached_block = evict_counted
        cls.reset_prefix_cache = reset_counted

    _installed = False

    @staticmethod
    def counts() -> dict:
        return Paths.now.n if Paths.now is not None else dict.fromkeys(PATHS, 0)

    def take(self) -> dict:
        """This step's counts (only the paths taken), then zero."""
        out = {k: v for k, v in self.n.items() if v}
        for k in out:
            self.n[k] = 0
        return out


def probe(pool: Any) -> dict:
    """The pool's deep counters, read from its own structures: the free queue walked head to tail (length,
    blocks in it with ``ref_cnt > 0``, the first eight of them), its ``num_free_blocks`` counter, and the sum of
    ``ref_cnt`` over every block but the null block. O(pool) Python work: taken every ``probe_every`` steps."""
    q = pool.free_block_queue
    walked, referenced = 0, 0
    bad: list[int] = []
    b = q.fake_free_list_head.next_free_block
    tail = q.fake_free_list_tail
    limit = len(pool.blocks) + 1
    while b is not None and b is not tail and walked <= limit:
        walked += 1
        if b.ref_cnt > 0:
            referenced += 1
            if len(bad) < 8:
                bad.append(b.block_id)
        b = b.next_free_block
    return {"free_walk": walked, "free_count": q.num_free_blocks, "free_referenced": referenced,
            "free_referenced_ids": bad, "ref_sum": sum(x.ref_cnt for x in pool.blocks if not x.is_null),
            "free_list_broken": b is None}


def external_hits(stats: Any) -> int:
    """Hit tokens a KV connector (the Host tier) served this step: the scheduler counts them apart from its own
    prefix-cache hits, and a request's first computed tokens include both."""
    cps = getattr(stats, "connector_prefix_cache_stats", None)
    return int(cps.hits) if cps is not None else 0


def sibling(name: str) -> Any:
    """A module of this driver's own folder (``hybrid.py``), loaded by path: the driver imports nothing of kvsim."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(f"kvsim_vllm_{name}", os.path.join(os.path.dirname(
        os.path.abspath(__file__)), f"{name}.py"))
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load the driver's {name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build(cfg: dict, folder: str, trial: int = 0) -> Any:
    """The real Scheduler over a hand-built KV cache of cfg["num_blocks"] blocks, events on an ipc endpoint;
    with ``kv_groups`` one KV cache group per entry (``hybrid.py``), else one full-attention group."""
    import torch
    from vllm.config import CacheConfig, KVEventsConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(TINY_LLAMA, f)
    bs, n, max_len = cfg["block_size"], cfg["num_blocks"], cfg["max_model_len"]
    groups = cfg.get("kv_groups")
    hash_bs = bs
    extra: dict = {}
    if groups:
        hyb = sibling("hybrid")
        bs, hash_bs = hyb.sizes(groups)
        if hyb.has_mamba(groups):
            extra["mamba_cache_mode"] = "align"
    model = ModelConfig(model=folder, skip_tokenizer_init=True, dtype="float16", max_model_len=max_len)
    cache = CacheConfig(block_size=bs, enable_prefix_caching=True, **extra)
    sched = SchedulerConfig(max_num_seqs=cfg["max_num_seqs"], max_num_batched_tokens=cfg["max_num_batched_tokens"],
                            max_model_len=max_len, enable_chunked_prefill=True, is_encoder_decoder=False)
    kv = KVCacheConfig(num_blocks=n, kv_cache_tensors=[], kv_cache_groups=hyb.kv_cache_groups(groups) if groups else [
        KVCacheGroupSpec(["model.layers.0.self_attn.attn"],
                         FullAttentionSpec(block_size=bs, num_kv_heads=1, head_size=1, dtype=torch.float16))])
    cache.num_gpu_blocks = n

    def scheduler(events: Any, transfer: Any) -> Any:
        vc = VllmConfig(model_config=model, cache_config=cache, scheduler_config=sched, kv_events_config=events,
                        kv_transfer_config=transfer)
        return Scheduler(vllm_config=vc, kv_cache_config=kv, structured_output_manager=StructuredOutputManager(vc),
                         block_size=bs, hash_block_size=hash_bs, log_stats=True)

    transfer = None
    off = cfg.get("offload")
    if off:  # the Host tier (offload.py): CPU chunks sized from a first, event-less build's chunk bytes
        offload = sibling("offload")
        probe_bytes = 1 << 26
        first = scheduler(None, offload.transfer_config(off, probe_bytes))
        probe = first.connector.connector_scheduler
        per_chunk, per_token = probe_bytes // probe.manager._num_chunks, probe.config.kv_bytes_per_token
        first.shutdown()
        transfer = offload.transfer_config(off, per_chunk * off["blocks"], per_token)
    events = KVEventsConfig(enable_kv_cache_events=True, publisher="zmq",
                            endpoint=f"ipc://{folder}/kv-events-{trial}", topic="kv")
    return scheduler(events, transfer)


class Subscriber:
    """A SUB socket on the scheduler's publisher; counts what the scheduler published so that a step waits
    for exactly its own batches."""

    def __init__(self, sched: Any, endpoint: str) -> None:
        import msgspec
        import zmq
        from vllm.distributed.kv_events import KVEventBatch

        self.decode = msgspec.msgpack.decode
        self.sock: Any = zmq.Context.instance().socket(zmq.SUB)
        self.sock.setsockopt(zmq.SUBSCRIBE, b"")
        self.sock.connect(endpoint)
        self.published = 0
        self.received = 0
        self.offset = 0
        pub = sched.kv_event_publisher
        # PUB/SUB drops what is sent before the subscription arrives: publish empty probes (negative ts, no
        # events; the scheduler never publishes an empty batch) until one comes back; later ones are skipped
        for i in range(400):
            pub.publish(KVEventBatch(ts=-1.0 - i, events=[]))
            if self.sock.poll(50):
                break
        else:
            raise RuntimeError("no batch came back from vLLM's ZMQ publisher")
        # the publisher numbered every probe: the scheduler's own batches are numbered from 0 on the wire kvsim
        # sees, however many probes a loaded machine needed (the same run, the same sequence numbers)
        self.offset = i + 1
        real = pub.publish

        def counting(batch: Any) -> None:
            self.published += 1
            real(batch)
        pub.publish = counting

    def take(self, step: int) -> tuple[list, list]:
        """The batches the scheduler published since the last call (``ts`` replaced by the step) and their
        sequence numbers."""
        batches, seqs = [], []
        while self.received < self.published:
            if not self.sock.poll(30_000):
                raise RuntimeError(f"vLLM's publisher delivered {self.received} of {self.published} batches")
            _topic, seq, payload = self.sock.recv_multipart()
            b = self.decode(payload)
            if b[0] < 0 and not b[1]:  # a handshake probe
                continue
            self.received += 1
            b[0] = step
            batches.append(b)
            seqs.append(int.from_bytes(seq, "big") - self.offset)
        return batches, seqs


def read_trial() -> tuple[dict, list] | None:
    """The next trial on stdin: a config line, one line per request, the end mark; None at the end of input."""
    line = sys.stdin.readline()
    if not line.strip():
        return None
    cfg = json.loads(line)
    reqs = []
    for line in iter(sys.stdin.readline, ""):
        msg = json.loads(line)
        if "end" in msg:
            break
        reqs.append(msg["request"])
    return cfg, reqs


def safe_walk(pool: Any) -> dict:
    """``ledger.walk`` of a pool the engine may have left broken: what it could read, or why not."""
    try:
        return ledger.walk(pool)
    except Exception as exc:  # a structure too broken to read is itself the finding
        return {"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"}


def run_trial(cfg: dict, reqs: list, trial: int, folder: str, send: Any, where: dict, state: dict,
              import_s: float) -> None:
    """One run of the workload on a Scheduler built afresh (vLLM imported once per process): hello, one line per
    step, done. ``state`` holds the scheduler, pool and ledger for the crash report."""
    import vllm
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request

    where.update(step=None, request=None, phase="setup")
    led = ledger.Ledger(os.path.dirname(os.path.dirname(os.path.abspath(vllm.__file__))))
    ledger.CURRENT[0] = led
    state["ledger"] = led
    sched = build(cfg, folder, trial)
    state["sched"] = sched
    algo = sched.cache_config.prefix_caching_hash_algo
    hash_fn = get_hash_fn_by_name(algo)
    init_none_hash(hash_fn)
    hasher = get_request_block_hasher(sched.hash_block_size, hash_fn)
    sub = Subscriber(sched, f"ipc://{folder}/kv-events-{trial}")
    state["sub"] = sub
    pool = sched.kv_cache_manager.block_pool
    state["pool"] = pool
    led.take(pool)  # the pool's construction is no step
    paths = Paths()
    every = max(1, int(cfg.get("probe_every", 1)))
    groups = cfg.get("kv_groups")
    tables = sibling("hybrid").Tables(sched, groups) if groups else None  # per-group tables (hybrid.py)
    # the Host tier's worker side (offload.py), with --offload-blocks
    worker: Any = sibling("offload").Worker(sched, cfg["offload"]) if cfg.get("offload") else None
    main_group = tables.primary if tables else 0  # the first full group: "new" / "cached" name its blocks
    send({"hello": {"engine": f"vllm {vllm.__version__}", "block_size": cfg["block_size"],
                    "num_blocks": cfg["num_blocks"], "usable_blocks": cfg["num_blocks"] - 1,
                    "hash_algo": algo, "import_s": round(import_s, 3),
                    "paths": list(PATHS) + (list(tables.n) if tables else []) +
                    ([f"host.{p}" for p in worker.n] if worker else []), "probe_every": every,
                    "host_chunks": worker.num_chunks if worker else 0,
                    "scheduler_block_size": sched.block_size, "hash_block_size": sched.hash_block_size,
                    "trial": trial}})
    vocab = cfg["vocab"]
    bs = sched.block_size
    clock = time.perf_counter
    cap = {r["id"]: (len(r["tokens"]) - 1) // bs * bs for r in reqs}
    step, idle = 0, 0
    walked = -1  # the ledger's change count at the last structure walk
    reqs = reqs[::-1]  # submitted before the step each names ("arrive"), at once when the scheduler is idle
    while reqs or sched.has_requests() or (worker is not None and worker.busy()):
        where.update(step=step, phase="add_request", request=None)
        spent = led.cost
        t0 = clock()
        while reqs and (reqs[-1].get("arrive", 0) <= step or not sched.has_requests()):
            r = reqs.pop()
            where["request"] = r["id"]
            sp = SamplingParams(max_tokens=r["max_new_tokens"], ignore_eos=True, temperature=0.0)
            sched.add_request(Request(r["id"], r["tokens"], sp, None, arrival_time=0.0, block_hasher=hasher))
        add_s = clock() - t0
        where.update(phase="schedule", request=None)
        t0 = clock()
        so = sched.schedule()
        t1 = clock()
        if tables is not None:  # the tables this step's forward reads (observation, not engine time)
            tables.forget(list(so.preempted_req_ids or ()))
            group_tables = tables.take(list(so.num_scheduled_tokens), tables.first_scheduled(so))
            t1b = clock()
            t0 += t1b - t1
            t1 = t1b
        stats = sched.make_stats()
        pcs = stats.prefix_cache_stats if stats is not None else None
        ids = list(so.num_scheduled_tokens)
        sampled: list[list[int]] = []
        for rid in ids:
            req = sched.requests[rid]
            if req.num_computed_tokens < req.num_tokens:  # an intermediate prefill chunk
                sampled.append([])
            else:
                sampled.append([token(rid, req.num_output_tokens, vocab)])
        kco, host = worker.step(step, so) if worker is not None else (None, None)
        mro = ModelRunnerOutput(req_ids=ids, req_id_to_index={rid: i for i, rid in enumerate(ids)},
                                sampled_token_ids=sampled, logprobs=None, prompt_logprobs_dict={},
                                pooler_output=[], kv_connector_output=kco)
        where["phase"] = "update_from_output"
        t2 = clock()
        outs = sched.update_from_output(so, mro)
        t3 = clock()
        where["phase"] = "report"
        finished = sorted(o.request_id for eco in outs.values() for o in eco.outputs
                          if o.finish_reason is not None)
        cr = so.scheduled_cached_reqs
        batches, seqs = sub.take(step)
        counts = paths.take()
        # a whole-prompt hit: the hit reached vLLM's cap (every whole block short of the last token)
        whole = sum(1 for nr in so.scheduled_new_reqs if 0 < nr.num_computed_tokens == cap[nr.req_id])
        if whole:
            counts["whole_prompt_hit"] = whole
        if so.preempted_req_ids:
            counts["preemption"] = len(so.preempted_req_ids)
        inside = led.cost - spent  # the ledger's bookkeeping inside vLLM's calls: not vLLM's time
        t4 = clock()
        facts = led.take(pool)
        msg = {
            "step": step, "engine_s": (t1 - t0) + (t3 - t2) + add_s - inside,
            "new": [[n.req_id, n.num_computed_tokens, list(n.block_ids[main_group])]
                    for n in so.scheduled_new_reqs],
            "cached": [[rid, rid in cr.resumed_req_ids, list(b[main_group]) if b is not None else None, c]
                       for rid, b, c in zip(cr.req_ids, cr.new_block_ids, cr.num_computed_tokens, strict=True)],
            "scheduled": {rid: so.num_scheduled_tokens[rid] for rid in ids},
            "tokens": {rid: s[0] for rid, s in zip(ids, sampled, strict=True) if s},
            "finished": finished,
            "preempted": sorted(so.preempted_req_ids or ()),
            "stats": None if pcs is None else {
                "requests": pcs.requests, "queries": pcs.queries, "hits": pcs.hits + external_hits(stats),
                "preempted_requests": pcs.preempted_requests, "preempted_queries": pcs.preempted_queries,
                "preempted_hits": pcs.preempted_hits},
            "free_blocks": pool.get_num_free_blocks(),
            "cached_blocks": len(pool.cached_block_hash_to_block),
            "batches": batches, "seqs": seqs, "paths": counts, "ledger": facts,
        }
        if step % every == 0 or not sched.has_requests():
            msg["probe"] = probe(pool)
            if led.changes != walked:  # nothing vLLM's pool did since the last walk: the same structure
                msg["walk"] = safe_walk(pool)
                walked = led.changes
        msg["probe_s"] = inside + (clock() - t4)
        if host is not None:  # the Host tier's jobs, acknowledgements, evictions, lookups (offload.py)
            host["held"] = worker.held()
            msg["offload"] = host
            # vLLM counts a request's prefix-cache stats when its load starts, steps before it is
            # scheduled: the per-step comparison with the admitted requests does not hold there
            msg["stats"] = None
            msg["paths"].update(worker.take_paths())
        if tables is not None:  # one pool, several groups: accounted per group by kvsim's group judge
            tables.forget(finished)
            msg["groups"] = tables.section(group_tables, msg, pool)
            msg["groups"]["copies"] = [[c.src_block_id, c.dst_block_id] for c in so.kv_cache_block_copies or ()]
            msg["paths"].update(tables.take_paths())
        send(msg)
        step += 1
        idle = 0 if ids or (worker is not None and worker.busy()) else idle + 1
        if idle >= 64:
            send({"stalled": sorted(sched.requests)})
            break
    if cfg.get("clear_at_end") and not sched.has_requests():
        where.update(step=step, phase="reset_prefix_cache", request=None)
        spent = led.cost
        t0 = clock()
        ok = sched.reset_prefix_cache(reset_connector=worker is not None)  # with a Host tier: both tiers
        # vLLM publishes the reset's AllBlocksCleared from the next update_from_output: an empty step
        so = sched.schedule()
        kco, host = worker.step(step, so) if worker is not None else (None, None)
        sched.update_from_output(so, ModelRunnerOutput(req_ids=[], req_id_to_index={}, sampled_token_ids=[],
                                                       logprobs=None, prompt_logprobs_dict={},
                                                       pooler_output=[], kv_connector_output=kco))
        t1 = clock()
        inside = led.cost - spent
        batches, seqs = sub.take(step)
        t4 = clock()
        msg = {"step": step, "engine_s": t1 - t0 - inside, "new": [], "cached": [], "scheduled": {}, "tokens": {},
               "finished": [], "preempted": [], "stats": None, "cleared": bool(ok),
               "free_blocks": pool.get_num_free_blocks(), "cached_blocks": len(pool.cached_block_hash_to_block),
               "batches": batches, "seqs": seqs, "paths": paths.take(), "ledger": led.take(pool),
               "probe": probe(pool), "walk": safe_walk(pool), "probe_s": inside + clock() - t4}
        if tables is not None:
            msg["groups"] = tables.section([], msg, pool)
        if host is not None:
            host["held"] = worker.held()
            msg["offload"] = host
            msg["paths"].update(worker.take_paths())
        send(msg)
        step += 1
    send({"done": {"steps": step, "trial": trial}})


def end_trial(state: dict) -> None:
    """Stop the trial's publisher and subscriber (a crashed trial's too) so that the next one starts clean."""
    sched, sub = state.get("sched"), state.get("sub")
    try:
        if sub is not None:
            sub.sock.close(linger=0)
        if sched is not None and sched.kv_event_publisher is not None:
            sched.kv_event_publisher.shutdown()
    except Exception:  # noqa: BLE001 -- a publisher that will not stop must not hide the trial's own outcome
        traceback.print_exc()
    ledger.CURRENT[0] = None
    state.clear()


def main() -> int:
    out = os.fdopen(os.dup(1), "w", buffering=1 << 20)
    os.dup2(2, 1)  # whatever the engine prints goes to stderr; stdout carries only the protocol
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    os.environ.pop("PYTHONHASHSEED", None)  # vLLM's sha256 NONE_HASH seed is then its fixed default

    def send(obj: Any) -> None:
        out.write(json.dumps(obj, separators=(",", ":")))
        out.write("\n")

    where: dict = {"step": None, "request": None, "phase": "setup"}  # what the driver is doing, for a crash
    package = ""
    state: dict = {}
    try:
        trial = read_trial()
        t0 = time.perf_counter()
        import vllm
        import_s = time.perf_counter() - t0
        package = os.path.dirname(os.path.abspath(vllm.__file__))
        ledger.install()
        n = 0
        with tempfile.TemporaryDirectory(prefix="kvsim-vllm-") as folder:
            while trial is not None:
                try:
                    run_trial(trial[0], trial[1], n, folder, send, where, state, import_s if n == 0 else 0.0)
                except Exception as exc:  # vLLM raised while stepping (a finding), or the driver broke
                    if where["step"] is None and where["phase"] == "setup":
                        raise
                    facts = crash_facts(exc, package, where)
                    if not facts["frame"]:
                        raise
                    traceback.print_exc()
                    crash: dict = {"crash": facts}
                    led, pool = state.get("ledger"), state.get("pool")
                    if led is not None and pool is not None:  # the structures as the engine left them
                        crash["ledger"] = led.take(pool)
                        crash["walk"] = safe_walk(pool)
                    send(crash)
                finally:
                    end_trial(state)
                out.flush()
                n += 1
                trial = read_trial()
        out.flush()
        return 0
    except Exception as exc:  # the engine refused its setup, or the driver broke
        traceback.print_exc()
        if where["step"] is not None or where["phase"] != "setup":
            facts = crash_facts(exc, package, where)
            send({"crash": facts} if facts["frame"] else {"bug": facts})
        else:
            send({"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"})
        out.flush()
        return 1


if __name__ == "__main__":
    sys.exit(main())
