// Every kernel against its double-precision reference, and every backward against finite
// differences of the reference, on odd sizes. Fused kernels against the composed ones.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <random>

#include "backend/backend.h"
#include "bertcc/dtype.h"
#include "bertcc/rng.h"
#include "bertcc/runtime.h"
#include "kernels/gemm.h"
#include "kernels/kernels.h"
#include "kernels/reference.h"
#include "test_util.h"

using namespace bertcc;
using namespace bertcc::testing;

// ------------------------------------------------------------------------------------ GEMM
struct GemmCase {
  bool ta, tb, bias, acc;
  float alpha;
  Precision prec;
};

class GemmTest : public ::testing::TestWithParam<GemmCase> {};

TEST_P(GemmTest, MatchesReference) {
  const GemmCase c = GetParam();
  const int64_t M = 37, N = 29, K = 53;
  auto A = randn(M * K, 1), B = randn(K * N, 2), bias = randn(N, 3), C0 = randn(M * N, 4);
  std::vector<float> C = C0;
  kernels::GemmArgs g;
  g.trans_a = c.ta;
  g.trans_b = c.tb;
  g.M = M;
  g.N = N;
  g.K = K;
  g.A = A.data();
  g.lda = c.ta ? M : K;
  g.B = B.data();
  g.ldb = c.tb ? K : N;
  g.C = C.data();
  g.ldc = N;
  g.bias = c.bias ? bias.data() : nullptr;
  g.alpha = c.alpha;
  g.accumulate = c.acc;
  kernels::gemm(g, c.prec);
  // The bf16 reference rounds the inputs to bf16 first: products and sums are exact-ish in fp32.
  auto Ar = A, Br = B;
  if (c.prec == Precision::BF16) {
    round_to_bf16(Ar.data(), Ar.size());
    round_to_bf16(Br.data(), Br.size());
  }
  auto bd = to_d(bias), c0d = to_d(C0);
  auto want =
      ref::gemm(c.ta, c.tb, M, N, K, to_d(Ar), to_d(Br), c.alpha, c.bias ? &bd : nullptr, c.acc ? &c0d : nullptr);
  EXPECT_LT(max_rel(to_d(C), want), 1e-5);
  if (c.prec == Precision::BF16) {  // documented bf16 tolerance against the exact fp32 product
    auto exact =
        ref::gemm(c.ta, c.tb, M, N, K, to_d(A), to_d(B), c.alpha, c.bias ? &bd : nullptr, c.acc ? &c0d : nullptr);
    EXPECT_LT(max_rel(to_d(C), exact), 2e-2);
  }
}

INSTANTIATE_TEST_SUITE_P(AllLayouts, GemmTest,
                         ::testing::Values(GemmCase{false, false, false, false, 1.0f, Precision::F32},
                                           GemmCase{true, false, false, false, 1.0f, Precision::F32},
                                           GemmCase{false, true, true, false, 1.0f, Precision::F32},
                                           GemmCase{true, true, false, true, 1.0f, Precision::F32},
                                           GemmCase{false, false, false, true, 0.37f, Precision::F32},
                                           GemmCase{false, false, false, false, 1.0f, Precision::BF16},
                                           GemmCase{true, false, false, true, 1.0f, Precision::BF16},
                                           GemmCase{false, true, true, false, 1.0f, Precision::BF16},
                                           GemmCase{true, true, false, true, 0.37f, Precision::BF16}));

TEST(Gemm, BatchedStridedMatchesPerBatch) {
  const int64_t Bt = 3, M = 7, N = 5, K = 11;
  auto A = randn(Bt * M * K, 5), B = randn(Bt * N * K, 6);
  std::vector<float> C(Bt * M * N);
  kernels::GemmArgs g;
  g.batch = Bt;
  g.M = M;
  g.N = N;
  g.K = K;
  g.A = A.data();
  g.lda = K;
  g.stride_a = M * K;
  g.B = B.data();
  g.ldb = K;
  g.stride_b = N * K;
  g.trans_b = true;
  g.C = C.data();
  g.ldc = N;
  g.stride_c = M * N;
  kernels::gemm(g, Precision::F32);
  for (int64_t b = 0; b < Bt; ++b) {
    std::vector<double> a(A.begin() + b * M * K, A.begin() + (b + 1) * M * K);
    std::vector<double> bb(B.begin() + b * N * K, B.begin() + (b + 1) * N * K);
    auto want = ref::gemm(false, true, M, N, K, a, bb, 1.0, nullptr, nullptr);
    EXPECT_LT(max_rel(to_d(C.data() + b * M * N, M * N), want), 1e-5);
  }
}

TEST(Gemm, LinearBackwardMatchesFiniteDifferences) {
  const int64_t M = 9, N = 7, K = 13;
  auto x = randn(M * K, 7), W = randn(N * K, 8), b = randn(N, 9), R = randn(M * N, 10);
  std::vector<float> dx(M * K, 0.5f), dW(N * K, 0.25f), db(N, 0.125f);  // backward must ADD
  kernels::linear_backward(dx.data(), dW.data(), db.data(), R.data(), x.data(), W.data(), M, N, K, Precision::F32);
  auto loss = [&](const std::vector<double>& xx, const std::vector<double>& ww, const std::vector<double>& bb) {
    return dot(ref::gemm(false, true, M, N, K, xx, ww, 1.0, &bb, nullptr), to_d(R));
  };
  auto gx = fd_grad([&](const std::vector<double>& v) { return loss(v, to_d(W), to_d(b)); }, to_d(x));
  auto gW = fd_grad([&](const std::vector<double>& v) { return loss(to_d(x), v, to_d(b)); }, to_d(W));
  auto gb = fd_grad([&](const std::vector<double>& v) { return loss(to_d(x), to_d(W), v); }, to_d(b));
  for (auto& v : gx) v += 0.5;
  for (auto& v : gW) v += 0.25;
  for (auto& v : gb) v += 0.125;
  EXPECT_LT(max_rel(to_d(dx), gx), 1e-5);
  EXPECT_LT(max_rel(to_d(dW), gW), 1e-5);
  EXPECT_LT(max_rel(to_d(db), gb), 1e-5);
}

TEST(Gemm, FusedBiasEqualsGemmPlusBias) {
  const int64_t M = 11, N = 17, K = 19;
  auto x = randn(M * K, 11), W = randn(N * K, 12), b = randn(N, 13);
  std::vector<float> fused(M * N), plain(M * N);
  kernels::linear_forward(fused.data(), x.data(), W.data(), b.data(), M, N, K, Precision::F32);
  kernels::linear_forward(plain.data(), x.data(), W.data(), nullptr, M, N, K, Precision::F32);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) plain[m * N + n] += b[n];
  EXPECT_LT(max_rel(to_d(fused), to_d(plain)), 1e-6);
}

// The row-invariant linear layer (gemm_rows.cpp): the SIMD kernel equals its portable form bit for
// bit, every row equals the row computed alone or among others (any M, any threads), and the values
// are fp32-accurate. Shapes cross every tail: M % 3, N % 4, K % 8, K > 512 (two K blocks), tiles.
TEST(Gemm, PackedLinearWeightGivesTheSameBits) {
  // pack_linear_weight (fp32 inference): W laid out once for the kernel that runs fp32 linear
  // layers here (oneDNN's blocked layout, or the row kernel's panels where that kernel runs, as on
  // an AVX2 CPU); the layer on it equals linear_forward's fp32 path bit for bit, with and without
  // a bias, at every row count. Both kernels are checked on every CPU by forcing one or the other.
  struct Shape {
    int64_t N, K;
  };
  for (const Shape sh : {Shape{96, 200}, Shape{100, 300}}) {
    const int64_t N = sh.N, K = sh.K;
    const std::vector<float> W = randn(static_cast<size_t>(N * K), 41, 0.05f);
    const std::vector<float> b = randn(static_cast<size_t>(N), 42);
    for (const auto rows : {kernels::RowGemm::Auto, kernels::RowGemm::Never, kernels::RowGemm::Always}) {
      kernels::set_row_gemm(rows);
      SCOPED_TRACE(std::to_string(N) + "x" + std::to_string(K) +
                   (kernels::row_gemm_active() ? " row kernel" : " oneDNN"));
      const auto p = kernels::pack_linear_weight(W.data(), N, K);
      // the row kernel always packs; oneDNN's brgemm (AVX-512, AMX) takes blocked weights, its AVX2
      // sgemm plain ones (nothing packed)
      if (kernels::row_gemm_active() || onednn_f32_rows_invariant()) {
        ASSERT_NE(p, nullptr);
      }
      if (!p) continue;
      for (const int64_t M : {1, 5, 130}) {
        SCOPED_TRACE("rows " + std::to_string(M));
        const std::vector<float> x = randn(static_cast<size_t>(M * K), 43 + static_cast<uint32_t>(M));
        for (const float* bias : {b.data(), static_cast<const float*>(nullptr)}) {
          std::vector<float> y(static_cast<size_t>(M * N)), yp(y.size());
          kernels::linear_forward(y.data(), x.data(), W.data(), bias, M, N, K, Precision::F32);
          kernels::linear_forward_packed(yp.data(), x.data(), *p, bias, M);
          EXPECT_EQ(yp, y) << (bias ? "bias" : "no bias");
        }
      }
    }
  }
  kernels::set_row_gemm(kernels::RowGemm::Auto);
}

