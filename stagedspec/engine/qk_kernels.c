/* A GGUF's Q4_K / Q6_K blocks times int8 activations, for any number of rows.
 *
 * What is computed (the same arithmetic as llama.cpp's CPU backend, Q4_K x Q8_K and Q6_K x Q8_K):
 * each activation row is quantized per block of 256 columns to int8 with one float scale
 * (dx = max|x| / 127, q = round(x / dx)); a weight block's integer dot product with it is exact
 * (int32), then scaled by the block's float scales:
 *   Q4_K: w = d * sc[s] * q - dmin * m[s]   (8 groups s of 32; q 0..15; sc, m 6-bit)
 *         dot = dx * (d * sum_s sc[s] * sum_i q_i x_i  -  dmin * sum_s m[s] * sum_i x_i)
 *   Q6_K: w = d * sc[s] * (u - 32)          (16 groups of 16; u 0..63; sc int8)
 *         dot = dx * d * sum_s sc[s] * (sum_i u_i x_i - 32 sum_i x_i)
 * summed over blocks in float32, in block order. Each output (row r, column j) is computed by
 * the same instructions in the same order whatever the number of rows n, so a row's result
 * does not depend on how many rows come with it: bitwise, not just up to rounding.
 *
 * Speed: the weights are unpacked once per block and used for up to ROWS activation rows
 * (llama.cpp's CPU backend unpacks them once per (row, column) dot product), so a verification
 * of n rows reads the weights once and pays only the integer dot products for more rows.
 * AVX-512 (BW, VL, VNNI not needed) where the compiler is told the CPU has it; a scalar loop of
 * the same arithmetic otherwise (the integer parts are exact, so both give the same int32 sums;
 * the float sums may differ in order between the two builds, never within one).
 *
 * The weights are repacked once at load into layouts made for the unpacking below
 * (qk_repack_q4k, qk_repack_q6k): element 64c + p of a block is byte p of chunk c. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include <immintrin.h>
#define QK_AVX512 1
#else
#define QK_AVX512 0
#endif

#define QK 256
#define ROWS 4 /* activation rows per pass over a weight block */

typedef struct {  /* 152 bytes */
    float d, dmin;
    uint8_t sc[8], m[8];
    uint8_t qs[128]; /* chunk c (32 bytes): low nibble of byte i = element 64c + i, high = 64c + 32 + i */
} q4_block;

typedef struct {  /* 212 bytes */
    float d;
    int8_t sc[16];
    uint8_t lo[128]; /* low 4 bits, as q4_block.qs */
    uint8_t hi[64];  /* chunk c (16 bytes): bits 2L, 2L+1 of byte i = high 2 bits of element 64c + 16L + i */
} q6_block;

int qk_simd(void) { return QK_AVX512; }
int qk_q4_block_bytes(void) { return (int)sizeof(q4_block); }
int qk_q6_block_bytes(void) { return (int)sizeof(q6_block); }

