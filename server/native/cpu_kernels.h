/* What server/native/cpu_kernels.c shares with server/native/decode_step.c (one shared object). The
 * exported mlxcel_* functions are server/cpu_kernels.py's; the hidden ones stay inside the object. */
#ifndef MLXCEL_CPU_KERNELS_H
#define MLXCEL_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#define HIDDEN __attribute__((visibility("hidden")))
/* a function compiled twice, for x86-64 with FMA (its fmaf calls one instruction, not a call into libm: rope over a
 * prompt spent a tenth of its time there) and for any x86-64, picked at load; fmaf's result is the same either way */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FMA_CLONES __attribute__((target_clones("fma", "default")))
#else
#define FMA_CLONES
#endif

enum { ROPE_MAX_HALF = 512 }; /* rope turns at most 2 * 512 dimensions of a head */

/* the interposed product: few-row products on mlxcel's kernels (quantized twins included), others the BLAS's */
void cblas_sgemm(int order, int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a, int lda,
                 const float *b, int ldb, float beta, float *c, int ldc);
int mlxcel_attention(const float *q, long q_seq, long q_head, long q_pos, const float *k, long k_seq, long k_head,
                     long k_pos, const float *v, long v_seq, long v_head, long v_pos, int B, int H, int Hkv, int L,
                     int T, int D, float scale, const int *first, float *out);
/* the KV cache's types (server/models/kv_numerics.py) and attention over them as ggml-cpu computes it
 * (attention_ggml.c): mlxcel_attention's arguments, then the key and value types, flash attention on (1) or
 * off (0) and the rows of the ubatch the queries came in */
enum { KV_F32 = 0, KV_F16 = 1, KV_BF16 = 2 };
/* with flash attention (the flash argument's bit 0), bit 1: q and k dot products in a llama GGUF's element
 * order, as b10621 sums them over its permuted heads (a step in ggml's order sets it) */
enum { ATTENTION_GGML_DIMS = 2 };
/* bit 4: with flash attention, q and k dot products summed as ggml's vec_dot_f16 sums them, in the head's own
 * element order (the families whose GGUF keeps HF's order; ATTENTION_GGML_DIMS implies it) */
enum { ATTENTION_GGML_SUMS = 16 };
/* bits 2 and 3: the keys, the values stored as f16 (16 bits each, the cache's own type; strides in elements) */
enum { ATTENTION_K_F16 = 4, ATTENTION_V_F16 = 8 };
/* bit 5: block-quantized keys were quantized in a llama GGUF's element order (b10621's K rows of an interleaved
 * model): each query is put in that order before it is quantized for the dot products */
enum { ATTENTION_K_GGML_ORDER = 32 };
/* the block-quantized cache types (kv_quant.c), after KV_BF16: rows of D values as ggml stores them (D / 32
 * blocks; strides in bytes), written with the type's from_float, read with its to_float, keys dotted with a
 * query quantized to the type's vec_dot type (KV_Q8_0, or KV_Q8_1 for KV_Q4_1 and KV_Q5_1) */
enum { KV_Q8_0 = 3, KV_Q4_0, KV_Q4_1, KV_IQ4_NL, KV_Q5_0, KV_Q5_1, KV_Q8_1 };
static inline int kv_is_block(int type) { return type >= KV_Q8_0 && type <= KV_Q5_1; }
static inline int kv_dot_type(int type) { return type == KV_Q4_1 || type == KV_Q5_1 ? KV_Q8_1 : KV_Q8_0; }
/* bits 6 and 7: b10621's Walsh-Hadamard rotation of block-quantized keys (and the queries), of block-quantized
 * values (and the attention's output), llama_kv_cache's attn_rot_k / attn_rot_v (kv_rotation_*) */
enum { ATTENTION_K_ROT = 64, ATTENTION_V_ROT = 128 };
/* x[0..n) through ggml-cpu's fast Walsh-Hadamard transform in chunks of `rot` values (ggml_compute_forward_fwht:
 * each value scaled by 1 / sqrt(rot), then the butterflies, stage by stage) */
void mlxcel_kv_rotate(float *x, long n, int rot);
/* the chunk b10621 rotates a head of D values in (0: none): for keys the largest power of two dividing D, for
 * values 64, where the type is a block type and D a multiple of 64 (and $LLAMA_ATTN_ROT_DISABLE is not set) */
int mlxcel_kv_rotation(int type, int D, int keys);
long mlxcel_kv_block_bytes(int type);
long mlxcel_kv_row_bytes(int type, long n);
int mlxcel_kv_quantize_row(int type, const float *x, void *out, long n);
int mlxcel_kv_dequantize_row(int type, const void *in, float *y, long n);
float mlxcel_kv_dot(int type, const void *k, const void *q, long n);
void mlxcel_store_f16(uint16_t *dst, const float *x, long n);
void mlxcel_load_f16(float *dst, const uint16_t *h, long n);
void mlxcel_round_kv(float *x, long n, int type);
int mlxcel_attention_kv(const float *q, long q_seq, long q_head, long q_pos, const void *k, long k_seq, long k_head,
                        long k_pos, const void *v, long v_seq, long v_head, long v_pos, int B, int H, int Hkv, int L,
                        int T, int D, float scale, const int *first, float *out, int k_type, int v_type, int flash,
                        int ubatch);
