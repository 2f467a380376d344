/* The model a native step runs (server/native/decode_step.c builds it; decode_step.c and prefill_step.c run it)
 * and the small pieces both steps compute alike. */
#ifndef MLXCEL_STEP_MODEL_H
#define MLXCEL_STEP_MODEL_H

#include <math.h>

#include "cpu_kernels.h"

enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 };
enum { LAYER_WEIGHTS = 6 };

struct step_layer {
    const float *attn_norm, *wqkv, *wo, *mlp_norm, *wgu, *wdown; /* the products' weights in x out */
};

struct step_model {
    int layers, hidden, heads, kv_heads, head_dim, inter, vocab, rope_dims, tied, max_rows;
    int k_type, v_type, flash; /* the KV cache's types (KV_F32...) and flash attention (attention_ggml.c) */
    float eps, rope_base, rope_scale, attn_scale;
    float yarn[4];  /* YaRN's ext_factor, attn_factor, corr_dims (rope_angles) */
    int yarn_on;    /* 0: the plain angles */
    const float *embed, *norm, *head; /* embed: vocab x hidden; head: hidden x vocab (the embedding when tied) */
    struct step_layer layer[];
};

/* out = x / rms(x) * w, as ggml's rms_norm then mul */
static inline void rms_norm(const float *x, const float *w, float *out, int n, float eps) {
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += (double)(x[i] * x[i]);
    const float mean = (float)(sum / n);
    const float scale = 1.0f / sqrtf(mean + eps);
    for (int i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
}

/* rotate-half rope of one head at the angles given, from x into out */
static inline void rope_head(const float *x, float *out, int half, int D, const float *c, const float *s) {
    for (int j = 0; j < half; j++) {
        float u = x[j], v = x[j + half];
        out[j] = u * c[j] - v * s[j];
        out[j + half] = u * s[j] + v * c[j];
    }
    for (int j = 2 * half; j < D; j++) out[j] = x[j];
}

static inline void product(int rows, int n, int k, const float *x, const float *w, float *y) {
    cblas_sgemm(ROW_MAJOR, NO_TRANS, NO_TRANS, rows, n, k, 1.0f, x, k, w, n, 0.0f, y, n);
}

#endif