static float fp16_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: normalize */
            exp = 127 - 15 + 1;
            while (!(man & 0x400)) { man <<= 1; exp--; }
            bits = sign | (exp << 23) | ((man & 0x3ff) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* ---------------------------------------------------------------- repacking (once, at load) */
/* GGUF Q4_K blocks (144 bytes: d, dmin fp16; 12 bytes of 6-bit scales and mins; 128 bytes codes)
 * -> q4_block. The codes keep their bytes: Q4_K already stores chunk c as above. */
void qk_repack_q4k(const uint8_t *src, int64_t nblocks, q4_block *dst) {
    for (int64_t i = 0; i < nblocks; i++) {
        const uint8_t *b = src + 144 * i;
        q4_block *o = dst + i;
        uint16_t h;
        memcpy(&h, b, 2); o->d = fp16_to_float(h);
        memcpy(&h, b + 2, 2); o->dmin = fp16_to_float(h);
        const uint8_t *s = b + 4;
        for (int j = 0; j < 8; j++) {
            if (j < 4) {
                o->sc[j] = s[j] & 63;
                o->m[j] = s[j + 4] & 63;
            } else {
                o->sc[j] = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
                o->m[j] = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
            }
        }
        memcpy(o->qs, b + 16, 128);
    }
}

/* GGUF Q6_K blocks (210 bytes: ql[128], qh[64], scales int8[16], d fp16) -> q6_block. */
void qk_repack_q6k(const uint8_t *src, int64_t nblocks, q6_block *dst) {
    uint8_t u[QK];
    for (int64_t i = 0; i < nblocks; i++) {
        const uint8_t *b = src + 210 * i, *ql = b, *qh = b + 128;
        q6_block *o = dst + i;
        for (int half = 0; half < 2; half++) {  /* llama.cpp's dequantize_row_q6_K, element by element */
            const uint8_t *l = ql + 64 * half, *h = qh + 32 * half;
            uint8_t *y = u + 128 * half;
            for (int k = 0; k < 32; k++) {
                y[k] = (l[k] & 0xF) | (((h[k] >> 0) & 3) << 4);
                y[k + 32] = (l[k + 32] & 0xF) | (((h[k] >> 2) & 3) << 4);
                y[k + 64] = (l[k] >> 4) | (((h[k] >> 4) & 3) << 4);
                y[k + 96] = (l[k + 32] >> 4) | (((h[k] >> 6) & 3) << 4);
            }
        }
        memcpy(o->sc, b + 192, 16);
        uint16_t hd;
        memcpy(&hd, b + 208, 2);
        o->d = fp16_to_float(hd);
        for (int c = 0; c < 4; c++) {
            for (int p = 0; p < 32; p++)
                o->lo[32 * c + p] = (u[64 * c + p] & 0xF) | ((u[64 * c + 32 + p] & 0xF) << 4);
            for (int p = 0; p < 16; p++) {
                uint8_t v = 0;
                for (int L = 0; L < 4; L++) v |= (uint8_t)((u[64 * c + 16 * L + p] >> 4) << (2 * L));
                o->hi[16 * c + p] = v;
            }
        }
    }
}

/* The weight a block holds, element by element in float32 (tests, and the dense copy). */
void qk_dequant_q4(const q4_block *w, int64_t nblocks, float *out) {
    for (int64_t i = 0; i < nblocks; i++, out += QK) {
        for (int c = 0; c < 4; c++)
            for (int p = 0; p < 32; p++) {
                out[64 * c + p] = w[i].d * w[i].sc[2 * c] * (w[i].qs[32 * c + p] & 0xF) - w[i].dmin * w[i].m[2 * c];
                out[64 * c + 32 + p] = w[i].d * w[i].sc[2 * c + 1] * (w[i].qs[32 * c + p] >> 4) - w[i].dmin * w[i].m[2 * c + 1];
            }
    }
}

static inline int q6_code(const q6_block *w, int e) {
    int c = e / 64, p = e % 64;
    int low = p < 32 ? (w->lo[32 * c + p] & 0xF) : (w->lo[32 * c + p - 32] >> 4);
    int L = p / 16, i = p % 16;
    return low | (((w->hi[16 * c + i] >> (2 * L)) & 3) << 4);
}

void qk_dequant_q6(const q6_block *w, int64_t nblocks, float *out) {
    for (int64_t i = 0; i < nblocks; i++, out += QK)
        for (int e = 0; e < QK; e++) out[e] = w[i].d * w[i].sc[e / 16] * (q6_code(w + i, e) - 32);
}

/* ---------------------------------------------------------------- activations */
/* x [n, K] float32 -> per row and block of 256: dx (float), q (int8 x 256), sums of 16 (int16 x 16).
 * q = round-half-even(x * (127 / max|x|)), dx = max|x| / 127 (all zero for an all-zero block); the
 * AVX-512 loop computes the same values as the scalar one (a product, then the CPU's rounding). */
static void quantize_block(const float *v, float *xd, int8_t *q, int16_t *xs) {
    float amax = 0.0f;
#if QK_AVX512
    __m512 m = _mm512_setzero_ps();
    for (int i = 0; i < QK; i += 16) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(v + i)));
    amax = _mm512_reduce_max_ps(m);
