/* A llama-family prompt chunk in one call (server/models/prefill_step.py).
 *
 * Through MLX a chunk's layer is ~20 operations on MLX's stream thread, between which mlxcel's kernels (rope,
 * attention, SwiGLU) run on the caller's thread: every hand-over waits, every kernel's result is copied back
 * into MLX, and the norms and residual adds run on one core. Here the chunk runs in C over the model's weights
 * (decode_step.c's model) and the sequence's KV cache, written in place at the chunk's positions: the products
 * through the interposed cblas_sgemm (the BLAS, for a prompt's rows), each residual added by its product
 * (beta 1: no pass over the output to zero it first), the norms (ggml's, as the decode step's), rope and the
 * SwiGLU spread over the pool, attention as mlxcel_attention computes it. The last layer computes only what is
 * used: its keys and values for every row, and the rest for the last row alone, when logits are wanted.
 * A row's numbers depend on the chunk's other rows only as far as the BLAS's do, as through MLX. */
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "step_model.h"

enum { ROWS_PER_TASK = 8 };

/* ---- norms of many rows: 8 rows' sums at once (each still summed in ggml's order), rows over the pool ---- */
struct norm_args {
    const float *x, *w;
    float *out;
    int rows, n;
    float eps;
};

static void norm_task(void *ctx, int task) {
    const struct norm_args *a = ctx;
    int r0 = task * ROWS_PER_TASK, r1 = r0 + ROWS_PER_TASK < a->rows ? r0 + ROWS_PER_TASK : a->rows, n = a->n;
    if (r1 - r0 < ROWS_PER_TASK) {
        for (int r = r0; r < r1; r++) rms_norm(a->x + (size_t)r * n, a->w, a->out + (size_t)r * n, n, a->eps);
        return;
    }
    double sum[ROWS_PER_TASK] = {0};
    const float *x = a->x + (size_t)r0 * n;
    for (int i = 0; i < n; i++)
        for (int r = 0; r < ROWS_PER_TASK; r++) sum[r] += (double)(x[(size_t)r * n + i] * x[(size_t)r * n + i]);
    for (int r = 0; r < ROWS_PER_TASK; r++) {
        const float mean = (float)(sum[r] / n), scale = 1.0f / sqrtf(mean + a->eps);
        const float *xr = x + (size_t)r * n;
        float *o = a->out + (size_t)(r0 + r) * n;
        for (int i = 0; i < n; i++) o[i] = xr[i] * scale * a->w[i];
    }
}

static void norm_rows(const float *x, const float *w, float *out, int rows, int n, float eps) {
    struct norm_args a = {x, w, out, rows, n, eps};
    mlxcel_pool_run(norm_task, &a, (rows + ROWS_PER_TASK - 1) / ROWS_PER_TASK, rows > ROWS_PER_TASK);
}

/* ---- rope of the chunk's rows: q (rows from q_from on) into q, k into the key cache, v into the value cache */
struct rope_args {
    const struct step_model *m;
    const struct step_layer *w;
    const float *qkv, *angles;
    float *q;
    void *keys, *values; /* the layer's caches: float32, or 16 bits for an f16 cache */
    const long *st; /* the layer's key strides (sequence, head, position), then its value strides */
    int rows, index, q_from;
};

FMA_CLONES static void rope_task(void *ctx, int task) {
    const struct rope_args *a = ctx;
    const struct step_model *m = a->m;
    const int H = m->heads, Hkv = m->kv_heads, D = m->head_dim, half = m->rope_dims / 2;
    const int nqkv = (H + 2 * Hkv) * D;
    float prepared[qkv_prepared(a->w) ? nqkv : 1];
    for (int i = task * ROWS_PER_TASK; i < a->rows && i < (task + 1) * ROWS_PER_TASK; i++) {
        const float *row = a->qkv + (size_t)i * nqkv, *c = a->angles + (size_t)i * 2 * half, *s = c + half;
        if (qkv_prepared(a->w)) { /* (the queries of rows before q_from were not computed) */
            qkv_prepare(m, a->w, row, prepared, i >= a->q_from);
            row = prepared;
        }
        if (i >= a->q_from)
            for (int h = 0; h < H; h++)
                query_head(m, a->w, row + h * D, a->q + ((size_t)(i - a->q_from) * H + h) * D, half, c, s);
        long pos = a->index + i;
        for (int h = 0; h < Hkv; h++) { /* stored as the cache's type stores it */
            float turned[D];
            key_head(m, a->w, row + (H + h) * D, turned, half, c, s);
            store_key(m, a->keys, h * a->st[1] + pos * a->st[2], turned);
            store_value(m, a->values, h * a->st[4] + pos * a->st[5], row + (H + Hkv + h) * D);
        }
    }
}

