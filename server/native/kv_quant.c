/* The KV cache's block-quantized types (-ctk / -ctv q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1) as ggml-cpu stores and
 * reads them: a row written with the type's from_float (quantize_row_q8_0: the AVX2 build's rounding, to nearest
 * even with 127/amax; the others: ggml-quants.c's reference quantizers), read back with its to_float
 * (dequantize_row_*), and a query row quantized to the type's vec_dot_type (q8_0, or q8_1 for q4_1/q5_1) for the
 * K.Q products, as ggml's flash attention does. Values identical to ggml's (tests/test_kv_quant.py compares them
 * with the pinned sdist's own functions, compiled). Blocks of 32 values; ggml's struct layouts. */
#pragma GCC optimize("fp-contract=off") /* ggml-base is built without FMA: a*b + c rounds twice */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"

enum { QK = 32 };

static const int8_t IQ4NL[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static uint16_t to_half(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, rest = x & 0x7fffffffu;
    if (rest >= 0x7f800000u) return (uint16_t)(sign | (rest > 0x7f800000u ? 0x7e00u : 0x7c00u));
    if (rest >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* overflows to inf */
    if (rest < 0x38800000u) {                                 /* subnormal half (round to nearest even) */
        float a;
        memcpy(&a, &rest, 4);
        return (uint16_t)(sign | (uint16_t)lrintf(a * 16777216.0f));
    }
    uint32_t m = rest + 0xc8000fffu + ((rest >> 13) & 1u);
    return (uint16_t)(sign | (m >> 13));
}

static float from_half(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
    if (e == 0) {
        float f = (float)m * 5.9604644775390625e-8f;
        memcpy(&x, &f, 4);
        x |= sign;
    } else if (e == 31) {
        x = sign | 0x7f800000u | (m << 13);
    } else {
        x = sign | ((e + 112) << 23) | (m << 13);
    }
    float f;
    memcpy(&f, &x, 4);
    return f;
}

long mlxcel_kv_block_bytes(int type) {
    switch (type) {
    case KV_Q8_0: return 34;
    case KV_Q4_0: case KV_IQ4_NL: return 18;
    case KV_Q4_1: return 20;
    case KV_Q5_0: return 22;
    case KV_Q5_1: return 24;
    case KV_Q8_1: return 36;
    default: return 0;
    }
}

/* bytes of a row of n values (n a multiple of 32), 0 for a type that is no block type */
long mlxcel_kv_row_bytes(int type, long n) { return n % QK ? 0 : n / QK * mlxcel_kv_block_bytes(type); }

static float amax_of(const float *x) {
    float a = 0.0f;
    for (int j = 0; j < QK; j++) a = fmaxf(a, fabsf(x[j]));
    return a;
}

/* quantize_row_q8_0 / _q8_1 of ggml-cpu's AVX2 build: d = amax/127 stored, values x*(127/amax) rounded to
 * nearest even; q8_1 also stores s = d * sum(q) */
static void q8_block(const float *x, uint8_t *y, int with_sum) {
    const float amax = amax_of(x), d = amax / 127.f, id = amax != 0.0f ? 127.f / amax : 0.0f;
    uint16_t dh = to_half(d);
    memcpy(y, &dh, 2);
    int8_t *qs = (int8_t *)(y + (with_sum ? 4 : 2));
    int sum = 0;
    for (int j = 0; j < QK; j++) {
        qs[j] = (int8_t)nearbyintf(x[j] * id);
        sum += qs[j];
    }
    if (with_sum) {
        uint16_t sh = to_half(d * (float)sum);
        memcpy(y + 2, &sh, 2);
    }
}

/* the block's value of largest magnitude, signed (the first of equals) */
static float signed_max(const float *x) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < QK; j++)
        if (amax < fabsf(x[j])) amax = fabsf(x[j]), max = x[j];
    return max;
}

static void q4_0_block(const float *x, uint8_t *y) {
    const float d = signed_max(x) / -8, id = d ? 1.0f / d : 0.0f;
    uint16_t dh = to_half(d);
    memcpy(y, &dh, 2);
    for (int j = 0; j < QK / 2; j++) {
        int a = (int8_t)(x[j] * id + 8.5f), b = (int8_t)(x[QK / 2 + j] * id + 8.5f);
        y[2 + j] = (uint8_t)((a < 15 ? a : 15) | (b < 15 ? b : 15) << 4);
    }
}

