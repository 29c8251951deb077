// The row-invariant fp32 linear layer (gemm.h, linear_forward_rows). Every output element is
//   y[m][n] = fma(x[m][K-1], W[n][K-1], ... fma(x[m][1], W[n][1], x[m][0] * W[n][0]) ...) + b[n]
// one fma chain in k order, so its value is a function of row m of x, row n of W and K alone: not
// of M, of the rows computed beside it, of the tile it falls in, or of the thread count. The AVX2
// kernel (6 rows x 16 columns of sums in registers, W packed in 16-column panels, K in blocks
// whose sums wait in y) and the portable one below do exactly this arithmetic, so they agree bit
// for bit (tested), and any x86 CPU running this kernel gives the same bits.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "bertcc/runtime.h"
#include "kernels/gemm.h"
#include "kernels/kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace bertcc::kernels {
namespace {

constexpr int64_t kKBlock = 256;                    // K per pass: a 16-column panel's slice is 16 KB (L1)
constexpr int64_t kRows = 6, kPanel = 16;           // the micro-kernel: 6 rows x 16 columns (12 ymm sums)
constexpr int64_t kTileRows = 96, kTilePanels = 8;  // one task: 96 rows x 128 columns

// W [N,K] row-major packed as panels of 16 columns, each [K][16] (columns past N are zeros).
void pack_panels(const float* W, int64_t N, int64_t K, float* out) {
  const int64_t panels = (N + kPanel - 1) / kPanel;
#pragma omp parallel for schedule(static) if (N * K > 65536 && !omp_in_parallel())
  for (int64_t p = 0; p < panels; ++p) {
    float* dst = out + p * K * kPanel;
    const float* src[kPanel];
    const int64_t C = std::min(kPanel, N - p * kPanel);
    for (int64_t c = 0; c < C; ++c) src[c] = W + (p * kPanel + c) * K;
    for (int64_t k = 0; k < K; ++k, dst += kPanel) {  // 16 read streams, one write stream
      for (int64_t c = 0; c < C; ++c) dst[c] = src[c][k];
      for (int64_t c = C; c < kPanel; ++c) dst[c] = 0.0f;
    }
  }
}

#if defined(__x86_64__)
// Rows [0, 6) x columns [0, 8) of src (rows K apart) as [8][6] at out: an 8 x 8 transpose of the six
// rows and two zero rows. Each column goes out as 8 floats, whose last 2 the next column's store
// overwrites; the eighth column writes its 6 alone where `last` (the block's end, past which out
// may end or belong to the next block).
__attribute__((target("avx2,fma"))) void transpose6x8(const float* src, int64_t K, float* out, bool last) {
  const __m256 z = _mm256_setzero_ps();
  const __m256 r0 = _mm256_loadu_ps(src), r1 = _mm256_loadu_ps(src + K), r2 = _mm256_loadu_ps(src + 2 * K);
  const __m256 r3 = _mm256_loadu_ps(src + 3 * K), r4 = _mm256_loadu_ps(src + 4 * K), r5 = _mm256_loadu_ps(src + 5 * K);
  const __m256 a0 = _mm256_unpacklo_ps(r0, r1), a1 = _mm256_unpackhi_ps(r0, r1);  // pairs of rows
  const __m256 a2 = _mm256_unpacklo_ps(r2, r3), a3 = _mm256_unpackhi_ps(r2, r3);
  const __m256 a4 = _mm256_unpacklo_ps(r4, r5), a5 = _mm256_unpackhi_ps(r4, r5);
  const __m256 b0 = _mm256_shuffle_ps(a0, a2, 0x44), b1 = _mm256_shuffle_ps(a0, a2, 0xEE);  // quads
  const __m256 b2 = _mm256_shuffle_ps(a1, a3, 0x44), b3 = _mm256_shuffle_ps(a1, a3, 0xEE);
  const __m256 b4 = _mm256_shuffle_ps(a4, z, 0x44), b5 = _mm256_shuffle_ps(a4, z, 0xEE);
  const __m256 b6 = _mm256_shuffle_ps(a5, z, 0x44), b7 = _mm256_shuffle_ps(a5, z, 0xEE);
  const __m256 c[8] = {_mm256_permute2f128_ps(b0, b4, 0x20), _mm256_permute2f128_ps(b1, b5, 0x20),
                       _mm256_permute2f128_ps(b2, b6, 0x20), _mm256_permute2f128_ps(b3, b7, 0x20),
                       _mm256_permute2f128_ps(b0, b4, 0x31), _mm256_permute2f128_ps(b1, b5, 0x31),
                       _mm256_permute2f128_ps(b2, b6, 0x31), _mm256_permute2f128_ps(b3, b7, 0x31)};
  for (int j = 0; j < 7; ++j) _mm256_storeu_ps(out + j * kRows, c[j]);
  if (!last) return _mm256_storeu_ps(out + 7 * kRows, c[7]);
  _mm256_maskstore_ps(out + 7 * kRows, _mm256_setr_epi32(-1, -1, -1, -1, -1, -1, 0, 0), c[7]);
}
#endif

// x rows [m, m+6) of one K block packed as [k][6] (rows past the tile's end are zeros; whole 6-row
// groups 8 columns at a time through transpose6x8 where simd): the
// micro-kernel's broadcasts then read one stream, whatever K (rows K floats apart would fall in
// one L1 set when K*4 is a multiple of 4 KB, as for K = 3072).
void pack_rows(const float* x, int64_t K, int64_t m0, int64_t m1, int64_t k0, int64_t k1, float* out, bool simd) {
  for (int64_t m = m0; m < m1; m += kRows, out += (k1 - k0) * kRows) {
    const int64_t R = std::min(kRows, m1 - m);
    if (R == kRows) {
      const float* src = x + m * K;
      int64_t k = k0;
#if defined(__x86_64__)
      if (simd)
        for (; k + 8 <= k1; k += 8) transpose6x8(src + k, K, out + (k - k0) * kRows, k + 8 == k1);
#else
      (void)simd;
#endif
      for (; k < k1; ++k)
        for (int64_t r = 0; r < kRows; ++r) out[(k - k0) * kRows + r] = src[r * K + k];
      continue;
    }
    for (int64_t k = k0; k < k1; ++k)
      for (int64_t r = 0; r < kRows; ++r) out[(k - k0) * kRows + r] = r < R ? x[(m + r) * K + k] : 0.0f;
  }
}

// Portable form of one micro-tile: 6 packed rows x the panel's 16 columns over kn steps; the sums
// start from acc (the previous K blocks') and continue the same fma chain.
void micro_portable(const float* a, const float* panel, int64_t kn, float* acc /*[6][16]*/) {
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t c = 0; c < kPanel; ++c) {
      float s = acc[r * kPanel + c];
      for (int64_t k = 0; k < kn; ++k) s = std::fma(a[k * kRows + r], panel[k * kPanel + c], s);
      acc[r * kPanel + c] = s;
    }
}

