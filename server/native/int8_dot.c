/* Few-row products over a GGUF's quantized weights with the activations quantized to 8 bits and dotted in
 * integers, as ggml-cpu multiplies them (each type's vec_dot_type: q8_0 blocks of 32 for the legacy types,
 * q8_K blocks of 256 for the K-quants), with AVX2's byte products (maddubs) where the float path dequantized
 * every weight to float first: a decode step reads 4.5-6.6 bits a weight and spends a few integer operations
 * on each, not a dequantization and a float FMA.
 *
 * The weights are read as mlxcel keeps them (cpu_kernels.c's table): MLX's affine groups (q * scale + bias,
 * 4 or 8 bits, groups of 32 or 64: an MLX checkpoint's, a GGUF's IQ4_NL as imported), a GGUF's Q2_K, Q3_K,
 * Q4_K, Q5_K and Q6_K blocks and its Q5_0, Q5_1 and Q8_0 blocks as the file stores them. An affine group's
 * sum is scale * dx * sum(q xq) + bias * dx * sum(xq).
 *
 * Each output is a function of its weight row and its activation row alone, summed in one order: a row's result
 * is bitwise the same alone or batched, on any thread. The activations are quantized as ggml quantizes them
 * (quantize_row_q8_0 of the AVX2 build; quantize_row_q8_K_ref), so the integer sums are ggml's; the float sums
 * over blocks are in mlxcel's order (ggml's AVX2 vec_dot or its repacked GEMV may round them otherwise). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define AVX2 __attribute__((target("avx2,fma,f16c")))
/* kernels that take a row count as a constant argument: one copy for each count they are called with */
#define INLINE static inline __attribute__((always_inline))

enum { QK = 32, QK_K = 256, Q8_0_BYTES = 34 };
/* an activation block for the K-quants: block_q8_K (d, 16 sums of 16, 256 values), then the 8 sums of 32 the
 * mins take (summed once here, not once per weight row) */
enum { ACT_K_SUMS32 = 4 + 32 + QK_K, ACT_K = ACT_K_SUMS32 + 16 };
enum { PARALLEL_WORK = 1 << 15 }; /* as cpu_kernels.c: a smaller product runs on one thread */

/* ---- the activations ------------------------------------------------------------------------------------------
 * Affine weights: per 32-value chunk c of a row, its scale dx (ggml's f16 d, as a float), xs = dx * sum(xq),
 * sum(xq) itself, and the 32 xq; for 4-bit weights a chunk's xq are held even positions first, then odd ones, in pairs of chunks
 * ([c even][c+1 even][c odd][c+1 odd]), the order a byte's two nibbles come out in. K-quants: per 256 block, d,
 * the sums of each 16 xq and the 256 xq (block_q8_K). */
struct acts {
    int K, chunks, blocks;
    long stride;      /* bytes a row */
    uint8_t *base;    /* M rows */
};

static inline float *act_scales(const struct acts *a, int m) { return (float *)(a->base + (size_t)m * a->stride); }
static inline float *act_sums(const struct acts *a, int m) { return act_scales(a, m) + a->chunks; }
static inline int32_t *act_isums(const struct acts *a, int m) { return (int32_t *)(act_sums(a, m) + a->chunks); }
static inline int8_t *act_q(const struct acts *a, int m) {
    return (int8_t *)(a->base + (size_t)m * a->stride + 12 * (size_t)a->chunks);
}

/* a row into 32-value chunks (q8_0 of ggml's AVX2 build), laid out for weights of `bits` */
static void quantize_chunks(const float *x, const struct acts *a, int m, int bits) {
    uint8_t block[Q8_0_BYTES];
    float *d = act_scales(a, m), *xs = act_sums(a, m);
    int8_t *q = act_q(a, m);
    for (int c = 0; c < a->chunks; c++) {
        mlxcel_kv_quantize_row(KV_Q8_0, x + (size_t)c * QK, block, QK);
        uint16_t h;
        memcpy(&h, block, 2);
        const int8_t *qs = (const int8_t *)(block + 2);
        int sum = 0;
        for (int i = 0; i < QK; i++) sum += qs[i];
        d[c] = mlxcel_half(h);
        xs[c] = d[c] * (float)sum;
        act_isums(a, m)[c] = sum;
        if (bits == 4) { /* the pair's layout (a last odd chunk alone: [even][odd]) */
            const int pair = c & ~1, alone = pair + 1 >= a->chunks, slot = c & 1;
            int8_t *even = q + (size_t)pair * QK + (alone ? 0 : 16 * slot);
            int8_t *odd = even + (alone ? 16 : 32);
            for (int i = 0; i < 16; i++) even[i] = qs[2 * i], odd[i] = qs[2 * i + 1];
        } else {
            memcpy(q + (size_t)c * QK, qs, QK);
        }
    }
}

/* quantize_row_q8_K_ref: per block the value of largest magnitude (signed, the first of equals) maps to -127 */
static void quantize_k(const float *x, const struct acts *a, int m) {
    uint8_t *row = a->base + (size_t)m * a->stride;
    for (int b = 0; b < a->blocks; b++, x += QK_K) {
        uint8_t *blk = row + (size_t)b * ACT_K;
        int16_t *bsums = (int16_t *)(blk + 4);
        int8_t *qs = (int8_t *)(blk + 36);
        float max = 0.0f, amax = 0.0f;
        for (int j = 0; j < QK_K; j++)
            if (fabsf(x[j]) > amax) amax = fabsf(x[j]), max = x[j];
        float d = 0.0f;
        if (amax != 0.0f) {
            const float iscale = -127.f / max;
            for (int j = 0; j < QK_K; j++) {
                const float v = iscale * x[j] + 12582912.f; /* nearest_int: the magic-number rounding */
                int32_t i;
                memcpy(&i, &v, 4);
                i = (i & 0x007fffff) - 0x00400000;
                qs[j] = (int8_t)(i < 127 ? i : 127);
            }
            d = 1 / iscale;
        } else {
            memset(qs, 0, QK_K);
        }
        for (int j = 0; j < QK_K / 16; j++) {
            int sum = 0;
            for (int i = 0; i < 16; i++) sum += qs[16 * j + i];
            bsums[j] = (int16_t)sum;
        }
        int16_t *sums32 = (int16_t *)(blk + ACT_K_SUMS32);
        for (int j = 0; j < QK_K / 32; j++) sums32[j] = (int16_t)(bsums[2 * j] + bsums[2 * j + 1]);
        memcpy(blk, &d, 4);
    }
}

/* an f16 (ggml_fp16_t) as a float, by F16C */
AVX2 static inline float f16(const uint8_t *p) { return _cvtsh_ss((unsigned short)(p[0] | p[1] << 8)); }

AVX2 static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

/* the weight's bytes some blocks ahead requested now: a decode step streams its weights from memory once, and the
 * hardware's prefetcher alone left the cores waiting (8 GB/s of 31 on a 1B model's Q4_K rows) */
enum { PREFETCH_BYTES = 2048 };
static inline void prefetch_ahead(const uint8_t *w, int bytes) {
    for (int at = 0; at < bytes; at += 64) _mm_prefetch((const char *)w + PREFETCH_BYTES + at, _MM_HINT_T0);
}

AVX2 static inline int hsum_i32x8(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1)));
}

AVX2 static inline int hsum_i32x4(__m128i s) {
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1)));
}

/* ---- affine weights --------------------------------------------------------------------------------------- */

/* An affine row's sum: per chunk c its integer total t_c (sum q xq; for 8 bits sum (q - 128) xq, the bias then
 * bias + 128 scale: zero for a Q8_0 import, so nothing cancels) turned to a float once,
 * acc = fmaf(scale dx_c, t_c, acc), and the bias's term bias = fmaf(bias, xs_c, bias); the result acc + bias. The
 * panels below take these float steps for 16 weight rows at once, so a row's result is the same either way. */

/* R outputs (R = 1 or 2, a constant at each call): weight rows w + r * row_bytes (4-bit; scales and biases
 * `groups` apart) against one activation row, each row's float steps in its own order; two rows' chains of
 * dependent FMAs in flight at once where one row's alone leave the FMA unit waiting on the last one (a decode step
 * of a small model) */
