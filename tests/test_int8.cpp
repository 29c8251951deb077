// --precision int8: the int8 GEMM against exact integer arithmetic, the quantization's round trip,
// the int8 linear layer against a plain reference (bit-equal), and the int8 encoder: independent
// of the batch, and close to fp32. ctest also runs these with oneDNN limited to AVX2
// (ONEDNN_MAX_CPU_ISA=AVX2: no VNNI, the saturating vpmaddubsw path). And --precision auto's choice.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "bertcc/bert.h"
#include "bertcc/error.h"
#include "bertcc/runtime.h"
#include "kernels/gemm.h"
#include "kernels/gemm_int8.h"
#include "kernels/kernels.h"
#include "kernels/vecmath.h"
#include "test_util.h"

using namespace bertcc;
using namespace bertcc::kernels;

namespace {

std::vector<int8_t> random_s8(size_t n, int lim, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_int_distribution<int> d(-lim, lim);
  std::vector<int8_t> v(n);
  for (auto& x : v) x = static_cast<int8_t>(d(g));
  return v;
}

std::vector<int32_t> exact_products(const std::vector<int8_t>& a, const std::vector<int8_t>& b, int64_t M, int64_t N,
                                    int64_t K) {
  std::vector<int32_t> c(static_cast<size_t>(M * N));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      int64_t s = 0;
      for (int64_t k = 0; k < K; ++k) s += int64_t{a[m * K + k]} * b[n * K + k];
      c[m * N + n] = static_cast<int32_t>(s);
    }
  return c;
}

// bertcc's own int8 kernels that this CPU runs (the portable loops everywhere; AVX2, AVX-VNNI,
// AVX512-BW and AVX512-VNNI where it has them)
std::vector<Int8Kernel> own_kernels_here() {
  std::vector<Int8Kernel> ks;
  for (Int8Kernel k :
       {Int8Kernel::Portable, Int8Kernel::Avx2, Int8Kernel::AvxVnni, Int8Kernel::Avx512Bw, Int8Kernel::Avx512Vnni})
    if (int8_kernel_available(k)) ks.push_back(k);
  return ks;
}
const char* name_of(Int8Kernel k) {
  return k == Int8Kernel::Avx512Vnni ? "own kernel, AVX512-VNNI"
         : k == Int8Kernel::AvxVnni  ? "own kernel, AVX-VNNI"
         : k == Int8Kernel::Avx512Bw ? "own kernel, AVX512-BW"
         : k == Int8Kernel::Avx2     ? "own kernel, AVX2"
                                     : "own kernel, portable";
}

// bertcc's own int8 kernels (gemm_int8_panels) on a [M, K] and b [N, K]: each that this CPU has
// gives `want`, at 1 and 2 threads (the driver's row blocks need 192 rows a thread: both of its
// paths whatever the machine's core count); and linear_int8_panels rescales those integers with
// rescale_int8_row's bits, into outputs, through a row epilogue (once for each row) and both.
// act_max: the activations' bound the panels are laid out for (kInt8ActivationMax7: shift 64, an
// even k-quad count, the AVX2 kernel two k-quads a step).
void expect_own_kernel_gives(const std::vector<int8_t>& a, const std::vector<int8_t>& b, int64_t M, int64_t N,
                             int64_t K, const std::vector<int32_t>& want, int act_max = kInt8ActivationMax) {
  const auto panels = pack_int8_panels(b.data(), N, K, act_max);
  std::vector<int32_t> c(static_cast<size_t>(M * N));
  std::vector<float> sx(static_cast<size_t>(M)), sw(static_cast<size_t>(N)), bias(static_cast<size_t>(N));
  for (int64_t m = 0; m < M; ++m) sx[m] = 0.001f * static_cast<float>(m + 1);
  for (int64_t n = 0; n < N; ++n)
    sw[n] = 0.01f / static_cast<float>(n + 3), bias[n] = 0.1f * static_cast<float>(n % 7) - 0.3f;
  std::vector<float> want_y(static_cast<size_t>(M * N)), want_y0(want_y.size());
  for (int64_t m = 0; m < M; ++m) {
    rescale_int8_row(want_y.data() + m * N, want.data() + m * N, sx[m], sw.data(), bias.data(), N);
    rescale_int8_row(want_y0.data() + m * N, want.data() + m * N, sx[m], sw.data(), nullptr, N);
  }
  const int before = omp_get_max_threads();
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    for (Int8Kernel k : own_kernels_here()) {
      SCOPED_TRACE(std::string(name_of(k)) + ", " + std::to_string(threads) + " threads");
      std::fill(c.begin(), c.end(), -1);
      gemm_int8_panels(a.data(), *panels, c.data(), M, k);
      EXPECT_EQ(c, want);
      std::vector<float> y(static_cast<size_t>(M * N), -1.0f), rows(y.size(), -1.0f);
      linear_int8_panels(y.data(), a.data(), sx.data(), *panels, sw.data(), bias.data(), M, nullptr, k);
      EXPECT_EQ(y, want_y);
      std::vector<std::atomic<int>> calls(static_cast<size_t>(M));
      const Int8RowFn copy = [&](int64_t m, float* row) {
        std::copy(row, row + N, rows.begin() + m * N);
        ++calls[static_cast<size_t>(m)];
      };
      linear_int8_panels(nullptr, a.data(), sx.data(), *panels, sw.data(), nullptr, M, &copy, k);
      EXPECT_EQ(rows, want_y0);
      std::fill(y.begin(), y.end(), -1.0f);
      linear_int8_panels(y.data(), a.data(), sx.data(), *panels, sw.data(), bias.data(), M, &copy, k);
      EXPECT_EQ(y, want_y);
      EXPECT_EQ(rows, want_y);  // the epilogue saw the outputs in y
      for (int64_t m = 0; m < M; ++m) ASSERT_EQ(calls[static_cast<size_t>(m)], 2) << "row " << m;
    }
  }
  omp_set_num_threads(before);
}

}  // namespace