#else
    for (int i = 0; i < QK; i++) amax = fmaxf(amax, fabsf(v[i]));
#endif
    if (amax == 0.0f) {
        *xd = 0.0f;
        memset(q, 0, QK);
        memset(xs, 0, 32);
        return;
    }
    const float iscale = 127.0f / amax;
    *xd = amax / 127.0f;
#if QK_AVX512
    const __m512 is = _mm512_set1_ps(iscale);
    const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
    for (int g = 0; g < 16; g++) {
        __m512i t = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(v + 16 * g), is));
        t = _mm512_min_epi32(_mm512_max_epi32(t, lo), hi);
        _mm_storeu_si128((__m128i *)(q + 16 * g), _mm512_cvtepi32_epi8(t));
        xs[g] = (int16_t)_mm512_reduce_add_epi32(t);
    }
#else
    for (int i = 0; i < QK; i++) {
        int t = (int)nearbyintf(iscale * v[i]);
        q[i] = (int8_t)(t > 127 ? 127 : (t < -127 ? -127 : t));
    }
    for (int g = 0; g < 16; g++) {
        int s = 0;
        for (int i = 0; i < 16; i++) s += q[16 * g + i];
        xs[g] = (int16_t)s;
    }
#endif
}

void qk_quantize(const float *x, int64_t n, int64_t K, float *xd, int8_t *xq, int16_t *xs, int threads) {
    const int64_t nb = K / QK;
#pragma omp parallel for num_threads(threads) schedule(static) if (n * nb >= 64)
    for (int64_t o = 0; o < n * nb; o++) quantize_block(x + (o / nb) * K + (o % nb) * QK, xd + o, xq + o * QK, xs + o * 16);
}

/* ---------------------------------------------------------------- the products */
#if QK_AVX512
static inline float hsum(__m512 v) { return _mm512_reduce_add_ps(v); }

/* y[r, j] for R rows of activations (r0 .. r0 + R - 1) and one weight row j. */
static inline __attribute__((always_inline)) void q4_rows(const q4_block *w, int64_t nb, const float *xd,
                                                          const int8_t *xq, const int16_t *xs, int64_t r0, int R,
                                                          float *y, int64_t ldy, int64_t j) {
    __m512 acc[ROWS];
    __m256 accm[ROWS];
    for (int r = 0; r < R; r++) { acc[r] = _mm512_setzero_ps(); accm[r] = _mm256_setzero_ps(); }
    const __m256i nib = _mm256_set1_epi8(0x0F);
    /* int16 lane l of chunk c's scale vector takes group 2c for l < 16, 2c + 1 after */
    const __m512i pick0 = _mm512_set_epi16(1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1, 0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0);
    const __m512i two = _mm512_set1_epi16(2);
    for (int64_t b = 0; b < nb; b++) {
        const q4_block *blk = w + b;
        __m512i W[4], S[4];
        const __m512i sc16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)blk->sc)));
        __m512i pick = pick0;
        for (int c = 0; c < 4; c++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(blk->qs + 32 * c));
            W[c] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(q, nib)),
                                      _mm256_and_si256(_mm256_srli_epi16(q, 4), nib), 1);
            S[c] = _mm512_permutexvar_epi16(pick, sc16);
            pick = _mm512_add_epi16(pick, two);
        }
        /* mins per group of 16 activations: m[g / 2] */
        const __m128i m8 = _mm_loadl_epi64((const __m128i *)blk->m);
        const __m256i m16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
        for (int r = 0; r < R; r++) {
            const int64_t o = (r0 + r) * nb + b;
            const int8_t *x = xq + o * QK;
            __m512i p = _mm512_madd_epi16(_mm512_maddubs_epi16(W[0], _mm512_loadu_si512(x)), S[0]);
            p = _mm512_add_epi32(p, _mm512_madd_epi16(_mm512_maddubs_epi16(W[1], _mm512_loadu_si512(x + 64)), S[1]));
            p = _mm512_add_epi32(p, _mm512_madd_epi16(_mm512_maddubs_epi16(W[2], _mm512_loadu_si512(x + 128)), S[2]));
            p = _mm512_add_epi32(p, _mm512_madd_epi16(_mm512_maddubs_epi16(W[3], _mm512_loadu_si512(x + 192)), S[3]));
            const __m256i mm = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(xs + o * 16)), m16);
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_set1_ps(blk->d * xd[o]), acc[r]);
            accm[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mm), _mm256_set1_ps(blk->dmin * xd[o]), accm[r]);
        }
    }
    for (int r = 0; r < R; r++) {
        const __m256 a = _mm256_add_ps(_mm512_castps512_ps256(acc[r]), _mm512_extractf32x8_ps(acc[r], 1));
        const __m256 t = _mm256_sub_ps(a, accm[r]);
        __m128 s = _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
        s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        s = _mm_add_ss(s, _mm_movehdup_ps(s));
        y[(r0 + r) * ldy + j] = _mm_cvtss_f32(s);
    }
}

