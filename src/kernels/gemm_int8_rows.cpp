// bertcc's own int8 kernels (gemm_int8.h): the weights laid out once, at load, as panels of 16
// columns, each k-quad's 4 bytes of a column side by side ([K/4][16][4]), with shift x their column
// sums; a call shifts its activations to u8 (a + shift: 128 for 8-bit activations, 64 for 7-bit
// ones) and subtracts shift x the column sum from each product sum, which gives the exact integer
// sum of a x w. The micro-kernels:
//  - AVX512-VNNI (8 rows x 48 columns, vpdpbusd on zmm, the rescale in registers): where the CPU
//    has it and not AMX (oneDNN's AMX-INT8 matmul is faster there).
//  - AVX-VNNI (6 rows x 16 columns, vpdpbusd on ymm): CPUs with AVX-VNNI and not AVX-512's.
//  - AVX512-BW (8 rows x 48 columns, the VNNI kernel's tile with vpmaddubsw and vpmaddwd on zmm):
//    AVX-512 CPUs without VNNI (Skylake-SP).
//  - AVX2 (4 rows x 16 columns): vpmaddubsw (pair sums in 16 bits: at most 2 * 255 * 63 = 32130 for
//    7-bit weights, so nothing saturates), widened into int32 by vpmaddwd. With 7-bit activations
//    (panels of shift 64: a + 64 in [1, 127]; 3 rows x 16 columns) two k-quads at a time: two
//    vpmaddubsw results added in 16 bits (4 products of at most 127 * 63, 32004 < 32767), then one
//    vpmaddwd, 3 multiply instructions for 64 products instead of 4.
//  - portable loops: the reference.
// One driver (run) rescales their sums straight into fp32 outputs and hands each row to the
// layer's row epilogue (GELU and the next layer's quantization, or the residual LayerNorm) while
// the row is in cache: oneDNN 2.6's matmul writes every int32 sum to memory for a separate rescale
// pass (its per-row scale post-op falls back to a reference kernel), and without VNNI its int8
// matmul is a gemm that packs every weight again on every call.
// Every kernel gives the same int32 sums as oneDNN's, and each rescales them with the same fp32
// arithmetic (rescale_int8_row), so the int8 layers keep every bit whichever runs (tested).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "bertcc/error.h"
#include "bertcc/runtime.h"
#include "kernels/gemm_int8.h"
#include "kernels/int8_panels.h"
#include "kernels/kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace bertcc::kernels {

namespace {

constexpr int64_t kPanel = kInt8Panel;
constexpr int64_t kGroup = kInt8PanelGroup;

int64_t panels_of(int64_t N) { return (N + kPanel - 1) / kPanel; }

// Where a micro-tile's results go: rows m.. of either fp32 outputs y (rescaled: sx per row, sw per
// column, bias b or none) or exact int32 sums acc.
struct Out {
  float* y;
  int64_t ldy;
  int32_t* acc;
  int64_t ldacc;
  const float *sx, *sw, *b;
};

// Rows [m, m + R) x the columns of panel group g, from u8 activations a (row m's first, lda apart).
using MicroTile = void (*)(int64_t R, const uint8_t* a, int64_t lda, const Int8Panels& w, int64_t g, const Out& o,
                           int64_t m);
struct Kernel {
  int64_t rows, group;  // the micro-tile: rows x (group x 16) columns
  MicroTile tile;
};

// A micro-tile's int32 sums (buf: R rows of 16, already less the compensation) to their place in o.
void store_panel(const int32_t* buf, int64_t R, int64_t C, int64_t n0, const Out& o, int64_t m) {
  for (int64_t r = 0; r < R; ++r) {
    if (o.acc)
      std::memcpy(o.acc + (m + r) * o.ldacc + n0, buf + r * kPanel, sizeof(int32_t) * C);
    else
      rescale_int8_row(o.y + (m + r) * o.ldy + n0, buf + r * kPanel, o.sx[m + r], o.sw + n0, o.b ? o.b + n0 : nullptr,
                       C);
  }
}

// Portable form of one panel: R rows (at most 4) of u8 activations against 16 columns.
void portable_tile(int64_t R, const uint8_t* a, int64_t lda, const Int8Panels& w, int64_t g, const Out& o, int64_t m) {
  const int8_t* panel = w.data.data() + g * w.Kq * 64;
  const int64_t n0 = g * kPanel, C = std::min(kPanel, w.N - n0);
  int32_t buf[4 * kPanel];
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < kPanel; ++c) {
      int32_t s = 0;
      for (int64_t q = 0; q < w.Kq; ++q)
        for (int64_t i = 0; i < 4; ++i) s += int32_t{a[r * lda + 4 * q + i]} * panel[q * 64 + c * 4 + i];
      buf[r * kPanel + c] = s - w.comp[static_cast<size_t>(n0 + c)];
    }
  store_panel(buf, R, C, n0, o, m);
}

