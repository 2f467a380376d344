/* A BERT-family encoder computed with b10621's CPU arithmetic, bit for bit (x86 with AVX2, FMA and F16C: what
 * the reference build's ggml-cpu runs with, GGML_NATIVE off).
 *
 * Why: ggml's GELU is a lookup through fp16 (ggml-cpu/vec.h, GGML_GELU_FP16), so an activation one float ulp
 * away from the reference's can land a whole fp16 step away after it, and embeddings computed with ordinary
 * float arithmetic differ from b10621's by ~1e-4. Here every operation sums in ggml's order:
 * - a product of two or more rows, inner size a multiple of 8 and weight rows a multiple of 4, as llamafile's
 *   tinyBLAS<8, __m256>: one 8-lane FMA accumulator per output over the whole inner size, then its hsum;
 * - any other product as ggml_vec_dot_f32: four 8-lane FMA accumulators over 32-wide steps, reduced pairwise,
 *   then two hadds, then the leftovers as GCC vectorizes an in-order float reduction (ggml_simd.h, ggml_dot_vec);
 * - ggml_norm: a double sum of the row, the mean in float, the centred squares in 8-lane hsums added in
 *   double, the variance in float, then the scale, the weight and the bias as three float operations;
 * - soft_max_ext: scale, mask, max, ARM's optimized-routines expf in 8 lanes (as ggml_v_expf) with libm's expf
 *   for the tail, a double sum of 8-lane hsums, and the reciprocal as a float scale;
 * - GELU: ggml's table of fp16(gelu_tanh(x)) over every fp16 x, x itself at 10 and above, 0 at -10 and below.
 * One sequence at a time, as b10621 evaluates a lone prompt: its attention sums run over its own keys only.
 */

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ggml_simd.h"

#define ENC __attribute__((target("avx2,fma,f16c")))

enum { POOL_NONE = 0, POOL_MEAN = 1, POOL_CLS = 2, POOL_LAST = 3, POOL_RANK = 4 };
enum { L_QW, L_QB, L_KW, L_KB, L_VW, L_VB, L_OW, L_OB, L_N1W, L_N1B, L_UW, L_UB, L_DW, L_DB, L_N2W, L_N2B, L_COUNT };

typedef struct {
    int n_vocab, n_pos, hidden, n_layer, n_head, n_ff, n_cls_out;
    float eps;
    const float *tok, *pos, *type0, *norm_w, *norm_b;
    const float *const *layers; /* n_layer * L_COUNT pointers */
    const float *cls_w, *cls_b, *out_w, *out_b; /* the rank head; NULL when absent */
} mlxcel_bert;

/* ---- ggml's reductions ----------------------------------------------------------------------------------- */

/* C[j*ldc + i] = A row i . B row j, for m rows of A and n rows of B, inner size k: ggml_mul_mat's choice. */
ENC static void mul_mat(const float *A, int lda, const float *B, int ldb, float *C, int ldc, int m, int n, int k,
                        int b_contiguous) {
    if (b_contiguous && n >= 2 && k % 8 == 0 && m % 4 == 0) { /* tinyBLAS<8, __m256> (never for one row) */
        int j = 0;
        for (; j + 3 <= n; j += 3)
            for (int i = 0; i < m; i += 4) {
                __m256 c[3][4];
                for (int b = 0; b < 3; b++)
                    for (int a = 0; a < 4; a++) c[b][a] = _mm256_setzero_ps();
                for (int l = 0; l < k; l += 8) {
                    __m256 av[4];
                    for (int a = 0; a < 4; a++) av[a] = _mm256_loadu_ps(A + (long)lda * (i + a) + l);
                    for (int b = 0; b < 3; b++) {
                        const __m256 bv = _mm256_loadu_ps(B + (long)ldb * (j + b) + l);
                        for (int a = 0; a < 4; a++) c[b][a] = _mm256_fmadd_ps(av[a], bv, c[b][a]);
                    }
                }
                for (int b = 0; b < 3; b++)
                    for (int a = 0; a < 4; a++) C[(long)ldc * (j + b) + i + a] = ggml_hsum8(c[b][a]);
            }
        for (; j < n; j++)
            for (int i = 0; i < m; i++) {
                __m256 c = _mm256_setzero_ps();
                for (int l = 0; l < k; l += 8)
                    c = _mm256_fmadd_ps(_mm256_loadu_ps(A + (long)lda * i + l), _mm256_loadu_ps(B + (long)ldb * j + l), c);
                C[(long)ldc * j + i] = ggml_hsum8(c);
            }
        return;
    }
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) C[(long)ldc * j + i] = ggml_dot_vec(A + (long)lda * i, B + (long)ldb * j, k);
}

