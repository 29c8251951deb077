// The int8 products on bertcc's own kernel, for CPUs whose oneDNN int8 matmul reads plain weights
// (no VNNI: oneDNN 2.6's AVX2 int8 gemm packs every weight again on every call, which made a batch
// of one 32-token sequence as slow in int8 as in fp32 there). The weights are laid out once, at
// load, as panels of 16 columns, each k-quad's 4 bytes of a column side by side ([K/4][16][4]), with
// 128 x their column sums; a call packs only its activations, shifted to u8 (a + 128).
// The AVX2 micro-kernel multiplies u8 activations by s8 weights with vpmaddubsw (pair sums in 16
// bits: at most 2 * 255 * 63 = 32130 for 7-bit weights, so nothing saturates), widens the pairs
// into int32 with vpmaddwd and adds them up; subtracting 128 x the column sum gives the exact
// integer sum of a x w. Every kernel here, the portable one included, gives the same int32 as
// oneDNN's, so the int8 layers keep every bit whichever runs (tested).
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "bertcc/error.h"
#include "kernels/gemm_int8.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace bertcc::kernels {

struct Int8Panels {
  int64_t N = 0, K = 0, Kq = 0;  // Kq: k-quads (K rounded up to 4, over 4)
  std::vector<int8_t> data;      // panels of 16 columns, each [Kq][16][4] (zeros past N and K)
  std::vector<int32_t> comp;     // 128 * sum_k w[n][k], rounded up to whole panels (zeros past N)
};

namespace {

constexpr int64_t kPanel = 16, kRows = 4;
constexpr int64_t kTileRows = 64, kTilePanels = 8;  // one task: 64 rows x 128 columns

int64_t panels_of(int64_t N) { return (N + kPanel - 1) / kPanel; }

// Portable form of one micro-tile: R rows of u8 activations (each Kq * 4 bytes) against a panel.
void micro_portable(int64_t R, const uint8_t* a, int64_t lda, const int8_t* panel, int64_t Kq, const int32_t* comp,
                    int32_t* out, int64_t ldo) {
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < kPanel; ++c) {
      int32_t s = 0;
      for (int64_t q = 0; q < Kq; ++q)
        for (int64_t i = 0; i < 4; ++i) s += int32_t{a[r * lda + 4 * q + i]} * panel[q * 64 + c * 4 + i];
      out[r * ldo + c] = s - comp[c];
    }
}

#if defined(__x86_64__)
template <int R>
__attribute__((target("avx2,fma"))) void micro_avx2(const uint8_t* a, int64_t lda, const int8_t* panel, int64_t Kq,
                                                    const int32_t* comp, int32_t* out, int64_t ldo) {
  __m256i lo[R], hi[R];
  for (int r = 0; r < R; ++r) lo[r] = hi[r] = _mm256_setzero_si256();
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t q = 0; q < Kq; ++q, panel += 64) {
    const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel));
    const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + 32));
    for (int r = 0; r < R; ++r) {
      int32_t quad;
      std::memcpy(&quad, a + r * lda + 4 * q, 4);
      const __m256i x = _mm256_set1_epi32(quad);
      lo[r] = _mm256_add_epi32(lo[r], _mm256_madd_epi16(_mm256_maddubs_epi16(x, w0), ones));
      hi[r] = _mm256_add_epi32(hi[r], _mm256_madd_epi16(_mm256_maddubs_epi16(x, w1), ones));
    }
  }
  const __m256i c0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(comp));
  const __m256i c1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(comp + 8));
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + r * ldo), _mm256_sub_epi32(lo[r], c0));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + r * ldo + 8), _mm256_sub_epi32(hi[r], c1));
  }
}

void micro_simd(int64_t R, const uint8_t* a, int64_t lda, const int8_t* panel, int64_t Kq, const int32_t* comp,
                int32_t* out, int64_t ldo) {
  switch (R) {
    case 1:
      return micro_avx2<1>(a, lda, panel, Kq, comp, out, ldo);
    case 2:
      return micro_avx2<2>(a, lda, panel, Kq, comp, out, ldo);
    case 3:
      return micro_avx2<3>(a, lda, panel, Kq, comp, out, ldo);
    default:
      return micro_avx2<4>(a, lda, panel, Kq, comp, out, ldo);
  }
}
#endif

