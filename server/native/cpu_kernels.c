/* mlxcel's CPU kernels for MLX on Linux, loaded ahead of the BLAS (server/blas.py, server/cpu_kernels.py).
 *
 * 1. cblas_sgemm for few-row products. MLX's CPU matmul calls cblas_sgemm for every product. A decode step's
 *    products have one row per sequence (M <= 16), where OpenBLAS's GEMM and GEMV reach a third of the memory
 *    bandwidth. Here each weight is streamed once, on every core, with AVX2/FMA; a dequantized weight with a
 *    registered quantized twin is read at 4 or 8 bits instead. Every output element is summed in the same
 *    order whatever M or the thread: a sequence decoded with others gets bitwise the logits it gets alone.
 *    Other products go to the real cblas_sgemm, their rows cut over the pool when the BLAS runs one thread.
 * 2. Causal attention (the scores' softmax with a vectorized exp; a batch's rows from their left padding; a
 *    prompt's rows each summed as a decode step's row), the SwiGLU gate and rope: MLX's CPU exp and sigmoid
 *    take ~15-20 ns an element on x86, most of a prefill's time, and its CPU rope is a chain of fallbacks.
 *
 * One pool of threads serves every caller. Built once into the cache with the C compiler; the AVX2 paths are
 * chosen at run time, the rest falls back to the BLAS and plain C. */
#define _GNU_SOURCE /* pthread_setaffinity_np, CPU_SET, SCHED_BATCH */
#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <unistd.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#if defined(__x86_64__)
#include "ggml_simd.h" /* ggml_expf8: ggml_v_expf, for SwiGLU */
#endif
#if defined(__x86_64__)
#include <immintrin.h>
#define X86 1
#define cpu_relax() _mm_pause()
#else
#define X86 0
#define cpu_relax() ((void)0)
#endif

enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 };
enum { SMALL_M = 16 };            /* up to this many rows take the few-row kernels */
enum { PARALLEL_WORK = 1 << 15 }; /* N * K below this runs on one thread: waking the others costs more */

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *, int, float,
                         float *, int);

static sgemm_fn real_sgemm;
static long small_calls;
static long blas_calls; /* products handed to the BLAS (a split product once) */
static int have_avx2;

/* ---- one pool of threads for every caller ------------------------------------------------------------------
 * (OpenMP gives each calling thread its own team; here MLX's stream thread and the engine's thread both call
 * in, and two spinning teams on two cores slowed everything.) A job's tasks are claimed one at a time, by the
 * caller and the workers alike, from one atomic word (the job's id, its task count, the next task): a worker
 * the scheduler has not run yet leaves its share to the others, and the caller waits only for tasks already
 * under way, yielding its core while it does. (Each task's result depends on the task alone, never on the
 * thread.) With every task handed out by turn, a busy machine (another process on the cores, the HTTP
 * threads) made a decode step wait a whole time slice per product: 17 ms became ~400. Workers spin a little
 * after a job (a decode step's products come every few microseconds), then sleep. A call that finds the pool
 * busy runs its tasks alone. */
typedef void (*task_fn)(void *ctx, int task);

enum { CLAIM_BITS = 20, MAX_TASKS = (1 << CLAIM_BITS) - 1, JOB_SHIFT = 2 * CLAIM_BITS };

static struct {
    pthread_mutex_t busy, lock;
    pthread_cond_t wake;
    int n;                   /* threads, the caller included */
    atomic_int active;       /* the threads the current job may use (workers past it sit it out) */
    task_fn fn;
    void *ctx;
    atomic_long generation;  /* the current job's id */
    _Atomic uint64_t claim;  /* job id << 40 | tasks << 20 | next task */
    atomic_int done;         /* tasks of the current job finished */
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 1, 1};

enum { SPIN = 20000, MAX_THREADS = 64 };

/* -t / -tb (0: every thread of the pool), --poll's spin rounds (server/cpu_threads.py: mlxcel_pool_config) */
static struct {
    int decode, batch;
    int draft_decode, draft_batch; /* -td / -tbd (0: the target's; < 0: every thread) */
    atomic_int spins;
} cfg = {0, 0, 0, 0, SPIN};
static pthread_t workers[MAX_THREADS];
static _Thread_local int batch_phase; /* the calling thread computes a prompt's rows (-tb's threads) */
static _Thread_local int draft_phase; /* the calling thread runs the draft model (-td / -tbd's threads) */

/* the threads a job of the calling thread may use */
static int pool_width(void) {
    const int own = batch_phase ? cfg.batch : cfg.decode, draft = batch_phase ? cfg.draft_batch : cfg.draft_decode;
    const int want = draft_phase && draft != 0 ? draft : own;
    return want > 0 && want < pool.n ? want : pool.n;
}

/* claim and run tasks of job `job` until none is left (or another job has begun) */
static void run_tasks(long job) {
    const uint64_t id = (uint64_t)job & ((1u << 24) - 1), mask = MAX_TASKS;
    for (;;) {
        uint64_t c = atomic_load_explicit(&pool.claim, memory_order_acquire);
        if ((c >> JOB_SHIFT) != id || (c & mask) >= ((c >> CLAIM_BITS) & mask)) return;
        if (!atomic_compare_exchange_weak_explicit(&pool.claim, &c, c + 1, memory_order_acq_rel,
                                                   memory_order_acquire))
            continue;
        /* a task of this job was unclaimed, so the job is not over: fn and ctx are still its own */
        pool.fn(pool.ctx, (int)(c & mask));
        atomic_fetch_add_explicit(&pool.done, 1, memory_order_release);
    }
}

static void *pool_worker(void *arg) {
    const int index = (int)(long)arg;
    long seen = atomic_load_explicit(&pool.generation, memory_order_acquire);
    for (;;) {
        long g;
        int spins = 0;
        while ((g = atomic_load_explicit(&pool.generation, memory_order_acquire)) == seen) {
            if (++spins < atomic_load_explicit(&cfg.spins, memory_order_relaxed)) { /* pauses, then the core */
                if (spins & 15) cpu_relax();
                else sched_yield();
                continue;
            }
            pthread_mutex_lock(&pool.lock);
            while ((g = atomic_load(&pool.generation)) == seen) pthread_cond_wait(&pool.wake, &pool.lock);
            pthread_mutex_unlock(&pool.lock);
            break;
        }
        seen = g;
        if (index < atomic_load_explicit(&pool.active, memory_order_acquire)) run_tasks(g);
    }
    return 0;
}

/* workers [from, to) started; the pool's size after */
static int pool_grow(int from, int to) {
    int n = from;
    for (int w = from; w < to && w < MAX_THREADS; w++, n++) {
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        const int failed = pthread_create(&workers[w], &attr, pool_worker, (void *)(long)w) != 0;
        pthread_attr_destroy(&attr);
        if (failed) break;
    }
    return n;
}

static void pool_start(void) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    const char *env = getenv("MLXCEL_CPU_THREADS");
    if (env && atoi(env) > 0) cpus = atoi(env);
    int n = cpus < 1 ? 1 : cpus > MAX_THREADS ? MAX_THREADS : (int)cpus;
    pool.n = pool_grow(1, n);
    atomic_store(&pool.active, pool.n);
}

/* ggml's thread priorities (ggml-cpu.c ggml_thread_apply_priority, Linux): low SCHED_BATCH, medium, high and
 * realtime SCHED_FIFO at 40, 80 and 90; normal keeps the inherited policy */
static void apply_priority(pthread_t t, int prio) {
    if (prio == 0) return;
    struct sched_param p = {0};
    int policy = SCHED_OTHER;
    switch (prio) {
    case -1: policy = SCHED_BATCH; break;
    case 1: policy = SCHED_FIFO, p.sched_priority = 40; break;
    case 2: policy = SCHED_FIFO, p.sched_priority = 80; break;
    case 3: policy = SCHED_FIFO, p.sched_priority = 90; break;
    default: return;
    }
    const int err = pthread_setschedparam(t, policy, &p);
    if (err != 0) fprintf(stderr, "warn: failed to set thread priority %d : %s (%d)\n", prio, strerror(err), err);
}

/* -t, -tb (<= 0: every thread), -C / -Cr's mask (n_mask flags by CPU; 0: none) placed as ggml places its
 * threadpool's workers (strict: one CPU each, the mask's in turn; else the whole mask), --prio and --poll: the
 * pool grown to the larger count, its workers placed and prioritised. Returns the pool's threads. */
int mlxcel_pool_config(int decode, int batch, const unsigned char *mask, int n_mask, int strict, int prio, int poll) {
    const int want = decode > batch ? decode : batch;
    if (want > pool.n) pool.n = pool_grow(pool.n, want);
    atomic_store(&pool.active, pool.n);
    cfg.decode = decode, cfg.batch = batch;
    atomic_store(&cfg.spins, (int)((long)SPIN * (poll < 0 ? 0 : poll > 100 ? 100 : poll) / 50));
    int next = 0; /* ggml_thread_cpumask_next's iterator */
    for (int w = 1; w < pool.n; w++) {
        if (n_mask > 0) {
            cpu_set_t set;
            CPU_ZERO(&set);
            if (strict) {
                for (int i = 0; i < n_mask; i++) {
                    const int cpu = (next + i) % n_mask;
                    if (mask[cpu]) { CPU_SET(cpu, &set); next = cpu + 1; break; }
                }
            } else {
                for (int cpu = 0; cpu < n_mask && cpu < CPU_SETSIZE; cpu++)
                    if (mask[cpu]) CPU_SET(cpu, &set);
            }
            const int err = pthread_setaffinity_np(workers[w], sizeof set, &set);
            if (err != 0) fprintf(stderr, "warn: failed to set affinity mask : %s (%d)\n", strerror(err), err);
        }
        apply_priority(workers[w], prio);
    }
    return pool.n;
}

/* one worker's CPUs (n flags by CPU: --numa's placement, ggml's set_numa_thread_affinity); 0, or -1 for no
 * such worker or a failed placement (warned in ggml's words) */
int mlxcel_pool_place(int worker, const unsigned char *mask, int n) {
    if (worker < 1 || worker >= pool.n) return -1;
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int cpu = 0; cpu < n && cpu < CPU_SETSIZE; cpu++)
        if (mask[cpu]) CPU_SET(cpu, &set);
    const int err = pthread_setaffinity_np(workers[worker], sizeof set, &set);
    if (err != 0) fprintf(stderr, "warning: pthread_setaffinity_np() failed: %s\n", strerror(err));
    return err != 0 ? -1 : 0;
}

/* --spec-draft-threads / --spec-draft-threads-batch (0: the target's -t / -tb; < 0: every thread), the pool
 * grown to them */
int mlxcel_pool_draft_config(int decode, int batch) {
    const int want = decode > batch ? decode : batch;
    if (want > pool.n) pool.n = pool_grow(pool.n, want);
    atomic_store(&pool.active, pool.n);
    cfg.draft_decode = decode, cfg.draft_batch = batch;
    return pool.n;
}