ENC static void add_bias(float *x, const float *b, int rows, int width) {
    if (!b) return;
    for (int r = 0; r < rows; r++)
        for (int i = 0; i < width; i++) x[(long)r * width + i] += b[i];
}

ENC static void layer_norm(const float *x, float *y, const float *w, const float *b, int rows, int n, float eps) {
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (long)r * n;
        float *yr = y + (long)r * n;
        double total = 0.0;
        for (int i = 0; i < n; i++) total += (double)xr[i];
        const float mean = (float)total / (float)n;
        double sq = 0.0;
        int i = 0;
        for (; i + 7 < n; i += 8) {
            __m256 v = _mm256_sub_ps(_mm256_loadu_ps(xr + i), _mm256_set1_ps(mean));
            _mm256_storeu_ps(yr + i, v);
            sq += (double)ggml_hsum8(_mm256_mul_ps(v, v));
        }
        for (; i < n; i++) {
            float v = xr[i] - mean;
            yr[i] = v;
            v *= v;
            sq += (double)v;
        }
        const float variance = (float)(sq / n);
        const float scale = 1.0f / sqrtf(variance + eps);
        for (i = 0; i < n; i++) yr[i] *= scale;
        for (i = 0; i < n; i++) yr[i] *= w[i];
        for (i = 0; i < n; i++) yr[i] += b[i];
    }
}

/* ---- GELU through ggml's fp16 table -------------------------------------------------------------------- */

static uint16_t gelu_table[1 << 16];
static int gelu_ready;

ENC static float gelu_f32(float x) { /* ggml_gelu_f32, contracted as the reference build compiles it */
    return 0.5f * x * (1.0f + tanhf(0.79788456080286535587989211986876f * x * (1.0f + 0.044715f * x * x)));
}

ENC static void gelu_init(void) {
    if (gelu_ready) return;
    for (int i = 0; i < (1 << 16); i++) {
        const float f = _cvtsh_ss((unsigned short)i);
        gelu_table[i] = _cvtss_sh(gelu_f32(f), 0);
    }
    gelu_ready = 1;
}

ENC static void gelu(float *x, long n) {
    for (long i = 0; i < n; i++) {
        if (x[i] <= -10.0f) x[i] = 0.0f;
        else if (x[i] < 10.0f) x[i] = _cvtsh_ss(gelu_table[_cvtss_sh(x[i], 0)]);
    }
}

/* out = GELU(g) u over rows of width elements (g's and u's rows ld apart, out's contiguous): ggml_vec_geglu_f32
 * with GGML_GELU_FP16, the GeGLU of Gemma's feed-forward (the native steps': step_model.h) */
ENC __attribute__((visibility("hidden"))) void mlxcel_geglu(const float *g, const float *u, long rows, long width,
                                                           long ld, float *out) {
    gelu_init();
    for (long r = 0; r < rows; r++) {
        const float *x = g + r * ld, *y = u + r * ld;
        float *o = out + r * width;
        for (long i = 0; i < width; i++) {
            if (x[i] <= -10.0f) o[i] = 0.0f;
            else if (x[i] >= 10.0f) o[i] = x[i] * y[i];
            else o[i] = _cvtsh_ss(gelu_table[_cvtss_sh(x[i], 0)]) * y[i];
        }
    }
}

/* ---- quick GELU through ggml's fp16 table (GGML_GELU_QUICK_FP16: every value looked up) ------------------- */

static uint16_t gelu_quick_table[1 << 16];
static int gelu_quick_ready;