#if defined(__x86_64__)
// A micro-tile of R rows (R <= 6) and 16 columns kept in y itself: the sums start from zero
// (first K block) or from y, continue the same fma chain, take the bias after the last block (the
// same one addition per element as the buffered path) and go back to y: no copies through a
// buffer, and no work for the rows past R. The loops over the rows are unrolled by name: in a
// portable build (generic x86-64) this function is not inlined into its AVX2 caller, and GCC then
// kept lo and hi on the stack (fp32 inference on an AVX2 CPU 2.1x slower;
// tests/codegen/row_kernel_registers.sh).
template <int R>
__attribute__((target("avx2,fma"))) void micro_avx2_y(const float* a, const float* panel, int64_t kn, float* y,
                                                      int64_t ldy, bool first, const float* bias) {
  __m256 lo[R], hi[R];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    lo[r] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(y + r * ldy);
    hi[r] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(y + r * ldy + 8);
  }
#pragma GCC unroll 4
  for (int64_t k = 0; k < kn; ++k, a += kRows, panel += kPanel) {
    const __m256 w0 = _mm256_loadu_ps(panel), w1 = _mm256_loadu_ps(panel + 8);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const __m256 xv = _mm256_broadcast_ss(a + r);
      lo[r] = _mm256_fmadd_ps(xv, w0, lo[r]);
      hi[r] = _mm256_fmadd_ps(xv, w1, hi[r]);
    }
  }
  if (bias) {
    const __m256 b0 = _mm256_loadu_ps(bias), b1 = _mm256_loadu_ps(bias + 8);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      lo[r] = _mm256_add_ps(lo[r], b0);
      hi[r] = _mm256_add_ps(hi[r], b1);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_ps(y + r * ldy, lo[r]);
    _mm256_storeu_ps(y + r * ldy + 8, hi[r]);
  }
}