static inline __attribute__((always_inline)) void q6_rows(const q6_block *w, int64_t nb, const float *xd,
                                                          const int8_t *xq, const int16_t *xs, int64_t r0, int R,
                                                          float *y, int64_t ldy, int64_t j) {
    __m512 acc[ROWS];
    for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
    const __m256i nib = _mm256_set1_epi8(0x0F);
    const __m512i three = _mm512_set1_epi8(3);
    /* 128-bit lane L of a chunk takes bits 2L, 2L + 1 of the high bytes */
    const __m512i shifts = _mm512_set_epi16(6,6,6,6,6,6,6,6, 4,4,4,4,4,4,4,4, 2,2,2,2,2,2,2,2, 0,0,0,0,0,0,0,0);
    /* int16 lane l of chunk c's scale vector: group 4c + l / 8 */
    const __m512i pick0 = _mm512_set_epi16(3,3,3,3,3,3,3,3, 2,2,2,2,2,2,2,2, 1,1,1,1,1,1,1,1, 0,0,0,0,0,0,0,0);
    const __m512i four = _mm512_set1_epi16(4);
    for (int64_t b = 0; b < nb; b++) {
        const q6_block *blk = w + b;
        __m512i U[4], S[4];
        const __m256i sc16y = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)blk->sc));
        const __m512i sc16 = _mm512_castsi256_si512(sc16y);
        __m512i pick = pick0;
        for (int c = 0; c < 4; c++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(blk->lo + 32 * c));
            const __m512i low = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(q, nib)),
                                                   _mm256_and_si256(_mm256_srli_epi16(q, 4), nib), 1);
            const __m512i h = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(blk->hi + 16 * c)));
            const __m512i high = _mm512_and_si512(_mm512_srlv_epi16(h, shifts), three);
            U[c] = _mm512_or_si512(low, _mm512_slli_epi16(high, 4));
            S[c] = _mm512_permutexvar_epi16(pick, sc16);
            pick = _mm512_add_epi16(pick, four);
        }
        for (int r = 0; r < R; r++) {
            const int64_t o = (r0 + r) * nb + b;
            const int8_t *x = xq + o * QK;
            __m512i p = _mm512_madd_epi16(_mm512_maddubs_epi16(U[0], _mm512_loadu_si512(x)), S[0]);
            p = _mm512_add_epi32(p, _mm512_madd_epi16(_mm512_maddubs_epi16(U[1], _mm512_loadu_si512(x + 64)), S[1]));
            p = _mm512_add_epi32(p, _mm512_madd_epi16(_mm512_maddubs_epi16(U[2], _mm512_loadu_si512(x + 128)), S[2]));
            p = _mm512_add_epi32(p, _mm512_madd_epi16(_mm512_maddubs_epi16(U[3], _mm512_loadu_si512(x + 192)), S[3]));
            /* - 32 * sum_g sc[g] * (sum of group g's activations) */
            const __m256i off = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(xs + o * 16)), sc16y);
            p = _mm512_sub_epi32(p, _mm512_zextsi256_si512(_mm256_slli_epi32(off, 5)));
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_set1_ps(blk->d * xd[o]), acc[r]);
        }
    }
    for (int r = 0; r < R; r++) y[(r0 + r) * ldy + j] = hsum(acc[r]);
}
/* ---- rows in lanes: 16 activation rows side by side, for many rows.
 * The panel holds, per tile of 16 rows and block b: the int8 activations as [64 quads][16 rows][4],
 * dx as [16] and the sums of 16 activations as [8 pairs of groups][16 rows][2] (int16). A weight's
 * 4 consecutive codes are broadcast and multiplied with 16 rows' 4 activations in one vpdpbusd-style
 * step (maddubs + madd with ones without VNNI), so the work per extra row is the integer dot product
 * alone. Per (row, column) each block's integer sums are exact and the float sums run in block order:
 *   acc = fma(float(sumi), d * dx, acc); acc = fma(float(summ), -dmin * dx, acc)    (Q4_K)
 *   acc = fma(float(sumi), d * dx, acc)                                           (Q6_K)
 */