/* a _1 type's scale and minimum, (max - min) / levels and min, stored as halves at y; returns 1/scale (0: flat) */
static float min_scale(const float *x, uint8_t *y, float levels, float *min) {
    float max = -3.40282347e38f;
    *min = 3.40282347e38f;
    for (int j = 0; j < QK; j++) {
        if (x[j] < *min) *min = x[j];
        if (x[j] > max) max = x[j];
    }
    const float d = (max - *min) / levels;
    uint16_t dh = to_half(d), mh = to_half(*min);
    memcpy(y, &dh, 2);
    memcpy(y + 2, &mh, 2);
    return d ? 1.0f / d : 0.0f;
}

static void q4_1_block(const float *x, uint8_t *y) {
    float min;
    const float id = min_scale(x, y, 15, &min);
    for (int j = 0; j < QK / 2; j++) {
        int a = (int8_t)((x[j] - min) * id + 0.5f), b = (int8_t)((x[QK / 2 + j] - min) * id + 0.5f);
        y[4 + j] = (uint8_t)((a < 15 ? a : 15) | (b < 15 ? b : 15) << 4);
    }
}

static void q5_0_block(const float *x, uint8_t *y) {
    const float d = signed_max(x) / -16, id = d ? 1.0f / d : 0.0f;
    uint16_t dh = to_half(d);
    memcpy(y, &dh, 2);
    uint32_t qh = 0;
    for (int j = 0; j < QK / 2; j++) {
        int a = (int8_t)(x[j] * id + 16.5f), b = (int8_t)(x[QK / 2 + j] * id + 16.5f);
        uint8_t xa = (uint8_t)(a < 31 ? a : 31), xb = (uint8_t)(b < 31 ? b : 31);
        y[6 + j] = (uint8_t)((xa & 0x0F) | ((xb & 0x0F) << 4));
        qh |= ((xa & 0x10u) >> 4) << j;
        qh |= ((xb & 0x10u) >> 4) << (j + QK / 2);
    }
    memcpy(y + 2, &qh, 4);
}

static void q5_1_block(const float *x, uint8_t *y) {
    float min;
    const float id = min_scale(x, y, 31, &min);
    uint32_t qh = 0;
    for (int j = 0; j < QK / 2; j++) {
        uint8_t xa = (uint8_t)((x[j] - min) * id + 0.5f), xb = (uint8_t)((x[QK / 2 + j] - min) * id + 0.5f);
        y[8 + j] = (uint8_t)((xa & 0x0F) | ((xb & 0x0F) << 4));
        qh |= ((xa & 0x10u) >> 4) << j;
        qh |= ((xb & 0x10u) >> 4) << (j + QK / 2);
    }
    memcpy(y + 4, &qh, 4);
}

static int best_index(float x) {
    if (x <= IQ4NL[0]) return 0;
    if (x >= IQ4NL[15]) return 15;
    int ml = 0, mu = 15;
    while (mu - ml > 1) {
        int mav = (ml + mu) / 2;
        if (x < IQ4NL[mav]) mu = mav; else ml = mav;
    }
    return x - IQ4NL[mu - 1] < IQ4NL[mu] - x ? mu - 1 : mu;
}

/* quantize_row_iq4_nl_ref: one block of 32, weights x^2, no search (ntry -1). L is the row's: a block of zeros
 * (scale 0) keeps the previous block's indices, as ggml's does (they read back as zeros either way) */
static void iq4_nl_block(const float *x, uint8_t *y, uint8_t L[QK]) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < QK; j++)
        if (fabsf(x[j]) > amax) amax = fabsf(x[j]), max = x[j];
    float scale = 0.0f;
    if (amax >= 1e-15f) {
        const float d = max / IQ4NL[0], id = 1 / d;
        float sumqx = 0, sumq2 = 0;
        for (int j = 0; j < QK; j++) {
            int l = best_index(id * x[j]);
            L[j] = (uint8_t)l;
            float q = IQ4NL[l], w = x[j] * x[j];
            sumqx += w * q * x[j];
            sumq2 += w * q * q;
        }
        scale = sumq2 > 0 ? sumqx / sumq2 : 0.f;
    }
    uint16_t dh = to_half(scale);
    memcpy(y, &dh, 2);
    for (int j = 0; j < QK / 2; j++) y[2 + j] = (uint8_t)(L[j] | (L[QK / 2 + j] << 4));
}

