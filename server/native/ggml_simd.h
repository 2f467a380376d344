/* ggml-cpu's AVX2 + FMA arithmetic that several of mlxcel's kernels reproduce bit for bit (b10621's build,
 * GGML_NATIVE off): its reductions and its vectorized expf. One place for each (encoder_ggml.c, ggml_order.c,
 * cpu_kernels.c's SwiGLU). x86 only; the functions carry their own target attribute. */
#ifndef MLXCEL_GGML_SIMD_H
#define MLXCEL_GGML_SIMD_H

#include <immintrin.h>
#include <math.h>

#define GGML_SIMD_AVX2 __attribute__((target("avx2,fma,f16c")))

GGML_SIMD_AVX2 static inline float ggml_hsum8(__m256 x) { /* llamafile's hsum(__m256), ggml_vec_cvar's and soft_max's */
    __m128 v = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
    v = _mm_add_ps(v, _mm_movehl_ps(v, v));
    v = _mm_add_ss(v, _mm_movehdup_ps(v));
    return _mm_cvtss_f32(v);
}

static inline float ggml_unfused_madd(float x, float y, float sum) { /* a product, then a sum: two roundings */
    float p = x * y;
    __asm__("" : "+x"(p));
    return sum + p;
}

/* the first np (a multiple of 32) elements of x . y as ggml's vec_dot loops sum them (f32 and f16 alike, over
 * the f16 values widened): four 8-lane FMA accumulators over 32-wide steps, then GGML_F32x8_REDUCE (x0 + x2,
 * x1 + x3, their sum, its halves added, two horizontal adds) */
GGML_SIMD_AVX2 static inline float ggml_dot_steps(const float *x, const float *y, int np) {
    __m256 s[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int i = 0; i < np; i += 32)
        for (int j = 0; j < 4; j++)
            s[j] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8 * j), _mm256_loadu_ps(y + i + 8 * j), s[j]);
    s[0] = _mm256_add_ps(s[0], s[2]);
    s[1] = _mm256_add_ps(s[1], s[3]);
    s[0] = _mm256_add_ps(s[0], s[1]);
    const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(s[0]), _mm256_extractf128_ps(s[0], 1));
    const __m128 t1 = _mm_hadd_ps(t0, t0);
    return _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
}

/* ggml_dot_steps of x against two rows y0 and y1 at once (x's loads shared, eight independent FMA chains where one
 * row's four wait on the FMA's latency): each sum bitwise ggml_dot_steps(x, yi, np) */