/* a sliding window (keys p - window + 1 .. p for a query at p; 0: none) and capped scores (softcap tanh(s /
 * softcap); 0: none), as b10621's Gemma 2 and 3 attend */
struct attention_mask {
    int window;
    float softcap;
    int noncausal; /* every query sees the chunk's later keys too (b10621 decodes a Gemma 3 image so); 0: causal */
    int split;     /* a one-row ubatch: past 512 cells b10621 splits the keys over its threads (mlxcel_attention_split) */
};
/* b10621's generation thread count, over which a one-row step's flash attention splits its keys (0: no split) */
void mlxcel_attention_split(int parts);
int mlxcel_attention_masked(const float *q, long q_seq, long q_head, long q_pos, const void *k, long k_seq,
                            long k_head, long k_pos, const void *v, long v_seq, long v_head, long v_pos, int B, int H,
                            int Hkv, int L, int T, int D, float scale, const int *first, float *out, int k_type,
                            int v_type, int flash, int ubatch, struct attention_mask mask);
void mlxcel_swiglu(const float *g, const float *u, long rows, long width, long ld, float *out);

/* fn(ctx, t) for t in [0, tasks), spread over the one pool of threads when parallel is set and it is free */
typedef void (*mlxcel_task_fn)(void *ctx, int task);
HIDDEN void mlxcel_pool_run(mlxcel_task_fn fn, void *ctx, int tasks, int parallel);
/* the calling thread computes a prompt's rows (1: the pool's -tb threads) or not (0: -t's); the previous value */
HIDDEN int mlxcel_pool_batch(int on);

/* a thread's own scratch floats, kept between calls: one buffer per use that can be live at once */
enum { BUFFER_SUMS, BUFFER_SCORES, BUFFER_PREFILL, BUFFER_DEQUANT, BUFFER_ACTS, BUFFER_PANEL, THREAD_BUFFERS };
HIDDEN float *mlxcel_thread_floats(int which, size_t floats);

/* rope's cos and sin at a position for pairs 0..half-1, as ggml's rope_yarn computes them; yarn: NULL, or
 * {ext_factor, attn_factor, corr_dims[0], corr_dims[1]} (YaRN's mix and magnitude) */
/* ff: per-pair frequency divisors (a GGUF's rope_freqs, ggml_rope_ext's freq_factors), or NULL */
HIDDEN void rope_angles(int position, int half, int dims, float base, float scale, const float *yarn,
                        const float *ff, float *c, float *s);

/* rows of a quantized weight registered under `key` dequantized into out (n x K floats): 0, or -1 when none is */
int mlxcel_quant_rows(const float *key, const int *rows, int n, float *out);
/* whether key is a virtual twin's (no float weight behind it: a product over it takes all its columns) */
int mlxcel_is_virtual(const float *key);

/* ggml's K-quant types (GGML_TYPE_* numbers), kept as a GGUF stores them (ggml_blocks.c) */
enum { GGML_Q2_K = 10, GGML_Q3_K = 11, GGML_Q4_K = 12, GGML_Q5_K = 13, GGML_Q6_K = 14 };
/* legacy block types (32 values a block) kept as the file's blocks too (int8_dot.c dot_legacy) */
enum { GGML_Q5_0 = 6, GGML_Q5_1 = 7, GGML_Q8_0 = 8 };
/* a GGUF's F16 weights kept as the file's halves, read through the same table (a row is 2 K bytes) */
enum { GGML_F16 = 1 };
HIDDEN long mlxcel_ggml_row_bytes(int type, int K);
HIDDEN void mlxcel_ggml_row(int type, const uint8_t *x, float *y, int K);
HIDDEN float mlxcel_half(uint16_t h); /* ggml_compute_fp16_to_fp32 */

/* a quantized weight as int8_dot.c reads it: N rows of row_bytes, either a ggml K-quant type's blocks (ggml) or
 * MLX's affine groups (ggml 0: bits 4 or 8, `group` values a scale and a bias, N x K / group of each) */
struct int8_weight {
    const uint8_t *q;
    const float *scales, *biases;
    int K, N, bits, group, ggml;
    long row_bytes;
};
/* whether int8_dot.c reads the weight; C = alpha A W^T + beta C for M rows of A, the activations quantized to 8
 * bits as ggml's vec_dot_type, over `threads` of the pool: 1, or 0 where it does not apply */
HIDDEN int mlxcel_int8_reads(const struct int8_weight *w);
/* whether a prompt's products take int8_dot.c's AVX-512 VNNI panels (the affine groups' too) */
int mlxcel_int8_vnni(void);
HIDDEN int mlxcel_int8_gemm(const struct int8_weight *w, int M, float alpha, const float *x, int ldx, float beta,
                            float *c, int ldc, int threads);

/* products summed in ggml-cpu's order over N x K weights, as a ubatch of `ubatch` rows sums them (tinyBLAS's
 * from 2 rows, vec_dot's for 1: ggml_order.c): 0, or -1 where it does not apply */
HIDDEN int mlxcel_ggml_gemm(int M, int N, int K, const float *x, long ldx, const float *wt, long ldw, float *y,
                            long ldy, int accumulate, int ubatch);

#endif
