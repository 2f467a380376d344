/* Attention over an f16 or bf16 KV cache, rounded where ggml-cpu (b10621) rounds (server/models/kv_numerics.py).
 *
 * The cache keeps float32 buffers holding values of the cache's type: written through mlxcel_round_kv, with
 * ggml's rounding (f32 -> f16 round-to-nearest-even as F16C converts; f32 -> bf16 ggml_compute_fp32_to_bf16,
 * NaN kept quiet). What ggml then computes over such a cache (ggml/src/ggml-cpu/ops.cpp):
 * - flash attention, a ubatch of fewer than 64 rows (GGML_FA_TILE_Q; a decode step, a short prompt) or a
 *   bf16 cache: flash_attn_ext_f16_one_chunk. Q rounded to K's type, each score the f32 dot product scaled,
 *   an online softmax over the visible keys in order, and with an f16 V the sums kept in f16 (VKQ16: every
 *   multiply-add and every rescale rounded to f16); with another V, in f32.
 * - flash attention over an f16 or f32 cache, 64 rows or more: the tiled path (tiled_rows: the query in f32,
 *   64-cell key tiles, FMA chains, a tile's softmax through ggml_v_expf) where the model sums in ggml's order;
 *   else f32 math on the cached values, mlxcel_attention's.
 * - no flash attention: mul_mat(K, Q) with Q converted to K's vec_dot type, softmax in f32, then mul_mat(V, P)
 *   with the probabilities converted to V's type.
 * Over an f32 cache without flash attention: f32 math, mlxcel_attention's; with it b10621 casts K and V to
 * f16 first, and so do these loops as they read them. Past 256 positions (n_kv padded to 512) a one-row step of
 * b10621 splits the keys over its -t threads and combines the parts' sums (flash_split_row: the same parts).
 * Block-quantized caches (kv_quant.c; rows of bytes, strides in bytes) always take the one-chunk loops, as ggml-cpu
 * dispatches them: a query is put in the keys' element order and Hadamard rotation (attn_rot_k), quantized to the
 * key type's vec_dot type and dotted with each key block by block; values are read with to_float and summed in
 * f32, and the output rotated back where the values were rotated (attn_rot_v). */
#include <math.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "cpu_kernels.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#include "ggml_simd.h" /* ggml_dot_steps: ggml_vec_dot_f16's sums */
#define KV_X86 1
#define F16C __attribute__((target("avx2,fma,f16c")))
#else
#define KV_X86 0
#endif

enum { FA_TILE_Q = 64 }; /* ggml-cpu's GGML_FA_TILE_Q: from this many rows a ubatch takes the tiled path */

static int vector_ok(void) {
#if KV_X86
    static int ok = -1;
    if (ok < 0) ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    return ok;
#else
    return 0;
#endif
}

static inline uint32_t bits_of(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float float_of(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* ggml_compute_fp32_to_fp16 (round to nearest even) */
static uint16_t f16_bits(float f) {
    float base = (fabsf(f) * 0x1.0p+112f) * 0x1.0p-110f;
    const uint32_t w = bits_of(f), shl1_w = w + w, sign = w & 0x80000000u;
    uint32_t bias = shl1_w & 0xFF000000u;
    if (bias < 0x71000000u) bias = 0x71000000u;
    base = float_of((bias >> 1) + 0x07800000u) + base;
    const uint32_t b = bits_of(base);
    return (uint16_t)((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : ((b >> 13) & 0x7C00u) + (b & 0x0FFFu)));
}

/* ggml_compute_fp16_to_fp32 */
static float f16_value(uint16_t h) {
    const uint32_t w2 = (uint32_t)h << 16, sign2 = w2 & 0x80000000u, two_w = w2 + w2;
    const float normalized = float_of((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
    const float denormalized = float_of((two_w >> 17) | (126u << 23)) - 0.5f;
    return float_of(sign2 | (two_w < (1u << 27) ? bits_of(denormalized) : bits_of(normalized)));
}

static float round_f16(float f) { return f16_value(f16_bits(f)); }

/* ggml_compute_fp32_to_bf16 then back */
static inline float round_bf16(float f) {
    uint32_t u = bits_of(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return float_of(((u >> 16) | 64u) << 16);
    return float_of(((u + (0x7fffu + ((u >> 16) & 1u))) >> 16) << 16);
}

#if KV_X86
F16C static void round_f16_vec(float *x, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
    for (; i < n; i++) x[i] = round_f16(x[i]);
}
#endif

#if KV_X86
F16C static void store_f16_vec(uint16_t *dst, const float *x, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) dst[i] = f16_bits(x[i]);
}

F16C static void load_f16_vec(float *dst, const uint16_t *h, int n) {
    int i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + i))));
    for (; i < n; i++) dst[i] = f16_value(h[i]);
}
#endif

/* a cache stored as f16 (b10621's default type, in its own 16 bits): n values written (rounded to nearest
 * even, as ggml writes them) or read */
void mlxcel_store_f16(uint16_t *dst, const float *x, long n) {
#if KV_X86
    if (vector_ok()) { store_f16_vec(dst, x, (int)n); return; }
#endif
    for (long i = 0; i < n; i++) dst[i] = f16_bits(x[i]);
}

void mlxcel_load_f16(float *dst, const uint16_t *h, long n) {
#if KV_X86
    if (vector_ok()) { load_f16_vec(dst, h, (int)n); return; }
#endif
    for (long i = 0; i < n; i++) dst[i] = f16_value(h[i]);
}

/* x[0..n) rounded in place to the cache type (KV_F32: unchanged) */
void mlxcel_round_kv(float *x, long n, int type) {
    if (type == KV_F16) {
#if KV_X86
        if (vector_ok()) { round_f16_vec(x, (int)n); return; }
#endif
        for (long i = 0; i < n; i++) x[i] = round_f16(x[i]);
    } else if (type == KV_BF16) {
        for (long i = 0; i < n; i++) x[i] = round_bf16(x[i]);
    }
}

