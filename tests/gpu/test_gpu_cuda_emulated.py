"""The CUDA kernels run on the CPU under a small SIMT shim, against the NumPy path and the FP64 oracle.

The kernel source of :mod:`gpu.cuda_source` is compiled by a host C++20 compiler with a shim that gives
each block 256 real threads (reused block after block), ``__syncthreads`` as a block barrier, ``__shfl_xor_sync`` as a
per-warp
exchange, and ``__shared__`` as storage shared by the block's threads. The launch geometry and the split
reduction are the device path's own (:mod:`gpu.splitkv`). This checks indexing, address translation,
the online softmax and the split merge of the kernels without a GPU; timing and memory-model effects
are left to ``python -m gpu.devcheck`` on a device.

Skips where no C++20 compiler with ``<barrier>`` is found.
"""

from __future__ import annotations

import ctypes
import shutil
import subprocess

import numpy as np
import pytest

from kvsim.gpu.attention import attention
from kvsim.gpu.codecs import get_profile
from kvsim.gpu.content import append_content, content_kv
from kvsim.gpu.cuda_source import CODEC_IDS, kernel_source
from kvsim.gpu.hadamard import rotate
from kvsim.gpu.oracle import oracle_for_pool, rel_l2
from kvsim.gpu.planes import HEAD_MAJOR, PAGE_MAJOR, PagedKVPool
from kvsim.gpu.splitkv import THREADS, SplitGeometry, columns, geometry, reduce_splits

CXX = shutil.which("g++") or shutil.which("clang++")
pytestmark = pytest.mark.skipif(CXX is None, reason="no host C++ compiler")

SHIM = r"""
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>
struct kv_dim3 { unsigned int x, y, z; };
static kv_dim3 blockDim, gridDim;
static thread_local kv_dim3 blockIdx, threadIdx;
static std::barrier<>* kv_block_barrier;
static std::barrier<>* kv_warp_barrier[8];
static float kv_exchange[8][32];
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __restrict__ __restrict
#define __shared__ static
static inline void __syncthreads() { kv_block_barrier->arrive_and_wait(); }
static inline float __shfl_xor_sync(unsigned, float v, int off) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  kv_exchange[warp][lane] = v;
  kv_warp_barrier[warp]->arrive_and_wait();
  float r = kv_exchange[warp][lane ^ off];
  kv_warp_barrier[warp]->arrive_and_wait();
  return r;
}
static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
using std::min;
"""

LAUNCHERS = r"""
extern "C" void emu_attention(int gx, int gy, int gz, const float* q, const unsigned char* kcode,
    const unsigned char* kscale, const unsigned char* vcode, const unsigned char* vscale, const int* tables,
    int table_stride, const int* col_row, const int* col_pos, int hq, int hkv, int num_pages, int chunks,
    int pages_per_split, int nsplit, float scale, float* part_acc, float* part_m, float* part_l) {
  std::barrier<> block_bar(KV_THREADS);
  std::vector<std::unique_ptr<std::barrier<>>> warp_bars;
  for (int w = 0; w < KV_WARPS; ++w) {
    warp_bars.emplace_back(new std::barrier<>(32));
    kv_warp_barrier[w] = warp_bars.back().get();
  }
  kv_block_barrier = &block_bar;
  blockDim = {KV_THREADS, 1, 1};
  gridDim = {(unsigned)gx, (unsigned)gy, (unsigned)gz};
  std::vector<std::thread> threads;  /* one block's worth of threads, reused block after block */
  for (int t = 0; t < KV_THREADS; ++t)
    threads.emplace_back([=, &block_bar]() {
      threadIdx = {(unsigned)t, 0, 0};
      for (int z = 0; z < gz; ++z) for (int y = 0; y < gy; ++y) for (int x = 0; x < gx; ++x) {
        blockIdx = {(unsigned)x, (unsigned)y, (unsigned)z};
        kv_paged_attention(q, kcode, kscale, vcode, vscale, tables, table_stride, col_row, col_pos, hq, hkv,
                           num_pages, chunks, pages_per_split, nsplit, scale, part_acc, part_m, part_l);
        block_bar.arrive_and_wait();  /* the block ends before its shared memory is reused */
      }
    });
  for (auto& th : threads) th.join();
}

extern "C" void emu_append(int blocks, int threads, const float* k, const float* v, const int* tok_page,
    const int* tok_off, int ntok, int heads, int num_pages, unsigned char* kcode, unsigned char* kscale,
    unsigned char* vcode, unsigned char* vscale) {
  blockDim = {(unsigned)threads, 1, 1};
  for (int b = 0; b < blocks; ++b) for (int t = 0; t < threads; ++t) {
    blockIdx = {(unsigned)b, 0, 0};
    threadIdx = {(unsigned)t, 0, 0};
    kv_append_tokens(k, v, tok_page, tok_off, ntok, heads, num_pages, kcode, kscale, vcode, vscale);
  }
}
"""