void micro_y(int64_t R, const float* a, const float* panel, int64_t kn, float* y, int64_t ldy, bool first,
             const float* bias) {
  switch (R) {
    case 1:
      return micro_avx2_y<1>(a, panel, kn, y, ldy, first, bias);
    case 2:
      return micro_avx2_y<2>(a, panel, kn, y, ldy, first, bias);
    case 3:
      return micro_avx2_y<3>(a, panel, kn, y, ldy, first, bias);
    case 4:
      return micro_avx2_y<4>(a, panel, kn, y, ldy, first, bias);
    case 5:
      return micro_avx2_y<5>(a, panel, kn, y, ldy, first, bias);
    default:
      return micro_avx2_y<6>(a, panel, kn, y, ldy, first, bias);
  }
}

bool have_avx2() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;
}
#endif

std::atomic<int> g_mode{0};  // 0: automatic, 1: always, -1: never (set_row_gemm)

void micro(const float* a, const float* panel, int64_t kn, float* acc, bool simd) {
#if defined(__x86_64__)
  if (simd) return micro_avx2_y<kRows>(a, panel, kn, acc, kPanel, false, nullptr);  // acc as a 6 x 16 y
#else
  (void)simd;
#endif
  micro_portable(a, panel, kn, acc);
}

// Where row m0's packed K block k0 starts in the packed x: the row tiles one after another, each
// [K blocks][its micro-tiles][kn][6] (the rows past M zeros, as pack_rows leaves them).
int64_t packed_at(int64_t m0, int64_t k0, int64_t M, int64_t K) {
  const int64_t tile_floats = kTileRows * K;
  const int64_t rows = std::min(kTileRows, M - m0 / kTileRows * kTileRows);
  const int64_t micro_rows = (rows + kRows - 1) / kRows * kRows;
  return m0 / kTileRows * tile_floats + k0 * micro_rows;
}

// The activated output of a layer written straight into pack_rows' layout for the next layer (as
// its x [M, K], K this layer's N), instead of y: the feed-forward block's first layer, whose
// GELU'd output only the second reads (ffn_rows_packed).
struct ActPacked {
  float* xp;       // the next layer's packed x (packed_at's tiles over M rows and this layer's N)
  Activation act;  // applied by gelu_forward_serial, the kernel the unfused layer's GELU runs
};

// Rows [m0, m1) x columns [n0, n0 + C) of the layer's output [M, N] (bias added), held in `block`
// (rows 16 floats apart): activated in place, then packed by pack_rows into the next layer's x, a
// 6-row group at a time (groups kn * 6 floats apart there, kn its K block's width). m0 starts a
// 96-row tile (packed_at's), m1 - m0 <= 96, and the columns are one panel, inside one K block of
// the next layer (kKBlock a whole number of panels).
static_assert(kKBlock % kPanel == 0, "a panel's columns lie in one K block of the next layer");
void write_act_packed(float* block, int64_t m0, int64_t m1, int64_t n0, int64_t C, int64_t M, int64_t N,
                      const ActPacked& ap, bool simd) {
  const int64_t rows = m1 - m0, k0 = n0 / kKBlock * kKBlock, kn = std::min(kKBlock, N - k0);
  for (int64_t r = 0; r < rows; ++r) gelu_forward_serial(block + r * kPanel, block + r * kPanel, C, ap.act);
  float* dst = ap.xp + packed_at(m0, k0, M, N) + (n0 - k0) * kRows;
  for (int64_t g = 0; g < rows; g += kRows, dst += kn * kRows)
    pack_rows(block, kPanel, g, std::min(rows, g + kRows), 0, C, dst, simd);
}

