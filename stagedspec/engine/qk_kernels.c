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
 * Speed: two loops. ``rows`` unpacks a weight block once and multiplies it with up to 4 activation
 * rows (llama.cpp's CPU backend unpacks it once per (row, column) dot product): the one-row step is a
 * read of the blocks. In AVX-512 builds it takes a block's elements in an order where each 32-bit lane
 * stays within one scale group, so a row costs four vpdpbusd and one multiply a block (the activations
 * permuted to match once per call). ``cols`` (AVX-512 VNNI builds) holds 16 weight rows' codes side by side in the
 * lanes (a second copy of the weights in that layout, qk_cols_*), broadcasts 4 activations of a row
 * into one vpdpbusd and carries 8 activation rows at a time, so an extra row costs its integer dot
 * products and little else. Both sum the same exact integers; their float sums differ in order.
 * A scalar loop of the same arithmetic runs where the compiler is told of no AVX-512.
 *
 * The weights are repacked once at load into layouts made for the unpacking below
 * (qk_repack_q4k, qk_repack_q6k): element 64c + p of a block is byte p of chunk c. */
#include <math.h>
#include <stdlib.h>
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
/* AVX2 with FMA (a CPU without AVX-512, e.g. AMD Zen 2): the rows loop in 256-bit registers; no cols loop */
#if !QK_AVX512 && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define QK_AVX2 1
#else
#define QK_AVX2 0
#endif
#if QK_AVX512 && defined(__AMX_TILE__) && defined(__AMX_INT8__)
#include <sys/syscall.h>
#include <unistd.h>
#define QK_AMX 1
#else
#define QK_AMX 0
#endif

#define QK 256
#define ROWS 4 /* activation rows per pass over a weight block */
#define PREFETCH 8 /* blocks ahead of the rows loops' reads (AMD EPYC, 2 threads, the 1.5B's GEMMs: 1 row
                    * 33.8 -> 32.3 ms, 4 rows 66.7 -> 58.3 against none; 4 or 16 blocks ahead did less) */

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
int qk_avx2(void) { return QK_AVX2; }
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

/* The code of element e (0..255) of a block, in the layouts above. */
static inline int q4_code(const q4_block *w, int e) {
    int c = e / 64, p = e % 64;
    return p < 32 ? (w->qs[32 * c + p] & 0xF) : (w->qs[32 * c + p - 32] >> 4);
}

/* The weight a block holds, element by element in float32 (tests, and the dense copy). */
void qk_dequant_q4(const q4_block *w, int64_t nblocks, float *out) {
    for (int64_t i = 0; i < nblocks; i++, out += QK)
        for (int e = 0; e < QK; e++) out[e] = w[i].d * w[i].sc[e / 32] * q4_code(w + i, e) - w[i].dmin * w[i].m[e / 32];
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

/* The rows loop's order of a block's elements (AVX-512 builds): four vpdpbusd a row, each over 4 consecutive
 * elements of every group in each 32-bit lane, so a lane's sum after the four stays within one group and is
 * scaled once, by one multiply (Q4_K: 16 products of 4-bit codes and int8 fit int16, so vpmaddwd with the
 * scale in its low half; Q6_K: vpmulld). The activations are permuted to match once per call (qk_linear:
 * rows_order), the weights in registers once per block, shared by the rows.
 * Q4_K (8 groups of 32): instruction k, lane l takes elements 32 (l / 2) + 8k + 4 (l % 2) + 0..3 (group l / 2).
 * Q6_K (16 groups of 16): instruction k, lane l takes elements 16 l + 4k + 0..3 (group l). */
/* xq's blocks (natural order) -> out, each block in the rows loop's order for its kind: dword 16k + l of a
 * permuted block is dword 8 (l / 2) + 2k + l % 2 (Q4_K) or 4l + k (Q6_K) of the block, gathered 16 at a time
 * from its 256 bytes (in L1) */
static void rows_order(int kind, const int8_t *xq, int64_t blocks, int8_t *out) {
    const __m512i base = kind == 4 ? _mm512_set_epi32(57, 56, 49, 48, 41, 40, 33, 32, 25, 24, 17, 16, 9, 8, 1, 0)
                                   : _mm512_set_epi32(60, 56, 52, 48, 44, 40, 36, 32, 28, 24, 20, 16, 12, 8, 4, 0);
    const __m512i step = _mm512_set1_epi32(kind == 4 ? 2 : 1);
    for (int64_t o = 0; o < blocks; o++) {
        const int32_t *src = (const int32_t *)(xq + o * QK);
        int32_t *dst = (int32_t *)(out + o * QK);
        __m512i idx = base;
        for (int k = 0; k < 4; k++, idx = _mm512_add_epi32(idx, step))
            _mm512_storeu_si512(dst + 16 * k, _mm512_i32gather_epi32(idx, src, 4));
    }
}

/* acc + the 4-byte dot products of unsigned w and signed x, lane by lane (vpdpbusd where the CPU has VNNI) */
static inline __m512i dot4(__m512i acc, __m512i w, __m512i x) {
#ifdef __AVX512VNNI__
    return _mm512_dpbusd_epi32(acc, w, x);
#else
    return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(w, x), _mm512_set1_epi16(1)));
#endif
}