#define TILE 16
static inline __m512i dot4(__m512i acc, int32_t w4, const int8_t *x) {
#ifdef __AVX512VNNI__
    return _mm512_dpbusd_epi32(acc, _mm512_set1_epi32(w4), _mm512_loadu_si512(x));
#else
    const __m512i p = _mm512_maddubs_epi16(_mm512_set1_epi32(w4), _mm512_loadu_si512(x));
    return _mm512_add_epi32(acc, _mm512_madd_epi16(p, _mm512_set1_epi16(1)));
#endif
}

/* One weight block against the 16 rows of one tile's block: returns the rows' exact integer sums
 * (Q4_K also its min sums in *summ), as described above. */
static inline __attribute__((always_inline)) void q4_unpack(const q4_block *blk, uint8_t *buf) {
    const __m256i nib = _mm256_set1_epi8(0x0F);
    for (int c = 0; c < 4; c++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(blk->qs + 32 * c));
        _mm256_store_si256((__m256i *)(buf + 64 * c), _mm256_and_si256(q, nib));
        _mm256_store_si256((__m256i *)(buf + 64 * c + 32), _mm256_and_si256(_mm256_srli_epi16(q, 4), nib));
    }
}

static inline __attribute__((always_inline)) __m512i q4_tile_block(const q4_block *blk, const uint8_t *buf,
                                                                    const int8_t *x, const int16_t *bs, __m512i *summ) {
    __m512i t[8], sumi = _mm512_setzero_si512();  /* one accumulator per group: 8 independent chains */
    for (int s = 0; s < 8; s++) t[s] = _mm512_setzero_si512();
    for (int q = 0; q < 8; q++)
        for (int s = 0; s < 8; s++) {
            int32_t w4;
            memcpy(&w4, buf + 32 * s + 4 * q, 4);
            t[s] = dot4(t[s], w4, x + (8 * s + q) * 64);
        }
    for (int s = 0; s < 8; s++) sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(t[s], _mm512_set1_epi32(blk->sc[s])));
    __m512i m = _mm512_setzero_si512();
    for (int g = 0; g < 8; g++) /* groups of 16 activations 2g, 2g + 1: group g of 32 */
        m = _mm512_add_epi32(m, _mm512_madd_epi16(_mm512_loadu_si512(bs + 32 * g), _mm512_set1_epi16((int16_t)blk->m[g])));
    *summ = m;
    return sumi;
}

static inline __attribute__((always_inline)) void q6_unpack(const q6_block *blk, uint8_t *buf) {
    const __m256i nib = _mm256_set1_epi8(0x0F);
    const __m512i three = _mm512_set1_epi8(3);
    const __m512i shifts = _mm512_set_epi16(6,6,6,6,6,6,6,6, 4,4,4,4,4,4,4,4, 2,2,2,2,2,2,2,2, 0,0,0,0,0,0,0,0);
    for (int c = 0; c < 4; c++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(blk->lo + 32 * c));
        const __m512i low = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(q, nib)),
                                               _mm256_and_si256(_mm256_srli_epi16(q, 4), nib), 1);
        const __m512i h = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(blk->hi + 16 * c)));
        const __m512i high = _mm512_and_si512(_mm512_srlv_epi16(h, shifts), three);
        _mm512_store_si512((__m512i *)(buf + 64 * c), _mm512_or_si512(low, _mm512_slli_epi16(high, 4)));
    }
}

