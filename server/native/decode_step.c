/* A llama-family decode step in one call (server/models/decode_step.py).
 *
 * A decode step of SmolLM2-135M is ~400 small operations. Run one by one through MLX on its CPU stream, each
 * costs a dispatch and the kernels' calls an evaluation: ~13 ms a step beside ~20 ms of products. Here the
 * whole step runs in C over the model's own weights and the sequences' own KV caches (written in place at the
 * next position), on the same kernels MLX's path calls: the products through the interposed cblas_sgemm
 * (quantized twins included), attention, SwiGLU and rope as in cpu_kernels.c. RMS norm is ggml's (the
 * squares summed in double). Every row is computed alone, in the same order whatever B: a sequence's logits
 * are bitwise the same alone or beside others. In ggml's order (a float32 model) each row sums as b10621's
 * one-row decode step does (vec_dot); b10621 sums a step of several sequences in tinyBLAS's order. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "step_model.h"

/* dims: layers, hidden, heads, kv_heads, head_dim, intermediate, vocab, rope dims, tied, max rows, then the
 * cache's key and value types (KV_F32, KV_F16, KV_BF16) and flash attention (1 on, 0 off);
 * params: rms eps, rope base, rope scale, attention scale, then YaRN's ext_factor, attn_factor and corr_dims
 * (0, 1: the plain angles); weights: embed, final norm, head (ignored when
 * tied), then per layer attn norm, qkv (hidden x (heads + 2 kv_heads) head_dim), o, mlp norm, gate|up
 * (hidden x 2 intermediate), down; with dims[13] set (ggml's order), then per layer qkv, o, gate|up and down
 * transposed (out x in) and the head vocab x hidden. The weights stay the caller's. NULL when out of memory. */
void *mlxcel_step_model(const int *dims, const float *params, const float *const *weights) {
    if (dims[7] / 2 > ROPE_MAX_HALF || dims[7] > dims[4]) return NULL;
    struct step_model *m = malloc(sizeof *m + sizeof(struct step_layer) * (size_t)dims[0]);
    if (!m) return NULL;
    *m = (struct step_model){dims[0], dims[1], dims[2], dims[3], dims[4], dims[5], dims[6], dims[7], dims[8],
                             dims[9], dims[10], dims[11], dims[12], params[0], params[1], params[2], params[3],
                             {params[4], params[5], params[6], params[7]}, params[4] != 0.0f || params[5] != 1.0f,
                             weights[0], weights[1], dims[8] ? weights[0] : weights[2], NULL, dims[13], NULL, 0, 1, 0};
    const float *const *t = weights + 3 + LAYER_WEIGHTS * m->layers; /* the transposed ones, if kept */
    for (int l = 0; l < m->layers; l++) {
        const float *const *w = weights + 3 + LAYER_WEIGHTS * l;
        m->layer[l] = (struct step_layer){w[0], w[1], w[2], w[3], w[4], w[5], NULL, NULL, NULL, NULL,
                                          NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0};
        if (m->ggml_order)
            m->layer[l].wqkv_t = t[4 * l], m->layer[l].wo_t = t[4 * l + 1], m->layer[l].wgu_t = t[4 * l + 2],
            m->layer[l].wdown_t = t[4 * l + 3];
    }
    if (m->ggml_order) m->head_t = dims[8] ? weights[0] : t[4 * m->layers];
    return m;
}

void mlxcel_step_model_free(void *model) { free(model); }

/* The passes to come copy each row's residual stream as it enters layers[0..n-1] (each under the model's layer
 * count) into buf, row r's k-th at buf + (r n + k) hidden; n 0 or buf NULL: no copies. The buffer is the caller's,
 * large enough for a pass's rows. Returns 0, or -1 for n or a layer out of range. */
int mlxcel_step_capture(void *model, int n, const int *layers, float *buf) {
    struct step_model *m = model;
    if (n < 0 || n > MAX_CAPTURE) return -1;
    for (int k = 0; k < n; k++)
        if (layers[k] < 0 || layers[k] >= m->layers) return -1;
    for (int k = 0; k < n; k++) m->capture_layer[k] = layers[k];
    m->n_capture = buf ? n : 0;
    m->capture = n ? buf : NULL;
    return 0;
}

/* What a llama-shaped family adds to a layer (NULL: none): q|k|v biases ((heads + 2 kv_heads) head_dim floats),
 * per-head q and k norm weights (head_dim each), and whether the layer turns no rope. The weights stay the
 * caller's. Returns 0, or -1 for a layer out of range. */