/* the calling thread runs the draft model (1: the draft's thread counts) or not (0); the previous value */
int mlxcel_pool_draft(int on) {
    const int was = draft_phase;
    draft_phase = on;
    return was;
}

/* the calling thread computes a prompt's rows (1: -tb's threads) or not (0); the previous value */
HIDDEN int mlxcel_pool_batch(int on) {
    const int was = batch_phase;
    batch_phase = on;
    return was;
}

/* fn(ctx, t) for t in [0, tasks), spread over the pool when parallel is set and the pool is free */
static void pool_run(task_fn fn, void *ctx, int tasks, int parallel) {
    const int width = pool_width();
    if (!parallel || width == 1 || tasks < 2 || tasks > MAX_TASKS || pthread_mutex_trylock(&pool.busy) != 0) {
        for (int t = 0; t < tasks; t++) fn(ctx, t);
        return;
    }
    pool.fn = fn, pool.ctx = ctx;
    atomic_store_explicit(&pool.active, width, memory_order_relaxed); /* (published with the generation) */
    atomic_store_explicit(&pool.done, 0, memory_order_relaxed);
    long g = atomic_load_explicit(&pool.generation, memory_order_relaxed) + 1;
    atomic_store_explicit(&pool.claim, ((uint64_t)g & ((1u << 24) - 1)) << JOB_SHIFT | (uint64_t)tasks << CLAIM_BITS,
                          memory_order_release);
    pthread_mutex_lock(&pool.lock);
    atomic_store_explicit(&pool.generation, g, memory_order_release);
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.lock);
    run_tasks(g);
    for (int spins = 0; atomic_load_explicit(&pool.done, memory_order_acquire) < tasks; spins++) {
        if (spins < 2000) cpu_relax();
        else sched_yield(); /* a task still under way on a thread that lost its core: let it have one */
    }
    pthread_mutex_unlock(&pool.busy);
}

HIDDEN void mlxcel_pool_run(mlxcel_task_fn fn, void *ctx, int tasks, int parallel) {
    pool_run(fn, ctx, tasks, parallel);
}

/* Bind to the BLAS loaded with dlopen(handle), whose symbols carry `prefix` ("" for a system OpenBLAS,
 * "scipy_" for the scipy-openblas wheel's, which plain global binding cannot interpose); returns 0 when it
 * lacks <prefix>cblas_sgemm. With kernels 0 this cblas_sgemm only forwards: every product goes to the BLAS. */
int mlxcel_bind(void *handle, const char *prefix, int kernels) {
    char name[64];
    if (strlen(prefix) > sizeof name - sizeof "cblas_sgemm") return 0;
    strcpy(name, prefix);
    strcat(name, "cblas_sgemm");
    real_sgemm = (sgemm_fn)dlsym(handle, name);
    if (!kernels) return real_sgemm != 0;
#if X86
    __builtin_cpu_init();
    have_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
#endif
    if (real_sgemm && pool.n == 1) pool_start();
    return real_sgemm != 0;
}

long mlxcel_small_calls(void) { return small_calls; }
long mlxcel_blas_calls(void) { return __atomic_load_n(&blas_calls, __ATOMIC_RELAXED); }
int mlxcel_has_avx2(void) { return have_avx2; }
int mlxcel_threads(void) { return pool.n; }
/* the threads a job of the calling thread may use (-t's, or -tb's in a prompt) */
int mlxcel_pool_width(void) { return pool_width(); }

static inline float finish(float acc, float alpha, float beta, const float *c) {
    return beta == 0.0f ? alpha * acc : alpha * acc + beta * *c;
}

#if X86
#define AVX2 __attribute__((target("avx2,fma,f16c")))

/* ---- C = A B, B is K x N (row-major). The k range is cut into NN_PARTS fixed parts, each summed in k order
 * by one thread streaming its rows of B front to back (contiguous reads, what memory serves fastest); the
 * parts' sums are then added in one fixed order. The order depends on nothing but K: not on M, the thread
 * count or the columns. Columns go NN_COLS at a time, so a row's running sums stay in L1. ---- */
enum { NN_PARTS = 4, NN_COLS = 2048, NN_ROWS = 2 };

/* acc[r][0:w] += sum over k in [k0, k1) of a[r][k] * b[k][0:w], for mr (1 or 2) rows, four k at a time */
static inline __attribute__((always_inline)) AVX2 void nn_part(int mr, int k0, int k1, int w, const float *a,
                                                               int lda, const float *b, int ldb, float *acc,
                                                               int ldacc) {
    int w8 = w & ~7, k = k0;
    for (; k + 4 <= k1; k += 4) {
        const float *b0 = b + (size_t)k * ldb, *b1 = b0 + ldb, *b2 = b1 + ldb, *b3 = b2 + ldb;
        __m256 x[NN_ROWS][4];
        for (int r = 0; r < mr; r++)
            for (int i = 0; i < 4; i++) x[r][i] = _mm256_broadcast_ss(a + (size_t)r * lda + k + i);
        for (int j = 0; j < w8; j += 8) {
            __m256 v0 = _mm256_loadu_ps(b0 + j), v1 = _mm256_loadu_ps(b1 + j), v2 = _mm256_loadu_ps(b2 + j),
                   v3 = _mm256_loadu_ps(b3 + j);
            for (int r = 0; r < mr; r++) {
                float *p = acc + (size_t)r * ldacc + j;
                __m256 s = _mm256_loadu_ps(p);
                s = _mm256_fmadd_ps(x[r][0], v0, s);
                s = _mm256_fmadd_ps(x[r][1], v1, s);
                s = _mm256_fmadd_ps(x[r][2], v2, s);
                s = _mm256_fmadd_ps(x[r][3], v3, s);
                _mm256_storeu_ps(p, s);
            }
        }
        for (int j = w8; j < w; j++)
            for (int r = 0; r < mr; r++) {
                const float *ar = a + (size_t)r * lda + k;
                float s = acc[(size_t)r * ldacc + j];
                s = fmaf(ar[0], b0[j], s);
                s = fmaf(ar[1], b1[j], s);
                s = fmaf(ar[2], b2[j], s);
                s = fmaf(ar[3], b3[j], s);
                acc[(size_t)r * ldacc + j] = s;
            }
    }
    for (; k < k1; k++) {
        const float *bk = b + (size_t)k * ldb;
        for (int r = 0; r < mr; r++) {
            __m256 x = _mm256_broadcast_ss(a + (size_t)r * lda + k);
            float *p = acc + (size_t)r * ldacc;
            for (int j = 0; j < w8; j += 8)
                _mm256_storeu_ps(p + j, _mm256_fmadd_ps(x, _mm256_loadu_ps(bk + j), _mm256_loadu_ps(p + j)));
            for (int j = w8; j < w; j++) p[j] = fmaf(a[(size_t)r * lda + k], bk[j], p[j]);
        }
    }
}

/* One part's sums for all M rows, into acc (M x N, zeroed here) */
AVX2 static void nn_sums(int M, int N, int k0, int k1, const float *a, int lda, const float *b, int ldb,
                         float *acc) {
    memset(acc, 0, sizeof(float) * (size_t)M * N);
    for (int j0 = 0; j0 < N; j0 += NN_COLS) {
        int w = N - j0 < NN_COLS ? N - j0 : NN_COLS;
        /* rows of B in blocks that stay in L2 while every pair of A's rows goes over them */
        for (int kb = k0; kb < k1; kb += 32) {
            int ke = k1 - kb < 32 ? k1 : kb + 32;
            for (int m = 0; m < M; m += NN_ROWS) {
                if (M - m >= 2) nn_part(2, kb, ke, w, a + (size_t)m * lda, lda, b + j0, ldb, acc + (size_t)m * N + j0, N);
                else nn_part(1, kb, ke, w, a + (size_t)m * lda, lda, b + j0, ldb, acc + (size_t)m * N + j0, N);
            }
        }
    }
}

/* the calling thread's buffer `which` (THREAD_BUFFERS of them), kept between calls and grown to `floats` */
HIDDEN float *mlxcel_thread_floats(int which, size_t floats) {
    static __thread float *buf[THREAD_BUFFERS];
    static __thread size_t cap[THREAD_BUFFERS];
    if (floats > cap[which]) {
        free(buf[which]);
        buf[which] = aligned_alloc(64, ((floats * sizeof(float)) + 63) & ~(size_t)63);
        cap[which] = buf[which] ? floats : 0;
    }
    return buf[which];
}

static float *nn_buffer(size_t floats) { return mlxcel_thread_floats(BUFFER_SUMS, floats); }

struct gemm_args {
    int M, N, K;
    float alpha, beta;
    const float *a, *b;
    int lda, ldb, ldc;
    float *c, *sums;
    int tiles, per_task;
};

AVX2 static void nn_task(void *ctx, int p) {
    struct gemm_args *g = ctx;
    nn_sums(g->M, g->N, (int)((long)g->K * p / NN_PARTS), (int)((long)g->K * (p + 1) / NN_PARTS), g->a, g->lda,
            g->b, g->ldb, g->sums + (size_t)p * g->M * g->N);
}

AVX2 static void small_nn(int M, int N, int K, float alpha, const float *a, int lda, const float *b, int ldb,
                          float beta, float *c, int ldc) {
    size_t part = (size_t)M * N;
    float *sums = nn_buffer(NN_PARTS * part);
    if (!sums) { real_sgemm(ROW_MAJOR, NO_TRANS, NO_TRANS, M, N, K, alpha, a, lda, b, ldb, beta, c, ldc); return; }
    struct gemm_args g = {M, N, K, alpha, beta, a, b, lda, ldb, ldc, c, sums, 0, 0};
    pool_run(nn_task, &g, NN_PARTS, (long)N * K >= PARALLEL_WORK);
    for (int m = 0; m < M; m++) {
        const float *s0 = sums + (size_t)m * N, *s1 = s0 + part, *s2 = s1 + part, *s3 = s2 + part;
        float *cm = c + (size_t)m * ldc;
        for (int j = 0; j < N; j++) cm[j] = finish((s0[j] + s1[j]) + (s2[j] + s3[j]), alpha, beta, cm + j);
    }
}