TEST(Int8, GemmIsExactIntegerArithmetic) {
  for (auto [M, N, K] : {std::array<int64_t, 3>{1, 1, 1}, {3, 5, 7}, {17, 48, 64}, {64, 33, 300}, {130, 96, 768}}) {
    SCOPED_TRACE(std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K));
    const auto a = random_s8(static_cast<size_t>(M * K), kInt8ActivationMax, 1);
    const auto b = random_s8(static_cast<size_t>(N * K), kInt8WeightMax, 2);
    std::vector<int32_t> c(static_cast<size_t>(M * N));
    gemm_s8s8s32(a.data(), b.data(), c.data(), M, N, K);
    EXPECT_EQ(c, exact_products(a, b, M, N, K));
  }
}

TEST(Int8, GemmDoesNotSaturateAtTheBounds) {
  // Every pair of products at the largest magnitude the bounds allow, both signs: where a CPU
  // without VNNI adds pairs of u8 x s8 products in 16 bits (vpmaddubsw), full-range s8 weights
  // would saturate these sums; the 7-bit weights must not, in oneDNN's kernels nor in bertcc's own
  // (gemm_int8_panels: each kernel this CPU has, the portable loops included).
  const int64_t M = 8, N = 16, K = 256;
  std::vector<int8_t> a(static_cast<size_t>(M * K)), b(static_cast<size_t>(N * K));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) a[m * K + k] = static_cast<int8_t>(((m + k / 2) % 2 ? -1 : 1) * kInt8ActivationMax);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) b[n * K + k] = static_cast<int8_t>(((n / 2 + k / 4) % 2 ? -1 : 1) * kInt8WeightMax);
  const auto want = exact_products(a, b, M, N, K);
  std::vector<int32_t> c(static_cast<size_t>(M * N));
  gemm_s8s8s32(a.data(), b.data(), c.data(), M, N, K);
  EXPECT_EQ(c, want);
  expect_own_kernel_gives(a, b, M, N, K, want);
  // 7-bit activations: the AVX2 kernel adds 4 products in 16 bits (two k-quads' pair sums), each
  // at most 127 x 63 from activations shifted by 64. Runs of 8 k of one sign in both operands, so
  // that all 4 reach the bound together (+63 -> 127 x +-63), and rows of -63 (1 x +-63)
  const int64_t K7 = 520;  // an odd k-quad count (130), padded to even in the panels
  std::vector<int8_t> a7(static_cast<size_t>(M * K7)), b7(static_cast<size_t>(N * K7));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K7; ++k)
      a7[m * K7 + k] =
          static_cast<int8_t>((m % 3 == 2 && k / 8 % 2 ? -1 : 1) * (m % 4 == 3 ? -1 : 1) * kInt8ActivationMax7);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K7; ++k)
      b7[n * K7 + k] = static_cast<int8_t>(((n / 2 + k / 8) % 2 ? -1 : 1) * kInt8WeightMax);
  const auto want7 = exact_products(a7, b7, M, N, K7);
  expect_own_kernel_gives(a7, b7, M, N, K7, want7, kInt8ActivationMax7);
}

TEST(Int8, OwnKernelGivesTheSameIntegers) {
  // bertcc's own int8 kernels (gemm_int8_panels and linear_int8_panels: what AVX512-VNNI CPUs
  // without AMX and CPUs without VNNI run): each this CPU has against exact integer arithmetic and
  // oneDNN's matmul, over row, column and k-quad tails, the VNNI kernel's 48-column groups and
  // 8-row tiles, its few-rows path (columns split) and many-rows path (row blocks: 192 rows
  // a thread and more, then the tail's smaller tasks), and the saturation bounds (GemmDoesNotSaturateAtTheBounds)
  for (auto [M, N, K] : {std::array<int64_t, 3>{1, 1, 1},
                         {3, 5, 7},
                         {4, 16, 4},
                         {5, 17, 5},
                         {37, 40, 300},
                         {130, 96, 768},
                         {70, 129, 3},
                         {9, 49, 64},
                         {203, 50, 36},
                         {790, 97, 20},
                         {450, 33, 20},   // row blocks then three tail tasks of 24, 24, 18 rows at 2 threads
                         {29, 20, 3000},  // deep K (the feed-forward's 3,072), few rows and many
                         {400, 17, 2052}}) {
    SCOPED_TRACE(std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K));
    for (int act_max : {kInt8ActivationMax, kInt8ActivationMax7}) {
      SCOPED_TRACE("activations in [-" + std::to_string(act_max) + ", " + std::to_string(act_max) + "]");
      const auto a = random_s8(static_cast<size_t>(M * K), act_max, 11);
      const auto b = random_s8(static_cast<size_t>(N * K), kInt8WeightMax, 12);
      const auto want = exact_products(a, b, M, N, K);
      std::vector<int32_t> c(static_cast<size_t>(M * N));
      gemm_s8s8s32(a.data(), b.data(), c.data(), M, N, K);
      ASSERT_EQ(c, want);
      expect_own_kernel_gives(a, b, M, N, K, want, act_max);
    }
  }
  // 8-bit weights could saturate the pair sums: refused when laid out
  auto b = random_s8(16 * 8, kInt8WeightMax, 13);
  b[5] = 64;
  EXPECT_THROW(pack_int8_panels(b.data(), 16, 8), Error);
  b[5] = 0;
  EXPECT_THROW(pack_int8_panels(b.data(), 16, 8, 100), Error);  // activations' bound neither 127 nor 63
}