/* y[r, j] for R rows of activations (r0 .. r0 + R - 1, in the rows loop's order: xp) and one weight row j. */
static inline __attribute__((always_inline)) void q4_rows(const q4_block *w, int64_t nb, const float *xd,
                                                          const int8_t *xp, const int16_t *xs, int64_t r0, int R,
                                                          float *y, int64_t ldy, int64_t j) {
    __m512 acc[ROWS];
    __m256 accm[ROWS];
    for (int r = 0; r < R; r++) { acc[r] = _mm512_setzero_ps(); accm[r] = _mm256_setzero_ps(); }
    const __m512i nib = _mm512_set1_epi8(0x0F);
    /* instruction k, lane l: code dword 8 (l / 4) + 2k + l % 2, its low nibbles where (l / 2) is even, else its high */
    const __m512i base = _mm512_set_epi32(25, 24, 25, 24, 17, 16, 17, 16, 9, 8, 9, 8, 1, 0, 1, 0);
    const __m512i nshift = _mm512_set_epi32(4, 4, 0, 0, 4, 4, 0, 0, 4, 4, 0, 0, 4, 4, 0, 0);
    const __m512i two = _mm512_set1_epi32(2);
    for (int64_t b = 0; b < nb; b++) {
        const q4_block *blk = w + b;
        for (int l = 0; l < 3; l++) _mm_prefetch((const char *)(blk + PREFETCH) + 64 * l, _MM_HINT_T0);
        const __m512i lo = _mm512_loadu_si512(blk->qs), hi = _mm512_loadu_si512(blk->qs + 64);
        __m512i W[4], idx = base;
        for (int k = 0; k < 4; k++, idx = _mm512_add_epi32(idx, two))
            W[k] = _mm512_and_si512(_mm512_srlv_epi32(_mm512_permutex2var_epi32(lo, idx, hi), nshift), nib);
        const __m128i sc8 = _mm_loadl_epi64((const __m128i *)blk->sc);
        const __m512i S = _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(sc8, sc8)); /* lane l: sc[l / 2] */
        /* mins per group of 16 activations: m[g / 2] */
        const __m128i m8 = _mm_loadl_epi64((const __m128i *)blk->m);
        const __m256i m16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8));
        for (int r = 0; r < R; r++) {
            const int64_t o = (r0 + r) * nb + b;
            const int8_t *x = xp + o * QK;
            __m512i t = dot4(_mm512_setzero_si512(), W[0], _mm512_loadu_si512(x));
            t = dot4(t, W[1], _mm512_loadu_si512(x + 64));
            t = dot4(t, W[2], _mm512_loadu_si512(x + 128));
            t = dot4(t, W[3], _mm512_loadu_si512(x + 192));
            const __m512i p = _mm512_madd_epi16(t, S); /* |t| <= 16 * 15 * 127 < 2^15: its low half is t */
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
                                                          const int8_t *xp, const int16_t *xs, int64_t r0, int R,
                                                          float *y, int64_t ldy, int64_t j) {
    __m512 acc[ROWS];
    for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
    const __m512i nib = _mm512_set1_epi8(0x0F), three = _mm512_set1_epi8(3);
    /* instruction k, lane l = 4c + L (group l): low-bit dword 8c + k + 4 (L % 2), its low nibbles for L < 2, else
     * its high; high-bit dword 4c + k (dword k of 128-bit lane c), bits 2L and 2L + 1 of each byte */
    const __m512i base = _mm512_set_epi32(28, 24, 28, 24, 20, 16, 20, 16, 12, 8, 12, 8, 4, 0, 4, 0);
    const __m512i nshift = _mm512_set_epi32(4, 4, 0, 0, 4, 4, 0, 0, 4, 4, 0, 0, 4, 4, 0, 0);
    const __m512i hshift = _mm512_set_epi32(6, 4, 2, 0, 6, 4, 2, 0, 6, 4, 2, 0, 6, 4, 2, 0);
    const __m512i one = _mm512_set1_epi32(1);
    for (int64_t b = 0; b < nb; b++) {
        const q6_block *blk = w + b;
        for (int l = 0; l < 4; l++) _mm_prefetch((const char *)(blk + PREFETCH) + 64 * l, _MM_HINT_T0);
        const __m512i lo = _mm512_loadu_si512(blk->lo), lo2 = _mm512_loadu_si512(blk->lo + 64);
        const __m512i hz = _mm512_loadu_si512(blk->hi);
        const __m512i H[4] = {_mm512_shuffle_epi32(hz, _MM_PERM_AAAA), _mm512_shuffle_epi32(hz, _MM_PERM_BBBB),
                              _mm512_shuffle_epi32(hz, _MM_PERM_CCCC), _mm512_shuffle_epi32(hz, _MM_PERM_DDDD)};
        __m512i U[4], idx = base;
        for (int k = 0; k < 4; k++, idx = _mm512_add_epi32(idx, one)) {
            const __m512i low = _mm512_and_si512(_mm512_srlv_epi32(_mm512_permutex2var_epi32(lo, idx, lo2), nshift), nib);
            const __m512i high = _mm512_and_si512(_mm512_srlv_epi32(H[k], hshift), three);
            U[k] = _mm512_or_si512(low, _mm512_slli_epi16(high, 4));
        }
        const __m512i S = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)blk->sc)); /* lane l: sc[l] */
        const __m256i sc16y = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)blk->sc));
        for (int r = 0; r < R; r++) {
            const int64_t o = (r0 + r) * nb + b;
            const int8_t *x = xp + o * QK;
            __m512i t = dot4(_mm512_setzero_si512(), U[0], _mm512_loadu_si512(x));
            t = dot4(t, U[1], _mm512_loadu_si512(x + 64));
            t = dot4(t, U[2], _mm512_loadu_si512(x + 128));
            t = dot4(t, U[3], _mm512_loadu_si512(x + 192));
            __m512i p = _mm512_mullo_epi32(t, S);
            /* - 32 * sum_g sc[g] * (sum of group g's activations) */
            const __m256i off = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(xs + o * 16)), sc16y);
            p = _mm512_sub_epi32(p, _mm512_zextsi256_si512(_mm256_slli_epi32(off, 5)));
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_set1_ps(blk->d * xd[o]), acc[r]);
        }
    }
    for (int r = 0; r < R; r++) y[(r0 + r) * ldy + j] = hsum(acc[r]);
}

/* ---- weight rows in lanes (the ``cols`` loop, for many rows): 16 weight rows' codes side by side, activations broadcast.
 * Layout per panel of 16 weight rows and block b (q4 kind):
 *   float d[16], dmin[16]; int32 sc[8][16] (as int32: mullo operand); int16 m[4][16][2];
 *   uint8 qs[32][64]: 64-byte unit u holds quads 2u (low nibbles) and 2u + 1 (high): byte 4j + i of a
 *   quad's register = code of weight row j, column 4 * quad + i.
 * q6 kind: float d[16]; int32 sc[16][16]; int16 scp[8][16][2]; uint8 u[64][64] (one byte a code). */
typedef struct {
    float d[16], dmin[16];
    int32_t sc[8][16];
    int16_t m[4][16][2];
    uint8_t qs[32][64];
} q4_col;  /* 128 + 512 + 256 + 2048 */

typedef struct {
    float d[16];
    int32_t sc[16][16];
    int16_t scp[8][16][2];
    uint8_t u[64][64];
} q6_col;

int qk_q4_col_bytes(void) { return (int)sizeof(q4_col); }
int qk_q6_col_bytes(void) { return (int)sizeof(q6_col); }

/* rows-layout blocks (N rows x nb) -> panels (ceil(N / 16) x nb); rows past N are zero. */
void qk_cols_q4(const q4_block *w, int64_t N, int64_t nb, q4_col *out) {
    const int64_t panels = (N + 15) / 16;
    memset(out, 0, (size_t)(panels * nb) * sizeof(q4_col));
    for (int64_t j = 0; j < N; j++)
        for (int64_t b = 0; b < nb; b++) {
            const q4_block *x = w + j * nb + b;
            q4_col *o = out + (j / 16) * nb + b;
            const int l = (int)(j % 16);
            o->d[l] = x->d, o->dmin[l] = x->dmin;
            for (int s = 0; s < 8; s++) o->sc[s][l] = x->sc[s];
            for (int p = 0; p < 4; p++) o->m[p][l][0] = x->m[2 * p], o->m[p][l][1] = x->m[2 * p + 1];
            for (int q = 0; q < 64; q++)
                for (int i = 0; i < 4; i++) {
                    const int code = q4_code(x, 4 * q + i);
                    o->qs[q / 2][4 * l + i] |= (uint8_t)(code << (q % 2 ? 4 : 0));
                }
        }
}

void qk_cols_q6(const q6_block *w, int64_t N, int64_t nb, q6_col *out) {
    const int64_t panels = (N + 15) / 16;
    memset(out, 0, (size_t)(panels * nb) * sizeof(q6_col));
    for (int64_t j = 0; j < N; j++)
        for (int64_t b = 0; b < nb; b++) {
            const q6_block *x = w + j * nb + b;
            q6_col *o = out + (j / 16) * nb + b;
            const int l = (int)(j % 16);
            o->d[l] = x->d;
            for (int g = 0; g < 16; g++) o->sc[g][l] = x->sc[g];
            for (int p = 0; p < 8; p++) o->scp[p][l][0] = x->sc[2 * p], o->scp[p][l][1] = x->sc[2 * p + 1];
            for (int q = 0; q < 64; q++)
                for (int i = 0; i < 4; i++) o->u[q][4 * l + i] = (uint8_t)q6_code(x, 4 * q + i);
        }
}

/* acc + the 4-byte dot products of unsigned codes w and a row's 4 signed activations, broadcast
 * (vpdpbusd where the CPU has VNNI; vpmaddubsw + vpmaddwd otherwise) */