#if defined(__x86_64__)
int32_t quad(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// f.operator()<rows>() for rows in [1, Max]: a micro-kernel instantiated for each row count.
template <int Max, class F>
void with_rows(int64_t rows, F&& f) {
  if constexpr (Max > 1) {
    if (rows < Max) return with_rows<Max - 1>(rows, f);
  }
  f.template operator()<Max>();
}

// A k-quad's products added to 8 int32 sums on ymm: vpmaddubsw then vpmaddwd (AVX2; 7-bit weights
// keep the 16-bit pair sums from saturating), or vpdpbusd (AVX-VNNI: one instruction for three).
// The VNNI instructions are written as assembly so that the kernels around them are compiled for
// AVX2 (AVX-512) alone: compiled for VNNI, the compiler may fuse AVX2's vpmaddwd and add into
// vpdpwssd (LLVM does), which a CPU without VNNI cannot run. (A -march=native build, the default,
// adds the build machine's ISA to every function anyway: it runs where it was built.)
struct DotAvx2 {
  __attribute__((target("avx2,fma"), always_inline)) static inline __m256i add(__m256i c, __m256i x, __m256i w) {
    return _mm256_add_epi32(c, _mm256_madd_epi16(_mm256_maddubs_epi16(x, w), _mm256_set1_epi16(1)));
  }
};
struct DotAvxVnni {
  __attribute__((target("avx2,fma"), always_inline)) static inline __m256i add(__m256i c, __m256i x, __m256i w) {
    asm("%{vex%} vpdpbusd %2, %1, %0" : "+x"(c) : "x"(x), "x"(w));
    return c;
  }
};

// A ymm micro-tile's R rows of sums (columns 0-7 in lo, 8-15 in hi) less the compensation, to out.
__attribute__((target("avx2,fma"), always_inline)) inline void store_sums256(const __m256i* lo, const __m256i* hi,
                                                                             int R, const int32_t* comp, int32_t* out) {
  const __m256i c0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(comp));
  const __m256i c1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(comp + 8));
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + r * kPanel), _mm256_sub_epi32(lo[r], c0));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + r * kPanel + 8), _mm256_sub_epi32(hi[r], c1));
  }
}

// R rows (at most 6) x 16 columns, 2 R sums in ymm registers (named one by one, as in micro512).
#define BERTCC_ROW256(r)                                            \
  if constexpr (R > r) {                                            \
    const __m256i x = _mm256_set1_epi32(quad(a + r * lda + 4 * q)); \
    lo##r = Dot::add(lo##r, x, w0);                                 \
    hi##r = Dot::add(hi##r, x, w1);                                 \
  }

