"""The vLLM driver's Host tier (``--offload-blocks N``): vLLM's OffloadingConnector with its CPUOffloadingManager
behind the real Scheduler, and this driver playing the worker side. Run in the engine's venv (never imported by
kvsim; it imports only vLLM and the standard library).

The connector's scheduler side is vLLM's own (``vllm/distributed/kv_transfer/kv_connector/v1/offloading/
scheduler.py``: lookups on admission, ``prepare_load`` / ``prepare_store`` / ``touch`` / ``complete_store`` /
``complete_load`` on the ``CPUOffloadingManager``, its LRU or ARC policy). Each step's ``SchedulerOutput`` carries
the connector's metadata: store jobs (GPU blocks to CPU chunks), load jobs (CPU chunks to GPU blocks, ``sync``
ones completed before the forward) and ``jobs_to_flush``. This worker completes a job -- the copy and its
acknowledgement, reported back through ``kv_connector_worker_meta.completed_jobs`` (and ``finished_recving`` for
an async load) -- when it falls due: a store no earlier than the step after it was issued (vLLM's worker submits
stores at the next step's start), a sync load or a flushed job before this step's forward, anything else after a
seeded delay of 0 .. ``ack_delay`` steps. With ``fail_loads`` an async load fails with that probability
(``failed_recving``: the scheduler recomputes the request). Same seed, same completions.

Per step it reports (``offload`` in the step line): the jobs issued (job id, request, one ``[source, destination,
key]`` per transfer, the key as 16 hex digits of its block hash and its group), the jobs completed before the
forward (``acks``: ``[job, ok]``), the manager's evictions and lookups (wrappers on ``CPUOffloadingManager``,
class-level in this process), and the paths taken.
"""

import random
from typing import Any

PATHS = ("store", "store_skipped", "host_eviction", "load", "load_sync", "load_failed", "flush", "hit_pending",
         "reset")


def short(key: Any) -> str:
    """An offload key (block hash bytes and a 4-byte group index) as 16 hex digits of its hash and the group."""
    raw = bytes(key)
    return raw[-12:-4].hex() + f"/{int.from_bytes(raw[-4:], 'big')}"


SYNC_LOAD_TOKENS = 64
"""Loads of up to this many tokens per step complete before the forward (the connector's sync load budget);
longer ones load asynchronously, the request waiting for them."""


def transfer_config(cfg: dict, nbytes: int, bytes_per_token: int = 0) -> Any:
    from vllm.config import KVTransferConfig
    extra = {"cpu_bytes_to_use": nbytes, "eviction_policy": cfg.get("policy", "lru"),
             "self_describing_kv_events": True,  # CPU stores carry tokens and parents: judged like GPU ones
             "sync_load_budget_bytes": SYNC_LOAD_TOKENS * bytes_per_token}
    return KVTransferConfig(kv_connector="OffloadingConnector", kv_role="kv_both", kv_connector_extra_config=extra)