static inline __m512i vnni(__m512i acc, __m512i w, int32_t x4) {
#ifdef __AVX512VNNI__
    return _mm512_dpbusd_epi32(acc, w, _mm512_set1_epi32(x4));
#else
    const __m512i p = _mm512_maddubs_epi16(w, _mm512_set1_epi32(x4));
    return _mm512_add_epi32(acc, _mm512_madd_epi16(p, _mm512_set1_epi16(1)));
#endif
}

/* acc + the int16 pairs of w times the pair x2 (two int16 in an int32), broadcast: vpdpwssd where the CPU
 * has VNNI, vpmaddwd + vpaddd otherwise (the same exact int32 sums) */
static inline __m512i dot_pairs(__m512i acc, __m512i w, int32_t x2) {
#ifdef __AVX512VNNI__
    return _mm512_dpwssd_epi32(acc, w, _mm512_set1_epi32(x2));
#else
    return _mm512_add_epi32(acc, _mm512_madd_epi16(w, _mm512_set1_epi32(x2)));
#endif
}

/* a q4 panel's min terms take, per activation row and block, the sums of 32-groups 2q and 2q + 1 as one int32
 * pair (q < 4) in mp[4 o + q]: made once per set of activations (qk_linear), not once per panel or segment */
static void q4_min_pairs(const int16_t *xs, int64_t rows_blocks, int32_t *mp) {
    for (int64_t o = 0; o < rows_blocks; o++)
        for (int q = 0; q < 4; q++) {
            const int16_t *bs = xs + o * 16;
            const int16_t b0 = (int16_t)(bs[4 * q] + bs[4 * q + 1]), b1 = (int16_t)(bs[4 * q + 2] + bs[4 * q + 3]);
            mp[o * 4 + q] = (int32_t)(uint16_t)b0 | ((int32_t)b1 << 16);
        }
}

/* a q4 panel block's float step for one activation row o, from its integer sums iacc (the VNNI and the AMX
 * loops: the same operations, so the same bits) */
static inline __attribute__((always_inline)) __m512 q4_row_step(const q4_col *p, __m512i iacc, const int32_t *mp,
                                                                  const float *xd, int64_t o, __m512 dv, __m512 ndv,
                                                                  __m512 acc) {
    __m512i macc = _mm512_setzero_si512();
    for (int q = 0; q < 4; q++) macc = dot_pairs(macc, _mm512_loadu_si512(p->m[q]), mp[o * 4 + q]);
    const __m512 dx = _mm512_set1_ps(xd[o]);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iacc), _mm512_mul_ps(dv, dx), acc);
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(macc), _mm512_mul_ps(ndv, dx), acc);
}

#define RB 8 /* activation rows per pass over a panel */
#ifndef COL_AHEAD
#define COL_AHEAD 2 /* panel blocks ahead of the cols loops' reads */
#endif

static inline void prefetch_bytes(const void *p, size_t n) {
    for (size_t o = 0; o < n; o += 64) _mm_prefetch((const char *)p + o, _MM_HINT_T0);
}

static inline __attribute__((always_inline)) void q4_cols_rows(const q4_col *w, int64_t nb, const float *xd,
                                                                const int8_t *xq, const int32_t *mp, int64_t r0,
                                                                int R, __m512 *facc) {
    const __m512i nib = _mm512_set1_epi8(0x0F);
    for (int r = 0; r < R; r++) facc[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const q4_col *p = w + b;
        if (b + COL_AHEAD < nb) prefetch_bytes(p + COL_AHEAD, sizeof(q4_col));
        __m512i iacc[RB];
        for (int r = 0; r < R; r++) iacc[r] = _mm512_setzero_si512();
        for (int s = 0; s < 8; s++) {
            __m512i t[RB];
            for (int r = 0; r < R; r++) t[r] = _mm512_setzero_si512();
            for (int u = 0; u < 4; u++) {
                const __m512i v = _mm512_loadu_si512(p->qs[4 * s + u]);
                const __m512i w0 = _mm512_and_si512(v, nib), w1 = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
                const int q0 = 8 * s + 2 * u;
                for (int r = 0; r < R; r++) {
                    const int8_t *x = xq + ((r0 + r) * nb + b) * QK + 4 * q0;
                    int32_t a, c;
                    memcpy(&a, x, 4), memcpy(&c, x + 4, 4);
                    t[r] = vnni(t[r], w0, a);
                    t[r] = vnni(t[r], w1, c);
                }
            }
            const __m512i scv = _mm512_loadu_si512(p->sc[s]);
            for (int r = 0; r < R; r++) iacc[r] = _mm512_add_epi32(iacc[r], _mm512_mullo_epi32(t[r], scv));
        }
        const __m512 dv = _mm512_loadu_ps(p->d), ndv = _mm512_sub_ps(_mm512_setzero_ps(), _mm512_loadu_ps(p->dmin));
        for (int r = 0; r < R; r++) facc[r] = q4_row_step(p, iacc[r], mp, xd, (r0 + r) * nb + b, dv, ndv, facc[r]);
    }
}

/* a q6 panel block's float step for R rows, from their integer sums iacc (both q6 loops: the same operations) */
static inline __attribute__((always_inline)) void q6_block_tail(const q6_col *p, const __m512i *iacc, const float *xd,
                                                                 const int16_t *xs, int64_t r0, int R, int64_t nb,
                                                                 int64_t b, __m512 *facc) {
    const __m512 dv = _mm512_loadu_ps(p->d);
    for (int r = 0; r < R; r++) {
        const int64_t o = (r0 + r) * nb + b;
        const int32_t *pairs = (const int32_t *)(xs + o * 16); /* 16-group sums 2q, 2q + 1 as one int32 */
        __m512i off = _mm512_setzero_si512();
        for (int q = 0; q < 8; q++) off = dot_pairs(off, _mm512_loadu_si512(p->scp[q]), pairs[q]);
        const __m512i sumi = _mm512_sub_epi32(iacc[r], _mm512_slli_epi32(off, 5));
        facc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sumi), _mm512_mul_ps(dv, _mm512_set1_ps(xd[o])), facc[r]);
    }
}

static inline __attribute__((always_inline)) void q6_cols_rows(const q6_col *w, int64_t nb, const float *xd,
                                                                const int8_t *xq, const int16_t *xs, int64_t r0,
                                                                int R, __m512 *facc) {
    for (int r = 0; r < R; r++) facc[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const q6_col *p = w + b;
        if (b + COL_AHEAD < nb) prefetch_bytes(p + COL_AHEAD, sizeof(q6_col));
        __m512i iacc[RB];
        for (int r = 0; r < R; r++) iacc[r] = _mm512_setzero_si512();
        for (int g = 0; g < 16; g++) {
            __m512i t[RB];
            for (int r = 0; r < R; r++) t[r] = _mm512_setzero_si512();
            for (int q = 0; q < 4; q++) {
                const __m512i wv = _mm512_loadu_si512(p->u[4 * g + q]);
                for (int r = 0; r < R; r++) {
                    int32_t a;
                    memcpy(&a, xq + ((r0 + r) * nb + b) * QK + 16 * g + 4 * q, 4);
                    t[r] = vnni(t[r], wv, a);
                }
            }
            const __m512i scv = _mm512_loadu_si512(p->sc[g]);
            for (int r = 0; r < R; r++) iacc[r] = _mm512_add_epi32(iacc[r], _mm512_mullo_epi32(t[r], scv));
        }
        q6_block_tail(p, iacc, xd, xs, r0, R, nb, b, facc);
    }
}