TEST(Gemm, PackedBf16LinearWeightGivesTheSameBits) {
  // pack_linear_weight_bf16 (bf16 inference where oneDNN's bf16 matmul is native): W's bf16 copy
  // packed once; the layer on it equals linear_forward's bf16 path on the same roundings bit for
  // bit, with and without a bias, at every row count. Null where bf16 is emulated (AVX2).
  const int64_t N = 100, K = 300;
  const std::vector<float> W = randn(static_cast<size_t>(N * K), 44, 0.05f);
  const std::vector<float> b = randn(static_cast<size_t>(N), 45);
  std::vector<bf16_t> W16(W.size());
  to_bf16(W.data(), W16.data(), W.size());
  const auto p = kernels::pack_linear_weight_bf16(W16.data(), N, K);
  if (!onednn_bf16_matmul()) {
    EXPECT_EQ(p, nullptr);
    return;
  }
  ASSERT_NE(p, nullptr);  // oneDNN's bf16 brgemm (AVX512-BF16, AMX) takes blocked weights
  for (const int64_t M : {1, 5, 130}) {
    SCOPED_TRACE("rows " + std::to_string(M));
    const std::vector<float> x = randn(static_cast<size_t>(M * K), 46 + static_cast<uint32_t>(M));
    std::vector<bf16_t> x16(x.size());
    to_bf16(x.data(), x16.data(), x.size());
    for (const float* bias : {b.data(), static_cast<const float*>(nullptr)}) {
      std::vector<float> y(static_cast<size_t>(M * N)), yp(y.size());
      kernels::linear_forward(y.data(), x.data(), W.data(), bias, M, N, K, Precision::BF16, W16.data(), x16.data());
      kernels::linear_forward_packed_bf16(yp.data(), x16.data(), *p, bias, M);
      EXPECT_EQ(yp, y) << (bias ? "bias" : "no bias");
    }
  }
}

TEST(Gemm, RowKernelIsExactPortableAndRowInvariant) {
  struct Shape {
    int64_t M, N, K;
  };
  for (const Shape sh :
       {Shape{1, 1, 1}, Shape{7, 5, 13}, Shape{37, 29, 53}, Shape{50, 70, 515}, Shape{97, 130, 1029},
        Shape{12, 20, 264}, Shape{36, 17, 512}}) {  // the last two: x's packing ends on whole 8-column groups
    const int64_t M = sh.M, N = sh.N, K = sh.K;
    SCOPED_TRACE(std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K));
    auto x = randn(M * K, 21), W = randn(N * K, 22), b = randn(N, 23);
    std::vector<float> y(M * N), yp(M * N);
    kernels::linear_forward_rows(y.data(), x.data(), W.data(), b.data(), M, N, K);
    kernels::linear_forward_rows_portable(yp.data(), x.data(), W.data(), b.data(), M, N, K);
    EXPECT_EQ(0, std::memcmp(y.data(), yp.data(), y.size() * 4));
    auto bd = to_d(b);
    EXPECT_LT(max_rel(to_d(y), ref::gemm(false, true, M, N, K, to_d(x), to_d(W), 1.0, &bd, nullptr)), 1e-5);
    const int before = omp_get_max_threads();
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      for (int64_t m = 0; m < M; m += std::max<int64_t>(1, M / 5)) {  // row m alone
        std::vector<float> one(N);
        kernels::linear_forward_rows(one.data(), x.data() + m * K, W.data(), b.data(), 1, N, K);
        EXPECT_EQ(0, std::memcmp(one.data(), y.data() + m * N, N * 4)) << "row " << m << ", " << threads << " threads";
      }
      if (M > 2) {  // rows 1.. among fewer neighbours
        std::vector<float> part((M - 1) * N);
        kernels::linear_forward_rows(part.data(), x.data() + K, W.data(), b.data(), M - 1, N, K);
        EXPECT_EQ(0, std::memcmp(part.data(), y.data() + N, part.size() * 4)) << threads << " threads";
      }
    }
    omp_set_num_threads(before);
  }
}

// The feed-forward block on the row kernel in one kernel (ffn_rows_packed: the first layer's output
// activated and written straight into the layout the second reads) gives the bits of its three
// steps run one after another, for row counts within one 96-row tile and across several, inner
// sizes with a partial 16-column panel and several K blocks, both activations and 1 or 2 threads;
// and a row's result alone is its result in the batch. ffn_forward_packed takes it only for
// weights in the row kernel's panels.
TEST(Gemm, FeedForwardInOneKernelIsItsThreeStepsBits) {
  struct Shape {
    int64_t M, C, I;
  };
  const int before = omp_get_max_threads();
  for (const Shape sh : {Shape{1, 24, 40}, Shape{7, 32, 64}, Shape{97, 40, 600}, Shape{203, 300, 72}}) {
    const int64_t M = sh.M, C = sh.C, I = sh.I;
    auto x = randn(M * C, 31), W1 = randn(I * C, 32), b1 = randn(I, 33), W2 = randn(C * I, 34), b2 = randn(C, 35);
    std::vector<float> p1(kernels::row_panels_size(I, C)), p2(kernels::row_panels_size(C, I));
    kernels::pack_row_panels(W1.data(), I, C, p1.data());
    kernels::pack_row_panels(W2.data(), C, I, p2.data());
    // (the room for the inner rows filled with NaN before each call: a write missed shows)
    for (const int threads : {2, 1})
      for (const Activation act : {Activation::GeluErf, Activation::GeluTanh}) {
        SCOPED_TRACE(std::to_string(M) + " rows, " + std::to_string(C) + " x " + std::to_string(I) + ", " +
                     (act == Activation::GeluErf ? "erf" : "tanh") + ", " + std::to_string(threads) + " threads");
        omp_set_num_threads(threads);
        std::vector<float> h(M * I), g(M * I), want(M * C), got(M * C, NAN);
        kernels::linear_forward_rows_packed(h.data(), x.data(), p1.data(), b1.data(), M, I, C);
        kernels::gelu_forward(g.data(), h.data(), M * I, act);
        kernels::linear_forward_rows_packed(want.data(), g.data(), p2.data(), b2.data(), M, C, I);
        std::vector<float> room(kernels::ffn_rows_scratch_floats(M, I), NAN);
        kernels::ffn_rows_packed(got.data(), x.data(), p1.data(), b1.data(), p2.data(), b2.data(), M, C, I, act,
                                 room.data());
        EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * 4));
        const int64_t m = M / 2;  // a row alone
        std::vector<float> one(C);
        room.assign(kernels::ffn_rows_scratch_floats(1, I), NAN);
        kernels::ffn_rows_packed(one.data(), x.data() + m * C, p1.data(), b1.data(), p2.data(), b2.data(), 1, C, I, act,
                                 room.data());
        EXPECT_EQ(0, std::memcmp(one.data(), want.data() + m * C, C * 4)) << "row " << m;
      }
  }
  omp_set_num_threads(before);
  // ffn_forward_packed: on the row kernel's panels only, with the three steps' bits
  const int64_t M = 5, C = 16, I = 48;
  auto x = randn(M * C, 36), W1 = randn(I * C, 37), W2 = randn(C * I, 38);
  for (const auto rows : {kernels::RowGemm::Always, kernels::RowGemm::Never}) {
    kernels::set_row_gemm(rows);
    const auto p1 = kernels::pack_linear_weight(W1.data(), I, C), p2 = kernels::pack_linear_weight(W2.data(), C, I);
    kernels::set_row_gemm(kernels::RowGemm::Auto);
    if (!p1 || !p2) continue;  // oneDNN's plain layout on this CPU: nothing packed
    std::vector<float> y(M * C, NAN), h(M * I), g(M * I), want(M * C), room(kernels::ffn_rows_scratch_floats(M, I));
    const bool done = kernels::ffn_forward_packed(y.data(), x.data(), *p1, nullptr, *p2, nullptr, M,
                                                  Activation::GeluErf, room.data());
    EXPECT_EQ(done, rows == kernels::RowGemm::Always);
    if (done) {
      kernels::linear_forward_packed(h.data(), x.data(), *p1, nullptr, M);
      kernels::gelu_forward(g.data(), h.data(), M * I, Activation::GeluErf);
      kernels::linear_forward_packed(want.data(), g.data(), *p2, nullptr, M);
      EXPECT_EQ(0, std::memcmp(want.data(), y.data(), y.size() * 4));
    }
  }
}

