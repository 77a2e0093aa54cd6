"""``python -m gpu.devcheck``: every device-side check and timing in one command, then a table.

On a CUDA machine (CuPy imports, a device runs a probe kernel):

1. codec bit-exactness: the append kernel vs :func:`gpu.codecs.encode` (via NumPy append) on rows with
   zeros, ties, tiny and huge values, wide dynamic range - every profile, both plane orders, BF16 D128;
2. paged attention on the device vs the FP64 oracle and vs the NumPy path: random batches, permuted page
   ids, holes beyond the read domains, inert columns, a hole inside a read domain must be refused;
3. codec and kernel error (rel-L2) per profile against :mod:`gpu.accuracy`'s tables;
4. decode bandwidth: kernel-only time of long-context decode, bytes of K/V planes read per second, as a
   fraction of a measured device-to-device copy (read + write bytes per second); target >= 0.75;
5. paged vs identity-mapped ("dense") timing from :func:`gpu.bench.run_attention_bench`.

Without a usable device it says why, runs the NumPy checks (3 and a short 5) and exits 0 when they pass.
The exit code reflects correctness only (1 when a check fails); timings are reported, never judged.

Must not know about the store model.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from kvsim.gpu.accuracy import CODEC_REL_L2_BUDGET, FP32_KERNEL_REL_L2, KERNEL_REL_L2_BAR, measure_errors
from kvsim.gpu.append import kv_append
from kvsim.gpu.attention import attention
from kvsim.gpu.backend import cupy_unusable_reason, cupy_usable, get_backend
from kvsim.gpu.bench import run_attention_bench
from kvsim.gpu.codecs import PROFILE_NAMES, bytes_per_token_per_head, get_profile
from kvsim.gpu.content import append_content
from kvsim.gpu.formats import round_to_bf16
from kvsim.gpu.oracle import oracle_for_pool, rel_l2
from kvsim.gpu.planes import HEAD_MAJOR, PAGE_MAJOR, PAGE_SIZE, PagedKVPool
from kvsim.gpu.transfer import copy_pages, pack_pages


class Table:
    def __init__(self):
        self.rows: list[tuple[str, str, str, str, str]] = []
        self.failed = 0

    def add(self, check: str, profile: str, detail: str, value: str, ok: bool | None) -> None:
        status = "info" if ok is None else ("ok" if ok else "FAIL")
        self.failed += ok is False
        self.rows.append((check, profile, detail, value, status))
        print(f"  {check:<12} {profile:<6} {detail:<34} {value:>22}  {status}", flush=True)


def _edge_rows(rng, n: int, d: int) -> np.ndarray:
    x = rng.standard_normal((n, d)) * 2.0 ** rng.integers(-20, 10, (n, 1))
    x[0] = 0.0
    x[1] = 448.0
    x[2] = rng.standard_normal(d) * 2.0**-40
    x[3] = rng.integers(-12, 13, d) * 0.25 + 0.5
    x[4] = rng.standard_normal(d) * 2.0 ** rng.integers(-20, 10, d)
    x[5, :] = 0.0
    x[5, 7] = 3.0e38
    return round_to_bf16(x.astype(np.float32))


def check_codecs(table: Table, dev) -> None:
    rng = np.random.default_rng(11)
    cases = [(p, o, 256) for p in PROFILE_NAMES for o in (PAGE_MAJOR, HEAD_MAJOR)] + [("bf16", HEAD_MAJOR, 128)]
    for profile, order, d in cases:
        pools = [PagedKVPool(profile, 2, 3, d, num_pages=6, order=order, rows=1, logical_pages=4, backend=b)
                 for b in ("numpy", dev)]
        pages = rng.permutation(6)[:4]
        ntok = 200
        k = _edge_rows(rng, ntok * 3, d).reshape(ntok, 3, d)
        v = _edge_rows(rng, ntok * 3, d).reshape(ntok, 3, d)
        for pool in pools:
            pool.publish(0, 0, pages)
            for layer in range(2):
                kv_append(pool.layer_view(layer, 0), np.arange(ntok), k, v)
        same = np.array_equal(pack_pages(pools[0], pages), pack_pages(pools[1], pages))
        table.add("codec", profile, f"{order} D{d} append bytes == NumPy", "equal" if same else "differ", same)


def check_attention(table: Table, dev) -> None:
    for i, profile in enumerate(PROFILE_NAMES):
        for j, order in enumerate((PAGE_MAJOR, HEAD_MAJOR)):
            rng = np.random.default_rng(100 + 2 * i + j)
            contexts = [700, 64, 1300]
            logical = 24
            pools = []
            keys = [rng.integers(0, 2**62, c).astype(np.uint64) for c in contexts]
            perm = rng.permutation(len(contexts) * logical + 4)
            for b in ("numpy", dev):
                pool = PagedKVPool(profile, 1, 2, 256, num_pages=perm.size, order=order, rows=4,
                                   logical_pages=logical, backend=b)
                for r, ctx in enumerate(contexts):
                    used = -(-ctx // PAGE_SIZE)
                    pool.publish(r + 1, 0, list(perm[r * logical:r * logical + used]) + [-1] * (logical - used))
                    append_content(pool, r + 1, np.arange(ctx), keys[r])
                pools.append(pool)
            q = rng.standard_normal((3, 4, 12, 256)).astype(np.float32)
            pos = np.array([[c - 4 + w for w in range(4)] for c in contexts])
            valid = [4, 1, 3]
            rows = [1, 2, 3]
            got = pools[1].backend.asnumpy(attention(pools[1], 0, pools[1].backend.asarray(q), rows, pos, valid))
            host = attention(pools[0], 0, q, rows, pos, valid)
            oracle = oracle_for_pool(pools[0], 0, q, rows, pos, valid)
            err = rel_l2(got, oracle)
            inert = all(not got[b, n:].any() for b, n in enumerate(valid))
            ok = err <= min(KERNEL_REL_L2_BAR[profile], FP32_KERNEL_REL_L2) and rel_l2(got, host) < 1e-5 and inert
            table.add("attention", profile, f"{order} vs oracle / NumPy, inert 0", f"{err:.2e}", ok)
            pools[1].publish(3, 5, [-1])
            try:
                attention(pools[1], 0, pools[1].backend.asarray(q), rows, pos, valid)
                refused = False
            except ValueError:
                refused = True
            table.add("attention", profile, f"{order} hole in read domain refused", str(refused), refused)


def check_accuracy(table: Table, backend: str, context: int) -> None:
    for profile in PROFILE_NAMES:
        r = measure_errors(profile, seed=0, context=context, backend=backend)
        table.add("accuracy", profile, f"{backend} codec err (budget {CODEC_REL_L2_BUDGET[profile]:g})",
                  f"{r.codec_rel_l2:.3e}", r.codec_rel_l2 <= CODEC_REL_L2_BUDGET[profile])
        table.add("accuracy", profile, f"{backend} kernel err (bar {KERNEL_REL_L2_BAR[profile]:g})",
                  f"{r.kernel_rel_l2:.3e}",
                  r.kernel_rel_l2 <= min(KERNEL_REL_L2_BAR[profile], FP32_KERNEL_REL_L2))


def _copy_bandwidth(cupy) -> float:
    a = cupy.ones(2**28, dtype=cupy.float32)
    b = cupy.empty_like(a)
    b[...] = a
    start, end = cupy.cuda.Event(), cupy.cuda.Event()
    best = float("inf")
    for _ in range(5):
        start.record()
        b[...] = a
        end.record()
        end.synchronize()
        best = min(best, cupy.cuda.get_elapsed_time(start, end) / 1e3)
    return 2 * a.nbytes / best


def check_bandwidth(table: Table, context: int, batch: int) -> None:
    import cupy  # noqa: PLC0415 - device only

    from kvsim.gpu.cuda_kernels import prepare_attention  # noqa: PLC0415 - device only

    copy_bw = _copy_bandwidth(cupy)
    table.add("bandwidth", "-", "device-to-device copy (r+w)", f"{copy_bw / 1e9:.0f} GB/s", None)
    hkv, hq, pages = 4, 24, -(-context // PAGE_SIZE)
    rng = np.random.default_rng(5)
    chunk = 8192
    for profile in PROFILE_NAMES:
        prof = get_profile(profile)
        pool = PagedKVPool(profile, 1, hkv, 256, num_pages=batch * pages, rows=batch, logical_pages=pages,
                           backend="cupy")
        pool.publish(0, 0, np.arange(chunk // PAGE_SIZE))
        k = rng.standard_normal((chunk, hkv, 256)).astype(np.float32)
        kv_append(pool.layer_view(0, 0), np.arange(chunk), k, k[::-1].copy())
        src = np.arange(chunk // PAGE_SIZE)
        for first in range(chunk // PAGE_SIZE, batch * pages, chunk // PAGE_SIZE):
            dst = np.arange(first, min(first + chunk // PAGE_SIZE, batch * pages))
            copy_pages(pool, src[:dst.size], dst)
        for r in range(batch):
            pool.publish(r, 0, rng.permutation(np.arange(r * pages, (r + 1) * pages)))
        q = cupy.asarray(rng.standard_normal((batch, 1, hq, 256)).astype(np.float32))
        run = prepare_attention(pool.batch_view(0), q, np.arange(batch), np.full((batch, 1), context - 1),
                                np.ones(batch, np.int64), prof)
        run.kernel_only()
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        reps = 20
        start.record()
        for _ in range(reps):
            run.kernel_only()
        end.record()
        end.synchronize()
        seconds = cupy.cuda.get_elapsed_time(start, end) / 1e3 / reps
        read = batch * context * hkv * bytes_per_token_per_head(profile)
        frac = read / seconds / copy_bw
        table.add("bandwidth", profile, f"decode B={batch} ctx={context} kernel",
                  f"{read / seconds / 1e9:.0f} GB/s = {frac:.2f}x copy", None)
        del pool, run


def check_bench(table: Table, backend: str, contexts) -> None:
    for r in run_attention_bench(contexts=contexts, backend=backend, repeats=3):
        table.add("paged/dense", r["profile"], f"{backend} ctx={r['context']} {r['paged_s'] * 1e3:.2f} ms",
                  f"ratio {r['ratio']:.2f}, +{r['extra_bytes'] / 2**20:.1f} MiB", None)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="device-side checks and timings of the gpu package")
    ap.add_argument("--bandwidth-context", type=int, default=131072)
    ap.add_argument("--bandwidth-batch", type=int, default=4)
    args = ap.parse_args(argv)
    table = Table()
    if not cupy_usable():
        print(f"no usable CUDA device ({cupy_unusable_reason()}): device checks skipped, NumPy checks only")
        check_accuracy(table, "numpy", 1024)
        check_bench(table, "numpy", (4096,))
    else:
        dev = get_backend("cupy")
        name = dev.xp.cuda.runtime.getDeviceProperties(0)["name"]
        print(f"device: {name.decode() if isinstance(name, bytes) else name}")
        check_codecs(table, "cupy")
        check_attention(table, "cupy")
        check_accuracy(table, "cupy", 4096)
        check_bandwidth(table, args.bandwidth_context, args.bandwidth_batch)
        check_bench(table, "cupy", (4096, 32768))
    print(f"{len(table.rows)} rows, {table.failed} failed")
    return 1 if table.failed else 0


if __name__ == "__main__":
    sys.exit(main())