/* ---- C = A B^T, B is N x K (row-major): dot products, 8 lanes over k, reduced in one fixed order. ---- */
AVX2 static inline float hsum(__m256 v) {
    float l[8];
    _mm256_storeu_ps(l, v);
    return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

static inline __attribute__((always_inline)) AVX2 void nt_tile(int mr, int nr, int K, const float *a, int lda,
                                                               const float *b, int ldb, float *c, int ldc,
                                                               float alpha, float beta) {
    __m256 acc[4][8];
    for (int r = 0; r < mr; r++)
        for (int j = 0; j < nr; j++) acc[r][j] = _mm256_setzero_ps();
    int k8 = K & ~7;
    for (int k = 0; k < k8; k += 8) {
        __m256 bj[8];
        if (!(k & 15)) /* the next tile's rows: the memory serves several strided streams better when asked */
            for (int j = 0; j < nr; j++) _mm_prefetch((const char *)(b + (size_t)(j + nr) * ldb + k), _MM_HINT_T0);
        for (int j = 0; j < nr; j++) bj[j] = _mm256_loadu_ps(b + (size_t)j * ldb + k);
        for (int r = 0; r < mr; r++) {
            __m256 x = _mm256_loadu_ps(a + (size_t)r * lda + k);
            for (int j = 0; j < nr; j++) acc[r][j] = _mm256_fmadd_ps(x, bj[j], acc[r][j]);
        }
    }
    for (int r = 0; r < mr; r++)
        for (int j = 0; j < nr; j++) {
            float s = hsum(acc[r][j]);
            for (int k = k8; k < K; k++) s = fmaf(a[(size_t)r * lda + k], b[(size_t)j * ldb + k], s);
            float *cr = c + (size_t)r * ldc + j;
            *cr = finish(s, alpha, beta, cr);
        }
}

/* columns j0..j1 - 1 of C for all M rows: tiles of 4 rows x 3 columns (12 sums in registers over the k range),
 * the last columns one at a time; one row takes 8 columns at a time (8 weight rows streamed at once) */
#define NT_TILES(NR)                                                                                           \
    for (int m = 0; m < M; m += 4) {                                                                           \
        int mr = M - m < 4 ? M - m : 4;                                                                        \
        const float *am = g->a + (size_t)m * g->lda, *bj = g->b + (size_t)j * g->ldb;                          \
        float *cm = g->c + (size_t)m * g->ldc + j;                                                             \
        if (mr == 4) nt_tile(4, NR, K, am, g->lda, bj, g->ldb, cm, g->ldc, g->alpha, g->beta);                 \
        else if (mr == 3) nt_tile(3, NR, K, am, g->lda, bj, g->ldb, cm, g->ldc, g->alpha, g->beta);            \
        else if (mr == 2) nt_tile(2, NR, K, am, g->lda, bj, g->ldb, cm, g->ldc, g->alpha, g->beta);            \
        else nt_tile(1, NR, K, am, g->lda, bj, g->ldb, cm, g->ldc, g->alpha, g->beta);                         \
    }

AVX2 static void nt_range(const struct gemm_args *g, int j0, int j1) {
    int M = g->M, K = g->K, j = j0;
    if (M == 1)
        for (; j + 8 <= j1; j += 8)
            nt_tile(1, 8, K, g->a, g->lda, g->b + (size_t)j * g->ldb, g->ldb, g->c + j, g->ldc, g->alpha, g->beta);
    for (; j + 3 <= j1; j += 3) { NT_TILES(3) }
    for (; j < j1; j++) { NT_TILES(1) }
}
#undef NT_TILES

AVX2 static void nt_task(void *ctx, int task) {
    struct gemm_args *g = ctx;
    int j0 = task * g->per_task * 4, j1 = (task + 1) * g->per_task * 4;
    nt_range(g, j0 < g->N ? j0 : g->N, j1 < g->N ? j1 : g->N);
}

AVX2 static void small_nt(int M, int N, int K, float alpha, const float *a, int lda, const float *b, int ldb,
                          float beta, float *c, int ldc) {
    int tiles = (N + 3) / 4, tasks = 4 * pool_width() < tiles ? 4 * pool_width() : tiles;
    struct gemm_args g = {M, N, K, alpha, beta, a, b, lda, ldb, ldc, c, 0, tiles, (tiles + tasks - 1) / tasks};
    pool_run(nt_task, &g, tasks, (long)N * K >= PARALLEL_WORK);
}
#endif

/* ---- few-row products over a weight's quantized twin --------------------------------------------------------
 * A checkpoint quantized with MLX's affine scheme (groups of 32 or 64, 4 or 8 bits: w = q * scale + bias) is
 * served either dequantized, its quantized weights kept too and registered here against the float weight they
 * equal, or quantized only (a "virtual" twin: the key a product passes stands for a float weight that does not
 * exist). A few-row product over a registered weight reads the quantized one: a fifth of the bytes (a decode
 * step is memory-bound). y[m][j] = sum over groups g of scale[j][g] * (sum over k in g of x[m][k] q[j][k]) +
 * bias[j][g] * (sum over k in g of x[m][k]). Each output is summed in the same order whatever M: a row decoded
 * alone or batched gets bitwise the same result. A product of more rows over a virtual twin dequantizes the
 * weight a panel of rows at a time (exactly: q * scale + bias) and hands each panel to the BLAS. */
/* QUANT_SLOTS: a twin per layer, and per expert of a mixture (Qwen3-30B-A3B: 48 layers x 128 experts x 3) */
enum { QGROUP = 32, QUANT_SLOTS = 65536, PANEL_BITS = 32, PANEL = 24, PANEL_VECTORS = PANEL / 8 };
enum { DEQUANT_ROWS = 256 }; /* at most the rows of a virtual twin dequantized for one BLAS call */

struct quant_weight {
    const float *f32; /* the float weight MLX passes to cblas_sgemm */
    int trans, K, N;  /* as it is passed: K x N (trans 0, a transposed layer) or N x K (trans 1, tied embedding) */
    const uint32_t *q; /* N rows of K values, packed little end first */
    const float *scales, *biases; /* N x K / 32 */
    int bits;         /* 4 or 8; PANEL_BITS: a float twin in column panels (panels, below) */
    float *panels;
    int group;        /* 32 or 64 values a scale */
    int virt;         /* no float weight behind the key: every product reads the twin */
    int ggml;         /* a ggml K-quant type (q: its blocks, row_bytes a row), 0 for MLX's affine scheme */
    long row_bytes;
    int int8;         /* few-row products quantize the activations to 8 bits, as ggml does (a GGUF's weight:
                         mlxcel_quant_int8; int8_dot.c), where int8_dot.c reads the format */
};

static struct quant_weight quant_table[QUANT_SLOTS];
static pthread_mutex_t quant_lock = PTHREAD_MUTEX_INITIALIZER;
static long quant_calls;
static int split_rows; /* mlxcel_split_rows: the BLAS runs single-threaded, products split over the pool */

static size_t quant_slot(const float *f32) { return ((size_t)f32 >> 6) * 0x9E3779B97F4A7C15ull % QUANT_SLOTS; }

/* Returns 0, or -1 when the table is full or the format is not one this kernel reads (nothing registered). */
/* Enter a twin (replacing the float weight's earlier one); 0, or -1 when the table is full */
static int table_put(struct quant_weight entry) {
    pthread_mutex_lock(&quant_lock);
    for (size_t i = 0, s = quant_slot(entry.f32); i < QUANT_SLOTS; i++, s = (s + 1) % QUANT_SLOTS)
        if (quant_table[s].f32 == 0 || quant_table[s].f32 == entry.f32) {
            quant_table[s] = entry;
            pthread_mutex_unlock(&quant_lock);
            return 0;
        }
    pthread_mutex_unlock(&quant_lock);
    return -1;
}

int mlxcel_quant_register(const float *f32, int trans, int K, int N, const uint32_t *q, const float *scales,
                          const float *biases, int bits, int group) {
    if ((bits != 4 && bits != 8) || (group != QGROUP && group != 2 * QGROUP) || K % group != 0) return -1;
    return table_put((struct quant_weight){f32, trans, K, N, q, scales, biases, bits, 0, group, 0, 0, 0});
}

/* A quantized weight with no float weight behind it: `key` (any address of the caller's that no other weight
 * uses, the packed values' own) is what products pass for it; 0, or -1 as mlxcel_quant_register. */
int mlxcel_quant_register_virtual(const float *key, int trans, int K, int N, const uint32_t *q, const float *scales,
                                  const float *biases, int bits, int group) {
    if ((bits != 4 && bits != 8) || (group != QGROUP && group != 2 * QGROUP) || K % group != 0) return -1;
    return table_put((struct quant_weight){key, trans, K, N, q, scales, biases, bits, 0, group, 1, 0, 0});
}

enum { GGML_BITS = -1 }; /* a ggml block twin's bits (neither affine nor panels) */

/* A weight kept as a GGUF's K-quant blocks (N rows of row_bytes, ggml_blocks.c), a virtual twin under `key`;
 * 0, or -1 for a type or shape not kept so. */
int mlxcel_ggml_register(const float *key, int trans, int K, int N, const uint8_t *blocks, int type) {
    const long row_bytes = mlxcel_ggml_row_bytes(type, K);
    if (row_bytes <= 0) return -1;
    return table_put((struct quant_weight){key, trans, K, N, (const uint32_t *)blocks, NULL, NULL, GGML_BITS, 0, 0,
                                           1, type, row_bytes});
}

/* A registered quantized weight's few-row products with the activations quantized to 8 bits and dotted in
 * integers (on 1), as ggml multiplies a GGUF's weights, or in float32 (0); 0, or -1 where none is registered or
 * int8_dot.c does not read its format */
int mlxcel_quant_int8(const float *key, int on) {
    int status = -1;
    pthread_mutex_lock(&quant_lock);
    size_t s = quant_slot(key);
    for (size_t i = 0; i < QUANT_SLOTS && quant_table[s].f32; i++, s = (s + 1) % QUANT_SLOTS)
        if (quant_table[s].f32 == key) {
            struct quant_weight *w = &quant_table[s];
            const struct int8_weight iw = {(const uint8_t *)w->q, w->scales, w->biases, w->K, w->N, w->bits,
                                           w->group, w->ggml, w->ggml ? w->row_bytes : (long)w->K * w->bits / 8};
            if (w->bits != PANEL_BITS && (mlxcel_int8_reads(&iw) || w->ggml == GGML_F16)) w->int8 = on != 0, status = 0;
            break;
        }
    pthread_mutex_unlock(&quant_lock);
    return status;
}

/* Forget a float weight (before its memory can be freed and reused). Rehashes the entries after it. */
void mlxcel_quant_unregister(const float *f32) {
    pthread_mutex_lock(&quant_lock);
    size_t s = quant_slot(f32);
    for (size_t i = 0; i < QUANT_SLOTS && quant_table[s].f32; i++, s = (s + 1) % QUANT_SLOTS)
        if (quant_table[s].f32 == f32) {
            quant_table[s].f32 = 0;
            for (size_t t = (s + 1) % QUANT_SLOTS; quant_table[t].f32; t = (t + 1) % QUANT_SLOTS) {
                struct quant_weight moved = quant_table[t];
                quant_table[t].f32 = 0;
                for (size_t u = quant_slot(moved.f32);; u = (u + 1) % QUANT_SLOTS)
                    if (!quant_table[u].f32) { quant_table[u] = moved; break; }
            }
            break;
        }
    pthread_mutex_unlock(&quant_lock);
}

long mlxcel_quant_calls(void) { return quant_calls; }

int mlxcel_quant_registered(void) {
    int n = 0;
    pthread_mutex_lock(&quant_lock);
    for (size_t s = 0; s < QUANT_SLOTS; s++) n += quant_table[s].f32 != 0 && quant_table[s].bits != PANEL_BITS;
    pthread_mutex_unlock(&quant_lock);
    return n;
}

int mlxcel_packed_registered(void) {
    int n = 0;
    pthread_mutex_lock(&quant_lock);
    for (size_t s = 0; s < QUANT_SLOTS; s++) n += quant_table[s].f32 != 0 && quant_table[s].bits == PANEL_BITS;
    pthread_mutex_unlock(&quant_lock);
    return n;
}

/* ---- float twins in column panels ----------------------------------------------------------------------------
 * A float weight K x N (a transposed layer, row-major) copied as panels of PANEL columns, each K x PANEL and
 * contiguous (the last one zero-padded). A few-row product then keeps a tile of the output in registers over
 * a whole k range and reads the weight front to back: at 8 rows it is no longer bound by its accumulators'
 * loads and stores, and every output element is summed exactly as small_nn sums it (bitwise the same). The
 * panels live in the caller's memory (huge pages there: server/models/quantized_twins.py). */
static long packed_calls;

/* Floats the panels of a K x N weight take (at 64-byte aligned addresses) */
long mlxcel_pack_floats(int K, int N) { return ((long)N + PANEL - 1) / PANEL * PANEL * (long)K; }

/* 1 when the float weight has a twin registered (quantized or panels) */
int mlxcel_has_twin(const float *f32) {
    int found = 0;
    pthread_mutex_lock(&quant_lock);
    size_t s = quant_slot(f32);
    for (size_t i = 0; i < QUANT_SLOTS && quant_table[s].f32 && !found; i++, s = (s + 1) % QUANT_SLOTS)
        found = quant_table[s].f32 == f32;
    pthread_mutex_unlock(&quant_lock);
    return found;
}

/* 1 when the float weight has a quantized twin registered (its products read 4 or 8 bits) */
int mlxcel_has_quant_twin(const float *f32) {
    int found = 0;
    pthread_mutex_lock(&quant_lock);
    size_t s = quant_slot(f32);
    for (size_t i = 0; i < QUANT_SLOTS && quant_table[s].f32 && !found; i++, s = (s + 1) % QUANT_SLOTS)
        found = quant_table[s].f32 == f32 && quant_table[s].bits != PANEL_BITS;
    pthread_mutex_unlock(&quant_lock);
    return found;
}

/* Copy the K x N weight into panels at dst (mlxcel_pack_floats(K, N) floats, 64-byte aligned, the caller's
 * memory: it must outlive the registration) and register them; 0, or -1 when the table is full. (A tied
 * head, x E^T, keeps the dot-product kernel: its sums run in 8 lanes along k, as the reference's do.) */
int mlxcel_pack_register(const float *f32, int K, int N, float *dst) {
    if (K <= 0 || N <= 0 || ((size_t)dst & 63)) return -1;
    size_t panels = ((size_t)N + PANEL - 1) / PANEL;
    for (size_t q = 0; q < panels; q++) {
        int j0 = (int)q * PANEL, w = N - j0 < PANEL ? N - j0 : PANEL;
        for (int k = 0; k < K; k++) {
            float *row = dst + (q * K + k) * PANEL;
            memcpy(row, f32 + (size_t)k * N + j0, sizeof(float) * (size_t)w);
            memset(row + w, 0, sizeof(float) * (size_t)(PANEL - w));
        }
    }
    return table_put((struct quant_weight){f32, 0, K, N, 0, 0, 0, PANEL_BITS, dst, 0, 0, 0, 0});
}

long mlxcel_packed_calls(void) { return packed_calls; }

/* The twin registered for this float operand, copied under the lock (found: 1) */
static int quant_find(const float *b, int trans, int K, int N, int ldb, struct quant_weight *out) {
    if (ldb != (trans ? K : N)) return 0;
    int found = 0;
    pthread_mutex_lock(&quant_lock);
    size_t s = quant_slot(b);
    for (size_t i = 0; i < QUANT_SLOTS && quant_table[s].f32; i++, s = (s + 1) % QUANT_SLOTS)
        if (quant_table[s].f32 == b) {
            found = quant_table[s].trans == trans && quant_table[s].K == K && quant_table[s].N == N;
            if (found) *out = quant_table[s];
            break;
        }
    pthread_mutex_unlock(&quant_lock);
    return found;
}

#if X86
/* the 32 values of one group as floats, in k order */
AVX2 static inline void quant_group(const struct quant_weight *w, size_t row, int g, __m256 v[4]) {
    if (w->bits == 4) {
        const uint8_t *p = (const uint8_t *)(w->q + row * (w->K / 8)) + g * 16;
        __m128i bytes = _mm_loadu_si128((const __m128i *)p), mask = _mm_set1_epi8(0x0F);
        __m128i lo = _mm_and_si128(bytes, mask), hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
        __m128i a = _mm_unpacklo_epi8(lo, hi), b = _mm_unpackhi_epi8(lo, hi); /* k = 0..15, 16..31 */
        v[0] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(a));
        v[1] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(a, 8)));
        v[2] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b));
        v[3] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(b, 8)));
    } else {
        const uint8_t *p = (const uint8_t *)(w->q + row * (w->K / 4)) + g * 32;
        for (int i = 0; i < 4; i++)
            v[i] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p + 8 * i))));
    }
}