#if QK_AMX
/* ---- the cols loop's integers on AMX tiles (Intel CPUs with AMX-INT8, where Linux grants the tile state).
 * 16 activation rows' int8 are an A tile (read in place, row stride = a row's bytes), a panel's codes a B tile
 * (16 weight rows' 4 consecutive codes a 64-byte row: the cols layout), and TDPBSUD (signed x unsigned bytes,
 * int32 sums) gives all 16 x 16 dot products at once. q6 (q6_amx_rows): one tile product per scale group of
 * 16 (its B tile the panel's bytes as they lie), stored and scaled by the group's sc as the VNNI loop scales
 * its sums. q4 (q4_amx_folded): the scales folded into the codes, two tile products a block. Either way the
 * block's integers are the VNNI loop's exactly and meet the same float operations in the same order: the
 * output is bit for bit the VNNI loop's. */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} __attribute__((aligned(64))) tile_cfg;

static int amx_granted = -1, amx_on = 0;

/* want 1: use the tiles when Linux grants them (asked once: arch_prctl ARCH_REQ_XCOMP_PERM, XTILEDATA);
 * 0: don't; -1: ask nothing. Returns whether the cols loop now runs on tiles. */
int qk_amx(int want) {
    if (want > 0 && amx_granted < 0) amx_granted = syscall(SYS_arch_prctl, 0x1023, 18) == 0;
    if (want >= 0) amx_on = want > 0 && amx_granted > 0;
    return amx_on;
}

/* the q6 loop's tiles for R rows: tmm0-3: C (R x 16 int32), tmm4, 5: A (R rows x a group's 16 bytes),
 * tmm6, 7: B (a group's 4 rows of 64 bytes) */
static void amx_config_q6(int R) {
    tile_cfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 4; t++) c.rows[t] = (uint8_t)R, c.colsb[t] = 64;
    for (int t = 4; t < 6; t++) c.rows[t] = (uint8_t)R, c.colsb[t] = 16;
    for (int t = 6; t < 8; t++) c.rows[t] = 4, c.colsb[t] = 64;
    _tile_loadconfig(&c);
}

#define AR 16 /* activation rows per tile */

/* the folded q4 loop's tiles, all 16 rows x 64 bytes: tmm0, 1: C (16 x 16 int32); tmm2, 5: A; tmm3, 4, 6, 7: B;
 * two A / B sets, so a product's loads need not wait for the last product (tiles are not renamed) */
static void amx_config_q4(void) {
    tile_cfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int t = 0; t < 8; t++) c.rows[t] = AR, c.colsb[t] = 64;
    _tile_loadconfig(&c);
}

/* four q6 groups: tmm0-3 their C; tmm4, 5: A; tmm6, 7: B (two of each, as above) */
#define AMX4(A0, B0, A1, B1, A2, B2, A3, B3, ldA)                                                               \
    do {                                                                                                      \
        _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);                                           \
        _tile_loadd(4, A0, ldA); _tile_loadd(6, B0, 64); _tile_dpbsud(0, 4, 6);                               \
        _tile_loadd(5, A1, ldA); _tile_loadd(7, B1, 64); _tile_dpbsud(1, 5, 7);                               \
        _tile_loadd(4, A2, ldA); _tile_loadd(6, B2, 64); _tile_dpbsud(2, 4, 6);                               \
        _tile_loadd(5, A3, ldA); _tile_loadd(7, B3, 64); _tile_dpbsud(3, 5, 7);                               \
        _tile_stored(0, ct[0], 64); _tile_stored(1, ct[1], 64); _tile_stored(2, ct[2], 64);                   \
        _tile_stored(3, ct[3], 64);                                                                           \
    } while (0)

static void q6_amx_rows(const q6_col *w, int64_t nb, const float *xd, const int8_t *xq, const int16_t *xs, int64_t r0,
                        int R, __m512 *facc) {
    int32_t ct[4][AR][16] __attribute__((aligned(64)));
    const int64_t ld = nb * QK;
    for (int r = 0; r < R; r++) facc[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const q6_col *p = w + b;
        if (b + COL_AHEAD < nb) prefetch_bytes(p + COL_AHEAD, sizeof(q6_col));
        const int8_t *x = xq + (r0 * nb + b) * QK;
        __m512i iacc[AR];
        for (int r = 0; r < R; r++) iacc[r] = _mm512_setzero_si512();
        for (int h = 0; h < 4; h++) {
            const int g = 4 * h;
            AMX4(x + 16 * g, p->u[4 * g], x + 16 * (g + 1), p->u[4 * (g + 1)], x + 16 * (g + 2), p->u[4 * (g + 2)],
                 x + 16 * (g + 3), p->u[4 * (g + 3)], ld);
            for (int i = 0; i < 4; i++) {
                const __m512i scv = _mm512_loadu_si512(p->sc[g + i]);
                for (int r = 0; r < R; r++)
                    iacc[r] = _mm512_add_epi32(iacc[r], _mm512_mullo_epi32(_mm512_load_si512(ct[i][r]), scv));
            }
        }
        q6_block_tail(p, iacc, xd, xs, r0, R, nb, b, facc);
    }
}

/* q4 with the group scales folded into the B tiles: sc = 8 hi + lo (hi, lo < 8), so q * hi and q * lo fit a
 * byte, and per block and row sum_s sc[s] dot_s = 8 sum_s dot(x, q hi) + sum_s dot(x, q lo): two C tiles
 * accumulate the whole block (4 tile products of 64 columns each), two stores a block instead of eight, and
 * the same exact integer as the VNNI loop's. The folded tiles are made once a panel block and serve every
 * chunk of 16 rows, so the loop over rows is inside; each row's float sum runs over blocks in order in
 * facc (n x 16 floats), as the other loops'. The tiles always take 16 rows: past n they read the padding
 * qk_linear leaves after the activations (AR rows), and those rows' sums are never used. */
/* 64 columns (t: 0-3) of the block: the rows' int8 in tile A, the folded codes' hi and lo halves in tiles H and L */
#define FOLDED_STEP(A, H, L, t)                                                                                 \
    do {                                                                                                      \
        _tile_loadd(A, x + 64 * (t), ld);                                                                     \
        _tile_loadd(H, bh[16 * (t)], 64);                                                                     \
        _tile_loadd(L, bl[16 * (t)], 64);                                                                     \
        _tile_dpbsud(0, A, H);                                                                                \
        _tile_dpbsud(1, A, L);                                                                                \
    } while (0)