// rows [m0, m1) x panels [p0, p1) of acc
void tile(const uint8_t* a, const Int8Panels& w, int32_t* acc, int64_t m0, int64_t m1, int64_t p0, int64_t p1,
          bool simd) {
  const int64_t lda = w.Kq * 4, N = w.N;
  alignas(32) int32_t buf[kRows * kPanel];
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t n0 = p * kPanel, C = std::min(kPanel, N - n0);
    const int8_t* panel = w.data.data() + p * w.Kq * 64;
    const int32_t* comp = w.comp.data() + n0;
    for (int64_t m = m0; m < m1; m += kRows) {
      const int64_t R = std::min(kRows, m1 - m);
      const bool whole = C == kPanel;
      int32_t* out = whole ? acc + m * N + n0 : buf;
      const int64_t ldo = whole ? N : kPanel;
#if defined(__x86_64__)
      if (simd)
        micro_simd(R, a + m * lda, lda, panel, w.Kq, comp, out, ldo);
      else
#endif
        micro_portable(R, a + m * lda, lda, panel, w.Kq, comp, out, ldo);
      if (!whole)
        for (int64_t r = 0; r < R; ++r) std::memcpy(acc + (m + r) * N + n0, buf + r * kPanel, sizeof(int32_t) * C);
    }
  }
}

}  // namespace

bool int8_row_kernel_simd() {
#if defined(__x86_64__)
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;
#else
  return false;
#endif
}

std::shared_ptr<const Int8Panels> pack_int8_panels(const int8_t* q, int64_t N, int64_t K) {
  BERTCC_CHECK(N > 0 && K > 0, "pack_int8_panels: empty weight [", N, ", ", K, "]");
  auto p = std::make_shared<Int8Panels>();
  p->N = N;
  p->K = K;
  p->Kq = (K + 3) / 4;
  const int64_t panels = panels_of(N);
  p->data.assign(static_cast<size_t>(panels * p->Kq * 64), 0);
  p->comp.assign(static_cast<size_t>(panels * kPanel), 0);
  for (int64_t n = 0; n < N; ++n) {
    int8_t* dst = p->data.data() + (n / kPanel) * p->Kq * 64 + (n % kPanel) * 4;
    int32_t sum = 0;
    for (int64_t k = 0; k < K; ++k) {
      const int8_t v = q[n * K + k];
      BERTCC_CHECK(v >= -kInt8WeightMax && v <= kInt8WeightMax, "pack_int8_panels: weight ", int{v}, " outside [-",
                   kInt8WeightMax, ", ", kInt8WeightMax, "] (its 16-bit pair sums could saturate)");
      dst[(k / 4) * 64 + k % 4] = v;
      sum += v;
    }
    p->comp[static_cast<size_t>(n)] = 128 * sum;
  }
  return p;
}

void gemm_int8_panels(const int8_t* a, const Int8Panels& w, int32_t* acc, int64_t M, bool simd) {
  BERTCC_CHECK(M > 0, "gemm_int8_panels: no rows");
#if !defined(__x86_64__)
  simd = false;
#endif
  simd = simd && int8_row_kernel_simd();
  const int64_t K = w.K, lda = w.Kq * 4;
  // the activations shifted to u8 (a + 128, i.e. a ^ 0x80), each row padded to whole k-quads
  thread_local std::vector<uint8_t> au;
  if (au.size() < static_cast<size_t>(M * lda)) au.resize(static_cast<size_t>(M * lda));
  uint8_t* ap = au.data();
  for (int64_t m = 0; m < M; ++m) {
    const int8_t* src = a + m * K;
    uint8_t* dst = ap + m * lda;
    for (int64_t k = 0; k < K; ++k) dst[k] = static_cast<uint8_t>(src[k]) ^ 0x80u;
    for (int64_t k = K; k < lda; ++k) dst[k] = 0;  // against zero weights
  }
  const int64_t panels = panels_of(w.N);
  const int64_t tm = (M + kTileRows - 1) / kTileRows, tn = (panels + kTilePanels - 1) / kTilePanels;
  const bool par = tm * tn > 1 && M * w.N * K >= (int64_t{1} << 16) && !omp_in_parallel();
#pragma omp parallel for schedule(dynamic, 1) if (par)
  for (int64_t t = 0; t < tm * tn; ++t) {
    const int64_t i = t / tn, j = t % tn;
    tile(ap, w, acc, i * kTileRows, std::min(M, (i + 1) * kTileRows), j * kTilePanels,
         std::min(panels, (j + 1) * kTilePanels), simd);
  }
}

}  // namespace bertcc::kernels
