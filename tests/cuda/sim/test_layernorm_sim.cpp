// The register-row LayerNorm kernels (src/cuda/layernorm_kernels.cuh), run on the CPU by
// tests/cuda/sim/sim_runtime.h, against the CPU kernels: forward (plain and after a residual sum)
// within 1e-5, its sum bit for bit, its bf16 copy the bits of rounding its output, mean and rstd
// within 1e-5; the backward's input gradient within 1e-5, added and overwritten (garbage in the
// buffer written as if it held +0: the bits of adding to zeros); with the dropout fused in, the
// residual sum bit for bit against the CPU's dropout then sum, and the branch gradient bit for
// bit against the CPU's dropout backward of the same input gradient. Row lengths cover one to eight
// float4 groups per lane, with the last lanes idle (C / 4 not a multiple of 32). Exit 0 when all
// agree, 1 otherwise.
#define BERTCC_CUDA_SIM 1
#include "sim_check.h"
#include "sim_runtime.h"
// the kernels' source, as nvcc compiles it for the GPU
#include <cstdio>
#include <random>
#include <string>

#include "bertcc/rng.h"
#include "cuda/layernorm_kernels.cuh"
#include "kernels/kernels.h"

using namespace bertcc;
using namespace sim_check;

namespace {

void run_case(int64_t N, int64_t C, std::mt19937& gen) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f), u2(-2.0f, 3.0f);
  auto randv = [&](size_t n, std::uniform_real_distribution<float>& d) {
    std::vector<float> v(n);
    for (auto& x : v) x = d(gen);
    return v;
  };
  const size_t NC = static_cast<size_t>(N * C);
  auto x = randv(NC, u2), r = randv(NC, u), w = randv(static_cast<size_t>(C), u), b = randv(static_cast<size_t>(C), u),
       dout = randv(NC, u);
  const int V = cuda::lnr::groups_for(C);
  const std::string tag = "N=" + std::to_string(N) + " C=" + std::to_string(C) + " (" + std::to_string(V) + " groups)";
  if (V == 0) {
    report("groups_for(" + std::to_string(C) + ")", 1, 1, "not taken");
    return;
  }
  const unsigned grid = cuda::grid_for(N, 256 / 32);
  for (const bool residual : {false, true}) {
    std::vector<float> out(NC), mean(N), rstd(N), sum(NC);
    if (residual)
      kernels::residual_layernorm_forward(out.data(), sum.data(), mean.data(), rstd.data(), x.data(), r.data(),
                                          w.data(), b.data(), N, C, 1e-5f);
    else
      kernels::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-12f);
    std::vector<float> gout(NC, -7.0f), gmean(N), grstd(N), gsum(NC, -7.0f);
    std::vector<uint16_t> g16(NC);
    if (residual)
      cuda::lnr::dispatch_groups(V, [&](auto v) {
        sim::launch({grid, 1, 1}, 256, 0, [&] {
          cuda::lnr::fwd<decltype(v)::value, true>(gout.data(), g16.data(), gsum.data(), gmean.data(), grstd.data(),
                                                   x.data(), r.data(), w.data(), b.data(), N, C, 1e-5f,
                                                   cuda::lnr::RowDropout{});
        });
      });
    if (!residual) {  // the plain kernel: no sum, no bf16 copy
      std::vector<float> pout(NC, -7.0f), pmean(N), prstd(N);
      cuda::lnr::dispatch_groups(V, [&](auto v) {
        sim::launch({grid, 1, 1}, 256, 0, [&] {
          cuda::lnr::fwd<decltype(v)::value, false>(pout.data(), nullptr, nullptr, pmean.data(), prstd.data(), x.data(),
                                                    nullptr, w.data(), b.data(), N, C, 1e-12f, cuda::lnr::RowDropout{});
        });
      });
      expect_close("layernorm forward " + tag, out, pout, 1e-5f);
      expect_close("layernorm forward mean " + tag, mean, pmean, 1e-5f);
      expect_close("layernorm forward rstd " + tag, rstd, prstd, 1e-5f);
      continue;
    }
    expect_bits("residual layernorm forward sum " + tag, sum, gsum);
    expect_close("residual layernorm forward " + tag, out, gout, 1e-5f);
    expect_close("residual layernorm forward rstd " + tag, rstd, grstd, 1e-5f);
    std::vector<uint16_t> want16(NC);
    for (size_t i = 0; i < NC; ++i) want16[i] = f32_to_bf16(gout[i]);
    expect_bits("residual layernorm forward bf16 copy " + tag, want16, g16);
    // no sum kept (a forward no backward follows): the same output bits; the CPU kernel likewise
    std::vector<float> nout(NC, -7.0f), nmean(N), nrstd(N), cout2(NC);
    cuda::lnr::dispatch_groups(V, [&](auto v) {
      sim::launch({grid, 1, 1}, 256, 0, [&] {
        cuda::lnr::fwd<decltype(v)::value, true>(nout.data(), nullptr, nullptr, nmean.data(), nrstd.data(), x.data(),
                                                 r.data(), w.data(), b.data(), N, C, 1e-5f, cuda::lnr::RowDropout{});
      });
    });
    expect_bits("residual layernorm forward without a sum " + tag, gout, nout);
    kernels::residual_layernorm_forward(cout2.data(), nullptr, nmean.data(), nrstd.data(), x.data(), r.data(), w.data(),
                                        b.data(), N, C, 1e-5f);
    expect_bits("residual layernorm forward without a sum, CPU " + tag, out, cout2);
  }
  // backward (input gradient) against the CPU's, on the CPU's mean and rstd
  std::vector<float> mean(N), rstd(N), tmp(NC);
  kernels::layernorm_forward(tmp.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-12f);
  std::vector<float> dinp(NC, 0.25f), dw(static_cast<size_t>(C), 0.0f), db(static_cast<size_t>(C), 0.0f);
  kernels::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(),
                              rstd.data(), N, C);
  std::vector<float> gd(NC, 0.25f), gz(NC, 0.0f), gg(NC, std::nanf(""));
  cuda::lnr::dispatch_groups(V, [&](auto v) {
    constexpr int kV = decltype(v)::value;
    sim::launch({grid, 1, 1}, 256, 0, [&] {
      cuda::lnr::bwd_input<kV>(gd.data(), dout.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C, false);
    });
    sim::launch({grid, 1, 1}, 256, 0, [&] {
      cuda::lnr::bwd_input<kV>(gz.data(), dout.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C, false);
    });
    sim::launch({grid, 1, 1}, 256, 0, [&] {
      cuda::lnr::bwd_input<kV>(gg.data(), dout.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C, true);
    });
  });
  expect_close("layernorm backward input gradient (added) " + tag, dinp, gd, 1e-5f);
  expect_bits("layernorm backward overwrite = added to zeros " + tag, gz, gg);

  // dropout fused in (BERT's sublayer ends), at offsets that are multiples of 4 and not
  const Rng rng(0xd00d, 0);
  const float p = 0.1f;
  for (const uint64_t base : {uint64_t{4096}, uint64_t{4097}}) {
    cuda::lnr::RowDropout d;
    d.on = true, d.quad = base % 4 == 0, d.scale = 1.0f / (1.0f - p), d.thr = dropout_threshold(p), d.seed = rng.seed;
    d.base = base;
    const std::string dt = tag + " dropout base " + std::to_string(base);
    // forward against the CPU's dropout then residual LayerNorm: the sum bit for bit
    std::vector<float> dropped(NC), out(NC), sum(NC), mean2(N), rstd2(N);
    kernels::dropout_forward(dropped.data(), x.data(), static_cast<int64_t>(NC), p, rng, base);
    kernels::residual_layernorm_forward(out.data(), sum.data(), mean2.data(), rstd2.data(), dropped.data(), r.data(),
                                        w.data(), b.data(), N, C, 1e-5f);
    std::vector<float> gout(NC), gsum(NC), gmean(N), grstd(N);
    std::vector<uint16_t> g16(NC);
    cuda::lnr::dispatch_groups(V, [&](auto v) {
      sim::launch({grid, 1, 1}, 256, 0, [&] {
        cuda::lnr::fwd<decltype(v)::value, true>(gout.data(), g16.data(), gsum.data(), gmean.data(), grstd.data(),
                                                 x.data(), r.data(), w.data(), b.data(), N, C, 1e-5f, d);
      });
    });
    expect_bits("residual dropout layernorm forward sum " + dt, sum, gsum);
    expect_close("residual dropout layernorm forward " + dt, out, gout, 1e-5f);
    // backward: the branch's gradient is the LayerNorm's input gradient through the dropout, bit
    // for bit as the CPU's dropout backward makes it from the same numbers
    std::vector<float> gdi(NC, std::nanf("")), gbr(NC, std::nanf(""));
    std::vector<uint16_t> gbr16(NC);
    cuda::lnr::dispatch_groups(V, [&](auto v) {
      sim::launch({grid, 1, 1}, 256, 0, [&] {
        cuda::lnr::bwd_input<decltype(v)::value>(gdi.data(), dout.data(), x.data(), w.data(), mean.data(), rstd.data(),
                                                 N, C, true, d, gbr.data(), gbr16.data());
      });
    });
    expect_bits("layernorm dropout backward input gradient = without dropout " + dt, gz, gdi);
    std::vector<float> want(NC, 0.0f);
    kernels::dropout_backward(want.data(), gdi.data(), static_cast<int64_t>(NC), p, rng, base);
    expect_bits("layernorm dropout backward branch = the CPU's dropout backward " + dt, want, gbr);
    std::vector<uint16_t> want16(NC);
    for (size_t i = 0; i < NC; ++i) want16[i] = f32_to_bf16(gbr[i]);
    expect_bits("layernorm dropout backward branch bf16 copy " + dt, want16, gbr16);
  }
}

}  // namespace

int main() {
  std::mt19937 gen(17);
  for (const int64_t C : {4, 76, 128, 132, 256, 512, 768, 1000, 1024}) run_case(C >= 768 ? 19 : 37, C, gen);
  // what the general kernels keep: C not a multiple of 4, or more than 1024
  for (const int64_t C : {75, 1028, 4096})
    report("groups_for(" + std::to_string(C) + ") = 0", cuda::lnr::groups_for(C) == 0 ? 0 : 1, 1, "wrong");
  std::printf("%d failed\n", g_fail);
  return g_fail ? 1 : 0;
}