ENC static void gelu_quick_init(void) {
    if (gelu_quick_ready) return;
    for (int i = 0; i < (1 << 16); i++) {
        const float f = _cvtsh_ss((unsigned short)i);
        gelu_quick_table[i] = _cvtss_sh(f * (1.0f / (1.0f + expf(-1.702f * f))), 0);
    }
    gelu_quick_ready = 1;
}

/* ---- ggml's operations one at a time, for towers composed elsewhere (server/models/clip_llava.py) ---------- */

/* C (n x m, row-major) = B (n x k) times A (m x k) transposed: ggml_mul_mat(A, B) as ggml-cpu sums it. F16
 * operands are passed as floats already rounded to f16 (tinyBLAS converts them on load: the same sums). */
ENC void mlxcel_ggml_mul_mat(const float *A, const float *B, float *C, int m, int n, int k) {
    mul_mat(A, k, B, k, C, m, m, n, k, 1);
}

ENC void mlxcel_ggml_norm(const float *x, float *y, const float *w, const float *b, int rows, int n, float eps) {
    layer_norm(x, y, w, b, rows, n, eps);
}

ENC void mlxcel_ggml_gelu(float *x, long n) {
    gelu_init();
    gelu(x, n);
}

/* ggml_gelu_erf over f32 (ggml_vec_gelu_erf_f32: libm's erff, no table) */
void mlxcel_ggml_gelu_erf(float *x, long n) {
    const float sqrt_2_inv = 0.70710678118654752440084436210484f;
    for (long i = 0; i < n; i++) {
        const float xi = x[i];
        x[i] = 0.5f * xi * (1.0f + erff(xi * sqrt_2_inv));
    }
}

ENC void mlxcel_ggml_gelu_quick(float *x, long n) {
    gelu_quick_init();
    for (long i = 0; i < n; i++) x[i] = _cvtsh_ss(gelu_quick_table[_cvtss_sh(x[i], 0)]);
}

/* ---- the encoder --------------------------------------------------------------------------------------- */

ENC int mlxcel_bert_hidden(const mlxcel_bert *m, const int32_t *tokens, int n, float *out) {
    const int h = m->hidden, nh = m->n_head, dh = h / nh, ff = m->n_ff;
    if (n <= 0 || n > m->n_pos) return -1;
    for (int t = 0; t < n; t++)
        if (tokens[t] < 0 || tokens[t] >= m->n_vocab) return -1;
    gelu_init();
    float *x = out; /* the layer input, then its output, in place */
    float *q = malloc(sizeof(float) * (size_t)n * h), *k = malloc(sizeof(float) * (size_t)n * h);
    float *v = malloc(sizeof(float) * (size_t)n * h), *att = malloc(sizeof(float) * (size_t)n * h);
    float *cur = malloc(sizeof(float) * (size_t)n * h), *up = malloc(sizeof(float) * (size_t)n * ff);
    float *qh = malloc(sizeof(float) * (size_t)n * dh), *kh = malloc(sizeof(float) * (size_t)n * dh);
    float *vt = malloc(sizeof(float) * (size_t)n * dh), *kq = malloc(sizeof(float) * (size_t)n * n);
    float *kqv = malloc(sizeof(float) * (size_t)n * dh);
    if (!q || !k || !v || !att || !cur || !up || !qh || !kh || !vt || !kq || !kqv) {
        free(q); free(k); free(v); free(att); free(cur); free(up); free(qh); free(kh); free(vt); free(kq); free(kqv);
        return -2;
    }
    for (int t = 0; t < n; t++) {
        const float *te = m->tok + (long)tokens[t] * h, *pe = m->pos + (long)t * h;
        for (int i = 0; i < h; i++) {
            float e = m->type0 ? te[i] + m->type0[i] : te[i];
            cur[(long)t * h + i] = pe[i] + e;
        }
    }
    layer_norm(cur, x, m->norm_w, m->norm_b, n, h, m->eps);
    const float scale = 1.0f / sqrtf((float)dh);
    for (int l = 0; l < m->n_layer; l++) {
        const float *const *w = m->layers + (long)l * L_COUNT;
        mul_mat(w[L_QW], h, x, h, q, h, h, n, h, 1);
        add_bias(q, w[L_QB], n, h);
        mul_mat(w[L_KW], h, x, h, k, h, h, n, h, 1);
        add_bias(k, w[L_KB], n, h);
        mul_mat(w[L_VW], h, x, h, v, h, h, n, h, 1);
        add_bias(v, w[L_VB], n, h);
        for (int hd = 0; hd < nh; hd++) {
            for (int t = 0; t < n; t++) {
                memcpy(qh + (long)t * dh, q + (long)t * h + hd * dh, sizeof(float) * dh);
                memcpy(kh + (long)t * dh, k + (long)t * h + hd * dh, sizeof(float) * dh);
                for (int d = 0; d < dh; d++) vt[(long)d * n + t] = v[(long)t * h + hd * dh + d];
            }
            /* kq = mul_mat(k, q): q is a permuted view, so ggml takes its vec_dot path */
            mul_mat(kh, dh, qh, dh, kq, n, n, n, dh, 0);
            for (int t = 0; t < n; t++) ggml_soft_max_row(kq + (long)t * n, n, scale);
            mul_mat(vt, n, kq, n, kqv, dh, dh, n, n, 1); /* kqv = mul_mat(cont(transpose(v)), kq) */
            for (int t = 0; t < n; t++) memcpy(att + (long)t * h + hd * dh, kqv + (long)t * dh, sizeof(float) * dh);
        }
        mul_mat(w[L_OW], h, att, h, cur, h, h, n, h, 1);
        add_bias(cur, w[L_OB], n, h);
        for (long i = 0; i < (long)n * h; i++) cur[i] += x[i];
        layer_norm(cur, x, w[L_N1W], w[L_N1B], n, h, m->eps); /* x: the FFN's input */
        mul_mat(w[L_UW], h, x, h, up, ff, ff, n, h, 1);
        add_bias(up, w[L_UB], n, ff);
        gelu(up, (long)n * ff);
        mul_mat(w[L_DW], ff, up, ff, cur, h, h, n, ff, 1);
        add_bias(cur, w[L_DB], n, h);
        for (long i = 0; i < (long)n * h; i++) cur[i] += x[i];
        layer_norm(cur, x, w[L_N2W], w[L_N2B], n, h, m->eps);
    }
    free(q); free(k); free(v); free(att); free(cur); free(up); free(qh); free(kh); free(vt); free(kq); free(kqv);
    return 0;
}