struct kv_args {
    const float *q;
    const void *k, *v; /* float32, or 16-bit f16 where k_half, v_half */
    long q_seq, q_head, q_pos, k_seq, k_head, k_pos, v_seq, v_head, v_pos;
    int H, Hkv, L, T, D, k_type, v_type, flash, cast; /* cast: K (1), V (2) f32, rounded to f16 as read */
    int ggml_dims; /* dot products over a head in ggml's element order (a llama GGUF's interleaved pairs) */
    int ggml_sums; /* dot products summed as ggml's vec_dot_f16 sums them (ggml_dims or not) */
    int k_half, v_half; /* the keys, the values stored as f16 */
    int k_block, v_block; /* the keys, the values block-quantized (k_type, v_type: KV_Q8_0...; strides in bytes) */
    int k_ggml_order;     /* block keys quantized in a llama GGUF's element order: queries put in it first */
    int k_rot, v_rot;     /* b10621's Hadamard chunk for the keys and queries, the values and output (0: none) */
    int ggml_plain; /* without flash attention, every product in ggml's order (ggml_plain_head) */
    int ubatch;     /* the rows of the ubatch the queries came in */
    int acc32;      /* flash attention's sums in f32 whatever V's type (the tiled path's, a ubatch of 64 rows or more) */
    int window;     /* a query at position p sees keys p - window + 1 .. p (0: all before it) */
    float softcap;  /* scores capped softcap tanh(s / softcap) (Gemma 2's attention; 0: none) */
    int noncausal;  /* a query also sees the keys after it up to T (the window still bounds it from below) */
    int split;      /* the row is its ubatch's only one: b10621 splits its keys over threads (flash_split_row) */
    float scale;
    const int *first;
    float *out;
    int failed;
};

static inline float dot(const float *a, const float *b, int D) {
    float s = 0.0f;
    for (int d = 0; d < D; d++) s = fmaf(a[d], b[d], s);
    return s;
}

#if KV_X86
F16C static float dot_vec(const float *a, const float *b, int D) {
    __m256 acc = _mm256_setzero_ps();
    int d = 0;
    for (; d + 8 <= D; d += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + d), _mm256_loadu_ps(b + d), acc);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    s = _mm_hadd_ps(s, s);
    s = _mm_hadd_ps(s, s);
    float r = _mm_cvtss_f32(s);
    for (; d < D; d++) r = fmaf(a[d], b[d], r);
    return r;
}

/* ggml_vec_dot_f16 (AVX2: four accumulators of 8 lanes over 32 elements a step, then x0 + x2, x1 + x3, their
 * sum, its halves added and two horizontal adds; leftovers added in double) over values already f16-rounded */
F16C static float dot_ggml_f16(const float *a, const float *b, int D) {
    const int np = D & ~31;
    double sum = ggml_dot_steps(a, b, np);
    for (int i = np; i < D; i++) sum += (double)(a[i] * b[i]);
    return (float)sum;
}

/* acc = f16(acc * ms) where ms != 1, then acc = f16(fma(v, vs, acc)): ggml_vec_scale_f16, ggml_vec_mad_f16 */
F16C static void mad_f16(float *acc, const float *v, float ms, int rescale, float vs, int D) {
    const __m256 m = _mm256_set1_ps(ms), s = _mm256_set1_ps(vs);
    int d = 0;
    for (; d + 8 <= D; d += 8) {
        __m256 a = _mm256_loadu_ps(acc + d);
        if (rescale) a = _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_mul_ps(a, m), _MM_FROUND_TO_NEAREST_INT));
        a = _mm256_fmadd_ps(_mm256_loadu_ps(v + d), s, a);
        _mm256_storeu_ps(acc + d, _mm256_cvtph_ps(_mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT)));
    }
    for (; d < D; d++) {
        float a = rescale ? round_f16(acc[d] * ms) : acc[d];
        acc[d] = round_f16(a + v[d] * vs); /* ggml's scalar leftovers: not fused */
    }
}

F16C static void mad_f32(float *acc, const float *v, float ms, int rescale, float vs, int D) {
    const __m256 m = _mm256_set1_ps(ms), s = _mm256_set1_ps(vs);
    int d = 0;
    for (; d + 8 <= D; d += 8) {
        __m256 a = _mm256_loadu_ps(acc + d);
        if (rescale) a = _mm256_mul_ps(a, m);
        _mm256_storeu_ps(acc + d, _mm256_fmadd_ps(_mm256_loadu_ps(v + d), s, a));
    }
    for (; d < D; d++) acc[d] = (rescale ? acc[d] * ms : acc[d]) + v[d] * vs;
}
#endif

static void mad_scalar(float *acc, const float *v, float ms, int rescale, float vs, int D, int f16) {
    for (int d = 0; d < D; d++) {
        float a = rescale ? acc[d] * ms : acc[d];
        if (f16 && rescale) a = round_f16(a);
        a = fmaf(v[d], vs, a);
        acc[d] = f16 ? round_f16(a) : a;
    }
}

/* rows of one head's keys or values in a cache: the first row's element, the rows' stride in elements (bytes for
 * a block type), the storage (float32, f16, or a block type: block is its KV_ code, else 0) */
struct kv_rows {
    const void *base;
    long pos;
    int half, block;
};

/* row j's storage */
static inline const void *kv_at(struct kv_rows r, int j) {
    return r.block  ? (const void *)((const uint8_t *)r.base + (long)j * r.pos)
           : r.half ? (const void *)((const uint16_t *)r.base + (long)j * r.pos)
                    : (const void *)((const float *)r.base + (long)j * r.pos);
}

