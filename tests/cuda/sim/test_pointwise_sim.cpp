// The four-element GELU and dropout kernels (src/cuda/pointwise_kernels.cuh), run on the CPU by
// tests/cuda/sim/sim_runtime.h: every variant (16-byte accesses or element by element, one Philox
// block per group or per element, fp32 and/or bf16 outputs, add or overwrite) on buffers whose
// lengths end in every partial group, against
// - the one-element-per-thread formulas the kernels replaced, bit for bit (GELU), and
// - the CPU kernels: dropout bit for bit (the same stream, the same fused multiply-add), GELU within
//   2e-6 (erf form) or 1e-5 (tanh form): the CPU's vectorised erf and tanh are not libm's.
// Also the fused FFN1 backward start (gelu_bwd_colsum) against gelu_bwd and the column-sum order.
// Exit 0 when all agree, 1 otherwise.
#define BERTCC_CUDA_SIM 1
#include "sim_check.h"
#include "sim_runtime.h"
// the kernels' source, as nvcc compiles it for the GPU
#include <cstdio>
#include <random>
#include <string>

#include "bertcc/rng.h"
#include "cuda/pointwise_kernels.cuh"
#include "kernels/gemm.h"
#include "kernels/kernels.h"

using namespace bertcc;
using namespace sim_check;

namespace {

unsigned groups(int64_t n) { return cuda::grid_for((n + 3) / 4, 128); }

using Buf = sim_check::AlignedBuf<float>;
using Buf16 = sim_check::AlignedBuf<uint16_t>;

template <bool Vec>
void gelu_case(int64_t n, int shift, bool erf_form, std::mt19937& gen) {
  std::normal_distribution<float> nd(0.0f, 2.0f);
  const float tol = erf_form ? 2e-6f : 1e-5f;  // the CPU's vectorised erf and tanh against libm's
  Buf x(n, shift), y(n, shift), ycpu(n, shift);
  Buf16 y16(n, shift), y16only(n, shift), x16(n, shift);
  for (int64_t i = 0; i < n; ++i) x.p[i] = nd(gen);
  x.p[0] = -0.0f;
  sim::launch({groups(n), 1, 1}, 128, 0, [&] { cuda::pw::gelu_fwd<Vec>(y.p, y16.p, x16.p, x.p, n, erf_form); });
  sim::launch({groups(n), 1, 1}, 128, 0,
              [&] { cuda::pw::gelu_fwd<Vec>(nullptr, y16only.p, nullptr, x.p, n, erf_form); });
  std::vector<float> want(static_cast<size_t>(n));
  std::vector<uint16_t> want16(static_cast<size_t>(n)), wantx16(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    want[i] = cuda::pw::gelu_one(x.p[i], erf_form);
    want16[i] = f32_to_bf16(want[i]);
    wantx16[i] = f32_to_bf16(x.p[i]);
  }
  const std::string tag = std::string(erf_form ? "erf" : "tanh") + " n=" + std::to_string(n) +
                          (Vec ? " vec" : " scalar") + (shift ? " unaligned" : "");
  expect_bits("gelu forward " + tag + " vs one per thread", want.data(), y.p, static_cast<size_t>(n));
  expect_bits("gelu forward " + tag + " bf16 copy", want16.data(), y16.p, static_cast<size_t>(n));
  expect_bits("gelu forward " + tag + " bf16 only (no fp32 output)", want16.data(), y16only.p, static_cast<size_t>(n));
  expect_bits("gelu forward " + tag + " the input's bf16 copy", wantx16.data(), x16.p, static_cast<size_t>(n));
  // from a bf16 input (the FFN1 product's rounding): gelu of the widened input, rounded
  Buf16 yb(n, shift);
  sim::launch({groups(n), 1, 1}, 128, 0,
              [&] { cuda::pw::gelu_fwd<Vec, uint16_t>(nullptr, yb.p, nullptr, x16.p, n, erf_form); });
  std::vector<uint16_t> wantb(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) wantb[i] = f32_to_bf16(cuda::pw::gelu_one(bf16_to_f32(x16.p[i]), erf_form));
  expect_bits("gelu forward " + tag + " from a bf16 input", wantb.data(), yb.p, static_cast<size_t>(n));
  if (shift == 0 && Vec) {
    kernels::gelu_forward(ycpu.p, x.p, n, erf_form ? Activation::GeluErf : Activation::GeluTanh);
    expect_close("gelu forward " + tag + " vs the CPU kernel", ycpu.p, y.p, static_cast<size_t>(n), tol);
  }
  // backward, adding and overwriting
  for (const bool overwrite : {false, true}) {
    Buf g(n, shift), d(n, shift), dcpu(n, shift);
    Buf16 d16(n, shift);
    std::vector<float> want_d(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      g.p[i] = nd(gen);
      d.p[i] = dcpu.p[i] = overwrite ? std::nanf("") : nd(gen);  // overwrite must not read it
      want_d[i] = (overwrite ? 0.0f : d.p[i]) + g.p[i] * cuda::pw::gelu_grad_one(x.p[i], erf_form);
      want16[i] = f32_to_bf16(want_d[i]);
    }
    sim::launch({groups(n), 1, 1}, 128, 0,
                [&] { cuda::pw::gelu_bwd<Vec>(d.p, d16.p, x.p, g.p, n, erf_form, overwrite); });
    const std::string t2 = tag + (overwrite ? " overwrite" : " add");
    expect_bits("gelu backward " + t2 + " vs one per thread", want_d.data(), d.p, static_cast<size_t>(n));
    expect_bits("gelu backward " + t2 + " bf16 copy", want16.data(), d16.p, static_cast<size_t>(n));
    if (shift == 0 && Vec) {
      if (overwrite)
        for (int64_t i = 0; i < n; ++i) dcpu.p[i] = 0.0f;
      kernels::gelu_backward(dcpu.p, x.p, g.p, n, erf_form ? Activation::GeluErf : Activation::GeluTanh);
      expect_close("gelu backward " + t2 + " vs the CPU kernel", dcpu.p, d.p, static_cast<size_t>(n), tol);
    }
  }
}

template <bool Vec, bool Quad>
void dropout_case(int64_t n, int shift, uint64_t base, std::mt19937& gen) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const float p = 0.1f;
  const Rng rng(0x5eed1234abcdull, 0);
  Buf x(n, shift), y(n, shift), ycpu(n, shift);
  for (int64_t i = 0; i < n; ++i) x.p[i] = nd(gen);
  sim::launch({groups(n), 1, 1}, 128, 0, [&] {
    cuda::pw::dropout_fwd<Vec, Quad>(y.p, x.p, n, 1.0f / (1.0f - p), dropout_threshold(p), rng.seed, base);
  });
  kernels::dropout_forward(ycpu.p, x.p, n, p, rng, base);
  const std::string tag = "n=" + std::to_string(n) + " base=" + std::to_string(base) + (Vec ? " vec" : " scalar") +
                          (Quad ? " quad" : " per-element") + (shift ? " unaligned" : "");
  expect_bits("dropout forward " + tag + " vs the CPU kernel", ycpu.p, y.p, static_cast<size_t>(n));
  size_t dropped = 0;
  for (int64_t i = 0; i < n; ++i) dropped += y.p[i] == 0.0f;
  if (n >= 4000 && (dropped < static_cast<size_t>(n / 20) || dropped > static_cast<size_t>(n / 5)))
    report("dropout forward " + tag + ": dropped share", 1, 1, "off");
  for (const bool overwrite : {false, true}) {
    Buf g(n, shift), d(n, shift), dcpu(n, shift);
    Buf16 d16(n, shift);
    for (int64_t i = 0; i < n; ++i) {
      g.p[i] = nd(gen);
      d.p[i] = overwrite ? std::nanf("") : nd(gen);
      dcpu.p[i] = overwrite ? 0.0f : d.p[i];
    }
    sim::launch({groups(n), 1, 1}, 128, 0, [&] {
      cuda::pw::dropout_bwd<Vec, Quad>(d.p, d16.p, g.p, n, 1.0f / (1.0f - p), dropout_threshold(p), rng.seed, base,
                                       overwrite);
    });
    kernels::dropout_backward(dcpu.p, g.p, n, p, rng, base);
    std::vector<uint16_t> want16(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) want16[i] = f32_to_bf16(dcpu.p[i]);
    const std::string t2 = tag + (overwrite ? " overwrite" : " add");
    expect_bits("dropout backward " + t2 + " vs the CPU kernel", dcpu.p, d.p, static_cast<size_t>(n));
    expect_bits("dropout backward " + t2 + " bf16 copy", want16.data(), d16.p, static_cast<size_t>(n));
  }
}

