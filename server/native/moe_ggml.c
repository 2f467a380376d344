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

/* a row's router probabilities p (softmaxed in place) into its chosen experts and their weights */
static void route(const struct step_layer *w, float *p, int *chosen, float *weights) {
    const int NE = w->n_expert, K = w->n_used;
    ggml_soft_max_row(p, NE, 1.0f);
    top_k(p, NE, K, chosen);
    double total = 0.0; /* ggml_sum_rows (ggml_vec_sum_f32: in double), clamped, then each divided by it */
    for (int j = 0; j < K; j++) total += (double)(weights[j] = p[chosen[j]]);
    const float norm = fmaxf((float)total, 6.103515625e-5f);
    for (int j = 0; j < K && w->norm_topk; j++) weights[j] = weights[j] / norm;
}

/* x[r] += the sum over a row's experts, in their order, of each one's output scaled by its weight */
static void add_experts(const float *outs, const float *weights, int K, int E, float *x) {
    for (int i = 0; i < E; i++) {
        float sum = 0.0f;
        for (int j = 0; j < K; j++) { /* experts * weights, then moe_out = e0 + e1 + ... in order */
            const float v = outs[(size_t)j * E + i] * weights[j];
            sum = j ? sum + v : v;
        }
        x[i] = sum + x[i]; /* ggml_add(moe_out, ffn_inp) */
    }
}

/* y = x W for the rows of x and an expert kept as blocks: the virtual twin `stride` bytes on per expert */
static int expert_product(const float *base, long stride, int e, int rows, int n, int k, const float *x, float *y) {
    const float *key = (const float *)((const char *)base + (size_t)e * (size_t)stride);
    cblas_sgemm(ROW_MAJOR, NO_TRANS, NO_TRANS, rows, n, k, 1.0f, x, k, key, n, 0.0f, y, n);
    return 0;
}

/* The experts kept as a GGUF's blocks: the rows routed first, then each expert's rows through one product of each
 * projection (cblas_sgemm over the expert's virtual twin: int8_dot.c's few-row kernels or panels, which give a row
 * the same outputs whatever else the product holds), as b10621's mul_mat_id gathers an expert's rows; then each
 * row's outputs scaled and added in its experts' order. */
static int moe_blocks(const struct step_model *m, const struct step_layer *w, int rows, const float *h, float *x,
                      int ubatch) {
    const int E = m->hidden, NE = w->n_expert, K = w->n_used, F = w->moe_ff;
    const size_t slots = (size_t)rows * K;
    float *logits = malloc(sizeof(float) * ((size_t)rows * NE + slots + slots * E + (size_t)rows * (3 * (size_t)F + 2 * E)));
    int *chosen = malloc(sizeof(int) * (slots + rows));
    if (!logits || !chosen) { free(logits); free(chosen); return -1; }
    float *weights = logits + (size_t)rows * NE, *outs = weights + slots, *xin = outs + slots * E;
    float *g = xin + (size_t)rows * E, *u = g + (size_t)rows * F, *act = u + (size_t)rows * F, *y = act + (size_t)rows * F;
    int *members = chosen + slots;
    int status = mlxcel_ggml_gemm(rows, NE, E, h, E, w->router, E, logits, NE, 0, ubatch);
    for (int r = 0; r < rows && status == 0; r++)
        route(w, logits + (size_t)r * NE, chosen + (size_t)r * K, weights + (size_t)r * K);
    for (int e = 0; e < NE && status == 0; e++) {
        int n = 0; /* the slots (row, j) that chose e: a row chooses an expert once */
        for (size_t s = 0; s < slots; s++)
            if (chosen[s] == e) members[n] = (int)s, memcpy(xin + (size_t)n * E, h + (s / K) * E, sizeof(float) * E), n++;
        if (!n) continue;
        status |= expert_product(w->exp_gate, w->exp_stride[0], e, n, F, E, xin, g);
        status |= expert_product(w->exp_up, w->exp_stride[1], e, n, F, E, xin, u);
        mlxcel_swiglu(g, u, n, F, F, act);
        status |= expert_product(w->exp_down, w->exp_stride[2], e, n, E, F, act, y);
        for (int i = 0; i < n; i++) memcpy(outs + (size_t)members[i] * E, y + (size_t)i * E, sizeof(float) * E);
    }
    for (int r = 0; r < rows && status == 0; r++)
        add_experts(outs + (size_t)r * K * E, weights + (size_t)r * K, K, E, x + (size_t)r * E);
    free(logits);
    free(chosen);
    return status ? -1 : 0;
}

HIDDEN int mlxcel_moe_rows(const struct step_model *m, const struct step_layer *w, int rows, const float *h,
                           float *x, int ubatch) {
    if (w->exp_stride[0]) return moe_blocks(m, w, rows, h, x, ubatch);
    const int E = m->hidden, NE = w->n_expert, K = w->n_used, F = w->moe_ff;
    float *logits = malloc(sizeof(float) * ((size_t)rows * NE + 3 * (size_t)F + (size_t)K * E));
    int *chosen = malloc(sizeof(int) * (size_t)(K > 0 ? K : 1));
    float *weights = malloc(sizeof(float) * (size_t)(K > 0 ? K : 1));
    if (!logits || !chosen || !weights) { free(logits); free(chosen); free(weights); return -1; }
    float *gu = logits + (size_t)rows * NE, *act = gu + 2 * (size_t)F, *outs = act + F;
    int status = mlxcel_ggml_gemm(rows, NE, E, h, E, w->router, E, logits, NE, 0, ubatch);
    for (int r = 0; r < rows && status == 0; r++) {
        const float *hr = h + (size_t)r * E;
        route(w, logits + (size_t)r * NE, chosen, weights);
        for (int j = 0; j < K && status == 0; j++) {
            const size_t e = (size_t)chosen[j];
            float *out = outs + (size_t)j * E;
            status |= mlxcel_ggml_gemm(1, F, E, hr, E, w->exp_up + e * F * E, E, gu + F, F, 0, 1);
            status |= mlxcel_ggml_gemm(1, F, E, hr, E, w->exp_gate + e * F * E, E, gu, F, 0, 1);
            mlxcel_swiglu(gu, gu + F, 1, F, F, act);
            status |= mlxcel_ggml_gemm(1, E, F, act, F, w->exp_down + e * E * F, F, out, E, 0, 1);
        }
        if (status == 0) add_experts(outs, weights, K, E, x + (size_t)r * E);
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
