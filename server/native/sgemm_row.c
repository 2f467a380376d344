/* mlxcel's cblas_sgemm, loaded ahead of the BLAS it forwards to (server/blas.py).
 *
 * MLX's CPU matmul calls cblas_sgemm for every product, including the one-row products of a decode step,
 * where OpenBLAS's GEMM is about 3x slower than its GEMV on the same operands. A one-row, row-major product
 * goes to cblas_sgemv here; everything else goes to the real cblas_sgemm unchanged. */
#include <dlfcn.h>

enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 };

typedef void (*sgemm_fn)(int, int, int, int, int, int, float, const float *, int, const float *, int, float,
                         float *, int);
typedef void (*sgemv_fn)(int, int, int, int, float, const float *, int, const float *, int, float, float *, int);

static sgemm_fn real_sgemm;
static sgemv_fn real_sgemv;
static long one_row_calls;

/* Bind to the BLAS loaded with dlopen(handle); returns 0 when it lacks either symbol. */
int mlxcel_sgemm_bind(void *handle) {
    real_sgemm = (sgemm_fn)dlsym(handle, "cblas_sgemm");
    real_sgemv = (sgemv_fn)dlsym(handle, "cblas_sgemv");
    return real_sgemm != 0 && real_sgemv != 0;
}

long mlxcel_sgemm_one_row_calls(void) { return one_row_calls; }

void cblas_sgemm(int order, int trans_a, int trans_b, int m, int n, int k, float alpha, const float *a, int lda,
                 const float *b, int ldb, float beta, float *c, int ldc) {
    if (m == 1 && order == ROW_MAJOR && trans_a == NO_TRANS && real_sgemv) {
        one_row_calls++;
        /* c (1 x n) = alpha * a (1 x k) * op(b) + beta * c */
        if (trans_b == NO_TRANS) /* b is k x n: c = b^T a */
            real_sgemv(ROW_MAJOR, TRANS, k, n, alpha, b, ldb, a, 1, beta, c, 1);
        else /* b is n x k: c = b a */
            real_sgemv(ROW_MAJOR, NO_TRANS, n, k, alpha, b, ldb, a, 1, beta, c, 1);
        return;
    }
    /* Several rows stay one GEMM: row by row would read the weights once per row (measured: 16 rows twice as
     * slow). A row decoded with others can therefore differ from the same row alone in the last bits. */
    real_sgemm(order, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