AVX2 INLINE void dot_affine4(int R, const uint8_t *w, long row_bytes, const float *sc, const float *bi,
                             int groups, int per, const struct acts *a, int m, float out[2]) {
    const float *dx = act_scales(a, m), *xs = act_sums(a, m);
    const int8_t *x = act_q(a, m);
    const __m256i low = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    float acc[2], bias[2];
    for (int r = 0; r < R; r++) acc[r] = bias[r] = 0.0f;
    int c = 0;
    for (; c + 2 <= a->chunks; c += 2) {
        const __m256i xe = _mm256_loadu_si256((const __m256i *)(x + (size_t)c * QK));
        const __m256i xo = _mm256_loadu_si256((const __m256i *)(x + (size_t)c * QK + 32));
        for (int r = 0; r < R; r++) {
            const uint8_t *wr = w + r * row_bytes;
            const float *s = sc + r * groups, *b = bi + r * groups;
            _mm_prefetch((const char *)wr + (size_t)c * 16 + PREFETCH_BYTES, _MM_HINT_T0);
            const __m256i bytes = _mm256_loadu_si256((const __m256i *)(wr + (size_t)c * 16));
            const __m256i even = _mm256_and_si256(bytes, low);
            const __m256i odd = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low);
            const __m256i p16 = _mm256_add_epi16(_mm256_maddubs_epi16(even, xe), _mm256_maddubs_epi16(odd, xo));
            const __m256i p = _mm256_madd_epi16(p16, ones); /* chunk c in the low half, c + 1 in the high */
            acc[r] = fmaf(s[c / per] * dx[c], (float)hsum_i32x4(_mm256_castsi256_si128(p)), acc[r]);
            bias[r] = fmaf(b[c / per], xs[c], bias[r]);
            acc[r] = fmaf(s[(c + 1) / per] * dx[c + 1], (float)hsum_i32x4(_mm256_extracti128_si256(p, 1)), acc[r]);
            bias[r] = fmaf(b[(c + 1) / per], xs[c + 1], bias[r]);
        }
    }
    for (int r = 0; r < R && c < a->chunks; r++) { /* a last chunk alone: 16 bytes, [even][odd] activations */
        const __m128i bytes = _mm_loadu_si128((const __m128i *)(w + r * row_bytes + (size_t)c * 16));
        const __m128i l = _mm_set1_epi8(0x0F);
        const __m128i even = _mm_and_si128(bytes, l), odd = _mm_and_si128(_mm_srli_epi16(bytes, 4), l);
        const __m128i xe = _mm_loadu_si128((const __m128i *)(x + (size_t)c * QK));
        const __m128i xo = _mm_loadu_si128((const __m128i *)(x + (size_t)c * QK + 16));
        const __m128i p16 = _mm_add_epi16(_mm_maddubs_epi16(even, xe), _mm_maddubs_epi16(odd, xo));
        acc[r] = fmaf(sc[r * groups + c / per] * dx[c], (float)hsum_i32x4(_mm_madd_epi16(p16, _mm_set1_epi16(1))),
                      acc[r]);
        bias[r] = fmaf(bi[r * groups + c / per], xs[c], bias[r]);
    }
    for (int r = 0; r < R; r++) out[r] = acc[r] + bias[r];
}

/* 8-bit: q - 128 is a signed byte, so sum(q xq) = sum((q - 128) xq) + 128 sum(xq) */
AVX2 static float dot_affine8(const uint8_t *w, const float *sc, const float *bi, int per, const struct acts *a,
                              int m) {
    const float *dx = act_scales(a, m), *xs = act_sums(a, m);
    const int8_t *x = act_q(a, m);
    const __m256i flip = _mm256_set1_epi8((char)0x80), ones = _mm256_set1_epi16(1);
    float acc = 0.0f, bias = 0.0f;
    for (int c = 0; c < a->chunks; c++) {
        if (c % 2 == 0) _mm_prefetch((const char *)w + (size_t)c * QK + PREFETCH_BYTES, _MM_HINT_T0);
        const __m256i q = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(w + (size_t)c * QK)), flip);
        const __m256i xq = _mm256_loadu_si256((const __m256i *)(x + (size_t)c * QK));
        const __m256i p16 = _mm256_maddubs_epi16(_mm256_abs_epi8(q), _mm256_sign_epi8(xq, q));
        const float s = sc[c / per];
        acc = fmaf(s * dx[c], (float)hsum_i32x8(_mm256_madd_epi16(p16, ones)), acc);
        bias = fmaf(fmaf(128.0f, s, bi[c / per]), xs[c], bias);
    }
    return acc + bias;
}

/* ggml's blocks of 32 Q5_0, Q5_1 and Q8_0 kept as the file stores them, against q8_0 activations as ggml's
 * vec_dot_*_q8_0 take them: per block an integer total (sum(q xq), q the stored unsigned value; Q5_0's less
 * 16 sum(xq), Q8_0's values signed) turned to a float once, acc = fmaf(d dx, total, acc), and for Q5_1
 * bias = fmaf(m, dx sum(xq), bias); the result acc + bias. For Q5_0 and Q8_0 these are the float steps of the 8-bit
 * affine layers the cache held them as before (a zero bias term), so the outputs are those, at 5.5 and 8.5 bits a
 * weight where those took 10; the panels below take the same steps. (Q4_0 and Q4_1 stay affine groups:
 * gguf_quants.py KEPT_BLOCKS says why.) */
struct legacy_layout {
    int bytes, qs, qh, m; /* a block's size, where its values, high bits and minimum lie (-1: none) */
};

static inline struct legacy_layout legacy(int type) {
    switch (type) {
    case GGML_Q5_0: return (struct legacy_layout){22, 6, 2, -1};
    case GGML_Q5_1: return (struct legacy_layout){24, 8, 4, 2};
    default: return (struct legacy_layout){34, 2, -1, -1}; /* GGML_Q8_0 */
    }
}

static inline int is_legacy(int type) {
    return type == GGML_Q5_0 || type == GGML_Q5_1 || type == GGML_Q8_0;
}

/* what the stored values exceed the weights' integers by, taken off a total through sum(xq) (the panels hold
 * Q8_0's values as unsigned bytes, + 128) */
static inline int legacy_excess(int type, int panel) {
    return type == GGML_Q5_0 ? 16 : type == GGML_Q8_0 && panel ? 128 : 0;
}

/* a block's 32 values in element order: the nibbles (values 0-15 low, 16-31 high) and 16 where a value's high
 * bit is set (each byte of qh spread over 8 bytes, one bit tested a byte); Q8_0's signed bytes */
AVX2 static inline __m256i legacy_values(int type, const uint8_t *blk, struct legacy_layout l) {
    if (type == GGML_Q8_0) return _mm256_loadu_si256((const __m256i *)(blk + 2));
    const __m128i qs = _mm_loadu_si128((const __m128i *)(blk + l.qs)), low = _mm_set1_epi8(0x0F);
    const __m256i v = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(qs, 4), low), _mm_and_si128(qs, low));
    uint32_t qh;
    memcpy(&qh, blk + l.qh, 4);
    const __m256i spread = _mm256_shuffle_epi8(
        _mm256_set1_epi32((int)qh), _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
    const __m256i set = _mm256_cmpeq_epi8(_mm256_or_si256(spread, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe)),
                                          _mm256_set1_epi64x(-1));
    return _mm256_or_si256(v, _mm256_and_si256(set, _mm256_set1_epi8(0x10)));
}

/* one row's product (a second row's chain beside it, as dot_affine4 takes them, made the blocks' stream slower:
 * its prefetches fell in the row being read beside it) */
AVX2 static float dot_legacy(int type, const uint8_t *w, const struct acts *a, int m) {
    const struct legacy_layout l = legacy(type);
    const float *dx = act_scales(a, m), *xs = act_sums(a, m);
    const int32_t *isum = act_isums(a, m);
    const int8_t *x = act_q(a, m);
    const int excess = legacy_excess(type, 0);
    const __m256i ones = _mm256_set1_epi16(1);
    float acc = 0.0f, bias = 0.0f;
    for (int c = 0; c < a->chunks; c++, w += l.bytes) {
        _mm_prefetch((const char *)w + PREFETCH_BYTES, _MM_HINT_T0);
        const __m256i xq = _mm256_loadu_si256((const __m256i *)(x + (size_t)c * QK));
        const __m256i v = legacy_values(type, w, l);
        const __m256i p16 = type == GGML_Q8_0 ? _mm256_maddubs_epi16(_mm256_abs_epi8(v), _mm256_sign_epi8(xq, v))
                                              : _mm256_maddubs_epi16(v, xq); /* (31 * 127 * 2: no saturation) */
        const int total = hsum_i32x8(_mm256_madd_epi16(p16, ones)) - excess * isum[c];
        const float d = f16(w);
        acc = fmaf(d * dx[c], (float)total, acc);
        if (l.m >= 0) bias = fmaf(f16(w + l.m), xs[c], bias);
    }
    return acc + bias;
}

/* four activation rows (m .. m + 3) against one weight row: each block's values read once for the four, each
 * row's steps dot_legacy's in its order (so each output is bitwise its one-row product): AVX2's prompts over
 * the legacy blocks stay on the integer path, as ggml multiplies them (128 rows x 2048 x 2048 on a 2-core AVX2
 * machine: Q8_0 16.7 ms against 15.8 for the float BLAS over the same values, Q5_0 24.6) */