struct quant_args {
    const struct quant_weight *w;
    int M, per_task;
    const float *a, *xsum;
    int lda, ldc;
    float alpha, beta;
    float *c;
};

AVX2 static void quant_task(void *ctx, int task) {
    struct quant_args *t = ctx;
    const struct quant_weight *w = t->w;
    const int groups = w->K / w->group, chunks = w->group / QGROUP; /* 32 values a chunk, 1 or 2 a group */
    for (int j = task * t->per_task; j < w->N && j < (task + 1) * t->per_task; j++) {
        const float *sc = w->scales + (size_t)j * groups, *bi = w->biases + (size_t)j * groups;
        for (int m0 = 0; m0 < t->M; m0 += 4) {
            int mr = t->M - m0 < 4 ? t->M - m0 : 4;
            __m256 acc[4];
            float bsum[4] = {0, 0, 0, 0};
            for (int r = 0; r < mr; r++) acc[r] = _mm256_setzero_ps();
            if (chunks == 1) { /* groups of 32: each group's dot product, then its scale */
                for (int g = 0; g < groups; g++) {
                    __m256 v[4];
                    quant_group(w, j, g, v);
                    __m256 scale = _mm256_set1_ps(sc[g]);
                    for (int r = 0; r < mr; r++) {
                        const float *x = t->a + (size_t)(m0 + r) * t->lda + g * QGROUP;
                        __m256 e = _mm256_mul_ps(_mm256_loadu_ps(x), v[0]);
                        e = _mm256_fmadd_ps(_mm256_loadu_ps(x + 8), v[1], e);
                        e = _mm256_fmadd_ps(_mm256_loadu_ps(x + 16), v[2], e);
                        e = _mm256_fmadd_ps(_mm256_loadu_ps(x + 24), v[3], e);
                        acc[r] = _mm256_fmadd_ps(scale, e, acc[r]);
                        bsum[r] = fmaf(bi[g], t->xsum[(size_t)(m0 + r) * groups + g], bsum[r]);
                    }
                }
            } else { /* groups of 64 (mlx-community's): two chunks of 32 a scale */
                for (int g = 0; g < groups; g++) {
                    __m256 v[4], u[4];
                    quant_group(w, j, 2 * g, v);
                    quant_group(w, j, 2 * g + 1, u);
                    __m256 scale = _mm256_set1_ps(sc[g]);
                    for (int r = 0; r < mr; r++) {
                        const float *x = t->a + (size_t)(m0 + r) * t->lda + g * 2 * QGROUP;
                        __m256 e = _mm256_mul_ps(_mm256_loadu_ps(x), v[0]);
                        e = _mm256_fmadd_ps(_mm256_loadu_ps(x + 8), v[1], e);
                        e = _mm256_fmadd_ps(_mm256_loadu_ps(x + 16), v[2], e);
                        e = _mm256_fmadd_ps(_mm256_loadu_ps(x + 24), v[3], e);
                        e = _mm256_fmadd_ps(_mm256_loadu_ps(x + 32), u[0], e);
                        e = _mm256_fmadd_ps(_mm256_loadu_ps(x + 40), u[1], e);
                        e = _mm256_fmadd_ps(_mm256_loadu_ps(x + 48), u[2], e);
                        e = _mm256_fmadd_ps(_mm256_loadu_ps(x + 56), u[3], e);
                        acc[r] = _mm256_fmadd_ps(scale, e, acc[r]);
                        bsum[r] = fmaf(bi[g], t->xsum[(size_t)(m0 + r) * groups + g], bsum[r]);
                    }
                }
            }
            for (int r = 0; r < mr; r++) {
                float *cr = t->c + (size_t)(m0 + r) * t->ldc + j;
                *cr = finish(hsum(acc[r]) + bsum[r], t->alpha, t->beta, cr);
            }
        }
    }
}

/* sums[p][r][0:PANEL] = the sums over part p's k range of a[r][k] w[k][panel columns], for mr rows; each the
 * FMA chain over k in order from zero, as nn_part sums it. (4 rows x 3 vectors: 12 independent chains hide
 * the FMA latency, and 16 registers hold them with the panel row and a broadcast.) */
static inline __attribute__((always_inline)) AVX2 void panel_tile(int mr, const float *panel, int K,
                                                                  const float *a, int lda, float *sums) {
    for (int p = 0; p < NN_PARTS; p++) {
        int k0 = (int)((long)K * p / NN_PARTS), k1 = (int)((long)K * (p + 1) / NN_PARTS);
        __m256 acc[4][PANEL_VECTORS];
        for (int r = 0; r < mr; r++)
            for (int v = 0; v < PANEL_VECTORS; v++) acc[r][v] = _mm256_setzero_ps();
        const float *b = panel + (size_t)k0 * PANEL;
        for (int k = k0; k < k1; k++, b += PANEL) {
            __m256 bv[PANEL_VECTORS];
            for (int v = 0; v < PANEL_VECTORS; v++) bv[v] = _mm256_loadu_ps(b + 8 * v);
            for (int r = 0; r < mr; r++) {
                __m256 x = _mm256_broadcast_ss(a + (size_t)r * lda + k);
                for (int v = 0; v < PANEL_VECTORS; v++) acc[r][v] = _mm256_fmadd_ps(x, bv[v], acc[r][v]);
            }
        }
        for (int r = 0; r < mr; r++)
            for (int v = 0; v < PANEL_VECTORS; v++) _mm256_storeu_ps(sums + (p * 4 + r) * PANEL + 8 * v, acc[r][v]);
    }
}