/* row j as floats: in place for a float32 cache, else converted into buf (a block type's to_float) */
static inline const float *kv_row(struct kv_rows r, int j, float *buf, int D) {
    if (r.block) {
        mlxcel_kv_dequantize_row(r.block, kv_at(r, j), buf, D);
        return buf;
    }
    if (!r.half) return (const float *)r.base + (long)j * r.pos;
    mlxcel_load_f16(buf, (const uint16_t *)r.base + (long)j * r.pos, D);
    return buf;
}

/* the rows from row j on */
static inline struct kv_rows rows_from(struct kv_rows r, int j) {
    r.base = kv_at(r, j);
    return r;
}

/* a head's values in ggml's element order: a llama GGUF's q and k rows interleave the rotary pairs (element 2i
 * is mlxcel's i, 2i + 1 its i + D/2: convert_hf_to_gguf's permute) */
static void to_ggml_dims(const float *x, float *out, int D) {
    const int half = D / 2;
    for (int i = 0; i < half; i++) out[2 * i] = x[i], out[2 * i + 1] = x[i + half];
}

/* one query row of one head: flash_attn_ext_f16_one_chunk's sums over keys [0, n): the values' weighted sum in acc
 * (f16 values where its accumulator is), the running max in *Mo and the weights' sum in *So */
static void flash_sums(const struct kv_args *a, const float *q, const void *qq, struct kv_rows k, struct kv_rows v,
                       int n, float *acc, float *Mo, float *So) {
    const int D = a->D, vec = vector_ok(), f16_v = a->v_type == KV_F16 && !a->acc32;
    /* ggml divides the scale by the cap once, then caps each scaled score: softcap tanhf(s) */
    const float scale = a->softcap != 0.0f ? a->scale / a->softcap : a->scale;
    float M = -INFINITY, S = 0.0f;
    memset(acc, 0, sizeof(float) * (size_t)D);
    float *kc = acc + D, *vc = kc + D, *kg = vc + D; /* a cast key and value; a key in ggml's order */
    for (int j = 0; j < n; j++) {
        /* a block key: K . Q as the type's vec_dot over the quantized query qq (kq_vec_dot) */
        const float *kj = k.block ? NULL : kv_row(k, j, kc, D), *vj = kv_row(v, j, vc, D);
        if (a->cast & 1) { memmove(kc, kj, sizeof(float) * (size_t)D); mlxcel_round_kv(kc, D, KV_F16); kj = kc; }
        if (a->cast & 2) { memmove(vc, vj, sizeof(float) * (size_t)D); mlxcel_round_kv(vc, D, KV_F16); vj = vc; }
#if KV_X86
        float s;
        if (k.block) {
            s = mlxcel_kv_dot(k.block, kv_at(k, j), qq, D) * scale;
        } else if (vec && a->ggml_sums && a->k_type == KV_F16) {
            if (a->ggml_dims) to_ggml_dims(kj, kg, D);
            s = dot_ggml_f16(q, a->ggml_dims ? kg : kj, D) * scale;
        } else {
            s = (vec ? dot_vec(q, kj, D) : dot(q, kj, D)) * scale;
        }
#else
        float s = k.block ? mlxcel_kv_dot(k.block, kv_at(k, j), qq, D) * scale : dot(q, kj, D) * scale;
#endif
        if (a->softcap != 0.0f) s = a->softcap * tanhf(s);
        float ms = 1.0f, vs = 1.0f;
        int rescale = 0;
        if (s > M) {
            const float old = M;
            M = s;
            ms = expf(old - M);
            rescale = 1;
        } else {
            vs = expf(s - M);
        }
#if KV_X86
        if (vec) {
            if (f16_v) mad_f16(acc, vj, ms, rescale, vs, D);
            else mad_f32(acc, vj, ms, rescale, vs, D);
        } else
#endif
            mad_scalar(acc, vj, ms, rescale, vs, D, f16_v);
        S = fmaf(S, ms, vs); /* (b10621's build contracts S*ms + vs into one fused multiply-add) */
    }
    *Mo = M, *So = S;
}

/* one query row of one head: flash_attn_ext_f16_one_chunk over keys [0, n) */
static void flash_row(const struct kv_args *a, const float *q, const void *qq, struct kv_rows k, struct kv_rows v, int n,
                      float *acc, float *o) {
    float M, S;
    flash_sums(a, q, qq, k, v, n, acc, &M, &S);
    const float inv = S == 0.0f ? 0.0f : 1.0f / S;
    for (int d = 0; d < a->D; d++) o[d] = acc[d] * inv;
}

/* b10621's generation threads (mlxcel_attention_split): a one-row step over 512 cells or more splits its keys */
static int split_parts;

void mlxcel_attention_split(int parts) { split_parts = parts > 0 ? parts : 0; }

/* A one-row step's query over keys [lo, hi) of a cache whose cells hold positions in order, as b10621 computes it
 * past 512 cells (use_split_kv_path): the n_kv cells (the visible ones padded to 256) cut into split_parts equal
 * parts, each part's sums as one chunk's, then the parts combined in order, each VKQ' = fma(VKQ, so, part sn) and
 * S' = fma(S, so, part S sn) as b10621's build compiles ggml_flash_attn_ext_reduce_partials (so = expf(M - M'),
 * sn = expf(M_part - M')). acc: 6 D floats. */