AVX2 static void dot_legacy_tile(int type, const uint8_t *w, const struct acts *a, int m, float out[4]) {
    const struct legacy_layout l = legacy(type);
    const __m128i excess = _mm_set1_epi32(legacy_excess(type, 0));
    const __m256i ones = _mm256_set1_epi16(1);
    const int8_t *x[4] = {act_q(a, m), act_q(a, m + 1), act_q(a, m + 2), act_q(a, m + 3)};
    const float *dx[4] = {act_scales(a, m), act_scales(a, m + 1), act_scales(a, m + 2), act_scales(a, m + 3)};
    const float *xs[4] = {act_sums(a, m), act_sums(a, m + 1), act_sums(a, m + 2), act_sums(a, m + 3)};
    const int32_t *is[4] = {act_isums(a, m), act_isums(a, m + 1), act_isums(a, m + 2), act_isums(a, m + 3)};
    __m128 acc = _mm_setzero_ps(), bias = _mm_setzero_ps(); /* lane r: row m + r's */
    for (int c = 0; c < a->chunks; c++, w += l.bytes) {
        _mm_prefetch((const char *)w + PREFETCH_BYTES, _MM_HINT_T0);
        const __m256i v = legacy_values(type, w, l), av = _mm256_abs_epi8(v);
        __m256i sums[4];
        for (int r = 0; r < 4; r++) {
            const __m256i xq = _mm256_loadu_si256((const __m256i *)(x[r] + (size_t)c * QK));
            const __m256i p16 =
                type == GGML_Q8_0 ? _mm256_maddubs_epi16(av, _mm256_sign_epi8(xq, v)) : _mm256_maddubs_epi16(v, xq);
            sums[r] = _mm256_madd_epi16(p16, ones);
        }
        /* the four rows' integer totals at once (integer sums: the same totals as hsum_i32x8's, in any order) */
        const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(sums[0], sums[1]), _mm256_hadd_epi32(sums[2], sums[3]));
        __m128i totals = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
        totals = _mm_sub_epi32(totals, _mm_mullo_epi32(excess, _mm_set_epi32(is[3][c], is[2][c], is[1][c], is[0][c])));
        const __m128 d = _mm_mul_ps(_mm_set1_ps(f16(w)), _mm_set_ps(dx[3][c], dx[2][c], dx[1][c], dx[0][c]));
        acc = _mm_fmadd_ps(d, _mm_cvtepi32_ps(totals), acc); /* each lane dot_legacy's fmaf */
        if (l.m >= 0)
            bias = _mm_fmadd_ps(_mm_set1_ps(f16(w + l.m)), _mm_set_ps(xs[3][c], xs[2][c], xs[1][c], xs[0][c]), bias);
    }
    _mm_storeu_ps(out, _mm_add_ps(acc, bias));
}

/* ---- K-quants (block layouts: ggml_blocks.c) ---------------------------------------------------------------- */

/* a Q4_K / Q5_K block's twelve bytes of six-bit scales and mins as eight scales, then eight mins (get_scale_min_k4,
 * four words at a time as ggml's vec_dot unpacks them) */
static inline void scales_mins_k4(const uint8_t *q, uint32_t out[4]) {
    const uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
    memcpy(out, q, 12);
    out[3] = ((out[2] >> 4) & kmask2) | (((out[1] >> 6) & kmask3) << 4);
    const uint32_t aux = out[1] & kmask1;
    out[1] = (out[2] & kmask2) | (((out[0] >> 6) & kmask3) << 4);
    out[2] = aux;
    out[0] &= kmask1;
}

static inline float act_d(const uint8_t *blk) {
    float d;
    memcpy(&d, blk, 4);
    return d;
}

/* Q4_K (144 bytes: d, dmin, 12 bytes of scales and mins, 128 of nibbles) and Q5_K (176: the same and 32 bytes of
 * high bits before the nibbles): sum over sub-blocks j of d sc_j sum(q xq) - dmin m_j sum(xq).
 *
 * A block's two integer totals (the scaled products, the mins against the activations' sums) are exact, however
 * they are summed; each turns to a float once a block: acc = fmaf(dx d, total, acc), and the same for the mins.
 * Every kernel below (one row, four-row tiles, 16-row panels) takes those float steps and no others, so a row's
 * result is bitwise the same whichever kernel, register width or batch computed it. */

/* a Q4_K / Q5_K block's 256 values as four vectors of 32 bytes: sub-blocks 2j (low nibbles) and 2j + 1 (high) */
AVX2 static inline void values_q45_k(const uint8_t *w, int five, int j, __m256i *lo, __m256i *hi) {
    const __m256i low = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    const __m256i bits = _mm256_loadu_si256((const __m256i *)(w + (five ? 48 : 16) + 32 * j));
    *lo = _mm256_and_si256(bits, low), *hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), low);
    if (five) {
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(w + 16));
        const __m128i s0 = _mm_cvtsi32_si128(2 * j), s1 = _mm_cvtsi32_si128(2 * j + 1);
        *lo = _mm256_or_si256(*lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(qh, s0), one), 4));
        *hi = _mm256_or_si256(*hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(qh, s1), one), 4));
    }
}

/* the eight scales then the eight mins of a block, as 16-bit integers (the words into a register, not through
 * memory: four 4-byte stores read back as one load stall the store forwarding) */
AVX2 static inline __m256i scales_mins16(const uint8_t *w) {
    uint32_t sm[4];
    scales_mins_k4(w + 4, sm);
    return _mm256_cvtepu8_epi16(_mm_set_epi32((int)sm[3], (int)sm[2], (int)sm[1], (int)sm[0]));
}

AVX2 static float dot_q45_k(const uint8_t *w, const uint8_t *act, int blocks, int five) {
    float acc = 0.0f, acc_m = 0.0f;
    const int bytes = five ? 176 : 144;
    for (int b = 0; b < blocks; b++, w += bytes, act += ACT_K) {
        prefetch_ahead(w, bytes);
        const float dx = act_d(act);
        const int8_t *xq = (const int8_t *)(act + 36);
        const __m256i scales_mins = scales_mins16(w);
        const __m128i sums32 = _mm_loadu_si128((const __m128i *)(act + ACT_K_SUMS32));
        const int mins = hsum_i32x4(_mm_madd_epi16(_mm256_extracti128_si256(scales_mins, 1), sums32));
        const __m128i sc = _mm256_castsi256_si128(scales_mins);
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < 4; j++) {
            __m256i lo, hi;
            values_q45_k(w, five, j, &lo, &hi);
            const __m256i pl = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(xq + 64 * j)));
            const __m256i ph = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(xq + 64 * j + 32)));
            sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(pl, _mm256_set1_epi16((short)_mm_extract_epi16(sc, 2 * j))));
            sumi = _mm256_add_epi32(sumi,
                                    _mm256_madd_epi16(ph, _mm256_set1_epi16((short)_mm_extract_epi16(sc, 2 * j + 1))));
        }
        acc = fmaf(dx * f16(w), (float)hsum_i32x8(sumi), acc);
        acc_m = fmaf(dx * f16(w + 2), (float)mins, acc_m);
    }
    return acc - acc_m;
}

/* Q6_K (210 bytes: 128 of low nibbles, 64 of high bit pairs, 16 int8 scales, d): values q - 32, the 32 taken
 * from the block's integer total through the activations' sums of 16; the total turns to a float once a block, as
 * the Q4_K total does */

/* a Q6_K block's 256 values as eight vectors of 32 (values 32n to 32n + 31; 16 values a scale) */
AVX2 static inline void values_q6_k(const uint8_t *w, __m256i v[8]) {
    const __m256i low = _mm256_set1_epi8(0x0F), three = _mm256_set1_epi8(3);
    for (int half = 0; half < 2; half++) {
        const uint8_t *ql = w + 64 * half, *qhp = w + 128 + 32 * half;
        const __m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
        const __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
        const __m256i qh = _mm256_loadu_si256((const __m256i *)qhp);
        __m256i *vh = v + 4 * half;
        vh[0] = _mm256_or_si256(_mm256_and_si256(l0, low), _mm256_slli_epi16(_mm256_and_si256(qh, three), 4));
        vh[1] = _mm256_or_si256(_mm256_and_si256(l1, low),
                                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), three), 4));
        vh[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low),
                                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), three), 4));
        vh[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low),
                                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), three), 4));
    }
}

/* vector n's two scales, each over 16 bytes' pairs */
AVX2 static inline void scales_q6_k(const uint8_t *w, __m256i scale[8]) {
    const int8_t *sc = (const int8_t *)(w + 192);
    for (int n = 0; n < 8; n++) scale[n] = _mm256_set_m128i(_mm_set1_epi16(sc[2 * n + 1]), _mm_set1_epi16(sc[2 * n]));
}