_LIBS: dict = {}


def _lib(tmp_path_factory, profile: str, order: str, head_dim: int):
    prof = get_profile(profile)
    key = (profile, order, head_dim)
    if key not in _LIBS:
        work = tmp_path_factory.mktemp("emu")
        src = work / "emu.cpp"
        src.write_text(SHIM + kernel_source() + LAUNCHERS)
        lib = work / "libemu.so"
        defs = [f"-DKV_HEAD_DIM={head_dim}", f"-DKV_KCODEC={CODEC_IDS[prof.k_codec]}",
                f"-DKV_VCODEC={CODEC_IDS[prof.v_codec]}", f"-DKV_KROT={int(prof.rotate_k)}",
                f"-DKV_VROT={int(prof.rotate_v)}", f"-DKV_ORDER={1 if order == HEAD_MAJOR else 0}"]
        res = subprocess.run([CXX, "-std=c++20", "-O1", "-pthread", "-shared", "-fPIC", "-ffp-contract=off",
                              "-o", str(lib), str(src), *defs], capture_output=True, text=True)
        if res.returncode and "barrier" in res.stderr:
            pytest.skip("host compiler lacks C++20 <barrier>")
        assert res.returncode == 0, res.stderr[-3000:]
        _LIBS[key] = ctypes.CDLL(str(lib))
    return _LIBS[key]


def _p(a):
    return ctypes.c_void_p(a.ctypes.data)


def _planes(view):
    dummy = np.zeros(1, np.uint8)
    return [view.k_pages, view.k_scale_pages if view.k_scale_pages is not None else dummy,
            view.v_pages, view.v_scale_pages if view.v_scale_pages is not None else dummy]