static void flash_split_row(const struct kv_args *a, const float *q, const void *qq, struct kv_rows k,
                            struct kv_rows v, int lo, int hi, float *acc, float *o) {
    const int D = a->D, n_kv = hi <= 256 ? 256 : (hi + 255) / 256 * 256, part = (n_kv + split_parts - 1) / split_parts;
    float *total = acc + 4 * D, Mt = -INFINITY, St = 0.0f;
    memset(total, 0, sizeof(float) * (size_t)D);
    for (int c = 0; c < split_parts; c++) {
        const int from = c * part > lo ? c * part : lo, to = (c + 1) * part < hi ? (c + 1) * part : hi;
        if (from >= to) continue; /* (a part with no visible key: S 0, left out) */
        float M, S;
        flash_sums(a, q, qq, rows_from(k, from), rows_from(v, from), to - from, acc, &M, &S);
        const float Mn = M > Mt ? M : Mt, so = expf(Mt - Mn), sn = expf(M - Mn);
        for (int d = 0; d < D; d++) total[d] = fmaf(total[d], so, acc[d] * sn);
        St = fmaf(St, so, S * sn);
        Mt = Mn;
    }
    const float inv = St == 0.0f ? 0.0f : 1.0f / St;
    for (int d = 0; d < D; d++) o[d] = total[d] * inv;
}

/* one query row of one head without flash attention: scores, softmax (ggml_soft_max's, sums in double), the
 * probabilities rounded to V's type, then their products with the values summed in f32 */
static void plain_row(const struct kv_args *a, const float *q, const void *qq, struct kv_rows k, struct kv_rows v, int n,
                      float *p, float *buf, float *o) {
    const int D = a->D;
    float mx = -INFINITY;
    for (int j = 0; j < n; j++) {
        float s;
        if (k.block) { /* mul_mat over a block K: Q converted to its vec_dot type, each score the type's vec_dot */
            s = mlxcel_kv_dot(k.block, kv_at(k, j), qq, D);
        } else {
            const float *kj = kv_row(k, j, buf, D);
#if KV_X86
            s = vector_ok() ? dot_vec(q, kj, D) : dot(q, kj, D);
#else
            s = dot(q, kj, D);
#endif
        }
        /* b10621's capped scores without flash attention: scale by 1 / cap, tanh, scale by cap, then softmax's
         * own scale */
        if (a->softcap != 0.0f) s = tanhf(s * (1.0f / a->softcap)) * a->softcap;
        p[j] = s * a->scale;
        mx = p[j] > mx ? p[j] : mx;
    }
    double sum = 0.0;
    for (int j = 0; j < n; j++) sum += (double)(p[j] = expf(p[j] - mx));
    const float inv = (float)(1.0 / sum);
    for (int j = 0; j < n; j++) p[j] *= inv;
    mlxcel_round_kv(p, n, a->v_type);
    memset(o, 0, sizeof(float) * (size_t)D);
    for (int j = 0; j < n; j++) {
        const float *vj = kv_row(v, j, buf, D);
        for (int d = 0; d < D; d++) o[d] = fmaf(p[j], vj[d], o[d]);
    }
}

#if KV_X86
/* One head's queries without flash attention as b10621's graph computes them over an f32 or f16 cache, every
 * sum in ggml's order (a model on the native steps in that order): kq = mul_mat(K, Q) as vec_dot (Q is a
 * permuted view: no tinyBLAS), each score capped (scale by 1 / cap, tanhf, scale by cap), then soft_max_ext's
 * scale and mask (ggml_soft_max_row, in 8-lane groups from the first cell), then kqv = mul_mat(V^T, kq) as the
 * ubatch sums it (tinyBLAS from 2 rows). b10621's cells hold one sequence's positions in order, so a key's lane
 * in those sums is its position: masked keys are zeros there, and past the last key the cells pad to 32 here
 * (to 256 there: zeros, which add nothing). vt: D x padded keys, p: padded keys. Returns 0, or -1 where the
 * product's order does not apply. */
F16C static int ggml_plain_head(const struct kv_args *a, int b, int h, struct kv_rows kh, struct kv_rows vh, int first,
                                float *vt, float *p, float *kbuf, float *qr, void *qq, float *kw) {
    const int D = a->D, keys = a->T - first, padded = (keys + 31) & ~31;
    for (int j = 0; j < padded; j++) { /* V^T, zero past the keys */
        const float *vj = j < keys ? kv_row(vh, j, kbuf, D) : NULL;
        for (int d = 0; d < D; d++) vt[(size_t)d * padded + j] = vj ? vj[d] : 0.0f;
    }
    if (kw) /* several rows: each key widened (and put in ggml's dims) once for all of them */
        for (int j = 0; j < keys; j++) {
            const float *kj = kv_row(kh, j, kbuf, D);
            if (a->ggml_dims) to_ggml_dims(kj, kw + (size_t)j * D, D);
            else memcpy(kw + (size_t)j * D, kj, sizeof(float) * (size_t)D);
        }
    const float cap = a->softcap;
    for (int i = 0; i < a->L; i++) {
        float *o = a->out + (((size_t)b * a->L + i) * a->H + h) * D;
        const int causal = a->T - a->L + i + 1 - first;
        const int seen = a->noncausal ? keys : causal;
        if (causal <= 0) { memset(o, 0, sizeof(float) * (size_t)D); continue; } /* a padding query: zeros */
        const int lo = a->window && causal > a->window ? causal - a->window : 0;
        memcpy(qr, a->q + b * a->q_seq + h * a->q_head + i * a->q_pos, sizeof(float) * (size_t)D);
        mlxcel_round_kv(qr, D, a->k_type); /* Q converted to K's vec_dot type */
        if (kh.block) { /* (block keys: quantized in their own element order, rotated as the queries are) */
            if (a->k_ggml_order) { to_ggml_dims(qr, kbuf, D); memcpy(qr, kbuf, sizeof(float) * (size_t)D); }
            mlxcel_kv_rotate(qr, D, a->k_rot);
            mlxcel_kv_quantize_row(kv_dot_type(kh.block), qr, qq, D);
        } else if (a->ggml_dims) {
            to_ggml_dims(qr, kbuf, D);
            memcpy(qr, kbuf, sizeof(float) * (size_t)D);
        }
        for (int j = 0; j < padded; j++) {
            if (j < lo || j >= seen) { p[j] = -INFINITY; continue; }
            float s;
            if (kh.block) {
                s = mlxcel_kv_dot(kh.block, kv_at(kh, j), qq, D);
            } else if (kw) {
                s = a->k_type == KV_F16 ? dot_ggml_f16(qr, kw + (size_t)j * D, D) : ggml_dot_vec(qr, kw + (size_t)j * D, D);
            } else {
                const float *kj = kv_row(kh, j, kbuf, D);
                if (a->ggml_dims) { to_ggml_dims(kj, kbuf + D, D); kj = kbuf + D; }
                s = a->k_type == KV_F16 ? dot_ggml_f16(qr, kj, D) : ggml_dot_vec(qr, kj, D);
            }
            if (cap != 0.0f) s = tanhf(s * (1.0f / cap)) * cap;
            p[j] = s * a->scale;
        }
        ggml_soft_max_row(p, padded, 1.0f);
        mlxcel_round_kv(p, padded, a->v_type); /* kq converted to V's vec_dot type */
        if (mlxcel_ggml_gemm(1, D, padded, p, padded, vt, padded, o, D, 0, a->ubatch) != 0) return -1;
    }
    return 0;
}