/* one row's eight lanes of a block's total: sum(sc_i q xq) - 32 sum(sc_i bsum_i) */
AVX2 static inline __m256i lanes_q6_k(const __m256i v[8], const __m256i scale[8], __m256i sc16, const uint8_t *ar) {
    const int8_t *xq = (const int8_t *)(ar + 36);
    const __m256i offset = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)(ar + 4)));
    __m256i sumi = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(offset, 5));
    for (int n = 0; n < 8; n++) {
        const __m256i p = _mm256_maddubs_epi16(v[n], _mm256_loadu_si256((const __m256i *)(xq + 32 * n)));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, scale[n]));
    }
    return sumi;
}

AVX2 static float dot_q6_k(const uint8_t *w, const uint8_t *act, int blocks) {
    float acc = 0.0f;
    for (int b = 0; b < blocks; b++, w += 210, act += ACT_K) {
        prefetch_ahead(w, 210);
        __m256i v[8], scale[8];
        values_q6_k(w, v);
        scales_q6_k(w, scale);
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(w + 192)));
        acc = fmaf(act_d(act) * f16(w + 208), (float)hsum_i32x8(lanes_q6_k(v, scale, sc16, act)), acc);
    }
    return acc;
}

/* Q2_K (84 bytes: 16 bytes of a 4-bit scale and a 4-bit min per 16 values, 64 bytes of 2-bit values, d, dmin)
 * and Q3_K (110 bytes: 32 bytes of high bits, 64 of 2-bit low bits, 12 bytes of sixteen 6-bit scales, d): the
 * values of sub-block i (16 values) are d sc_i q - dmin m_i (Q2_K) and d (sc_i - 32) q with q in [-4, 3] (Q3_K).
 * As ggml's vec_dot_q2_K_q8_K / vec_dot_q3_K_q8_K: a block's integer total times dx d, the mins' total (Q2_K)
 * against the activations' sums of 16; each total turns to a float once a block. The 2-bit values of a half
 * (128 values) are one 32-byte load shifted by 0, 2, 4 and 6: values 32j + l from byte l's bits 2j. Prompts of
 * more than 16 rows take the BLAS in float (no tile or panel kernel here: one row at a time their integer path
 * is far slower than a GEMM). */

/* sub-blocks s and s + 1 (the two 16-byte halves of a 32-value vector p of pair sums) scaled and summed */
AVX2 static inline __m256i scaled_pairs(__m256i p, int lo, int hi) {
    return _mm256_madd_epi16(p, _mm256_set_m128i(_mm_set1_epi16((short)hi), _mm_set1_epi16((short)lo)));
}

AVX2 static float dot_q2_k(const uint8_t *w, const uint8_t *act, int blocks) {
    float acc = 0.0f, acc_m = 0.0f;
    const __m256i three = _mm256_set1_epi8(3);
    for (int b = 0; b < blocks; b++, w += 84, act += ACT_K) {
        prefetch_ahead(w, 84);
        const int8_t *xq = (const int8_t *)(act + 36);
        const __m128i sm = _mm_loadu_si128((const __m128i *)w);
        const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sm, 4), _mm_set1_epi8(0x0F)));
        const int mins = hsum_i32x8(_mm256_madd_epi16(mins16, _mm256_loadu_si256((const __m256i *)(act + 4))));
        __m256i sumi = _mm256_setzero_si256();
        for (int half = 0; half < 2; half++) {
            const __m256i bits = _mm256_loadu_si256((const __m256i *)(w + 16 + 32 * half));
            for (int j = 0; j < 4; j++) {
                const __m256i v = _mm256_and_si256(_mm256_srl_epi16(bits, _mm_cvtsi32_si128(2 * j)), three);
                const __m256i p = _mm256_maddubs_epi16(v, _mm256_loadu_si256((const __m256i *)(xq + 128 * half + 32 * j)));
                const int s = 8 * half + 2 * j;
                sumi = _mm256_add_epi32(sumi, scaled_pairs(p, w[s] & 0x0F, w[s + 1] & 0x0F));
            }
        }
        const float dx = act_d(act);
        acc = fmaf(dx * f16(w + 80), (float)hsum_i32x8(sumi), acc);
        acc_m = fmaf(dx * f16(w + 82), (float)mins, acc_m);
    }
    return acc - acc_m;
}

/* a Q3_K block's sixteen scales (less 32), unpacked from 12 bytes as ggml's dequantize_row_q3_K does */
static inline void scales_q3_k(const uint8_t *packed, int8_t out[16]) {
    const uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
    uint32_t aux[4];
    memcpy(aux, packed, 12);
    const uint32_t tmp = aux[2];
    aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
    aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
    aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
    aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
    memcpy(out, aux, 16);
    for (int i = 0; i < 16; i++) out[i] = (int8_t)(out[i] - 32);
}

/* sum over sub-blocks of sc_i (q + 4) xq less 4 sc_i bsum_i: q + 4 (the low bits and the high bit) is a byte */
AVX2 static float dot_q3_k(const uint8_t *w, const uint8_t *act, int blocks) {
    float acc = 0.0f;
    const __m256i three = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    for (int b = 0; b < blocks; b++, w += 110, act += ACT_K) {
        prefetch_ahead(w, 110);
        const int8_t *xq = (const int8_t *)(act + 36);
        int8_t sc[16];
        scales_q3_k(w + 96, sc);
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)sc));
        const int offset = hsum_i32x8(_mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)(act + 4))));
        const __m256i hm = _mm256_loadu_si256((const __m256i *)w);
        __m256i sumi = _mm256_setzero_si256();
        for (int half = 0; half < 2; half++) {
            const __m256i bits = _mm256_loadu_si256((const __m256i *)(w + 32 + 32 * half));
            for (int j = 0; j < 4; j++) {
                const int c = 4 * half + j;
                const __m256i low = _mm256_and_si256(_mm256_srl_epi16(bits, _mm_cvtsi32_si128(2 * j)), three);
                const __m256i high = _mm256_and_si256(_mm256_srl_epi16(hm, _mm_cvtsi32_si128(c)), one);
                const __m256i v = _mm256_or_si256(low, _mm256_slli_epi16(high, 2));
                const __m256i p = _mm256_maddubs_epi16(v, _mm256_loadu_si256((const __m256i *)(xq + 32 * c)));
                sumi = _mm256_add_epi32(sumi, scaled_pairs(p, sc[2 * c], sc[2 * c + 1]));
            }
        }
        acc = fmaf(act_d(act) * f16(w + 108), (float)(hsum_i32x8(sumi) - 4 * offset), acc);
    }
    return acc;
}

/* ---- four activation rows at a time (a prompt's products): each block's weights unpacked once for the four, and
 * every row's sums taken in the very order dot_q45_k / dot_q6_k take them, so a row's result is bitwise the one
 * it gets alone ---------------------------------------------------------------------------------------------- */
enum { TILE = 4, PANEL_ROWS = 16 };

/* four rows' block totals (each row's eight int32 lanes summed; the mins' four) turned to floats as dot_q45_k
 * turns one row's: lane r of acc is row r's acc */
AVX2 static inline void block_totals4(const __m256i sumi[TILE], const __m128i mins[TILE], __m128 dx, float d,
                                      float dmin, __m128 *acc, __m128 *acc_m) {
    const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(sumi[0], sumi[1]), _mm256_hadd_epi32(sumi[2], sumi[3]));
    const __m128i totals = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    const __m128i m = _mm_hadd_epi32(_mm_hadd_epi32(mins[0], mins[1]), _mm_hadd_epi32(mins[2], mins[3]));
    *acc = _mm_fmadd_ps(_mm_mul_ps(dx, _mm_set1_ps(d)), _mm_cvtepi32_ps(totals), *acc);
    *acc_m = _mm_fmadd_ps(_mm_mul_ps(dx, _mm_set1_ps(dmin)), _mm_cvtepi32_ps(m), *acc_m);
}

static inline __m128 act_d4(const uint8_t *act, long stride) {
    return _mm_set_ps(act_d(act + 3 * stride), act_d(act + 2 * stride), act_d(act + stride), act_d(act));
}

AVX2 static void dot_q45_k_tile(const uint8_t *w, const uint8_t *act, long stride, int blocks, int five,
                                float out[TILE]) {
    const int bytes = five ? 176 : 144;
    __m128 acc = _mm_setzero_ps(), acc_m = _mm_setzero_ps();
    for (int b = 0; b < blocks; b++, w += bytes, act += ACT_K) {
        prefetch_ahead(w, bytes);
        const __m256i scales_mins = scales_mins16(w);
        const __m128i mins16 = _mm256_extracti128_si256(scales_mins, 1), sc = _mm256_castsi256_si128(scales_mins);
        __m256i lo[4], hi[4], slo[4], shi[4];
        for (int j = 0; j < 4; j++) {
            values_q45_k(w, five, j, &lo[j], &hi[j]);
            slo[j] = _mm256_set1_epi16((short)_mm_extract_epi16(sc, 2 * j));
            shi[j] = _mm256_set1_epi16((short)_mm_extract_epi16(sc, 2 * j + 1));
        }
        __m256i sumi[TILE];
        __m128i mins[TILE];
        for (int r = 0; r < TILE; r++) {
            const uint8_t *ar = act + (size_t)r * stride;
            const int8_t *xq = (const int8_t *)(ar + 36);
            mins[r] = _mm_madd_epi16(mins16, _mm_loadu_si128((const __m128i *)(ar + ACT_K_SUMS32)));
            sumi[r] = _mm256_setzero_si256();
            for (int j = 0; j < 4; j++) {
                const __m256i pl = _mm256_maddubs_epi16(lo[j], _mm256_loadu_si256((const __m256i *)(xq + 64 * j)));
                const __m256i ph =
                    _mm256_maddubs_epi16(hi[j], _mm256_loadu_si256((const __m256i *)(xq + 64 * j + 32)));
                sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(pl, slo[j]));
                sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(ph, shi[j]));
            }
        }
        block_totals4(sumi, mins, act_d4(act, stride), f16(w), f16(w + 2), &acc, &acc_m);
    }
    _mm_storeu_ps(out, _mm_sub_ps(acc, acc_m));
}

