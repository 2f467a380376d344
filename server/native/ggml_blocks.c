/* ggml's K-quant and legacy blocks as a GGUF stores them, dequantized a row at a time (cpu_kernels.c reads
 * weights kept so).
 *
 * A K-quant's scales change every 16 (Q6_K, Q3_K, Q2_K) or 32 (Q4_K, Q5_K) values and are themselves quantized:
 * MLX's affine groups hold them exactly only at a float copy of the scales (Q4_K: 6 bits a weight for 4.5) or
 * not at all (Q6_K: float32, 32 bits for 6.6). Kept as the file's blocks, a weight takes the file's bytes, and a
 * row dequantizes exactly as ggml's dequantize_row_* (ggml-quants.c) and gguf-py's dequantize compute it: the
 * same float32 products in the same order. */
#include <stdint.h>
#include <string.h>

#include "cpu_kernels.h"

enum { QK_K = 256 };

/* each row function compiled twice, for AVX2 (its loops vectorized: a model's head is tens of millions of values a
 * token) and for any x86-64, picked at load; the products are exact, so both give the same floats */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define ROW_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define ROW_CLONES
#endif

/* ggml_compute_fp16_to_fp32 */
static inline float half(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
    uint32_t bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else { /* subnormal: normalise */
            int e = -1;
            uint32_t m = mant;
            do { e++; m <<= 1; } while (!(m & 0x400));
            bits = sign | (uint32_t)(127 - 15 - e) << 23 | (m & 0x3FF) << 13;
        }
    } else if (exp == 31) {
        bits = sign | 0x7F800000u | mant << 13;
    } else {
        bits = sign | (exp + 127 - 15) << 23 | mant << 13;
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline uint16_t read16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }

