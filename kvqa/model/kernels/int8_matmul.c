/* kvqa's int8 product for few input rows (a decode step, a drafted run): y = x W^T, W held as int8 rows times
 * bfloat16 scales (kvqa/model/weights.py): one per row, or one per group of G consecutive weights of a row (as
 * llama.cpp's Q8_0 has one per 32), x and y float32. kvqa/model/kernels/int8_kernel.py builds it for the CPU it runs
 * on (cc -O3 -march=native -fopenmp) and calls it through ctypes.
 *
 * Such a product is memory-bound: every weight is read once for the few input rows. So the weights are read as they
 * are stored, one byte each, widened to float32 in registers, and the block of rows AHEAD blocks on is prefetched a
 * line an iteration, in the order its bytes lie in memory (a block's ROWS rows are contiguous): the reading then
 * streams at the machine's sequential rate, where a line of each of the ROWS rows at a time read DRAM at half of it
 * (docs/performance.md). The products and sums are
 * float32 (the inputs are not rounded). Each output element is one accumulator of LANES lanes summed in ascending k
 * (with groups: one per group, each added times its scale into a second accumulator as the group ends), then the
 * lanes added (and times the row's scale): the same operations in the same order whatever the number of input rows
 * and wherever the row falls in a block, so an output row depends on its own input row alone, bit for bit.
 * K must be a multiple of LANES, G of LANES and K of G (int8_kernel.py lets multiples of 16 through). */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#if defined(__AVX512F__)
#define LANES 16
typedef __m512 vec;
static inline vec zero(void) { return _mm512_setzero_ps(); }
static inline vec load(const float *x) { return _mm512_loadu_ps(x); }
static inline vec widen(const int8_t *w) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)w)));
}
static inline vec madd(vec a, vec b, vec c) { return _mm512_fmadd_ps(a, b, c); }
static inline vec broadcast(float f) { return _mm512_set1_ps(f); }
static inline float total(vec a) { return _mm512_reduce_add_ps(a); }
#elif defined(__AVX2__) && defined(__FMA__)
#define LANES 8
typedef __m256 vec;
static inline vec zero(void) { return _mm256_setzero_ps(); }
static inline vec load(const float *x) { return _mm256_loadu_ps(x); }
static inline vec widen(const int8_t *w) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)w)));
}
static inline vec madd(vec a, vec b, vec c) { return _mm256_fmadd_ps(a, b, c); }
static inline vec broadcast(float f) { return _mm256_set1_ps(f); }
static inline float total(vec a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
#else
#error "kvqa's int8 kernel needs AVX2 with FMA, or AVX-512"
#endif

#define ROWS 4    /* weight rows read together */
#define INPUTS 4  /* input rows multiplied by them together */
#define AHEAD 2   /* prefetch the weight rows this many blocks of ROWS ahead */

int kvqa_int8_lanes(void) { return LANES; }

static inline float bfloat16(uint16_t bits) {
    uint32_t u = (uint32_t)bits << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* rows x inputs outputs: weight rows n0.., input rows m0..; k from k0 to k1 into acc. */
static inline __attribute__((always_inline)) void span(vec acc[INPUTS][ROWS], const float *x, const int8_t *wn,
                                                       int64_t K, int64_t m0, int64_t k0, int64_t k1, int rows,
                                                       int inputs) {
    for (int i = 0; i < inputs; i++)
        for (int r = 0; r < rows; r++) acc[i][r] = zero();
    for (int64_t k = k0; k < k1; k += LANES) {
        int64_t read = (k / LANES) * rows * LANES;  /* bytes of this block's rows read so far */
        if (m0 == 0 && read % 64 == 0)  /* on the first pass: the next line, in memory order, AHEAD blocks on */
            _mm_prefetch((const char *)(wn + AHEAD * ROWS * K + read), _MM_HINT_T0);
        vec wv[ROWS];
        for (int r = 0; r < rows; r++) wv[r] = widen(wn + r * K + k);
        for (int i = 0; i < inputs; i++) {
            vec xv = load(x + (m0 + i) * K + k);
            for (int r = 0; r < rows; r++) acc[i][r] = madd(xv, wv[r], acc[i][r]);
        }
    }
}

/* rows x inputs outputs: weight rows n0.., input rows m0..; G == K: one scale a row. Constant rows and inputs once
 * inlined. */
static inline __attribute__((always_inline)) void block(const float *x, const int8_t *w, const uint16_t *scale,
                                                        float *y, int64_t N, int64_t K, int64_t G, int64_t n0,
                                                        int64_t m0, int rows, int inputs) {
    vec acc[INPUTS][ROWS];
    const int8_t *wn = w + n0 * K;
    if (G == K) {
        span(acc, x, wn, K, m0, 0, K, rows, inputs);
        for (int i = 0; i < inputs; i++)
            for (int r = 0; r < rows; r++) y[(m0 + i) * N + n0 + r] = total(acc[i][r]) * bfloat16(scale[n0 + r]);
        return;
    }
    vec sum[INPUTS][ROWS];
    const int64_t groups = K / G;
    for (int i = 0; i < inputs; i++)
        for (int r = 0; r < rows; r++) sum[i][r] = zero();
    for (int64_t g = 0; g < groups; g++) {
        span(acc, x, wn, K, m0, g * G, (g + 1) * G, rows, inputs);
        for (int r = 0; r < rows; r++) {
            vec s = broadcast(bfloat16(scale[(n0 + r) * groups + g]));
            for (int i = 0; i < inputs; i++) sum[i][r] = madd(acc[i][r], s, sum[i][r]);
        }
    }
    for (int i = 0; i < inputs; i++)
        for (int r = 0; r < rows; r++) y[(m0 + i) * N + n0 + r] = total(sum[i][r]);
}

void kvqa_int8_matmul(const float *x, const int8_t *w, const uint16_t *scale, float *y, int64_t M, int64_t N,
                      int64_t K, int64_t G, int threads) {
    int64_t blocks = (N + ROWS - 1) / ROWS;
#pragma omp parallel for schedule(static) num_threads(threads)
    for (int64_t b = 0; b < blocks; b++) {
        int64_t n0 = b * ROWS;
        int64_t m0 = 0;
        if (n0 + ROWS <= N) {
            if (M == 1) {
                block(x, w, scale, y, N, K, G, n0, 0, ROWS, 1);
                continue;
            }
            for (; m0 + INPUTS <= M; m0 += INPUTS) block(x, w, scale, y, N, K, G, n0, m0, ROWS, INPUTS);
            if (M - m0 == 3)  /* the rest in one pass over the block's weights too (a drafted run of 7 rows: 4 + 3) */
                block(x, w, scale, y, N, K, G, n0, m0, ROWS, 3);
            else if (M - m0 == 2)
                block(x, w, scale, y, N, K, G, n0, m0, ROWS, 2);
            else if (M - m0 == 1)
                block(x, w, scale, y, N, K, G, n0, m0, ROWS, 1);
        } else {
            for (int64_t n = n0; n < N; n++)
                for (m0 = 0; m0 < M; m0++) block(x, w, scale, y, N, K, G, n, m0, 1, 1);
        }
    }
}
