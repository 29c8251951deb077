// The row-invariant fp32 linear layer (gemm.h, linear_forward_rows). Every output element is
//   y[m][n] = (block_0 + block_1 + ... ) + b[n],  block_j = tree(lane_0..lane_7),
//   lane_l = fma-chain over k = j*kKBlock + l, l + 8, ... of x[m][k] * W[n][k]
// so its value is a function of row m of x, row n of W and K alone: not of M, of the rows computed
// beside it, of the tile it falls in, or of the thread count. The AVX2 kernel and the portable one
// below do exactly this arithmetic (fma, the same lanes, the same reduction tree), so they agree
// bit for bit (tested), and an AVX-512 CPU running this kernel gives an AVX2 CPU's bits.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "bertcc/runtime.h"
#include "kernels/gemm.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace bertcc::kernels {
namespace {

constexpr int64_t kKBlock = 512;  // K per block: 3 rows + 4 weight rows of it stay in L1
constexpr int64_t kRows = 3, kCols = 4;
constexpr int64_t kTileRows = 48, kTileCols = 64;  // one task: its x rows stay in L2 over its columns

// The fixed reduction of 8 lanes: (l0+l4, l1+l5, l2+l6, l3+l7), then (a0+a2, a1+a3), then b0+b1.
inline float tree8(const float* l) {
  const float a0 = l[0] + l[4], a1 = l[1] + l[5], a2 = l[2] + l[6], a3 = l[3] + l[7];
  const float b0 = a0 + a2, b1 = a1 + a3;
  return b0 + b1;
}

// Portable form: R rows x C weight rows over k in [k0, k1), sums to out[r*C+c].
void block_portable(const float* x, int64_t ldx, const float* W, int64_t ldw, int64_t k0, int64_t k1, int64_t R,
                    int64_t C, float* out) {
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) {
      float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      const float* xr = x + r * ldx;
      const float* wc = W + c * ldw;
      // up to a multiple of 8, as the SIMD kernel's masked last step: fma(0, 0, lane)
      const int64_t kend = k0 + (k1 - k0 + 7) / 8 * 8;
      for (int64_t k = k0; k < kend; ++k) {
        const float xv = k < k1 ? xr[k] : 0.0f, wv = k < k1 ? wc[k] : 0.0f;
        lane[(k - k0) & 7] = std::fma(xv, wv, lane[(k - k0) & 7]);
      }
      out[r * C + c] = tree8(lane);
    }
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) inline float tree8_avx(__m256 v) {
  const __m128 a = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));  // a0..a3
  const __m128 b = _mm_add_ps(a, _mm_movehl_ps(a, a));                                 // b0 = a0+a2, b1 = a1+a3
  return _mm_cvtss_f32(_mm_add_ss(b, _mm_movehdup_ps(b)));                              // b0 + b1
}

