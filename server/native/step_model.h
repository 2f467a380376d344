/* The model a native step runs (server/native/decode_step.c builds it; decode_step.c and prefill_step.c run it)
 * and the small pieces both steps compute alike. */
#ifndef MLXCEL_STEP_MODEL_H
#define MLXCEL_STEP_MODEL_H

#include <math.h>
#include <string.h>

#include "cpu_kernels.h"

enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 };
enum { LAYER_WEIGHTS = 6 };

struct step_layer {
    const float *attn_norm, *wqkv, *wo, *mlp_norm, *wgu, *wdown; /* the products' weights in x out */
    const float *wqkv_t, *wo_t, *wgu_t, *wdown_t; /* the same out x in, for ggml's order (NULL: not kept) */
    const float *wq, *wk, *wv, *wg, *wu; /* q, k, v (and gate, up) as separate weights (mlxcel_step_layer_split:
                                           a quantized model's, each its own twin), or NULL: fused in wqkv (wgu) */
    const float *bqkv;            /* q|k|v biases (Qwen2), or NULL (mlxcel_step_layer_extras) */
    const float *q_norm, *k_norm; /* per-head RMS norms of q and k before rope (Qwen3), or NULL */
    int no_rope;                  /* the layer turns no rope (SmolLM3's every fourth layer) */
    /* a mixture-of-experts feed-forward in place of gate|up and down (mlxcel_step_layer_moe; router NULL: none):
     * the router n_expert x hidden, the experts' gate and up n_expert x moe_ff x hidden, down n_expert x hidden x
     * moe_ff (out x in, as ggml holds them: moe_ggml.c) */
    const float *router, *exp_gate, *exp_up, *exp_down;
    int n_expert, n_used, moe_ff, norm_topk;
    /* experts kept as a GGUF's blocks (mlxcel_step_layer_moe_blocks): the bytes from one expert's gate, up and down
     * to the next's, each expert a virtual twin keyed at its first row (0: float32 experts, as above) */
    long exp_stride[3];
    /* Gemma (mlxcel_step_layer_gemma): the norms of the attention's and the feed-forward's outputs before each
     * residual add (NULL: none), and whether the layer attends through the sliding window with the SWA rope */
    const float *post_attn_norm, *post_ffn_norm;
    int sliding;
    /* separate q, k, v (gate, up) weights out x in, for ggml's order (NULL: not kept) */
    const float *wq_t, *wk_t, *wv_t, *wg_t, *wu_t;
};

#define MAX_CAPTURE 4

struct step_model {
    int layers, hidden, heads, kv_heads, head_dim, inter, vocab, rope_dims, tied, max_rows;
    int k_type, v_type, flash; /* the KV cache's types (KV_F32...) and flash attention (attention_ggml.c) */
    float eps, rope_base, rope_scale, attn_scale;
    float yarn[4];  /* YaRN's ext_factor, attn_factor, corr_dims (rope_angles) */
    int yarn_on;    /* 0: the plain angles */
    const float *embed, *norm, *head; /* embed: vocab x hidden; head: hidden x vocab (the embedding when tied) */
    const float *head_t; /* the head vocab x hidden, for ggml's order (the embedding when tied) */
    int ggml_order;      /* products summed in ggml-cpu's order (ggml_order.c) over the out x in weights */
    const float *freq_factors; /* rope_freqs (Llama 3.1+): per-pair divisors of the angle, or NULL */
    int q_prescale;      /* q scaled by attn_scale before attention, which then scales by 1 (b10621's Phi-3) */
    int interleaved;     /* b10621 holds the heads' elements in a llama GGUF's interleaved order (its q k sums) */
    int embed_quant;     /* embed is the key of a quantized embedding (virtual twin): rows are dequantized */
    /* Gemma 2 and 3 (mlxcel_step_gemma; 0: none): the embedding scaled, GeGLU for SwiGLU, the attention's and the
     * logits' soft caps, the sliding window of the sliding layers and their rope's base and scale */
    float embed_scale, attn_softcap, final_softcap, swa_base, swa_scale;
    int geglu, window;
    /* rows' residual streams copied out as a pass enters these layers (an EAGLE-3 head's target features:
     * mlxcel_step_capture); capture NULL: none. Row r's k-th layer at capture + (r n_capture + k) hidden. */
    float *capture;
    int n_capture, capture_layer[MAX_CAPTURE];
    struct step_layer layer[];
};

struct step_model;
/* rows of h (normed) through a layer's mixture of experts, added to the residual x (moe_ggml.c); 0, or -1 */
HIDDEN int mlxcel_moe_rows(const struct step_model *m, const struct step_layer *w, int rows, const float *h, float *x,
                           int ubatch);