TEST(Int8, ActivationBitsFollowTheCpuReport) {
  // --int8-activation-bits auto: 7 where bertcc's int8 kernel is its AVX2 one (oneDNN ISA avx2: no
  // VNNI, no AVX-512), 8 elsewhere; 7 or 8 as given
  CpuReport avx2, zen4, adl, skx, spr;
  avx2.onednn_isa = "avx2";
  zen4.onednn_isa = "avx512_core_bf16";
  adl.onednn_isa = "avx2_vnni";
  skx.onednn_isa = "avx512_core";
  spr.onednn_isa = "avx512_core_amx";
  EXPECT_EQ(int8_activation_bits(0, avx2), 7);
  for (const CpuReport& c : {zen4, adl, skx, spr}) EXPECT_EQ(int8_activation_bits(0, c), 8) << c.onednn_isa;
  for (const CpuReport& c : {avx2, zen4}) {
    EXPECT_EQ(int8_activation_bits(8, c), 8);
    EXPECT_EQ(int8_activation_bits(7, c), 7);
  }
  EXPECT_THROW(int8_activation_bits(6, avx2), Error);
  EXPECT_EQ(int8_activation_max(7), kInt8ActivationMax7);
  EXPECT_EQ(int8_activation_max(8), kInt8ActivationMax);
}

TEST(Int8, TheStartUpLineNamesTheKernelThatRuns) {
  // int8_kernel_name (from the CPU report) against what pack_int8_weight and the driver choose on
  // this CPU, under whatever ONEDNN_MAX_CPU_ISA holds: the ctests unit_int8_avx2, _avx2_vnni and
  // _avx512_core each check a different choice on a CPU that has the features
  const CpuReport cpu = cpu_report();
  const std::string name = int8_kernel_name(cpu);
  const Int8Kernel k = int8_own_kernel();
  if (cpu.onednn_isa == "avx512_core_amx") {
    EXPECT_EQ(name, "oneDNN on AMX-INT8");
    EXPECT_FALSE(int8_own_kernel_preferred());
    return;
  }
  const char* want = k == Int8Kernel::Avx512Vnni ? "bertcc's AVX512-VNNI int8 kernel"
                     : k == Int8Kernel::AvxVnni  ? "bertcc's AVX-VNNI int8 kernel"
                     : k == Int8Kernel::Avx512Bw ? "no VNNI: bertcc's AVX-512 int8 kernel"
                     : k == Int8Kernel::Avx2     ? "no VNNI: bertcc's AVX2 int8 kernel"
                                                 : "no VNNI nor AVX2: oneDNN's gemm";
  EXPECT_EQ(name, want) << "oneDNN ISA " << cpu.onednn_isa;
  // and the layers go where the line says: the own kernel's panels, or oneDNN's gemm on q
  Int8Weight w = quantize_weight_int8(bertcc::testing::randn(16 * 8, 41).data(), 16, 8);
  pack_int8_weight(w);
  EXPECT_EQ(w.panels != nullptr, k != Int8Kernel::Portable);
}

TEST(Int8, QuantizationRoundTrip) {
  const int64_t M = 5, K = 97;
  std::vector<float> x = bertcc::testing::randn(static_cast<size_t>(M * K), 3, 2.0f);
  for (int64_t k = 0; k < K; ++k) x[static_cast<size_t>(3 * K + k)] = 0.0f;  // a row of zeros
  x[static_cast<size_t>(4 * K + 5)] = 1e6f;                                  // an outlier
  for (int qmax : {kInt8WeightMax, kInt8ActivationMax}) {
    std::vector<int8_t> q(static_cast<size_t>(M * K));
    std::vector<float> s(static_cast<size_t>(M));
    quantize_rows_int8(x.data(), M, K, qmax, q.data(), s.data());
    EXPECT_EQ(s[3], 0.0f);
    for (int64_t m = 0; m < M; ++m) {
      float amax = 0;
      for (int64_t k = 0; k < K; ++k) amax = std::max(amax, std::fabs(x[m * K + k]));
      EXPECT_EQ(s[m], amax / static_cast<float>(qmax));
      int qabs = 0;
      for (int64_t k = 0; k < K; ++k) {
        const int v = q[m * K + k];
        ASSERT_LE(std::abs(v), qmax);
        qabs = std::max(qabs, std::abs(v));
        // half a step, and the float rounding of the step
        EXPECT_LE(std::fabs(v * s[m] - x[m * K + k]), 0.5f * s[m] * (1 + 1e-5f) + 1e-30f) << m << "," << k;
      }
      EXPECT_EQ(qabs, amax > 0 ? qmax : 0);  // the row's largest value maps to the bound
    }
  }
}

TEST(Int8, QuantizeRoundsHalfToEvenAndClampsAsNearbyint) {
  // int8_quantize's rounding (clamp, then add and subtract 1.5 * 2^23) against the rule as written:
  // nearbyint(x * inv) clamped to [-qmax, qmax], NaN to qmax; on ties (x.5), beyond the bound, at
  // the bounds of float, and through quantize_rows_int8's loops (a row of maximum qmax: inv 1, so its
  // values are the products themselves)
  const auto rule = [](float x, float inv, float lim) {
    const float r = std::nearbyint(x * inv);
    return static_cast<int>(r != r ? lim : std::max(-lim, std::min(lim, r)));
  };
  std::vector<float> xs;
  for (int k = -140; k <= 140; ++k)
    for (float f : {0.0f, 0.25f, 0.5f, 0.75f}) xs.push_back(static_cast<float>(k) + f);
  for (float x :
       {-0.0f, 1e-30f, -1e-30f, 4194304.5f, -8388607.0f, 3e38f, -3e38f, std::numeric_limits<float>::infinity(),
        -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()})
    xs.push_back(x);
  const std::vector<float> r = bertcc::testing::randn(2000, 17, 60.0f);
  xs.insert(xs.end(), r.begin(), r.end());
  for (int qmax : {kInt8ActivationMax7, kInt8WeightMax, kInt8ActivationMax}) {
    const float lim = static_cast<float>(qmax);
    for (float inv : {1.0f, 0.37f, 3.0f, std::numeric_limits<float>::max()})
      for (float x : xs) ASSERT_EQ(int8_quantize(x, inv, lim), rule(x, inv, lim)) << x << " x " << inv << ", " << qmax;
    // the row's loops: the ties of [-qmax, qmax] and a maximum of qmax (scale 1, inverse 1)
    std::vector<float> row;
    for (int k = -qmax; k < qmax; ++k) row.push_back(static_cast<float>(k) + 0.5f);
    row.push_back(lim);
    std::vector<int8_t> q(row.size());
    float scale = 0.0f;
    quantize_rows_int8(row.data(), 1, static_cast<int64_t>(row.size()), qmax, q.data(), &scale);
    ASSERT_EQ(scale, 1.0f);
    for (size_t i = 0; i < row.size(); ++i) EXPECT_EQ(q[i], rule(row[i], 1.0f, lim)) << row[i];
  }
}

