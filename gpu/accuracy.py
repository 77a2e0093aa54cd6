"""Accuracy of the paged consumer against the FP64 oracle: tolerance tables (data) and one measurement.

Two errors, both rel-L2 over the whole output of a call, measured separately:

* **kernel error** = paged attention (FP32, any backend) vs the FP64 oracle over the *decoded persistent*
  K/V. This is what the store contract's owner suite measures (its oracle "uses the decoded persistent
  K/V ... storage rounding is not re-modeled"), so the owner's bars, :data:`KERNEL_REL_L2_BAR`, apply to
  the kernel error. They are the bar to beat; our consumer does not quantise Q (the engine's INT8/FP8
  routes do), so its kernel error sits far below them.
* **codec error** = FP64 oracle over the decoded K/V vs FP64 oracle over the original BF16 K/V: what the
  storage profile itself costs. It depends on the data and the query distribution, so it has its own
  budget, :data:`CODEC_REL_L2_BUDGET`, measured here on :mod:`gpu.content` K/V with queries drawn
  N(0, 1) per element (setup in :func:`measure_errors`) and set at 1.4-1.5x the largest value seen
  over seeds 0-3; it is a regression guard for the codecs, not a number from the owner's suite.

Must not know about the store model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvsim.gpu.attention import attention
from kvsim.gpu.codecs import get_profile
from kvsim.gpu.content import append_content, content_kv
from kvsim.gpu.oracle import oracle_attention, oracle_for_pool, rel_l2
from kvsim.gpu.planes import PAGE_SIZE, PagedKVPool

#: Owner-suite rel-L2 bars (research: causal_cache.cpp tolerances); they apply to the KERNEL error.
KERNEL_REL_L2_BAR = {"bf16": 2.8e-3, "int8": 2e-2, "fp8": 8e-2, "nvfp4": 1.5e-2, "k8v4": 8e-2}
#: Our own, tighter kernel bound: an FP32 consumer without Q quantisation must agree with the FP64
#: oracle over the same decoded K/V to about FP32 accumulation error (measured ~1e-6).
FP32_KERNEL_REL_L2 = 1e-4
#: Codec-error budget (oracle on decoded vs oracle on original BF16 K/V) for the measure_errors setup.
CODEC_REL_L2_BUDGET = {"bf16": 0.0, "int8": 3e-2, "fp8": 1.2e-1, "nvfp4": 5e-1, "k8v4": 1.7e-1}


@dataclass(frozen=True)
class ErrorReport:
    profile: str
    backend: str
    context: int
    codec_rel_l2: float
    kernel_rel_l2: float

    @property
    def within_bars(self) -> bool:
        return (self.kernel_rel_l2 <= KERNEL_REL_L2_BAR[self.profile]
                and self.codec_rel_l2 <= CODEC_REL_L2_BUDGET[self.profile])


def measure_errors(profile: str, seed: int = 0, context: int = 2048, columns: int = 4, kv_heads: int = 2,
                   group: int = 4, backend=None) -> ErrorReport:
    """Build a pool with permuted pages, append content, run a causal multi-column call, measure both.

    The last ``columns`` positions of a ``context``-token row are verified at once (column j attends
    [0, context - columns + j]); queries are N(0, 1) per element.
    """
    get_profile(profile)
    rng = np.random.default_rng(seed)
    n_blocks = -(-context // PAGE_SIZE)
    pool = PagedKVPool(profile, 1, kv_heads, 256, num_pages=n_blocks + 3, rows=2, logical_pages=n_blocks + 1,
                       backend=backend)
    pool.publish(1, 0, rng.permutation(pool.num_pages)[:n_blocks])
    keys = rng.integers(0, 2**63, size=context, dtype=np.int64).astype(np.uint64)
    append_content(pool, 1, np.arange(context), keys)
    q = rng.standard_normal((1, columns, kv_heads * group, 256)).astype(np.float32)
    pos = np.arange(context - columns, context)[None, :]
    got = pool.backend.asnumpy(attention(pool, 0, pool.backend.asarray(q), [1], pos, [columns]))
    decoded = oracle_for_pool(pool, 0, q, [1], pos, [columns])
    original = oracle_attention(q[0], content_kv(keys, 0, "k", kv_heads, 256),
                                content_kv(keys, 0, "v", kv_heads, 256), pos[0])
    return ErrorReport(profile, pool.backend.name, context, rel_l2(decoded[0], original), rel_l2(got, decoded))