template <int R, class Dot>
__attribute__((target("avx2,fma"))) void micro256(const uint8_t* a, int64_t lda, const int8_t* panel, int64_t Kq,
                                                  const int32_t* comp, int32_t* out) {
  const __m256i z = _mm256_setzero_si256();
  __m256i lo0 = z, hi0 = z, lo1 = z, hi1 = z, lo2 = z, hi2 = z, lo3 = z, hi3 = z, lo4 = z, hi4 = z, lo5 = z, hi5 = z;
  for (int64_t q = 0; q < Kq; ++q, panel += 64) {
    const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel));
    const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + 32));
    BERTCC_ROW256(0)
    BERTCC_ROW256(1)
    BERTCC_ROW256(2)
    BERTCC_ROW256(3)
    BERTCC_ROW256(4)
    BERTCC_ROW256(5)
  }
  const __m256i lo[6] = {lo0, lo1, lo2, lo3, lo4, lo5}, hi[6] = {hi0, hi1, hi2, hi3, hi4, hi5};
  store_sums256(lo, hi, R, comp, out);
}
#undef BERTCC_ROW256

// micro256 for 7-bit activations on AVX2 (R <= 3 rows): k-quads two at a time, the two vpmaddubsw
// results added in 16 bits before one vpmaddwd (4 products of at most 127 x 63 cannot saturate).
// The same integers as micro256.
#define BERTCC_ROWPAIR(r)                                                                                             \
  if constexpr (R > r) {                                                                                              \
    const __m256i x0 = _mm256_set1_epi32(quad(a + r * lda + 4 * q));                                                  \
    const __m256i x1 = _mm256_set1_epi32(quad(a + r * lda + 4 * q + 4));                                              \
    lo##r = _mm256_add_epi32(                                                                                         \
        lo##r, _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(x0, w0), _mm256_maddubs_epi16(x1, v0)), one)); \
    hi##r = _mm256_add_epi32(                                                                                         \
        hi##r, _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(x0, w1), _mm256_maddubs_epi16(x1, v1)), one)); \
  }

template <int R>
__attribute__((target("avx2,fma"))) void micro256_pairs(const uint8_t* a, int64_t lda, const int8_t* panel, int64_t Kq,
                                                        const int32_t* comp, int32_t* out) {
  const __m256i z = _mm256_setzero_si256(), one = _mm256_set1_epi16(1);
  __m256i lo0 = z, hi0 = z, lo1 = z, hi1 = z, lo2 = z, hi2 = z;
  for (int64_t q = 0; q < Kq; q += 2, panel += 128) {  // (Kq even: 7-bit panels are padded to it)
    __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel));
    __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + 32));
    __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + 64));
    __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + 96));
    // in registers, read once a step: GCC would fold them into each row's vpmaddubsw, 2 loads a
    // cycle with the broadcasts, all an Intel core's load ports take (Zen's 3 take it either way)
    asm("" : "+x"(w0), "+x"(w1), "+x"(v0), "+x"(v1));
    BERTCC_ROWPAIR(0)
    BERTCC_ROWPAIR(1)
    BERTCC_ROWPAIR(2)
  }
  const __m256i lo[3] = {lo0, lo1, lo2}, hi[3] = {hi0, hi1, hi2};
  store_sums256(lo, hi, R, comp, out);
}
#undef BERTCC_ROWPAIR

// rescale_int8_row's arithmetic on a whole panel's R rows (buf: 16 int32 a row) in ymm registers:
// a call per row of 16 columns cost 3 % of a batch of one 32-token sequence
__attribute__((target("avx2,fma"))) void rescale_panel_avx2(const int32_t* buf, int64_t R, const float* sx,
                                                            const float* sw, const float* b, float* y, int64_t ldy) {
  const __m256 sw0 = _mm256_loadu_ps(sw), sw1 = _mm256_loadu_ps(sw + 8);
  const __m256 b0 = b ? _mm256_loadu_ps(b) : _mm256_setzero_ps(), b1 = b ? _mm256_loadu_ps(b + 8) : _mm256_setzero_ps();
  for (int64_t r = 0; r < R; ++r) {
    const __m256 s = _mm256_set1_ps(sx[r]);
    const __m256 f0 = _mm256_cvtepi32_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(buf + r * kPanel)));
    const __m256 f1 = _mm256_cvtepi32_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(buf + r * kPanel + 8)));
    _mm256_storeu_ps(y + r * ldy, _mm256_fmadd_ps(f0, _mm256_mul_ps(s, sw0), b0));
    _mm256_storeu_ps(y + r * ldy + 8, _mm256_fmadd_ps(f1, _mm256_mul_ps(s, sw1), b1));
  }
}