// linear_forward on the row kernel (as on an AVX2 CPU) in fp32 and bf16: the same values as oneDNN
// within fp32 (bf16) accuracy, and the bf16 form rounds the operands as the bf16 GEMM does.
TEST(Gemm, LinearForwardOnTheRowKernel) {
  const int64_t M = 19, N = 23, K = 77;
  auto x = randn(M * K, 24), W = randn(N * K, 25), b = randn(N, 26);
  for (Precision p : {Precision::F32, Precision::BF16}) {
    std::vector<float> dnnl(M * N), rows(M * N);
    kernels::set_row_gemm(kernels::RowGemm::Never);
    kernels::linear_forward(dnnl.data(), x.data(), W.data(), b.data(), M, N, K, p);
    kernels::set_row_gemm(kernels::RowGemm::Always);
    EXPECT_TRUE(kernels::row_gemm_active());
    kernels::linear_forward(rows.data(), x.data(), W.data(), b.data(), M, N, K, p);
    kernels::set_row_gemm(kernels::RowGemm::Auto);
    if (p == Precision::F32 || !onednn_bf16_matmul()) {
      EXPECT_LT(max_rel(to_d(rows), to_d(dnnl)), 1e-5);
    } else {  // native bf16 rounds x and W the same way and sums in fp32: close, not equal
      auto xr = x, wr = W;
      round_to_bf16(xr.data(), xr.size());
      round_to_bf16(wr.data(), wr.size());
      std::vector<float> want(M * N);
      kernels::linear_forward_rows(want.data(), xr.data(), wr.data(), b.data(), M, N, K);
      EXPECT_LT(max_rel(to_d(dnnl), to_d(want)), 1e-5);
    }
  }
  EXPECT_EQ(kernels::row_gemm_active(), !onednn_f32_rows_invariant());
}

// Where kernels::linear_rows_invariant says so (fp32 and int8 everywhere; bf16 emulated or on
// AVX512-BF16's brgemm), a row of linear_forward has the same bits alone (M = 1, where oneDNN's bf16
// gemm:jit on AVX-512 without AVX512-BF16 took another path) as among 64 or 300 rows, at bert-base's
// four shapes, with the automatic GEMMs and the row kernel forced. (ctest runs it under
// ONEDNN_MAX_CPU_ISA=AVX512_CORE too: unit_int8_avx512_core.)
TEST(Gemm, LinearRowsInvariantAtBertBaseShapes) {
  const int64_t C = 768, I = 3072;
  const int64_t shapes[4][2] = {{3 * C, C}, {C, C}, {I, C}, {C, I}};
  for (auto mode : {kernels::RowGemm::Auto, kernels::RowGemm::Always})
    for (Precision p : {Precision::F32, Precision::BF16}) {
      if (!kernels::linear_rows_invariant(p)) continue;
      kernels::set_row_gemm(mode);
      for (const auto& sh : shapes) {
        const int64_t N = sh[0], K = sh[1];
        SCOPED_TRACE((p == Precision::F32 ? "fp32 " : "bf16 ") + std::to_string(N) + "x" + std::to_string(K) +
                     (mode == kernels::RowGemm::Always ? " row kernel" : ""));
        auto x = randn(300 * K, 31), W = randn(N * K, 32), b = randn(N, 33);
        std::vector<float> one(N), many(300 * N), some(64 * N);
        kernels::linear_forward(many.data(), x.data(), W.data(), b.data(), 300, N, K, p);
        kernels::linear_forward(some.data(), x.data(), W.data(), b.data(), 64, N, K, p);
        for (int64_t r : {0, 37, 63}) {
          kernels::linear_forward(one.data(), x.data() + r * K, W.data(), b.data(), 1, N, K, p);
          EXPECT_TRUE(std::equal(one.begin(), one.end(), many.begin() + r * N)) << "row " << r << " alone";
          EXPECT_TRUE(std::equal(some.begin() + r * N, some.begin() + (r + 1) * N, many.begin() + r * N))
              << "row " << r << " of 64";
        }
      }
      kernels::set_row_gemm(kernels::RowGemm::Auto);
    }
}

// ------------------------------------------------------------------------------ embeddings
TEST(Embeddings, ForwardAndBackward) {
  const int64_t B = 3, T = 5, C = 7, V = 11, P = 9, TT = 2;
  std::vector<int32_t> ids = {1, 4, 4, 0, 10, 3, 3, 3, 2, 1, 9, 8, 4, 4, 5};
  std::vector<int32_t> seg = {0, 0, 1, 1, 1, 0, 1, 1, 1, 1, 0, 0, 0, 1, 1};
  auto wte = randn(V * C, 1), wpe = randn(P * C, 2), wtt = randn(TT * C, 3), R = randn(B * T * C, 4);
  std::vector<float> out(B * T * C);
  kernels::embeddings_forward(out.data(), ids.data(), seg.data(), wte.data(), wpe.data(), wtt.data(), B, T, C);
  EXPECT_LT(max_rel(to_d(out), ref::embeddings(ids, seg, to_d(wte), to_d(wpe), to_d(wtt), B, T, C)), 1e-6);
  std::vector<float> dwte(V * C, 0), dwpe(P * C, 0), dwtt(TT * C, 0);
  kernels::embeddings_backward(dwte.data(), dwpe.data(), dwtt.data(), R.data(), ids.data(), seg.data(), B, T, C, V, TT);
  auto g = fd_grad(
      [&](const std::vector<double>& v) {
        return dot(ref::embeddings(ids, seg, v, to_d(wpe), to_d(wtt), B, T, C), to_d(R));
      },
      to_d(wte));
  EXPECT_LT(max_rel(to_d(dwte), g), 1e-6);
  auto gp = fd_grad(
      [&](const std::vector<double>& v) {
        return dot(ref::embeddings(ids, seg, to_d(wte), v, to_d(wtt), B, T, C), to_d(R));
      },
      to_d(wpe));
  EXPECT_LT(max_rel(to_d(dwpe), gp), 1e-6);
  auto gt = fd_grad(
      [&](const std::vector<double>& v) {
        return dot(ref::embeddings(ids, seg, to_d(wte), to_d(wpe), v, B, T, C), to_d(R));
      },
      to_d(wtt));
  EXPECT_LT(max_rel(to_d(dwtt), gt), 1e-6);
}

// ------------------------------------------------------------------------------- LayerNorm
TEST(LayerNorm, ForwardBackwardBertEps) {
  const int64_t N = 7, C = 13;
  const float eps = 1e-12f;
  auto x = randn(N * C, 1, 2.0f), w = randn(C, 2), b = randn(C, 3), R = randn(N * C, 4);
  std::vector<float> y(N * C), mean(N), rstd(N);
  kernels::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, eps);
  EXPECT_LT(max_rel(to_d(y), ref::layernorm(to_d(x), to_d(w), to_d(b), N, C, eps)), 1e-5);
  std::vector<float> dx(N * C, 0), dw(C, 0), db(C, 0);
  kernels::layernorm_backward(dx.data(), dw.data(), db.data(), R.data(), x.data(), w.data(), mean.data(), rstd.data(),
                              N, C);
  auto L = [&](const std::vector<double>& xx, const std::vector<double>& ww, const std::vector<double>& bb) {
    return dot(ref::layernorm(xx, ww, bb, N, C, eps), to_d(R));
  };
  EXPECT_LT(max_rel(to_d(dx), fd_grad([&](auto& v) { return L(v, to_d(w), to_d(b)); }, to_d(x))), 1e-4);
  EXPECT_LT(max_rel(to_d(dw), fd_grad([&](auto& v) { return L(to_d(x), v, to_d(b)); }, to_d(w))), 1e-4);
  EXPECT_LT(max_rel(to_d(db), fd_grad([&](auto& v) { return L(to_d(x), to_d(w), v); }, to_d(b))), 1e-4);
}

TEST(LayerNorm, FusedResidualEqualsComposed) {
  const int64_t N = 9, C = 23;
  auto a = randn(N * C, 1), r = randn(N * C, 2), w = randn(C, 3), b = randn(C, 4);
  std::vector<float> y1(N * C), s1(N * C), m1(N), r1(N), y2(N * C), s2(N * C), m2(N), r2(N);
  kernels::residual_layernorm_forward(y1.data(), s1.data(), m1.data(), r1.data(), a.data(), r.data(), w.data(),
                                      b.data(), N, C, 1e-12f);
  kernels::residual_forward(s2.data(), a.data(), r.data(), N * C);
  kernels::layernorm_forward(y2.data(), m2.data(), r2.data(), s2.data(), w.data(), b.data(), N, C, 1e-12f);
  EXPECT_EQ(y1, y2);
  EXPECT_EQ(s1, s2);
  EXPECT_EQ(m1, m2);
  EXPECT_EQ(r1, r2);
}