TEST(Int8, EmbeddingsEqualTheFp32LookupOfTheDequantizedTable) {
  // --precision int8's word embeddings: each row 8-bit with its scale (quantize_embeddings_int8),
  // read back as q * scale; the embeddings' sums are embeddings_forward's on that dequantized
  // table, bit for bit, and each value within half a step of the fp32 one
  const int64_t V = 11, C = 37, B = 3, T = 6;
  std::vector<float> E = bertcc::testing::randn(static_cast<size_t>(V * C), 7, 0.05f);
  for (int64_t c = 0; c < C; ++c) E[static_cast<size_t>(2 * C + c)] = 0.0f;  // a row of zeros (padding)
  E[static_cast<size_t>(5 * C + 3)] = 3.0f;                                  // an outlier
  const std::vector<float> wpe = bertcc::testing::randn(static_cast<size_t>(T * C), 8, 0.05f);
  const std::vector<float> wtt = bertcc::testing::randn(static_cast<size_t>(2 * C), 9, 0.05f);
  const Int8Weight q = quantize_embeddings_int8(E.data(), V, C);
  ASSERT_EQ(q.q.size(), static_cast<size_t>(V * C));
  std::vector<float> deq(E.size());
  int top = 0;
  for (int64_t v = 0; v < V; ++v)
    for (int64_t c = 0; c < C; ++c) {
      const size_t i = static_cast<size_t>(v * C + c);
      top = std::max(top, std::abs(static_cast<int>(q.q[i])));
      deq[i] = static_cast<float>(q.q[i]) * q.scale[static_cast<size_t>(v)];
      EXPECT_LE(std::fabs(deq[i] - E[i]), 0.5f * q.scale[static_cast<size_t>(v)] * 1.0001f) << v << ", " << c;
    }
  EXPECT_EQ(top, kInt8EmbeddingMax);  // 8 bits, not the weights' 7
  EXPECT_EQ(q.scale[2], 0.0f);
  std::vector<int32_t> ids(static_cast<size_t>(B * T)), seg(ids.size());
  for (size_t n = 0; n < ids.size(); ++n) {
    ids[n] = static_cast<int32_t>((n * 7 + 2) % V);
    seg[n] = static_cast<int32_t>(n % T >= 3);
  }
  std::vector<float> want(static_cast<size_t>(B * T * C)), got(want.size());
  embeddings_forward(want.data(), ids.data(), seg.data(), deq.data(), wpe.data(), wtt.data(), B, T, C);
  embeddings_forward_int8(got.data(), ids.data(), seg.data(), q.q.data(), q.scale.data(), wpe.data(), wtt.data(), B, T,
                          C);
  EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)));
}

TEST(Int8, NonFiniteRowsGiveNaNOutputs) {
  const int64_t M = 3, N = 4, K = 8;
  std::vector<float> x = bertcc::testing::randn(static_cast<size_t>(M * K), 4);
  x[K + 2] = INFINITY;
  x[2 * K + 7] = NAN;
  const std::vector<float> W = bertcc::testing::randn(static_cast<size_t>(N * K), 5);
  const Int8Weight q = quantize_weight_int8(W.data(), N, K);
  std::vector<float> y(static_cast<size_t>(M * N));
  linear_forward_int8(y.data(), x.data(), q, nullptr, M);
  for (int64_t n = 0; n < N; ++n) {
    EXPECT_TRUE(std::isfinite(y[n]));
    EXPECT_TRUE(std::isnan(y[N + n]));
    EXPECT_TRUE(std::isnan(y[2 * N + n]));
  }
}

TEST(Int8, LinearEqualsQuantizedReferenceBitForBit) {
  // exact int32 sums, then the same float rescale: the oneDNN path and a plain loop agree in every bit
  const int64_t M = 37, N = 29, K = 200;
  const std::vector<float> x = bertcc::testing::randn(static_cast<size_t>(M * K), 6, 3.0f);
  const std::vector<float> W = bertcc::testing::randn(static_cast<size_t>(N * K), 7, 0.05f);
  const std::vector<float> bias = bertcc::testing::randn(static_cast<size_t>(N), 8);
  const Int8Weight q = quantize_weight_int8(W.data(), N, K);
  ASSERT_EQ(q.N, N);
  ASSERT_EQ(q.K, K);
  std::vector<float> y(static_cast<size_t>(M * N));
  linear_forward_int8(y.data(), x.data(), q, bias.data(), M);
  std::vector<int8_t> xq(static_cast<size_t>(M * K));
  std::vector<float> sx(static_cast<size_t>(M));
  quantize_rows_int8(x.data(), M, K, kInt8ActivationMax, xq.data(), sx.data());
  const std::vector<int32_t> acc = exact_products(xq, q.q, M, N, K);
  double worst = 0, largest = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      const float ref = std::fma(static_cast<float>(acc[m * N + n]), sx[m] * q.scale[n], bias[n]);
      ASSERT_EQ(y[m * N + n], ref) << m << "," << n;
      double exact = bias[n];
      for (int64_t k = 0; k < K; ++k) exact += double{x[m * K + k]} * W[n * K + k];
      worst = std::max(worst, std::fabs(exact - y[m * N + n]));
      largest = std::max(largest, std::fabs(exact));
    }
  // and near the exact product: 7-bit weights and 8-bit activations over K = 200 (seen: 1.5 %)
  EXPECT_LT(worst, 0.03 * largest);
  // one row alone: the same bits as in the batch
  std::vector<float> y1(static_cast<size_t>(N));
  linear_forward_int8(y1.data(), x.data() + 11 * K, q, bias.data(), 1);
  EXPECT_EQ(y1, std::vector<float>(y.begin() + 11 * N, y.begin() + 12 * N));
}