template <int R, int C>
__attribute__((target("avx2,fma"))) void block_avx2(const float* x, int64_t ldx, const float* W, int64_t ldw,
                                                    int64_t k0, int64_t k1, float* out) {
  __m256 acc[R][C];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
  int64_t k = k0;
  for (; k + 8 <= k1; k += 8) {
    __m256 xv[R];
    for (int r = 0; r < R; ++r) xv[r] = _mm256_loadu_ps(x + r * ldx + k);
    for (int c = 0; c < C; ++c) {
      const __m256 wv = _mm256_loadu_ps(W + c * ldw + k);
      for (int r = 0; r < R; ++r) acc[r][c] = _mm256_fmadd_ps(xv[r], wv, acc[r][c]);
    }
  }
  if (k < k1) {  // the last k: the lanes past k1 load zeros and keep their sums
    alignas(32) int32_t m[8];
    for (int l = 0; l < 8; ++l) m[l] = k + l < k1 ? -1 : 0;
    const __m256i mask = _mm256_load_si256(reinterpret_cast<const __m256i*>(m));
    __m256 xv[R];
    for (int r = 0; r < R; ++r) xv[r] = _mm256_maskload_ps(x + r * ldx + k, mask);
    for (int c = 0; c < C; ++c) {
      const __m256 wv = _mm256_maskload_ps(W + c * ldw + k, mask);
      for (int r = 0; r < R; ++r) acc[r][c] = _mm256_fmadd_ps(xv[r], wv, acc[r][c]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) out[r * C + c] = tree8_avx(acc[r][c]);
}

template <int R>
void block_avx2_cols(const float* x, int64_t ldx, const float* W, int64_t ldw, int64_t k0, int64_t k1, int64_t C,
                     float* out) {
  switch (C) {
    case 4: return block_avx2<R, 4>(x, ldx, W, ldw, k0, k1, out);
    case 3: return block_avx2<R, 3>(x, ldx, W, ldw, k0, k1, out);
    case 2: return block_avx2<R, 2>(x, ldx, W, ldw, k0, k1, out);
    default: return block_avx2<R, 1>(x, ldx, W, ldw, k0, k1, out);
  }
}

bool have_avx2() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;
}
#endif

std::atomic<int> g_mode{0};  // 0: automatic, 1: always, -1: never (set_row_gemm)

void block(const float* x, int64_t ldx, const float* W, int64_t ldw, int64_t k0, int64_t k1, int64_t R, int64_t C,
           float* out, bool simd) {
#if defined(__x86_64__)
  if (simd) {
    switch (R) {
      case 3: return block_avx2_cols<3>(x, ldx, W, ldw, k0, k1, C, out);
      case 2: return block_avx2_cols<2>(x, ldx, W, ldw, k0, k1, C, out);
      default: return block_avx2_cols<1>(x, ldx, W, ldw, k0, k1, C, out);
    }
  }
#else
  (void)simd;
#endif
  block_portable(x, ldx, W, ldw, k0, k1, R, C, out);
}

// One task: rows [m0, m1) x columns [n0, n1), every K block.
void tile(float* y, const float* x, const float* W, const float* b, int64_t m0, int64_t m1, int64_t n0, int64_t n1,
          int64_t N, int64_t K, bool simd) {
  float part[kRows * kCols];
  for (int64_t k0 = 0; k0 < K; k0 += kKBlock) {
    const int64_t k1 = std::min(K, k0 + kKBlock);
    for (int64_t n = n0; n < n1; n += kCols) {
      const int64_t C = std::min(kCols, n1 - n);
      for (int64_t m = m0; m < m1; m += kRows) {
        const int64_t R = std::min(kRows, m1 - m);
        block(x + m * K, K, W + n * K, K, k0, k1, R, C, part, simd);
        for (int64_t r = 0; r < R; ++r) {
          float* yr = y + (m + r) * N + n;
          if (k0 == 0)
            for (int64_t c = 0; c < C; ++c) yr[c] = part[r * C + c];
          else
            for (int64_t c = 0; c < C; ++c) yr[c] += part[r * C + c];
        }
      }
    }
  }
  if (b)
    for (int64_t m = m0; m < m1; ++m)
      for (int64_t n = n0; n < n1; ++n) y[m * N + n] += b[n];
}

void run(float* y, const float* x, const float* W, const float* b, int64_t M, int64_t N, int64_t K, bool simd) {
  const int64_t tm = (M + kTileRows - 1) / kTileRows, tn = (N + kTileCols - 1) / kTileCols;
  const int64_t tasks = tm * tn;
  const bool par = tasks > 1 && M * N * K >= (int64_t{1} << 16) && !omp_in_parallel();
#pragma omp parallel for schedule(dynamic, 1) if (par)
  for (int64_t t = 0; t < tasks; ++t) {
    const int64_t i = t / tn, j = t % tn;
    tile(y, x, W, b, i * kTileRows, std::min(M, (i + 1) * kTileRows), j * kTileCols,
         std::min(N, (j + 1) * kTileCols), N, K, simd);
  }
}

}  // namespace

void set_row_gemm(RowGemm mode) { g_mode = mode == RowGemm::Always ? 1 : mode == RowGemm::Never ? -1 : 0; }

bool row_gemm_active() {
  const int mode = g_mode.load();
  if (mode != 0) return mode > 0;
  return !onednn_f32_rows_invariant();
}

void linear_forward_rows(float* y, const float* x, const float* W, const float* b, int64_t M, int64_t N, int64_t K) {
#if defined(__x86_64__)
  run(y, x, W, b, M, N, K, have_avx2());
#else
  run(y, x, W, b, M, N, K, false);
#endif
}

void linear_forward_rows_portable(float* y, const float* x, const float* W, const float* b, int64_t M, int64_t N,
                                  int64_t K) {
  run(y, x, W, b, M, N, K, false);
}

}  // namespace bertcc::kernels