GGML_SIMD_AVX2 static inline void ggml_dot_steps2(const float *x, const float *y0, const float *y1, int np,
                                                  float out[2]) {
    __m256 a[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    __m256 b[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int i = 0; i < np; i += 32)
        for (int j = 0; j < 4; j++) {
            const __m256 xv = _mm256_loadu_ps(x + i + 8 * j);
            a[j] = _mm256_fmadd_ps(xv, _mm256_loadu_ps(y0 + i + 8 * j), a[j]);
            b[j] = _mm256_fmadd_ps(xv, _mm256_loadu_ps(y1 + i + 8 * j), b[j]);
        }
    __m256 *s[2] = {a, b};
    for (int r = 0; r < 2; r++) {
        __m256 *t = s[r];
        t[0] = _mm256_add_ps(t[0], t[2]);
        t[1] = _mm256_add_ps(t[1], t[3]);
        t[0] = _mm256_add_ps(t[0], t[1]);
        const __m128 t0 = _mm_add_ps(_mm256_castps256_ps128(t[0]), _mm256_extractf128_ps(t[0], 1));
        const __m128 t1 = _mm_hadd_ps(t0, t0);
        out[r] = _mm_cvtss_f32(_mm_hadd_ps(t1, t1));
    }
}

/* ggml_dot_steps for a tile of nw (1 to 3) weight rows w[] and four activation rows y[] (a verify pass's rows).
 * Accumulator chain c (the elements 8c .. 8c + 7 of each 32-wide step) is independent of the other three, so the
 * tile runs one chain at a time: its 4 nw sums in registers, each weight and activation load shared (seven loads
 * for twelve FMAs at nw = 3, where ggml_dot_steps2 needs three for two); then each output's four chains reduce as
 * GGML_F32x8_REDUCE. Each out[i][r] is bitwise ggml_dot_steps(w[i], y[r], np). Inlined with a constant nw. */
GGML_SIMD_AVX2 static inline __attribute__((always_inline)) void ggml_dot_steps_tile(int nw, const float *const w[3],
                                                                                       const float *const y[4], int np,
                                                                                       float out[3][4]) {
    __m256 chains[4][3][4];
    for (int c = 0; c < 4; c++) {
        __m256 s[3][4];
        for (int i = 0; i < nw; i++)
            for (int r = 0; r < 4; r++) s[i][r] = _mm256_setzero_ps();
        for (int k = 8 * c; k < np; k += 32) {
            __m256 wv[3];
            for (int i = 0; i < nw; i++) wv[i] = _mm256_loadu_ps(w[i] + k);
            for (int r = 0; r < 4; r++) {
                const __m256 yv = _mm256_loadu_ps(y[r] + k);
                for (int i = 0; i < nw; i++) s[i][r] = _mm256_fmadd_ps(wv[i], yv, s[i][r]);
            }
        }
        for (int i = 0; i < nw; i++)
            for (int r = 0; r < 4; r++) chains[c][i][r] = s[i][r];
    }
    for (int i = 0; i < nw; i++)
        for (int r = 0; r < 4; r++) {
            __m256 t0 = _mm256_add_ps(chains[0][i][r], chains[2][i][r]);
            const __m256 t1 = _mm256_add_ps(chains[1][i][r], chains[3][i][r]);
            t0 = _mm256_add_ps(t0, t1);
            const __m128 h0 = _mm_add_ps(_mm256_castps256_ps128(t0), _mm256_extractf128_ps(t0, 1));
            const __m128 h1 = _mm_hadd_ps(h0, h0);
            out[i][r] = _mm_cvtss_f32(_mm_hadd_ps(h1, h1));
        }
}

/* ggml_dot_vec's leftovers after the 32-wide steps, continuing `sum`, as GCC compiles vec.cpp's `sumf += x[i]*y[i]`:
 * an in-order (fold-left) vectorized loop, products then sums, 8 at a time, then once 4, then one FMA each (the
 * scalar epilogue is contracted) */
GGML_SIMD_AVX2 static inline float ggml_dot_tail(const float *x, const float *y, int np, int n, float sum) {
    int i = np;
    for (; i + 8 <= n; i += 8)
        for (int j = i; j < i + 8; j++) sum = ggml_unfused_madd(x[j], y[j], sum);
    if (i + 4 <= n) {
        for (int j = i; j < i + 4; j++) sum = ggml_unfused_madd(x[j], y[j], sum);
        i += 4;
    }
    for (; i < n; i++) sum = fmaf(x[i], y[i], sum);
    return sum;
}

GGML_SIMD_AVX2 static inline float ggml_dot_vec(const float *x, const float *y, int n) { /* ggml_vec_dot_f32 */
    const int np = n & ~31;
    return ggml_dot_tail(x, y, np, n, ggml_dot_steps(x, y, np));
}

/* ARM's optimized-routines expf in 8 lanes: the algorithm ggml_v_expf runs under AVX2 + FMA. */
GGML_SIMD_AVX2 static inline __m256 ggml_expf8(__m256 x) {
    const __m256 r = _mm256_set1_ps(0x1.8p23f);
    const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
    const __m256 n = _mm256_sub_ps(z, r);
    const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                      _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
    const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
    const __m256 k = _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_castps_si256(_mm256_set1_ps(1))));
    const __m256i c = _mm256_castps_si256(
        _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.f), n), _mm256_set1_ps(126), _CMP_GT_OQ));
    const __m256 u = _mm256_mul_ps(b, b);
    const __m256 j = _mm256_fmadd_ps(
        _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
                        _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
        u, _mm256_mul_ps(_mm256_set1_ps(0x1.ffffecp-1f), b));
    if (!_mm256_movemask_ps(_mm256_castsi256_ps(c))) return _mm256_fmadd_ps(j, k, k);
    const __m256i g = _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
                                       _mm256_set1_epi32((int)0x82000000u));
    const __m256 s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f000000)));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
    const __m256i d = _mm256_castps_si256(
        _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.f), n), _mm256_set1_ps(192), _CMP_GT_OQ));
    return _mm256_or_ps(
        _mm256_and_ps(_mm256_castsi256_ps(d), _mm256_mul_ps(s1, s1)),
        _mm256_andnot_ps(_mm256_castsi256_ps(d),
                         _mm256_or_ps(_mm256_and_ps(_mm256_castsi256_ps(c), _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1)),
                                      _mm256_andnot_ps(_mm256_castsi256_ps(c), _mm256_fmadd_ps(k, j, k)))));
}

/* ggml_compute_forward_soft_max_f32 over one row of n, no mask: the row scaled, its max, ggml_v_expf in 8 lanes
 * (each 8 summed in float, then added in double; the tail through expf), then scaled by the float of 1 / sum */
GGML_SIMD_AVX2 static inline void ggml_soft_max_row(float *row, int n, float scale) {
    for (int i = 0; i < n; i++) row[i] *= scale;
    float max = -INFINITY;
    for (int i = 0; i < n; i++) max = row[i] > max ? row[i] : max;
    double sum = 0.0;
    int i = 0;
    for (; i + 7 < n; i += 8) {
        const __m256 v = ggml_expf8(_mm256_sub_ps(_mm256_loadu_ps(row + i), _mm256_set1_ps(max)));
        _mm256_storeu_ps(row + i, v);
        sum += (double)ggml_hsum8(v);
    }
    for (; i < n; i++) {
        const float v = expf(row[i] - max);
        sum += (double)v;
        row[i] = v;
    }
    const float inv = (float)(1.0 / sum);
    for (i = 0; i < n; i++) row[i] *= inv;
}

#endif