enum { FA_TILE_KV = 64 }; /* ggml-cpu's GGML_FA_TILE_KV: the tiled path's key tiles, from cell 0 */

/* Rows [r0, r0 + rows) of one head as ggml_compute_forward_flash_attn_ext_tiled computes them (a ubatch of 64 rows
 * or more over an f16 or f32 cache of one type, flash attention on): the query in f32 (not rounded to K's type),
 * the keys in 64-cell tiles, each score an FMA chain over the head's elements in order (simd_gemm), scaled,
 * capped, masked; per tile an online softmax (max over the tile, ggml_v_expf in 8-lane groups summed in double
 * into an f32 total) and the values added as FMA chains over the tile's keys (simd_gemm again). A row's sums do
 * not depend on the rows tiled with it, so any grouping of rows gives ggml's values; a masked key or a skipped
 * tile adds exact zeros there, and is left out here. buf: 64 * (3 D + 64 + 2) + 2 D floats. */
F16C static void tiled_rows(const struct kv_args *a, int b, int h, struct kv_rows kh, struct kv_rows vh, int first,
                            int r0, int rows, float *buf) {
    const int D = a->D, keys = a->T - first;
    float *Q = buf, *Kt = Q + FA_TILE_Q * D, *V = Kt + FA_TILE_KV * D, *KQ = V + FA_TILE_KV * D;
    float *VKQ = KQ + FA_TILE_Q * FA_TILE_KV, *M = VKQ + FA_TILE_Q * D, *S = M + FA_TILE_Q, *row = S + FA_TILE_Q;
    int lo[FA_TILE_Q], hi[FA_TILE_Q]; /* each row's visible keys */
    const float cap = a->softcap, scale = cap != 0.0f ? a->scale / cap : a->scale;
    for (int i = 0; i < rows; i++) {
        const int causal = a->T - a->L + r0 + i + 1 - first;
        hi[i] = causal <= 0 ? 0 : a->noncausal ? keys : causal; /* a padding query sees nothing: zeros */
        lo[i] = a->window && causal > a->window ? causal - a->window : 0;
        float *q = Q + (size_t)i * D;
        memcpy(q, a->q + b * a->q_seq + h * a->q_head + (r0 + i) * a->q_pos, sizeof(float) * (size_t)D);
        if (a->ggml_dims) { to_ggml_dims(q, row, D); memcpy(q, row, sizeof(float) * (size_t)D); }
        M[i] = -INFINITY, S[i] = 0.0f;
    }
    memset(VKQ, 0, sizeof(float) * (size_t)rows * D);
    for (int ic = 0; ic < keys; ic += FA_TILE_KV) {
        const int n = keys - ic < FA_TILE_KV ? keys - ic : FA_TILE_KV;
        int any = 0;
        for (int i = 0; i < rows; i++) any |= lo[i] < ic + n && hi[i] > ic;
        if (!any) continue; /* every row masked over the tile: ggml skips it */
        for (int t = 0; t < FA_TILE_KV; t++) { /* K transposed (zero past the keys), V as rows */
            if (t >= n) {
                for (int d = 0; d < D; d++) Kt[(size_t)d * FA_TILE_KV + t] = 0.0f;
                continue;
            }
            const float *kj = kv_row(kh, ic + t, row, D);
            if (a->cast & 1) { memmove(row, kj, sizeof(float) * (size_t)D); mlxcel_round_kv(row, D, KV_F16); kj = row; }
            if (a->ggml_dims) { to_ggml_dims(kj, row + D, D); kj = row + D; }
            for (int d = 0; d < D; d++) Kt[(size_t)d * FA_TILE_KV + t] = kj[d];
            const float *vj = kv_row(vh, ic + t, row, D);
            if (vj != V + (size_t)t * D) memcpy(V + (size_t)t * D, vj, sizeof(float) * (size_t)D);
            if (a->cast & 2) mlxcel_round_kv(V + (size_t)t * D, D, KV_F16);
        }
        for (int i = 0; i < rows; i += 2) /* the scores, two rows at a time over each half of the tile */
            for (int half = 0; half < FA_TILE_KV; half += FA_TILE_KV / 2) {
                const float *q0 = Q + (size_t)i * D, *q1 = i + 1 < rows ? q0 + D : q0;
                __m256 a0[4], a1[4];
                for (int j = 0; j < 4; j++) a0[j] = a1[j] = _mm256_setzero_ps();
                for (int d = 0; d < D; d++) {
                    const __m256 p0 = _mm256_set1_ps(q0[d]), p1 = _mm256_set1_ps(q1[d]);
                    const float *kt = Kt + (size_t)d * FA_TILE_KV + half;
                    for (int j = 0; j < 4; j++) {
                        const __m256 kv = _mm256_loadu_ps(kt + 8 * j);
                        a0[j] = _mm256_fmadd_ps(kv, p0, a0[j]);
                        a1[j] = _mm256_fmadd_ps(kv, p1, a1[j]);
                    }
                }
                for (int j = 0; j < 4; j++) {
                    _mm256_storeu_ps(KQ + (size_t)i * FA_TILE_KV + half + 8 * j, a0[j]);
                    if (i + 1 < rows) _mm256_storeu_ps(KQ + (size_t)(i + 1) * FA_TILE_KV + half + 8 * j, a1[j]);
                }
            }
        for (int i = 0; i < rows; i++) {
            const int from = lo[i] > ic ? lo[i] - ic : 0, to = hi[i] - ic < n ? hi[i] - ic : n;
            if (from >= to) continue; /* the row's max over the tile is -inf: skipped */
            float *kq = KQ + (size_t)i * FA_TILE_KV;
            float mx = -INFINITY;
            for (int t = 0; t < FA_TILE_KV; t++) {
                float s = kq[t] * scale;
                if (cap != 0.0f) s = tanhf(s) * cap;
                kq[t] = t >= from && t < to ? s : -INFINITY;
                mx = kq[t] > mx ? kq[t] : mx;
            }
            const float Mnew = mx > M[i] ? mx : M[i];
            float *o = VKQ + (size_t)i * D;
            if (Mnew > M[i]) {
                const float ms = expf(M[i] - Mnew);
                for (int d = 0; d < D; d++) o[d] *= ms;
                S[i] *= ms;
            }
            M[i] = Mnew;
            double sum = 0.0;
            for (int t = 0; t < FA_TILE_KV; t += 8) {
                const __m256 e = ggml_expf8(_mm256_sub_ps(_mm256_loadu_ps(kq + t), _mm256_set1_ps(Mnew)));
                _mm256_storeu_ps(kq + t, e);
                sum += (double)ggml_hsum8(e);
            }
            S[i] = (float)((double)S[i] + sum);
            for (int d0 = 0; d0 < D; d0 += 64) { /* 64 outputs held in registers over the tile's keys */
                const int nv = D - d0 < 64 ? (D - d0) / 8 : 8;
                __m256 acc[8];
                for (int j = 0; j < nv; j++) acc[j] = _mm256_loadu_ps(o + d0 + 8 * j);
                for (int t = from; t < to; t++) {
                    const __m256 p = _mm256_set1_ps(kq[t]);
                    const float *vt = V + (size_t)t * D + d0;
                    for (int j = 0; j < nv; j++) acc[j] = _mm256_fmadd_ps(_mm256_loadu_ps(vt + 8 * j), p, acc[j]);
                }
                for (int j = 0; j < nv; j++) _mm256_storeu_ps(o + d0 + 8 * j, acc[j]);
            }
        }
    }
    for (int i = 0; i < rows; i++) {
        float *o = a->out + (((size_t)b * a->L + r0 + i) * a->H + h) * D;
        const float inv = S[i] == 0.0f ? 0.0f : 1.0f / S[i];
        for (int d = 0; d < D; d++) o[d] = VKQ[(size_t)i * D + d] * inv;
    }
}
#endif