int mlxcel_step_layer_extras(void *model, int layer, const float *bqkv, const float *q_norm, const float *k_norm,
                             int no_rope) {
    struct step_model *m = model;
    if (layer < 0 || layer >= m->layers) return -1;
    struct step_layer *w = &m->layer[layer];
    w->bqkv = bqkv, w->q_norm = q_norm, w->k_norm = k_norm, w->no_rope = no_rope;
    return 0;
}

/* A layer whose q, k and v (wq not NULL) or gate and up (wg not NULL) are separate weights, each in x out (its
 * own width apart): a quantized model's, whose weights are twins' keys (cpu_kernels.c virtual twins). Returns 0,
 * or -1 for a layer out of range. */
int mlxcel_step_layer_split(void *model, int layer, const float *wq, const float *wk, const float *wv,
                            const float *wg, const float *wu) {
    struct step_model *m = model;
    if (layer < 0 || layer >= m->layers) return -1;
    struct step_layer *w = &m->layer[layer];
    if (wq) w->wq = wq, w->wk = wk, w->wv = wv;
    if (wg) w->wg = wg, w->wu = wu;
    return 0;
}

/* A layer whose feed-forward is a mixture of experts (moe_ggml.c; weights out x in, the caller's): n_expert
 * experts of moe_ff, n_used chosen a token, their weights normalized (norm_topk) or not. 0, or -1. */
int mlxcel_step_layer_moe(void *model, int layer, const float *router, const float *gate, const float *up,
                          const float *down, int n_expert, int n_used, int moe_ff, int norm_topk) {
    struct step_model *m = model;
    if (layer < 0 || layer >= m->layers || n_used < 1 || n_used > n_expert) return -1;
    struct step_layer *w = &m->layer[layer];
    w->router = router, w->exp_gate = gate, w->exp_up = up, w->exp_down = down;
    w->n_expert = n_expert, w->n_used = n_used, w->moe_ff = moe_ff, w->norm_topk = norm_topk;
    return 0;
}

/* The layer's experts (mlxcel_step_layer_moe, after it) kept as a GGUF's blocks: gate, up and down the keys of
 * their first experts' virtual twins, each next expert's `stride` bytes on (cpu_kernels.c mlxcel_ggml_register).
 * 0, or -1 for a layer without experts. */
int mlxcel_step_layer_moe_blocks(void *model, int layer, long gate_stride, long up_stride, long down_stride) {
    struct step_model *m = model;
    if (layer < 0 || layer >= m->layers || !m->layer[layer].router || gate_stride <= 0 || up_stride <= 0 ||
        down_stride <= 0)
        return -1;
    struct step_layer *w = &m->layer[layer];
    w->exp_stride[0] = gate_stride, w->exp_stride[1] = up_stride, w->exp_stride[2] = down_stride;
    return 0;
}

/* Separate q, k, v (and gate, up) weights' out x in copies, for products in ggml's order (NULL: none kept).
 * The weights stay the caller's. Returns 0, or -1 for a layer out of range. */
int mlxcel_step_layer_split_t(void *model, int layer, const float *wq_t, const float *wk_t, const float *wv_t,
                              const float *wg_t, const float *wu_t) {
    struct step_model *m = model;
    if (layer < 0 || layer >= m->layers) return -1;
    struct step_layer *w = &m->layer[layer];
    w->wq_t = wq_t, w->wk_t = wk_t, w->wv_t = wv_t, w->wg_t = wg_t, w->wu_t = wu_t;
    return 0;
}

/* Gemma 2 and 3's graph (models/gemma2.cpp, gemma3.cpp): the embedding scaled by embed_scale, GeGLU, the
 * attention's scores and the logits capped (0: not), the sliding layers' window and rope base and scale (base 0:
 * the model's). */
void mlxcel_step_gemma(void *model, float embed_scale, float attn_softcap, float final_softcap, int window,
                       float swa_base, float swa_scale) {
    struct step_model *m = model;
    m->embed_scale = embed_scale, m->attn_softcap = attn_softcap, m->final_softcap = final_softcap;
    m->window = window, m->swa_base = swa_base, m->swa_scale = swa_scale, m->geglu = 1;
}

/* A Gemma layer: the norms of its attention's and feed-forward's outputs (weights as b10621 holds them: 1 + w;
 * the caller's) and whether it is a sliding one. Returns 0, or -1 for a layer out of range. */