TEST(Int8, PackedWeightsGiveTheSameBits) {
  // pack_int8_weight reorders q into oneDNN's blocked layout where this CPU's int8 matmul prefers it
  // (VNNI, AMX; not AVX2's gemm, which keeps q): the products are exact integers either way, so the
  // layers' outputs, plain and fused, keep every bit, at every row count
  const int64_t C = 64, I = 200;
  const std::vector<float> W1 = bertcc::testing::randn(static_cast<size_t>(I * C), 31, 0.2f);
  const std::vector<float> W2 = bertcc::testing::randn(static_cast<size_t>(C * I), 32, 0.05f);
  const std::vector<float> b1 = bertcc::testing::randn(static_cast<size_t>(I), 33),
                           b2 = bertcc::testing::randn(static_cast<size_t>(C), 34),
                           g = bertcc::testing::randn(static_cast<size_t>(C), 35),
                           beta = bertcc::testing::randn(static_cast<size_t>(C), 36);
  const Int8Weight q1 = quantize_weight_int8(W1.data(), I, C), q2 = quantize_weight_int8(W2.data(), C, I);
  // the CPU's choice, then bertcc's own kernel and oneDNN's forced, each against q1/q2 unpacked
  for (const RowGemm mode : {RowGemm::Auto, RowGemm::Always, RowGemm::Never}) {
    SCOPED_TRACE(mode == RowGemm::Always ? "own kernel" : mode == RowGemm::Never ? "oneDNN" : "this CPU's choice");
    set_row_gemm(mode);
    Int8Weight p1 = q1, p2 = q2;
    const bool packed = pack_int8_weight(p1);
    EXPECT_EQ(pack_int8_weight(p2), packed);
    set_row_gemm(RowGemm::Auto);
    EXPECT_EQ(packed, p1.packed != nullptr || p1.panels != nullptr);
    EXPECT_EQ(packed, p1.q.empty());
    if (mode == RowGemm::Always) {
      EXPECT_TRUE(p1.panels != nullptr);
    }
    if (mode == RowGemm::Never) {
      EXPECT_TRUE(p1.panels == nullptr);
    }
    for (const int64_t M : {1, 5, 130}) {
      SCOPED_TRACE("rows " + std::to_string(M));
      const std::vector<float> x = bertcc::testing::randn(static_cast<size_t>(M * C), 37 + static_cast<uint32_t>(M));
      std::vector<float> y(static_cast<size_t>(M * I)), yp(y.size());
      linear_forward_int8(y.data(), x.data(), q1, b1.data(), M);
      linear_forward_int8(yp.data(), x.data(), p1, b1.data(), M);
      EXPECT_EQ(yp, y);
      const size_t MC = static_cast<size_t>(M * C), m1 = static_cast<size_t>(M);
      std::vector<float> out(MC), mean(m1), rstd(m1), outp(MC), meanp(m1), rstdp(m1);
      ffn_layernorm_int8(
          Int8LayerNorm{out.data(), nullptr, mean.data(), rstd.data(), x.data(), g.data(), beta.data(), 1e-12f},
          x.data(), q1, b1.data(), q2, b2.data(), M, Activation::GeluErf);
      ffn_layernorm_int8(
          Int8LayerNorm{outp.data(), nullptr, meanp.data(), rstdp.data(), x.data(), g.data(), beta.data(), 1e-12f},
          x.data(), p1, b1.data(), p2, b2.data(), M, Activation::GeluErf);
      EXPECT_EQ(outp, out);
      EXPECT_EQ(meanp, mean);
      EXPECT_EQ(rstdp, rstd);
    }
  }
}

