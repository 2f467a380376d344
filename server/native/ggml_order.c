/* Products summed in ggml-cpu's order (b10621's llamafile tinyBLAS, the AVX2 build the oracle runs), so that a
 * float32 model's activations are bitwise the reference's (server/models/decode_step.py, "ggml order").
 *
 * tinyBLAS (ggml/src/ggml-cpu/llamafile/sgemm.cpp, tinyBLAS<8, __m256, ...>) computes each output as one dot
 * product of a weight row and an activation row: 8 lanes, lane l summing the products of positions l, l + 8,
 * ... in order with fused multiply-adds from zero, then hsum(__m256): the upper half added to the lower, then
 * lanes (0 + 2) and (1 + 3), then those two. It takes a product when K is a multiple of 8 and the weight's
 * rows a multiple of 4, and only for a ubatch of two rows or more ("only enable sgemm for prompt
 * processing"). A one-row product (a decode step, the rows left after the last layer's get_rows) takes
 * ggml_vec_dot_f32 instead: four accumulators of 8 lanes over 32 elements a step, then x0 + x2, x1 + x3, their
 * sum, its halves added and two horizontal adds. Which thread computes an output, or which tile, does not
 * change its sum. The weights here are N x K (a row per output, as ggml stores them). */
#include <stddef.h>
#include <string.h>

#include "cpu_kernels.h"

#if defined(__x86_64__)
#include "ggml_simd.h" /* ggml_hsum8 (tinyBLAS), ggml_dot_vec (ggml_vec_dot_f32) */
#define ORDER_AVX2 GGML_SIMD_AVX2

struct gemm_args {
    int M, N, K, accumulate, vec_dot;
    const float *x, *wt;
    long ldx, ldw, ldy;
    float *y;
};

enum { OUTPUTS_PER_TASK = 64 };

/* one output of one row in tinyBLAS's order */
ORDER_AVX2 static void tinyblas_one(const struct gemm_args *a, int r, int j) {
    const float *x = a->x + (size_t)r * a->ldx, *w = a->wt + (size_t)j * a->ldw;
    __m256 c = _mm256_setzero_ps();
    for (int k = 0; k < a->K; k += 8) c = _mm256_fmadd_ps(_mm256_loadu_ps(w + k), _mm256_loadu_ps(x + k), c);
    const float sum = ggml_hsum8(c);
    float *y = a->y + (size_t)r * a->ldy;
    y[j] = a->accumulate ? y[j] + sum : sum;
}