// A panel of the ymm kernels: R rows (at most MaxR) x 16 columns.
template <int MaxR, class Dot>
void ymm_tile(int64_t R, const uint8_t* a, int64_t lda, const Int8Panels& w, int64_t g, const Out& o, int64_t m) {
  const int8_t* panel = w.data.data() + g * w.Kq * 64;
  const int64_t n0 = g * kPanel, C = std::min(kPanel, w.N - n0);
  const int32_t* comp = w.comp.data() + n0;
  alignas(32) int32_t buf[MaxR * kPanel];
  with_rows<MaxR>(R, [&]<int Rows>() { micro256<Rows, Dot>(a, lda, panel, w.Kq, comp, buf); });
  if (o.acc || C < kPanel) return store_panel(buf, R, C, n0, o, m);
  rescale_panel_avx2(buf, R, o.sx + m, o.sw + n0, o.b ? o.b + n0 : nullptr, o.y + m * o.ldy + n0, o.ldy);
}

// A panel of the AVX2 kernel for 7-bit activations: R rows (at most 3) x 16 columns. (3 rows: its
// 6 sums, 4 weight vectors, 2 activations, 2 pair sums and the ones fit AVX2's 16 registers.)
void pairs_tile(int64_t R, const uint8_t* a, int64_t lda, const Int8Panels& w, int64_t g, const Out& o, int64_t m) {
  const int8_t* panel = w.data.data() + g * w.Kq * 64;
  const int64_t n0 = g * kPanel, C = std::min(kPanel, w.N - n0);
  alignas(32) int32_t buf[3 * kPanel];
  with_rows<3>(R, [&]<int Rows>() { micro256_pairs<Rows>(a, lda, panel, w.Kq, w.comp.data() + n0, buf); });
  if (o.acc || C < kPanel) return store_panel(buf, R, C, n0, o, m);
  rescale_panel_avx2(buf, R, o.sx + m, o.sw + n0, o.b ? o.b + n0 : nullptr, o.y + m * o.ldy + n0, o.ldy);
}

// The same on zmm, 16 sums: vpdpbusd (AVX512-VNNI, as assembly: see DotAvxVnni), or vpmaddubsw
// then vpmaddwd (AVX512-BW: AVX-512 CPUs without VNNI).
struct DotVnni {
  __attribute__((target("avx512f,avx512bw"), always_inline)) static inline __m512i add(__m512i c, __m512i x,
                                                                                       __m512i w) {
    asm("vpdpbusd %2, %1, %0" : "+v"(c) : "v"(x), "v"(w));
    return c;
  }
};
struct DotBw {
  __attribute__((target("avx512f,avx512bw"), always_inline)) static inline __m512i add(__m512i c, __m512i x,
                                                                                       __m512i w) {
    return _mm512_add_epi32(c, _mm512_madd_epi16(_mm512_maddubs_epi16(x, w), _mm512_set1_epi16(1)));
  }
};

// The AVX-512 micro-tile: R rows (at most 8) x 3 panels (48 columns), 24 sums in zmm registers,
// rescaled in registers. The sums are named one by one: held in an array, GCC 12 copies them
// between registers on every k-quad and spills some (half the speed, here and in the AVX2 kernel).
#define BERTCC_ROW512(r)                                            \
  if constexpr (R > r) {                                            \
    const __m512i x = _mm512_set1_epi32(quad(a + r * lda + 4 * q)); \
    c##r##0 = Dot::add(c##r##0, x, w0);                             \
    c##r##1 = Dot::add(c##r##1, x, w1);                             \
    c##r##2 = Dot::add(c##r##2, x, w2);                             \
  }