AVX2 static void dot_q6_k_tile(const uint8_t *w, const uint8_t *act, long stride, int blocks, float out[TILE]) {
    __m128 acc = _mm_setzero_ps();
    for (int b = 0; b < blocks; b++, w += 210, act += ACT_K) {
        prefetch_ahead(w, 210);
        __m256i v[8], scale[8], sumi[TILE];
        values_q6_k(w, v);
        scales_q6_k(w, scale);
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(w + 192)));
        for (int r = 0; r < TILE; r++) sumi[r] = lanes_q6_k(v, scale, sc16, act + (size_t)r * stride);
        const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(sumi[0], sumi[1]), _mm256_hadd_epi32(sumi[2], sumi[3]));
        const __m128i totals = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
        acc = _mm_fmadd_ps(_mm_mul_ps(act_d4(act, stride), _mm_set1_ps(f16(w + 208))), _mm_cvtepi32_ps(totals), acc);
    }
    _mm_storeu_ps(out, acc);
}

/* ---- with AVX-512 VNNI, where the CPU has it: 16 weight rows at a time --------------------------------------
 * The blocks' integer totals are exact whichever instructions sum them, and the float steps below are the ones
 * dot_q45_k / dot_q6_k take (lane by lane), so a row's result is bitwise the AVX2 kernels' (tests/test_int8_dot.py:
 * a prompt's rows are decode rows). */
#define VNNI __attribute__((target("avx512f,avx512bw,avx512vnni,avx2,fma,f16c")))

/* 16 weight rows at a time for a prompt: the rows' blocks unpacked once into a panel where each 64 bytes hold four
 * consecutive values of each of the 16 rows (ggml's repacked layouts interleave rows the same way), so one
 * vpdpbusd multiplies four values of 16 rows by four activations broadcast, and a block's float steps are taken
 * for the 16 rows at once. The panel per block: 64 such steps, the eight sub-blocks' scales as int32 per row, the
 * mins in pairs of int16 per row, d and dmin per row. */
enum { PANEL_VALUES = 64 * 64, PANEL_SCALES = PANEL_VALUES, PANEL_MINS = PANEL_SCALES + 8 * 64 };
enum { PANEL_D = PANEL_MINS + 4 * 64, PANEL_DMIN = PANEL_D + 64, PANEL_BLOCK = PANEL_DMIN + 64 };

/* the panels are built from the rows' bytes as the file holds them: 16 bytes of each of the 16 rows transposed into
 * four vectors (vector s: bytes 4s..4s+3 of every row, row r in dword r), four 4x4 transposes of dwords, one per
 * 128-bit lane; a 4-bit byte's two nibbles then give two steps. (Unpacking each row first and gathering the panel
 * cost a prompt of 8 rows more than its products did.) */
VNNI static inline void transpose16(const uint8_t *const rows[PANEL_ROWS], int at, __m512i out[4]) {
    __m512i s[4];
    for (int i = 0; i < 4; i++) {
        __m512i v = _mm512_castsi128_si512(_mm_loadu_si128((const __m128i *)(rows[i] + at)));
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(rows[4 + i] + at)), 1);
        v = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(rows[8 + i] + at)), 2);
        s[i] = _mm512_inserti32x4(v, _mm_loadu_si128((const __m128i *)(rows[12 + i] + at)), 3);
    }
    const __m512i t0 = _mm512_unpacklo_epi32(s[0], s[1]), t1 = _mm512_unpackhi_epi32(s[0], s[1]);
    const __m512i t2 = _mm512_unpacklo_epi32(s[2], s[3]), t3 = _mm512_unpackhi_epi32(s[2], s[3]);
    out[0] = _mm512_unpacklo_epi64(t0, t2), out[1] = _mm512_unpackhi_epi64(t0, t2);
    out[2] = _mm512_unpacklo_epi64(t1, t3), out[3] = _mm512_unpackhi_epi64(t1, t3);
}

/* `bytes` (a multiple of 16) of each row from `at`, transposed: out[k] holds bytes 4k..4k+3 of every row */
VNNI static inline void transpose_rows(const uint8_t *const rows[PANEL_ROWS], int at, int bytes, __m512i *out) {
    for (int g = 0; g < bytes / 16; g++) transpose16(rows, at + 16 * g, out + 4 * g);
}

/* a last panel's missing rows read zeros (their outputs are never stored) */
static const uint8_t ZERO_ROW[256];

VNNI static inline void panel_rows(const uint8_t *first, size_t row_bytes, int rows, const uint8_t *at[PANEL_ROWS]) {
    for (int r = 0; r < PANEL_ROWS; r++) at[r] = r < rows ? first + (size_t)r * row_bytes : ZERO_ROW;
}

VNNI static inline void store(uint8_t *to, __m512i v) { _mm512_store_si512((void *)to, v); }

/* byte k of every dword, zero-extended to 32 bits */
VNNI static inline __m512i byte_u32(__m512i v, int k) {
    return _mm512_and_si512(_mm512_srli_epi32(v, 8 * k), _mm512_set1_epi32(0xFF));
}

/* the low 16 bits of every dword as an f16, to a float */
VNNI static inline __m512 low_f16(__m512i v) { return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v)); }

VNNI static void panel_q45_k(const uint8_t *w, size_t row_bytes, int rows, int blocks, int five, uint8_t *panel) {
    const int bytes = five ? 176 : 144, qs = five ? 48 : 16;
    const __m512i low = _mm512_set1_epi8(0x0F), one = _mm512_set1_epi8(1);
    const __m512i k1 = _mm512_set1_epi32(0x3f3f3f3f), k2 = _mm512_set1_epi32(0x0f0f0f0f);
    const __m512i k3 = _mm512_set1_epi32(0x03030303);
    for (int b = 0; b < blocks; b++) {
        uint8_t *pb = panel + (size_t)b * PANEL_BLOCK;
        const uint8_t *at[PANEL_ROWS];
        panel_rows(w + (size_t)b * bytes, row_bytes, rows, at);
        __m512i head[4], sm[4];
        transpose16(at, 0, head); /* d and dmin, then the twelve bytes of scales and mins */
        /* get_scale_min_k4 (scales_mins_k4) on every row at once: sm[0..1] the eight scales, sm[2..3] the mins */
        sm[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(head[3], 4), k2),
                                _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(head[2], 6), k3), 4));
        sm[2] = _mm512_and_si512(head[2], k1);
        sm[1] = _mm512_or_si512(_mm512_and_si512(head[3], k2),
                                _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(head[1], 6), k3), 4));
        sm[0] = _mm512_and_si512(head[1], k1);
        for (int j = 0; j < 8; j++) store(pb + PANEL_SCALES + 64 * j, byte_u32(sm[j / 4], j % 4));
        for (int p = 0; p < 4; p++) /* mins 2p and 2p + 1 as a pair of int16 */
            store(pb + PANEL_MINS + 64 * p,
                  _mm512_cvtepu8_epi16(_mm512_cvtepi32_epi16(_mm512_srli_epi32(sm[2 + p / 2], 16 * (p % 2)))));
        _mm512_store_ps(pb + PANEL_D, low_f16(head[0]));
        _mm512_store_ps(pb + PANEL_DMIN, low_f16(_mm512_srli_epi32(head[0], 16)));
        __m512i qh[8];
        if (five) transpose_rows(at, 16, 32, qh);
        for (int j = 0; j < 4; j++) { /* 32 bytes: sub-block 2j in the low nibbles (steps 16j..), 2j + 1 high */
            __m512i t[8];
            transpose_rows(at, qs + 32 * j, 32, t);
            for (int k = 0; k < 8; k++) {
                __m512i lo = _mm512_and_si512(t[k], low), hi = _mm512_and_si512(_mm512_srli_epi16(t[k], 4), low);
                if (five) {
                    const __m512i bl = _mm512_and_si512(_mm512_srli_epi16(qh[k], 2 * j), one);
                    const __m512i bh = _mm512_and_si512(_mm512_srli_epi16(qh[k], 2 * j + 1), one);
                    lo = _mm512_or_si512(lo, _mm512_slli_epi16(bl, 4));
                    hi = _mm512_or_si512(hi, _mm512_slli_epi16(bh, 4));
                }
                store(pb + 64 * (16 * j + k), lo);
                store(pb + 64 * (16 * j + 8 + k), hi);
            }
        }
    }
}