/* The B rows of x (hidden wide) copied to the capture where layer l is one captured (mlxcel_step_capture) */
static inline void capture_rows(const struct step_model *m, int l, const float *x, int B) {
    for (int k = 0; m->capture && k < m->n_capture; k++)
        if (m->capture_layer[k] == l)
            for (int b = 0; b < B; b++)
                memcpy(m->capture + ((size_t)b * m->n_capture + k) * m->hidden, x + (size_t)b * m->hidden,
                       sizeof(float) * m->hidden);
}

/* out = x / rms(x) * w, as ggml's rms_norm then mul */
static inline void rms_norm(const float *x, const float *w, float *out, int n, float eps) {
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    const float mean = (float)(sum / n);
    const float scale = 1.0f / sqrtf(mean + eps);
    for (int i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
}

/* rotate-half rope of one head at the angles given, from x into out, rounded as ggml-cpu's rotate_pairs is
 * compiled (b10621's AVX2 build: x0 cos - x1 sin and x0 sin + x1 cos each one fused multiply-add over the
 * rounded second product) */
static inline void rope_head(const float *x, float *out, int half, int D, const float *c, const float *s) {
    for (int j = 0; j < half; j++) {
        float u = x[j], v = x[j + half];
        out[j] = fmaf(u, c[j], -(v * s[j]));
        out[j + half] = fmaf(u, s[j], v * c[j]);
    }
    for (int j = 2 * half; j < D; j++) out[j] = x[j];
}

/* one row's q|k|v as the layer's graph has it before rope: the biases added (ggml_add after the product),
 * then each q and k head RMS-normed (ggml's rms_norm and mul over head_dim), from row into out; with_q 0
 * leaves the queries out (rows whose queries are not used) */
static inline void qkv_prepare(const struct step_model *m, const struct step_layer *w, const float *row, float *out,
                               int with_q) {
    const int H = m->heads, Hkv = m->kv_heads, D = m->head_dim, n = (H + 2 * Hkv) * D, q0 = with_q ? 0 : H * D;
    for (int i = q0; i < n; i++) out[i] = w->bqkv ? row[i] + w->bqkv[i] : row[i];
    if (w->q_norm && with_q)
        for (int h = 0; h < H; h++) rms_norm(out + h * D, w->q_norm, out + h * D, D, m->eps);
    if (w->k_norm)
        for (int h = H; h < H + Hkv; h++) rms_norm(out + h * D, w->k_norm, out + h * D, D, m->eps);
}

/* whether qkv_prepare changes a row (else the product's row is read as it is) */
static inline int qkv_prepared(const struct step_layer *w) { return w->bqkv || w->q_norm || w->k_norm; }

/* a query head turned (or copied, on a layer without rope) into out, then scaled where b10621 scales q */
static inline void query_head(const struct step_model *m, const struct step_layer *w, const float *x, float *out,
                              int half, const float *c, const float *s) {
    const int D = m->head_dim;
    if (w->no_rope)
        memcpy(out, x, sizeof(float) * (size_t)D);
    else
        rope_head(x, out, half, D, c, s);
    if (m->q_prescale)
        for (int j = 0; j < D; j++) out[j] *= m->attn_scale;
}

/* a key head turned (or copied, on a layer without rope) into out */
static inline void key_head(const struct step_model *m, const struct step_layer *w, const float *x, float *out,
                            int half, const float *c, const float *s) {
    if (w->no_rope)
        memcpy(out, x, sizeof(float) * (size_t)m->head_dim);
    else
        rope_head(x, out, half, m->head_dim, c, s);
}

/* the scale attention applies to q k (1 where q was scaled before) */
static inline float attention_scale(const struct step_model *m) { return m->q_prescale ? 1.0f : m->attn_scale; }

/* a key or value row written to its cache at element `at` (a byte for a block type): in 16 bits for an f16
 * cache (its own type, rounded as ggml writes it), D / 32 blocks for a block type (quantized as ggml's
 * from_float), else as float32 rounded to the cache's type */
static inline void store_kv(void *cache, long at, const float *row, int D, int type) {
    if (kv_is_block(type)) {
        mlxcel_kv_quantize_row(type, row, (uint8_t *)cache + at, D);
        return;
    }
    if (type == KV_F16) {
        mlxcel_store_f16((uint16_t *)cache + at, row, D);
        return;
    }
    float *dst = (float *)cache + at;
    memcpy(dst, row, sizeof(float) * (size_t)D);
    mlxcel_round_kv(dst, D, type);
}

/* a key row written to its cache: store_kv; a block type's as b10621 writes it, in a llama GGUF's element order
 * where b10621 holds the heads' elements so, and through its Walsh-Hadamard rotation (attn_rot_k) */
static inline void store_key(const struct step_model *m, void *cache, long at, const float *row) {
    const int D = m->head_dim;
    if (kv_is_block(m->k_type) && D <= 2 * ROPE_MAX_HALF) {
        float moved[2 * ROPE_MAX_HALF];
        if (m->interleaved && D % 2 == 0)
            for (int i = 0; i < D / 2; i++) moved[2 * i] = row[i], moved[2 * i + 1] = row[i + D / 2];
        else
            memcpy(moved, row, sizeof(float) * (size_t)D);
        mlxcel_kv_rotate(moved, D, mlxcel_kv_rotation(m->k_type, D, 1));
        store_kv(cache, at, moved, D, m->k_type);
        return;
    }
    store_kv(cache, at, row, D, m->k_type);
}

/* a value row written to its cache: store_kv, a block type's through b10621's rotation (attn_rot_v) */
static inline void store_value(const struct step_model *m, void *cache, long at, const float *row) {
    const int D = m->head_dim, rot = mlxcel_kv_rotation(m->v_type, D, 0);
    if (rot && D <= 2 * ROPE_MAX_HALF) {
        float moved[2 * ROPE_MAX_HALF];
        memcpy(moved, row, sizeof(float) * (size_t)D);
        mlxcel_kv_rotate(moved, D, rot);
        store_kv(cache, at, moved, D, m->v_type);
        return;
    }
    store_kv(cache, at, row, D, m->v_type);
}

/* mlxcel_attention_kv's flags for the step's attention: flash attention, ggml's element order, f16 storage */
static inline int attention_flags(const struct step_model *m) {
    return m->flash | (m->ggml_order ? (m->interleaved ? ATTENTION_GGML_DIMS : ATTENTION_GGML_SUMS) : 0) | (m->k_type == KV_F16 ? ATTENTION_K_F16 : 0) |
           (m->v_type == KV_F16 ? ATTENTION_V_F16 : 0) |
           (kv_is_block(m->k_type) && m->interleaved && m->head_dim % 2 == 0 ? ATTENTION_K_GGML_ORDER : 0) |
           (mlxcel_kv_rotation(m->k_type, m->head_dim, 1) ? ATTENTION_K_ROT : 0) |
           (mlxcel_kv_rotation(m->v_type, m->head_dim, 0) ? ATTENTION_V_ROT : 0);
}

/* y (+)= x w for rows of x: w is k x n (ldw apart), wt the same weight n x k (k apart) or NULL. In ggml's order
 * over wt when the model keeps it, as b10621 sums a product over `ubatch` rows (it may compute more rows than
 * these); else the interposed cblas_sgemm. accumulate: y + (x w), rounded once more (ggml_add after it). */
static inline void step_gemm(const struct step_model *m, int rows, int n, int k, const float *x, int ldx,
                             const float *w, int ldw, const float *wt, float *y, int ldy, int accumulate,
                             int ubatch) {
    if (m->ggml_order && wt && mlxcel_ggml_gemm(rows, n, k, x, ldx, wt, k, y, ldy, accumulate, ubatch) == 0) return;
    cblas_sgemm(ROW_MAJOR, NO_TRANS, NO_TRANS, rows, n, k, 1.0f, x, ldx, w, ldw, accumulate ? 1.0f : 0.0f, y, ldy);
}

static inline void product(const struct step_model *m, int rows, int n, int k, const float *x, const float *w,
                           const float *wt, float *y, int ubatch) {
    step_gemm(m, rows, n, k, x, k, w, n, wt, y, n, 0, ubatch);
}

/* token's embedding row into out (hidden floats) */
static inline void embed_row(const struct step_model *m, int token, float *out) {
    if (m->embed_quant && mlxcel_quant_rows(m->embed, &token, 1, out) == 0) return;
    memcpy(out, m->embed + (size_t)token * m->hidden, sizeof(float) * (size_t)m->hidden);
}

/* the columns [c0, c0 + n) of rows' q|k|v (into qkv, nqkv wide): part of the fused product, or the separate
 * weight those columns are (q: from 0, k: from H D, v: from (H + Hkv) D) */
static inline void qkv_columns(const struct step_model *m, const struct step_layer *w, int rows, int c0, int n,
                               const float *x, int ldx, float *qkv, int ubatch) {
    const int E = m->hidden, nqkv = (m->heads + 2 * m->kv_heads) * m->head_dim;
    if (w->wq) {
        const int kv0 = m->heads * m->head_dim, v0 = kv0 + m->kv_heads * m->head_dim;
        for (int c = c0; c < c0 + n;) { /* the parts the range covers, each over its own weight */
            const float *wp = c < kv0 ? w->wq : c < v0 ? w->wk : w->wv;
            const float *wt = c < kv0 ? w->wq_t : c < v0 ? w->wk_t : w->wv_t;
            const int p0 = c < kv0 ? 0 : c < v0 ? kv0 : v0, p1 = c < kv0 ? kv0 : c < v0 ? v0 : nqkv;
            const int end = c0 + n < p1 ? c0 + n : p1;
            step_gemm(m, rows, end - c, E, x, ldx, wp + (c - p0), p1 - p0, wt ? wt + (size_t)(c - p0) * E : NULL,
                      qkv + c, nqkv, 0, ubatch);
            c = end;
        }
        return;
    }
    step_gemm(m, rows, n, E, x, ldx, w->wqkv + c0, nqkv, w->wqkv_t ? w->wqkv_t + (size_t)c0 * E : NULL, qkv + c0,
              nqkv, 0, ubatch);
}

/* whether the layer's q|k|v is one product only (a fused virtual twin's key cannot be offset to a part) */
static inline int qkv_whole(const struct step_layer *w) { return !w->wq && mlxcel_is_virtual(w->wqkv); }

/* rows' gate|up (into gu, 2 inter wide) */
static inline void gate_up(const struct step_model *m, const struct step_layer *w, int rows, const float *x, int ldx,
                           float *gu, int ubatch) {
    const int E = m->hidden, I = m->inter;
    if (w->wg) {
        step_gemm(m, rows, I, E, x, ldx, w->wg, I, w->wg_t, gu, 2 * I, 0, ubatch);
        step_gemm(m, rows, I, E, x, ldx, w->wu, I, w->wu_t, gu + I, 2 * I, 0, ubatch);
        return;
    }
    step_gemm(m, rows, 2 * I, E, x, ldx, w->wgu, 2 * I, w->wgu_t, gu, 2 * I, 0, ubatch);
}

/* rows' activation of gate|up (2 I wide) into act: SwiGLU, or ggml's GeGLU (Gemma) */
HIDDEN void mlxcel_geglu(const float *g, const float *u, long rows, long width, long ld, float *out);
static inline void activation(const struct step_model *m, const float *gu, int rows, float *act) {
    const int I = m->inter;
    if (m->geglu) mlxcel_geglu(gu, gu + I, rows, I, 2 * I, act);
    else mlxcel_swiglu(gu, gu + I, rows, I, 2 * I, act);
}

/* a layer's rope: the sliding layers' base and scale where the model has them */
static inline void layer_angles(const struct step_model *m, int sliding, int position, float *c, float *s) {
    const int half = m->rope_dims / 2, swa = sliding && m->swa_base != 0.0f;
    rope_angles(position, half, m->rope_dims, swa ? m->swa_base : m->rope_base, swa ? m->swa_scale : m->rope_scale,
                m->yarn_on ? m->yarn : NULL, m->freq_factors, c, s);
}

/* whether the sliding layers turn other angles than the others */
static inline int two_ropes(const struct step_model *m) {
    return m->swa_base != 0.0f && (m->swa_base != m->rope_base || m->swa_scale != m->rope_scale);
}

/* the layer's attention mask: the window on a sliding layer, the cap on every one */
static inline struct attention_mask layer_mask(const struct step_model *m, const struct step_layer *w) {
    return (struct attention_mask){w->sliding ? m->window : 0, m->attn_softcap};
}

/* an output of the layer (rows of t) normed where Gemma norms it, then added to the residual x */
static inline void residual_add(const struct step_model *m, const float *post_norm, float *t, float *x, int rows) {
    const int E = m->hidden;
    if (post_norm)
        for (int b = 0; b < rows; b++) rms_norm(t + (size_t)b * E, post_norm, t + (size_t)b * E, E, m->eps);
    for (size_t i = 0; i < (size_t)rows * E; i++) x[i] += t[i];
}

/* the embedding row scaled where the model scales it (ggml_scale) */
static inline void embed_scaled(const struct step_model *m, int token, float *out) {
    embed_row(m, token, out);
    if (m->embed_scale != 0.0f)
        for (int i = 0; i < m->hidden; i++) out[i] *= m->embed_scale;
}

/* logits capped where the model caps them: scale by 1 / cap, tanh, scale by cap (ggml_scale, ggml_tanh) */
static inline void cap_logits(const struct step_model *m, float *logits, int rows) {
    if (m->final_softcap == 0.0f) return;
    const float inv = 1.0f / m->final_softcap;
    for (size_t i = 0; i < (size_t)rows * m->vocab; i++) logits[i] = tanhf(logits[i] * inv) * m->final_softcap;
}

#endif