AVX2 static void packed_task(void *ctx, int task) {
    struct quant_args *t = ctx;
    const struct quant_weight *w = t->w;
    int panels = (w->N + PANEL - 1) / PANEL;
    for (int q = task * t->per_task; q < panels && q < (task + 1) * t->per_task; q++) {
        const float *panel = w->panels + (size_t)q * w->K * PANEL;
        int j0 = q * PANEL, nc = w->N - j0 < PANEL ? w->N - j0 : PANEL;
        for (int m0 = 0; m0 < t->M; m0 += 4) {
            int mr = t->M - m0 < 4 ? t->M - m0 : 4;
            float sums[NN_PARTS * 4 * PANEL];
            const float *a = t->a + (size_t)m0 * t->lda;
            if (mr == 4) panel_tile(4, panel, w->K, a, t->lda, sums);
            else if (mr == 3) panel_tile(3, panel, w->K, a, t->lda, sums);
            else if (mr == 2) panel_tile(2, panel, w->K, a, t->lda, sums);
            else panel_tile(1, panel, w->K, a, t->lda, sums);
            for (int r = 0; r < mr; r++) {
                const float *s0 = sums + r * PANEL, *s1 = s0 + 4 * PANEL, *s2 = s1 + 4 * PANEL, *s3 = s2 + 4 * PANEL;
                float *cr = t->c + (size_t)(m0 + r) * t->ldc + j0;
                for (int j = 0; j < nc; j++) cr[j] = finish((s0[j] + s1[j]) + (s2[j] + s3[j]), t->alpha, t->beta, cr + j);
            }
        }
    }
}

AVX2 static void small_packed(const struct quant_weight *w, int M, float alpha, const float *a, int lda, float beta,
                              float *c, int ldc) {
    int panels = (w->N + PANEL - 1) / PANEL, tasks = 4 * pool_width() < panels ? 4 * pool_width() : panels;
    struct quant_args t = {w, M, (panels + tasks - 1) / tasks, a, 0, lda, ldc, alpha, beta, c};
    pool_run(packed_task, &t, tasks, (long)w->N * w->K >= PARALLEL_WORK);
}

/* C = A W for a registered W, from its quantized twin; 0 when the sums' buffer cannot be had */
/* a row's dot product with x, in 8 lanes in k order then across them: the same for a row whatever M */
AVX2 static float dot_lanes(const float *x, const float *w, int K) {
    __m256 acc = _mm256_setzero_ps();
    int k = 0;
    for (; k + 8 <= K; k += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(x + k), _mm256_loadu_ps(w + k), acc);
    float s = hsum(acc);
    for (; k < K; k++) s = fmaf(x[k], w[k], s);
    return s;
}

/* an F16 weight row's dot product with x: converted 8 halves at a time (F16C) into 4 chains of 8 lanes (ggml's
 * vec_dot_f16 keeps 4 too), the row prefetched 2 KiB ahead (a decode step streams it from memory once) */
AVX2 static float dot_f16(const uint8_t *w, const float *x, int K) {
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int k = 0;
    for (; k + 32 <= K; k += 32) {
        _mm_prefetch((const char *)w + 2 * k + 2048, _MM_HINT_T0);
        for (int i = 0; i < 4; i++) {
            const __m256 v = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + 2 * (k + 8 * i))));
            acc[i] = _mm256_fmadd_ps(_mm256_loadu_ps(x + k + 8 * i), v, acc[i]);
        }
    }
    float s = hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    for (; k < K; k++) s = fmaf(x[k], _cvtsh_ss((unsigned short)(w[2 * k] | w[2 * k + 1] << 8)), s);
    return s;
}

/* dot_f16 for two rows of x at once: the weight's halves converted once for both, each row's chains summed as
 * dot_f16 sums them (a row's result is bitwise the one it gets alone) */
AVX2 static void dot_f16_pair(const uint8_t *w, const float *x0, const float *x1, int K, float out[2]) {
    __m256 a0[4], a1[4];
    for (int i = 0; i < 4; i++) a0[i] = a1[i] = _mm256_setzero_ps();
    int k = 0;
    for (; k + 32 <= K; k += 32) {
        _mm_prefetch((const char *)w + 2 * k + 2048, _MM_HINT_T0);
        for (int i = 0; i < 4; i++) {
            const __m256 v = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + 2 * (k + 8 * i))));
            a0[i] = _mm256_fmadd_ps(_mm256_loadu_ps(x0 + k + 8 * i), v, a0[i]);
            a1[i] = _mm256_fmadd_ps(_mm256_loadu_ps(x1 + k + 8 * i), v, a1[i]);
        }
    }
    float s0 = hsum(_mm256_add_ps(_mm256_add_ps(a0[0], a0[1]), _mm256_add_ps(a0[2], a0[3])));
    float s1 = hsum(_mm256_add_ps(_mm256_add_ps(a1[0], a1[1]), _mm256_add_ps(a1[2], a1[3])));
    for (; k < K; k++) {
        const float v = _cvtsh_ss((unsigned short)(w[2 * k] | w[2 * k + 1] << 8));
        s0 = fmaf(x0[k], v, s0), s1 = fmaf(x1[k], v, s1);
    }
    out[0] = s0, out[1] = s1;
}

AVX2 static void ggml_task(void *ctx, int task) {
    struct quant_args *t = ctx;
    const struct quant_weight *w = t->w;
    if (w->ggml == GGML_F16) {
        for (int j = task * t->per_task; j < w->N && j < (task + 1) * t->per_task; j++) {
            const uint8_t *row = (const uint8_t *)w->q + (size_t)j * w->row_bytes;
            int r = 0;
            for (; r + 2 <= t->M; r += 2) {
                float s[2];
                dot_f16_pair(row, t->a + (size_t)r * t->lda, t->a + (size_t)(r + 1) * t->lda, w->K, s);
                for (int i = 0; i < 2; i++) {
                    float *cr = t->c + (size_t)(r + i) * t->ldc + j;
                    *cr = finish(s[i], t->alpha, t->beta, cr);
                }
            }
            for (; r < t->M; r++) {
                float *cr = t->c + (size_t)r * t->ldc + j;
                *cr = finish(dot_f16(row, t->a + (size_t)r * t->lda, w->K), t->alpha, t->beta, cr);
            }
        }
        return;
    }
    float *row = mlxcel_thread_floats(BUFFER_DEQUANT, (size_t)w->K);
    if (!row) return; /* (checked by small_ggml on the caller's thread first) */
    for (int j = task * t->per_task; j < w->N && j < (task + 1) * t->per_task; j++) {
        mlxcel_ggml_row(w->ggml, (const uint8_t *)w->q + (size_t)j * w->row_bytes, row, w->K);
        for (int r = 0; r < t->M; r++) {
            float *cr = t->c + (size_t)r * t->ldc + j;
            *cr = finish(dot_lanes(t->a + (size_t)r * t->lda, row, w->K), t->alpha, t->beta, cr);
        }
    }
}

/* C = A W over a weight kept as ggml blocks: each row dequantized once, then its dot with every row of A. A
 * GGUF's F16 weight (int8 set: ggml's arithmetic) meets activations rounded to f16 first, as ggml's vec_dot_type
 * for F16 rounds them. */
AVX2 static int small_ggml(const struct quant_weight *w, int M, float alpha, const float *a, int lda, float beta,
                           float *c, int ldc) {
    if (!mlxcel_thread_floats(BUFFER_DEQUANT, (size_t)w->K)) return 0;
    if (w->ggml == GGML_F16 && w->int8) {
        float *rounded = mlxcel_thread_floats(BUFFER_ACTS, (size_t)M * w->K);
        if (!rounded) return 0;
        for (int m = 0; m < M; m++) {
            const float *x = a + (size_t)m * lda;
            float *r = rounded + (size_t)m * w->K;
            int k = 0;
            for (; k + 8 <= w->K; k += 8)
                _mm256_storeu_ps(r + k, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + k), _MM_FROUND_TO_NEAREST_INT)));
            for (; k < w->K; k++) r[k] = _cvtsh_ss(_cvtss_sh(x[k], _MM_FROUND_TO_NEAREST_INT));
        }
        a = rounded, lda = w->K;
    }
    int tasks = 4 * pool_width() < w->N ? 4 * pool_width() : w->N;
    struct quant_args t = {w, M, (w->N + tasks - 1) / tasks, a, NULL, lda, ldc, alpha, beta, c};
    pool_run(ggml_task, &t, tasks, (long)w->N * w->K >= PARALLEL_WORK);
    return 1;
}

AVX2 static int small_quant(const struct quant_weight *w, int M, float alpha, const float *a, int lda, float beta,
                            float *c, int ldc) {
    if (w->int8) {
        const struct int8_weight iw = {(const uint8_t *)w->q, w->scales, w->biases, w->K, w->N, w->bits, w->group,
                                       w->ggml, w->ggml ? w->row_bytes : (long)w->K * w->bits / 8};
        if (mlxcel_int8_gemm(&iw, M, alpha, a, lda, beta, c, ldc, pool_width())) return 1;
    }
    if (w->ggml) return small_ggml(w, M, alpha, a, lda, beta, c, ldc);
    const int groups = w->K / w->group, chunks = w->group / QGROUP;
    float *xsum = nn_buffer((size_t)M * groups); /* per row and group: the sum of its x (for the biases) */
    if (!xsum) return 0;
    for (int m = 0; m < M; m++)
        for (int g = 0; g < groups; g++) {
            const float *x = a + (size_t)m * lda + g * w->group;
            __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(x), _mm256_loadu_ps(x + 8)),
                                     _mm256_add_ps(_mm256_loadu_ps(x + 16), _mm256_loadu_ps(x + 24)));
            for (int ch = 1; ch < chunks; ch++) {
                const float *y = x + ch * QGROUP;
                s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(_mm256_loadu_ps(y), _mm256_loadu_ps(y + 8)),
                                                   _mm256_add_ps(_mm256_loadu_ps(y + 16), _mm256_loadu_ps(y + 24))));
            }
            xsum[(size_t)m * groups + g] = hsum(s);
        }
    int tasks = 4 * pool_width() < w->N ? 4 * pool_width() : w->N;
    struct quant_args t = {w, M, (w->N + tasks - 1) / tasks, a, xsum, lda, ldc, alpha, beta, c};
    pool_run(quant_task, &t, tasks, (long)w->N * w->K >= PARALLEL_WORK);
    return 1;
}
#endif

/* rows [j0, j0 + n) of a twin as floats (n x K), as MLX's dequantize computes them: q * scale, then + bias,
 * each rounded (for the GGUF types held so the product is exact: as gguf-py's dequantization too) */