static void q4_amx_folded(const q4_col *w, int64_t nb, const float *xd, const int8_t *xq, const int32_t *mp,
                          int64_t n, float *facc) {
    const __m512i nib = _mm512_set1_epi8(0x0F), seven = _mm512_set1_epi16(7);
    uint8_t bh[64][64] __attribute__((aligned(64))), bl[64][64] __attribute__((aligned(64)));
    int32_t ch[AR][16] __attribute__((aligned(64))), cl[AR][16] __attribute__((aligned(64)));
    const int64_t ld = nb * QK;
    for (int64_t r = 0; r < n; r++) _mm512_store_ps(facc + 16 * r, _mm512_setzero_ps());
    for (int64_t b = 0; b < nb; b++) {
        const q4_col *p = w + b;
        if (b + COL_AHEAD < nb) prefetch_bytes(p + COL_AHEAD, sizeof(q4_col));
        for (int s = 0; s < 8; s++) {
            const __m512i sc = _mm512_loadu_si512(p->sc[s]); /* column j's scale in 16-bit lanes 2j, 2j + 1 */
            const __m512i both = _mm512_or_si512(sc, _mm512_slli_epi32(sc, 16));
            const __m512i hi = _mm512_srli_epi16(both, 3), lo = _mm512_and_si512(both, seven);
            for (int u = 0; u < 4; u++) {
                const __m512i v = _mm512_loadu_si512(p->qs[4 * s + u]);
                const __m512i w0 = _mm512_and_si512(v, nib), w1 = _mm512_and_si512(_mm512_srli_epi16(v, 4), nib);
                const int k = 8 * s + 2 * u; /* a lane's two codes share a column: q * c < 256 stays in its byte */
                _mm512_store_si512(bh[k], _mm512_mullo_epi16(w0, hi));
                _mm512_store_si512(bh[k + 1], _mm512_mullo_epi16(w1, hi));
                _mm512_store_si512(bl[k], _mm512_mullo_epi16(w0, lo));
                _mm512_store_si512(bl[k + 1], _mm512_mullo_epi16(w1, lo));
            }
        }
        const __m512 dv = _mm512_loadu_ps(p->d), ndv = _mm512_sub_ps(_mm512_setzero_ps(), _mm512_loadu_ps(p->dmin));
        for (int64_t r0 = 0; r0 < n; r0 += AR) {
            const int R = (int)(n - r0 < AR ? n - r0 : AR);
            const int8_t *x = xq + (r0 * nb + b) * QK;
            _tile_zero(0);
            _tile_zero(1);
            FOLDED_STEP(2, 3, 4, 0); /* columns 0-63 of the block */
            FOLDED_STEP(5, 6, 7, 1);
            FOLDED_STEP(2, 3, 4, 2);
            FOLDED_STEP(5, 6, 7, 3);
            _tile_stored(0, ch, 64);
            _tile_stored(1, cl, 64);
            for (int r = 0; r < R; r++) {
                const __m512i iacc =
                    _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(ch[r]), 3), _mm512_load_si512(cl[r]));
                float *f = facc + 16 * (r0 + r);
                _mm512_store_ps(f, q4_row_step(p, iacc, mp, xd, (r0 + r) * nb + b, dv, ndv, _mm512_load_ps(f)));
            }
        }
    }
}

static int gemm_amx(int kind, const void *w, int64_t N, int64_t K, const float *xd, const int8_t *xq,
                     const int16_t *xs, const int32_t *mp, int64_t n, float *y, int64_t ldy, int threads) {
    const int64_t nb = K / QK, panels = (N + 15) / 16;
    if (kind == 4) {
        int fail = 0;
#pragma omp parallel num_threads(threads) reduction(| : fail)
        {
            float *facc = aligned_alloc(64, (size_t)n * 16 * sizeof(float));
            if (!facc) fail = 1;
            else amx_config_q4();
#pragma omp for schedule(static)
            for (int64_t pj = 0; pj < panels; pj++) {
                if (!facc) continue;
                const int jn = (int)(N - 16 * pj < 16 ? N - 16 * pj : 16);
                const __mmask16 mask = (__mmask16)((1u << jn) - 1);
                q4_amx_folded((const q4_col *)w + pj * nb, nb, xd, xq, mp, n, facc);
                for (int64_t r = 0; r < n; r++)
                    _mm512_mask_storeu_ps(y + r * ldy + 16 * pj, mask, _mm512_load_ps(facc + 16 * r));
            }
            if (facc) _tile_release();
            free(facc);
        }
        return fail;
    }
#pragma omp parallel num_threads(threads)
    {
        int cfg = -1;
        __m512 facc[AR];
#pragma omp for schedule(static)
        for (int64_t pj = 0; pj < panels; pj++) {
            const int jn = (int)(N - 16 * pj < 16 ? N - 16 * pj : 16);
            const __mmask16 mask = (__mmask16)((1u << jn) - 1);
            for (int64_t r0 = 0; r0 < n; r0 += AR) {
                const int R = (int)(n - r0 < AR ? n - r0 : AR);
                if (R != cfg) amx_config_q6(R), cfg = R;
                q6_amx_rows((const q6_col *)w + pj * nb, nb, xd, xq, xs, r0, R, facc);
                for (int r = 0; r < R; r++) _mm512_mask_storeu_ps(y + (r0 + r) * ldy + 16 * pj, mask, facc[r]);
            }
        }
        if (cfg >= 0) _tile_release();
    }
    return 0;
}
#endif

/* y[r, j] (row stride ldy) for all n rows, from the panels (qk_cols_*); mp: q4_min_pairs of the activations
 * (q4 panels); 1 if out of memory, else 0. */
static int gemm_cols(int kind, const void *w, int64_t N, int64_t K, const float *xd, const int8_t *xq,
                     const int16_t *xs, const int32_t *mp, int64_t n, float *y, int64_t ldy, int threads) {
    const int64_t nb = K / QK, panels = (N + 15) / 16;
#if QK_AMX
    if (amx_on) return gemm_amx(kind, w, N, K, xd, xq, xs, mp, n, y, ldy, threads);
#endif
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t pj = 0; pj < panels; pj++) {
        const int jn = (int)(N - 16 * pj < 16 ? N - 16 * pj : 16);
        const __mmask16 mask = (__mmask16)((1u << jn) - 1);
        __m512 facc[RB];
        for (int64_t r0 = 0; r0 < n; r0 += RB) {
            const int R = (int)(n - r0 < RB ? n - r0 : RB);
#define CASE(RR)                                                                                              \
    case RR:                                                                                                  \
        if (kind == 4) q4_cols_rows((const q4_col *)w + pj * nb, nb, xd, xq, mp, r0, RR, facc);              \
        else q6_cols_rows((const q6_col *)w + pj * nb, nb, xd, xq, xs, r0, RR, facc);                         \
        break;
            switch (R) { CASE(1) CASE(2) CASE(3) CASE(4) CASE(5) CASE(6) CASE(7) CASE(8) }
#undef CASE
            for (int r = 0; r < R; r++) _mm512_mask_storeu_ps(y + (r0 + r) * ldy + 16 * pj, mask, facc[r]);
        }
    }
    return 0;
}
#endif

#if !QK_AMX
int qk_amx(int want) { /* no tiles in this build */
    (void)want;
    return 0;
}
#endif

#if QK_AVX2
/* The rows loop in 256-bit registers: the same exact integer sums as the AVX-512 and scalar loops (vpmaddubsw:
 * codes <= 63 times int8 activations, pairs <= 16002 < 2^15; vpmaddwd with the block's scales), the float sums
 * in 8 lanes folded in a fixed order, so a row's result does not depend on the rows computed beside it. */
