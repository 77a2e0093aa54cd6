"""CUDA C source of the persistent codec, shared by the device append kernel and a CPU test harness.

Written as ``__host__ __device__`` functions with no includes, so the very same text compiles under NVRTC
for the device and under a host compiler for tests, which compare it bit for bit with
:mod:`gpu.codecs` and with CUDA's own host conversions. Narrow-float conversions are explicit integer
RNE code with SATFINITE, matching ``__float2half_rn``, ``__nv_cvt_float_to_fp8(.., __NV_SATFINITE,
__NV_E4M3)`` and E2M1 RNE SATFINITE; every FP32 operation is an explicitly rounded intrinsic on the device
(``__fadd_rn`` ...), so nothing is contracted into an FMA. The Hadamard butterfly runs the kernel's stage
order (strides 1, 2, ..., 128; lower index a + b, upper a - b; then x 2^-4), see :mod:`gpu.hadamard`.

Must not know about pages, tables or the store model: vectors only.
"""

CODEC_IDS = {"bf16": 0, "int8_g64": 1, "fp8_row256": 2, "nvfp4_g16": 3}

CODEC_SOURCE = r"""
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define KV_HD __host__ __device__ __forceinline__
#else
#define KV_HD static inline
#endif

#define KV_CODEC_BF16 0
#define KV_CODEC_INT8 1
#define KV_CODEC_FP8 2
#define KV_CODEC_NVFP4 3

KV_HD float kv_u2f(unsigned int u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  union { unsigned int u; float f; } c;
  c.u = u;
  return c.f;
#endif
}

KV_HD unsigned int kv_f2u(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  union { float f; unsigned int u; } c;
  c.f = f;
  return c.u;
#endif
}

KV_HD float kv_add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

KV_HD float kv_sub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

KV_HD float kv_mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

KV_HD float kv_div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

KV_HD float kv_absmax(float a, float x) {
  float ax = kv_u2f(kv_f2u(x) & 0x7fffffffu);
  return ax > a ? ax : a;
}

/* Round-to-nearest-even of the magnitude bits `mant` (with implicit bit) shifted right by `shift`. */
KV_HD unsigned int kv_rne_shift(unsigned int mant, int shift) {
  unsigned int q = mant >> shift;
  unsigned int rem = mant & ((1u << shift) - 1u);
  unsigned int half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) q += 1u;
  return q;
}

/* FP32 -> BF16 bits, RNE (NaN kept quiet). */
KV_HD unsigned short kv_f32_to_bf16(float f) {
  unsigned int x = kv_f2u(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((x >> 16) | 0x40u);
  return (unsigned short)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/* FP32 -> FP16 bits, RNE, overflow to infinity (as __float2half_rn). */
KV_HD unsigned short kv_f32_to_f16(float f) {
  unsigned int x = kv_f2u(f);
  unsigned int sign = (x >> 16) & 0x8000u;
  unsigned int ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return (unsigned short)(sign | 0x7e00u);
  if (ax >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);   /* >= 65520: infinity */
  if (ax >= 0x38800000u) {                                           /* >= 2^-14: normal */
    unsigned int h = ((((ax >> 23) - 112u) << 10) | ((ax & 0x7fffffu) >> 13));
    unsigned int rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h += 1u;
    return (unsigned short)(sign | h);
  }
  if (ax < 0x33000000u) return (unsigned short)sign;                 /* < 2^-25: zero */
  int e = (int)(ax >> 23);                                           /* 102..112 */
  return (unsigned short)(sign | kv_rne_shift((ax & 0x7fffffu) | 0x800000u, 126 - e));
}

KV_HD float kv_f16_to_f32(unsigned short h) {
  unsigned int sign = ((unsigned int)h & 0x8000u) << 16;
  unsigned int e = ((unsigned int)h >> 10) & 0x1fu;
  unsigned int m = (unsigned int)h & 0x3ffu;
  float v;
  if (e == 0u) v = (float)m * 5.9604644775390625e-08f;               /* m * 2^-24, exact */
  else if (e == 31u) v = kv_u2f(0x7f800000u | (m << 13));
  else v = kv_u2f(((e + 112u) << 23) | (m << 13));
  return kv_u2f(kv_f2u(v) | sign);
}

/* FP32 -> FP8 E4M3FN byte, RNE, SATFINITE (finite overflow -> +-448, NaN -> 0x7f). */
KV_HD unsigned char kv_f32_to_e4m3(float f) {
  unsigned int x = kv_f2u(f);
  unsigned int sign = (x >> 24) & 0x80u;
  unsigned int ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return (unsigned char)(sign | 0x7fu);
  if (ax >= 0x43e00000u) return (unsigned char)(sign | 0x7eu);      /* >= 448 */
  if (ax >= 0x3c800000u) {                                           /* >= 2^-6: normal */
    unsigned int c = ((((ax >> 23) - 120u) << 3) | ((ax & 0x7fffffu) >> 20));
    unsigned int rem = ax & 0xfffffu;
    if (rem > 0x80000u || (rem == 0x80000u && (c & 1u))) c += 1u;
    if (c > 0x7eu) c = 0x7eu;
    return (unsigned char)(sign | c);
  }
  if (ax < 0x3a800000u) return (unsigned char)sign;                  /* < 2^-10: zero */
  int e = (int)(ax >> 23);                                           /* 117..120 */
  return (unsigned char)(sign | kv_rne_shift((ax & 0x7fffffu) | 0x800000u, 141 - e));
}

KV_HD float kv_e4m3_to_f32(unsigned int b) {
  unsigned int e = (b >> 3) & 0xfu;
  unsigned int m = b & 7u;
  float v = (e == 0u) ? (float)m * 0.001953125f : kv_u2f(((e + 120u) << 23) | (m << 20));
  return (b & 0x80u) ? -v : v;
}

/* FP32 -> FP4 E2M1 nibble, RNE, SATFINITE (+-6). */
KV_HD unsigned int kv_f32_to_e2m1(float f) {
  unsigned int x = kv_f2u(f);
  unsigned int sign = (x >> 28) & 0x8u;
  unsigned int ax = x & 0x7fffffffu;
  if (ax >= 0x40c00000u) return sign | 0x7u;                         /* >= 6 (and inf/NaN) */
  if (ax >= 0x3f800000u) {                                           /* >= 1: normal */
    unsigned int c = ((((ax >> 23) - 126u) << 1) | ((ax & 0x7fffffu) >> 22));
    unsigned int rem = ax & 0x3fffffu;
    if (rem > 0x200000u || (rem == 0x200000u && (c & 1u))) c += 1u;
    if (c > 0x7u) c = 0x7u;
    return sign | c;
  }
  if (ax <= 0x3e800000u) return sign;                                /* <= 0.25: zero (0.25 ties to 0) */
  int e = (int)(ax >> 23);                                           /* 125..126 */
  return sign | kv_rne_shift((ax & 0x7fffffu) | 0x800000u, 149 - e);
}

KV_HD float kv_e2m1_to_f32(unsigned int n) {
  unsigned int e = (n >> 1) & 3u;
  unsigned int m = n & 1u;
  float v = (e == 0u) ? 0.5f * (float)m : kv_u2f(((e + 126u) << 23) | (m << 22));
  return (n & 8u) ? -v : v;
}

KV_HD int kv_code_bytes(int codec, int d) {
  return codec == KV_CODEC_BF16 ? 2 * d : (codec == KV_CODEC_NVFP4 ? d / 2 : d);
}

KV_HD int kv_scale_bytes(int codec, int d) {
  return codec == KV_CODEC_INT8 ? 2 * (d / 64) : (codec == KV_CODEC_FP8 ? 2 : (codec == KV_CODEC_NVFP4 ? d / 16 : 0));
}

KV_HD void kv_hadamard256(float* x) {
  for (int s = 1; s < 256; s <<= 1) {
    for (int base = 0; base < 256; base += 2 * s) {
      for (int i = base; i < base + s; ++i) {
        float a = x[i];
        float b = x[i + s];
        x[i] = kv_add(a, b);
        x[i + s] = kv_sub(a, b);
      }
    }
  }
  for (int i = 0; i < 256; ++i) x[i] = kv_mul(x[i], 0.0625f);
}

KV_HD void kv_put_u16(unsigned char* p, unsigned short v) {
  p[0] = (unsigned char)(v & 0xffu);
  p[1] = (unsigned char)(v >> 8);
}

/* Encode one prepared FP32 vector (rotated already where the profile rotates) into code/scale bytes. */
KV_HD void kv_encode_prepared(const float* x, int d, int codec, unsigned char* code, unsigned char* scale) {
  if (codec == KV_CODEC_BF16) {
    for (int i = 0; i < d; ++i) kv_put_u16(code + 2 * i, kv_f32_to_bf16(x[i]));
  } else if (codec == KV_CODEC_INT8) {
    for (int g = 0; g < d / 64; ++g) {
      float a = 0.0f;
      for (int i = 0; i < 64; ++i) a = kv_absmax(a, x[g * 64 + i]);
      unsigned short sh = kv_f32_to_f16(kv_div(a, 127.0f));
      float s = kv_f16_to_f32(sh);
      kv_put_u16(scale + 2 * g, sh);
      float inv = (s == 0.0f) ? 0.0f : kv_div(1.0f, s);
      for (int i = 0; i < 64; ++i) {
        int c = 0;
        if (s != 0.0f) {
          float r = rintf(kv_mul(x[g * 64 + i], inv));
          c = r > 127.0f ? 127 : (r < -127.0f ? -127 : (int)r);
        }
        code[g * 64 + i] = (unsigned char)(signed char)c;
      }
    }
  } else if (codec == KV_CODEC_FP8) {
    float a = 0.0f;
    for (int i = 0; i < d; ++i) a = kv_absmax(a, x[i]);
    if (a == 0.0f) {
      kv_put_u16(scale, 0);
      for (int i = 0; i < d; ++i) code[i] = 0;
    } else {
      float t = kv_div(a, 448.0f);
      t = t < 5.9604644775390625e-08f ? 5.9604644775390625e-08f : (t > 65504.0f ? 65504.0f : t);
      unsigned short sh = kv_f32_to_f16(t);
      float inv = kv_div(1.0f, kv_f16_to_f32(sh));
      kv_put_u16(scale, sh);
      for (int i = 0; i < d; ++i) code[i] = kv_f32_to_e4m3(kv_mul(x[i], inv));
    }
  } else {
    for (int g = 0; g < d / 16; ++g) {
      float a = 0.0f;
      for (int i = 0; i < 16; ++i) a = kv_absmax(a, x[g * 16 + i]);
      if (a == 0.0f) {
        scale[g] = 0;
        for (int i = 0; i < 8; ++i) code[g * 8 + i] = 0;
        continue;
      }
      float t = kv_div(a, 6.0f);
      t = t < 0.001953125f ? 0.001953125f : (t > 448.0f ? 448.0f : t);
      unsigned char sb = kv_f32_to_e4m3(t);
      float s = kv_e4m3_to_f32(sb);
      scale[g] = sb;
      for (int i = 0; i < 16; i += 2) {
        unsigned int lo = kv_f32_to_e2m1(kv_div(x[g * 16 + i], s));
        unsigned int hi = kv_f32_to_e2m1(kv_div(x[g * 16 + i + 1], s));
        code[g * 8 + i / 2] = (unsigned char)(lo | (hi << 4));
      }
    }
  }
}

/* The append path of one vector: BF16 rounding of the input, optional rotation, codec. */
KV_HD void kv_prepare_and_encode(const float* src, int d, int codec, int rot, unsigned char* code,
                                 unsigned char* scale) {
  float x[256];
  for (int i = 0; i < d; ++i) x[i] = kv_u2f(((unsigned int)kv_f32_to_bf16(src[i])) << 16);
  if (rot) kv_hadamard256(x);
  kv_encode_prepared(x, d, codec, code, scale);
}
"""