/* batch row b's keys and values for query head h, from the sequence's first cell */
static void head_rows(const struct kv_args *a, int b, int h, int first, struct kv_rows *kr, struct kv_rows *vr) {
    const int group = a->H / a->Hkv;
    const long ko = b * a->k_seq + (h / group) * a->k_head + first * a->k_pos;
    const long vo = b * a->v_seq + (h / group) * a->v_head + first * a->v_pos;
    *kr = (struct kv_rows){a->k_block  ? (const void *)((const uint8_t *)a->k + ko)
                           : a->k_half ? (const void *)((const uint16_t *)a->k + ko)
                                       : (const void *)((const float *)a->k + ko),
                           a->k_pos, a->k_half, a->k_block ? a->k_type : 0};
    *vr = (struct kv_rows){a->v_block  ? (const void *)((const uint8_t *)a->v + vo)
                           : a->v_half ? (const void *)((const uint16_t *)a->v + vo)
                                       : (const void *)((const float *)a->v + vo),
                           a->v_pos, a->v_half, a->v_block ? a->v_type : 0};
}

/* whether the tiled path runs in ggml's order (tiled_rows) */
static int tiles_exact(const struct kv_args *a) { return a->acc32 && vector_ok() && a->ggml_sums && a->D % 8 == 0; }

#if KV_X86
/* one 64-row tile of one head (tasks: batch rows x heads x tiles, spread as ggml spreads rows and heads) */
static void kv_tile(void *ctx, int task) {
    struct kv_args *a = ctx;
    const int tiles = (a->L + FA_TILE_Q - 1) / FA_TILE_Q, bh = task / tiles, r0 = task % tiles * FA_TILE_Q;
    const int b = bh / a->H, h = bh % a->H, first = a->first ? a->first[b] : 0, D = a->D;
    struct kv_rows kr, vr;
    head_rows(a, b, h, first, &kr, &vr);
    float *buf = mlxcel_thread_floats(BUFFER_SCORES, (size_t)FA_TILE_Q * (4 * D + FA_TILE_KV + 2) + 2 * (size_t)D);
    if (!buf) { a->failed = 1; return; }
    tiled_rows(a, b, h, kr, vr, first, r0, a->L - r0 < FA_TILE_Q ? a->L - r0 : FA_TILE_Q, buf);
}
#endif

