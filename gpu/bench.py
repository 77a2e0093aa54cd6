"""Paged decode attention vs dense attention over contiguous K/V of the same stored codes.

Setup (the 27B attention geometry): one layer, Hq = 24, Hkv = 4, D = 256, one decode column at the
last position of a ``context``-token row whose pages are a random permutation of the pool.

* **paged** = :func:`gpu.attention.paged_attention`, the consumer as the engine calls it: per tile of
  pages, translate through the table, gather that tile's codes, decode, online softmax.
* **dense** = the same decode + attention work on a contiguous array. On NumPy: the identical stored
  codes and scales laid out contiguously per head ``(H, context, X)``, decoded in one pass by the same
  decoder into preallocated context-sized FP32 buffers, then one stable softmax over all scores - no
  table, no tiles, no rescaling: the best case paging is measured against (it needs the context-sized
  buffers paging must avoid). On a device: the same kernel over the same codes copied into contiguous
  pages in logical order (identity table), so the ratio isolates the cost of arbitrary page ids.

``extra_bytes`` is the peak extra memory of the paged call: tracemalloc's peak on NumPy (every staging
buffer and temporary), the staging workspace the kernel wrapper allocates on CuPy. Times are the
minimum over repetitions, paged and dense interleaved (the machine may be shared and noisy). Nothing here asserts a
timing.

Must not know about the store model.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np

from kvsim.gpu.append import kv_append
from kvsim.gpu.attention import DEFAULT_TILE_PAGES, paged_attention
from kvsim.gpu.backend import resolve
from kvsim.gpu.codecs import PROFILE_NAMES, get_profile
from kvsim.gpu.decode_tile import decode_into, scales_to_f32
from kvsim.gpu.hadamard import rotate
from kvsim.gpu.planes import PAGE_SIZE, PagedKVPool
from kvsim.gpu.readback import read_stored
from kvsim.gpu.transfer import pack_pages, unpack_pages

HQ, HKV, HEAD_DIM = 24, 4, 256
APPEND_CHUNK = 4096


def _build(profile: str, context: int, backend, seed: int = 0):
    rng = np.random.default_rng(seed)
    pages = -(-context // PAGE_SIZE)
    pool = PagedKVPool(profile, 1, HKV, HEAD_DIM, num_pages=pages, rows=1, logical_pages=pages, backend=backend)
    pool.publish(0, 0, rng.permutation(pages))
    view = pool.layer_view(0, 0)
    for lo in range(0, context, APPEND_CHUNK):
        n = min(APPEND_CHUNK, context - lo)
        k = rng.standard_normal((n, HKV, HEAD_DIM)).astype(np.float32)
        v = rng.standard_normal((n, HKV, HEAD_DIM)).astype(np.float32)
        kv_append(view, np.arange(lo, lo + n), k, v)
    q = rng.standard_normal((1, 1, HQ, HEAD_DIM)).astype(np.float32)
    return pool, q


def _dense_inputs(pool, context: int) -> dict:
    """The row's stored codes/scales, contiguous per head: ``{plane: (H, context, X)}`` (NumPy)."""
    stored = read_stored(pool, 0, 0, context)
    return {spec.name: np.ascontiguousarray(stored[spec.name].transpose(1, 0, 2)) for spec in pool.schema}