template <int R, class Dot>
__attribute__((target("avx512f,avx512bw"))) void micro512(const uint8_t* a, int64_t lda, const Int8Panels& w, int64_t g,
                                                          const Out& o, int64_t m) {
  const int64_t ps = w.Kq * 64;
  const int8_t* panel = w.data.data() + g * kGroup * ps;
  const __m512i z = _mm512_setzero_si512();
  __m512i c00 = z, c01 = z, c02 = z, c10 = z, c11 = z, c12 = z, c20 = z, c21 = z, c22 = z, c30 = z, c31 = z, c32 = z;
  __m512i c40 = z, c41 = z, c42 = z, c50 = z, c51 = z, c52 = z, c60 = z, c61 = z, c62 = z, c70 = z, c71 = z, c72 = z;
  for (int64_t q = 0; q < w.Kq; ++q, panel += 64) {
    const __m512i w0 = _mm512_loadu_si512(panel), w1 = _mm512_loadu_si512(panel + ps),
                  w2 = _mm512_loadu_si512(panel + 2 * ps);
    BERTCC_ROW512(0)
    BERTCC_ROW512(1)
    BERTCC_ROW512(2)
    BERTCC_ROW512(3)
    BERTCC_ROW512(4)
    BERTCC_ROW512(5)
    BERTCC_ROW512(6)
    BERTCC_ROW512(7)
  }
  const __m512i sums[8][3] = {{c00, c01, c02}, {c10, c11, c12}, {c20, c21, c22}, {c30, c31, c32},
                              {c40, c41, c42}, {c50, c51, c52}, {c60, c61, c62}, {c70, c71, c72}};
  const int64_t n0 = g * kGroup * kPanel;
  for (int64_t p = 0; p < kGroup; ++p) {
    const int64_t c0 = n0 + p * kPanel, C = std::min(kPanel, w.N - c0);
    if (C <= 0) break;
    const __mmask16 mask = C == kPanel ? __mmask16(0xffff) : static_cast<__mmask16>((1u << C) - 1);
    const __m512i comp = _mm512_loadu_si512(w.comp.data() + c0);  // padded to whole groups
    if (o.acc) {
      for (int r = 0; r < R; ++r)
        _mm512_mask_storeu_epi32(o.acc + (m + r) * o.ldacc + c0, mask, _mm512_sub_epi32(sums[r][p], comp));
      continue;
    }
    // fma(float(acc), sx * sw, b): rescale_int8_row's arithmetic, element by element
    const __m512 sw = _mm512_maskz_loadu_ps(mask, o.sw + c0);
    const __m512 b = o.b ? _mm512_maskz_loadu_ps(mask, o.b + c0) : _mm512_setzero_ps();
    for (int r = 0; r < R; ++r) {
      // (maskz: GCC 12 warns that the plain conversion's undefined source may be used)
      const __m512 f = _mm512_maskz_cvtepi32_ps(mask, _mm512_sub_epi32(sums[r][p], comp));
      const __m512 s = _mm512_mul_ps(_mm512_set1_ps(o.sx[m + r]), sw);
      _mm512_mask_storeu_ps(o.y + (m + r) * o.ldy + c0, mask, _mm512_fmadd_ps(f, s, b));
    }
  }
}
#undef BERTCC_ROW512

template <class Dot>
void tile512(int64_t R, const uint8_t* a, int64_t lda, const Int8Panels& w, int64_t g, const Out& o, int64_t m) {
  with_rows<8>(R, [&]<int Rows>() { micro512<Rows, Dot>(a, lda, w, g, o, m); });
}
#endif