static inline float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline __attribute__((always_inline)) void q4_rows(const q4_block *w, int64_t nb, const float *xd,
                                                          const int8_t *xq, const int16_t *xs, int64_t r0, int R,
                                                          float *y, int64_t ldy, int64_t j) {
    __m256 acc[ROWS], accm[ROWS];
    for (int r = 0; r < R; r++) { acc[r] = _mm256_setzero_ps(); accm[r] = _mm256_setzero_ps(); }
    const __m256i nib = _mm256_set1_epi8(0x0F);
    for (int64_t b = 0; b < nb; b++) {
        const q4_block *blk = w + b;
        for (int l = 0; l < 3; l++) _mm_prefetch((const char *)(blk + PREFETCH) + 64 * l, _MM_HINT_T0);
        __m256i W[8], S[8];
        for (int c = 0; c < 4; c++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(blk->qs + 32 * c));
            W[2 * c] = _mm256_and_si256(q, nib);                         /* elements 64c .. 64c + 31 */
            W[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), nib); /* 64c + 32 .. 64c + 63 */
            S[2 * c] = _mm256_set1_epi16(blk->sc[2 * c]);
            S[2 * c + 1] = _mm256_set1_epi16(blk->sc[2 * c + 1]);
        }
        const __m128i m8 = _mm_loadl_epi64((const __m128i *)blk->m);
        const __m256i m16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(m8, m8)); /* m[g / 2] for 16-group g */
        for (int r = 0; r < R; r++) {
            const int64_t o = (r0 + r) * nb + b;
            const int8_t *x = xq + o * QK;
            __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(W[0], _mm256_loadu_si256((const __m256i *)x)), S[0]);
            for (int h = 1; h < 8; h++)
                p = _mm256_add_epi32(p, _mm256_madd_epi16(
                                            _mm256_maddubs_epi16(W[h], _mm256_loadu_si256((const __m256i *)(x + 32 * h))), S[h]));
            const __m256i mm = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(xs + o * 16)), m16);
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(blk->d * xd[o]), acc[r]);
            accm[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mm), _mm256_set1_ps(blk->dmin * xd[o]), accm[r]);
        }
    }
    for (int r = 0; r < R; r++) y[(r0 + r) * ldy + j] = hsum8(_mm256_sub_ps(acc[r], accm[r]));
}

static inline __attribute__((always_inline)) void q6_rows(const q6_block *w, int64_t nb, const float *xd,
                                                          const int8_t *xq, const int16_t *xs, int64_t r0, int R,
                                                          float *y, int64_t ldy, int64_t j) {
    __m256 acc[ROWS];
    for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
    const __m256i nib = _mm256_set1_epi8(0x0F), three = _mm256_set1_epi8(3);
    /* 128-bit half L of a 32-element register takes bits 2L, 2L + 1 of the high bytes (L = 0, 1; then 2, 3) */
    const __m256i shift_a = _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2), shift_b = _mm256_setr_epi32(4, 4, 4, 4, 6, 6, 6, 6);
    for (int64_t b = 0; b < nb; b++) {
        const q6_block *blk = w + b;
        for (int l = 0; l < 4; l++) _mm_prefetch((const char *)(blk + PREFETCH) + 64 * l, _MM_HINT_T0);
        __m256i U[8], S[8];
        for (int c = 0; c < 4; c++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(blk->lo + 32 * c));
            const __m256i h = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(blk->hi + 16 * c)));
            const __m256i ha = _mm256_and_si256(_mm256_srlv_epi32(h, shift_a), three);
            const __m256i hb = _mm256_and_si256(_mm256_srlv_epi32(h, shift_b), three);
            U[2 * c] = _mm256_or_si256(_mm256_and_si256(q, nib), _mm256_slli_epi16(ha, 4));
            U[2 * c + 1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), nib), _mm256_slli_epi16(hb, 4));
            S[2 * c] = _mm256_setr_m128i(_mm_set1_epi16(blk->sc[4 * c]), _mm_set1_epi16(blk->sc[4 * c + 1]));
            S[2 * c + 1] = _mm256_setr_m128i(_mm_set1_epi16(blk->sc[4 * c + 2]), _mm_set1_epi16(blk->sc[4 * c + 3]));
        }
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)blk->sc));
        for (int r = 0; r < R; r++) {
            const int64_t o = (r0 + r) * nb + b;
            const int8_t *x = xq + o * QK;
            __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(U[0], _mm256_loadu_si256((const __m256i *)x)), S[0]);
            for (int h = 1; h < 8; h++)
                p = _mm256_add_epi32(p, _mm256_madd_epi16(
                                            _mm256_maddubs_epi16(U[h], _mm256_loadu_si256((const __m256i *)(x + 32 * h))), S[h]));
            /* - 32 * sum_g sc[g] * (sum of group g's activations) */
            const __m256i off = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)(xs + o * 16)), sc16);
            p = _mm256_sub_epi32(p, _mm256_slli_epi32(off, 5));
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(blk->d * xd[o]), acc[r]);
        }
    }
    for (int r = 0; r < R; r++) y[(r0 + r) * ldy + j] = hsum8(acc[r]);
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
 * kind 4: q4_block, 6: q6_block. xq: in the rows loop's order for the kind (rows_order) in AVX-512 builds. */