// One task: rows [m0, m1) x panels [p0, p1), x packed (xp, packed_at), one panel at a time (its
// column of y stays in L1 over the K blocks). Sums wait in y between K blocks (fp32, as in the
// registers: the chain continues unchanged); the bias is added after the last block.
// With `ap`, the sums wait in a block of the task's rows x one panel instead of y, and each panel's
// output goes activated into ap's packed x once its last K block is done (y not written).
void tile(float* y, const float* xp, const float* packed, const float* b, int64_t m0, int64_t m1, int64_t p0,
          int64_t p1, int64_t M, int64_t N, int64_t K, bool simd, const ActPacked* ap) {
  alignas(32) float acc[kRows * kPanel];
  alignas(64) float block[kTileRows * kPanel];  // (with ap)
  const int64_t micro_tiles = (m1 - m0 + kRows - 1) / kRows;
  for (int64_t p = p0; p < p1; ++p) {
    const int64_t n0 = p * kPanel, C = std::min(kPanel, N - n0);
    float* yt = ap ? block : y + m0 * N + n0;  // row m's sums at yt + (m - m0) * ldy
    const int64_t ldy = ap ? kPanel : N;
    for (int64_t k0 = 0; k0 < K; k0 += kKBlock) {
      const int64_t k1 = std::min(K, k0 + kKBlock), kn = k1 - k0;
      const bool last = k1 == K;
      const float* abuf = xp + packed_at(m0, k0, M, K);
      const float* panel = packed + (p * K + k0) * kPanel;
      // The slice this task multiplies next (the panel's next K block, or the next panel's first)
      // goes to L2 a few lines per micro-tile while this one is multiplied: the weights do not fit
      // in L2, and the first micro-tile over a slice would otherwise wait on L3 or memory for each
      // line (+1-1.5 % on bert-base's layers at 1,024 rows, +5.6 % at 32: bench/ab_row_gemm.sh,
      // docs/performance.md). A panel's K step is one line.
      const float* next = k1 < K ? panel + kn * kPanel : p + 1 < p1 ? packed + (p + 1) * K * kPanel : nullptr;
      const int64_t next_lines = next ? std::min(kKBlock, k1 < K ? K - k1 : K) : 0;
      const int64_t per_micro = (next_lines + micro_tiles - 1) / micro_tiles;
      int64_t line = 0;
      for (int64_t m = m0; m < m1; m += kRows) {
        const int64_t R = std::min(kRows, m1 - m);
        for (const int64_t end = std::min(next_lines, line + per_micro); line < end; ++line)
          __builtin_prefetch(next + line * kPanel, 0, 2);
#if defined(__x86_64__)
        if (simd && C == kPanel) {
          micro_y(R, abuf + (m - m0) * kn, panel, kn, yt + (m - m0) * ldy, ldy, k0 == 0, last && b ? b + n0 : nullptr);
          continue;
        }
#endif
        if (k0 == 0) {
          std::memset(acc, 0, sizeof acc);
        } else {
          for (int64_t r = 0; r < R; ++r) std::memcpy(acc + r * kPanel, yt + (m - m0 + r) * ldy, sizeof(float) * C);
        }
        micro(abuf + (m - m0) * kn, panel, kn, acc, simd);
        for (int64_t r = 0; r < R; ++r) {
          float* yr = yt + (m - m0 + r) * ldy;
          const float* ar = acc + r * kPanel;
          if (last && b)
            for (int64_t c = 0; c < C; ++c) yr[c] = ar[c] + b[n0 + c];
          else
            std::memcpy(yr, ar, sizeof(float) * C);
        }
      }
    }
    if (ap) write_act_packed(block, m0, m1, n0, C, M, N, *ap, simd);
  }
}

// Floats of x [M, K] packed (pack_rows over packed_at's tiles: whole 96-row tiles, then the last
// tile's rows rounded up to whole micro-tiles): M rounded up to 6 rows
int64_t packed_x_size(int64_t M, int64_t K) { return (M + kRows - 1) / kRows * kRows * K; }