/* block_q4_K: d, dmin (f16), scales[12] (8 six-bit scales and mins), qs[128] */
static inline void scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
    if (j < 4) {
        *d = q[j] & 63, *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

ROW_CLONES static void row_q4_k(const uint8_t *x, float *y, int K) {
    for (int b = 0; b < K / QK_K; b++, x += 144) {
        const float d = half(read16(x)), min = half(read16(x + 2));
        const uint8_t *scales = x + 4, *q = x + 16;
        for (int j = 0, is = 0; j < QK_K; j += 64, is += 2, q += 32) {
            uint8_t sc, m;
            scale_min_k4(is, scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            scale_min_k4(is + 1, scales, &sc, &m);
            const float d2 = d * sc, m2 = min * m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (float)(q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

/* block_q6_K: ql[128], qh[64], scales[16] (int8), d (f16) */
ROW_CLONES static void row_q6_k(const uint8_t *x, float *y, int K) {
    for (int b = 0; b < K / QK_K; b++, x += 210) {
        const float d = half(read16(x + 208));
        const uint8_t *ql = x, *qh = x + 128;
        const int8_t *sc = (const int8_t *)(x + 192);
        for (int n = 0; n < QK_K; n += 128, y += 128, ql += 64, qh += 32, sc += 8)
            for (int is = 0; is < 2; is++) { /* 16 values a scale: loops of 16 the compiler vectorizes */
                const float s1 = d * (float)sc[is], s2 = d * (float)sc[is + 2], s3 = d * (float)sc[is + 4];
                const float s4 = d * (float)sc[is + 6];
                for (int l = 16 * is; l < 16 * is + 16; l++) {
                    const int q1 = (int)((ql[l] & 0xF) | ((qh[l] & 3) << 4)) - 32;
                    const int q2 = (int)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                    const int q3 = (int)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                    const int q4 = (int)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                    y[l] = s1 * (float)q1; /* (d * sc) * q, as ggml's d * sc[is] * q */
                    y[l + 32] = s2 * (float)q2;
                    y[l + 64] = s3 * (float)q3;
                    y[l + 96] = s4 * (float)q4;
                }
            }
    }
}

/* block_q5_K: d, dmin (f16), scales[12], qh[32], qs[128] */
ROW_CLONES static void row_q5_k(const uint8_t *x, float *y, int K) {
    for (int b = 0; b < K / QK_K; b++, x += 176) {
        const float d = half(read16(x)), min = half(read16(x + 2));
        const uint8_t *scales = x + 4, *qh = x + 16, *ql = x + 48;
        uint8_t u1 = 1, u2 = 2;
        for (int j = 0, is = 0; j < QK_K; j += 64, is += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
            uint8_t sc, m;
            scale_min_k4(is, scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            scale_min_k4(is + 1, scales, &sc, &m);
            const float d2 = d * sc, m2 = min * m;
            for (int l = 0; l < 32; l++) *y++ = d1 * (float)((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++) *y++ = d2 * (float)((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        }
    }
}

/* block_q3_K: hmask[32], qs[64], scales[12] (16 six-bit scales), d (f16) */
ROW_CLONES static void row_q3_k(const uint8_t *x, float *y, int K) {
    const uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
    for (int b = 0; b < K / QK_K; b++, x += 110) {
        const float d_all = half(read16(x + 108));
        const uint8_t *hm = x, *q = x + 32;
        uint32_t aux[4];
        memcpy(aux, x + 96, 12);
        const uint32_t tmp = aux[2];
        aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
        aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
        aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
        aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
        int8_t scales[16];
        memcpy(scales, aux, 16);
        int is = 0;
        uint8_t m = 1;
        for (int n = 0; n < QK_K; n += 128, q += 32)
            for (int shift = 0, j = 0; j < 4; j++, shift += 2, m <<= 1) {
                float dl = d_all * (float)(scales[is++] - 32);
                for (int l = 0; l < 16; l++) *y++ = dl * (float)((int8_t)((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
                dl = d_all * (float)(scales[is++] - 32);
                for (int l = 0; l < 16; l++)
                    *y++ = dl * (float)((int8_t)((q[l + 16] >> shift) & 3) - ((hm[l + 16] & m) ? 0 : 4));
            }
    }
}

/* block_q2_K: scales[16] (4-bit scale | 4-bit min), qs[64], d, dmin (f16) */
ROW_CLONES static void row_q2_k(const uint8_t *x, float *y, int K) {
    for (int b = 0; b < K / QK_K; b++, x += 84) {
        const float d = half(read16(x + 80)), min = half(read16(x + 82));
        const uint8_t *sc = x, *q = x + 16;
        int is = 0;
        for (int n = 0; n < QK_K; n += 128, q += 32)
            for (int shift = 0, j = 0; j < 4; j++, shift += 2) {
                uint8_t s = sc[is++];
                float dl = d * (float)(s & 0xF), ml = min * (float)(s >> 4);
                for (int l = 0; l < 16; l++) *y++ = dl * (float)((int8_t)((q[l] >> shift) & 3)) - ml;
                s = sc[is++];
                dl = d * (float)(s & 0xF), ml = min * (float)(s >> 4);
                for (int l = 0; l < 16; l++) *y++ = dl * (float)((int8_t)((q[l + 16] >> shift) & 3)) - ml;
            }
    }
}

HIDDEN float mlxcel_half(uint16_t h) { return half(h); }

/* F16: each half as a float (F16C's conversion where the CPU has it: the same value, exactly) */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#include <immintrin.h>
__attribute__((target("avx2,f16c"))) static void row_f16_fast(const uint8_t *x, float *y, int K) {
    int k = 0;
    for (; k + 8 <= K; k += 8) _mm256_storeu_ps(y + k, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + 2 * k))));
    for (; k < K; k++) y[k] = half(read16(x + 2 * k));
}
static int f16c(void) {
    static int known = -1;
    if (known < 0) known = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx2");
    return known;
}
#else
static void row_f16_fast(const uint8_t *x, float *y, int K) {
    for (int k = 0; k < K; k++) y[k] = half(read16(x + 2 * k));
}
static int f16c(void) { return 1; }
#endif

static void row_f16(const uint8_t *x, float *y, int K) {
    if (f16c()) {
        row_f16_fast(x, y, K);
        return;
    }
    for (int k = 0; k < K; k++) y[k] = half(read16(x + 2 * k));
}

/* bytes of one row of K values in a ggml type (GGML_TYPE_* numbers), or 0 for a type not kept so */
HIDDEN long mlxcel_ggml_row_bytes(int type, int K) {
    if (type == GGML_F16) return K > 0 ? 2L * K : 0;
    if (K > 0 && K % 32 == 0)
        switch (type) {
        case GGML_Q5_0: return (long)K / 32 * 22;
        case GGML_Q5_1: return (long)K / 32 * 24;
        case GGML_Q8_0: return (long)K / 32 * 34;
        default: break;
        }
    if (K % QK_K) return 0;
    switch (type) {
    case GGML_Q2_K: return (long)K / QK_K * 84;
    case GGML_Q3_K: return (long)K / QK_K * 110;
    case GGML_Q4_K: return (long)K / QK_K * 144;
    case GGML_Q5_K: return (long)K / QK_K * 176;
    case GGML_Q6_K: return (long)K / QK_K * 210;
    default: return 0;
    }
}

HIDDEN void mlxcel_ggml_row(int type, const uint8_t *x, float *y, int K) {
    switch (type) {
    case GGML_Q2_K: row_q2_k(x, y, K); break;
    case GGML_Q3_K: row_q3_k(x, y, K); break;
    case GGML_Q4_K: row_q4_k(x, y, K); break;
    case GGML_Q5_K: row_q5_k(x, y, K); break;
    case GGML_Q6_K: row_q6_k(x, y, K); break;
    /* the legacy blocks: the KV cache's types' dequantize_row_* (kv_quant.c), the same block layouts */
    case GGML_Q5_0: mlxcel_kv_dequantize_row(KV_Q5_0, x, y, K); break;
    case GGML_Q5_1: mlxcel_kv_dequantize_row(KV_Q5_1, x, y, K); break;
    case GGML_Q8_0: mlxcel_kv_dequantize_row(KV_Q8_0, x, y, K); break;
    case GGML_F16: row_f16(x, y, K); break;
    default: memset(y, 0, sizeof(float) * (size_t)K);
    }
}