static void gemm_rows(int kind, const void *w, int64_t N, int64_t K, const float *xd, const int8_t *xq,
                      const int16_t *xs, int64_t n, float *y, int64_t ldy, int threads) {
    const int64_t nb = K / QK;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t j = 0; j < N; j++) {
        int64_t r0 = 0;
#if QK_AVX512 || QK_AVX2
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

/* ---------------------------------------------------------------- one Linear call
 * y = x @ W.T (+ bias) for a module whose W is the segments' blocks stacked by rows, in one call:
 * x (n x K, float32 or bfloat16) widened to float32 with zero columns up to Kp (the blocks' width, a
 * multiple of 256: re-encoded weights whose K is not), quantized, multiplied segment by segment
 * (``cols``: through the panels), and written to y (n x N) as float32, or rounded to bfloat16 (round
 * to nearest even, as torch's .to(bfloat16)) with the bias then added as torch adds two bfloat16
 * tensors (in float32, rounded again): the same bits as the product, .to(dtype) and + bias in torch.
 * The scratch buffers grow as needed and are kept (one caller at a time: the Python side's lock). */
static void *scratch[13];
static size_t scratch_size[13];

static void *grow(int i, size_t bytes) {
    if (scratch_size[i] < bytes) {
        free(scratch[i]);
        scratch[i] = aligned_alloc(64, (bytes + 63) / 64 * 64);
        scratch_size[i] = scratch[i] ? bytes : 0;
    }
    return scratch[i];
}

static inline float bf16_to_float(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t float_to_bf16(float f) { /* round to nearest even; NaN stays NaN (no branch: vectorizes) */
    uint32_t u;
    memcpy(&u, &f, 4);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, quiet = (u >> 16) | 0x40u;
    return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
}

int qk_linear(const void *x, int x_bf16, int64_t n, int64_t K, int64_t Kp, int nseg, const int *kinds,
              const void *const *ws, const int64_t *rows, const int64_t *starts, int cols, const void *bias,
              void *y, int y_bf16, int64_t N, int threads) {
    const int64_t nb = Kp / QK;
    float *xf = (float *)x;
    if (x_bf16 || K != Kp) {
        xf = grow(0, (size_t)n * Kp * 4);
        if (!xf) return 1;
        for (int64_t r = 0; r < n; r++) {
            float *dst = xf + r * Kp;
            if (x_bf16)
                for (int64_t k = 0; k < K; k++) dst[k] = bf16_to_float(((const uint16_t *)x)[r * K + k]);
            else
                memcpy(dst, (const float *)x + r * K, (size_t)K * 4);
            memset(dst + K, 0, (size_t)(Kp - K) * 4);
        }
    }
    float *xd = grow(1, (size_t)n * nb * 4);
    int8_t *xq = grow(2, (size_t)(n + 16) * Kp); /* + 16 rows: the folded AMX loop's tiles read whole */
    int16_t *xs = grow(3, (size_t)n * nb * 16 * 2);
    float *yf = y_bf16 ? grow(4, (size_t)n * N * 4) : (float *)y;
    if (!xd || !xq || !xs || !yf) return 1;
    qk_quantize(xf, n, Kp, xd, xq, xs, threads);
#if QK_AVX512
    int32_t *mp = NULL; /* the q4 cols panels' min-term pairs, once for all segments */
    for (int s = 0; s < nseg && cols && !mp; s++)
        if (kinds[s] == 4) {
            if (!(mp = grow(10, (size_t)n * nb * 4 * sizeof(int32_t)))) return 1;
            q4_min_pairs(xs, n * nb, mp);
        }
    int8_t *xp[2] = {NULL, NULL}; /* the activations in the rows loop's order, per kind (q4, q6), once for all segments */
#endif
    for (int s = 0; s < nseg; s++) {
        const int8_t *xk = xq;
#if QK_AVX512
        if (cols) {
            if (gemm_cols(kinds[s], ws[s], rows[s], Kp, xd, xq, xs, mp, n, yf + starts[s], N, threads)) return 1;
            continue;
        }
        const int t = kinds[s] == 4 ? 0 : 1;
        if (!xp[t]) {
            if (!(xp[t] = grow(11 + t, (size_t)(n * nb) * QK))) return 1;
            rows_order(kinds[s], xq, n * nb, xp[t]);
        }
        xk = xp[t];
#endif
        gemm_rows(kinds[s], ws[s], rows[s], Kp, xd, xk, xs, n, yf + starts[s], N, threads);
    }
    if (y_bf16) {
        uint16_t *yb = (uint16_t *)y;
        const uint16_t *bb = (const uint16_t *)bias;
        for (int64_t r = 0; r < n; r++)
            for (int64_t j = 0; j < N; j++) {
                uint16_t v = float_to_bf16(yf[r * N + j]);
                if (bb) v = float_to_bf16(bf16_to_float(v) + bf16_to_float(bb[j]));
                yb[r * N + j] = v;
            }
    } else if (bias) {
        const float *bf = (const float *)bias;
        for (int64_t r = 0; r < n; r++)
            for (int64_t j = 0; j < N; j++) yf[r * N + j] += bf[j];
    }
    return 0;
}

/* ---------------------------------------------------------------- one decoder layer, one row
 * A Llama / Qwen2 decoder layer for a single new token (the plain step, a drafter's chain step),
 * in one call: the GEMMs are qk_linear's; the rest (norms, rotary embedding, the KV cache write,
 * attention, SiLU) is here, rounded to bfloat16 where torch's bfloat16 ops round:
 *   h = bf16(x * rsqrt(mean(x^2) + eps) * w1)            (torch's F.rms_norm, one rounding)
 *   q, k = rope(qkv(h)): bf16(bf16(x * cos) + bf16(rot(x) * sin))
 *   attention over the cache slots [0, t] (an additive float mask, or none), in float32, to bf16
 *   x = bf16(x + o(attn));  x = bf16(x + down(bf16(bf16(silu(g)) * u)))   (g, u = gate_up(norm2(x)))
 * so it equals the lean torch layer up to the attention's float order (SDPA's blocks) and exp. */
typedef struct {
    int nseg;
    const int *kinds;
    const void *const *ws;
    const int64_t *rows, *starts;
    int64_t K, Kp, N;
    const uint16_t *bias;         /* bf16, or NULL */
    const void *const *ws_cols;   /* the segments' panels (the cols loop), or NULL */
} qk_lin;

typedef struct {
    int64_t H, nq, nkv, D, I;
    float eps1, eps2, scale;
    const uint16_t *ln1, *ln2; /* bf16 */
    qk_lin qkv, o, gu, down;
} qk_layer_t;

int qk_layer_struct_bytes(void) { return (int)sizeof(qk_layer_t); }

static inline uint16_t bf16_round(float f) { return float_to_bf16(f); }
static inline float bf(float f) { return bf16_to_float(float_to_bf16(f)); }

static void rms_norm_bf16(const uint16_t *x, const uint16_t *w, int64_t H, float eps, uint16_t *out) {
    /* the mean of squares as good as float holds it (torch sums pairwise): bf16 squares are exact in
     * double, so 8 partial sums (they vectorize) give the float the one sum would */
    double part[8] = {0};
    int64_t i0 = 0;
    for (; i0 + 8 <= H; i0 += 8)
        for (int l = 0; l < 8; l++) {
            const double v = bf16_to_float(x[i0 + l]);
            part[l] += v * v;
        }
    for (; i0 < H; i0++) {
        const double v = bf16_to_float(x[i0]);
        part[0] += v * v;
    }
    const double ss = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
    const float r = 1.0f / sqrtf((float)(ss / (double)H) + eps);
    for (int64_t i = 0; i < H; i++) out[i] = bf16_round(bf16_to_float(x[i]) * r * bf16_to_float(w[i]));
}

static int lin(const qk_lin *L, const uint16_t *x, uint16_t *y, int threads) {
    return qk_linear(x, 1, 1, L->K, L->Kp, L->nseg, L->kinds, L->ws, L->rows, L->starts, 0, L->bias, y, 1, L->N,
                     threads);
}

/* n rows through the rows loop, or the cols loop (cols != 0, where the panels exist) */
static int lin_n(const qk_lin *L, const uint16_t *x, int64_t n, int cols, uint16_t *y, int threads) {
    const int c = cols && L->ws_cols != NULL;
    return qk_linear(x, 1, n, L->K, L->Kp, L->nseg, L->kinds, c ? L->ws_cols : L->ws, L->rows, L->starts, c, L->bias,
                     y, 1, L->N, threads);
}

/* exp(x) for x <= 0 (softmax after the max is taken out): 2^n * p(r), r in [-ln2/2, ln2/2], ~2 ulp */
static inline float exp_neg(float x) {
    if (x < -87.0f) return 0.0f;
    const float n = nearbyintf(x * 1.44269504f);
    const float r = (x - n * 0.693145752f) - n * 1.42860677e-6f;
    float p = 1.98756912e-4f;
    p = p * r + 1.39819995e-3f;
    p = p * r + 8.33345205e-3f;
    p = p * r + 4.16657962e-2f;
    p = p * r + 1.66666657e-1f;
    p = p * r + 5.0e-1f;
    p = p * r * r + r + 1.0f;
    int32_t e = ((int32_t)n + 127) << 23;
    float s;
    memcpy(&s, &e, 4);
    return p * s;
}

/* The rotary embedding on one row's query and key heads (qkv: q | k | v heads of D), as torch's
 * bf16(bf16(x * cos) + bf16(rot(x) * sin)); the queries to q (nq x D), the keys and values into
 * the cache slot t of kc / vc ([nkv, cap, D]). q may be qkv itself. */
static void rope_store(const uint16_t *qkv, int64_t nq, int64_t nkv, int64_t D, const uint16_t *cos,
                       const uint16_t *sin, uint16_t *q, uint16_t *kc, uint16_t *vc, int64_t cap, int64_t t) {
    const int64_t half = D / 2;
    for (int64_t hd = 0; hd < nq + nkv; hd++) {
        const uint16_t *v = qkv + hd * D;
        uint16_t tmp[512];
        for (int64_t i = 0; i < D; i++) {
            const float xi = bf16_to_float(v[i]);
            const float rot = i < half ? -bf16_to_float(v[i + half]) : bf16_to_float(v[i - half]);
            tmp[i] = bf16_round(bf(xi * bf16_to_float(cos[i])) + bf(rot * bf16_to_float(sin[i])));
        }
        memcpy(hd < nq ? q + hd * D : kc + ((hd - nq) * cap + t) * D, tmp, (size_t)D * 2);
    }
    for (int64_t g = 0; g < nkv; g++) memcpy(vc + (g * cap + t) * D, qkv + (nq + nkv + g) * D, (size_t)D * 2);
}

/* x = bf16(x + y), elementwise (torch's bf16 add) */
static inline void add_bf16(uint16_t *x, const uint16_t *y, int64_t H) {
    for (int64_t i = 0; i < H; i++) x[i] = bf16_round(bf16_to_float(x[i]) + bf16_to_float(y[i]));
}

/* h (n x I) = bf16(bf16(silu(g)) * u) for gu = [g | u] per row (n x 2I), as torch's bf16 ops round.
 * g is a bfloat16, so bf16(silu(g)) = bf16(g / (1 + expf(-g))) takes one of 65536 values: a table of
 * them, made at the first call (under the Python side's lock), replaces an expf a value. */
static uint16_t silu_table[65536];
static int silu_ready = 0;

static void silu_mul(const uint16_t *gu, int64_t n, int64_t I, uint16_t *h, int threads) {
    if (!silu_ready) {
        for (int b = 0; b < 65536; b++) {
            const float g = bf16_to_float((uint16_t)b);
            silu_table[b] = bf16_round(g / (1.0f + expf(-g)));
        }
        silu_ready = 1;
    }
#pragma omp parallel for num_threads(threads) schedule(static) if (n > 1)
    for (int64_t r = 0; r < n; r++)
        for (int64_t i = 0; i < I; i++)
            h[r * I + i] = bf16_round(bf16_to_float(silu_table[gu[r * 2 * I + i]]) * bf16_to_float(gu[r * 2 * I + I + i]));
}

int qk_layer1(const qk_layer_t *L, uint16_t *x, const uint16_t *cos, const uint16_t *sin, uint16_t *kc, uint16_t *vc,
              int64_t cap, int64_t t, const float *mask, int threads) {
    const int64_t H = L->H, D = L->D, nq = L->nq, nkv = L->nkv, T = t + 1, groups = nq / nkv;
    uint16_t *h = grow(5, (size_t)(H > L->I ? H : L->I) * 2);
    uint16_t *qkv = grow(6, (size_t)L->qkv.N * 2);
    uint16_t *att = grow(7, (size_t)nq * D * 2);
    uint16_t *gu = grow(8, (size_t)L->gu.N * 2);
    float *sc = grow(9, (size_t)nq * T * 4);
    if (!h || !qkv || !att || !gu || !sc) return 1;
    rms_norm_bf16(x, L->ln1, H, L->eps1, h);
    if (lin(&L->qkv, h, qkv, threads)) return 1;
    rope_store(qkv, nq, nkv, D, cos, sin, qkv, kc, vc, cap, t);
    /* attention: query head hq reads key / value head hq / groups */
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t hq = 0; hq < nq; hq++) {
        const uint16_t *K = kc + (hq / groups) * cap * D, *V = vc + (hq / groups) * cap * D;
        float q[512], acc[512], *s = sc + hq * T;
        for (int64_t i = 0; i < D; i++) q[i] = bf16_to_float(qkv[hq * D + i]);
        float mx = -INFINITY;
        for (int64_t j = 0; j < T; j++) {
            const uint16_t *kj = K + j * D;
            float part[16] = {0};
            int64_t i = 0;
            for (; i + 16 <= D; i += 16)
                for (int l = 0; l < 16; l++) part[l] += q[i + l] * bf16_to_float(kj[i + l]);
            for (; i < D; i++) part[i & 15] += q[i] * bf16_to_float(kj[i]);
            float d = 0.0f;
            for (int l = 0; l < 16; l++) d += part[l];
            d = d * L->scale + (mask ? mask[j] : 0.0f);
            s[j] = d;
            if (d > mx) mx = d;
        }
        float sum = 0.0f;
        for (int64_t i = 0; i < D; i++) acc[i] = 0.0f;
        for (int64_t j = 0; j < T; j++) {
            const float p = exp_neg(s[j] - mx);
            sum += p;
            if (p == 0.0f) continue;
            const uint16_t *vj = V + j * D;
            for (int64_t i = 0; i < D; i++) acc[i] += p * bf16_to_float(vj[i]);
        }
        for (int64_t i = 0; i < D; i++) att[hq * D + i] = bf16_round(acc[i] / sum);
    }
    if (lin(&L->o, att, h, threads)) return 1;
    add_bf16(x, h, H);
    rms_norm_bf16(x, L->ln2, H, L->eps2, h);
    if (lin(&L->gu, h, gu, threads)) return 1;
    silu_mul(gu, 1, L->I, h, threads);
    uint16_t *dn = gu; /* the gate / up buffer is free again */
    if (lin(&L->down, h, dn, threads)) return 1;
    add_bf16(x, dn, H);
    return 0;
}

/* ---------------------------------------------------------------- one decoder layer, n rows
 * The same layer for n new tokens of one sequence (a verification, a draft's check), in two calls
 * around the attention, which the caller runs (torch's SDPA: its tiles beat a loop here at many
 * rows): qk_layer_pre takes x (n x H) to the queries q (n x nq x D) and writes the keys and values
 * into cache slots t0 .. t0 + n - 1 (row r's cos / sin at cos + r * D); qk_layer_post takes the
 * attention's output att (n x nq * D) and x to the layer's output, in place. The GEMMs take the
 * cols loop where ``cols`` is set, as qk_linear with the same n would. Row by row the same
 * roundings as qk_layer1. */
int qk_layer_pre(const qk_layer_t *L, const uint16_t *x, int64_t n, const uint16_t *cos, const uint16_t *sin,
                 uint16_t *q, uint16_t *kc, uint16_t *vc, int64_t cap, int64_t t0, int cols, int threads) {
    const int64_t H = L->H, D = L->D, nq = L->nq, nkv = L->nkv, Nqkv = L->qkv.N;
    uint16_t *h = grow(5, (size_t)n * H * 2);
    uint16_t *qkv = grow(6, (size_t)n * Nqkv * 2);
    if (!h || !qkv) return 1;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t r = 0; r < n; r++) rms_norm_bf16(x + r * H, L->ln1, H, L->eps1, h + r * H);
    if (lin_n(&L->qkv, h, n, cols, qkv, threads)) return 1;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t r = 0; r < n; r++)
        rope_store(qkv + r * Nqkv, nq, nkv, D, cos + r * D, sin + r * D, q + r * nq * D, kc, vc, cap, t0 + r);
    return 0;
}

int qk_layer_post(const qk_layer_t *L, uint16_t *x, const uint16_t *att, int64_t n, int cols, int threads) {
    const int64_t H = L->H, I = L->I;
    uint16_t *h = grow(5, (size_t)n * (H > I ? H : I) * 2);
    uint16_t *gu = grow(8, (size_t)n * L->gu.N * 2);
    if (!h || !gu) return 1;
    if (lin_n(&L->o, att, n, cols, h, threads)) return 1;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t r = 0; r < n; r++) {
        add_bf16(x + r * H, h + r * H, H);
        rms_norm_bf16(x + r * H, L->ln2, H, L->eps2, h + r * H);
    }
    if (lin_n(&L->gu, h, n, cols, gu, threads)) return 1;
    silu_mul(gu, n, I, h, threads);
    uint16_t *dn = gu; /* the gate / up buffer is free again */
    if (lin_n(&L->down, h, n, cols, dn, threads)) return 1;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t r = 0; r < n; r++) add_bf16(x + r * H, dn + r * H, H);
    return 0;
}