static inline int32_t four_bytes(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* A panel block's sub-block totals for nr activation rows: per sub-block `steps` vpdpbusd (four values of 16 rows
 * against four activations broadcast), times the sub-block's scale per row; exact int32 */
VNNI INLINE void scaled_totals(int nr, const uint8_t *values, const uint8_t *scales, int subblocks, int steps,
                                      const uint8_t *xq, long stride, __m512i total[TILE]) {
    for (int r = 0; r < nr; r++) total[r] = _mm512_setzero_si512();
    for (int i = 0; i < subblocks; i++) {
        __m512i sub[TILE];
        for (int r = 0; r < nr; r++) sub[r] = _mm512_setzero_si512();
        for (int step = 0; step < steps; step++) {
            const int at = steps * i + step;
            const __m512i v = _mm512_load_si512((const void *)(values + 64 * at));
            for (int r = 0; r < nr; r++)
                sub[r] = _mm512_dpbusd_epi32(sub[r], v, _mm512_set1_epi32(four_bytes(xq + r * stride + 4 * at)));
        }
        const __m512i scale = _mm512_load_si512((const void *)(scales + 64 * i));
        for (int r = 0; r < nr; r++) total[r] = _mm512_add_epi32(total[r], _mm512_mullo_epi32(sub[r], scale));
    }
}

/* pairs of int16 per row (mins, or Q6_K's scales) against pairs of the activations' int16 sums, broadcast */
VNNI INLINE void paired_sums(int nr, const uint8_t *pairs, int n, const uint8_t *sums, long stride, __m512i out[TILE]) {
    for (int r = 0; r < nr; r++) out[r] = _mm512_setzero_si512();
    for (int i = 0; i < n; i++) {
        const __m512i p = _mm512_load_si512((const void *)(pairs + 64 * i));
        for (int r = 0; r < nr; r++)
            out[r] = _mm512_dpwssd_epi32(out[r], p, _mm512_set1_epi32(four_bytes(sums + r * stride + 4 * i)));
    }
}

/* nr (up to TILE) activation rows against a panel: out[r] holds the 16 rows' outputs of activation row r */
VNNI INLINE void dot_q45_k_panel(int nr, const uint8_t *panel, const uint8_t *act, long stride, int blocks,
                                 float out[TILE][PANEL_ROWS]) {
    __m512 acc[TILE], acc_m[TILE];
    for (int r = 0; r < nr; r++) acc[r] = acc_m[r] = _mm512_setzero_ps();
    for (int b = 0; b < blocks; b++, act += ACT_K) {
        const uint8_t *pb = panel + (size_t)b * PANEL_BLOCK;
        __m512i total[TILE], mins[TILE];
        scaled_totals(nr, pb, pb + PANEL_SCALES, 8, 8, act + 36, stride, total);
        paired_sums(nr, pb + PANEL_MINS, 4, act + ACT_K_SUMS32, stride, mins);
        const __m512 d = _mm512_load_ps(pb + PANEL_D), dmin = _mm512_load_ps(pb + PANEL_DMIN);
        for (int r = 0; r < nr; r++) {
            const __m512 dx = _mm512_set1_ps(act_d(act + (size_t)r * stride));
            acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(dx, d), _mm512_cvtepi32_ps(total[r]), acc[r]);
            acc_m[r] = _mm512_fmadd_ps(_mm512_mul_ps(dx, dmin), _mm512_cvtepi32_ps(mins[r]), acc_m[r]);
        }
    }
    for (int r = 0; r < nr; r++) _mm512_storeu_ps(out[r], _mm512_sub_ps(acc[r], acc_m[r]));
}

/* Q6_K panels: 16 scales a block (one per 16 values) as int32 per row, the offset's scales in pairs of int16 per
 * row (against the activations' sums of 16), d per row */
enum { PANEL6_SCALES = PANEL_VALUES, PANEL6_PAIRS = PANEL6_SCALES + 16 * 64, PANEL6_D = PANEL6_PAIRS + 8 * 64 };
enum { PANEL6_BLOCK = PANEL6_D + 64 };

VNNI static void panel_q6_k(const uint8_t *w, size_t row_bytes, int rows, int blocks, uint8_t *panel) {
    const __m512i low = _mm512_set1_epi8(0x0F), three = _mm512_set1_epi8(3);
    for (int b = 0; b < blocks; b++) {
        uint8_t *pb = panel + (size_t)b * PANEL6_BLOCK;
        const uint8_t *at[PANEL_ROWS];
        panel_rows(w + (size_t)b * 210, row_bytes, rows, at);
        __m512i sc[4];
        transpose16(at, 192, sc); /* the 16 int8 scales */
        for (int i = 0; i < 16; i++)
            store(pb + PANEL6_SCALES + 64 * i, _mm512_srai_epi32(_mm512_slli_epi32(sc[i / 4], 24 - 8 * (i % 4)), 24));
        for (int p = 0; p < 8; p++) /* scales 2p and 2p + 1 as a pair of int16 */
            store(pb + PANEL6_PAIRS + 64 * p,
                  _mm512_cvtepi8_epi16(_mm512_cvtepi32_epi16(_mm512_srli_epi32(sc[p / 2], 16 * (p % 2)))));
        float *d = (float *)(pb + PANEL6_D);
        for (int r = 0; r < PANEL_ROWS; r++) d[r] = r < rows ? f16(at[r] + 208) : 0.0f;
        /* values_q6_k's order: per half, values 32n + 4k (n = 0..3) from the low bytes' nibbles and the high bits'
         * pairs */
        for (int half = 0; half < 2; half++) {
            __m512i l0[8], l1[8], qh[8];
            transpose_rows(at, 64 * half, 32, l0);
            transpose_rows(at, 64 * half + 32, 32, l1);
            transpose_rows(at, 128 + 32 * half, 32, qh);
            for (int k = 0; k < 8; k++) {
                const __m512i l[4] = {_mm512_and_si512(l0[k], low), _mm512_and_si512(l1[k], low),
                                      _mm512_and_si512(_mm512_srli_epi16(l0[k], 4), low),
                                      _mm512_and_si512(_mm512_srli_epi16(l1[k], 4), low)};
                for (int n = 0; n < 4; n++)
                    store(pb + 64 * (32 * half + 8 * n + k),
                          _mm512_or_si512(l[n], _mm512_slli_epi16(
                                                    _mm512_and_si512(_mm512_srli_epi16(qh[k], 2 * n), three), 4)));
            }
        }
    }
}

VNNI INLINE void dot_q6_k_panel(int nr, const uint8_t *panel, const uint8_t *act, long stride, int blocks,
                                float out[TILE][PANEL_ROWS]) {
    __m512 acc[TILE];
    for (int r = 0; r < nr; r++) acc[r] = _mm512_setzero_ps();
    for (int b = 0; b < blocks; b++, act += ACT_K) {
        const uint8_t *pb = panel + (size_t)b * PANEL6_BLOCK;
        __m512i total[TILE], offset[TILE];
        scaled_totals(nr, pb, pb + PANEL6_SCALES, 16, 4, act + 36, stride, total);
        paired_sums(nr, pb + PANEL6_PAIRS, 8, act + 4, stride, offset);
        const __m512 d = _mm512_load_ps(pb + PANEL6_D);
        for (int r = 0; r < nr; r++) {
            const __m512 dx = _mm512_set1_ps(act_d(act + (size_t)r * stride));
            const __m512i t = _mm512_sub_epi32(total[r], _mm512_slli_epi32(offset[r], 5));
            acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(dx, d), _mm512_cvtepi32_ps(t), acc[r]);
        }
    }
    for (int r = 0; r < nr; r++) _mm512_storeu_ps(out[r], acc[r]);
}

/* Affine panels: per 32-value chunk, 8 steps of four values of the 16 rows (a 4-bit chunk's values in the order
 * its activations are held: the even ones, then the odd ones), the rows' scales, and their bias terms */
enum { PANELA_SCALES = 8 * 64, PANELA_BIAS = PANELA_SCALES + 64, PANELA_CHUNK = PANELA_BIAS + 64 };