// ------------------------------------------------------------------------------------ GELU
class GeluTest : public ::testing::TestWithParam<Activation> {};
TEST_P(GeluTest, ForwardBackward) {
  const Activation act = GetParam();
  const int64_t n = 101;
  auto x = randn(n, 1, 3.0f), R = randn(n, 2);
  std::vector<float> y(n), dx(n, 0.0f);
  kernels::gelu_forward(y.data(), x.data(), n, act);
  EXPECT_LT(max_rel(to_d(y), ref::gelu(to_d(x), act)), 1e-6);
  kernels::gelu_backward(dx.data(), x.data(), R.data(), n, act);
  auto g = fd_grad([&](const std::vector<double>& v) { return dot(ref::gelu(v, act), to_d(R)); }, to_d(x));
  EXPECT_LT(max_rel(to_d(dx), g), 1e-5);
}
INSTANTIATE_TEST_SUITE_P(Both, GeluTest, ::testing::Values(Activation::GeluErf, Activation::GeluTanh));

TEST(Tanh, ForwardBackward) {
  const int64_t n = 31;
  auto x = randn(n, 3), R = randn(n, 4);
  std::vector<float> y(n), dx(n, 0.0f);
  kernels::tanh_forward(y.data(), x.data(), n);
  kernels::tanh_backward(dx.data(), y.data(), R.data(), n);
  auto f = [&](const std::vector<double>& v) {
    double s = 0;
    for (size_t i = 0; i < v.size(); ++i) s += std::tanh(v[i]) * R[i];
    return s;
  };
  EXPECT_LT(max_rel(to_d(dx), fd_grad(f, to_d(x))), 1e-5);
}

// --------------------------------------------------------------------------------- dropout
TEST(Dropout, MaskScaleAndBackwardAgree) {
  const int64_t n = 20001;
  const float p = 0.1f;
  Rng rng{42, 0};
  const uint64_t base = rng.reserve(n);
  std::vector<float> x(n, 1.0f), y(n), dx(n, 0.0f), ones(n, 1.0f);
  kernels::dropout_forward(y.data(), x.data(), n, p, rng, base);
  kernels::dropout_backward(dx.data(), ones.data(), n, p, rng, base);
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    EXPECT_TRUE(y[i] == 0.0f || std::fabs(y[i] - 1.0f / 0.9f) < 1e-6);
    EXPECT_EQ(y[i], dx[i]);  // backward regenerates exactly the forward mask
    kept += y[i] != 0.0f;
  }
  EXPECT_NEAR(static_cast<double>(kept) / n, 0.9, 0.01);
  // A different base gives a different mask.
  std::vector<float> y2(n);
  kernels::dropout_forward(y2.data(), x.data(), n, p, rng, rng.reserve(n));
  EXPECT_NE(y, y2);
}

TEST(Rng, PhiloxKnownAnswer) {
  // Random123 known-answer test for philox4x32_10, counter 0, key 0.
  auto r = philox4x32({0, 0, 0, 0}, {0, 0});
  EXPECT_EQ(r[0], 0x6627e8d5u);
  EXPECT_EQ(r[1], 0xe169c58du);
  EXPECT_EQ(r[2], 0xbc57ac4cu);
  EXPECT_EQ(r[3], 0x9b00dbd8u);
}

// ------------------------------------------------------------------------------- attention
struct AttnCase {
  float p;
  Precision prec;
  int64_t T = 7;  // 37: three 16 x 16 dropout tiles per row, the last partial
};
class AttentionTest : public ::testing::TestWithParam<AttnCase> {};

TEST_P(AttentionTest, ForwardBackwardAgainstReference) {
  const AttnCase ac = GetParam();
  const int64_t B = 2, T = ac.T, NH = 3, C = 15;  // HS = 5
  auto qkv = randn(B * T * 3 * C, 1), R = randn(B * T * C, 2);
  std::vector<float> mask_add(B * T, 0.0f);
  mask_add[T - 1] = mask_add[T - 2] = -10000.0f;  // row 0 has two padded keys
  Rng rng{7, 0};
  const uint64_t base = rng.reserve(attention_drop_numbers(B * NH, T));
  std::vector<float> out(B * T * C), probs(kernels::attention_saved_size(B, T, C, NH, ac.p > 0, ac.prec)),
      work(kernels::attention_work_size(B, T, C, NH));
  kernels::attention_forward(out.data(), probs.data(), work.data(), qkv.data(), mask_add.data(), B, T, C, NH, ac.p, rng,
                             base, ac.prec);
  {  // the output's bf16 rounding, with the fp32 output and alone: the roundings of `out`, and the
     // same saved buffer (bf16 training keeps only the rounding)
    std::vector<bf16_t> o16(out.size()), o16only(out.size()), want(out.size());
    std::vector<float> out2(out.size()), probs2(probs.size()), probs3(probs.size());
    for (size_t i = 0; i < out.size(); ++i) want[i] = f32_to_bf16(out[i]);
    kernels::attention_forward(out2.data(), probs2.data(), work.data(), qkv.data(), mask_add.data(), B, T, C, NH, ac.p,
                               rng, base, ac.prec, o16.data());
    kernels::attention_forward(nullptr, probs3.data(), work.data(), qkv.data(), mask_add.data(), B, T, C, NH, ac.p, rng,
                               base, ac.prec, o16only.data());
    EXPECT_EQ(out2, out);
    EXPECT_EQ(o16, want);
    EXPECT_EQ(o16only, want);
    EXPECT_EQ(0, std::memcmp(probs2.data(), probs.data(), probs.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(probs3.data(), probs.data(), probs.size() * sizeof(float)));
  }
  // element (i, j) of head row bh: 16 bits of the stream, in the layout rng.h describes (16 x 16
  // tiles of 128 numbers, block 4 (i % 8) + (j / 2) % 4, word 2 ((i / 8) % 2) + (j / 8) % 2, half j % 2)
  std::vector<uint8_t> keep(B * NH * T * T, 1);
  if (ac.p > 0)
    for (int64_t bh = 0; bh < B * NH; ++bh)
      for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j < T; ++j) {
          const int64_t tiles = (T + 15) / 16;
          uint32_t x = 0;
          rng.fill_u32(base + ((bh * tiles + i / 16) * tiles + j / 16) * 128 + 16 * (i % 8) + 4 * ((j / 2) % 4) +
                           2 * ((i / 8) % 2) + (j / 8) % 2,
                       1, &x);
          keep[(bh * T + i) * T + j] = static_cast<double>(j % 2 ? x >> 16 : x & 0xFFFFu) / 65536.0 >= ac.p;
        }
  auto qkv_in = qkv;
  if (ac.prec == Precision::BF16) round_to_bf16(qkv_in.data(), qkv_in.size());
  const double tol_f = ac.prec == Precision::F32 ? 1e-5 : 2e-2, tol_b = ac.prec == Precision::F32 ? 1e-4 : 5e-2;
  EXPECT_LT(
      max_rel(to_d(out), ref::attention(to_d(qkv_in), to_d(mask_add), ac.p > 0 ? &keep : nullptr, ac.p, B, T, C, NH)),
      tol_f);
  std::vector<float> dqkv(B * T * 3 * C);
  // bf16: the backward takes q, k, v from the saved buffer (their roundings) and reads no qkv
  std::fill(work.begin(), work.end(), NAN);  // nothing of the forward's scratch may be needed
  kernels::attention_backward(dqkv.data(), work.data(), R.data(), ac.prec == Precision::BF16 ? nullptr : qkv.data(),
                              probs.data(), B, T, C, NH, ac.p, ac.prec);
  if (ac.prec == Precision::BF16) {  // with dqkv's bf16 rounding too: the same dqkv, and its roundings
    std::vector<float> dqkv2(dqkv.size(), NAN);
    std::vector<bf16_t> d16(dqkv.size()), want(dqkv.size());
    std::fill(work.begin(), work.end(), NAN);
    kernels::attention_backward(dqkv2.data(), work.data(), R.data(), nullptr, probs.data(), B, T, C, NH, ac.p, ac.prec,
                                d16.data());
    for (size_t i = 0; i < dqkv.size(); ++i) want[i] = f32_to_bf16(dqkv[i]);
    EXPECT_EQ(0, std::memcmp(dqkv2.data(), dqkv.data(), dqkv.size() * sizeof(float)));
    EXPECT_EQ(d16, want);
  }
  auto g = fd_grad(
      [&](const std::vector<double>& v) {
        return dot(ref::attention(v, to_d(mask_add), ac.p > 0 ? &keep : nullptr, ac.p, B, T, C, NH), to_d(R));
      },
      to_d(qkv));
  EXPECT_LT(max_rel(to_d(dqkv), g), tol_b);
}
INSTANTIATE_TEST_SUITE_P(DropoutAndPrecision, AttentionTest,
                         ::testing::Values(AttnCase{0.0f, Precision::F32}, AttnCase{0.2f, Precision::F32},
                                           AttnCase{0.0f, Precision::BF16}, AttnCase{0.2f, Precision::BF16},
                                           AttnCase{0.2f, Precision::F32, 37}, AttnCase{0.2f, Precision::BF16, 37}));