int mlxcel_step_layer_gemma(void *model, int layer, const float *post_attn_norm, const float *post_ffn_norm,
                            int sliding) {
    struct step_model *m = model;
    if (layer < 0 || layer >= m->layers) return -1;
    struct step_layer *w = &m->layer[layer];
    w->post_attn_norm = post_attn_norm, w->post_ffn_norm = post_ffn_norm, w->sliding = sliding;
    return 0;
}

/* The embedding is a quantized one's key (its rows dequantized as the step reads them). */
void mlxcel_step_embed_quant(void *model, int on) { ((struct step_model *)model)->embed_quant = on; }

/* What a family's graph does otherwise: the rope's per-pair frequency divisors (rope dims / 2 floats, kept the
 * caller's; NULL: none), whether q is scaled before attention (b10621's Phi-3: ggml_scale of q, then attention
 * at scale 1) and whether b10621 holds the heads in a llama GGUF's interleaved order (1 as built; 0 for the
 * families whose converter keeps HF's order). */
void mlxcel_step_family(void *model, const float *freq_factors, int q_prescale, int interleaved) {
    struct step_model *m = model;
    m->freq_factors = freq_factors, m->q_prescale = q_prescale, m->interleaved = interleaved;
}

/* Rows through every layer, each computed alone and in the same order whatever the rows beside it. With
 * one_seq 0, row b is sequence b's next token (mlxcel_step); with one_seq 1, the rows are consecutive positions
 * of one sequence (mlxcel_verify): row b's keys and values go to its cache at pos[b] and it attends to
 * positions up to pos[b], by the very call a decode step at that position makes. */
static int run_rows(const struct step_model *m, int B, const int *tokens, const int *pos, const int *first, int T,
                    int one_seq, void *const *keys, void *const *values, const long *strides, float *logits) {
    const int E = m->hidden, H = m->heads, Hkv = m->kv_heads, D = m->head_dim, I = m->inter;
    const int nqkv = (H + 2 * Hkv) * D, half = m->rope_dims / 2;
    size_t floats = (size_t)B * (3 * E + nqkv + 2 * H * D + 3 * I);
    float *x = malloc(sizeof(float) * floats);
    const int ropes = two_ropes(m) ? 2 : 1; /* (Gemma 3's sliding layers turn their own angles: the second set) */
    float *angles = malloc(sizeof(float) * 2 * ROPE_MAX_HALF * (size_t)B * ropes);
    if (!x || !angles) { free(x); free(angles); return -1; }
    float *h = x + (size_t)B * E, *t = h + (size_t)B * E, *qkv = t + (size_t)B * E, *q = qkv + (size_t)B * nqkv;
    float *att = q + (size_t)B * H * D, *gu = att + (size_t)B * H * D, *act = gu + (size_t)B * 2 * I;
    for (int b = 0; b < B; b++) {
        embed_scaled(m, tokens[b], x + (size_t)b * E);
        for (int r = 0; r < ropes; r++) {
            float *c = angles + 2 * ROPE_MAX_HALF * ((size_t)r * B + b);
            layer_angles(m, r, pos[b], c, c + ROPE_MAX_HALF);
        }
    }
    int status = 0;
    for (int l = 0; l < m->layers && status == 0; l++) {
        const struct step_layer *w = &m->layer[l];
        const long *st = strides + 6 * l;
        capture_rows(m, l, x, B);
        for (int b = 0; b < B; b++) rms_norm(x + (size_t)b * E, w->attn_norm, h + (size_t)b * E, E, m->eps);
        qkv_columns(m, w, B, 0, nqkv, h, E, qkv, 1);
        for (int b = 0; b < B; b++) { /* q turned; k turned and v copied into the caches at the row's place */
            const float *row = qkv + (size_t)b * nqkv, *s;
            const float *c = angles + 2 * ROPE_MAX_HALF * ((size_t)(ropes == 2 && w->sliding) * B + b);
            s = c + ROPE_MAX_HALF;
            float prepared[qkv_prepared(w) ? nqkv : 1];
            if (qkv_prepared(w)) {
                qkv_prepare(m, w, row, prepared, 1);
                row = prepared;
            }
            for (int i = 0; i < H; i++) query_head(m, w, row + i * D, q + ((size_t)b * H + i) * D, half, c, s);
            const long at = one_seq ? pos[b] : T - 1, kb = one_seq ? 0 : b * st[0], vb = one_seq ? 0 : b * st[3];
            for (int i = 0; i < Hkv; i++) { /* stored as the cache's type stores it */
                float turned[D];
                key_head(m, w, row + (H + i) * D, turned, half, c, s);
                store_key(m, keys[l], kb + i * st[1] + at * st[2], turned);
                store_value(m, values[l], vb + i * st[4] + at * st[5], row + (H + Hkv + i) * D);
            }
        }
        struct attention_mask mask = layer_mask(m, w);
        mask.split = B == 1; /* a ubatch of one row: b10621 may split its keys */
        if (one_seq) /* the rows as one query block of L = B causal rows (row b sees positions up to pos[b]):
                      * each row summed as its lone decode step sums it (its keys' padding adds exact zeros), the
                      * head's values transposed once for all of them */
            status = mlxcel_attention_masked(q, (long)B * H * D, D, (long)H * D, keys[l], st[0], st[1], st[2],
                                             values[l], st[3], st[4], st[5], 1, H, Hkv, B, pos[B - 1] + 1, D,
                                             attention_scale(m), NULL, att, m->k_type, m->v_type, attention_flags(m),
                                             1, mask);
        else /* each row's attention summed as a lone decode step's (b10621 decodes sequences together in one
              * ubatch, over one cache whose cells interleave them: no order to match there; a row's logits are
              * then bitwise the same alone, batched or verified) */
            status = mlxcel_attention_masked(q, (long)H * D, D, D, keys[l], st[0], st[1], st[2], values[l], st[3],
                                             st[4], st[5], B, H, Hkv, 1, T, D, attention_scale(m), first, att,
                                             m->k_type, m->v_type, attention_flags(m), 1, mask);
        product(m, B, E, H * D, att, w->wo, w->wo_t, t, 1);
        residual_add(m, w->post_attn_norm, t, x, B);
        for (int b = 0; b < B; b++) rms_norm(x + (size_t)b * E, w->mlp_norm, h + (size_t)b * E, E, m->eps);
        if (w->router) {
            if (status == 0) status = mlxcel_moe_rows(m, w, B, h, x, 1);
            continue;
        }
        gate_up(m, w, B, h, E, gu, 1);
        activation(m, gu, B, act);
        product(m, B, E, I, act, w->wdown, w->wdown_t, t, 1);
        residual_add(m, w->post_ffn_norm, t, x, B);
    }
    if (status == 0) {
        for (int b = 0; b < B; b++) rms_norm(x + (size_t)b * E, m->norm, h + (size_t)b * E, E, m->eps);
        if (m->ggml_order && mlxcel_ggml_gemm(B, m->vocab, E, h, E, m->head_t, E, logits, m->vocab, 0, 1) == 0) {
        } else if (m->tied) /* logits = h embed^T */
            cblas_sgemm(ROW_MAJOR, NO_TRANS, TRANS, B, m->vocab, E, 1.0f, h, E, m->embed, E, 0.0f, logits, m->vocab);
        else
            product(m, B, m->vocab, E, h, m->head, NULL, logits, 1);
        cap_logits(m, logits, B);
    }
    free(x);
    free(angles);
    return status;
}

