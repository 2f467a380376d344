/* A mixture-of-experts feed-forward (Qwen3-MoE's) as b10621's build_moe_ffn computes it on the CPU, for the native
 * steps (decode_step.c, prefill_step.c) of a float32 model summed in ggml-cpu's order.
 *
 * The router is a plain product (tinyBLAS's order in a ubatch of two rows or more, vec_dot's for one); its
 * softmax is ggml's soft_max (ggml_v_expf in 8 lanes, each 8 summed in float then added in double, the
 * probabilities scaled by the float of 1 / sum); the experts are ggml_argsort's top k, highest first; their
 * weights the chosen probabilities over their sum (summed in double, clamped at float16's smallest normal);
 * each expert's gate, up and down products are mul_mat_id's, one vec_dot an output whatever the ubatch; the
 * SwiGLU is the dense path's; each expert's output is scaled by its weight, and the outputs are added in the
 * experts' order, then to the residual. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "step_model.h"

#if defined(__x86_64__)
#include "ggml_simd.h"

/* the k largest of n, highest first (ggml_argsort descending, then its first k) */
static void top_k(const float *p, int n, int k, int *out) {
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int i = 0; i < n; i++) {
            int taken = 0;
            for (int t = 0; t < j; t++) taken |= out[t] == i;
            if (!taken && (best < 0 || p[i] > p[best])) best = i;
        }
        out[j] = best;
    }
}

HIDDEN int mlxcel_moe_rows(const struct step_model *m, const struct step_layer *w, int rows, const float *h,
                           float *x, int ubatch) {
    const int E = m->hidden, NE = w->n_expert, K = w->n_used, F = w->moe_ff;
    float *logits = malloc(sizeof(float) * ((size_t)rows * NE + 3 * (size_t)F + 2 * (size_t)E));
    int *chosen = malloc(sizeof(int) * (size_t)(K > 0 ? K : 1));
    float *weights = malloc(sizeof(float) * (size_t)(K > 0 ? K : 1));
    if (!logits || !chosen || !weights) { free(logits); free(chosen); free(weights); return -1; }
    float *gu = logits + (size_t)rows * NE, *act = gu + 2 * (size_t)F, *out = act + F, *sum = out + E;
    int status = mlxcel_ggml_gemm(rows, NE, E, h, E, w->router, E, logits, NE, 0, ubatch);
    for (int r = 0; r < rows && status == 0; r++) {
        float *p = logits + (size_t)r * NE;
        const float *hr = h + (size_t)r * E;
        ggml_soft_max_row(p, NE, 1.0f);
        top_k(p, NE, K, chosen);
        double total = 0.0; /* ggml_sum_rows (ggml_vec_sum_f32: in double), clamped, then each divided by it */
        for (int j = 0; j < K; j++) total += (double)(weights[j] = p[chosen[j]]);
        const float norm = fmaxf((float)total, 6.103515625e-5f);
        for (int j = 0; j < K && w->norm_topk; j++) weights[j] = weights[j] / norm;
        for (int j = 0; j < K && status == 0; j++) {
            const size_t e = (size_t)chosen[j];
            status |= mlxcel_ggml_gemm(1, F, E, hr, E, w->exp_up + e * F * E, E, gu + F, F, 0, 1);
            status |= mlxcel_ggml_gemm(1, F, E, hr, E, w->exp_gate + e * F * E, E, gu, F, 0, 1);
            mlxcel_swiglu(gu, gu + F, 1, F, F, act);
            status |= mlxcel_ggml_gemm(1, E, F, act, F, w->exp_down + e * E * F, F, out, E, 0, 1);
            for (int i = 0; i < E; i++) { /* experts * weights, then moe_out = e0 + e1 + ... in order */
                const float v = out[i] * weights[j];
                sum[i] = j ? sum[i] + v : v;
            }
        }
        float *xr = x + (size_t)r * E;
        for (int i = 0; i < E; i++) xr[i] = sum[i] + xr[i]; /* ggml_add(moe_out, ffn_inp) */
    }
    free(logits);
    free(chosen);
    free(weights);
    return status ? -1 : 0;
}
#else
HIDDEN int mlxcel_moe_rows(const struct step_model *m, const struct step_layer *w, int rows, const float *h,
                           float *x, int ubatch) {
    (void)m, (void)w, (void)rows, (void)h, (void)x, (void)ubatch;
    return -1;
}
#endif