TEST(Int8, FusedKernelsEqualTheComposedLayers) {
  // ffn_layernorm_int8 (one pass per row: rescale, GELU, quantize; then rescale, residual, LayerNorm)
  // against linear_forward_int8, gelu_forward, linear_forward_int8 and residual_layernorm_forward in
  // turn, and linear_residual_layernorm_int8 against the first and last of these: every bit, for both
  // GELUs, with and without the kept sum, a row count that is no multiple of a vector and an
  // intermediate size that is no multiple of the GELU's chunk
  const int64_t M = 19, C = 40, I = 4100;
  const float eps = 1e-12f;
  const std::vector<float> x = bertcc::testing::randn(static_cast<size_t>(M * C), 21, 2.0f);
  const std::vector<float> W1 = bertcc::testing::randn(static_cast<size_t>(I * C), 22, 0.2f);
  const std::vector<float> b1 = bertcc::testing::randn(static_cast<size_t>(I), 23, 0.5f);
  const std::vector<float> W2 = bertcc::testing::randn(static_cast<size_t>(C * I), 24, 0.02f);
  const std::vector<float> b2 = bertcc::testing::randn(static_cast<size_t>(C), 25);
  const std::vector<float> g = bertcc::testing::randn(static_cast<size_t>(C), 26),
                           beta = bertcc::testing::randn(static_cast<size_t>(C), 27);
  const Int8Weight q1 = quantize_weight_int8(W1.data(), I, C), q2 = quantize_weight_int8(W2.data(), C, I);
  const Int8Weight q3 = quantize_weight_int8(W2.data(), C, C);  // a C x C layer (the attention output's shape)
  const size_t MC = static_cast<size_t>(M * C), m1 = static_cast<size_t>(M);
  struct Out {
    std::vector<float> out, sum, mean, rstd;
  };
  auto ln_of = [&](Out& o, const float* residual, bool keep_sum) {
    o = Out{std::vector<float>(MC), std::vector<float>(keep_sum ? MC : 0), std::vector<float>(m1),
            std::vector<float>(m1)};
    return Int8LayerNorm{
        o.out.data(), keep_sum ? o.sum.data() : nullptr, o.mean.data(), o.rstd.data(), residual, g.data(), beta.data(),
        eps};
  };
  auto same = [](const Out& a, const Out& b) {
    return a.out == b.out && a.sum == b.sum && a.mean == b.mean && a.rstd == b.rstd;
  };
  // with 8-bit activations on the weights as quantized (oneDNN's matmul), and with 7-bit ones on
  // bertcc's own kernel's panels (shift 64; on AVX2 two k-quads a step)
  for (const int act_max : {kInt8ActivationMax, kInt8ActivationMax7}) {
    SCOPED_TRACE("activations in [-" + std::to_string(act_max) + ", " + std::to_string(act_max) + "]");
    Int8Weight w1 = q1, w2 = q2, w3 = q3;
    if (act_max == kInt8ActivationMax7) {
      set_row_gemm(RowGemm::Always);
      for (Int8Weight* w : {&w1, &w2, &w3}) {
        w->act_max = act_max;
        pack_int8_weight(*w);
      }
      set_row_gemm(RowGemm::Auto);
    }
    for (const Activation act : {Activation::GeluErf, Activation::GeluTanh})
      for (const bool keep_sum : {true, false}) {
        std::vector<float> inter(static_cast<size_t>(M * I)), h(inter.size()), y(MC);
        linear_forward_int8(inter.data(), x.data(), w1, b1.data(), M);
        gelu_forward(h.data(), inter.data(), M * I, act);
        linear_forward_int8(y.data(), h.data(), w2, b2.data(), M);
        Out ref, fused;
        const Int8LayerNorm r = ln_of(ref, x.data(), keep_sum);
        residual_layernorm_forward(r.out, r.sum, r.mean, r.rstd, y.data(), x.data(), g.data(), beta.data(), M, C, eps);
        ffn_layernorm_int8(ln_of(fused, x.data(), keep_sum), x.data(), w1, b1.data(), w2, b2.data(), M, act);
        ASSERT_TRUE(same(fused, ref)) << (act == Activation::GeluErf ? "gelu" : "gelu_new") << " sum " << keep_sum;
        // one row alone: the same bits as in the batch
        Out one;
        one = Out{std::vector<float>(static_cast<size_t>(C)), {}, std::vector<float>(1), std::vector<float>(1)};
        ffn_layernorm_int8(Int8LayerNorm{one.out.data(), nullptr, one.mean.data(), one.rstd.data(), x.data() + 5 * C,
                                         g.data(), beta.data(), eps},
                           x.data() + 5 * C, w1, b1.data(), w2, b2.data(), 1, act);
        EXPECT_EQ(one.out, std::vector<float>(ref.out.begin() + 5 * C, ref.out.begin() + 6 * C));
        // the output layer and its LayerNorm
        const std::vector<float> res = bertcc::testing::randn(MC, 28);
        linear_forward_int8(y.data(), x.data(), w3, b2.data(), M);
        const Int8LayerNorm r3 = ln_of(ref, res.data(), keep_sum);
        residual_layernorm_forward(r3.out, r3.sum, r3.mean, r3.rstd, y.data(), res.data(), g.data(), beta.data(), M, C,
                                   eps);
        linear_residual_layernorm_int8(ln_of(fused, res.data(), keep_sum), x.data(), w3, b2.data(), M);
        ASSERT_TRUE(same(fused, ref)) << "output layer, sum " << keep_sum;
      }
  }
  // a second layer that does not take the first one's outputs is refused
  Out o;
  EXPECT_THROW(
      ffn_layernorm_int8(ln_of(o, x.data(), false), x.data(), q1, b1.data(), q1, b1.data(), M, Activation::GeluErf),
      Error);
}

// The int8 attention's definition (gemm_int8.h, attention_int8.cpp) in plain loops: sequence b's
// rows r0.. (n of them), the mask's row (null: none) for padded rows.
static void attention_int8_reference(float* out, const float* qkv, int64_t r0, int64_t n, const float* mask, int64_t C,
                                     int64_t NH) {
  const int64_t HS = C / NH;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  bool any = !mask;
  for (int64_t j = 0; j < n; ++j) any = any || mask[j] > -10000.0f;
  auto seen = [&](int64_t j) { return !mask || !any || mask[j] > -10000.0f; };
  for (int64_t h = 0; h < NH; ++h) {
    std::vector<int8_t> q8(static_cast<size_t>(n * HS)), k8(q8.size()), v8(q8.size());  // v8: [HS][n]
    std::vector<float> sq(static_cast<size_t>(n)), sk(sq.size()), sv(static_cast<size_t>(HS)), col(sq.size());
    for (int64_t i = 0; i < n; ++i) {
      const float* row = qkv + (r0 + i) * 3 * C + h * HS;
      quantize_rows_int8(row, 1, HS, kInt8ActivationMax, &q8[static_cast<size_t>(i * HS)], &sq[static_cast<size_t>(i)]);
      quantize_rows_int8(row + C, 1, HS, kInt8WeightMax, &k8[static_cast<size_t>(i * HS)], &sk[static_cast<size_t>(i)]);
    }
    for (int64_t c = 0; c < HS; ++c) {
      for (int64_t j = 0; j < n; ++j)
        col[static_cast<size_t>(j)] = seen(j) ? qkv[(r0 + j) * 3 * C + 2 * C + h * HS + c] : 0.0f;
      quantize_rows_int8(col.data(), 1, n, kInt8WeightMax, &v8[static_cast<size_t>(c * n)],
                         &sv[static_cast<size_t>(c)]);
    }
    const int32_t* table = attention_int8_exp_table();
    for (int64_t i = 0; i < n; ++i) {
      std::vector<float> S(static_cast<size_t>(n));
      std::vector<int32_t> u(S.size());
      float mx = -INFINITY;
      for (int64_t j = 0; j < n; ++j) {
        int32_t acc = 0;
        for (int64_t c = 0; c < HS; ++c)
          acc += int32_t{q8[static_cast<size_t>(i * HS + c)]} * k8[static_cast<size_t>(j * HS + c)];
        S[static_cast<size_t>(j)] =
            std::fma(static_cast<float>(acc), (sq[static_cast<size_t>(i)] * scale) * sk[static_cast<size_t>(j)], 0.0f) +
            (mask ? mask[j] : 0.0f);
        if (seen(j)) mx = std::max(mx, S[static_cast<size_t>(j)]);  // the keys seen's maximum
      }
      int32_t sum = 0;
      for (int64_t j = 0; j < n; ++j) {
        if (!seen(j)) continue;  // u = 0
        const float t = std::min((mx - S[static_cast<size_t>(j)]) * 128.0f, float{kAttentionExpTable - 1});
        u[static_cast<size_t>(j)] = table[static_cast<int>(std::nearbyint(t))];
        sum += u[static_cast<size_t>(j)];
      }
      for (int64_t c = 0; c < HS; ++c) {
        int32_t acc = 0;
        for (int64_t j = 0; j < n; ++j) acc += u[static_cast<size_t>(j)] * v8[static_cast<size_t>(c * n + j)];
        out[(r0 + i) * C + h * HS + c] =
            std::fma(static_cast<float>(acc), (1.0f / static_cast<float>(sum)) * sv[static_cast<size_t>(c)], 0.0f);
      }
    }
  }
}