static inline __attribute__((always_inline)) __m512i q6_tile_block(const q6_block *blk, const uint8_t *buf,
                                                                    const int8_t *x, const int16_t *bs) {
    __m512i sumi = _mm512_setzero_si512(), off = _mm512_setzero_si512();
    for (int half = 0; half < 2; half++) {  /* 8 groups at a time: 8 independent chains */
        __m512i t[8];
        for (int g = 0; g < 8; g++) t[g] = _mm512_setzero_si512();
        for (int q = 0; q < 4; q++)
            for (int g = 0; g < 8; g++) {
                const int G = 8 * half + g;
                int32_t w4;
                memcpy(&w4, buf + 16 * G + 4 * q, 4);
                t[g] = dot4(t[g], w4, x + (4 * G + q) * 64);
            }
        for (int g = 0; g < 8; g++)
            sumi = _mm512_add_epi32(sumi, _mm512_mullo_epi32(t[g], _mm512_set1_epi32(blk->sc[8 * half + g])));
    }
    for (int g = 0; g < 8; g++) {
        const int32_t pair = (int32_t)(uint16_t)(int16_t)blk->sc[2 * g] | ((int32_t)(int16_t)blk->sc[2 * g + 1] << 16);
        off = _mm512_add_epi32(off, _mm512_madd_epi16(_mm512_loadu_si512(bs + 32 * g), _mm512_set1_epi32(pair)));
    }
    return _mm512_sub_epi32(sumi, _mm512_slli_epi32(off, 5));
}

#ifndef PREFETCH
#define PREFETCH 8
#endif
/* PREFETCH: blocks ahead (prefetching past a row's end reads the next row's blocks: harmless) */
#ifndef JB
#define JB 4
#endif
/* JB: weight rows per pass over a tile: each 4 KB activation block is read from L1 JB times */

/* out[jj * TILE + l] for weight rows j0 .. j0 + jn - 1 (jn <= JB) and the tile's 16 rows. */
static void q4_tile(const q4_block *w, int64_t nb, int jn, const int8_t *xp, const float *xdp, const int16_t *xsp,
                    float *out) {
    __m512 acc[JB];
    uint8_t buf[JB][QK] __attribute__((aligned(64)));
    for (int jj = 0; jj < JB; jj++) acc[jj] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const int8_t *x = xp + b * (QK * TILE);
        const int16_t *bs = xsp + b * (16 * TILE);
        const __m512 dx = _mm512_loadu_ps(xdp + b * TILE);
        for (int jj = 0; jj < jn; jj++) { /* a few blocks ahead: DRAM latency is longer than a block's work */
            const char *ahead = (const char *)(w + jj * nb + b + PREFETCH);
            _mm_prefetch(ahead, _MM_HINT_T0), _mm_prefetch(ahead + 64, _MM_HINT_T0), _mm_prefetch(ahead + 128, _MM_HINT_T0);
        }
        for (int jj = 0; jj < jn; jj++) q4_unpack(w + jj * nb + b, buf[jj]);  /* all first: no store-to-load stall */
        for (int jj = 0; jj < jn; jj++) {
            const q4_block *blk = w + jj * nb + b;
            __m512i summ;
            const __m512i sumi = q4_tile_block(blk, buf[jj], x, bs, &summ);
            acc[jj] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_mul_ps(_mm512_set1_ps(blk->d), dx), acc[jj]);
            acc[jj] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(summ), _mm512_mul_ps(_mm512_set1_ps(-blk->dmin), dx), acc[jj]);
        }
    }
    for (int jj = 0; jj < jn; jj++) _mm512_storeu_ps(out + jj * TILE, acc[jj]);
}