/* from_float for the cache type: n values (a multiple of 32) into n/32 blocks; 0, or -1 for no block type */
int mlxcel_kv_quantize_row(int type, const float *x, void *out, long n) {
    uint8_t *y = out, L[QK] = {0};
    const long bytes = mlxcel_kv_block_bytes(type);
    if (!bytes || n % QK) return -1;
    for (long b = 0; b < n / QK; b++, x += QK, y += bytes) {
        switch (type) {
        case KV_Q8_0: q8_block(x, y, 0); break;
        case KV_Q8_1: q8_block(x, y, 1); break;
        case KV_Q4_0: q4_0_block(x, y); break;
        case KV_Q4_1: q4_1_block(x, y); break;
        case KV_Q5_0: q5_0_block(x, y); break;
        case KV_Q5_1: q5_1_block(x, y); break;
        case KV_IQ4_NL: iq4_nl_block(x, y, L); break;
        }
    }
    return 0;
}

/* to_float for the cache type (dequantize_row_*) */
int mlxcel_kv_dequantize_row(int type, const void *in, float *y, long n) {
    const uint8_t *x = in;
    const long bytes = mlxcel_kv_block_bytes(type);
    if (!bytes || n % QK || type == KV_Q8_1) return -1;
    if (type == KV_Q8_0) { /* the hot one (a q8_0 V cache, every row read per query): a loop the compiler vectorizes */
        for (long b = 0; b < n / QK; b++, x += bytes, y += QK) {
            uint16_t dh;
            memcpy(&dh, x, 2);
            const float d = from_half(dh);
            const int8_t *q = (const int8_t *)(x + 2);
            for (int j = 0; j < QK; j++) y[j] = (float)q[j] * d;
        }
        return 0;
    }
    for (long b = 0; b < n / QK; b++, x += bytes, y += QK) {
        uint16_t dh, mh = 0;
        uint32_t qh = 0;
        memcpy(&dh, x, 2);
        const float d = from_half(dh);
        if (type == KV_Q4_1 || type == KV_Q5_1) memcpy(&mh, x + 2, 2);
        const float m = from_half(mh);
        if (type == KV_Q5_0) memcpy(&qh, x + 2, 4);
        if (type == KV_Q5_1) memcpy(&qh, x + 4, 4);
        for (int j = 0; j < QK; j++) {
            const int lo = j < QK / 2, k = lo ? j : j - QK / 2;
            switch (type) {
            case KV_Q8_0: y[j] = (float)((const int8_t *)(x + 2))[j] * d; break;
            case KV_Q4_0: y[j] = (float)((lo ? x[2 + k] & 0x0F : x[2 + k] >> 4) - 8) * d; break;
            case KV_IQ4_NL: y[j] = d * (float)IQ4NL[lo ? x[2 + k] & 0x0F : x[2 + k] >> 4]; break;
            case KV_Q4_1: {
                float v = (float)(lo ? x[4 + k] & 0x0F : x[4 + k] >> 4) * d;
                y[j] = v + m;
                break;
            }
            case KV_Q5_0: {
                int h = (int)((qh >> j) << 4 & 0x10);
                y[j] = (float)(((lo ? x[6 + k] & 0x0F : x[6 + k] >> 4) | h) - 16) * d;
                break;
            }
            case KV_Q5_1: {
                int h = (int)((qh >> j) << 4 & 0x10);
                float v = (float)((lo ? x[8 + k] & 0x0F : x[8 + k] >> 4) | h) * d;
                y[j] = v + m;
                break;
            }
            }
        }
    }
    return 0;
}

/* one block's 8 lane partials as ggml's AVX2 vec_dot forms them: lane l holds the products of elements
 * 4l .. 4l + 3 (integers, exact) */