TEST(Int8, AttentionExpTable) {
  // P's 8 bits: round(254 exp(-t / 128)), 254 at the maximum, decreasing, 0 from t = 798 (e < 1/508)
  const int32_t* t = attention_int8_exp_table();
  EXPECT_EQ(t[0], 254);
  EXPECT_EQ(t[128], 93);  // 254 / e = 93.44
  EXPECT_EQ(t[797], 1);
  EXPECT_EQ(t[798], 0);
  EXPECT_EQ(t[kAttentionExpTable - 1], 0);
  for (int i = 0; i < kAttentionExpTable; ++i)  // every entry against the formula, in long double
    ASSERT_EQ(t[i], std::lround(254.0L * std::exp(-static_cast<long double>(i) / 128.0L))) << "entry " << i;
  std::printf("the int8 attention %s the table's entries\n", attention_int8_exp_computed() ? "computes" : "reads");
}

TEST(Int8, AttentionEqualsItsDefinitionBitForBit) {
  // both products in int8 (the kernel of this CPU and ctest's ISA limit), packed and padded, at 1
  // and 2 threads: the same bits as the plain loops above; a right-padded batch as the packed one;
  // close to the fp32 attention
  // (head sizes 12, 20, 5 (a k-quad tail) and 64; a sequence of 200, past the 192 rows where the
  // kernels' row blocks start)
  for (const auto& [C, NH] : std::vector<std::pair<int64_t, int64_t>>{{24, 2}, {40, 2}, {15, 3}, {64, 1}}) {
    SCOPED_TRACE("C " + std::to_string(C) + ", heads " + std::to_string(NH));
    const std::vector<int64_t> len = {5, 17, 1, C == 64 ? 200 : 50};
    const int64_t B = 4, T = len.back();
    std::vector<int64_t> cu = {0};
    for (int64_t l : len) cu.push_back(cu.back() + l);
    const int64_t N = cu.back();
    std::mt19937 g(static_cast<uint32_t>(C));
    std::uniform_real_distribution<float> d(-2.0f, 2.0f);
    std::vector<float> qkv(static_cast<size_t>(N * 3 * C));
    for (float& x : qkv) x = d(g);
    std::vector<float> want(static_cast<size_t>(N * C));
    for (int64_t b = 0; b < B; ++b)
      attention_int8_reference(want.data(), qkv.data(), cu[static_cast<size_t>(b)], len[static_cast<size_t>(b)],
                               nullptr, C, NH);
    // the same rows padded to T, right-padded (pad rows random), and with a hole in sequence 1's mask
    std::vector<float> pqkv(static_cast<size_t>(B * T * 3 * C)), mask(static_cast<size_t>(B * T), -10000.0f);
    for (float& x : pqkv) x = d(g);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < len[static_cast<size_t>(b)]; ++t) {
        std::copy_n(qkv.begin() + (cu[static_cast<size_t>(b)] + t) * 3 * C, 3 * C, pqkv.begin() + (b * T + t) * 3 * C);
        mask[static_cast<size_t>(b * T + t)] = 0.0f;
      }
    pqkv[static_cast<size_t>((T - 1) * 3 * C + 2 * C)] = NAN;   // sequence 0's last padding row: v,
    pqkv[static_cast<size_t>((T - 1) * 3 * C + C)] = INFINITY;  // k (hidden: they change nothing)
    std::vector<float> holed = mask;
    holed[static_cast<size_t>(T + 3)] = -10000.0f;
    std::vector<float> want_holed(static_cast<size_t>(B * T * C));
    for (int64_t b = 0; b < B; ++b)
      attention_int8_reference(want_holed.data(), pqkv.data(), b * T, T, holed.data() + b * T, C, NH);
    const int threads = omp_get_max_threads();
    for (int t : {1, 2, -1}) {  // -1: 2 threads reading the table (where the kernel computes its entries)
      attention_int8_force_table(t < 0);
      omp_set_num_threads(t < 0 ? 2 : t);
      std::vector<float> got(static_cast<size_t>(N * C), -1.0f), pad(static_cast<size_t>(B * T * C), -1.0f);
      attention_int8_forward(got.data(), qkv.data(), cu.data(), nullptr, B, 0, C, NH);
      ASSERT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4)) << t << " threads, packed";
      attention_int8_forward(pad.data(), pqkv.data(), nullptr, mask.data(), B, T, C, NH);
      for (int64_t b = 0; b < B; ++b)
        ASSERT_EQ(0, std::memcmp(pad.data() + b * T * C, want.data() + cu[static_cast<size_t>(b)] * C,
                                 static_cast<size_t>(len[static_cast<size_t>(b)] * C) * 4))
            << t << " threads, right-padded sequence " << b << " against packed";
      attention_int8_forward(pad.data(), pqkv.data(), nullptr, holed.data(), B, T, C, NH);
      ASSERT_EQ(0, std::memcmp(pad.data(), want_holed.data(), pad.size() * 4)) << t << " threads, a mask with a hole";
    }
    attention_int8_force_table(false);
    omp_set_num_threads(threads);
    // a NaN in a v seen: its column of its head is NaN in its sequence, nothing else changes
    std::vector<float> nan_qkv = qkv, got(static_cast<size_t>(N * C));
    nan_qkv[static_cast<size_t>((cu[1] + 2) * 3 * C + 2 * C + 1)] = NAN;  // sequence 1, head 0, column 1
    attention_int8_forward(got.data(), nan_qkv.data(), cu.data(), nullptr, B, 0, C, NH);
    for (int64_t r = 0; r < N; ++r)
      for (int64_t c = 0; c < C; ++c) {
        const size_t at = static_cast<size_t>(r * C + c);
        if (r >= cu[1] && r < cu[2] && c == 1)
          ASSERT_TRUE(std::isnan(got[at])) << "row " << r;
        else
          ASSERT_EQ(got[at], want[at]) << "row " << r << ", column " << c;
      }
    // against fp32 (no dropout): 8-bit P and 7-bit k, v; outputs of size ~1
    std::vector<float> f32(static_cast<size_t>(N * C)),
        saved(static_cast<size_t>(attention_varlen_saved_size(cu.data(), B, C, NH, false, Precision::F32, false)));
    attention_varlen_forward(f32.data(), saved.data(), qkv.data(), cu.data(), B, C, NH, 0.0f, Rng{1, 0}, 0,
                             Precision::F32, nullptr, nullptr);
    double worst = 0;
    for (size_t i = 0; i < f32.size(); ++i) worst = std::max(worst, std::fabs(double{want[i]} - f32[i]));
    EXPECT_LT(worst, 0.05) << "largest |int8 - fp32| attention output";
    EXPECT_GT(worst, 0.0);
  }
}