VNNI static void panel_affine(const struct int8_weight *w, int j0, int rows, int chunks, uint8_t *panel) {
    const int groups = w->K / w->group, per = w->group / QK, chunk_bytes = w->bits == 8 ? QK : QK / 2;
    const __m512i low = _mm512_set1_epi8(0x0F);
    const __m512i group_at = _mm512_mullo_epi32(
        _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0), _mm512_set1_epi32(groups));
    const __mmask16 present = (__mmask16)((1u << rows) - 1);
    const float *sc = w->scales + (size_t)j0 * groups, *bi = w->biases + (size_t)j0 * groups;
    for (int c = 0; c < chunks; c++) {
        uint8_t *pc = panel + (size_t)c * PANELA_CHUNK;
        const uint8_t *at[PANEL_ROWS];
        panel_rows(w->q + (size_t)j0 * w->row_bytes + (size_t)c * chunk_bytes, (size_t)w->row_bytes, rows, at);
        const __m512i g = _mm512_add_epi32(group_at, _mm512_set1_epi32(c / per));
        const __m512 s = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), present, g, sc, 4);
        const __m512 b = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), present, g, bi, 4);
        _mm512_store_ps(pc + PANELA_SCALES, s);
        _mm512_store_ps(pc + PANELA_BIAS, w->bits == 8 ? _mm512_fmadd_ps(_mm512_set1_ps(128.0f), s, b) : b);
        __m512i t[8];
        transpose_rows(at, 0, chunk_bytes, t);
        if (w->bits == 8)
            for (int k = 0; k < 8; k++) store(pc + 64 * k, t[k]);
        else /* a 4-bit chunk: its even values (low nibbles) then its odd ones */
            for (int k = 0; k < 4; k++) {
                store(pc + 64 * k, _mm512_and_si512(t[k], low));
                store(pc + 64 * (4 + k), _mm512_and_si512(_mm512_srli_epi16(t[k], 4), low));
            }
    }
}

/* legacy blocks' panels, in the affine panels' layout: per block 8 steps of four values (as unsigned bytes) of
 * the 16 rows, d as the scale, Q5_1's m as the bias term (else 0) */
VNNI static void panel_legacy(int type, const uint8_t *w, size_t row_bytes, int rows, int chunks, uint8_t *panel) {
    const struct legacy_layout l = legacy(type);
    const __m512i low = _mm512_set1_epi8(0x0F), nibble = _mm512_set1_epi32(0x0F), flip = _mm512_set1_epi8((char)0x80);
    /* four bits of a dword spread to its four bytes' bit 0: (n * 0x00204081) & 0x01010101 (no carries) */
    const __m512i spread = _mm512_set1_epi32(0x00204081), bit0 = _mm512_set1_epi32(0x01010101);
    for (int c = 0; c < chunks; c++) {
        uint8_t *pc = panel + (size_t)c * PANELA_CHUNK;
        const uint8_t *at[PANEL_ROWS];
        panel_rows(w + (size_t)c * l.bytes, row_bytes, rows, at);
        __m512i head[4], t[8];
        transpose16(at, 0, head); /* d, then m or the high bits */
        const __m512 d = low_f16(head[0]);
        _mm512_store_ps(pc + PANELA_SCALES, d);
        _mm512_store_ps(pc + PANELA_BIAS, l.m >= 0 ? low_f16(_mm512_srli_epi32(head[0], 16)) : _mm512_setzero_ps());
        if (type == GGML_Q8_0) {
            transpose_rows(at, 2, 32, t);
            for (int k = 0; k < 8; k++) store(pc + 64 * k, _mm512_xor_si512(t[k], flip));
            continue;
        }
        transpose16(at, l.qs, t); /* the 16 bytes of nibbles */
        const __m512i qh = l.qh == 4 ? head[1] /* Q5_1: bytes 4-7; Q5_0: bytes 2-5 */
                                     : _mm512_or_si512(_mm512_srli_epi32(head[0], 16), _mm512_slli_epi32(head[1], 16));
        for (int k = 0; k < 8; k++) { /* values 4k..4k+3: the low nibbles of t[k] (k < 4), else the high of t[k - 4] */
            __m512i v = k < 4 ? _mm512_and_si512(t[k], low) : _mm512_and_si512(_mm512_srli_epi16(t[k - 4], 4), low);
            const __m512i bits = _mm512_and_si512(_mm512_srli_epi32(qh, 4 * k), nibble);
            v = _mm512_or_si512(v, _mm512_slli_epi32(_mm512_and_si512(_mm512_mullo_epi32(bits, spread), bit0), 4));
            store(pc + 64 * k, v);
        }
    }
}

/* where a chunk's step of four activations lies in a row's xq (4-bit: the pairs' layout of quantize_chunks) */
static inline int act_step(int bits, int chunks, int c, int step) {
    if (bits == 8) return c * QK + 4 * step;
    const int pair = c & ~1, alone = pair + 1 >= chunks, slot = c & 1;
    if (alone) return c * QK + 4 * step;
    return pair * QK + (step < 4 ? 16 * slot + 4 * step : 32 + 16 * slot + 4 * (step - 4));
}

/* offset: what the panel's unsigned values exceed the weights' integers by (8 bits: 128; Q5_0: 16), taken off
 * each chunk's total through the activations' integer sums */
VNNI INLINE void dot_affine_panel(int nr, const uint8_t *panel, const struct acts *a, int m, int bits, int offset,
                                  float out[TILE][PANEL_ROWS]) {
    __m512 acc[TILE], bias[TILE];
    for (int r = 0; r < nr; r++) acc[r] = bias[r] = _mm512_setzero_ps();
    for (int c = 0; c < a->chunks; c++) {
        const uint8_t *pc = panel + (size_t)c * PANELA_CHUNK;
        __m512i sub[TILE];
        for (int r = 0; r < nr; r++) sub[r] = _mm512_setzero_si512();
        for (int step = 0; step < 8; step++) {
            const __m512i v = _mm512_load_si512((const void *)(pc + 64 * step));
            const int at = act_step(bits, a->chunks, c, step);
            for (int r = 0; r < nr; r++)
                sub[r] = _mm512_dpbusd_epi32(sub[r], v, _mm512_set1_epi32(four_bytes((const uint8_t *)act_q(a, m + r) + at)));
        }
        const __m512 scale = _mm512_load_ps(pc + PANELA_SCALES), b = _mm512_load_ps(pc + PANELA_BIAS);
        for (int r = 0; r < nr; r++) {
            __m512i total = sub[r];
            if (offset) total = _mm512_sub_epi32(total, _mm512_set1_epi32(offset * act_isums(a, m + r)[c]));
            acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(scale, _mm512_set1_ps(act_scales(a, m + r)[c])),
                                     _mm512_cvtepi32_ps(total), acc[r]);
            bias[r] = _mm512_fmadd_ps(b, _mm512_set1_ps(act_sums(a, m + r)[c]), bias[r]);
        }
    }
    for (int r = 0; r < nr; r++) _mm512_storeu_ps(out[r], _mm512_add_ps(acc[r], bias[r]));
}

static int have_vnni(void) {
    static int ok = -1;
    if (ok < 0)
        ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vnni") && !getenv("MLXCEL_NO_AVX512"); /* (a bench's A/B switch) */
    return ok;
}

/* whether prompts take the AVX-512 VNNI panels (tests compare them with AVX2's tiles) */
int mlxcel_int8_vnni(void) { return have_vnni(); }

/* ---- the product ------------------------------------------------------------------------------------------- */

/* whether a weight's activations are q8_K blocks of 256 (the K-quants), not q8_0 chunks of 32 */
static inline int k_blocks(const struct int8_weight *w) { return w->ggml && !is_legacy(w->ggml); }

/* whether a weight's rows have four-row tiles and VNNI panels (Q2_K and Q3_K: one row at a time) */
static inline int tiled(const struct int8_weight *w) { return w->ggml != GGML_Q2_K && w->ggml != GGML_Q3_K; }

struct int8_args {
    const struct int8_weight *w;
    struct acts a;
    int M, per_task, ldc;
    float alpha, beta;
    float *c;
};

/* one output: weight row `row` (index j) against activation row m */
AVX2 static inline float dot_one(const struct int8_args *t, const uint8_t *row, int j, int m) {
    const struct int8_weight *w = t->w;
    const uint8_t *act = t->a.base + (size_t)m * t->a.stride;
    if (is_legacy(w->ggml)) return dot_legacy(w->ggml, row, &t->a, m);
    if (w->ggml == GGML_Q6_K) return dot_q6_k(row, act, t->a.blocks);
    if (w->ggml == GGML_Q2_K) return dot_q2_k(row, act, t->a.blocks);
    if (w->ggml == GGML_Q3_K) return dot_q3_k(row, act, t->a.blocks);
    if (w->ggml) return dot_q45_k(row, act, t->a.blocks, w->ggml == GGML_Q5_K);
    const int groups = w->K / w->group, per = w->group / QK;
    const float *sc = w->scales + (size_t)j * groups, *bi = w->biases + (size_t)j * groups;
    if (w->bits == 8) return dot_affine8(row, sc, bi, per, &t->a, m);
    float out[2];
    dot_affine4(1, row, w->row_bytes, sc, bi, groups, per, &t->a, m, out);
    return out[0];
}