static void block_partials(int type, const uint8_t *x, const int8_t *qy, int32_t p[8]) {
    int8_t v[QK];
    uint32_t qh = 0;
    if (type == KV_Q5_0) memcpy(&qh, x + 2, 4);
    if (type == KV_Q5_1) memcpy(&qh, x + 4, 4);
    const uint8_t *nib = x + (type == KV_Q4_1 ? 4 : type == KV_Q5_0 ? 6 : type == KV_Q5_1 ? 8 : 2);
    if (type == KV_Q8_0) {
        memcpy(v, x + 2, QK);
    } else { /* the nibbles (low ones first), then each type's offset, high bit or table: one loop per type */
        int n4[QK];
        for (int j = 0; j < QK / 2; j++) n4[j] = nib[j] & 0x0F, n4[j + QK / 2] = nib[j] >> 4;
        if (type == KV_Q4_0)
            for (int j = 0; j < QK; j++) v[j] = (int8_t)(n4[j] - 8);
        else if (type == KV_Q4_1)
            for (int j = 0; j < QK; j++) v[j] = (int8_t)n4[j];
        else if (type == KV_Q5_0)
            for (int j = 0; j < QK; j++) v[j] = (int8_t)((n4[j] | (int)((qh >> j) & 1u) << 4) - 16);
        else if (type == KV_Q5_1)
            for (int j = 0; j < QK; j++) v[j] = (int8_t)(n4[j] | (int)((qh >> j) & 1u) << 4);
        else
            for (int j = 0; j < QK; j++) v[j] = IQ4NL[n4[j]];
    }
    for (int l = 0; l < 8; l++) {
        p[l] = 0;
        for (int e = 4 * l; e < 4 * l + 4; e++) p[l] += (int32_t)v[e] * qy[e];
    }
}

/* hsum_float_8: the upper half onto the lower, then lanes 2, 3 onto 0, 1, then lane 1 onto 0 */
static float hsum8(const float a[8]) {
    float r[4];
    for (int k = 0; k < 4; k++) r[k] = a[4 + k] + a[k];
    return (r[0] + r[2]) + (r[1] + r[3]);
}

/* K . Q for a cache row of `type` and a query row quantized to its vec_dot type (q8_0; q8_1 for q4_1, q5_1), n
 * values: ggml's AVX2 vec_dot_<type>_q8 sum for sum (per-lane fma over the blocks, iq4_nl's two accumulators
 * over even and odd blocks, the _1 types' m * s terms summed apart) */
#if defined(__x86_64__)
#include <immintrin.h>

/* q8_0 keys . a q8_0 query as ggml's AVX2 ggml_vec_dot_q8_0_q8_0 forms it: per block the 8 lanes' exact integer
 * sums of elements 4l .. 4l + 3 (mul_sum_i8_pairs_float: sign, maddubs, madd; q8_0 holds no -128), one fma each
 * with the two scales' product, then hsum8: each lane, and so the sum, as block_partials' loop computes it. */
__attribute__((target("avx2,fma"))) static float q8_0_dot_avx2(const uint8_t *x, const uint8_t *y, long nb) {
    __m256 acc = _mm256_setzero_ps();
    const __m256i ones = _mm256_set1_epi16(1);
    for (long b = 0; b < nb; b++, x += 34, y += 34) {
        uint16_t xd, yd;
        memcpy(&xd, x, 2);
        memcpy(&yd, y, 2);
        const __m256 d = _mm256_set1_ps(from_half(xd) * from_half(yd));
        const __m256i qx = _mm256_loadu_si256((const __m256i *)(x + 2)), qy = _mm256_loadu_si256((const __m256i *)(y + 2));
        const __m256i dot = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(qx, qx), _mm256_sign_epi8(qy, qx)), ones);
        acc = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot), acc);
    }
    float a[8];
    _mm256_storeu_ps(a, acc);
    return hsum8(a);
}

static int q8_0_simd(void) {
    static int ok = -1;
    if (ok < 0) ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    return ok;
}
#endif