TEST(Precision, AutoFollowsTheCpuReport) {
  // a pure function of the report: made-up CPUs, whatever this machine is
  CpuReport avx2;
  avx2.onednn_isa = "avx2";
  CpuReport zen4 = avx2;  // AVX512-BF16, no AMX
  zen4.avx512f = zen4.avx512_bf16 = true;
  zen4.onednn_isa = "avx512_core_bf16";
  CpuReport spr = zen4;  // AMX
  spr.amx_bf16 = true;
  spr.onednn_isa = "avx512_core_amx";
  CpuReport skx = avx2;  // AVX-512 without bf16
  skx.avx512f = true;
  skx.onednn_isa = "avx512_core_vnni";
  CpuReport capped = zen4;  // native bf16, oneDNN held to AVX2 (ONEDNN_MAX_CPU_ISA)
  capped.onednn_isa = "avx2";
  EXPECT_EQ(choose_precision("auto", avx2, false).prec, Precision::F32);
  EXPECT_NE(choose_precision("auto", avx2, false).why.find("fp32"), std::string::npos);
  EXPECT_NE(choose_precision("auto", avx2, false).why.find("neither AVX512-BF16 nor AMX-BF16"), std::string::npos);
  EXPECT_EQ(choose_precision("auto", skx, false).prec, Precision::F32);
  EXPECT_EQ(choose_precision("auto", capped, false).prec, Precision::F32);
  EXPECT_EQ(choose_precision("auto", zen4, false).prec, Precision::BF16);
  EXPECT_NE(choose_precision("auto", zen4, false).why.find("AVX512-BF16"), std::string::npos);
  EXPECT_EQ(choose_precision("auto", spr, false).prec, Precision::BF16);
  EXPECT_NE(choose_precision("auto", spr, false).why.find("AMX-BF16"), std::string::npos);
  EXPECT_EQ(choose_precision("auto", avx2, true).prec, Precision::BF16);  // a GPU keeps its default
  // a named precision is taken as given, without a line of its own
  for (const CpuReport& c : {avx2, zen4}) {
    EXPECT_EQ(choose_precision("bf16", c, false).prec, Precision::BF16);
    EXPECT_EQ(choose_precision("fp32", c, false).prec, Precision::F32);
    EXPECT_EQ(choose_precision("int8", c, false).prec, Precision::I8);
    EXPECT_TRUE(choose_precision("bf16", c, false).why.empty());
  }
  EXPECT_THROW(choose_precision("fp8", zen4, false), Error);
  // the int8 start-up line names the kernel: oneDNN on AMX, bertcc's own VNNI kernel on
  // AVX512-VNNI (its rescale fused), its AVX-VNNI, AVX-512 and AVX2 ones elsewhere (oneDNN 2.6's
  // gemm there repacks the weights every call)
  CpuReport avx512 = avx2, adl = avx2, old = avx2;  // AVX-512 without VNNI; AVX2-VNNI; neither
  avx512.onednn_isa = "avx512_core";
  adl.onednn_isa = "avx2_vnni";
  old.onednn_isa = "other";
  for (const CpuReport& c : {avx2, capped})
    EXPECT_EQ(int8_kernel_name(c), "no VNNI: bertcc's AVX2 int8 kernel") << c.onednn_isa;
  EXPECT_EQ(int8_kernel_name(avx512), "no VNNI: bertcc's AVX-512 int8 kernel");
  EXPECT_EQ(int8_kernel_name(adl), "bertcc's AVX-VNNI int8 kernel");
  EXPECT_EQ(int8_kernel_name(skx), "bertcc's AVX512-VNNI int8 kernel");
  EXPECT_EQ(int8_kernel_name(zen4), "bertcc's AVX512-VNNI int8 kernel");
  EXPECT_EQ(int8_kernel_name(spr), "oneDNN on AMX-INT8");
  EXPECT_EQ(int8_kernel_name(old), "no VNNI nor AVX2: oneDNN's gemm");
}