// Variable-length attention (unpadded execution): each sequence of a packed batch computes what
// the padded kernel computes for it alone (B = 1, T = its length: the same dropout elements, the
// same outputs and gradients to rounding), the reference's values, and the same bits whatever its
// batch and thread count.
class AttentionVarlenTest : public ::testing::TestWithParam<AttnCase> {};

TEST_P(AttentionVarlenTest, EachSequenceAsAloneAndBatchIndependent) {
  const AttnCase ac = GetParam();
  const bool bf = ac.prec == Precision::BF16;
  const int64_t NH = 3, C = 15;                        // HS = 5
  const std::vector<int64_t> len = {7, 1, 37, 16, 3};  // 37: partial 16 x 16 dropout tiles
  const int64_t B = static_cast<int64_t>(len.size());
  std::vector<int64_t> cu(B + 1, 0);
  for (int64_t b = 0; b < B; ++b) cu[b + 1] = cu[b] + len[b];
  const int64_t N = cu[B];
  auto qkv = randn(N * 3 * C, 11), R = randn(N * C, 12);
  std::vector<bf16_t> qkv16(qkv.size());
  for (size_t i = 0; i < qkv.size(); ++i) qkv16[i] = f32_to_bf16(qkv[i]);
  Rng rng{9, 0};
  uint64_t base = rng.reserve(attention_varlen_drop_numbers(cu.data(), B, NH));  // (run reads it: shifted below)
  // one run: outputs, saved buffer and gradient (fp32 qkv, or in bf16 its kept rounding when kept16)
  struct Run {
    std::vector<float> out, saved, dqkv;
    std::vector<bf16_t> out16, dqkv16;
  };
  auto run = [&](const std::vector<int64_t>& c, const float* x, const bf16_t* x16, const float* dy, int threads) {
    const int64_t nb = static_cast<int64_t>(c.size()) - 1, rows = c.back();
    Run r;
    r.out.assign(rows * C, NAN);
    r.out16.assign(rows * C, 0);
    r.saved.assign(kernels::attention_varlen_saved_size(c.data(), nb, C, NH, ac.p > 0, ac.prec, x16 != nullptr), NAN);
    r.dqkv.assign(rows * 3 * C, NAN);
    r.dqkv16.assign(rows * 3 * C, 0);
    const int before = omp_get_max_threads();
    omp_set_num_threads(threads);
    kernels::attention_varlen_forward(r.out.data(), r.saved.data(), x16 ? nullptr : x, c.data(), nb, C, NH, ac.p, rng,
                                      base, ac.prec, bf ? r.out16.data() : nullptr, x16);
    kernels::attention_varlen_backward(r.dqkv.data(), dy, bf ? nullptr : x, r.saved.data(), c.data(), nb, C, NH, ac.p,
                                       ac.prec, bf ? r.dqkv16.data() : nullptr, x16);
    omp_set_num_threads(before);
    return r;
  };
  const Run all = run(cu, qkv.data(), nullptr, R.data(), 2);
  // every output and gradient finite and written; bf16 roundings are the fp32 values' roundings
  for (float v : all.out) ASSERT_TRUE(std::isfinite(v));
  for (float v : all.dqkv) ASSERT_TRUE(std::isfinite(v));
  if (bf) {
    for (size_t i = 0; i < all.out.size(); ++i) ASSERT_EQ(all.out16[i], f32_to_bf16(all.out[i]));
  }
  // one thread: the same bits
  const Run one = run(cu, qkv.data(), nullptr, R.data(), 1);
  EXPECT_EQ(0, std::memcmp(one.out.data(), all.out.data(), all.out.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(one.dqkv.data(), all.dqkv.data(), all.dqkv.size() * sizeof(float)));
  if (bf) {  // the kept rounding of qkv read instead: the same bits (the products round q, k, v anyway)
    const Run kept = run(cu, nullptr, qkv16.data(), R.data(), 2);
    EXPECT_EQ(0, std::memcmp(kept.out.data(), all.out.data(), all.out.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(kept.dqkv.data(), all.dqkv.data(), all.dqkv.size() * sizeof(float)));
    EXPECT_EQ(kept.dqkv16, all.dqkv16);
  }
  uint64_t d_off = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = len[b], r0 = cu[b];
    // alone, as the padded kernel computes it (its numbers d_off after the batch's base)
    std::vector<float> x(qkv.begin() + r0 * 3 * C, qkv.begin() + (r0 + n) * 3 * C),
        dy(R.begin() + r0 * C, R.begin() + (r0 + n) * C);
    std::vector<float> zero(n, 0.0f), out(n * C), probs(kernels::attention_saved_size(1, n, C, NH, ac.p > 0, ac.prec)),
        work(kernels::attention_work_size(1, n, C, NH)), dqkv(n * 3 * C);
    kernels::attention_forward(out.data(), probs.data(), work.data(), x.data(), zero.data(), 1, n, C, NH, ac.p, rng,
                               base + d_off, ac.prec);
    kernels::attention_backward(dqkv.data(), work.data(), dy.data(), bf ? nullptr : x.data(), probs.data(), 1, n, C, NH,
                                ac.p, ac.prec);
    const std::vector<float> vo(all.out.begin() + r0 * C, all.out.begin() + (r0 + n) * C),
        vd(all.dqkv.begin() + r0 * 3 * C, all.dqkv.begin() + (r0 + n) * 3 * C);
    const double tol = bf ? 1e-2 : 1e-6;
    EXPECT_LT(max_rel(to_d(vo), to_d(out)), tol) << "sequence " << b;
    EXPECT_LT(max_rel(to_d(vd), to_d(dqkv)), tol) << "sequence " << b;
    // and the reference, with the padded kernel's dropped elements (the same ones: checked by
    // comparing the two kernels' saved Pd zero patterns below)
    std::vector<uint8_t> keep(NH * n * n, 1);
    if (ac.p > 0) {
      int64_t p_off = 0;
      for (int64_t e = 0; e < b; ++e) p_off += NH * len[e] * len[e];
      const int64_t S = [&] {
        int64_t s = 0;
        for (int64_t l : len) s += NH * l * l;
        return s;
      }();
      for (int64_t e = 0; e < NH * n * n; ++e) {
        const bool kept_varlen = bf ? reinterpret_cast<const bf16_t*>(all.saved.data() + S)[p_off + e] != 0
                                    : all.saved[S + p_off + e] != 0.0f;
        const int64_t pad_n = NH * n * n;
        const bool kept_pad =
            bf ? reinterpret_cast<const bf16_t*>(probs.data() + pad_n)[e] != 0 : probs[pad_n + e] != 0.0f;
        ASSERT_EQ(kept_varlen, kept_pad) << "sequence " << b << " element " << e;
        keep[e] = kept_pad;
      }
    }
    auto x_in = x;
    if (bf) round_to_bf16(x_in.data(), x_in.size());
    EXPECT_LT(max_rel(to_d(vo), ref::attention(to_d(x_in), to_d(zero), ac.p > 0 ? &keep : nullptr, ac.p, 1, n, C, NH)),
              bf ? 2e-2 : 1e-5)
        << "sequence " << b;
    d_off += attention_drop_numbers(NH, n);
  }
  // batch independence: the 37-token sequence alone and with another (its numbers where they were
  // in the batch: the base shifted by the sequences before it there) gives the same bits
  {
    const int64_t b = 2, n = len[b], r0 = cu[b];
    uint64_t before = 0;
    for (int64_t e = 0; e < b; ++e) before += attention_drop_numbers(NH, len[e]);
    std::vector<float> x(qkv.begin() + r0 * 3 * C, qkv.begin() + (r0 + n) * 3 * C),
        dy(R.begin() + r0 * C, R.begin() + (r0 + n) * C);
    const uint64_t keep_base = base;
    base = keep_base + before;
    const Run alone = run({0, n}, x.data(), nullptr, dy.data(), 2);
    base = keep_base;
    EXPECT_EQ(0, std::memcmp(alone.out.data(), all.out.data() + r0 * C, n * C * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(alone.dqkv.data(), all.dqkv.data() + r0 * 3 * C, n * 3 * C * sizeof(float)));
  }
}
INSTANTIATE_TEST_SUITE_P(DropoutAndPrecision, AttentionVarlenTest,
                         ::testing::Values(AttnCase{0.0f, Precision::F32}, AttnCase{0.2f, Precision::F32},
                                           AttnCase{0.0f, Precision::BF16}, AttnCase{0.2f, Precision::BF16}));

// ------------------------------------------------------------------------- cross-entropy
TEST(CrossEntropy, LossAndGradientWithIgnoreIndex) {
  const int64_t N = 5, V = 13;
  auto x = randn(N * V, 3, 2.0f);
  std::vector<int32_t> labels = {3, -1, 12, 0, -1};
  x[0 * V + 3] = 9.0f;  // row 0 is predicted correctly, so the accuracy count is not trivially 0
  std::vector<float> logits = x, losses(N);
  int64_t correct = 0;
  const int64_t valid = kernels::softmax_xent_forward_backward(logits.data(), losses.data(), labels.data(), N, V, -1,
                                                               1.0f / 3.0f, &correct);
  EXPECT_EQ(valid, 3);
  int64_t want_correct = 0;  // reference: first maximum of the original logits equals the label
  for (int64_t n = 0; n < N; ++n)
    if (labels[n] != -1)
      want_correct += (std::max_element(x.begin() + n * V, x.begin() + (n + 1) * V) - (x.begin() + n * V)) == labels[n];
  EXPECT_GE(want_correct, 1);
  EXPECT_EQ(correct, want_correct);
  double mean = 0;
  for (float l : losses) mean += l;
  mean /= 3;
  EXPECT_NEAR(mean, ref::xent(to_d(x), labels, N, V, -1), 1e-6);
  EXPECT_EQ(losses[1], 0.0f);
  auto g = fd_grad([&](const std::vector<double>& v) { return ref::xent(v, labels, N, V, -1); }, to_d(x));
  EXPECT_LT(max_rel(to_d(logits), g), 1e-5);  // the logits buffer now holds the gradient
}

// ELECTRA's Gumbel-max sampling: against a plain reference (one uniform per element of the whole
// [M, V] stream, noise and argmax written out), as a sampler (the picks of many rows of the same
// logits follow softmax), NaN/-inf rows, and the same picks with 1 or 2 threads.
TEST(Gumbel, ArgmaxSamplesTheSoftmax) {
  const Rng rng{99, 0};
  const int64_t V = 5, M = 40000;
  const float l[V] = {1.0f, 0.0f, -1.0f, 2.0f, 0.5f};
  std::vector<float> logits(static_cast<size_t>(M * V));
  for (int64_t m = 0; m < M; ++m) std::copy(l, l + V, logits.begin() + m * V);
  for (int64_t v = 0; v < V; ++v) logits[static_cast<size_t>(V + v)] = -INFINITY;  // row 1: nothing finite
  logits[static_cast<size_t>(V + 2)] = NAN;
  const uint64_t base = 4 * 77;
  std::vector<int32_t> picks(static_cast<size_t>(M));
  kernels::gumbel_argmax(picks.data(), logits.data(), M, V, rng, base);
  EXPECT_EQ(picks[1], 0);
  std::vector<uint32_t> raw(static_cast<size_t>(M * V));
  rng.fill_u32(base, raw.size(), raw.data());
  for (int64_t m = 0; m < M; ++m) {  // reference
    int32_t best = 0;
    double bv = -INFINITY;
    for (int64_t v = 0; v < V; ++v) {
      const double u = (static_cast<double>(raw[m * V + v] >> 8) + 0.5) / 16777216.0;
      const double sc = static_cast<double>(logits[m * V + v]) + (-std::log(-std::log(u)));
      if (sc > bv) {
        bv = sc;
        best = static_cast<int32_t>(v);
      }
    }
    ASSERT_EQ(picks[m], best) << "row " << m;
  }
  double z = 0;
  for (float x : l) z += std::exp(static_cast<double>(x));
  std::vector<int64_t> count(V, 0);
  for (int64_t m = 2; m < M; ++m) ++count[picks[m]];
  for (int64_t v = 0; v < V; ++v) {
    const double p = std::exp(static_cast<double>(l[v])) / z, n = static_cast<double>(M - 2);
    EXPECT_NEAR(static_cast<double>(count[v]) / n, p, 4.5 * std::sqrt(p * (1 - p) / n)) << "token " << v;
  }
  const int nt = threads();
  set_threads(1);
  std::vector<int32_t> one(static_cast<size_t>(M));
  kernels::gumbel_argmax(one.data(), logits.data(), M, V, rng, base);
  set_threads(nt);
  EXPECT_EQ(one, picks);
}

// The joint SQuAD head's expected start state: each row's weighted sum over t, written with a
// stride (into the first half of [expected ; h_cls] rows), against sums in long double.
TEST(Rows, WeightedRowSums) {
  const int64_t B = 3, T = 7, C = 5, ld = 2 * C;
  auto x = randn(B * T * C, 11, 1.0f);
  std::vector<double> w(static_cast<size_t>(B * T));
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.05 * static_cast<double>(i % 9) + 0.01;
  std::vector<float> out(static_cast<size_t>(B * ld), -7.0f);
  kernels::weighted_row_sums(out.data(), ld, x.data(), w.data(), B, T, C);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t c = 0; c < ld; ++c) {
      if (c >= C) {
        EXPECT_EQ(out[b * ld + c], -7.0f);  // the second half is not touched
        continue;
      }
      long double want = 0;
      for (int64_t t = 0; t < T; ++t) want += static_cast<long double>(w[b * T + t]) * x[(b * T + t) * C + c];
      EXPECT_NEAR(out[b * ld + c], static_cast<double>(want), 1e-6) << b << "," << c;
    }
}

TEST(Rows, GatherScatterAreAdjoint) {
  const int64_t N = 9, C = 5, M = 4;
  auto x = randn(N * C, 1), R = randn(M * C, 2);
  std::vector<int64_t> rows = {0, 3, 3, 8};
  std::vector<float> g(M * C), d(N * C, 0.0f);
  kernels::gather_rows(g.data(), x.data(), rows.data(), M, C);
  kernels::scatter_add_rows(d.data(), R.data(), rows.data(), M, C);
  // <gather(x), R> == <x, scatter(R)>
  EXPECT_NEAR(dot(to_d(g), to_d(R)), dot(to_d(x), to_d(d)), 1e-4);
}

TEST(Bias, BackwardSumsRows) {
  const int64_t M = 67, N = 131;
  auto dy = randn(M * N, 5);
  std::vector<float> db(N, 1.0f);
  kernels::bias_backward(db.data(), dy.data(), M, N);
  for (int64_t n = 0; n < N; ++n) {
    double s = 1.0;
    for (int64_t m = 0; m < M; ++m) s += dy[m * N + n];
    EXPECT_NEAR(db[n], s, 1e-4);
  }
}

// Attention dropout's layout (rng.h): every element of every head row gets its own 16 bits (no
// two share a number's half), all inside the numbers the site reserves, and a thread's eight
// decisions of a 16 x 16 tile (rows g, g + 8; keys 2t, 2t + 1 and + 8) are one Philox block.
TEST(Rng, AttentionDropLayoutGivesEachElementItsOwnBits) {
  for (const int64_t T : {1, 7, 16, 19, 33, 64, 130}) {
    const int64_t BH = 3;
    const uint64_t n = attention_drop_numbers(BH, T);
    std::vector<uint8_t> used(2 * n, 0);
    for (int64_t bh = 0; bh < BH; ++bh)
      for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j < T; ++j) {
          const uint64_t x = attention_drop_number(bh, i, j, T);
          ASSERT_LT(x, n) << T;
          ASSERT_EQ(used[2 * x + j % 2], 0) << "T " << T << " bh " << bh << " i " << i << " j " << j;
          used[2 * x + j % 2] = 1;
          const int64_t i0 = i / 16 * 16 + i % 8, j0 = j / 16 * 16 + (j % 8) / 2 * 2;
          EXPECT_EQ(x / 4, attention_drop_number(bh, i0, j0, T) / 4);  // the block of (g, 2t)
        }
  }
  EXPECT_EQ(dropout_threshold16(0.1f), 6554u);
  EXPECT_EQ(dropout_threshold16(0.5f), 32768u);
  EXPECT_EQ(dropout_threshold16(0.0f), 0u);
  EXPECT_EQ(attention_drop_bits(0xABCD1234u, 0), 0x1234u);
  EXPECT_EQ(attention_drop_bits(0xABCD1234u, 3), 0xABCDu);
}