def _emulated_attention(lib, view, q, rows, pos, valid, prof, pages_per_split=None):
    b_count, w_count, hq, d = q.shape
    col_row, col_pos = columns(np.asarray(rows), np.asarray(pos), np.asarray(valid))
    geo = geometry(col_pos, hq // view.num_kv_heads)
    if pages_per_split is not None:  # exercise multi-page splits without a 64+-page context
        max_pages = (int(col_pos.max()) >> 6) + 1
        geo = SplitGeometry(-(-max_pages // pages_per_split), pages_per_split, geo.chunks)
    qr = np.ascontiguousarray((rotate(q) if prof.rotate_k else q).reshape(-1, hq, d), dtype=np.float32)
    ncol = col_pos.size
    part_acc = np.full((ncol, hq, geo.nsplit, d), np.nan, np.float32)
    part_m = np.full((ncol, hq, geo.nsplit), np.nan, np.float32)
    part_l = np.full((ncol, hq, geo.nsplit), np.nan, np.float32)
    gx, gy, gz = geo.grid(view.num_kv_heads, ncol)
    tables = np.ascontiguousarray(view.block_tables)
    lib.emu_attention(gx, gy, gz, _p(qr), *[_p(a) for a in _planes(view)], _p(tables),
                      ctypes.c_int(tables.shape[1]), _p(col_row), _p(col_pos), hq, view.num_kv_heads,
                      view.num_pages, geo.chunks, geo.pages_per_split, geo.nsplit,
                      ctypes.c_float(1.0 / np.sqrt(d)), _p(part_acc), _p(part_m), _p(part_l))
    live = col_pos >= 0
    assert not np.isnan(part_m[live]).any() and not np.isnan(part_acc[live]).any()  # every slot written
    out = reduce_splits(np, part_acc, part_m, part_l, col_pos).reshape(q.shape)
    return rotate(out) if prof.rotate_v else out


CASES = [  # profile, order, head_dim, kv heads, group, contexts, width, valid, pages per split
    ("bf16", PAGE_MAJOR, 256, 2, 3, [130, 70], 2, [2, 1], None),
    ("int8", HEAD_MAJOR, 256, 2, 2, [100, 64], 2, [2, 0], None),
    ("fp8", PAGE_MAJOR, 256, 1, 10, [90], 1, [1], None),  # 10 query heads per KV head: two head chunks
    ("nvfp4", HEAD_MAJOR, 256, 2, 1, [65, 120], 1, [1, 1], None),
    ("k8v4", PAGE_MAJOR, 256, 1, 2, [300], 1, [1], 2),  # 5 pages, 2 pages per split: 3 splits
    ("bf16", HEAD_MAJOR, 128, 2, 2, [100], 2, [2], None),  # draft-style BF16 D128 head-major
]


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[1]}-D{c[2]}" for c in CASES])
def test_emulated_attention_kernel_matches_numpy_and_oracle(tmp_path_factory, case):
    profile, order, head_dim, hkv, group, contexts, width, valid, pages_per_split = case
    prof = get_profile(profile)
    lib = _lib(tmp_path_factory, profile, order, head_dim)
    rng = np.random.default_rng(len(contexts) * 7 + width)
    logical = max(-(-c // 64) for c in contexts) + 1
    pool = PagedKVPool(profile, 1, hkv, head_dim, num_pages=len(contexts) * logical + 1, order=order,
                       rows=len(contexts) + 1, logical_pages=logical)
    perm = rng.permutation(pool.num_pages)
    for b, ctx in enumerate(contexts):
        used = -(-ctx // 64)
        pool.publish(b + 1, 0, list(perm[b * logical:b * logical + used]) + [-1] * (logical - used))
        append_content(pool, b + 1, np.arange(ctx), rng.integers(0, 2**62, ctx).astype(np.uint64))
    q = rng.standard_normal((len(contexts), width, hkv * group, head_dim)).astype(np.float32)
    pos = np.array([[max(0, c - width + w) for w in range(width)] for c in contexts])
    rows = np.arange(1, len(contexts) + 1)
    got = _emulated_attention(lib, pool.batch_view(0), q, rows, pos, np.array(valid), prof, pages_per_split)
    want_np = attention(pool, 0, q, rows, pos, valid)
    oracle = oracle_for_pool(pool, 0, q, rows, pos, valid)
    for b, n in enumerate(valid):
        assert not got[b, n:].any()
    assert rel_l2(got, want_np) < 1e-5
    assert rel_l2(got, oracle) < 1e-4


@pytest.mark.parametrize("profile, order, head_dim", [("k8v4", PAGE_MAJOR, 256), ("int8", HEAD_MAJOR, 256),
                                                      ("bf16", HEAD_MAJOR, 128)])
def test_emulated_append_kernel_writes_like_numpy(tmp_path_factory, profile, order, head_dim):
    lib = _lib(tmp_path_factory, profile, order, head_dim)
    heads, ntok = 2, 150
    pages = np.array([4, 1, 3], np.int32)
    positions = np.arange(ntok)
    keys = np.arange(ntok, dtype=np.uint64) * 13 + 1
    reference = PagedKVPool(profile, 1, heads, head_dim, num_pages=5, order=order, rows=1, logical_pages=3)
    reference.publish(0, 0, pages)
    append_content(reference, 0, positions, keys)
    device = PagedKVPool(profile, 1, heads, head_dim, num_pages=5, order=order, rows=1, logical_pages=3)
    k = np.ascontiguousarray(content_kv(keys, 0, "k", heads, head_dim))
    v = np.ascontiguousarray(content_kv(keys, 0, "v", heads, head_dim))
    tok_page = np.ascontiguousarray(pages[positions >> 6])
    tok_off = np.ascontiguousarray((positions & 63).astype(np.int32))
    threads = 128
    blocks = -(-ntok * heads * 2 // threads)
    lib.emu_append(blocks, threads, _p(k), _p(v), _p(tok_page), _p(tok_off), ntok, heads, 5,
                   *[_p(a) for a in _planes(device.layer_view(0, 0))])
    for name, arr in reference.planes[0].items():
        assert np.array_equal(device.planes[0][name].view(np.uint8), arr.view(np.uint8)), name
    assert THREADS == 256