// The fused FFN1 backward start (gelu_bwd_colsum), which reads its input as bf16: its bf16 gradient
// against gelu_bwd's rounding on the widened input, its column-sum partials bit for bit against
// colsum_pass1's order over gelu_bwd's fp32 gradient, and the bias gradient they make against the
// CPU's bias_backward (within 1e-5).
void gelu_bias_case(int64_t M, int64_t N, bool erf_form, std::mt19937& gen) {
  constexpr int kRows = 256;  // elementwise.cu's kColRows
  std::normal_distribution<float> nd(0.0f, 2.0f);
  const size_t n = static_cast<size_t>(M * N);
  std::vector<float> x(n), g(n);  // x: the widened bf16 input
  std::vector<uint16_t> x16(n);
  for (size_t i = 0; i < n; ++i) {
    x16[i] = f32_to_bf16(nd(gen));
    x[i] = bf16_to_f32(x16[i]);
    g[i] = nd(gen);
  }
  std::vector<float> d(n, std::nanf(""));
  std::vector<uint16_t> d16(n);
  sim::launch({groups(static_cast<int64_t>(n)), 1, 1}, 128, 0, [&] {
    cuda::pw::gelu_bwd<false>(d.data(), d16.data(), x.data(), g.data(), static_cast<int64_t>(n), erf_form, true);
  });
  const int64_t chunks = (M + kRows - 1) / kRows;
  std::vector<uint16_t> f16(n);
  std::vector<float> part(static_cast<size_t>(chunks * N), std::nanf(""));
  sim::launch({static_cast<unsigned>((N + 31) / 32), static_cast<unsigned>(chunks), 1}, 256, 0, [&] {
    cuda::pw::gelu_bwd_colsum<kRows>(f16.data(), part.data(), x16.data(), g.data(), M, N, erf_form, nullptr);
  });
  // with the GELU's output recomputed too: the same gradient and partials, and gelu_fwd's bits from
  // the same bf16 input (16-byte and element-by-element forms)
  std::vector<uint16_t> f16b(n), o16(n, 0xFFFF), fwd16(n, 0xFFFF), fwd16s(n, 0xFFFF);
  std::vector<float> partb(part.size(), std::nanf(""));
  sim::launch({static_cast<unsigned>((N + 31) / 32), static_cast<unsigned>(chunks), 1}, 256, 0, [&] {
    cuda::pw::gelu_bwd_colsum<kRows>(f16b.data(), partb.data(), x16.data(), g.data(), M, N, erf_form, o16.data());
  });
  sim::launch({groups(static_cast<int64_t>(n)), 1, 1}, 128, 0, [&] {
    cuda::pw::gelu_fwd<true, uint16_t>(nullptr, fwd16.data(), nullptr, x16.data(), static_cast<int64_t>(n), erf_form);
  });
  sim::launch({groups(static_cast<int64_t>(n)), 1, 1}, 128, 0, [&] {
    cuda::pw::gelu_fwd<false, uint16_t>(nullptr, fwd16s.data(), nullptr, x16.data(), static_cast<int64_t>(n), erf_form);
  });
  std::vector<float> want(part.size());
  for (int64_t k = 0; k < chunks; ++k)
    for (int64_t c = 0; c < N; ++c) {
      float lanes[8];
      for (int y = 0; y < 8; ++y) {
        lanes[y] = 0.0f;
        for (int64_t r = k * kRows + y; r < std::min(M, (k + 1) * kRows); r += 8) lanes[y] += d[r * N + c];
      }
      float t = 0.0f;
      for (int y = 0; y < 8; ++y) t += lanes[y];
      want[k * N + c] = t;
    }
  std::vector<float> db(static_cast<size_t>(N), 0.5f), dbcpu(static_cast<size_t>(N), 0.5f);
  for (int64_t c = 0; c < N; ++c) {
    float t = 0.0f;
    for (int64_t k = 0; k < chunks; ++k) t += part[k * N + c];  // colsum_pass2's order
    db[c] += t;
  }
  kernels::bias_backward(dbcpu.data(), d.data(), M, N);
  const std::string tag = std::string(erf_form ? "erf" : "tanh") + " " + std::to_string(M) + "x" + std::to_string(N);
  expect_bits("gelu bias backward " + tag + ": bf16 gradient = gelu backward's", d16.data(), f16.data(), n);
  expect_bits("gelu bias backward " + tag + ": column partials in colsum order", want.data(), part.data(), want.size());
  expect_close("gelu bias backward " + tag + ": bias gradient vs the CPU's", dbcpu.data(), db.data(),
               static_cast<size_t>(N), 1e-5f);
  expect_bits("gelu bias backward " + tag + " recomputing: bf16 gradient", f16.data(), f16b.data(), n);
  expect_bits("gelu bias backward " + tag + " recomputing: partials", part.data(), partb.data(), part.size());
  expect_bits("gelu bias backward " + tag + ": recomputed output = gelu_fwd's (16-byte)", fwd16.data(), o16.data(), n);
  expect_bits("gelu bias backward " + tag + ": recomputed output = gelu_fwd's (by element)", fwd16s.data(), o16.data(),
              n);
}

}  // namespace

int main() {
  std::mt19937 gen(11);
  for (const int64_t n : {1, 3, 4, 7, 1002, 4099}) {
    for (const bool erf_form : {true, false}) {
      gelu_case<true>(n, 0, erf_form, gen);
      gelu_case<false>(n, 0, erf_form, gen);
      gelu_case<false>(n, 1, erf_form, gen);
    }
    for (const uint64_t base : {uint64_t{0}, uint64_t{4096}, uint64_t{4} * 1000003}) {
      dropout_case<true, true>(n, 0, base, gen);
      dropout_case<false, true>(n, 1, base, gen);
      dropout_case<true, false>(n, 0, base, gen);  // the per-element draws give the same numbers
    }
    for (const uint64_t base : {uint64_t{1}, uint64_t{4098}, uint64_t{4} * 1000003 + 3}) {
      dropout_case<true, false>(n, 0, base, gen);
      dropout_case<false, false>(n, 1, base, gen);
    }
  }
  for (const bool erf_form : {true, false}) {
    gelu_bias_case(300, 70, erf_form, gen);  // a partial column block and a partial row chunk
    gelu_bias_case(37, 32, erf_form, gen);
  }
  std::printf("%d failed\n", g_fail);
  return g_fail ? 1 : 0;
}