def _identity_pool(pool, context: int):
    """A copy of the row's pages laid out contiguously in logical order, mapped by the identity table."""
    pages = -(-context // PAGE_SIZE)
    dense = PagedKVPool(pool.storage, 1, HKV, HEAD_DIM, num_pages=pages, rows=1, logical_pages=pages,
                        backend=pool.backend)
    dense.publish(0, 0, np.arange(pages))
    unpack_pages(dense, pack_pages(pool, pool.table_row(0)[:pages]), np.arange(pages))
    return dense


class DenseAttentionNumpy:
    """Dense reference workload on NumPy: decode all of K and V at once, one stable softmax, FP32.

    The context-sized FP32 buffers are allocated once, outside the timed call, so dense pays no
    allocation or first-touch cost: it is the best case the paged consumer is compared with.
    """

    def __init__(self, profile: str, planes: dict, head_dim: int):
        self.prof = get_profile(profile)
        self.planes = planes
        hkv, context, _ = planes["k_code"].shape
        self.values = {p: np.empty((hkv, context, head_dim), dtype=np.float32) for p in ("k", "v")}
        self.scales = {p: np.empty(planes[f"{p}_scale"].shape, dtype=np.float32)
                       for p in ("k", "v") if f"{p}_scale" in planes}

    def __call__(self, q: np.ndarray) -> np.ndarray:
        prof = self.prof
        for part in ("k", "v"):
            codec = prof.codec(part).name
            scale = self.scales.get(part)
            if scale is not None:
                scales_to_f32(codec, self.planes[f"{part}_scale"], scale)
            decode_into(codec, self.planes[f"{part}_code"], scale, self.values[part])
        k, v = self.values["k"], self.values["v"]
        d = q.shape[-1]
        qq = rotate(q) if prof.rotate_k else q
        qg = qq.reshape(k.shape[0], -1, d)
        s = np.matmul(qg, k.transpose(0, 2, 1))
        s *= np.float32(1.0 / np.sqrt(d))
        s -= s.max(axis=-1, keepdims=True)
        np.exp(s, out=s)
        o = (np.matmul(s, v) / s.sum(axis=-1, keepdims=True)).reshape(q.shape)
        return rotate(o) if prof.rotate_v else o


def _min_times(fns, repeats: int, sync) -> list[float]:
    """Minimum wall time of each callable, the callables interleaved so load spikes hit them alike."""
    best = [float("inf")] * len(fns)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            sync()
            t0 = time.perf_counter()
            fn()
            sync()
            best[i] = min(best[i], time.perf_counter() - t0)
    return best


def run_attention_bench(contexts=(4096, 32768), profiles=PROFILE_NAMES, backend=None, repeats: int = 5,
                        tile_pages: int = DEFAULT_TILE_PAGES) -> list[dict]:
    """One dict per (context, profile): ``{"context", "profile", "backend", "paged_s", "dense_s", "ratio",
    "extra_bytes"}``; ratio = paged_s / dense_s."""
    be = resolve(backend)
    results = []
    for context in contexts:
        for profile in profiles:
            pool, q_host = _build(profile, context, be)
            q = be.asarray(q_host)
            view = pool.batch_view(0)
            pos = np.array([[context - 1]])
            planes = None if be.is_device else _dense_inputs(pool, context)

            def paged(view=view, q=q, pos=pos):  # bound now: the timing below runs in this iteration
                return paged_attention(view, q, [0], pos, [1], tile_pages=tile_pages)

            if be.is_device:
                from kvsim.gpu.cuda_kernels import last_staging_bytes  # noqa: PLC0415 - CuPy only

                dense_view = _identity_pool(pool, context).batch_view(0)

                def dense(dense_view=dense_view, q=q, pos=pos):
                    return paged_attention(dense_view, q, [0], pos, [1])
            else:
                dense_np = DenseAttentionNumpy(profile, planes, HEAD_DIM)

                def dense(dense_np=dense_np, q_host=q_host):
                    return dense_np(q_host)
            paged()
            dense()  # warm-up (kernel compilation, first-touch)
            paged_s, dense_s = _min_times((paged, dense), repeats, be.synchronize)
            if be.is_device:
                extra = last_staging_bytes()
            else:
                tracemalloc.start()
                paged()
                extra = tracemalloc.get_traced_memory()[1]
                tracemalloc.stop()
            results.append({"context": context, "profile": profile, "backend": be.name, "paged_s": paged_s,
                            "dense_s": dense_s, "ratio": paged_s / dense_s, "extra_bytes": int(extra)})
    return results


def format_results(results: list[dict]) -> str:
    lines = [f"{'context':>8} {'profile':>7} {'backend':>7} {'paged ms':>9} {'dense ms':>9} {'ratio':>6} "
             f"{'extra KiB':>10}"]
    for r in results:
        lines.append(f"{r['context']:>8} {r['profile']:>7} {r['backend']:>7} {r['paged_s'] * 1e3:>9.2f} "
                     f"{r['dense_s'] * 1e3:>9.2f} {r['ratio']:>6.2f} {r['extra_bytes'] / 1024:>10.0f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="paged vs dense decode attention")
    ap.add_argument("--contexts", type=int, nargs="+", default=[4096, 32768])
    ap.add_argument("--profiles", nargs="+", default=list(PROFILE_NAMES), choices=PROFILE_NAMES)
    ap.add_argument("--backend", choices=["numpy", "cupy"], default=None)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tile-pages", type=int, default=DEFAULT_TILE_PAGES)
    args = ap.parse_args(argv)
    print(format_results(run_attention_bench(args.contexts, args.profiles, args.backend, args.repeats,
                                             args.tile_pages)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