// k's micro-tile for panels of activation shift `shift` (AVX2 multiplies 7-bit activations, shift
// 64, two k-quads at a time)
Kernel kernel_of(Int8Kernel k, int32_t shift) {
  switch (k) {
#if defined(__x86_64__)
    case Int8Kernel::Avx512Vnni:
      return {8, kGroup, tile512<DotVnni>};
    case Int8Kernel::Avx512Bw:
      return {8, kGroup, tile512<DotBw>};
    case Int8Kernel::AvxVnni:
      return {6, 1, ymm_tile<6, DotAvxVnni>};
    case Int8Kernel::Avx2:
      return shift == 64 ? Kernel{3, 1, pairs_tile} : Kernel{4, 1, ymm_tile<4, DotAvx2>};
#endif
    default:
      return {4, 1, portable_tile};
  }
}

// Rows [0, R) of xq shifted to u8 (a + shift: 128, i.e. a ^ 0x80, or 64), each padded with zeros to
// whole k-quads (lda bytes; zero weights there).
void shift_rows(const int8_t* xq, int64_t R, int64_t K, int64_t lda, uint8_t* u, int32_t shift) {
  const uint8_t by = static_cast<uint8_t>(shift);
  for (int64_t r = 0; r < R; ++r) {
    const int8_t* src = xq + r * K;
    uint8_t* dst = u + r * lda;
    for (int64_t k = 0; k < K; ++k) dst[k] = static_cast<uint8_t>(static_cast<uint8_t>(src[k]) + by);
    for (int64_t k = K; k < lda; ++k) dst[k] = 0;
  }
}

// Rows [0, R) x every column, one panel group after another (each group's weights stay in cache
// over the rows).
void block(const Kernel& kn, const uint8_t* u, int64_t lda, const Int8Panels& w, int64_t R, const Out& o) {
  const int64_t groups = (panels_of(w.N) + kn.group - 1) / kn.group;
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t m = 0; m < R; m += kn.rows) kn.tile(std::min(kn.rows, R - m), u + m * lda, lda, w, g, o, m);
}

// The driver of every own-kernel call: xq [M, K] against w into o (y or acc), then, for fp32 output,
// f(m, row) on each row.
//  - Many rows (at least 192 a thread): blocks of up to 48 rows, each task's rows shifted, computed
//    over every column and handed to f while in cache; y null: a block buffer of the thread's.
//  - Fewer: every row shifted once, the columns split between the threads (each weight read once),
//    then f over the rows; y null: one buffer of M rows. (bert-base int8 at 2 threads on an AMD
//    EPYC with AVX-512: the row blocks win at 512 and 1,024 rows, 89 against 95 and 171 against
//    188 ms a batch; the split columns at 256, 45 against 47.)
void run(const int8_t* xq, const Int8Panels& w, const Out& o0, int64_t M, const Int8RowFn* f, Int8Kernel k) {
  const Kernel kn = kernel_of(k, w.shift);
  const int64_t N = w.N, K = w.K, lda = w.Kq * 4;
  const int T = omp_in_parallel() ? 1 : omp_get_max_threads();
  const bool par = T > 1 && M * N * K >= (int64_t{1} << 16);
  if (M >= 192 * T) {
    // Tasks of 48 rows (a multiple of every micro-tile's rows; at least 4 a thread) in whole rounds
    // of T, then the rows left in tasks of 24, so that the threads finish together (at 1,024 rows and
    // 2 threads a last 48-row task alone kept the other thread idle for about a sixteenth of the
    // call). One thread has nothing to balance: its rows left stay one task (each task reads all
    // the weights).
    const int64_t rows = 48, tail = T > 1 ? 24 : rows;
    const int64_t full = M / (rows * T) * T, rest = M - full * rows;
    const int64_t tasks = full + (rest + tail - 1) / tail;
#pragma omp parallel if (par)
    {
      thread_local std::vector<uint8_t> ub;
      thread_local std::vector<float> yb;
      uint8_t* u = grow(ub, rows * lda);
      float* yblock = !o0.y && !o0.acc ? grow(yb, rows * N) : nullptr;
#pragma omp for schedule(dynamic, 1)
      for (int64_t t = 0; t < tasks; ++t) {
        const int64_t m0 = t < full ? t * rows : full * rows + (t - full) * tail;
        const int64_t R = std::min(t < full ? rows : tail, M - m0);
        shift_rows(xq + m0 * K, R, K, lda, u, w.shift);
        Out o = o0;
        o.sx = o0.sx ? o0.sx + m0 : nullptr;
        if (o0.acc) {
          o.acc = o0.acc + m0 * o0.ldacc;
        } else {
          o.y = o0.y ? o0.y + m0 * o0.ldy : yblock;
          o.ldy = o0.y ? o0.ldy : N;
        }
        block(kn, u, lda, w, R, o);
        if (f)
          for (int64_t r = 0; r < R; ++r) (*f)(m0 + r, o.y + r * o.ldy);
      }
    }
    return;
  }
  thread_local std::vector<uint8_t> ub;
  thread_local std::vector<float> yb;
  uint8_t* u = grow(ub, M * lda);
  shift_rows(xq, M, K, lda, u, w.shift);
  Out o = o0;
  if (!o0.y && !o0.acc) {
    o.y = grow(yb, M * N);
    o.ldy = N;
  }
  const int64_t groups = (panels_of(N) + kn.group - 1) / kn.group;
  // static: each thread's columns in one run, its weights one stream (a panel at a time for each
  // thread in turn cost 9 % of a batch of one 32-token sequence on the AVX2 kernel)
#pragma omp parallel for schedule(static) if (par && groups > 1)
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t m = 0; m < M; m += kn.rows) kn.tile(std::min(kn.rows, M - m), u + m * lda, lda, w, g, o, m);
  if (f) {
#pragma omp parallel for schedule(static) if (par && M > 1)
    for (int64_t m = 0; m < M; ++m) (*f)(m, o.y + m * o.ldy);
  }
}

