/* kvqa's RMS norm for float32 rows: out = weight * (x * 1 / sqrt(mean(x^2) + eps)), a Llama-family norm
 * (transformers' LlamaRMSNorm computes the same in eight PyTorch operations, about 25 us for one row of 576 on 2
 * cores; a decode step runs 61 of them). The sum of squares is LANES partial sums over ascending k, then the lanes
 * added: the same operations in the same order for a row whatever the number of rows, so a row's result depends on
 * that row alone, bit for bit (a decode step and a drafted run agree with the forward). kvqa/model/kernels/rms_norm.py
 * builds it for the CPU it runs on (cc -O3 -march=native -fopenmp) and calls it through ctypes. K must be a multiple
 * of LANES. */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#if defined(__AVX512F__)
#define LANES 16
typedef __m512 vec;
static inline vec zero(void) { return _mm512_setzero_ps(); }
static inline vec load(const float *x) { return _mm512_loadu_ps(x); }
static inline void store(float *x, vec a) { _mm512_storeu_ps(x, a); }
static inline vec mul(vec a, vec b) { return _mm512_mul_ps(a, b); }
static inline vec madd(vec a, vec b, vec c) { return _mm512_fmadd_ps(a, b, c); }
static inline vec broadcast(float f) { return _mm512_set1_ps(f); }
static inline float total(vec a) { return _mm512_reduce_add_ps(a); }
#elif defined(__AVX2__) && defined(__FMA__)
#define LANES 8
typedef __m256 vec;
static inline vec zero(void) { return _mm256_setzero_ps(); }
static inline vec load(const float *x) { return _mm256_loadu_ps(x); }
static inline void store(float *x, vec a) { _mm256_storeu_ps(x, a); }
static inline vec mul(vec a, vec b) { return _mm256_mul_ps(a, b); }
static inline vec madd(vec a, vec b, vec c) { return _mm256_fmadd_ps(a, b, c); }
static inline vec broadcast(float f) { return _mm256_set1_ps(f); }
static inline float total(vec a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
#else
#error "kvqa's RMS norm needs AVX2 with FMA, or AVX-512"
#endif

int kvqa_rms_norm_lanes(void) { return LANES; }

static void norm_row(const float *x, const float *weight, float *out, int64_t K, float eps) {
    vec sums = zero();
    for (int64_t k = 0; k < K; k += LANES) {
        vec v = load(x + k);
        sums = madd(v, v, sums);
    }
    vec scale = broadcast(1.0f / sqrtf(total(sums) / (float)K + eps));
    for (int64_t k = 0; k < K; k += LANES) store(out + k, mul(load(weight + k), mul(load(x + k), scale)));
}

/* x and out (M, K) float32, contiguous; weight (K,) */
void kvqa_rms_norm(const float *x, const float *weight, float *out, int64_t M, int64_t K, float eps, int threads) {
#pragma omp parallel for schedule(static) num_threads(threads) if (M >= 8)
    for (int64_t m = 0; m < M; m++) norm_row(x + m * K, weight, out + m * K, K, eps);
}