#if X86
/* (not contracted into a fused multiply-add: MLX rounds the product and the sum apart) */
AVX2 __attribute__((optimize("fp-contract=off"))) static void dequant_rows_avx2(const struct quant_weight *w, int j0,
                                                                               int n, float *out) {
    const int K = w->K, chunks = K / QGROUP, per = w->group / QGROUP, groups = K / w->group;
    for (int j = j0; j < j0 + n; j++) {
        const float *sc = w->scales + (size_t)j * groups, *bi = w->biases + (size_t)j * groups;
        float *o = out + (size_t)(j - j0) * K;
        for (int c = 0; c < chunks; c++) {
            __m256 v[4];
            quant_group(w, j, c, v);
            const __m256 s = _mm256_set1_ps(sc[c / per]), b = _mm256_set1_ps(bi[c / per]);
            for (int i = 0; i < 4; i++) /* q * s + b, each rounded, as MLX's dequantize computes it */
                _mm256_storeu_ps(o + c * QGROUP + 8 * i, _mm256_add_ps(_mm256_mul_ps(v[i], s), b));
        }
    }
}
#endif

static void dequant_rows(const struct quant_weight *w, int j0, int n, float *out) {
    if (w->ggml) {
        for (int j = j0; j < j0 + n; j++)
            mlxcel_ggml_row(w->ggml, (const uint8_t *)w->q + (size_t)j * w->row_bytes, out + (size_t)(j - j0) * w->K, w->K);
        return;
    }
    const int K = w->K, groups = K / w->group;
#if X86
    if (have_avx2) { dequant_rows_avx2(w, j0, n, out); return; }
#endif
    for (int j = j0; j < j0 + n; j++) {
        const float *sc = w->scales + (size_t)j * groups, *bi = w->biases + (size_t)j * groups;
        float *o = out + (size_t)(j - j0) * K;
        if (w->bits == 4) {
            const uint8_t *p = (const uint8_t *)(w->q + (size_t)j * (K / 8));
            for (int k = 0; k < K; k += 2) {
                const float s = sc[k / w->group], b = bi[k / w->group];
                o[k] = (float)(p[k / 2] & 0x0F) * s + b;
                o[k + 1] = (float)(p[k / 2] >> 4) * s + b;
            }
        } else {
            const uint8_t *p = (const uint8_t *)(w->q + (size_t)j * (K / 4));
            for (int k = 0; k < K; k++) o[k] = (float)p[k] * sc[k / w->group] + bi[k / w->group];
        }
    }
}

/* a twin by its key alone (whatever shape it is passed with) */
static int quant_lookup(const float *key, struct quant_weight *out) {
    int found = 0;
    pthread_mutex_lock(&quant_lock);
    size_t s = quant_slot(key);
    for (size_t i = 0; i < QUANT_SLOTS && quant_table[s].f32; i++, s = (s + 1) % QUANT_SLOTS)
        if (quant_table[s].f32 == key) {
            found = quant_table[s].bits != PANEL_BITS;
            if (found) *out = quant_table[s];
            break;
        }
    pthread_mutex_unlock(&quant_lock);
    return found;
}

int mlxcel_is_virtual(const float *key) {
    struct quant_weight w;
    return quant_lookup(key, &w) && w.virt;
}

int mlxcel_quant_rows(const float *key, const int *rows, int n, float *out) {
    struct quant_weight w;
    if (!quant_lookup(key, &w)) return -1;
    for (int i = 0; i < n; i++) {
        if (rows[i] < 0 || rows[i] >= w.N) return -1;
        dequant_rows(&w, rows[i], 1, out + (size_t)i * w.K);
    }
    return 0;
}

struct dequant_args {
    const struct quant_weight *w;
    int m;
    float alpha, beta;
    const float *a;
    int lda;
    float *c;
    int ldc, failed, rows;
};

static void dequant_task(void *ctx, int task) {
    struct dequant_args *d = ctx;
    const struct quant_weight *w = d->w;
    const int j0 = task * d->rows, n = w->N - j0 < d->rows ? w->N - j0 : d->rows;
    if (n <= 0) return;
    float *panel = mlxcel_thread_floats(BUFFER_DEQUANT, (size_t)n * w->K);
    if (!panel) { d->failed = 1; return; }
    dequant_rows(w, j0, n, panel);
    real_sgemm(ROW_MAJOR, NO_TRANS, TRANS, d->m, n, w->K, d->alpha, d->a, d->lda, panel, w->K, d->beta, d->c + j0,
               d->ldc);
}

/* C = A W over a virtual twin for a product of many rows: a panel of W's rows at a time, dequantized, through
 * the BLAS (panels over the pool's threads when the BLAS runs single-threaded: mlxcel_split_rows) */
static void dequant_gemm(const struct quant_weight *w, int m, float alpha, const float *a, int lda, float beta,
                         float *c, int ldc) {
    const int parallel = split_rows && pool_width() > 1, parts = parallel ? 2 * pool_width() : 1;
    int rows = (w->N + parts - 1) / parts; /* panels as wide as the threads allow, for the BLAS's sake */
    rows = rows < 16 ? 16 : rows > DEQUANT_ROWS ? DEQUANT_ROWS : (rows + 15) / 16 * 16;
    struct dequant_args d = {w, m, alpha, beta, a, lda, c, ldc, 0, rows};
    __atomic_fetch_add(&blas_calls, 1, __ATOMIC_RELAXED);
    pool_run(dequant_task, &d, (w->N + rows - 1) / rows, parallel);
    if (!d.failed) return;
    d.rows = 1; /* a panel's memory could not be had: a row at a time, on the caller's thread */
    for (int j = 0; j < w->N; j++) dequant_task(&d, j);
}

/* ---- prompt-sized products: the rows cut into one part per thread of the pool, each part on the BLAS run with
 * one thread (mlxcel_split_rows): one pool of threads for the products and mlxcel's kernels between them, where
 * the BLAS's own threads spun on the second core while the pool's waited for it. ---- */
struct split_args {
    int trans_a, trans_b, m, n, k;
    float alpha;
    const float *a;
    int lda;
    const float *b;
    int ldb;
    float beta;
    float *c;
    int ldc, parts;
};

static void split_task(void *ctx, int t) {
    const struct split_args *s = ctx;
    int m0 = (int)((long)s->m * t / s->parts), m1 = (int)((long)s->m * (t + 1) / s->parts);
    if (m1 <= m0) return;
    const float *a = s->trans_a == NO_TRANS ? s->a + (size_t)m0 * s->lda : s->a + m0;
    real_sgemm(ROW_MAJOR, s->trans_a, s->trans_b, m1 - m0, s->n, s->k, s->alpha, a, s->lda, s->b, s->ldb, s->beta,
               s->c + (size_t)m0 * s->ldc, s->ldc);
}

/* On: the BLAS is to run single-threaded (the caller has set it so), products of many rows split here. */
void mlxcel_split_rows(int on) { split_rows = on; }