static void kv_head(void *ctx, int task) {
    struct kv_args *a = ctx;
    const int b = task / a->H, h = task % a->H, D = a->D;
    const int first = a->first ? a->first[b] : 0;
    struct kv_rows kr, vr;
    head_rows(a, b, h, first, &kr, &vr);
    const int keys = a->T - first;
    /* a query quantized to block keys' vec_dot type: 36 bytes per 32 values at most (q8_1), in floats */
    const size_t qq_floats = a->k_block ? (size_t)(D / 32 * 36 + 3) / 4 + 1 : 0;
#if KV_X86
    if (a->ggml_plain && keys > 0) {
        const size_t padded = (size_t)((keys + 31) & ~31), widened = a->L > 1 && !a->k_block ? (size_t)keys * D : 0;
        float *vt = mlxcel_thread_floats(BUFFER_SCORES, padded * (D + 1) + 3 * (size_t)D + qq_floats + widened);
        if (!vt) { a->failed = 1; return; }
        float *p = vt + padded * D, *kbuf = p + padded, *qr = kbuf + 2 * D, *qq = qr + D;
        float *kw = widened ? qq + qq_floats : NULL;
        if (ggml_plain_head(a, b, h, kr, vr, first, vt, p, kbuf, qr, qq, kw) == 0) return;
    }
#endif
    float *scratch = mlxcel_thread_floats(BUFFER_SCORES, (size_t)7 * D + (size_t)(keys > 0 ? keys : 1) + qq_floats);
    if (!scratch) { a->failed = 1; return; }
    /* acc: the sums, then flash_row's cast key, value and reordered key, and a split row's total; qg: a query in
     * ggml's order; qq: the query quantized for block keys */
    float *qr = scratch, *acc = scratch + D, *qg = acc + 5 * D, *p = qg + D, *qq = p + (keys > 0 ? keys : 1);
    /* b10621's split over the keys: one row in the ubatch, an f16 cache (f32 ones are cast), 512 cells or more */
    const int split = a->split && split_parts > 0 && a->flash && a->L == 1 && !a->k_block && !a->v_block &&
                      a->k_type == KV_F16 && a->v_type == KV_F16 && a->T - first > 256;
    for (int i = 0; i < a->L; i++) {
        float *o = a->out + (((size_t)b * a->L + i) * a->H + h) * D;
        const int causal = a->T - a->L + i + 1 - first; /* the keys up to the query's own position */
        int seen = a->noncausal ? a->T - first : causal;
        if (causal <= 0) { memset(o, 0, sizeof(float) * (size_t)D); continue; } /* a padding query: zeros */
        /* a sliding window: the keys before it are masked, which ggml skips (flash) or weighs 0 (no flash) */
        const int lo = a->window && causal > a->window ? causal - a->window : 0;
        seen -= lo;
        memcpy(qr, a->q + b * a->q_seq + h * a->q_head + i * a->q_pos, sizeof(float) * (size_t)D);
        mlxcel_round_kv(qr, D, a->k_type); /* Q converted to K's vec_dot type */
        if (a->k_block) { /* q_to_vec_dot: the query quantized (in the keys' element order and rotation) */
            if (a->k_ggml_order) { to_ggml_dims(qr, qg, D); memcpy(qr, qg, sizeof(float) * (size_t)D); }
            mlxcel_kv_rotate(qr, D, a->k_rot);
            mlxcel_kv_quantize_row(kv_dot_type(a->k_type), qr, qq, D);
        } else if (a->flash && a->ggml_dims && a->k_type == KV_F16) {
            to_ggml_dims(qr, qg, D);
            memcpy(qr, qg, sizeof(float) * (size_t)D);
        }
        const struct kv_rows kw = rows_from(kr, lo), vw = rows_from(vr, lo);
        if (split) flash_split_row(a, qr, qq, kr, vr, lo, lo + seen, acc, o);
        else if (a->flash) flash_row(a, qr, qq, kw, vw, seen, acc, o);
        else plain_row(a, qr, qq, kw, vw, seen, p, acc + D, o);
        mlxcel_kv_rotate(o, D, a->v_rot); /* the values' rotation undone on the output (H H = I) */
    }
}

/* mlxcel_attention's arguments and result, computed as ggml-cpu computes them over a cache of k_type keys and
 * v_type values (KV_F32, KV_F16, KV_BF16; the caches already hold values of those types), with flash attention
 * on or off, for queries that came in a ubatch of `ubatch` rows. Returns 0, or -1 when out of memory. */
/* an f16-stored cache's visible keys or values [B, Hkv, T, D] as float32 (contiguous), for the f32 math */
static float *widen(const uint16_t *x, long seq, long head, long pos, int B, int Hkv, int T, int D) {
    float *out = malloc(sizeof(float) * (size_t)B * Hkv * T * D);
    if (!out) return NULL;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < Hkv; h++)
            for (int t = 0; t < T; t++)
                mlxcel_load_f16(out + (((size_t)b * Hkv + h) * T + t) * D, x + b * seq + h * head + t * pos, D);
    return out;
}

int mlxcel_attention_kv(const float *q, long q_seq, long q_head, long q_pos, const void *k, long k_seq, long k_head,
                        long k_pos, const void *v, long v_seq, long v_head, long v_pos, int B, int H, int Hkv, int L,
                        int T, int D, float scale, const int *first, float *out, int k_type, int v_type, int flash,
                        int ubatch) {
    const struct attention_mask none = {0, 0.0f};
    return mlxcel_attention_masked(q, q_seq, q_head, q_pos, k, k_seq, k_head, k_pos, v, v_seq, v_head, v_pos, B, H, Hkv,
                                   L, T, D, scale, first, out, k_type, v_type, flash, ubatch, none);
}

