"""kvsim's driver for vLLM's real scheduler, run as a script by the engine venv's python (never imported by kvsim).

It imports only vLLM (with what vLLM itself ships: torch, msgspec, pyzmq) and the standard library. kvsim
writes JSON lines on stdin: a config object, one ``{"request": {"id", "tokens", "max_new_tokens"}}`` per
request, then ``{"end": true}``. The driver builds ``vllm.v1.core.sched.scheduler.Scheduler`` (CPU target, a
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
"""

import json
import os
import sys
import tempfile
import time
import traceback
import zlib
from typing import Any

TINY_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
              "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 4, "num_hidden_layers": 1,
              "vocab_size": 151936, "max_position_embeddings": 1 << 20, "torch_dtype": "float16",
              "rms_norm_eps": 1e-6, "rope_theta": 10000.0}


def token(rid: str, pos: int, vocab: int) -> int:
    """A synthetic output token, deterministic in (request, position) -- the same formula as kvsim's peers."""
    return zlib.crc32(f"{rid}:{pos}".encode()) % vocab


def build(cfg: dict, folder: str) -> Any:
    """The real Scheduler over a hand-built KV cache of cfg["num_blocks"] blocks, events on an ipc endpoint."""
    import torch
    from vllm.config import CacheConfig, KVEventsConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.structured_output import StructuredOutputManager

    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(TINY_LLAMA, f)
    bs, n, max_len = cfg["block_size"], cfg["num_blocks"], cfg["max_model_len"]
    model = ModelConfig(model=folder, skip_tokenizer_init=True, dtype="float16", max_model_len=max_len)
    cache = CacheConfig(block_size=bs, enable_prefix_caching=True)
    sched = SchedulerConfig(max_num_seqs=cfg["max_num_seqs"], max_num_batched_tokens=cfg["max_num_batched_tokens"],
                            max_model_len=max_len, enable_chunked_prefill=True, is_encoder_decoder=False)
    events = KVEventsConfig(enable_kv_cache_events=True, publisher="zmq", endpoint=f"ipc://{folder}/kv-events",
                            topic="kv")
    vc = VllmConfig(model_config=model, cache_config=cache, scheduler_config=sched, kv_events_config=events)
    kv = KVCacheConfig(num_blocks=n, kv_cache_tensors=[], kv_cache_groups=[
        KVCacheGroupSpec(["model.layers.0.self_attn.attn"],
                         FullAttentionSpec(block_size=bs, num_kv_heads=1, head_size=1, dtype=torch.float16))])
    cache.num_gpu_blocks = n
    return Scheduler(vllm_config=vc, kv_cache_config=kv, structured_output_manager=StructuredOutputManager(vc),
                     block_size=bs, log_stats=True)


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
        pub = sched.kv_event_publisher
        # PUB/SUB drops what is sent before the subscription arrives: publish empty probes (negative ts, no
        # events; the scheduler never publishes an empty batch) until one comes back; later ones are skipped
        for i in range(400):
            pub.publish(KVEventBatch(ts=-1.0 - i, events=[]))
            if self.sock.poll(50):
                break
        else:
            raise RuntimeError("no batch came back from vLLM's ZMQ publisher")
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
            seqs.append(int.from_bytes(seq, "big"))
        return batches, seqs