/* One token for each of B sequences. Row b's token sits at position pos[b] and is written to its cache at
 * index T - 1 (its keys before first[b] are left padding; first NULL: none); keys[l] and values[l] are layer
 * l's caches, B x kv_heads x capacity x head_dim with strides (in floats) per sequence, head and position
 * at strides[6 l .. 6 l + 5] (keys, then values). Writes B x vocab logits. Returns 0, or -1 when out of
 * memory or B is out of range (the caches' index T - 1 may be written then: it is past what they hold). */
int mlxcel_step(const void *model, int B, const int *tokens, const int *pos, const int *first, int T,
                void *const *keys, void *const *values, const long *strides, float *logits) {
    const struct step_model *m = model;
    if (B < 1 || B > m->max_rows || T < 1) return -1;
    return run_rows(m, B, tokens, pos, first, T, 0, keys, values, strides, logits);
}

/* L tokens of one sequence at positions index .. index + L - 1 (a speculative draft's verification): keys[l]
 * and values[l] are layer l's cache (one sequence, strides as mlxcel_step's), written at those positions.
 * Writes L x vocab logits, each row bitwise the logits a decode step at its position computes. Returns 0, or
 * -1 when out of memory or L is out of range. */
int mlxcel_verify(const void *model, int L, const int *tokens, int index, void *const *keys,
                  void *const *values, const long *strides, float *logits) {
    const struct step_model *m = model;
    if (L < 1 || L > m->max_rows || index < 0) return -1;
    int pos[L];
    for (int i = 0; i < L; i++) pos[i] = index + i;
    return run_rows(m, L, tokens, pos, NULL, index + L, 1, keys, values, strides, logits);
}