static void q6_tile(const q6_block *w, int64_t nb, int jn, const int8_t *xp, const float *xdp, const int16_t *xsp,
                    float *out) {
    __m512 acc[JB];
    uint8_t buf[JB][QK] __attribute__((aligned(64)));
    for (int jj = 0; jj < JB; jj++) acc[jj] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const int8_t *x = xp + b * (QK * TILE);
        const int16_t *bs = xsp + b * (16 * TILE);
        const __m512 dx = _mm512_loadu_ps(xdp + b * TILE);
        for (int jj = 0; jj < jn; jj++) {
            const char *ahead = (const char *)(w + jj * nb + b + PREFETCH);
            _mm_prefetch(ahead, _MM_HINT_T0), _mm_prefetch(ahead + 64, _MM_HINT_T0), _mm_prefetch(ahead + 128, _MM_HINT_T0),
                _mm_prefetch(ahead + 192, _MM_HINT_T0);
        }
        for (int jj = 0; jj < jn; jj++) q6_unpack(w + jj * nb + b, buf[jj]);
        for (int jj = 0; jj < jn; jj++) {
            const q6_block *blk = w + jj * nb + b;
            const __m512i sumi = q6_tile_block(blk, buf[jj], x, bs);
            acc[jj] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_mul_ps(_mm512_set1_ps(blk->d), dx), acc[jj]);
        }
    }
    for (int jj = 0; jj < jn; jj++) _mm512_storeu_ps(out + jj * TILE, acc[jj]);
}

/* The panel of tile t (rows 16t .. 16t + 15; rows past n are zero) from qk_quantize's arrays. */
void qk_panel(const float *xd, const int8_t *xq, const int16_t *xs, int64_t n, int64_t K, int8_t *xp, float *xdp,
              int16_t *xsp) {
    const int64_t nb = K / QK, tiles = (n + TILE - 1) / TILE;
    memset(xp, 0, (size_t)(tiles * nb * QK * TILE));
    memset(xdp, 0, (size_t)(tiles * nb * TILE) * sizeof(float));
    memset(xsp, 0, (size_t)(tiles * nb * 16 * TILE) * sizeof(int16_t));
    for (int64_t r = 0; r < n; r++) {
        const int64_t t = r / TILE, l = r % TILE;
        for (int64_t b = 0; b < nb; b++) {
            const int64_t o = r * nb + b, tb = t * nb + b;
            const int8_t *q = xq + o * QK;
            for (int k = 0; k < QK / 4; k++) memcpy(xp + (tb * (QK / 4) + k) * (4 * TILE) + 4 * l, q + 4 * k, 4);
            xdp[tb * TILE + l] = xd[o];
            for (int g = 0; g < 8; g++) {
                xsp[(tb * 8 + g) * (2 * TILE) + 2 * l] = xs[o * 16 + 2 * g];
                xsp[(tb * 8 + g) * (2 * TILE) + 2 * l + 1] = xs[o * 16 + 2 * g + 1];
            }
        }
    }
}

/* y[r, j] for all n rows through the panel (qk_panel). */
void qk_gemm_tiles(int kind, const void *w, int64_t N, int64_t K, const int8_t *xp, const float *xdp,
                   const int16_t *xsp, int64_t n, float *y, int64_t ldy, int threads) {
    const int64_t nb = K / QK, tiles = (n + TILE - 1) / TILE, groups = (N + JB - 1) / JB;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t jg = 0; jg < groups; jg++) {
        const int64_t j0 = jg * JB;
        const int jn = (int)(N - j0 < JB ? N - j0 : JB);
        float out[JB * TILE];
        for (int64_t t = 0; t < tiles; t++) {
            const int8_t *x = xp + t * nb * QK * TILE;
            const float *d = xdp + t * nb * TILE;
            const int16_t *s = xsp + t * nb * 16 * TILE;
            if (kind == 4) q4_tile((const q4_block *)w + j0 * nb, nb, jn, x, d, s, out);
            else q6_tile((const q6_block *)w + j0 * nb, nb, jn, x, d, s, out);
            for (int jj = 0; jj < jn; jj++)
                for (int64_t l = 0; l < TILE && t * TILE + l < n; l++) y[(t * TILE + l) * ldy + j0 + jj] = out[jj * TILE + l];
        }
    }
}
#endif

