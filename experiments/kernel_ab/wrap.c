/* One kernel source built as a library for driver.c: the cols loop made callable (gemm_cols, q4_min_pairs),
 * the rows loop through qk_linear (its activations quantized, and put in the loop's order where it has one). Build (this machine's flags: python -c "from stagedspec.engine import qk_kernels as q;
 * print(' '.join(q.build_flags()))"):
 *   gcc <flags> -DKSRC='"/path/to/qk_kernels.c"' wrap.c -o lib_a.so -lm */
#include KSRC
void bench_cols(int kind, const void *w, int64_t N, int64_t K, const float *xd, const int8_t *xq, const int16_t *xs, const int32_t *mp, int64_t n, float *y, int th) { gemm_cols(kind, w, N, K, xd, xq, xs, mp, n, y, N, th); }
void bench_minpairs(const int16_t *xs, int64_t rb, int32_t *mp) { q4_min_pairs(xs, rb, mp); }
void bench_rows(int kind, const void *w, int64_t N, int64_t K, const float *x, int64_t n, float *y, int th) {
    const int64_t rows = N, start = 0;
    const void *ws = w;
    qk_linear(x, 0, n, K, K, 1, &kind, &ws, &rows, &start, 0, NULL, y, 0, N, th);
}