TEST(Rng, FillMatchesScalarPhiloxAtAnyAlignment) {
  Rng rng{0x1234567890abcdefull, 0};
  // Includes whole runs of 16 blocks (the transposed fast path) and block numbers crossing 2^32.
  for (uint64_t first : {0ull, 1ull, 3ull, 62ull, 1000001ull, 4ull * 0xFFFFFFF8ull + 2}) {
    for (size_t n : {1u, 5u, 63u, 64u, 65u, 200u, 1024u}) {
      std::vector<uint32_t> got(n);
      rng.fill_u32(first, n, got.data());
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(got[i], rng.block4((first + i) >> 2)[(first + i) & 3]);
    }
  }
}

#include "kernels/vecmath.h"
TEST(VecMath, ExpErfTanhAccuracy) {
  double worst_exp = 0, worst_erf = 0, worst_tanh = 0;
  for (double x = -20; x <= 20; x += 0.001) {
    const float xf = static_cast<float>(x);
    worst_exp = std::max(worst_exp, std::fabs(kernels::vexp(xf) - std::exp(double(xf))) / std::exp(double(xf)));
    worst_erf = std::max(worst_erf, std::fabs(kernels::verf(xf) - std::erf(double(xf))));
    worst_tanh = std::max(worst_tanh, std::fabs(kernels::vtanh(xf) - std::tanh(double(xf))));
  }
  EXPECT_LT(worst_exp, 3e-7);   // relative
  EXPECT_LT(worst_erf, 5e-7);   // absolute
  EXPECT_LT(worst_tanh, 3e-7);  // absolute
}