float mlxcel_kv_dot(int type, const void *k, const void *q, long n) {
#if defined(__x86_64__)
    if (type == KV_Q8_0 && q8_0_simd()) return q8_0_dot_avx2(k, q, n / QK);
#endif
    const long kb = mlxcel_kv_block_bytes(type), qb = (type == KV_Q4_1 || type == KV_Q5_1) ? 36 : 34;
    const uint8_t *x = k, *y = q;
    float acc[2][8] = {{0}}, summs = 0.0f;
    const long nb = n / QK, pairs = type == KV_IQ4_NL ? nb / 2 * 2 : nb;
    for (long b = 0; b < pairs; b++, x += kb, y += qb) {
        uint16_t xd, yd;
        memcpy(&xd, x, 2);
        memcpy(&yd, y, 2);
        int32_t p[8];
        block_partials(type, x, (const int8_t *)(y + qb - QK), p);
        const float d = type == KV_IQ4_NL ? from_half(yd) * from_half(xd) : from_half(xd) * from_half(yd);
        float *a = acc[type == KV_IQ4_NL ? b & 1 : 0];
        for (int l = 0; l < 8; l++) a[l] = fmaf(d, (float)p[l], a[l]);
        if (type == KV_Q4_1 || type == KV_Q5_1) {
            uint16_t xm, ys;
            memcpy(&xm, x + 2, 2);
            memcpy(&ys, y + 2, 2);
            summs = fmaf(from_half(xm), from_half(ys), summs);
        }
    }
    float sum = acc[0][0];
    if (type == KV_IQ4_NL) {
        float both[8];
        for (int l = 0; l < 8; l++) both[l] = acc[0][l] + acc[1][l];
        sum = hsum8(both);
        for (long b = pairs; b < nb; b++, x += kb, y += qb) { /* an odd last block: ggml's scalar tail */
            uint16_t xd, yd;
            memcpy(&xd, x, 2);
            memcpy(&yd, y, 2);
            int32_t p[8], s = 0;
            block_partials(type, x, (const int8_t *)(y + 2), p);
            for (int l = 0; l < 8; l++) s += p[l];
            sum = fmaf(from_half(yd) * from_half(xd), (float)s, sum);
        }
    } else {
        sum = hsum8(acc[0]);
    }
    return type == KV_Q4_1 || type == KV_Q5_1 ? sum + summs : sum;
}

/* rows of n values each, quantized (from_float) or read back (to_float) one after the other: a block cache's
 * keys moved by a context shift (dequantized, turned, quantized again: b10621's build_rope_shift); 0, or -1 */
int mlxcel_kv_quantize_rows(int type, const float *x, void *out, long rows, long n) {
    const long bytes = mlxcel_kv_row_bytes(type, n);
    for (long r = 0; r < rows; r++)
        if (!bytes || mlxcel_kv_quantize_row(type, x + r * n, (uint8_t *)out + r * bytes, n) != 0) return -1;
    return 0;
}

int mlxcel_kv_dequantize_rows(int type, const void *in, float *y, long rows, long n) {
    const long bytes = mlxcel_kv_row_bytes(type, n);
    for (long r = 0; r < rows; r++)
        if (!bytes || mlxcel_kv_dequantize_row(type, (const uint8_t *)in + r * bytes, y + r * n, n) != 0) return -1;
    return 0;
}

/* ggml_compute_forward_fwht_f32 over each chunk: scaled first (by a power of two for the sizes used: exact), then
 * stages of u + v, u - v pairs at distance 1, 2, 4, ... (its SIMD stages' u + v * -1 fused is u - v rounded once) */
void mlxcel_kv_rotate(float *x, long n, int rot) {
    if (rot <= 0) return;
    const float scale = 1.0f / sqrtf((float)rot);
    for (long c = 0; c + rot <= n; c += rot) {
        float *row = x + c;
        for (int j = 0; j < rot; j++) row[j] = row[j] * scale;
        for (int len = 1; len < rot; len <<= 1)
            for (int i = 0; i < rot; i += 2 * len)
                for (int j = 0; j < len; j++) {
                    const float u = row[i + j], v = row[i + len + j];
                    row[i + j] = u + v;
                    row[i + len + j] = u - v;
                }
    }
}

int mlxcel_kv_rotation(int type, int D, int keys) {
    static int disabled = -1;
    if (disabled < 0) {
        const char *env = getenv("LLAMA_ATTN_ROT_DISABLE"); /* b10621's switch, read as it reads it (atoi) */
        disabled = env ? atoi(env) != 0 : 0;
    }
    if (disabled || !kv_is_block(type) || D <= 0 || D % 64) return 0;
    if (!keys) return 64; /* b10621 keeps the values' rotation at 64 */
    int rot = 64;
    while (D % (rot * 2) == 0) rot *= 2;
    return rot;
}