// Which kernels this CPU runs. oneDNN's ISA is its dispatch, which ONEDNN_MAX_CPU_ISA may hold
// below the CPU's: bertcc's choice follows it, so that ONEDNN_MAX_CPU_ISA=AVX2 (AVX2_VNNI,
// AVX512_CORE) runs int8 as an AVX2-only CPU (one with AVX-VNNI only, AVX-512 without VNNI) would.
#if defined(__x86_64__)
bool onednn_isa_in(std::initializer_list<std::string_view> isas) {
  const std::string isa = cpu_report().onednn_isa;
  return std::find(isas.begin(), isas.end(), isa) != isas.end();
}

bool has_avx2() {
  static const bool ok =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
      onednn_isa_in({"avx2", "avx2_vnni", "avx512_core", "avx512_core_vnni", "avx512_core_bf16", "avx512_core_amx"});
  return ok;
}

bool has_avx512bw() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                         onednn_isa_in({"avx512_core", "avx512_core_vnni", "avx512_core_bf16", "avx512_core_amx"});
  return ok;
}

bool has_vnni() {
  static const bool ok = has_avx512bw() && __builtin_cpu_supports("avx512vnni") &&
                         onednn_isa_in({"avx512_core_vnni", "avx512_core_bf16", "avx512_core_amx"});
  return ok;
}

// AVX-VNNI (cpu_report's CPUID bit; the ymm state the OS saves is has_avx2's check).
// ONEDNN_MAX_CPU_ISA=AVX2_VNNI emulates an AVX-VNNI-only CPU on an AVX-512 CPU that has AVX-VNNI
// too, as AMD's Zen 5 does.
bool has_avxvnni() {
  static const bool ok = has_avx2() && cpu_report().avx_vnni &&
                         onednn_isa_in({"avx2_vnni", "avx512_core_vnni", "avx512_core_bf16", "avx512_core_amx"});
  return ok;
}
#else
bool has_avx2() { return false; }
bool has_avx512bw() { return false; }
bool has_vnni() { return false; }
bool has_avxvnni() { return false; }
#endif

}  // namespace