TEST(Dtype, FastF16ConversionsMatchReference) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float a = f16_to_f32(static_cast<uint16_t>(h)), b = f16_to_f32_ref(static_cast<uint16_t>(h));
    ASSERT_TRUE(a == b || (std::isnan(a) && std::isnan(b))) << h;
  }
  std::mt19937 g(5);
  std::vector<float> xs = {0.0f,    -0.0f,    65504.0f, 65519.99f, 65520.0f, 1e9f,     -1e9f,
                           6.1e-5f, 5.96e-8f, 2.98e-8f, 2.99e-8f,  1e-10f,   INFINITY, -INFINITY};
  for (int i = 0; i < 2000000; ++i) {
    uint32_t u = g();
    float f;
    std::memcpy(&f, &u, 4);
    if (!std::isnan(f)) xs.push_back(f);
  }
  for (float f : xs) ASSERT_EQ(f32_to_f16(f), f32_to_f16_ref(f)) << f;
  // the bulk conversions (F16C eight at a time, a scalar tail), parallel or not
  for (bool par : {true, false}) {
    std::vector<uint16_t> h(xs.size());
    to_f16(xs.data(), h.data(), xs.size(), par);
    for (size_t i = 0; i < xs.size(); ++i) ASSERT_EQ(h[i], f32_to_f16_ref(xs[i])) << xs[i];
    std::vector<uint16_t> all(65536 + 5);
    for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i);
    std::vector<float> w(all.size());
    from_f16(all.data(), w.data(), all.size(), par);
    for (size_t i = 0; i < all.size(); ++i) {
      const float r = f16_to_f32_ref(all[i]);
      ASSERT_TRUE(w[i] == r || (std::isnan(w[i]) && std::isnan(r))) << i;
    }
  }
}

// The backends' 16-bit wire conversions (NCCL's --allreduce-dtype bf16|fp16) give the scalar
// conversions' bits, on the CPU and through the staged device interface (its own buffers).
TEST(Dtype, BackendNarrowWiden16) {
  std::mt19937 g(9);
  std::vector<float> x(20001);
  for (auto& v : x) {
    uint32_t u = g();
    std::memcpy(&v, &u, 4);
    if (std::isnan(v)) v = 1.5f;
  }
  x[0] = 65520.0f, x[1] = -0.0f, x[2] = 2.98e-8f, x[3] = 1.00390625f, x[4] = INFINITY;
  const size_t n = x.size();
  for (Backend* be : {&cpu_backend(), &staged_backend()})
    for (bool bf : {true, false}) {
      float* dx = static_cast<float*>(be->alloc(n * 4));
      float* dw = static_cast<float*>(be->alloc(n * 4));
      uint16_t* d16 = static_cast<uint16_t*>(be->alloc(n * 2));
      be->upload(dx, x.data(), n * 4);
      be->narrow16(d16, dx, static_cast<int64_t>(n), bf);
      be->widen16(dw, d16, static_cast<int64_t>(n), bf);
      std::vector<uint16_t> h16(n);
      std::vector<float> w(n);
      be->download(h16.data(), d16, n * 2);
      be->download(w.data(), dw, n * 4);
      for (size_t i = 0; i < n; ++i) {
        const uint16_t want = bf ? f32_to_bf16(x[i]) : f32_to_f16(x[i]);
        ASSERT_EQ(h16[i], want) << be->describe() << (bf ? " bf16 " : " fp16 ") << x[i];
        const float back = bf ? bf16_to_f32(want) : f16_to_f32(want);
        ASSERT_EQ(std::memcmp(&w[i], &back, 4), 0) << be->describe() << (bf ? " bf16 " : " fp16 ") << x[i];
      }
      be->free(dx);
      be->free(dw);
      be->free(d16);
    }
}