static void rope_rows(const struct rope_args *a) {
    mlxcel_pool_run(rope_task, (void *)a, (a->rows + ROWS_PER_TASK - 1) / ROWS_PER_TASK, a->rows > ROWS_PER_TASK);
}

/* C (rows x n) = A (rows x k, lda) W (k x n of a weight ldw wide) + beta C */

/* L tokens of one sequence at positions index .. index + L - 1, written to its caches there (keys[l],
 * values[l]: layer l's, kv_heads x capacity x head_dim, strides as mlxcel_step's). logits (vocab floats): the
 * last position's, or NULL when the chunk is not the prompt's last. Returns 0, or -1 when out of memory. */
static int prefill_rows(const struct step_model *m, int L, const int *tokens, const float *embd, int noncausal,
                        int index, void *const *keys, void *const *values, const long *strides, float *logits);

int mlxcel_prefill(const void *model, int L, const int *tokens, int index, void *const *keys,
                   void *const *values, const long *strides, float *logits) {
    const int was = mlxcel_pool_batch(1); /* a prompt's rows: -tb's threads, as b10621's batch threadpool */
    const int status = prefill_rows(model, L, tokens, NULL, 0, index, keys, values, strides, logits);
    mlxcel_pool_batch(was);
    return status;
}

/* The same pass over L rows given as embeddings (L x hidden floats, taken as they are: an image's rows from its
 * projector, which b10621 decodes unscaled whatever the model's token embedding scale); noncausal: each row
 * attends to the chunk's later rows too (b10621's causal attention off for a Gemma 3 image). */
int mlxcel_prefill_embd(const void *model, int L, const float *embd, int noncausal, int index, void *const *keys,
                        void *const *values, const long *strides, float *logits) {
    const int was = mlxcel_pool_batch(1);
    const int status = prefill_rows(model, L, NULL, embd, noncausal, index, keys, values, strides, logits);
    mlxcel_pool_batch(was);
    return status;
}