void rescale_int8_row(float* y, const int32_t* acc, float sm, const float* sw, const float* b, int64_t N) {
  if (b) {
    for (int64_t n = 0; n < N; ++n) y[n] = std::fma(static_cast<float>(acc[n]), sm * sw[n], b[n]);
  } else {
    for (int64_t n = 0; n < N; ++n) y[n] = std::fma(static_cast<float>(acc[n]), sm * sw[n], 0.0f);
  }
}

bool int8_kernel_available(Int8Kernel k) {
  switch (k) {
    case Int8Kernel::Avx512Vnni:
      return has_vnni();
    case Int8Kernel::AvxVnni:
      return has_avxvnni();
    case Int8Kernel::Avx512Bw:
      return has_avx512bw();
    case Int8Kernel::Avx2:
      return has_avx2();
    default:
      return true;
  }
}

Int8Kernel int8_own_kernel() {
  return has_vnni()       ? Int8Kernel::Avx512Vnni
         : has_avxvnni()  ? Int8Kernel::AvxVnni
         : has_avx512bw() ? Int8Kernel::Avx512Bw
         : has_avx2()     ? Int8Kernel::Avx2
                          : Int8Kernel::Portable;
}

bool int8_own_kernel_preferred() { return has_vnni() && cpu_report().onednn_isa != "avx512_core_amx"; }

std::shared_ptr<const Int8Panels> pack_int8_panels(const int8_t* q, int64_t N, int64_t K, int act_max) {
  BERTCC_CHECK(N > 0 && K > 0, "pack_int8_panels: empty weight [", N, ", ", K, "]");
  BERTCC_CHECK(act_max == kInt8ActivationMax || act_max == kInt8ActivationMax7,
               "pack_int8_panels: activations bounded by ", act_max, " (", kInt8ActivationMax, " or ",
               kInt8ActivationMax7, ")");
  auto p = std::make_shared<Int8Panels>();
  // 7-bit activations: shift 64, and k-quads padded to an even count (the AVX2 kernel takes two a step)
  size_int8_panels(*p, N, act_max == kInt8ActivationMax7 ? (K + 7) / 8 * 8 : K);
  p->K = K;
  p->shift = act_max == kInt8ActivationMax7 ? 64 : 128;
  for (int64_t n = 0; n < N; ++n) {
    int8_t* dst = p->data.data() + int8_panel_index(*p, n, 0);
    int32_t sum = 0;
    for (int64_t k = 0; k < K; ++k) {
      const int8_t v = q[n * K + k];
      BERTCC_CHECK(v >= -kInt8WeightMax && v <= kInt8WeightMax, "pack_int8_panels: weight ", int{v}, " outside [-",
                   kInt8WeightMax, ", ", kInt8WeightMax, "] (its 16-bit pair sums could saturate)");
      dst[(k / 4) * 64 + k % 4] = v;
      sum += v;
    }
    p->comp[static_cast<size_t>(n)] = p->shift * sum;
  }
  return p;
}

void gemm_int8_panels(const int8_t* a, const Int8Panels& w, int32_t* acc, int64_t M, Int8Kernel k) {
  BERTCC_CHECK(M > 0, "gemm_int8_panels: no rows");
  BERTCC_CHECK(int8_kernel_available(k), "gemm_int8_panels: this CPU has not the kernel asked for");
  run(a, w, Out{nullptr, 0, acc, w.N, nullptr, nullptr, nullptr}, M, nullptr, k);
}

void linear_int8_panels(float* y, const int8_t* xq, const float* sx, const Int8Panels& w, const float* sw,
                        const float* b, int64_t M, const Int8RowFn* f, Int8Kernel k) {
  BERTCC_CHECK(M > 0, "linear_int8_panels: no rows");
  BERTCC_CHECK(y || f, "linear_int8_panels: neither outputs nor a row epilogue");
  BERTCC_CHECK(int8_kernel_available(k), "linear_int8_panels: this CPU has not the kernel asked for");
  run(xq, w, Out{y, w.N, nullptr, 0, sx, sw, b}, M, f, k);
}

}  // namespace bertcc::kernels