class Worker:
    """The worker side: jobs in flight and their due steps; the manager's calls counted and reported."""

    def __init__(self, sched: Any, cfg: dict) -> None:
        self.sched = sched
        self.cs = sched.connector.connector_scheduler
        self.manager = self.cs.manager
        self.rng = random.Random(f"kvsim-offload:{cfg.get('seed', 0)}")
        self.delay = int(cfg.get("ack_delay", 0))
        self.fail = float(cfg.get("fail_loads", 0.0))
        self.pending: list[tuple[int, int, str, str | None]] = []  # (due step, job, kind, request of an async load)
        self.n = dict.fromkeys(PATHS, 0)
        self.evicted: list[str] = []
        self.lookups: list[list] = []
        self._wrap()

    @property
    def num_chunks(self) -> int:
        return int(self.manager._num_chunks)

    def _wrap(self) -> None:
        from vllm.v1.kv_offload.cpu import manager as cm

        evicted, lookups, n = self.evicted, self.lookups, self.n
        cls = cm.CPUOffloadingManager
        prepare_store, lookup, reset = cls.prepare_store, cls.lookup, cls.reset_cache

        def reset_noted(self_: Any) -> None:
            n["reset"] += 1
            reset(self_)
        cls.reset_cache = reset_noted

        def prepare_store_noted(self_: Any, keys: Any, req_context: Any) -> Any:
            out = prepare_store(self_, keys, req_context)
            if out is None:
                n["store_skipped"] += 1
            else:
                evicted.extend(short(k) for k in out.evicted_keys)
                n["host_eviction"] += len(out.evicted_keys)
            return out

        def lookup_noted(self_: Any, key: Any, req_context: Any) -> Any:
            out = lookup(self_, key, req_context)
            lookups.append([short(key), out.name])
            n["hit_pending"] += out.name == "HIT_PENDING"
            return out
        cls.prepare_store = prepare_store_noted
        cls.lookup = lookup_noted

    def step(self, step: int, so: Any) -> tuple[Any, dict]:
        """The jobs ``so`` issues; which complete before this step's forward: the KVConnectorOutput to hand to
        ``update_from_output`` and the step's ``offload`` report."""
        from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import OffloadingWorkerMetadata
        from vllm.v1.outputs import KVConnectorOutput

        meta = so.kv_connector_metadata
        jobs = self.cs._jobs
        stores, loads = [], []
        rng, delay = self.rng, self.delay
        now: list[list] = []        # [job, ok] completed before this step's forward
        flushed = set(meta.jobs_to_flush or ()) if meta is not None else set()
        if meta is not None:
            for j, t in sorted(meta.store_jobs.items()):
                stores.append([j, t.req_id, self._pairs(jobs.get(j), t.src_spec.block_ids, t.dst_spec.block_ids,
                                                        host_side=1)])
                self.n["store"] += 1
                if j not in flushed:
                    self.pending.append((step + 1 + rng.randint(0, delay), j, "store", None))
            for j, t in sorted(meta.load_jobs.items()):
                loads.append([j, t.req_id, self._pairs(jobs.get(j), t.src_spec.block_ids, t.dst_spec.block_ids,
                                                       host_side=0), bool(t.sync)])
                self.n["load_sync" if t.sync else "load"] += 1
                if t.sync:
                    now.append([j, True])
                else:
                    self.pending.append((step + rng.randint(0, delay), j, "load", t.req_id))
        recv, failed = set(), set()
        if flushed:
            self.n["flush"] += len(flushed)
            self.pending = [p for p in self.pending if p[1] not in flushed]
            now += [[j, True] for j in sorted(flushed)]
        due = [p for p in self.pending if p[0] <= step]
        self.pending = [p for p in self.pending if p[0] > step]
        for _due, j, kind, rid in sorted(due):
            ok = True
            if kind == "load" and self.fail and rng.random() < self.fail:
                ok = False
                failed.add(rid)
                self.n["load_failed"] += 1
            elif kind == "load":
                recv.add(rid)
            now.append([j, ok])
        done = {j: 1 for j, _ok in now}
        out = KVConnectorOutput(finished_sending=set(), finished_recving=recv, failed_recving=failed,
                                kv_connector_worker_meta=OffloadingWorkerMetadata(completed_jobs=done))
        report = {"stores": stores, "loads": loads, "acks": now, "flushed": sorted(flushed),
                  "evicted": list(self.evicted), "lookups": list(self.lookups)}
        self.evicted.clear()
        self.lookups.clear()
        return out, report

    def _pairs(self, job: Any, src: Any, dst: Any, host_side: int) -> list[list]:
        """``[source, destination, key]`` per transfer: the key of the chunk on the Host side, read back from the
        manager's policy (a job's keys are a set; the chunk each went to is the policy's record)."""
        by_chunk: dict[int, str] = {}
        if job is not None:
            policy = self.manager._policy
            for k in job.keys:
                c = policy.get(k)
                if c is not None:
                    by_chunk[int(c.chunk_id)] = short(k)
        out = []
        for a, b in zip(src, dst):
            chunk = int(b) if host_side else int(a)
            out.append([int(a), int(b), by_chunk.get(chunk, "")])
        return out

    def held(self) -> list[list]:
        """``[request, blocks]`` of every request that holds blocks while not running: waiting for its load, or
        loaded and waiting to be scheduled (vLLM's kv_holding_waiting queue)."""
        from vllm.v1.request import RequestStatus
        out = []
        coord = self.sched.kv_cache_manager.coordinator
        for rid in sorted(self.sched.requests):
            if self.sched.requests[rid].status == RequestStatus.RUNNING:
                continue
            blocks = [b.block_id for b in coord.get_blocks(rid)[0] if not b.is_null]
            if blocks:
                out.append([rid, blocks])
        return out

    def busy(self) -> bool:
        return bool(self.pending)

    def take_paths(self) -> dict:
        out = {f"host.{k}": v for k, v in self.n.items() if v}
        for k in self.n:
            self.n[k] = 0
        return out
