"""CUDA C source of the device kernels: KV append through (page, offset) and split-KV paged attention.

Compiled by NVRTC together with :data:`gpu.cuda_codec_source.CODEC_SOURCE`. Compile-time parameters
(``-D``): ``KV_HEAD_DIM``, ``KV_KCODEC``/``KV_VCODEC`` (0 bf16, 1 int8_g64, 2 fp8_row256, 3 nvfp4_g16),
``KV_KROT``/``KV_VROT`` (0/1), ``KV_ORDER`` (0 page-major, 1 head-major). The attention kernel reads the
planes page by page through the block table (``page = table[row, pos >> 6]``, ``offset = pos & 63``),
never gathering a contiguous context; its split partials are merged by :mod:`gpu.splitkv`.

Must not know about the store model, and holds no Python logic beyond the source text.
"""

from kvsim.gpu.cuda_codec_source import CODEC_IDS, CODEC_SOURCE

__all__ = ["CODEC_IDS", "CODEC_SOURCE", "KERNEL_SOURCE", "kernel_source"]

KERNEL_SOURCE = r"""
#ifndef KV_HEAD_DIM
#define KV_HEAD_DIM 256
#endif
#ifndef KV_ORDER
#define KV_ORDER 0
#endif
#define KV_THREADS 256
#define KV_WARPS (KV_THREADS / 32)
#define KV_MAXG 8
#define KV_DPL (KV_HEAD_DIM / 32)
#define KV_NEG_INF (-__int_as_float(0x7f800000))

__device__ __forceinline__ unsigned long long kv_vec(int page, int head, int off, int heads, int pages) {
#if KV_ORDER == 0
  return ((unsigned long long)page * (unsigned long long)heads + (unsigned long long)head) * 64ull
         + (unsigned long long)off;
#else
  return ((unsigned long long)head * (unsigned long long)pages + (unsigned long long)page) * 64ull
         + (unsigned long long)off;
#endif
}

template <int CODEC>
__device__ __forceinline__ float kv_elem(const unsigned char* __restrict__ code,
                                         const unsigned char* __restrict__ scale,
                                         unsigned long long vec, int d) {
  if (CODEC == KV_CODEC_BF16) {
    const unsigned short* c = (const unsigned short*)code;
    return kv_u2f(((unsigned int)c[vec * KV_HEAD_DIM + d]) << 16);
  } else if (CODEC == KV_CODEC_INT8) {
    const signed char* c = (const signed char*)code;
    const unsigned short* s = (const unsigned short*)scale;
    return (float)c[vec * KV_HEAD_DIM + d] * kv_f16_to_f32(s[vec * (KV_HEAD_DIM / 64) + d / 64]);
  } else if (CODEC == KV_CODEC_FP8) {
    const unsigned short* s = (const unsigned short*)scale;
    return kv_e4m3_to_f32(code[vec * KV_HEAD_DIM + d]) * kv_f16_to_f32(s[vec]);
  } else {
    unsigned int b = code[vec * (KV_HEAD_DIM / 2) + d / 2];
    unsigned int n = (d & 1) ? (b >> 4) : (b & 15u);
    return kv_e2m1_to_f32(n) * kv_e4m3_to_f32(scale[vec * (KV_HEAD_DIM / 16) + d / 16]);
  }
}

/* One thread per (token, head, part): BF16 rounding, rotation, codec, write through (page, offset). */
extern "C" __global__ void kv_append_tokens(const float* __restrict__ k, const float* __restrict__ v,
                                            const int* __restrict__ tok_page, const int* __restrict__ tok_off,
                                            int ntok, int heads, int num_pages,
                                            unsigned char* kcode, unsigned char* kscale,
                                            unsigned char* vcode, unsigned char* vscale) {
  long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (idx >= (long long)ntok * heads * 2) return;
  int part = (int)(idx & 1);
  long long th = idx >> 1;
  int t = (int)(th / heads);
  int h = (int)(th - (long long)t * heads);
  unsigned long long vec = kv_vec(tok_page[t], h, tok_off[t], heads, num_pages);
  int codec = part ? KV_VCODEC : KV_KCODEC;
  int rot = part ? KV_VROT : KV_KROT;
  const float* src = (part ? v : k) + (unsigned long long)th * KV_HEAD_DIM;
  unsigned char* code = (part ? vcode : kcode) + vec * (unsigned long long)kv_code_bytes(codec, KV_HEAD_DIM);
  unsigned char* sc = (part ? vscale : kscale) + vec * (unsigned long long)kv_scale_bytes(codec, KV_HEAD_DIM);
  kv_prepare_and_encode(src, KV_HEAD_DIM, codec, rot, code, sc);
}

/* Split-KV paged attention partials. Block = (split, kv head x query-head chunk, column); it reads pages
   [split * pages_per_split, ...) of the column's read domain through the table, page by page, with an
   online softmax over FP32 scores; warps score 8 keys each, thread d accumulates output dimension d. */
extern "C" __global__ void __launch_bounds__(KV_THREADS)
kv_paged_attention(const float* __restrict__ q,
                   const unsigned char* __restrict__ kcode, const unsigned char* __restrict__ kscale,
                   const unsigned char* __restrict__ vcode, const unsigned char* __restrict__ vscale,
                   const int* __restrict__ tables, int table_stride,
                   const int* __restrict__ col_row, const int* __restrict__ col_pos,
                   int hq, int hkv, int num_pages, int chunks, int pages_per_split, int nsplit, float scale,
                   float* __restrict__ part_acc, float* __restrict__ part_m, float* __restrict__ part_l) {
  __shared__ float s_q[KV_MAXG][KV_HEAD_DIM];
  __shared__ float s_p[KV_MAXG][64];
  __shared__ float s_m[KV_MAXG];
  __shared__ float s_l[KV_MAXG];
  __shared__ float s_alpha[KV_MAXG];

  const int split = blockIdx.x;
  const int kvh = blockIdx.y / chunks;
  const int chunk = blockIdx.y - kvh * chunks;
  const int col = blockIdx.z;
  const int group = hq / hkv;
  const int h0 = kvh * group + chunk * KV_MAXG;
  const int gc = min(KV_MAXG, group - chunk * KV_MAXG);
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;

  const int pos = col_pos[col];
  const int nkeys = pos + 1;
  const int npages = pos < 0 ? 0 : ((nkeys + 63) >> 6);
  const int p_begin = split * pages_per_split;
  const int p_end = min(npages, p_begin + pages_per_split);
  const int row = col_row[col];

  for (int i = tid; i < KV_MAXG * KV_HEAD_DIM; i += KV_THREADS) {
    int hh = i / KV_HEAD_DIM;
    int d = i - hh * KV_HEAD_DIM;
    s_q[hh][d] = hh < gc ? q[((unsigned long long)col * hq + h0 + hh) * KV_HEAD_DIM + d] : 0.0f;
  }
  if (tid < KV_MAXG) {
    s_m[tid] = KV_NEG_INF;
    s_l[tid] = 0.0f;
    s_alpha[tid] = 1.0f;
  }
  __syncthreads();

  float qr[KV_MAXG][KV_DPL];
#pragma unroll
  for (int hh = 0; hh < KV_MAXG; ++hh) {
#pragma unroll
    for (int j = 0; j < KV_DPL; ++j) qr[hh][j] = s_q[hh][lane * KV_DPL + j];
  }
  float acc[KV_MAXG];
#pragma unroll
  for (int hh = 0; hh < KV_MAXG; ++hh) acc[hh] = 0.0f;

  for (int pg = p_begin; pg < p_end; ++pg) {
    const int page = tables[(unsigned long long)row * table_stride + pg];
    const int kcount = min(64, nkeys - pg * 64);

    for (int o = warp; o < 64; o += KV_WARPS) {
      if (o < kcount) {
        const unsigned long long vec = kv_vec(page, kvh, o, hkv, num_pages);
        float kr[KV_DPL];
#pragma unroll
        for (int j = 0; j < KV_DPL; ++j) kr[j] = kv_elem<KV_KCODEC>(kcode, kscale, vec, lane * KV_DPL + j);
#pragma unroll
        for (int hh = 0; hh < KV_MAXG; ++hh) {
          float dot = 0.0f;
#pragma unroll
          for (int j = 0; j < KV_DPL; ++j) dot += qr[hh][j] * kr[j];
#pragma unroll
          for (int off = 16; off > 0; off >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
          if (lane == 0) s_p[hh][o] = dot * scale;
        }
      } else if (lane < KV_MAXG) {
        s_p[lane][o] = KV_NEG_INF;
      }
    }
    __syncthreads();

    if (tid < KV_MAXG) {
      float mx = KV_NEG_INF;
      for (int o = 0; o < kcount; ++o) mx = fmaxf(mx, s_p[tid][o]);
      const float m_new = fmaxf(s_m[tid], mx);
      s_alpha[tid] = expf(s_m[tid] - m_new);
      s_m[tid] = m_new;
    }
    __syncthreads();

    for (int i = tid; i < KV_MAXG * 64; i += KV_THREADS) {
      const int hh = i >> 6;
      const int o = i & 63;
      s_p[hh][o] = o < kcount ? expf(s_p[hh][o] - s_m[hh]) : 0.0f;
    }
    __syncthreads();

    if (tid < KV_MAXG) {
      float sum = 0.0f;
      for (int o = 0; o < kcount; ++o) sum += s_p[tid][o];
      s_l[tid] = s_l[tid] * s_alpha[tid] + sum;
    }
    if (tid < KV_HEAD_DIM) {
#pragma unroll
      for (int hh = 0; hh < KV_MAXG; ++hh) acc[hh] *= s_alpha[hh];
      for (int o = 0; o < kcount; ++o) {
        const float vv = kv_elem<KV_VCODEC>(vcode, vscale, kv_vec(page, kvh, o, hkv, num_pages), tid);
#pragma unroll
        for (int hh = 0; hh < KV_MAXG; ++hh) acc[hh] += s_p[hh][o] * vv;
      }
    }
    __syncthreads();
  }

#pragma unroll
  for (int hh = 0; hh < KV_MAXG; ++hh) {
    if (hh < gc) {
      const unsigned long long slot = ((unsigned long long)col * hq + h0 + hh) * nsplit + split;
      if (tid < KV_HEAD_DIM) part_acc[slot * KV_HEAD_DIM + tid] = acc[hh];
      if (tid == 0) {
        part_m[slot] = s_m[hh];
        part_l[slot] = s_l[hh];
      }
    }
  }
}
"""


def kernel_source() -> str:
    """Full translation unit for NVRTC: codec functions, then the kernels."""
    return CODEC_SOURCE + KERNEL_SOURCE