/* Scalar twins: the same integer sums, the float sums in a fixed order. */
static void q4_rows_scalar(const q4_block *w, int64_t nb, const float *xd, const int8_t *xq, const int16_t *xs,
                           int64_t r, float *y, int64_t ldy, int64_t j) {
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        const int64_t o = r * nb + b;
        const int8_t *x = xq + o * QK;
        int32_t sumi = 0, summ = 0;
        for (int c = 0; c < 4; c++) {
            int32_t s0 = 0, s1 = 0;
            for (int p = 0; p < 32; p++) {
                s0 += (w[b].qs[32 * c + p] & 0xF) * x[64 * c + p];
                s1 += (w[b].qs[32 * c + p] >> 4) * x[64 * c + 32 + p];
            }
            sumi += w[b].sc[2 * c] * s0 + w[b].sc[2 * c + 1] * s1;
        }
        for (int g = 0; g < 16; g++) summ += w[b].m[g / 2] * xs[o * 16 + g];
        acc += w[b].d * xd[o] * (float)sumi - w[b].dmin * xd[o] * (float)summ;
    }
    y[r * ldy + j] = acc;
}

static void q6_rows_scalar(const q6_block *w, int64_t nb, const float *xd, const int8_t *xq, const int16_t *xs,
                           int64_t r, float *y, int64_t ldy, int64_t j) {
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; b++) {
        const int64_t o = r * nb + b;
        const int8_t *x = xq + o * QK;
        int32_t sumi = 0;
        for (int g = 0; g < 16; g++) {
            int32_t s = 0;
            for (int i = 0; i < 16; i++) s += q6_code(w + b, 16 * g + i) * x[16 * g + i];
            sumi += w[b].sc[g] * (s - 32 * xs[o * 16 + g]);
        }
        acc += w[b].d * xd[o] * (float)sumi;
    }
    y[r * ldy + j] = acc;
}

/* y[r, j] (row stride ldy) = sum_k x[r, k] w[j, k] for r < n, j < N; w: N rows of K / 256 blocks.
 * kind 4: q4_block, 6: q6_block. */
void qk_gemm(int kind, const void *w, int64_t N, int64_t K, const float *xd, const int8_t *xq, const int16_t *xs,
             int64_t n, float *y, int64_t ldy, int threads) {
    const int64_t nb = K / QK;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t j = 0; j < N; j++) {
        int64_t r0 = 0;
#if QK_AVX512
        if (kind == 4) {
            const q4_block *wj = (const q4_block *)w + j * nb;
            for (; r0 + ROWS <= n; r0 += ROWS) q4_rows(wj, nb, xd, xq, xs, r0, ROWS, y, ldy, j);
            switch (n - r0) {
                case 3: q4_rows(wj, nb, xd, xq, xs, r0, 3, y, ldy, j); break;
                case 2: q4_rows(wj, nb, xd, xq, xs, r0, 2, y, ldy, j); break;
                case 1: q4_rows(wj, nb, xd, xq, xs, r0, 1, y, ldy, j); break;
            }
        } else {
            const q6_block *wj = (const q6_block *)w + j * nb;
            for (; r0 + ROWS <= n; r0 += ROWS) q6_rows(wj, nb, xd, xq, xs, r0, ROWS, y, ldy, j);
            switch (n - r0) {
                case 3: q6_rows(wj, nb, xd, xq, xs, r0, 3, y, ldy, j); break;
                case 2: q6_rows(wj, nb, xd, xq, xs, r0, 2, y, ldy, j); break;
                case 1: q6_rows(wj, nb, xd, xq, xs, r0, 1, y, ldy, j); break;
            }
        }
#else
        for (; r0 < n; r0++) {
            if (kind == 4) q4_rows_scalar((const q4_block *)w + j * nb, nb, xd, xq, xs, r0, y, ldy, j);
            else q6_rows_scalar((const q6_block *)w + j * nb, nb, xd, xq, xs, r0, y, ldy, j);
        }
#endif
    }
}