def main() -> int:
    out = os.fdopen(os.dup(1), "w", buffering=1 << 20)
    os.dup2(2, 1)  # whatever the engine prints goes to stderr; stdout carries only the protocol
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    os.environ.pop("PYTHONHASHSEED", None)  # vLLM's sha256 NONE_HASH seed is then its fixed default

    def send(obj: Any) -> None:
        out.write(json.dumps(obj, separators=(",", ":")))
        out.write("\n")

    try:
        cfg = json.loads(sys.stdin.readline())
        reqs = []
        for line in sys.stdin:
            msg = json.loads(line)
            if "end" in msg:
                break
            reqs.append(msg["request"])
        t0 = time.perf_counter()
        import vllm
        from vllm.sampling_params import SamplingParams
        from vllm.utils.hashing import get_hash_fn_by_name
        from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
        from vllm.v1.outputs import ModelRunnerOutput
        from vllm.v1.request import Request
        import_s = time.perf_counter() - t0
        with tempfile.TemporaryDirectory(prefix="kvsim-vllm-") as folder:
            sched = build(cfg, folder)
            algo = sched.cache_config.prefix_caching_hash_algo
            hash_fn = get_hash_fn_by_name(algo)
            init_none_hash(hash_fn)
            hasher = get_request_block_hasher(cfg["block_size"], hash_fn)
            sub = Subscriber(sched, f"ipc://{folder}/kv-events")
            send({"hello": {"engine": f"vllm {vllm.__version__}", "block_size": cfg["block_size"],
                            "num_blocks": cfg["num_blocks"], "usable_blocks": cfg["num_blocks"] - 1,
                            "hash_algo": algo, "import_s": round(import_s, 3)}})
            vocab = cfg["vocab"]
            clock = time.perf_counter
            t0 = clock()
            for r in reqs:
                sp = SamplingParams(max_tokens=r["max_new_tokens"], ignore_eos=True, temperature=0.0)
                sched.add_request(Request(r["id"], r["tokens"], sp, None, arrival_time=0.0, block_hasher=hasher))
            add_s = clock() - t0
            step, idle = 0, 0
            pool = sched.kv_cache_manager.block_pool
            while sched.has_requests():
                t0 = clock()
                so = sched.schedule()
                t1 = clock()
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
                mro = ModelRunnerOutput(req_ids=ids, req_id_to_index={rid: i for i, rid in enumerate(ids)},
                                        sampled_token_ids=sampled, logprobs=None, prompt_logprobs_dict={},
                                        pooler_output=[])
                t2 = clock()
                outs = sched.update_from_output(so, mro)
                t3 = clock()
                finished = sorted(o.request_id for eco in outs.values() for o in eco.outputs
                                  if o.finish_reason is not None)
                cr = so.scheduled_cached_reqs
                batches, seqs = sub.take(step)
                msg = {
                    "step": step, "engine_s": (t1 - t0) + (t3 - t2) + (add_s if step == 0 else 0.0),
                    "new": [[n.req_id, n.num_computed_tokens, list(n.block_ids[0])] for n in so.scheduled_new_reqs],
                    "cached": [[rid, rid in cr.resumed_req_ids, list(b[0]) if b is not None else None, c]
                               for rid, b, c in zip(cr.req_ids, cr.new_block_ids, cr.num_computed_tokens, strict=True)],
                    "scheduled": {rid: so.num_scheduled_tokens[rid] for rid in ids},
                    "tokens": {rid: s[0] for rid, s in zip(ids, sampled, strict=True) if s},
                    "finished": finished,
                    "preempted": sorted(so.preempted_req_ids or ()),
                    "stats": None if pcs is None else {
                        "requests": pcs.requests, "queries": pcs.queries, "hits": pcs.hits,
                        "preempted_requests": pcs.preempted_requests, "preempted_queries": pcs.preempted_queries,
                        "preempted_hits": pcs.preempted_hits},
                    "free_blocks": pool.get_num_free_blocks(),
                    "cached_blocks": len(pool.cached_block_hash_to_block),
                    "batches": batches, "seqs": seqs,
                }
                send(msg)
                step += 1
                idle = 0 if ids else idle + 1
                if idle >= 64:
                    send({"stalled": sorted(sched.requests)})
                    break
            sched.kv_event_publisher.shutdown()
            send({"done": {"steps": step}})
        out.flush()
        return 0
    except Exception as exc:  # the engine refused or broke: say so on the protocol, details on stderr
        traceback.print_exc()
        send({"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"})
        out.flush()
        return 1


if __name__ == "__main__":
    sys.exit(main())