/* build_pooling on one sequence's hidden states: out gets hidden floats (mean, cls, last) or n_cls_out (rank). */
ENC int mlxcel_bert_pool(const mlxcel_bert *m, const float *hidden, int n, int kind, float *out) {
    const int h = m->hidden;
    if (kind == POOL_MEAN) { /* mul_mat(cont(transpose(inp)), inp_mean): rows of n, against 1/n each */
        float *t = malloc(sizeof(float) * (size_t)n * h), *mean = malloc(sizeof(float) * (size_t)n);
        if (!t || !mean) { free(t); free(mean); return -2; }
        for (int r = 0; r < n; r++)
            for (int i = 0; i < h; i++) t[(long)i * n + r] = hidden[(long)r * h + i];
        const float div = 1.0f / (float)n;
        for (int r = 0; r < n; r++) mean[r] = div;
        mul_mat(t, n, mean, n, out, h, h, 1, n, 1);
        free(t);
        free(mean);
        return 0;
    }
    if (kind == POOL_CLS || kind == POOL_RANK) memcpy(out, hidden, sizeof(float) * h);
    else if (kind == POOL_LAST) memcpy(out, hidden + (long)(n - 1) * h, sizeof(float) * h);
    else return -1;
    if (kind != POOL_RANK) return 0;
    float *y = malloc(sizeof(float) * (size_t)h);
    if (!y) return -2;
    if (m->cls_w) {
        mul_mat(m->cls_w, h, out, h, y, h, h, 1, h, 1);
        add_bias(y, m->cls_b, 1, h);
        for (int i = 0; i < h; i++) out[i] = tanhf(y[i]);
    }
    if (m->out_w) {
        mul_mat(m->out_w, h, out, h, y, m->n_cls_out, m->n_cls_out, 1, h, 1);
        add_bias(y, m->out_b, 1, m->n_cls_out);
        memcpy(out, y, sizeof(float) * m->n_cls_out);
    }
    free(y);
    return 0;
}