ORDER_AVX2 static void gemm_task(void *ctx, int task) {
    const struct gemm_args *a = ctx;
    const int j0 = task * OUTPUTS_PER_TASK, j1 = j0 + OUTPUTS_PER_TASK < a->N ? j0 + OUTPUTS_PER_TASK : a->N, K = a->K;
    if (a->vec_dot) { /* a verify pass's rows, each sum still vec_dot's alone (ggml_dot_steps_tile): tiles of
                       * three weight rows x four activation rows, over blocks of activation rows that stay in L1
                       * while the task's weight rows (in L2 after the first block) pass */
        /* (under twelve rows the weights' one pass from memory bounds the product: two rows at a time read them
         * in order, where the tiles' chains would stride) */
        const int np = K & ~31, M4 = a->M >= 12 ? a->M & ~3 : 0;
        int block = (6144 / K) & ~3;
        block = block < 4 ? 4 : block > 16 ? 16 : block;
        for (int r0 = 0; r0 < M4; r0 += block)
            for (int j = j0; j < j1;) {
                const int nw = j + 3 <= j1 ? 3 : 1;
                const float *const w[3] = {a->wt + (size_t)j * a->ldw, a->wt + (size_t)(j + nw / 3) * a->ldw,
                                           a->wt + (size_t)(j + 2 * (nw / 3)) * a->ldw};
                if (r0 == 0) /* the next rows' first touch (from memory): fetched ahead, in order, where the tile's
                              * chains would read every other line, strided */
                    for (int n = j + nw; n < j + nw + 3 && n < j1; n++)
                        for (int k = 0; k < K; k += 16)
                            _mm_prefetch((const char *)(a->wt + (size_t)n * a->ldw + k), _MM_HINT_T0);
                for (int r = r0; r < r0 + block && r < M4; r += 4) {
                    const float *const x[4] = {a->x + (size_t)r * a->ldx, a->x + (size_t)(r + 1) * a->ldx,
                                               a->x + (size_t)(r + 2) * a->ldx, a->x + (size_t)(r + 3) * a->ldx};
                    float s[3][4];
                    if (nw == 3)
                        ggml_dot_steps_tile(3, w, x, np, s);
                    else
                        ggml_dot_steps_tile(1, w, x, np, s);
                    for (int i = 0; i < nw; i++)
                        for (int b = 0; b < 4; b++) {
                            float *y = a->y + (size_t)(r + b) * a->ldy;
                            const float v = ggml_dot_tail(w[i], x[b], np, K, s[i][b]);
                            y[j + i] = a->accumulate ? y[j + i] + v : v;
                        }
                }
                j += nw;
            }
        for (int j = j0; j < j1; j++) { /* the rows no tile took (every row under twelve: a decode step's one) */
            const float *w = a->wt + (size_t)j * a->ldw;
            int r = M4;
            for (; r + 2 <= a->M; r += 2) {
                const float *x0 = a->x + (size_t)r * a->ldx, *x1 = x0 + a->ldx;
                float s[2];
                ggml_dot_steps2(w, x0, x1, np, s);
                for (int b = 0; b < 2; b++) {
                    float *y = a->y + (size_t)(r + b) * a->ldy;
                    const float v = ggml_dot_tail(w, b ? x1 : x0, np, K, s[b]);
                    y[j] = a->accumulate ? y[j] + v : v;
                }
            }
            for (; r < a->M; r++) {
                float *y = a->y + (size_t)r * a->ldy;
                const float v = ggml_dot_vec(w, a->x + (size_t)r * a->ldx, K);
                y[j] = a->accumulate ? y[j] + v : v;
            }
        }
        return;
    }
    int r = 0;
    for (; r + 3 <= a->M; r += 3) { /* tiles of 3 rows x 4 outputs, as tinyBLAS's (each output's sum unchanged) */
        const float *x0 = a->x + (size_t)r * a->ldx, *x1 = x0 + a->ldx, *x2 = x1 + a->ldx;
        int j = j0;
        for (; j + 4 <= j1; j += 4) {
            const float *w0 = a->wt + (size_t)j * a->ldw, *w1 = w0 + a->ldw, *w2 = w1 + a->ldw, *w3 = w2 + a->ldw;
            __m256 c[3][4];
            for (int b = 0; b < 3; b++)
                for (int i = 0; i < 4; i++) c[b][i] = _mm256_setzero_ps();
            const float *const w[4] = {w0, w1, w2, w3};
            for (int k = 0; k < K; k += 8) { /* the three activations held, each weight loaded for its three FMAs
                                              * (twelve sums and four vectors: AVX2's sixteen registers) */
                const __m256 xv[3] = {_mm256_loadu_ps(x0 + k), _mm256_loadu_ps(x1 + k), _mm256_loadu_ps(x2 + k)};
                for (int i = 0; i < 4; i++) {
                    const __m256 wv = _mm256_loadu_ps(w[i] + k);
                    for (int b = 0; b < 3; b++) c[b][i] = _mm256_fmadd_ps(wv, xv[b], c[b][i]);
                }
            }
            for (int b = 0; b < 3; b++) {
                float *y = a->y + (size_t)(r + b) * a->ldy;
                for (int i = 0; i < 4; i++) {
                    const float sum = ggml_hsum8(c[b][i]);
                    y[j + i] = a->accumulate ? y[j + i] + sum : sum;
                }
            }
        }
        for (; j < j1; j++)
            for (int b = 0; b < 3; b++) tinyblas_one(a, r + b, j);
    }
    for (; r < a->M; r++)
        for (int j = j0; j < j1; j++) tinyblas_one(a, r, j);
}

/* y[r][j] (+)= x[r] . wt[j] for r < M, j < N, each summed as ggml sums it in a ubatch of `ubatch` rows
 * (tinyBLAS's order from 2 rows, vec_dot's for 1); accumulate: added to y after the sum (ggml_add's one
 * rounding). Returns 0, or -1 when the order does not apply (K not a multiple of 8, no AVX2). */
HIDDEN int mlxcel_ggml_gemm(int M, int N, int K, const float *x, long ldx, const float *wt, long ldw, float *y,
                            long ldy, int accumulate, int ubatch) {
    if (K % 8 || !__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) return -1;
    struct gemm_args a = {M, N, K, accumulate, ubatch < 2, x, wt, ldx, ldw, ldy, y};
    const int tasks = (N + OUTPUTS_PER_TASK - 1) / OUTPUTS_PER_TASK;
    mlxcel_pool_run(gemm_task, &a, tasks, (long)M * N * K >= (1 << 15));
    return 0;
}
#else
HIDDEN int mlxcel_ggml_gemm(int M, int N, int K, const float *x, long ldx, const float *wt, long ldw, float *y,
                            long ldy, int accumulate, int ubatch) {
    (void)M, (void)N, (void)K, (void)x, (void)ldx, (void)wt, (void)ldw, (void)y, (void)ldy, (void)accumulate;
    (void)ubatch;
    return -1;
}
#endif