/* mlxcel_attention_kv with a sliding window and capped scores (Gemma 2 and 3: mask.window, mask.softcap), image rows
 * that see each other (mask.noncausal) and a one-row ubatch's key split (mask.split). These run in the per-row
 * loops whatever the cache's types (the tiled path of 64 rows or more in tiled_rows where the sums are ggml's,
 * else as the one-chunk path with its sums in f32), and f32 math without flash attention as plain_row computes
 * it. */
int mlxcel_attention_masked(const float *q, long q_seq, long q_head, long q_pos, const void *k, long k_seq,
                            long k_head, long k_pos, const void *v, long v_seq, long v_head, long v_pos, int B, int H,
                            int Hkv, int L, int T, int D, float scale, const int *first, float *out, int k_type,
                            int v_type, int flash, int ubatch, struct attention_mask mask) {
    const int masked = mask.window > 0 || mask.softcap != 0.0f || mask.noncausal;
    const int ggml_dims = (flash & ATTENTION_GGML_DIMS) && D % 2 == 0;
    const int ggml_sums = ggml_dims || (flash & ATTENTION_GGML_SUMS);
    const int k_half = (flash & ATTENTION_K_F16) != 0, v_half = (flash & ATTENTION_V_F16) != 0;
    const int k_ggml_order = (flash & ATTENTION_K_GGML_ORDER) != 0;
    const int k_rot = (flash & ATTENTION_K_ROT) ? mlxcel_kv_rotation(k_type, D, 1) : 0;
    const int v_rot = (flash & ATTENTION_V_ROT) ? mlxcel_kv_rotation(v_type, D, 0) : 0;
    const int k_block = kv_is_block(k_type), v_block = kv_is_block(v_type);
    if ((k_block || v_block) && D % 32) return -1; /* (ggml's blocks: 32 values) */
    flash &= 1;
    int cast = 0; /* b10621's build_attn_mha casts an f32 K or V to f16 for flash attention */
    if (flash && k_type == KV_F32) k_type = KV_F16, cast |= 1;
    if (flash && v_type == KV_F32) v_type = KV_F16, cast |= 2;
    const int f32 = !flash && k_type == KV_F32 && v_type == KV_F32;
    /* (the tiled path over a cast cache reads f16 values; here it reads the f32 ones: f32 rounding apart) */
    /* (block types: never tiled, never split over the keys: one chunk per row, as ggml-cpu's dispatch) */
    const int tiled = flash && k_type == v_type && k_type != KV_BF16 && !k_block && ubatch >= FA_TILE_Q;
    /* without flash attention, a step in ggml's order over an f32 or f16 cache: every sum as b10621's */
    const int ggml_plain = !flash && ggml_sums && vector_ok() && k_type != KV_BF16 && v_type != KV_BF16 && !v_block;
    /* the tiled path in ggml's order where the model's sums are (tiled_rows); else BLAS's f32 sums */
    const int tiled_exact = tiled && ggml_sums && vector_ok() && D % 8 == 0; /* (tiles_exact's test) */
    if ((f32 || tiled) && !masked && !ggml_plain && !tiled_exact) {
        if (!k_half && !v_half)
            return mlxcel_attention(q, q_seq, q_head, q_pos, k, k_seq, k_head, k_pos, v, v_seq, v_head, v_pos, B, H,
                                    Hkv, L, T, D, scale, first, out);
        float *kw = k_half ? widen(k, k_seq, k_head, k_pos, B, Hkv, T, D) : NULL;
        float *vw = v_half ? widen(v, v_seq, v_head, v_pos, B, Hkv, T, D) : NULL;
        int status = -1;
        if ((kw || !k_half) && (vw || !v_half)) {
            const long seq = (long)Hkv * T * D, head = (long)T * D;
            status = mlxcel_attention(q, q_seq, q_head, q_pos, kw ? kw : k, kw ? seq : k_seq, kw ? head : k_head,
                                      kw ? D : k_pos, vw ? vw : v, vw ? seq : v_seq, vw ? head : v_head,
                                      vw ? D : v_pos, B, H, Hkv, L, T, D, scale, first, out);
        }
        free(kw);
        free(vw);
        return status;
    }
    struct kv_args a = {q, k, v, q_seq, q_head, q_pos, k_seq, k_head, k_pos, v_seq, v_head, v_pos,
                        H, Hkv, L, T, D, k_type, v_type, flash, cast, ggml_dims, ggml_sums, k_half, v_half,
                        k_block, v_block, k_ggml_order, k_rot, v_rot, ggml_plain, ubatch, tiled, mask.window,
                        mask.softcap, mask.noncausal, mask.split, scale, first, out, 0};
#if KV_X86
    if (tiles_exact(&a)) {
        mlxcel_pool_run(kv_tile, &a, B * H * ((L + FA_TILE_Q - 1) / FA_TILE_Q), 1);
        return a.failed ? -1 : 0;
    }
#endif
    mlxcel_pool_run(kv_head, &a, B * H, 1);
    return a.failed ? -1 : 0;
}

/* An encoder's self-attention as ggml's flash_attn_ext computes it over F16-cast K and V without a mask (CLIP's
 * tower: every query sees every key): q, k, v and out are n rows of H heads of D values (row-major, n x H*D).
 * A row's sums are its own: one-chunk below 64 rows (GGML_FA_TILE_Q), tiled from 64 on (tiled_rows; ggml without
 * a mask adds nothing where mlxcel's non-causal mask adds zeros). */
int mlxcel_encoder_attention(const float *q, const float *k, const float *v, int n, int H, int D, float scale,
                             float *out) {
    const long row = (long)H * D;
    const struct attention_mask all = {0, 0.0f, 1, 0}; /* every row sees every row */
    return mlxcel_attention_masked(q, 0, D, row, k, 0, D, row, v, 0, D, row, 1, H, H, n, n, D, scale, NULL, out,
                                   KV_F32, KV_F32, 1 | ATTENTION_GGML_SUMS, n, all);
}