static int prefill_rows(const struct step_model *m, int L, const int *tokens, const float *embd, int noncausal,
                        int index, void *const *keys, void *const *values, const long *strides, float *logits) {
    if (L < 1 || index < 0) return -1;
    const int E = m->hidden, H = m->heads, Hkv = m->kv_heads, D = m->head_dim, I = m->inter;
    const int nqkv = (H + 2 * Hkv) * D, half = m->rope_dims / 2, T = index + L;
    const int ropes = two_ropes(m) ? 2 : 1; /* (Gemma 3's sliding layers turn their own angles: the second set) */
    float *x = mlxcel_thread_floats(BUFFER_PREFILL, (size_t)L * (2 * E + nqkv + 2 * H * D + 3 * I + 2 * half * ropes));
    if (!x) return -1;
    float *h = x + (size_t)L * E, *qkv = h + (size_t)L * E, *q = qkv + (size_t)L * nqkv;
    float *att = q + (size_t)L * H * D, *gu = att + (size_t)L * H * D, *act = gu + (size_t)L * 2 * I;
    float *angles = act + (size_t)L * I;
    for (int i = 0; i < L; i++) {
        if (embd)
            memcpy(x + (size_t)i * E, embd + (size_t)i * E, sizeof(float) * E);
        else
            embed_scaled(m, tokens[i], x + (size_t)i * E);
        for (int r = 0; r < ropes; r++) {
            float *c = angles + ((size_t)r * L + i) * 2 * half;
            layer_angles(m, r, index + i, c, c + half);
        }
    }
    for (int l = 0; l < m->layers; l++) {
        const struct step_layer *w = &m->layer[l];
        const long *st = strides + 6 * l;
        const int last = l == m->layers - 1;
        capture_rows(m, l, x, L);
        norm_rows(x, w->attn_norm, h, L, E, m->eps);
        const float *layer_rope = angles + (size_t)(ropes == 2 && w->sliding) * L * 2 * half;
        struct rope_args r = {m, w, qkv, layer_rope, q, keys[l], values[l], st, L, index, 0};
        if (!last) {
            qkv_columns(m, w, L, 0, nqkv, h, E, qkv, L);
        } else if (qkv_whole(w)) { /* every row's q|k|v in one product; the last row's queries used alone */
            qkv_columns(m, w, L, 0, nqkv, h, E, qkv, L);
            if (!logits) { rope_rows(&r); break; }
            r.q_from = L - 1;
        } else { /* keys and values for every row; the queries of the last row, if its logits are wanted */
            qkv_columns(m, w, L, H * D, 2 * Hkv * D, h, E, qkv, L);
            if (!logits) { rope_rows(&r); break; }
            qkv_columns(m, w, 1, 0, H * D, h + (size_t)(L - 1) * E, E, qkv + (size_t)(L - 1) * nqkv, L);
            r.q_from = L - 1;
        }
        rope_rows(&r);
        const int rows = last ? 1 : L, r0 = L - rows; /* the rows the rest of the layer computes */
        struct attention_mask mask = layer_mask(m, w);
        mask.noncausal = noncausal;
        if (mlxcel_attention_masked(q, 0, D, (long)H * D, keys[l], st[0], st[1], st[2], values[l], st[3], st[4],
                                    st[5], 1, H, Hkv, rows, T, D, attention_scale(m), NULL, att, m->k_type, m->v_type,
                                    attention_flags(m), L, mask) != 0)
            return -1; /* (the chunk is the ubatch: the last layer's one row came in L) */
        float *xr = x + (size_t)r0 * E, *hr = h + (size_t)r0 * E;
        if (w->post_attn_norm) { /* Gemma: the output normed before the residual add */
            float *t = gu; /* (free until the feed-forward) */
            step_gemm(m, rows, E, H * D, att, H * D, w->wo, E, w->wo_t, t, E, 0, L);
            residual_add(m, w->post_attn_norm, t, xr, rows);
        } else {
            step_gemm(m, rows, E, H * D, att, H * D, w->wo, E, w->wo_t, xr, E, 1, L); /* (b10621: on every row) */
        }
        norm_rows(xr, w->mlp_norm, hr, rows, E, m->eps);
        /* past the last layer's attention b10621 keeps the output rows only (get_rows): one, as here */
        if (w->router) {
            if (mlxcel_moe_rows(m, w, rows, hr, xr, rows) != 0) return -1;
            continue;
        }
        gate_up(m, w, rows, hr, E, gu, rows);
        activation(m, gu, rows, act);
        if (w->post_ffn_norm) {
            float *t = gu; /* (read: free again) */
            step_gemm(m, rows, E, I, act, I, w->wdown, E, w->wdown_t, t, E, 0, rows);
            residual_add(m, w->post_ffn_norm, t, xr, rows);
        } else {
            step_gemm(m, rows, E, I, act, I, w->wdown, E, w->wdown_t, xr, E, 1, rows);
        }
    }
    if (logits) {
        float *xl = x + (size_t)(L - 1) * E;
        rms_norm(xl, m->norm, h, E, m->eps);
        if (m->ggml_order && mlxcel_ggml_gemm(1, m->vocab, E, h, E, m->head_t, E, logits, m->vocab, 0, 1) == 0) {
        } else if (m->tied) /* logits = h embed^T */
            cblas_sgemm(ROW_MAJOR, NO_TRANS, TRANS, 1, m->vocab, E, 1.0f, h, E, m->embed, E, 0.0f, logits, m->vocab);
        else
            product(m, 1, m->vocab, E, h, m->head, NULL, logits, 1);
        cap_logits(m, logits, 1);
    }
    return 0;
}