// y = x W^T + b on W already in panels (pack_panels); x given packed already where x_packed (x then
// unread), and with `ap` the output activated into ap's packed x instead of y (tile)
void run_on_panels(float* y, const float* x, const float* pk, const float* b, int64_t M, int64_t N, int64_t K,
                   bool simd, const float* x_packed = nullptr, const ActPacked* ap = nullptr) {
  const int64_t panels = (N + kPanel - 1) / kPanel;
  thread_local std::vector<float> xp;
  const int64_t tm = (M + kTileRows - 1) / kTileRows, tn = (panels + kTilePanels - 1) / kTilePanels;
  const int64_t kb = (K + kKBlock - 1) / kKBlock;
  const bool par = tm * tn > 1 && M * N * K >= (int64_t{1} << 16) && !omp_in_parallel();
  // x packed once for every column task (not once per task: N / 128 times over), unless given so
  const float* xpk = x_packed;
  if (!xpk) {
    xp.resize(static_cast<size_t>(packed_x_size(M, K)));
    float* buf = xp.data();
#pragma omp parallel for schedule(static) if (par && tm * kb > 1)
    for (int64_t t = 0; t < tm * kb; ++t) {
      const int64_t m0 = t / kb * kTileRows, k0 = t % kb * kKBlock;
      pack_rows(x, K, m0, std::min(M, m0 + kTileRows), k0, std::min(K, k0 + kKBlock), buf + packed_at(m0, k0, M, K),
                simd);
    }
    xpk = buf;
  }
#pragma omp parallel for schedule(dynamic, 1) if (par)
  for (int64_t t = 0; t < tm * tn; ++t) {
    const int64_t i = t / tn, j = t % tn;
    tile(y, xpk, pk, b, i * kTileRows, std::min(M, (i + 1) * kTileRows), j * kTilePanels,
         std::min(panels, (j + 1) * kTilePanels), M, N, K, simd, ap);
  }
}

void run(float* y, const float* x, const float* W, const float* b, int64_t M, int64_t N, int64_t K, bool simd) {
  thread_local std::vector<float> packed;
  packed.resize(static_cast<size_t>(row_panels_size(N, K)));
  pack_panels(W, N, K, packed.data());
  run_on_panels(y, x, packed.data(), b, M, N, K, simd);
}

bool simd_here() {
#if defined(__x86_64__)
  return have_avx2();
#else
  return false;
#endif
}

}  // namespace

int64_t row_panels_size(int64_t N, int64_t K) { return (N + kPanel - 1) / kPanel * K * kPanel; }

void pack_row_panels(const float* W, int64_t N, int64_t K, float* out) { pack_panels(W, N, K, out); }

void linear_forward_rows_packed(float* y, const float* x, const float* panels, const float* b, int64_t M, int64_t N,
                                int64_t K) {
  run_on_panels(y, x, panels, b, M, N, K, simd_here());
}

int64_t ffn_rows_scratch_floats(int64_t M, int64_t I) { return packed_x_size(M, I); }

void ffn_rows_packed(float* y, const float* x, const float* panels1, const float* b1, const float* panels2,
                     const float* b2, int64_t M, int64_t C, int64_t I, Activation act, float* scratch) {
  const bool simd = simd_here();
  const ActPacked ap{scratch, act};  // the activated inner rows, packed for the second layer
  run_on_panels(nullptr, x, panels1, b1, M, I, C, simd, nullptr, &ap);
  run_on_panels(y, nullptr, panels2, b2, M, C, I, simd, scratch);
}

void set_row_gemm(RowGemm mode) { g_mode = mode == RowGemm::Always ? 1 : mode == RowGemm::Never ? -1 : 0; }

RowGemm row_gemm_mode() {
  const int mode = g_mode.load();
  return mode > 0 ? RowGemm::Always : mode < 0 ? RowGemm::Never : RowGemm::Auto;
}

bool row_gemm_active() {
  const int mode = g_mode.load();
  if (mode != 0) return mode > 0;
  return !onednn_f32_rows_invariant();
}

void linear_forward_rows(float* y, const float* x, const float* W, const float* b, int64_t M, int64_t N, int64_t K) {
  run(y, x, W, b, M, N, K, simd_here());
}

void linear_forward_rows_portable(float* y, const float* x, const float* W, const float* b, int64_t M, int64_t N,
                                  int64_t K) {
  run(y, x, W, b, M, N, K, false);
}

}  // namespace bertcc::kernels