void cblas_sgemm(int order, int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a, int lda,
                 const float *b, int ldb, float beta, float *c, int ldc) {
#if X86
    if (have_avx2 && m > SMALL_M && order == ROW_MAJOR && trans_a == NO_TRANS && k > 0) {
        /* a prompt's product over a GGUF's K-quant or legacy-block weight (Q5_0, Q5_1, Q8_0): its rows as a
         * decode step's rows (int8_dot.c's tiles and panels), each the same function of its row as it is there,
         * so a cache hit gives the cold run's logits. Affine groups (Q4_0 / Q4_1 imports, MLX checkpoints) too
         * where AVX-512 VNNI's panels take them: AVX2 has no tile kernel for them, and one row at a time their
         * integer path ran at half the BLAS's float rate, so there a prompt's stay float; and Q2_K / Q3_K's
         * always (int8_dot.c has one-row kernels only for them). */
        struct quant_weight w;
        if (quant_find(b, trans_b == TRANS, k, n, ldb, &w) && w.int8 && w.ggml != GGML_F16 &&
            (w.ggml >= GGML_Q4_K || (w.ggml >= GGML_Q5_0 && w.ggml <= GGML_Q8_0) || (!w.ggml && mlxcel_int8_vnni())) &&
            small_quant(&w, m, alpha, a, lda, beta, c, ldc)) {
            quant_calls++;
            return;
        }
    }
    if (have_avx2 && m <= SMALL_M && order == ROW_MAJOR && trans_a == NO_TRANS && k > 0) {
        struct quant_weight w;
        if (quant_find(b, trans_b == TRANS, k, n, ldb, &w)) {
            if (w.bits == PANEL_BITS) {
                small_packed(&w, m, alpha, a, lda, beta, c, ldc);
                packed_calls++;
                return;
            }
            if (small_quant(&w, m, alpha, a, lda, beta, c, ldc)) {
                quant_calls++;
                return;
            }
            if (w.virt) { dequant_gemm(&w, m, alpha, a, lda, beta, c, ldc); return; }
        }
        small_calls++;
        if (trans_b == NO_TRANS) small_nn(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        else small_nt(m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
#endif
    if (order == ROW_MAJOR && trans_a == NO_TRANS && k > 0) { /* a virtual twin has no float weight to hand on */
        struct quant_weight w;
        if (quant_find(b, trans_b == TRANS, k, n, ldb, &w) && w.virt) {
            dequant_gemm(&w, m, alpha, a, lda, beta, c, ldc);
            return;
        }
    }
    __atomic_fetch_add(&blas_calls, 1, __ATOMIC_RELAXED);
    const int was = m > SMALL_M ? mlxcel_pool_batch(1) : batch_phase; /* prompt-sized rows: -tb's threads */
    if (split_rows && order == ROW_MAJOR && m > SMALL_M && pool_width() > 1) {
        struct split_args s = {trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, pool_width()};
        pool_run(split_task, &s, pool_width(), 1);
        mlxcel_pool_batch(was);
        return;
    }
    mlxcel_pool_batch(was);
    real_sgemm(order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* ---- exp and the two functions built on it ---------------------------------------------------------------- */
#if X86
/* e^x for 8 lanes: x = n ln2 + r, |r| <= ln2/2, e^r by a degree-6 polynomial (the Cephes coefficients),
 * 2^n through the exponent bits; within 2 ulp of expf over the range that does not under/overflow. */
AVX2 static inline __m256 exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* row[0:n] = softmax(row[0:n]); the sum over 8 lanes, then across them in one fixed order */
AVX2 static void softmax_avx2(float *row, int n) {
    int n8 = n & ~7;
    float mx = -INFINITY;
    __m256 m8 = _mm256_set1_ps(-INFINITY);
    for (int j = 0; j < n8; j += 8) m8 = _mm256_max_ps(m8, _mm256_loadu_ps(row + j));
    float l[8];
    _mm256_storeu_ps(l, m8);
    for (int i = 0; i < 8; i++) mx = l[i] > mx ? l[i] : mx;
    for (int j = n8; j < n; j++) mx = row[j] > mx ? row[j] : mx;
    __m256 vmax = _mm256_set1_ps(mx), s8 = _mm256_setzero_ps();
    for (int j = 0; j < n8; j += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(row + j), vmax));
        _mm256_storeu_ps(row + j, e);
        s8 = _mm256_add_ps(s8, e);
    }
    float sum = hsum(s8);
    if (n8 < n) { /* the tail through the same exp */
        float t[8];
        for (int j = 0; j < 8; j++) t[j] = n8 + j < n ? row[n8 + j] - mx : -INFINITY;
        _mm256_storeu_ps(t, exp8(_mm256_loadu_ps(t)));
        for (int j = n8; j < n; j++) sum += (row[j] = t[j - n8]);
    }
    __m256 inv = _mm256_set1_ps(1.0f / sum);
    for (int j = 0; j < n8; j += 8) _mm256_storeu_ps(row + j, _mm256_mul_ps(_mm256_loadu_ps(row + j), inv));
    for (int j = n8; j < n; j++) row[j] *= 1.0f / sum;
}

AVX2 static void swiglu_avx2(const float *g, const float *u, float *out, long n) {
    long n8 = n & ~7L;
    __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    for (long i = 0; i < n8; i += 8) { /* ggml_v_silu(x) * g, as ggml_vec_swiglu_f32 */
        __m256 x = _mm256_loadu_ps(g + i);
        __m256 silu = _mm256_div_ps(x, _mm256_add_ps(one, ggml_expf8(_mm256_sub_ps(zero, x))));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(silu, _mm256_loadu_ps(u + i)));
    }
    if (n8 < n) { /* the tail through the same vector code: an element's result does not depend on its place */
        float gt[8] = {0}, ut[8] = {0}, ot[8];
        memcpy(gt, g + n8, sizeof(float) * (size_t)(n - n8));
        memcpy(ut, u + n8, sizeof(float) * (size_t)(n - n8));
        swiglu_avx2(gt, ut, ot, 8);
        memcpy(out + n8, ot, sizeof(float) * (size_t)(n - n8));
    }
}
#endif

static void softmax_row(float *row, int n) {
#if X86
    if (have_avx2) { softmax_avx2(row, n); return; }
#endif
    float mx = -INFINITY, sum = 0.0f;
    for (int j = 0; j < n; j++) mx = row[j] > mx ? row[j] : mx;
    for (int j = 0; j < n; j++) sum += (row[j] = expf(row[j] - mx));
    for (int j = 0; j < n; j++) row[j] *= 1.0f / sum;
}

struct swiglu_args {
    const float *g, *u;
    float *out;
    long rows, width, ld, per_task;
};

static void swiglu_task(void *ctx, int task) {
    struct swiglu_args *s = ctx;
    for (long r = task * s->per_task; r < s->rows && r < (task + 1) * s->per_task; r++) {
        const float *g = s->g + r * s->ld, *u = s->u + r * s->ld;
        float *out = s->out + r * s->width;
#if X86
        if (have_avx2) { swiglu_avx2(g, u, out, s->width); continue; }
#endif
        for (long i = 0; i < s->width; i++) out[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
    }
}

/* out = silu(g) * u, the SwiGLU gate of a llama-family MLP, over rows of width elements; g's and u's rows
 * ld floats apart (both halves of one fused gate/up product: ld = 2 width), out's contiguous */
void mlxcel_swiglu(const float *g, const float *u, long rows, long width, long ld, float *out) {
    long per_task = (16384 + width - 1) / width, tasks = (rows + per_task - 1) / per_task;
    struct swiglu_args s = {g, u, out, rows, width, ld, per_task};
    pool_run(swiglu_task, &s, (int)tasks, rows * width >= 32768);
}

/* ---- attention rows summed as a decode step sums its one row ------------------------------------------------
 * A decode step's row goes through small_nt and small_nn above: each score is 8 lanes over the head's dims
 * reduced in hsum's order, then scaled; the output sums the visible keys cut into NN_PARTS parts by their count,
 * each part in key order, the parts added in small_nn's order. rows_task does exactly that for every row of a
 * prompt, with no BLAS: a row's result depends on its query and its visible keys only, never on the chunk or
 * block it came in, so a cached prefix resumes bitwise and a prompt's last row is what a decode step would give.
 * Tasks are blocks of ROWS_BLOCK queries of one head, spread over the pool; scores 4 rows x 2 keys at a time. */
enum { ROWS_BLOCK = 16 };

struct rows_args {
    const float *q, *k, *v;
    long q_seq, q_head, q_pos, k_seq, k_head, k_pos, v_seq, v_head, v_pos;
    int B, H, Hkv, L, T, D;
    float scale;
    const int *first;
    float *out;
    int blocks, failed;
};

#if X86
/* the 8 accumulators' lane sums, each reduced as hsum reduces it: ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)) */
AVX2 static inline __m256 hsum8(const __m256 a[8]) {
    __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(a[0], a[1]), _mm256_hadd_ps(a[2], a[3]));
    __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(a[4], a[5]), _mm256_hadd_ps(a[6], a[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

/* s[r][j] = scale * q_r . k_j for 4 query rows and 2 keys, each as nt_tile sums it */
AVX2 static inline void scores_4x2(const float *const qr[4], const float *const kj[2], int D, float scale,
                                   float *const sr[4], int j) {
    __m256 acc[8];
    for (int i = 0; i < 8; i++) acc[i] = _mm256_setzero_ps();
    int d8 = D & ~7;
    for (int d = 0; d < d8; d += 8) {
        __m256 k0 = _mm256_loadu_ps(kj[0] + d), k1 = _mm256_loadu_ps(kj[1] + d);
        for (int r = 0; r < 4; r++) {
            __m256 x = _mm256_loadu_ps(qr[r] + d);
            acc[2 * r] = _mm256_fmadd_ps(x, k0, acc[2 * r]);
            acc[2 * r + 1] = _mm256_fmadd_ps(x, k1, acc[2 * r + 1]);
        }
    }
    __m256 sums = hsum8(acc);
    if (d8 == D) { /* lanes r0k0 r0k1 r1k0 r1k1 | r2k0 r2k1 r3k0 r3k1, scaled as finish scales */
        sums = _mm256_mul_ps(_mm256_set1_ps(scale), sums);
        __m128 lo = _mm256_castps256_ps128(sums), hi = _mm256_extractf128_ps(sums, 1);
        _mm_storel_pi((__m64 *)(sr[0] + j), lo);
        _mm_storeh_pi((__m64 *)(sr[1] + j), lo);
        _mm_storel_pi((__m64 *)(sr[2] + j), hi);
        _mm_storeh_pi((__m64 *)(sr[3] + j), hi);
        return;
    }
    float s[8];
    _mm256_storeu_ps(s, sums);
    for (int r = 0; r < 4; r++)
        for (int c = 0; c < 2; c++) {
            float t = s[2 * r + c];
            for (int d = d8; d < D; d++) t = fmaf(qr[r][d], kj[c][d], t);
            sr[r][j + c] = scale * t;
        }
}

/* acc[d0:d1] = sum over k in [k0, k1) of p[k] * v_k[d0:d1], in k order from zero (one part of small_nn's sums) */
AVX2 static void values_part(const float *p, const float *v, long v_pos, int k0, int k1, int d0, int d1,
                             float *acc) {
    int d = d0;
    for (; d + 64 <= d1; d += 64) {
        __m256 a[8];
        for (int i = 0; i < 8; i++) a[i] = _mm256_loadu_ps(acc + d + 8 * i);
        for (int k = k0; k < k1; k++) {
            __m256 x = _mm256_broadcast_ss(p + k);
            const float *vk = v + k * v_pos + d;
            for (int i = 0; i < 8; i++) a[i] = _mm256_fmadd_ps(x, _mm256_loadu_ps(vk + 8 * i), a[i]);
        }
        for (int i = 0; i < 8; i++) _mm256_storeu_ps(acc + d + 8 * i, a[i]);
    }
    for (; d + 8 <= d1; d += 8) {
        __m256 a = _mm256_loadu_ps(acc + d);
        for (int k = k0; k < k1; k++) a = _mm256_fmadd_ps(_mm256_broadcast_ss(p + k), _mm256_loadu_ps(v + k * v_pos + d), a);
        _mm256_storeu_ps(acc + d, a);
    }
    for (; d < d1; d++) {
        float a = acc[d];
        for (int k = k0; k < k1; k++) a = fmaf(p[k], v[k * v_pos + d], a);
        acc[d] = a;
    }
}

/* values_part for 4 rows over the keys [k0, k1) they share, 16 dims at a time: each v_k is loaded once for
 * the 4 rows. p[r] is row r's probabilities, acc[r] its running sums (each still in k order per row). */
AVX2 static void values_part4(const float *const p[4], const float *v, long v_pos, int k0, int k1, int D,
                              float *const acc[4]) {
    for (int d = 0; d + 16 <= D; d += 16) {
        __m256 a[4][2];
        for (int r = 0; r < 4; r++) a[r][0] = _mm256_loadu_ps(acc[r] + d), a[r][1] = _mm256_loadu_ps(acc[r] + d + 8);
        for (int k = k0; k < k1; k++) {
            const float *vk = v + k * v_pos + d;
            __m256 v0 = _mm256_loadu_ps(vk), v1 = _mm256_loadu_ps(vk + 8);
            for (int r = 0; r < 4; r++) {
                __m256 x = _mm256_broadcast_ss(p[r] + k);
                a[r][0] = _mm256_fmadd_ps(x, v0, a[r][0]);
                a[r][1] = _mm256_fmadd_ps(x, v1, a[r][1]);
            }
        }
        for (int r = 0; r < 4; r++) _mm256_storeu_ps(acc[r] + d, a[r][0]), _mm256_storeu_ps(acc[r] + d + 8, a[r][1]);
    }
    int d16 = D & ~15;
    if (d16 < D)
        for (int r = 0; r < 4; r++) values_part(p[r], v, v_pos, k0, k1, d16, D, acc[r]);
}

/* one row's outputs from its probabilities over its seen keys: NN_PARTS parts, each from zero, then added */
static void finish_row(const float *parts, int D, float *o) {
    const float *s0 = parts, *s1 = s0 + D, *s2 = s1 + D, *s3 = s2 + D;
    for (int d = 0; d < D; d++) o[d] = (s0[d] + s1[d]) + (s2[d] + s3[d]);
}


AVX2 static void rows_task(void *ctx, int task) {
    struct rows_args *a = ctx;
    int bh = task % (a->B * a->H), block = task / (a->B * a->H);
    int b = bh / a->H, h = bh % a->H, group = a->H / a->Hkv, D = a->D;
    int first = a->first ? a->first[b] : 0, r0 = block * ROWS_BLOCK;
    int rows = a->L - r0 < ROWS_BLOCK ? a->L - r0 : ROWS_BLOCK;
    int keys = a->T - a->L + r0 + rows - first; /* the visible keys of the block's last query */
    const float *kh = a->k + b * a->k_seq + (h / group) * a->k_head + first * a->k_pos;
    const float *vh = a->v + b * a->v_seq + (h / group) * a->v_head + first * a->v_pos;
    const float *qh = a->q + b * a->q_seq + h * a->q_head;
    float *scores = mlxcel_thread_floats(BUFFER_SCORES, (size_t)ROWS_BLOCK * (keys > 0 ? keys : 1) + 4 * NN_PARTS * (size_t)D);
    if (!scores) { a->failed = 1; return; }
    float *parts = scores + (size_t)ROWS_BLOCK * (keys > 0 ? keys : 1);
    /* scores: rows 4 at a time (a short last group repeats its last row), keys 2 at a time (likewise) */
    for (int i = 0; i < rows && keys > 0; i += 4) {
        const float *qr[4];
        float *sr[4];
        for (int r = 0; r < 4; r++) {
            int row = i + r < rows ? i + r : rows - 1;
            qr[r] = qh + (r0 + row) * a->q_pos;
            sr[r] = scores + (size_t)row * keys;
        }
        int seen_last = keys - (rows - 1 - (i + 3 < rows ? i + 3 : rows - 1)); /* what the group's last row sees */
        for (int j = 0; j < seen_last; j += 2) {
            int j1 = j + 1 < keys ? j + 1 : j;
            const float *kj[2] = {kh + j * a->k_pos, kh + j1 * a->k_pos};
            if (j1 == j) { /* an odd last key: computed twice, stored once (into a spare column) */
                float spare[4][2];
                float *tr[4] = {spare[0], spare[1], spare[2], spare[3]};
                scores_4x2(qr, kj, D, a->scale, tr, 0);
                for (int r = 0; r < 4; r++) sr[r][j] = spare[r][0];
            } else {
                scores_4x2(qr, kj, D, a->scale, sr, j);
            }
        }
    }
    for (int i = 0; i < rows; i++) {
        int seen = keys - (rows - 1 - i);
        if (seen > 0) softmax_row(scores + (size_t)i * keys, seen);
    }
    /* outputs: 4 rows at a time where all 4 see keys; a part's keys shared by the 4 go through values_part4,
     * each row's own first and last keys of the part alone, before and after them (k order kept per row) */
    for (int i = 0; i < rows; i += 4) {
        int n = rows - i < 4 ? rows - i : 4;
        int seen0 = keys - (rows - 1 - i);
        float *acc = parts; /* 4 rows x NN_PARTS parts x D */
        memset(acc, 0, sizeof(float) * (size_t)4 * NN_PARTS * D);
        const float *pr[4];
        for (int r = 0; r < 4; r++) pr[r] = scores + (size_t)(i + (r < n ? r : n - 1)) * keys;
        for (int p = 0; p < NN_PARTS; p++) {
            int lo[4], hi[4], shared_lo = 0, shared_hi = 1 << 30;
            float *ar[4];
            for (int r = 0; r < 4; r++) {
                int seen = r < n ? seen0 + r : 0;
                seen = seen > 0 ? seen : 0;
                lo[r] = (int)((long)seen * p / NN_PARTS), hi[r] = (int)((long)seen * (p + 1) / NN_PARTS);
                ar[r] = acc + ((size_t)r * NN_PARTS + p) * D;
                shared_lo = lo[r] > shared_lo ? lo[r] : shared_lo;
                shared_hi = hi[r] < shared_hi ? hi[r] : shared_hi;
            }
            if (n == 4 && shared_lo < shared_hi) {
                for (int r = 0; r < 4; r++) values_part(pr[r], vh, a->v_pos, lo[r], shared_lo, 0, D, ar[r]);
                values_part4(pr, vh, a->v_pos, shared_lo, shared_hi, D, ar);
                for (int r = 0; r < 4; r++) values_part(pr[r], vh, a->v_pos, shared_hi, hi[r], 0, D, ar[r]);
            } else {
                for (int r = 0; r < n; r++) values_part(pr[r], vh, a->v_pos, lo[r], hi[r], 0, D, ar[r]);
            }
        }
        for (int r = 0; r < n; r++) {
            float *o = a->out + (((size_t)b * a->L + r0 + i + r) * a->H + h) * D;
            if (seen0 + r <= 0) memset(o, 0, sizeof(float) * (size_t)D); /* a padding query: zeros */
            else finish_row(acc + (size_t)r * NN_PARTS * D, D, o);
        }
    }
}
#endif

/* Causal attention for a batch of sequences. q: B x H heads x L queries x D; k, v: B x Hkv heads x T keys x D
 * (strides in floats: per sequence, per head, per position; rows contiguous). In sequence b query i sits at
 * position T - L + i and sees keys first[b]..T - L + i (first: the left padding of a batch, NULL for none;
 * query heads share key heads in groups of H / Hkv). out: B x L x H x D, contiguous. Several queries (a
 * prompt's) go to rows_task above; one query (a decode step's) through the few-row products above, the heads
 * spread over the pool, and between them each row's softmax over its visible keys only: the same sums either
 * way (without AVX2 every L takes the products, a prompt's heads in turn). Returns 0, or -1 when out of memory
 * (nothing written). */
struct attention_args {
    const float *q, *k, *v;
    long q_seq, q_head, q_pos, k_seq, k_head, k_pos, v_seq, v_head, v_pos;
    int H, Hkv, L, T, D;
    float scale;
    const int *first;
    float *out;
    int failed;
};

enum { ATTENTION_BLOCK = 64 };

static void attention_head(void *ctx, int task) {
    struct attention_args *a = ctx;
    int b = task / a->H, h = task % a->H, group = a->H / a->Hkv, L = a->L, T = a->T, D = a->D;
    int first = a->first ? a->first[b] : 0;
    const float *qh = a->q + b * a->q_seq + h * a->q_head;
    const float *kh = a->k + b * a->k_seq + (h / group) * a->k_head + first * a->k_pos;
    const float *vh = a->v + b * a->v_seq + (h / group) * a->v_head + first * a->v_pos;
    float *out = a->out + (size_t)b * L * a->H * D;
    float *scores = malloc(sizeof(float) * (size_t)(L < ATTENTION_BLOCK ? L : ATTENTION_BLOCK) * (T - first));
    if (!scores) { a->failed = 1; return; }
    for (int r0 = 0; r0 < L; r0 += ATTENTION_BLOCK) {
        int rows = L - r0 < ATTENTION_BLOCK ? L - r0 : ATTENTION_BLOCK;
        int keys = T - L + r0 + rows - first; /* the visible keys of the block's last query */
        cblas_sgemm(ROW_MAJOR, NO_TRANS, TRANS, rows, keys, D, a->scale, qh + r0 * a->q_pos, (int)a->q_pos, kh,
                    (int)a->k_pos, 0.0f, scores, keys);
        for (int i = 0; i < rows; i++) {
            int seen = keys - (rows - 1 - i);
            float *row = scores + (size_t)i * keys;
            if (seen > 0) softmax_row(row, seen); /* (a padding query of a batch sees nothing: zeros) */
            else seen = 0;
            memset(row + seen, 0, sizeof(float) * (size_t)(keys - seen));
        }
        cblas_sgemm(ROW_MAJOR, NO_TRANS, NO_TRANS, rows, D, keys, 1.0f, scores, keys, vh, (int)a->v_pos, 0.0f,
                    out + ((size_t)r0 * a->H + h) * D, a->H * D);
    }
    free(scores);
}

int mlxcel_attention(const float *q, long q_seq, long q_head, long q_pos, const float *k, long k_seq, long k_head,
                     long k_pos, const float *v, long v_seq, long v_head, long v_pos, int B, int H, int Hkv, int L,
                     int T, int D, float scale, const int *first, float *out) {
#if X86
    if (have_avx2 && L > 1) {
        int blocks = (L + ROWS_BLOCK - 1) / ROWS_BLOCK;
        struct rows_args r = {q, k, v, q_seq, q_head, q_pos, k_seq, k_head, k_pos, v_seq, v_head, v_pos,
                              B, H, Hkv, L, T, D, scale, first, out, blocks, 0};
        pool_run(rows_task, &r, blocks * B * H, 1);
        return r.failed ? -1 : 0;
    }
#endif
    struct attention_args a = {q, k, v, q_seq, q_head, q_pos, k_seq, k_head, k_pos, v_seq, v_head, v_pos,
                               H, Hkv, L, T, D, scale, first, out, 0};
    pool_run(attention_head, &a, B * H, L <= SMALL_M);
    return a.failed ? -1 : 0;
}

/* ---- rotary position embedding (rotate-half, as mx.fast.rope with traditional=False) ---------------------
 * x: B sequences x heads x L positions x D (strides in floats, rows contiguous); in sequence b row i sits at
 * position offsets[b] + i. The first dims of each row turn in pairs (j, j + dims / 2) by the angle
 * scale * position * base^(-2j / dims), computed as ggml does (in float, the power by repeated products),
 * so the reference's rotations are reproduced; the rest stay. out: B x heads x L x D, contiguous. */
HIDDEN void rope_angles(int position, int half, int dims, float base, float scale, const float *yarn,
                        const float *ff, float *c, float *s) {
    float theta = (float)position, theta_scale = powf(base, -2.0f / (float)dims);
    if (!yarn) {
        for (int j = 0; j < half; j++) { /* ggml_rope_cache_init: theta / ff, then freq_scale times it */
            const float extrap = ff ? theta / ff[j] : theta;
            c[j] = cosf(scale * extrap);
            s[j] = sinf(scale * extrap);
            theta *= theta_scale;
        }
        return;
    }
    const float ext = yarn[0], low = yarn[2], high = yarn[3];
    float mscale = yarn[1];
    if (ext != 0.0f) mscale *= 1.0f + 0.1f * logf(1.0f / scale);
    for (int j = 0; j < half; j++) { /* ggml's rope_yarn, pair j being its i0 = 2 j */
        const float extrap = ff ? theta / ff[j] : theta;
        float angle = scale * extrap;
        if (ext != 0.0f) {
            const float y = ((float)j - low) / fmaxf(0.001f, high - low);
            const float mix = (1.0f - fminf(1.0f, fmaxf(0.0f, y))) * ext;
            angle = angle * (1.0f - mix) + extrap * mix;
        }
        c[j] = cosf(angle) * mscale;
        s[j] = sinf(angle) * mscale;
        theta *= theta_scale;
    }
}

void mlxcel_rope(const float *x, long x_seq, long x_head, long x_pos, int B, int heads, int L, int D, int dims,
                 float base, float scale, const float *yarn, const int *offsets, float *out) {
    int half = dims / 2 < ROPE_MAX_HALF ? dims / 2 : ROPE_MAX_HALF;
    float c[ROPE_MAX_HALF], s[ROPE_MAX_HALF];
    for (int b = 0; b < B; b++)
        for (int i = 0; i < L; i++) {
            rope_angles(offsets[b] + i, half, dims, base, scale, yarn, NULL, c, s);
            for (int h = 0; h < heads; h++) {
                const float *xr = x + b * x_seq + h * x_head + i * x_pos;
                float *o = out + (((size_t)b * heads + h) * L + i) * D;
                for (int j = 0; j < half; j++) {
                    float u = xr[j], v = xr[j + half];
                    o[j] = u * c[j] - v * s[j];
                    o[j + half] = u * s[j] + v * c[j];
                }
                for (int j = 2 * half; j < D; j++) o[j] = xr[j];
            }
        }
}