// The bf16 operands the model keeps (LinearIo: x's rounding made once in the forward and taken by
// the backward's dW product; gelu's output and gradient rounded by the activation itself) change no
// bit of any result, on the CPU and through the staged device interface; the kept copies are the
// roundings of their fp32 tensors.
TEST(Backend, KeptBf16OperandsGiveTheSameBits) {
  const int64_t M = 37, N = 29, K = 48;
  std::mt19937 g(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto rv = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = nd(g);
    return v;
  };
  const auto x = rv(M * K), W = rv(N * K), b = rv(N), dy = rv(M * N);
  for (Backend* be : {&cpu_backend(), &staged_backend()}) {
    auto up = [&](const std::vector<float>& v) {
      float* p = static_cast<float*>(be->alloc(v.size() * 4));
      be->upload(p, v.data(), v.size() * 4);
      return p;
    };
    auto down = [&](const float* p, int64_t n) {
      std::vector<float> h(static_cast<size_t>(n));
      be->download(h.data(), p, h.size() * 4);
      return h;
    };
    auto down16 = [&](const bf16_t* p, int64_t n) {
      std::vector<bf16_t> h(static_cast<size_t>(n));
      be->download(h.data(), p, h.size() * 2);
      return h;
    };
    auto rounded = [](const std::vector<float>& v) {
      std::vector<bf16_t> r(v.size());
      for (size_t i = 0; i < v.size(); ++i) r[i] = f32_to_bf16(v[i]);
      return r;
    };
    float *dx = up(x), *dW = up(W), *db = up(b), *ddy = up(dy);
    auto* x16 = static_cast<bf16_t*>(be->alloc(static_cast<size_t>(M * K) * 2));
    auto* dy16 = static_cast<bf16_t*>(be->alloc(static_cast<size_t>(M * N) * 2));
    be->upload(dy16, rounded(dy).data(), static_cast<size_t>(M * N) * 2);
    std::vector<float> zeros_k(static_cast<size_t>(M * K), 0.25f), zeros_w(static_cast<size_t>(N * K), 0.25f),
        zeros_b(static_cast<size_t>(N), 0.25f);
    // plain, then with the kept and given roundings
    float *y1 = up(std::vector<float>(M * N)), *y2 = up(std::vector<float>(M * N)), *y3 = up(std::vector<float>(M * N));
    be->linear_forward(y1, dx, dW, db, M, N, K, Precision::BF16, nullptr);
    be->linear_forward(y2, dx, dW, db, M, N, K, Precision::BF16, nullptr, LinearIo{nullptr, x16, nullptr});
    EXPECT_EQ(down16(x16, M * K), rounded(x)) << be->describe();
    EXPECT_EQ(down(y1, M * N), down(y2, M * N)) << be->describe();
    be->linear_forward(y3, dx, dW, db, M, N, K, Precision::BF16, nullptr, LinearIo{x16, nullptr, nullptr});
    EXPECT_EQ(down(y1, M * N), down(y3, M * N)) << be->describe();
    float *gx1 = up(zeros_k), *gw1 = up(zeros_w), *gb1 = up(zeros_b);
    float *gx2 = up(zeros_k), *gw2 = up(zeros_w), *gb2 = up(zeros_b);
    be->linear_backward(gx1, gw1, gb1, ddy, dx, dW, M, N, K, Precision::BF16, nullptr);
    be->linear_backward(gx2, gw2, gb2, ddy, dx, dW, M, N, K, Precision::BF16, nullptr, LinearIo{x16, nullptr, dy16});
    EXPECT_EQ(down(gx1, M * K), down(gx2, M * K)) << be->describe();
    EXPECT_EQ(down(gw1, N * K), down(gw2, N * K)) << be->describe();
    EXPECT_EQ(down(gb1, N), down(gb2, N)) << be->describe();
    // gelu with its rounding: fp32 outputs unchanged, the copies their roundings
    const int64_t n = M * K;
    float *o1 = up(std::vector<float>(n)), *o2 = up(std::vector<float>(n));
    float *d1 = up(zeros_k), *d2 = up(zeros_k);
    auto* o16 = static_cast<bf16_t*>(be->alloc(static_cast<size_t>(n) * 2));
    auto* d16 = static_cast<bf16_t*>(be->alloc(static_cast<size_t>(n) * 2));
    be->gelu_forward(o1, dx, n, Activation::GeluErf);
    be->gelu_forward(o2, dx, n, Activation::GeluErf, o16);
    be->gelu_backward(d1, dx, o1, n, Activation::GeluErf);
    be->gelu_backward(d2, dx, o1, n, Activation::GeluErf, d16, false);
    EXPECT_EQ(down(o1, n), down(o2, n)) << be->describe();
    EXPECT_EQ(down(d1, n), down(d2, n)) << be->describe();
    EXPECT_EQ(down16(o16, n), rounded(down(o1, n))) << be->describe();
    EXPECT_EQ(down16(d16, n), rounded(down(d1, n))) << be->describe();
    // gelu_forward with its input's rounding (bf16 training's FFN1 output); gelu_bias_backward on that
    // rounding = gelu_backward on the widened values, overwriting, rounded, and their bias gradient
    {
      auto* x16k = static_cast<bf16_t*>(be->alloc(static_cast<size_t>(n) * 2));
      auto* g16 = static_cast<bf16_t*>(be->alloc(static_cast<size_t>(n) * 2));
      float* o3 = up(std::vector<float>(n));
      be->gelu_forward(o3, dx, n, Activation::GeluErf, nullptr, x16k);
      EXPECT_EQ(down(o1, n), down(o3, n)) << be->describe();
      EXPECT_EQ(down16(x16k, n), rounded(x)) << be->describe();
      std::vector<float> xw(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) xw[i] = bf16_to_f32(rounded(x)[i]);
      float *dxw = up(xw), *dw = up(std::vector<float>(n, 3.0f)), *scratch = up(std::vector<float>(n, 7.0f));
      float *bias1 = up(std::vector<float>(K, 0.25f)), *bias2 = up(std::vector<float>(K, 0.25f));
      be->gelu_backward(dw, dxw, o1, n, Activation::GeluErf, nullptr, /*overwrite=*/true);
      be->bias_backward(bias1, dw, M, K);
      be->gelu_bias_backward(g16, bias2, x16k, o1, M, K, Activation::GeluErf, scratch, nullptr);
      EXPECT_EQ(down16(g16, n), rounded(down(dw, n))) << be->describe();
      EXPECT_EQ(down(bias1, K), down(bias2, K)) << be->describe();
      {  // recomputing the GELU's output too: gelu_forward16's bits, the same gradients
        auto* r16 = static_cast<bf16_t*>(be->alloc(static_cast<size_t>(n) * 2));
        auto* f16 = static_cast<bf16_t*>(be->alloc(static_cast<size_t>(n) * 2));
        auto* g16b = static_cast<bf16_t*>(be->alloc(static_cast<size_t>(n) * 2));
        float* bias3 = up(std::vector<float>(K, 0.25f));
        be->gelu_forward16(f16, x16k, n, Activation::GeluErf);
        be->gelu_bias_backward(g16b, bias3, x16k, o1, M, K, Activation::GeluErf, scratch, r16);
        EXPECT_EQ(down16(r16, n), down16(f16, n)) << be->describe();
        EXPECT_EQ(down16(g16b, n), down16(g16, n)) << be->describe();
        EXPECT_EQ(down(bias3, K), down(bias2, K)) << be->describe();
        for (void* p :
             {static_cast<void*>(r16), static_cast<void*>(f16), static_cast<void*>(g16b), static_cast<void*>(bias3)})
          be->free(p);
      }
      EXPECT_NE(down(dw, n), down(d1, n)) << "the widened input must differ from the fp32 one somewhere";
      for (void* p :
           {static_cast<void*>(x16k), static_cast<void*>(g16), static_cast<void*>(o3), static_cast<void*>(dxw),
            static_cast<void*>(dw), static_cast<void*>(scratch), static_cast<void*>(bias1), static_cast<void*>(bias2)})
        be->free(p);
    }
    // the residual LayerNorm and the dropout backward with theirs
    const Rng rng{77, 0};
    float *e1 = up(zeros_k), *e2 = up(zeros_k);
    be->dropout_backward(e1, dx, n, 0.1f, rng, 5);
    be->dropout_backward(e2, dx, n, 0.1f, rng, 5, d16, false);
    EXPECT_EQ(down(e1, n), down(e2, n)) << be->describe();
    EXPECT_EQ(down16(d16, n), rounded(down(e1, n))) << be->describe();
    float *lw = up(std::vector<float>(K, 1.25f)), *lb = up(std::vector<float>(K, -0.5f));
    float *ls = up(zeros_k), *lm = up(std::vector<float>(M)), *lr = up(std::vector<float>(M));
    be->residual_layernorm_forward(o1, ls, lm, lr, dx, d1, lw, lb, M, K, 1e-12f);
    be->residual_layernorm_forward(o2, ls, lm, lr, dx, d1, lw, lb, M, K, 1e-12f, o16);
    EXPECT_EQ(down(o1, n), down(o2, n)) << be->describe();
    EXPECT_EQ(down16(o16, n), rounded(down(o1, n))) << be->describe();
    // overwrite: garbage in the destination, written as if it held +0 (the bits of zeroing it first)
    float *z1 = up(std::vector<float>(n)), *z2 = up(std::vector<float>(n, 7.0f));
    be->gelu_backward(z1, dx, o1, n, Activation::GeluErf);
    be->gelu_backward(z2, dx, o1, n, Activation::GeluErf, nullptr, true);
    EXPECT_EQ(down(z1, n), down(z2, n)) << be->describe();
    be->upload(z1, std::vector<float>(n).data(), n * 4);
    be->upload(z2, std::vector<float>(n, 7.0f).data(), n * 4);
    be->dropout_backward(z1, dx, n, 0.1f, rng, 5);
    be->dropout_backward(z2, dx, n, 0.1f, rng, 5, nullptr, true);
    EXPECT_EQ(down(z1, n), down(z2, n)) << be->describe();
    be->upload(z1, std::vector<float>(n).data(), n * 4);
    be->upload(z2, std::vector<float>(n, 7.0f).data(), n * 4);
    float *ldw = up(std::vector<float>(K)), *ldb = up(std::vector<float>(K));  // (added to: not compared)
    be->layernorm_backward(z1, ldw, ldb, d1, ls, lw, lm, lr, M, K);
    be->layernorm_backward(z2, ldw, ldb, d1, ls, lw, lm, lr, M, K, true);
    EXPECT_EQ(down(z1, n), down(z2, n)) << be->describe();
    be->upload(z1, std::vector<float>(n).data(), n * 4);
    be->upload(z2, std::vector<float>(n, 7.0f).data(), n * 4);
    be->linear_backward(z1, gw1, gb1, ddy, dx, dW, M, N, K, Precision::BF16, nullptr);
    be->linear_backward(z2, gw1, gb1, ddy, dx, dW, M, N, K, Precision::BF16, nullptr,
                        LinearIo{nullptr, nullptr, nullptr, true});
    EXPECT_EQ(down(z1, n), down(z2, n)) << be->describe();
    for (float* q : {e1, e2, lw, lb, ls, lm, lr, z1, z2, ldw, ldb}) be->free(q);
    for (void* p : {static_cast<void*>(dx),  static_cast<void*>(dW),   static_cast<void*>(db),  static_cast<void*>(ddy),
                    static_cast<void*>(x16), static_cast<void*>(dy16), static_cast<void*>(y1),  static_cast<void*>(y2),
                    static_cast<void*>(y3),  static_cast<void*>(gx1),  static_cast<void*>(gw1), static_cast<void*>(gb1),
                    static_cast<void*>(gx2), static_cast<void*>(gw2),  static_cast<void*>(gb2), static_cast<void*>(o1),
                    static_cast<void*>(o2),  static_cast<void*>(d1),   static_cast<void*>(d2),  static_cast<void*>(o16),
                    static_cast<void*>(d16)})
      be->free(p);
  }
}

// The integer keep test used by the vectorised dropout loops equals the float one for every
// 24-bit value at the probabilities in use and at awkward ones.
TEST(Dropout, IntegerThresholdEqualsFloatTest) {
  for (float p : {0.1f, 0.2f, 0.5f, 0.15f, 1e-7f, 0.3333333f, 0.9999999f}) {
    const uint32_t thr = bertcc::dropout_threshold(p);
    for (uint32_t v = thr > 3 ? thr - 3 : 0; v < std::min(thr + 3, 1u << 24); ++v)
      EXPECT_EQ(bertcc::dropout_keep(v << 8, p), (v >= thr)) << p << " " << v;
    for (uint32_t v = 0; v < (1u << 24); v += 4099)
      EXPECT_EQ(bertcc::dropout_keep((v << 8) | 0xAB, p), (v >= thr)) << p << " " << v;
  }
}