static inline void put(const struct int8_args *t, int m, int j, float s) {
    float *out = t->c + (size_t)m * t->ldc + j;
    *out = t->beta == 0.0f ? t->alpha * s : t->alpha * s + t->beta * *out;
}

/* nr activation rows (up to TILE) from row m against a panel */
VNNI INLINE void panel_dot_rows(const struct int8_args *t, const uint8_t *panel, int m, int nr,
                                float s[TILE][PANEL_ROWS]) {
    const struct int8_weight *w = t->w;
    const uint8_t *act = t->a.base + (size_t)m * t->a.stride;
    if (!w->ggml) dot_affine_panel(nr, panel, &t->a, m, w->bits, w->bits == 8 ? 128 : 0, s);
    else if (is_legacy(w->ggml)) dot_affine_panel(nr, panel, &t->a, m, 8, legacy_excess(w->ggml, 1), s);
    else if (w->ggml == GGML_Q6_K) dot_q6_k_panel(nr, panel, act, t->a.stride, t->a.blocks, s);
    else dot_q45_k_panel(nr, panel, act, t->a.stride, t->a.blocks, s);
}

/* every activation row against the panel of weight rows jb..je: TILE at a time, the last one to three together */
VNNI static void panel_dot(const struct int8_args *t, const uint8_t *panel, int jb, int je) {
    for (int m = 0; m < t->M; m += TILE) {
        const int nr = t->M - m < TILE ? t->M - m : TILE;
        float s[TILE][PANEL_ROWS];
        switch (nr) {
        case 1: panel_dot_rows(t, panel, m, 1, s); break;
        case 2: panel_dot_rows(t, panel, m, 2, s); break;
        case 3: panel_dot_rows(t, panel, m, 3, s); break;
        default: panel_dot_rows(t, panel, m, TILE, s); break;
        }
        for (int r = 0; r < nr; r++)
            for (int j = jb; j < je; j++) put(t, m + r, j, s[r][j - jb]);
    }
}

/* The task's weight rows, PANEL_ROWS at a time. With AVX-512 VNNI, from 2 activation rows, a panel of 16 rows is
 * built from their bytes once for all of them; without it, K-quant batches take four-row tiles (the activations
 * read from L2 once a weight row, not once per activation row) and the rest one row at a time. A decode step's
 * one row stays on dot_one, whose prefetch streams the weights: on the panels a Llama-3.2-1B Q4_K_M decode ran
 * 11-15 tokens/s against 13-17 and SmolLM2's Q4_1 58-73 against 66-78 (alternating runs, one machine). The
 * loops' order changes no output: each is one function of its two rows. */
enum { PANEL_MIN_ROWS = 2 };

AVX2 static void int8_task(void *ctx, int task) {
    const struct int8_args *t = ctx;
    const struct int8_weight *w = t->w;
    const int vnni = have_vnni();
    const int five = w->ggml == GGML_Q5_K, six = w->ggml == GGML_Q6_K;
    const int j0 = task * t->per_task, j1 = (task + 1) * t->per_task < w->N ? (task + 1) * t->per_task : w->N;
    const size_t panel_bytes =
        k_blocks(w) ? (size_t)t->a.blocks * PANEL6_BLOCK : (size_t)t->a.chunks * PANELA_CHUNK;
    uint8_t *panel = vnni && t->M >= PANEL_MIN_ROWS && tiled(w) ? (uint8_t *)mlxcel_thread_floats(BUFFER_PANEL, panel_bytes / 4)
                                                  : NULL;
    for (int jb = j0; jb < j1; jb += PANEL_ROWS) {
        const int je = jb + PANEL_ROWS < j1 ? jb + PANEL_ROWS : j1;
        if (panel) {
            if (!w->ggml) panel_affine(w, jb, je - jb, t->a.chunks, panel);
            else if (is_legacy(w->ggml))
                panel_legacy(w->ggml, w->q + (size_t)jb * w->row_bytes, w->row_bytes, je - jb, t->a.chunks, panel);
            else if (six) panel_q6_k(w->q + (size_t)jb * w->row_bytes, w->row_bytes, je - jb, t->a.blocks, panel);
            else panel_q45_k(w->q + (size_t)jb * w->row_bytes, w->row_bytes, je - jb, t->a.blocks, five, panel);
            panel_dot(t, panel, jb, je);
            continue;
        }
        int m = 0;
        if (is_legacy(w->ggml))
            for (; m + TILE <= t->M; m += TILE)
                for (int j = jb; j < je; j++) {
                    float s[TILE];
                    dot_legacy_tile(w->ggml, w->q + (size_t)j * w->row_bytes, &t->a, m, s);
                    for (int r = 0; r < TILE; r++) put(t, m + r, j, s[r]);
                }
        if (k_blocks(w) && tiled(w))
            for (; m + TILE <= t->M; m += TILE)
                for (int j = jb; j < je; j++) {
                    float s[TILE];
                    const uint8_t *row = w->q + (size_t)j * w->row_bytes;
                    const uint8_t *act = t->a.base + (size_t)m * t->a.stride;
                    if (six) dot_q6_k_tile(row, act, t->a.stride, t->a.blocks, s);
                    else dot_q45_k_tile(row, act, t->a.stride, t->a.blocks, five, s);
                    for (int r = 0; r < TILE; r++) put(t, m + r, j, s[r]);
                }
        for (; m < t->M; m++) {
            int j = jb;
            if (!w->ggml && w->bits == 4) /* two rows' float chains at once */
                for (const int groups = w->K / w->group; j + 2 <= je; j += 2) {
                    float s[2];
                    dot_affine4(2, w->q + (size_t)j * w->row_bytes, w->row_bytes, w->scales + (size_t)j * groups,
                                w->biases + (size_t)j * groups, groups, w->group / QK, &t->a, m, s);
                    put(t, m, j, s[0]), put(t, m, j + 1, s[1]);
                }
            for (; j < je; j++) put(t, m, j, dot_one(t, w->q + (size_t)j * w->row_bytes, j, m));
        }
    }
}

/* a prompt's rows quantized over the pool, some rows a task */
enum { QUANTIZE_ROWS = 8 };
struct quantize_args {
    const struct int8_weight *w;
    const struct acts *a;
    const float *x;
    int ldx, M;
};

static void quantize_task(void *ctx, int task) {
    const struct quantize_args *q = ctx;
    for (int m = task * QUANTIZE_ROWS; m < q->M && m < (task + 1) * QUANTIZE_ROWS; m++) {
        if (k_blocks(q->w)) quantize_k(q->x + (size_t)m * q->ldx, q->a, m);
        else quantize_chunks(q->x + (size_t)m * q->ldx, q->a, m, q->w->ggml ? 8 : q->w->bits);
    }
}

HIDDEN int mlxcel_int8_reads(const struct int8_weight *w) {
    if (is_legacy(w->ggml)) return w->K % QK == 0;
    if (w->ggml) return w->ggml >= GGML_Q2_K && w->ggml <= GGML_Q6_K && w->K % QK_K == 0;
    return (w->bits == 4 || w->bits == 8) && w->K % QK == 0 && (w->group == QK || w->group == 2 * QK);
}

HIDDEN int mlxcel_int8_gemm(const struct int8_weight *w, int M, float alpha, const float *x, int ldx, float beta,
                            float *c, int ldc, int threads) {
    if (!mlxcel_int8_reads(w)) return 0;
    struct acts a = {w->K, w->K / QK, w->K / QK_K, 0, NULL};
    a.stride = k_blocks(w) ? (long)a.blocks * ACT_K : (long)a.chunks * (12 + QK);
    a.base = (uint8_t *)mlxcel_thread_floats(BUFFER_ACTS, ((size_t)M * a.stride + 3) / 4);
    if (!a.base) return 0;
    struct quantize_args q = {w, &a, x, ldx, M};
    mlxcel_pool_run(quantize_task, &q, (M + QUANTIZE_ROWS - 1) / QUANTIZE_ROWS, M > QUANTIZE_ROWS);
    int tasks = 4 * threads < w->N ? 4 * threads : w->N;
    struct int8_args t = {w, a, M, (w->N + tasks - 1) / tasks, ldc, alpha, beta, c};
    mlxcel_pool_run(int8_task, &t, tasks, (long)w->N * w->K >= PARALLEL_WORK);
    return 1;
}
#else
int mlxcel_int8_vnni(void) { return 0; }
HIDDEN int mlxcel_int8_reads(const struct int8_weight *w) { (void)w; return 0; }
HIDDEN int mlxcel_int8_gemm(const struct int8_weight *w, int M, float alpha, const float *x, int ldx, float beta,
                            float *c, int ldc, int threads) {
    (void)w, (void)M, (void)alpha, (void)x, (void)ldx, (void)beta, (void)c, (void)ldc, (void)threads;
    return 0;
}
#endif
