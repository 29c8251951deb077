// Every CUDA kernel against the CPU kernel it mirrors, on random data of odd sizes.
// Error = max |gpu - cpu| / max |cpu| over the tensor; fp32 within 1e-5, bf16 1e-2 (fp16 attention 3e-3). Dropout
// masks, embedding and scatter gradients (same summation order) and the counts must be equal bit
// for bit; attention backward must give the same bits twice. Exit 0 all passed, 1 a failure,
// 77 no CUDA device (ctest: skipped).
//   test_cuda_kernels [--device N] [--filter SUBSTRING]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "bertcc/bert.h"
#include "bertcc/optim.h"
#include "bertcc/params.h"
#include "bertcc/rng.h"
#include "cuda/attention/cudnn_graphs.h"
#include "cuda/attention/varlen.h"
#include "cuda/cuda_kernels.h"
#include "kernels/gemm.h"
#include "kernels/kernels.h"

using namespace bertcc;
namespace K = bertcc::kernels;
namespace G = bertcc::cuda;

namespace {

int g_failures = 0, g_checks = 0;
int g_device = 0;  // --device
std::string g_filter;
std::mt19937 g_rng(1234);

std::vector<float> randv(size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g_rng);
  return v;
}
std::vector<int32_t> randi(size_t n, int32_t hi) {
  std::uniform_int_distribution<int32_t> d(0, hi - 1);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = d(g_rng);
  return v;
}

// A device copy of a host vector; back() copies it back.
template <class T>
struct Dev {
  T* p = nullptr;
  size_t n = 0;
  explicit Dev(const std::vector<T>& v) : n(v.size()) {
    p = static_cast<T*>(G::alloc(std::max<size_t>(n, 1) * sizeof(T)));
    G::copy_to_device(p, v.data(), n * sizeof(T));
  }
  explicit Dev(size_t count) : n(count) {
    p = static_cast<T*>(G::alloc(std::max<size_t>(n, 1) * sizeof(T)));
    G::zero(p, n * sizeof(T));
  }
  ~Dev() { G::free(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  std::vector<T> back() const {
    G::synchronize();
    std::vector<T> h(n);
    G::copy_to_host(h.data(), p, n * sizeof(T));
    return h;
  }
};

void check(const std::string& name, const std::vector<float>& cpu, const std::vector<float>& gpu, double tol) {
  ++g_checks;
  double mx = 0, err = 0;
  bool finite = cpu.size() == gpu.size();
  for (size_t i = 0; i < cpu.size() && i < gpu.size(); ++i) {
    mx = std::max(mx, std::fabs(static_cast<double>(cpu[i])));
    if (!std::isfinite(gpu[i])) finite = false;
    err = std::max(err, std::fabs(static_cast<double>(cpu[i]) - gpu[i]));
  }
  const double rel = err / std::max(mx, 1e-30);
  const bool ok = finite && rel <= tol;
  std::printf("%-58s rel err %.3e (tol %.0e)%s\n", name.c_str(), rel, tol, ok ? "" : "  FAIL");
  if (!ok) ++g_failures;
}
template <class T>
void check_equal(const std::string& name, const std::vector<T>& cpu, const std::vector<T>& gpu) {
  ++g_checks;
  size_t diff = cpu.size() == gpu.size() ? 0 : 1;
  for (size_t i = 0; i < cpu.size() && i < gpu.size(); ++i) diff += std::memcmp(&cpu[i], &gpu[i], sizeof(T)) != 0;
  std::printf("%-58s %zu of %zu differ (must be 0)%s\n", name.c_str(), diff, cpu.size(), diff ? "  FAIL" : "");
  if (diff) ++g_failures;
}
bool selected(const char* group) { return g_filter.empty() || std::string(group).find(g_filter) != std::string::npos; }

void test_embeddings() {
  struct Case {
    int64_t B, T, C, V, TT;
  };
  // the second: BERT's vocabulary (15-bit keys), padding id 0 on the last 40% of every sequence
  for (const Case& c : {Case{3, 37, 75, 101, 2}, Case{8, 128, 130, 30522, 2}, Case{2, 19, 33, 7, 3}}) {
    const int64_t B = c.B, T = c.T, C = c.C, V = c.V, TT = c.TT;
    auto ids = randi(B * T, V), seg = randi(B * T, TT);
    ids[5] = ids[9] = ids[17];  // repeated ids
    if (V > 1000)
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = T * 6 / 10; t < T; ++t) ids[b * T + t] = 0;
    auto wte = randv(V * C), wpe = randv(T * C), wtt = randv(TT * C), dout = randv(B * T * C);
    std::vector<float> out(B * T * C), dwte(V * C, 0.5f), dwpe(T * C, 0.5f), dwtt(TT * C, 0.5f);
    K::embeddings_forward(out.data(), ids.data(), seg.data(), wte.data(), wpe.data(), wtt.data(), B, T, C);
    K::embeddings_backward(dwte.data(), dwpe.data(), dwtt.data(), dout.data(), ids.data(), seg.data(), B, T, C, V, TT);
    Dev<int32_t> gids(ids), gseg(seg);
    Dev<float> gwte(wte), gwpe(wpe), gwtt(wtt), gdout(dout), gout(out.size());
    Dev<float> gdwte(std::vector<float>(V * C, 0.5f)), gdwpe(std::vector<float>(T * C, 0.5f)),
        gdwtt(std::vector<float>(TT * C, 0.5f));
    G::embeddings_forward(gout.p, gids.p, gseg.p, gwte.p, gwpe.p, gwtt.p, B, T, C);
    G::embeddings_backward(gdwte.p, gdwpe.p, gdwtt.p, gdout.p, gids.p, gseg.p, B, T, C, V, TT);
    const std::string n = "B" + std::to_string(B) + " T" + std::to_string(T) + " V" + std::to_string(V);
    check_equal("embeddings_forward " + n, out, gout.back());
    check_equal("embeddings_backward dwte (rows in order) " + n, dwte, gdwte.back());
    check_equal("embeddings_backward dwpe " + n, dwpe, gdwpe.back());
    check_equal("embeddings_backward dwtt " + n, dwtt, gdwtt.back());
  }
}

void test_layernorm() {
  for (int64_t C : {75, 768}) {
    const int64_t N = 111;
    const std::string tag = " C=" + std::to_string(C);
    auto x = randv(N * C, -2, 3), r = randv(N * C), w = randv(C), b = randv(C), dout = randv(N * C);
    std::vector<float> out(N * C), mean(N), rstd(N), sum(N * C), dinp(N * C, 0.25f), dw(C, 0.5f), db(C, 0.5f);
    K::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, 1e-12f);
    K::layernorm_backward(dinp.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(), rstd.data(),
                          N, C);
    Dev<float> gx(x), gr(r), gw(w), gb(b), gdout(dout), gout(N * C), gmean(N), grstd(N), gsum(N * C);
    Dev<float> gdinp(std::vector<float>(N * C, 0.25f)), gdw(std::vector<float>(C, 0.5f)),
        gdb(std::vector<float>(C, 0.5f));
    G::layernorm_forward(gout.p, gmean.p, grstd.p, gx.p, gw.p, gb.p, N, C, 1e-12f);
    check("layernorm_forward" + tag, out, gout.back(), 1e-5);
    check("layernorm_forward rstd" + tag, rstd, grstd.back(), 1e-5);
    G::layernorm_backward(gdinp.p, gdw.p, gdb.p, gdout.p, gx.p, gw.p, gmean.p, grstd.p, N, C);
    check("layernorm_backward dinp" + tag, dinp, gdinp.back(), 1e-5);
    {  // overwrite: a buffer holding garbage written as if it held +0 (the bits of zeroing it first)
      Dev<float> gz(N * C), gg(std::vector<float>(N * C, 7.0f)), gdw2(C), gdb2(C);
      G::layernorm_backward(gz.p, gdw2.p, gdb2.p, gdout.p, gx.p, gw.p, gmean.p, grstd.p, N, C);
      G::layernorm_backward(gg.p, gdw2.p, gdb2.p, gdout.p, gx.p, gw.p, gmean.p, grstd.p, N, C, /*overwrite=*/true);
      check_equal("layernorm_backward overwrite = added to zeros" + tag, gz.back(), gg.back());
    }
    check("layernorm_backward dw" + tag, dw, gdw.back(), 1e-5);
    check("layernorm_backward db" + tag, db, gdb.back(), 1e-5);
    K::residual_layernorm_forward(out.data(), sum.data(), mean.data(), rstd.data(), x.data(), r.data(), w.data(),
                                  b.data(), N, C, 1e-5f);
    G::residual_layernorm_forward(gout.p, gsum.p, gmean.p, grstd.p, gx.p, gr.p, gw.p, gb.p, N, C, 1e-5f);
    check_equal("residual_layernorm_forward sum" + tag, sum, gsum.back());
    check("residual_layernorm_forward" + tag, out, gout.back(), 1e-5);
    {  // with out's bf16 rounding written by the same kernel (the next GEMM's operand)
      Dev<float> gout2(N * C);
      Dev<bf16_t> gout16(N * C);
      G::residual_layernorm_forward(gout2.p, gsum.p, gmean.p, grstd.p, gx.p, gr.p, gw.p, gb.p, N, C, 1e-5f, gout16.p);
      const auto o2 = gout2.back();
      check_equal("residual_layernorm_forward with its bf16 copy" + tag, gout.back(), o2);
      std::vector<bf16_t> r16(o2.size());
      for (size_t i = 0; i < o2.size(); ++i) r16[i] = f32_to_bf16(o2[i]);
      check_equal("residual_layernorm_forward bf16 copy = rounding of its output" + tag, r16, gout16.back());
    }
    K::residual_forward(out.data(), x.data(), r.data(), N * C);
    G::residual_forward(gout.p, gx.p, gr.p, N * C);
    check_equal("residual_forward" + tag, out, gout.back());
    // dropout fused into the residual LayerNorm and into its backward: the composed kernels' bits
    // (register-row kernels: C = 768 fused; C = 75 declined, the caller composes)
    const Rng rng(0xd00d, 0);
    for (uint64_t base : {uint64_t{4096}, uint64_t{4099}}) {
      const float p = 0.1f;
      const std::string dt = tag + " dropout base " + std::to_string(base);
      Dev<float> ga(x), cout(N * C), csum(N * C), cmean(N), crstd(N), fout(N * C), fsum(N * C), fmean(N), frstd(N);
      Dev<bf16_t> c16(N * C), f16(N * C);
      G::dropout_forward(ga.p, ga.p, N * C, p, rng, base);
      G::residual_layernorm_forward(cout.p, csum.p, cmean.p, crstd.p, ga.p, gr.p, gw.p, gb.p, N, C, 1e-5f, c16.p);
      const bool fused = G::residual_dropout_layernorm_forward(fout.p, fsum.p, fmean.p, frstd.p, gx.p, gr.p, gw.p, gb.p,
                                                               N, C, 1e-5f, f16.p, p, rng, base);
      if (C % 4 != 0) {
        check_equal("residual_dropout_layernorm_forward declined" + dt, std::vector<int>{0}, std::vector<int>{fused});
        continue;
      }
      check_equal("residual_dropout_layernorm_forward fused" + dt, std::vector<int>{1}, std::vector<int>{fused});
      check_equal("residual_dropout_layernorm_forward = composed: out" + dt, cout.back(), fout.back());
      check_equal("residual_dropout_layernorm_forward = composed: sum" + dt, csum.back(), fsum.back());
      check_equal("residual_dropout_layernorm_forward = composed: rstd" + dt, crstd.back(), frstd.back());
      check_equal("residual_dropout_layernorm_forward = composed: bf16 copy" + dt, c16.back(), f16.back());
      Dev<float> cdi(std::vector<float>(N * C, 7.0f)), cbr(N * C), fdi(std::vector<float>(N * C, 7.0f)), fbr(N * C);
      Dev<float> cdw(std::vector<float>(C, 0.5f)), cdb(std::vector<float>(C, 0.5f)), fdw(std::vector<float>(C, 0.5f)),
          fdb(std::vector<float>(C, 0.5f));
      Dev<bf16_t> cbr16(N * C), fbr16(N * C);
      G::layernorm_backward(cdi.p, cdw.p, cdb.p, gdout.p, csum.p, gw.p, cmean.p, crstd.p, N, C, /*overwrite=*/true);
      G::dropout_backward(cbr.p, cdi.p, N * C, p, rng, base, cbr16.p, /*overwrite=*/true);
      const bool fb = G::layernorm_dropout_backward(fdi.p, fdw.p, fdb.p, gdout.p, csum.p, gw.p, cmean.p, crstd.p, N, C,
                                                    fbr.p, fbr16.p, p, rng, base);
      check_equal("layernorm_dropout_backward fused" + dt, std::vector<int>{1}, std::vector<int>{fb});
      check_equal("layernorm_dropout_backward = composed: input gradient" + dt, cdi.back(), fdi.back());
      check_equal("layernorm_dropout_backward = composed: branch" + dt, cbr.back(), fbr.back());
      check_equal("layernorm_dropout_backward = composed: branch bf16" + dt, cbr16.back(), fbr16.back());
      check_equal("layernorm_dropout_backward = composed: dw" + dt, cdw.back(), fdw.back());
      check_equal("layernorm_dropout_backward = composed: db" + dt, cdb.back(), fdb.back());
    }
  }
}

void test_activations() {
  const int64_t n = 10007;
  auto x = randv(n, -6, 6), dout = randv(n);
  for (Activation act : {Activation::GeluErf, Activation::GeluTanh}) {
    const std::string tag = act == Activation::GeluErf ? " (erf)" : " (tanh)";
    std::vector<float> out(n), dinp(n, 0.5f);
    K::gelu_forward(out.data(), x.data(), n, act);
    K::gelu_backward(dinp.data(), x.data(), dout.data(), n, act);
    Dev<float> gx(x), gdout(dout), gout(n), gdinp(std::vector<float>(n, 0.5f));
    G::gelu_forward(gout.p, gx.p, n, act);
    G::gelu_backward(gdinp.p, gx.p, gdout.p, n, act);
    check("gelu_forward" + tag, out, gout.back(), 1e-5);
    check("gelu_backward" + tag, dinp, gdinp.back(), 1e-5);
    // with the bf16 rounding written by the same kernel: the fp32 results unchanged, and the copy
    // the bits of rounding them (what the next GEMM would have made)
    Dev<float> gout2(n), gdinp2(std::vector<float>(n, 0.5f));
    Dev<bf16_t> gout16(n), gdinp16(n);
    G::gelu_forward(gout2.p, gx.p, n, act, gout16.p);
    G::gelu_backward(gdinp2.p, gx.p, gdout.p, n, act, gdinp16.p);
    const auto o = gout2.back(), d = gdinp2.back();
    check_equal("gelu_forward with its bf16 copy" + tag, gout.back(), o);
    check_equal("gelu_backward with its bf16 copy" + tag, gdinp.back(), d);
    std::vector<bf16_t> o16(n), d16(n);
    for (int64_t i = 0; i < n; ++i) {
      o16[i] = f32_to_bf16(o[i]);
      d16[i] = f32_to_bf16(d[i]);
    }
    check_equal("gelu_forward bf16 copy = rounding of its output" + tag, o16, gout16.back());
    check_equal("gelu_backward bf16 copy = rounding of its output" + tag, d16, gdinp16.back());
    {  // FFN1's backward start fused (gelu_bias_backward, the input as bf16): the composed kernels'
       // bits on the widened input, [M, N] = 103 x 97; the input's rounding written by gelu_forward
      const int64_t M = 103, Nc = 97;
      Dev<bf16_t> c16(M * Nc), f16(M * Nc), gx16(n);
      Dev<float> gscratch(n);
      G::gelu_forward(gscratch.p, gx.p, n, act, nullptr, gx16.p);
      std::vector<bf16_t> x16(n);
      std::vector<float> xw(n);
      for (int64_t i = 0; i < n; ++i) xw[i] = bf16_to_f32(x16[i] = f32_to_bf16(x[i]));
      check_equal("gelu_forward input's bf16 copy = rounding of its input" + tag, x16, gx16.back());
      check_equal("gelu_forward with the input's bf16 copy" + tag, o, gscratch.back());
      Dev<float> gxw(xw), cd(M * Nc), cdb(std::vector<float>(Nc, 0.5f)), fdb(std::vector<float>(Nc, 0.5f));
      G::gelu_backward(cd.p, gxw.p, gdout.p, M * Nc, act, c16.p, /*overwrite=*/true);
      G::bias_backward(cdb.p, cd.p, M, Nc);
      G::gelu_bias_backward(f16.p, fdb.p, gx16.p, gdout.p, M, Nc, act);
      check_equal("gelu_bias_backward = composed: bf16 gradient" + tag, c16.back(), f16.back());
      check_equal("gelu_bias_backward = composed: bias gradient" + tag, cdb.back(), fdb.back());
      // recomputing the GELU's output too (bf16 training's FFN2 weight gradient): gelu_forward16's
      // bits on the same input, and the same gradients
      Dev<bf16_t> r16(M * Nc), fwd16(M * Nc), f16b(M * Nc);
      Dev<float> fdb2(std::vector<float>(Nc, 0.5f));
      G::gelu_forward16(fwd16.p, gx16.p, M * Nc, act);
      G::gelu_bias_backward(f16b.p, fdb2.p, gx16.p, gdout.p, M, Nc, act, r16.p);
      check_equal("gelu_bias_backward recomputing = gelu_forward16" + tag, fwd16.back(), r16.back());
      check_equal("gelu_bias_backward recomputing: bf16 gradient" + tag, f16.back(), f16b.back());
      check_equal("gelu_bias_backward recomputing: bias gradient" + tag, fdb.back(), fdb2.back());
    }
    {  // GELU on a bf16 input (bf16 models' FFN1 output): the rounding of gelu_forward's output on
       // the widened input, and the CPU backend's result within one bf16 step
      std::vector<bf16_t> x16(n);
      std::vector<float> xw(n);
      for (int64_t i = 0; i < n; ++i) xw[i] = bf16_to_f32(x16[i] = f32_to_bf16(x[i]));
      Dev<bf16_t> gx16(x16), gy16(n), gy16b(n);
      Dev<float> gxw(xw);
      G::gelu_forward(nullptr, gxw.p, n, act, gy16.p);
      G::gelu_forward16(gy16b.p, gx16.p, n, act);
      check_equal("gelu_forward16 = rounding of gelu of the widened input" + tag, gy16.back(), gy16b.back());
      std::vector<bf16_t> c16(n);
      cpu_backend().gelu_forward16(c16.data(), x16.data(), n, act);
      std::vector<float> cw(n), gw(n);
      const auto g16 = gy16b.back();
      for (int64_t i = 0; i < n; ++i) cw[i] = bf16_to_f32(c16[i]), gw[i] = bf16_to_f32(g16[i]);
      check("gelu_forward16 vs the CPU backend" + tag, cw, gw, 1.0 / 128);
    }
    // the bf16 copy alone (bf16 training keeps no fp32 GELU output)
    Dev<bf16_t> gonly16(n);
    G::gelu_forward(nullptr, gx.p, n, act, gonly16.p);
    check_equal("gelu_forward bf16 copy only (no fp32 output)" + tag, o16, gonly16.back());
    // buffers one float past 16-byte alignment: element by element, the same values
    Dev<float> gu(n), gdu(std::vector<float>(n, 0.5f));
    G::gelu_forward(gu.p + 1, gx.p + 1, n - 1, act);
    G::gelu_backward(gdu.p + 1, gx.p + 1, gdout.p + 1, n - 1, act);
    auto from1 = [](std::vector<float> v) { return std::vector<float>(v.begin() + 1, v.end()); };
    check_equal("gelu_forward unaligned" + tag, from1(o), from1(gu.back()));
    check_equal("gelu_backward unaligned" + tag, from1(d), from1(gdu.back()));
    Dev<float> gz(n), gg(std::vector<float>(n, 7.0f));
    G::gelu_backward(gz.p, gx.p, gdout.p, n, act);
    G::gelu_backward(gg.p, gx.p, gdout.p, n, act, nullptr, /*overwrite=*/true);
    check_equal("gelu_backward overwrite = added to zeros" + tag, gz.back(), gg.back());
  }
  std::vector<float> out(n), dinp(n, 0.5f);
  K::tanh_forward(out.data(), x.data(), n);
  K::tanh_backward(dinp.data(), out.data(), dout.data(), n);
  Dev<float> gx(x), gdout(dout), gout(n), gdinp(std::vector<float>(n, 0.5f));
  G::tanh_forward(gout.p, gx.p, n);
  G::tanh_backward(gdinp.p, gout.p, gdout.p, n);
  check("tanh_forward", out, gout.back(), 1e-6);
  check("tanh_backward", dinp, gdinp.back(), 1e-5);

  Rng rng(0x5eed, 0);
  // offsets that are multiples of 4 (one Philox block per four elements) and not (one per element)
  for (uint64_t base : {uint64_t{0}, uint64_t{12}, (uint64_t{1} << 33) + 4, uint64_t{3}, (uint64_t{1} << 33) + 5}) {
    const float p = 0.1f;
    std::vector<float> o(n), d(n, 0.5f);
    K::dropout_forward(o.data(), x.data(), n, p, rng, base);
    K::dropout_backward(d.data(), dout.data(), n, p, rng, base);
    Dev<float> go(n), gd(std::vector<float>(n, 0.5f));
    G::dropout_forward(go.p, gx.p, n, p, rng, base);
    G::dropout_backward(gd.p, gdout.p, n, p, rng, base);
    check_equal("dropout_forward (Philox mask) base " + std::to_string(base), o, go.back());
    check_equal("dropout_backward base " + std::to_string(base), d, gd.back());
    Dev<float> gd2(std::vector<float>(n, 0.5f));
    Dev<bf16_t> gd16(n);
    G::dropout_backward(gd2.p, gdout.p, n, p, rng, base, gd16.p);
    check_equal("dropout_backward with its bf16 copy base " + std::to_string(base), d, gd2.back());
    std::vector<bf16_t> r16(n);
    for (int64_t i = 0; i < n; ++i) r16[i] = f32_to_bf16(d[i]);
    check_equal("dropout_backward bf16 copy = rounding of its output base " + std::to_string(base), r16, gd16.back());
    Dev<float> gz(n), gg(std::vector<float>(n, 7.0f));
    G::dropout_backward(gz.p, gdout.p, n, p, rng, base);
    G::dropout_backward(gg.p, gdout.p, n, p, rng, base, nullptr, /*overwrite=*/true);
    check_equal("dropout_backward overwrite = added to zeros base " + std::to_string(base), gz.back(), gg.back());
  }
  {  // buffers one float past 16-byte alignment
    const float p = 0.1f;
    const uint64_t base = 8;
    std::vector<float> o(n), d(n, 0.5f);
    K::dropout_forward(o.data() + 1, x.data() + 1, n - 1, p, rng, base);
    K::dropout_backward(d.data() + 1, dout.data() + 1, n - 1, p, rng, base);
    Dev<float> go(n), gd(std::vector<float>(n, 0.5f));
    G::dropout_forward(go.p + 1, gx.p + 1, n - 1, p, rng, base);
    G::dropout_backward(gd.p + 1, gdout.p + 1, n - 1, p, rng, base);
    auto from1 = [](std::vector<float> v) { return std::vector<float>(v.begin() + 1, v.end()); };
    check_equal("dropout_forward unaligned", from1(o), from1(go.back()));
    check_equal("dropout_backward unaligned", from1(d), from1(gd.back()));
  }
}

void test_rows() {
  const int64_t N = 53, C = 75, M = 17;
  auto x = randv(N * C), dout = randv(M * C);
  std::vector<int64_t> rows(M);
  for (int64_t m = 0; m < M; ++m) rows[m] = (m * 7) % N;
  rows[3] = rows[11];  // a repeated row
  std::vector<float> out(M * C), dinp(N * C, 0.5f);
  K::gather_rows(out.data(), x.data(), rows.data(), M, C);
  K::scatter_add_rows(dinp.data(), dout.data(), rows.data(), M, C);
  Dev<int64_t> grows(rows);
  Dev<float> gx(x), gdout(dout), gout(M * C), gdinp(std::vector<float>(N * C, 0.5f));
  G::gather_rows(gout.p, gx.p, grows.p, M, C);
  G::scatter_add_rows(gdinp.p, gdout.p, grows.p, M, C);
  check_equal("gather_rows", out, gout.back());
  check_equal("scatter_add_rows (rows in order)", dinp, gdinp.back());
  {  // long runs of one row (the joint SQuAD head: one start row per candidate, T times)
    const int64_t N2 = 300, C2 = 130, M2 = 2000;
    auto dout2 = randv(M2 * C2);
    std::vector<int64_t> rows2(M2);
    for (int64_t m = 0; m < M2; ++m) rows2[m] = m % 5 == 4 ? (m * 13) % N2 : (m / 97) * 3;
    std::vector<float> dinp2(N2 * C2, 0.25f);
    K::scatter_add_rows(dinp2.data(), dout2.data(), rows2.data(), M2, C2);
    Dev<int64_t> grows2(rows2);
    Dev<float> gdout2(dout2), gdinp2(std::vector<float>(N2 * C2, 0.25f));
    G::scatter_add_rows(gdinp2.p, gdout2.p, grows2.p, M2, C2);
    check_equal("scatter_add_rows (runs of 97, rows in order)", dinp2, gdinp2.back());
  }
  // copy_rows / add_rows with leading dimensions (the [CLS] rows, the accumulation of gradients)
  const int64_t R = 9, Cc = 31, ld_src = 40, ld_dst = 35;
  auto src = randv(R * ld_src), dst0 = randv(R * ld_dst);
  std::vector<float> cdst = dst0, adst = dst0;
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < Cc; ++c) {
      cdst[r * ld_dst + c] = src[r * ld_src + c];
      adst[r * ld_dst + c] += src[r * ld_src + c];
    }
  Dev<float> gsrc(src), gc(dst0), ga(dst0);
  G::copy_rows(gc.p, ld_dst, gsrc.p, ld_src, R, Cc);
  G::add_rows(ga.p, ld_dst, gsrc.p, ld_src, R, Cc);
  check_equal("copy_rows (strided)", cdst, gc.back());
  check_equal("add_rows (strided)", adst, ga.back());
  // scale (fp16 loss unscaling): one product per element, as the CPU loop
  auto sx = randv(1001, -1e4f, 1e4f);
  Dev<float> gs(sx);
  for (auto& v : sx) v *= 1.0f / 3.0f;
  G::scale(gs.p, 1001, 1.0f / 3.0f);
  check_equal("scale", sx, gs.back());
  // narrow16 / widen16 (gradients on a 16-bit wire): the host conversions' bits, with ties,
  // subnormals, overflow and infinities among random values of every magnitude (NaN's payload bits
  // are the format's business: non-finite gradients are caught by their value)
  std::vector<float> w16 = randv(4097, -7e4f, 7e4f);
  for (size_t i = 0; i < 1000; ++i) w16[i] = std::ldexp(w16[i] / 7e4f, -static_cast<int>(i % 40));
  const float specials[] = {0.0f,           -0.0f,          65504.0f,
                            65520.0f,       -65536.0f,      1e-8f,
                            5.9604645e-08f, 2.9802322e-08f, 1.0009765625f + 0.00048828125f,
                            3.0e38f,        INFINITY,       -INFINITY,
                            1.00390625f};
  for (size_t i = 0; i < sizeof specials / sizeof specials[0]; ++i) w16[1000 + i] = specials[i];
  for (bool bf : {true, false}) {
    const std::string tag = bf ? " bf16" : " fp16";
    std::vector<uint16_t> h16(w16.size());
    std::vector<float> wide(w16.size());
    for (size_t i = 0; i < w16.size(); ++i) {
      h16[i] = bf ? f32_to_bf16(w16[i]) : f32_to_f16(w16[i]);
      wide[i] = bf ? bf16_to_f32(h16[i]) : f16_to_f32(h16[i]);
    }
    Dev<float> gw(w16), gwide(w16.size());
    Dev<uint16_t> g16(w16.size());
    G::narrow16(g16.p, gw.p, static_cast<int64_t>(w16.size()), bf);
    check_equal("narrow16" + tag, h16, g16.back());
    G::widen16(gwide.p, g16.p, static_cast<int64_t>(w16.size()), bf);
    check_equal("widen16" + tag, wide, gwide.back());
  }
}

void test_xent() {
  for (int64_t V : {1001, 30522}) {
    const int64_t N = 37;
    auto logits = randv(N * V, -8, 8);
    auto labels = randi(N, static_cast<int32_t>(V));
    labels[2] = labels[20] = -1;  // ignored rows
    labels[5] = 7;
    logits[5 * V + 7] = 50.0f;                      // a row whose prediction is right
    logits[6 * V + 3] = logits[6 * V + 9] = 60.0f;  // ties: the first maximum counts
    labels[6] = 9;
    std::vector<float> g = logits, losses(N);
    int64_t correct = 0, gcorrect = 0;
    const int64_t valid =
        K::softmax_xent_forward_backward(g.data(), losses.data(), labels.data(), N, V, -1, 0.25f, &correct);
    Dev<float> gl(logits), glosses(N);
    Dev<int32_t> glabels(labels);
    const int64_t gvalid = G::softmax_xent_forward_backward(gl.p, glosses.p, glabels.p, N, V, -1, 0.25f, &gcorrect);
    const std::string tag = " V=" + std::to_string(V);
    check("softmax_xent losses" + tag, losses, glosses.back(), 1e-5);
    check("softmax_xent gradient" + tag, g, gl.back(), 1e-5);
    check_equal("softmax_xent valid and correct counts" + tag, std::vector<int64_t>{valid, correct},
                std::vector<int64_t>{gvalid, gcorrect});
  }
}

void test_gemm() {
  struct Case {
    bool ta, tb;
    int64_t M, N, K, batch;
    bool bias, acc;
    float alpha;
  };
  const Case cases[] = {
      {false, false, 67, 45, 93, 1, false, false, 1.0f},  {false, true, 67, 45, 93, 1, true, false, 1.0f},
      {true, false, 67, 45, 93, 1, false, true, 1.0f},    {true, true, 31, 129, 17, 1, false, true, 0.5f},
      {false, true, 37, 37, 64, 6, false, false, 0.125f}, {true, false, 37, 64, 37, 6, false, true, 1.0f},
      {false, true, 256, 768, 768, 1, true, false, 1.0f}};
  // fp16: both sides round A and B to fp16 and sum exact products in fp32 (summation order apart)
  auto pname = [](Precision p) { return p == Precision::BF16 ? "bf16" : p == Precision::F16 ? "fp16" : "fp32"; };
  auto ptol = [](Precision p) { return p == Precision::BF16 ? 1e-2 : p == Precision::F16 ? 1e-3 : 1e-5; };
  for (Precision p : {Precision::F32, Precision::BF16, Precision::F16}) {
    for (const Case& c : cases) {
      K::GemmArgs g;
      g.trans_a = c.ta;
      g.trans_b = c.tb;
      g.M = c.M;
      g.N = c.N;
      g.K = c.K;
      g.lda = c.ta ? c.M : c.K;
      g.ldb = c.tb ? c.K : c.N;
      g.ldc = c.N;
      g.batch = c.batch;
      g.stride_a = c.M * c.K;
      g.stride_b = c.K * c.N;
      g.stride_c = c.M * c.N;
      g.alpha = c.alpha;
      g.accumulate = c.acc;
      auto A = randv(c.batch * c.M * c.K), Bm = randv(c.batch * c.K * c.N), C0 = randv(c.batch * c.M * c.N),
           bias = randv(c.N);
      std::vector<float> Cc = C0;
      g.A = A.data();
      g.B = Bm.data();
      g.C = Cc.data();
      g.bias = c.bias ? bias.data() : nullptr;
      K::gemm(g, p);
      Dev<float> gA(A), gB(Bm), gC(C0), gbias(bias);
      K::GemmArgs d = g;
      d.A = gA.p;
      d.B = gB.p;
      d.C = gC.p;
      d.bias = c.bias ? gbias.p : nullptr;
      G::gemm(d, p);
      char name[160];
      std::snprintf(name, sizeof name, "gemm %s %c%c %ldx%ldx%ld batch %ld%s%s alpha %g", pname(p), c.ta ? 'T' : 'N',
                    c.tb ? 'T' : 'N', long(c.M), long(c.N), long(c.K), long(c.batch), c.bias ? " bias" : "",
                    c.acc ? " acc" : "", double(c.alpha));
      check(name, Cc, gC.back(), ptol(p));
    }
    // Linear layer forward and backward (with the bf16 weight copy given)
    const int64_t M = 45, N = 77, Kd = 96;
    auto x = randv(M * Kd), W = randv(N * Kd), b = randv(N), dy = randv(M * N);
    std::vector<bf16_t> W16(W.size());
    for (size_t i = 0; i < W.size(); ++i) W16[i] = f32_to_bf16(W[i]);
    std::vector<float> y(M * N), dx(M * Kd, 0.5f), dW(N * Kd, 0.5f), db(N, 0.5f);
    const bf16_t* w16 = p == Precision::BF16 ? W16.data() : nullptr;
    K::linear_forward(y.data(), x.data(), W.data(), b.data(), M, N, Kd, p, w16);
    K::linear_backward(dx.data(), dW.data(), db.data(), dy.data(), x.data(), W.data(), M, N, Kd, p, w16);
    Dev<float> gx(x), gW(W), gb(b), gdy(dy), gy(M * N), gdx(std::vector<float>(M * Kd, 0.5f)),
        gdW(std::vector<float>(N * Kd, 0.5f)), gdb(std::vector<float>(N, 0.5f));
    Dev<bf16_t> gW16(W16);
    const bf16_t* gw16 = p == Precision::BF16 ? gW16.p : nullptr;
    G::linear_forward(gy.p, gx.p, gW.p, gb.p, M, N, Kd, p, gw16);
    G::linear_backward(gdx.p, gdW.p, gdb.p, gdy.p, gx.p, gW.p, M, N, Kd, p, gw16);
    const double tol = ptol(p);
    const std::string tag = std::string(" ") + pname(p);
    check("linear_forward" + tag, y, gy.back(), tol);
    check("linear_backward dx" + tag, dx, gdx.back(), tol);
    check("linear_backward dW" + tag, dW, gdW.back(), tol);
    check("linear_backward db" + tag, db, gdb.back(), 1e-5);
    if (p == Precision::BF16) {  // the bf16 weight copy 2 bytes past a 16-byte boundary (a weight after
      // an odd-length bias in the flat buffer): staged into aligned memory, the same bits
      std::vector<bf16_t> shifted(W16.size() + 1, 0);
      std::copy(W16.begin(), W16.end(), shifted.begin() + 1);
      Dev<bf16_t> gS(shifted);
      Dev<float> gy2(M * N);
      G::linear_forward(gy2.p, gx.p, gW.p, gb.p, M, N, Kd, p, gS.p + 1);
      check_equal("linear_forward bf16, weight copy 2-byte aligned", gy.back(), gy2.back());
      // the forward keeps x's rounding; the backward takes it and dy's: the same bits as without
      Dev<bf16_t> gx16(M * Kd), gdy16(M * N);
      Dev<float> gy3(M * N), gdx3(std::vector<float>(M * Kd, 0.5f)), gdW3(std::vector<float>(N * Kd, 0.5f)),
          gdb3(std::vector<float>(N, 0.5f));
      G::linear_forward(gy3.p, gx.p, gW.p, gb.p, M, N, Kd, p, gw16, nullptr, gx16.p);
      std::vector<bf16_t> x16(x.size()), dy16(dy.size());
      for (size_t i = 0; i < x.size(); ++i) x16[i] = f32_to_bf16(x[i]);
      for (size_t i = 0; i < dy.size(); ++i) dy16[i] = f32_to_bf16(dy[i]);
      check_equal("linear_forward bf16 keeps x's rounding", x16, gx16.back());
      check_equal("linear_forward bf16, x's rounding kept: same output", gy.back(), gy3.back());
      G::copy_to_device(gdy16.p, dy16.data(), dy16.size() * sizeof(bf16_t));
      G::linear_backward(gdx3.p, gdW3.p, gdb3.p, gdy.p, gx.p, gW.p, M, N, Kd, p, gw16, gdy16.p, gx16.p);
      check_equal("linear_backward bf16 with x's and dy's roundings given: dx", gdx.back(), gdx3.back());
      check_equal("linear_backward bf16 with x's and dy's roundings given: dW", gdW.back(), gdW3.back());
      check_equal("linear_backward bf16 with x's and dy's roundings given: db", gdb.back(), gdb3.back());
      Dev<float> gy4(M * N);  // x16 given to the forward: taken as the product's operand
      G::linear_forward(gy4.p, gx.p, gW.p, gb.p, M, N, Kd, p, gw16, gx16.p, nullptr);
      check_equal("linear_forward bf16 with x's rounding given", gy.back(), gy4.back());
      // the output as its bf16 rounding alone (y16): the rounding of the fp32 output, where cuBLASLt
      // writes bf16 itself to within one bf16 step (its algorithm may sum in another order)
      const auto yf = gy.back();
      std::vector<bf16_t> yr(yf.size());
      std::vector<float> yrw(yf.size());
      for (size_t i = 0; i < yf.size(); ++i) yrw[i] = bf16_to_f32(yr[i] = f32_to_bf16(yf[i]));
      for (int with_y = 0; with_y < 2; ++with_y) {
        Dev<bf16_t> gy16(static_cast<size_t>(M * N));
        Dev<float> gys(M * N);
        G::linear_forward(with_y ? gys.p : nullptr, gx.p, gW.p, gb.p, M, N, Kd, p, gw16, gx16.p, nullptr, gy16.p);
        const auto y16 = gy16.back();
        std::vector<float> yw(y16.size());
        for (size_t i = 0; i < y16.size(); ++i) yw[i] = bf16_to_f32(y16[i]);
        check(std::string("linear_forward bf16 output alone") + (with_y ? " (y given)" : "") + " = rounding of y", yrw,
              yw, 1.0 / 128);
      }
      // a bias cuBLASLt's epilogue does not take (4-byte aligned): the fp32 product, the bias added,
      // then rounded: exactly the roundings of the fp32 path with that bias
      std::vector<float> bs(b.size() + 1, 0.0f);
      std::copy(b.begin(), b.end(), bs.begin() + 1);
      Dev<float> gbs(bs), gy5(M * N);
      Dev<bf16_t> gy16b(static_cast<size_t>(M * N));
      G::linear_forward(gy5.p, gx.p, gW.p, gbs.p + 1, M, N, Kd, p, gw16, gx16.p, nullptr);
      const auto y5 = gy5.back();
      std::vector<bf16_t> y5r(y5.size());
      for (size_t i = 0; i < y5.size(); ++i) y5r[i] = f32_to_bf16(y5[i]);
      G::linear_forward(nullptr, gx.p, gW.p, gbs.p + 1, M, N, Kd, p, gw16, gx16.p, nullptr, gy16b.p);
      check_equal("linear_forward bf16 output alone, unaligned bias: roundings of y", y5r, gy16b.back());
    }
    {  // the backward writing dx (beta 0) = adding it to zeros
      Dev<float> gz(M * Kd), gg(std::vector<float>(M * Kd, 7.0f)), gdW5(N * Kd), gdb5(N);
      G::linear_backward(gz.p, gdW5.p, gdb5.p, gdy.p, gx.p, gW.p, M, N, Kd, p, gw16);
      G::linear_backward(gg.p, gdW5.p, gdb5.p, gdy.p, gx.p, gW.p, M, N, Kd, p, gw16, nullptr, nullptr,
                         /*overwrite_dx=*/true);
      check_equal("linear_backward dx overwrite = added to zeros" + tag, gz.back(), gg.back());
    }
  }
}

void test_attention() {
  struct Case {
    int64_t B, T, NH, HS;
    float p;
  };
  const Case cases[] = {{3, 37, 3, 64, 0.0f}, {2, 77, 2, 64, 0.1f}, {2, 130, 2, 128, 0.0f}, {1, 97, 3, 128, 0.1f},
                        {3, 19, 5, 16, 0.1f}, {3, 23, 3, 12, 0.1f}, {2, 45, 2, 48, 0.0f},   {1, 512, 2, 64, 0.1f},
                        {2, 72, 2, 64, 0.1f}, {1, 36, 2, 128, 0.1f}};
  for (const Case& c : cases) {
    const int64_t B = c.B, T = c.T, NH = c.NH, C = NH * c.HS;
    auto qkv = randv(B * T * 3 * C, -2, 2), dout = randv(B * T * C);
    std::vector<float> mask(B * T, 0.0f);
    for (int64_t b = 0; b < B; ++b)  // padding at the end of every sequence but the first
      for (int64_t t = T - b * (T / 4); t < T; ++t) mask[b * T + t] = -10000.0f;
    Rng rng(77, 0);
    const uint64_t base = 1000;
    for (Precision prec : {Precision::F32, Precision::BF16, Precision::F16}) {
      std::vector<float> out(B * T * C), probs(K::attention_saved_size(B, T, C, NH, c.p > 0, prec)),
          work(K::attention_work_size(B, T, C, NH)), dqkv(B * T * 3 * C);
      K::attention_forward(out.data(), probs.data(), work.data(), qkv.data(), mask.data(), B, T, C, NH, c.p, rng, base,
                           prec);
      // outputs poisoned with NaN: every element must be written
      const std::vector<float> nan_out(B * T * C, NAN), nan_d(B * T * 3 * C, NAN);
      Dev<float> gqkv(qkv), gmask(mask), gdout(dout), gout(nan_out),
          glse(static_cast<size_t>(G::attention_saved_size(B, T, C, NH, c.p > 0, prec))), gd(nan_d),
          gwork(static_cast<size_t>(G::attention_backward_work_size(B, T, NH)));
      G::attention_forward(gout.p, glse.p, gqkv.p, gmask.p, B, T, C, NH, c.p, rng, base, prec);
      if (prec == Precision::BF16) {  // the output's bf16 rounding from the kernel, with and without out
        const std::string at = "B" + std::to_string(B) + " T" + std::to_string(T) + " NH" + std::to_string(NH) + " HS" +
                               std::to_string(c.HS) + (c.p > 0 ? " dropout" : "");
        const auto o = gout.back();
        std::vector<bf16_t> want(o.size());
        for (size_t i = 0; i < o.size(); ++i) want[i] = f32_to_bf16(o[i]);
        Dev<float> gout2(nan_out), glse2(glse.n);
        Dev<bf16_t> g16(o.size()), g16only(o.size());
        G::attention_forward(gout2.p, glse2.p, gqkv.p, gmask.p, B, T, C, NH, c.p, rng, base, prec, g16.p);
        check_equal("attention forward with its bf16 copy: out, " + at, o, gout2.back());
        check_equal("attention forward bf16 copy = rounding of out, " + at, want, g16.back());
        G::attention_forward(nullptr, glse2.p, gqkv.p, gmask.p, B, T, C, NH, c.p, rng, base, prec, g16only.p);
        check_equal("attention forward bf16 copy alone, " + at, want, g16only.back());
        check_equal("attention forward bf16 copy alone: saved buffer, " + at, glse.back(), glse2.back());
      }
      // bf16: the backward reads the operands the forward saved, not qkv (null here, and on the CPU)
      const float* bqkv = prec == Precision::BF16 ? nullptr : gqkv.p;
      K::attention_backward(dqkv.data(), work.data(), dout.data(), prec == Precision::BF16 ? nullptr : qkv.data(),
                            probs.data(), B, T, C, NH, c.p, prec);
      G::attention_backward(gd.p, gwork.p, gdout.p, bqkv, gout.p, nullptr, glse.p, gmask.p, B, T, C, NH, c.p, rng, base,
                            prec);
      const char* pn = prec == Precision::BF16  ? "bf16 (Tensor Cores)"
                       : prec == Precision::F16 ? "fp16 (Tensor Cores)"
                                                : "fp32";
      char name[160];
      std::snprintf(name, sizeof name, "attention B%ld T%ld NH%ld HS%ld p%.1f vs CPU %s", long(B), long(T), long(NH),
                    long(c.HS), double(c.p), pn);
      // bf16/fp16: the same rounding points as the CPU, but P is rounded before normalisation
      // (online softmax) where the CPU rounds the normalised P, so the two differ by roundings.
      // (tests/cuda/sim, the same kernels on the CPU: bf16 at most 4e-3, fp16 5e-4 against the CPU)
      const double tol = prec == Precision::F32 ? 1e-5 : prec == Precision::BF16 ? 1e-2 : 3e-3;
      check(std::string(name) + " out", out, gout.back(), tol);
      const auto g1 = gd.back();
      for (int part = 0; part < 3; ++part) {  // dq, dk, dv each against its own scale
        std::vector<float> c3, g3;
        for (int64_t n = 0; n < B * T; ++n)
          for (int64_t ch = 0; ch < C; ++ch) {
            c3.push_back(dqkv[n * 3 * C + part * C + ch]);
            g3.push_back(g1[n * 3 * C + part * C + ch]);
          }
        check(std::string(name) + (part == 0 ? " dq" : part == 1 ? " dk" : " dv"), c3, g3, tol);
      }
      G::attention_backward(gd.p, gwork.p, gdout.p, bqkv, gout.p, nullptr, glse.p, gmask.p, B, T, C, NH, c.p, rng, base,
                            prec);
      check_equal(std::string(name) + " dqkv twice", g1, gd.back());  // the same bits on a second run
      if (prec == Precision::BF16) {
        // the output as its bf16 rounding alone (a model's bf16 training keeps no fp32 ctx): the bits of
        // the fp32 path given the widened rounding, and still within the tolerance of the CPU's
        const auto o = gout.back();
        std::vector<bf16_t> o16(o.size());
        std::vector<float> ow(o.size());
        for (size_t i = 0; i < o.size(); ++i) ow[i] = bf16_to_f32(o16[i] = f32_to_bf16(o[i]));
        Dev<bf16_t> gout16(o16);
        Dev<float> gow(ow), gd16(nan_d);
        G::attention_backward(gd.p, gwork.p, gdout.p, bqkv, gow.p, nullptr, glse.p, gmask.p, B, T, C, NH, c.p, rng,
                              base, prec);
        G::attention_backward(gd16.p, gwork.p, gdout.p, bqkv, nullptr, gout16.p, glse.p, gmask.p, B, T, C, NH, c.p, rng,
                              base, prec);
        const auto g16 = gd16.back();
        check_equal(std::string(name) + " dqkv from the output's bf16 rounding = from its widened values", gd.back(),
                    g16);
        check(std::string(name) + " dqkv from the output's bf16 rounding vs CPU", dqkv, g16, tol);
        // with dqkv's rounding written by the kernels too: the same dqkv, and its roundings
        Dev<float> gd3(nan_d);
        Dev<bf16_t> gdq16(static_cast<size_t>(B * T * 3 * C));
        G::attention_backward(gd3.p, gwork.p, gdout.p, bqkv, nullptr, gout16.p, glse.p, gmask.p, B, T, C, NH, c.p, rng,
                              base, prec, gdq16.p);
        check_equal(std::string(name) + " dqkv with its bf16 copy", g16, gd3.back());
        std::vector<bf16_t> want16(g16.size());
        for (size_t i = 0; i < g16.size(); ++i) want16[i] = f32_to_bf16(g16[i]);
        check_equal(std::string(name) + " dqkv bf16 copy = rounding of dqkv", want16, gdq16.back());
        // qkv as its bf16 rounding alone (the model's QKV product writes only that): read in place
        // (head sizes 16-128, C a multiple of 8) or copied into scratch, with no q, k, v saved; the
        // kernels see the same operands, so forward and backward give the same bits
        std::vector<bf16_t> q16(qkv.size());
        for (size_t i = 0; i < qkv.size(); ++i) q16[i] = f32_to_bf16(qkv[i]);
        Dev<bf16_t> gq16(q16), gctx16(o.size()), gdq16b(static_cast<size_t>(B * T * 3 * C));
        const int64_t kept = G::attention_saved_size(B, T, C, NH, c.p > 0, prec, /*qkv16_kept=*/true);
        Dev<float> glse3(static_cast<size_t>(kept)), gd4(nan_d);
        G::attention_forward(nullptr, glse3.p, nullptr, gmask.p, B, T, C, NH, c.p, rng, base, prec, gctx16.p, gq16.p);
        const auto saved_full = glse.back(), saved_kept = glse3.back();
        check_equal(std::string(name) + " forward from qkv16: saved lse and decisions",
                    std::vector<float>(saved_full.begin(), saved_full.begin() + kept), saved_kept);
        check_equal(std::string(name) + " forward from qkv16: output", o16, gctx16.back());
        G::attention_backward(gd4.p, gwork.p, gdout.p, nullptr, nullptr, gctx16.p, glse3.p, gmask.p, B, T, C, NH, c.p,
                              rng, base, prec, gdq16b.p, gq16.p);
        check_equal(std::string(name) + " backward from qkv16: dqkv", g16, gd4.back());
        check_equal(std::string(name) + " backward from qkv16: dqkv16", want16, gdq16b.back());
      }
    }
  }
}

// The Tensor Core kernels stop at each sequence's last unmasked key (set_attention_skip_padding):
// out, lse and dqkv the same bits as visiting every key, on batches padded as SQuAD's and GLUE's
// are (whole key tiles and dk/dv blocks of padding, a sequence of padding alone, one without).
void test_attention_padding() {
  struct Case {
    int64_t B, T, NH, HS;
    float p;
    std::vector<int64_t> lens;
  };
  const Case cases[] = {{4, 200, 2, 64, 0.1f, {100, 0, 200, 30}},
                        {3, 150, 2, 128, 0.1f, {113, 76, 20}},
                        {2, 384, 4, 64, 0.1f, {150, 384}},
                        {3, 128, 3, 32, 0.0f, {10, 65, 128}}};
  for (const Case& c : cases) {
    const int64_t B = c.B, T = c.T, NH = c.NH, C = NH * c.HS;
    const auto qkv = randv(B * T * 3 * C, -2, 2), dout = randv(B * T * C);
    std::vector<float> mask(B * T, 0.0f);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = c.lens[b]; t < T; ++t) mask[b * T + t] = -10000.0f;
    const Rng rng(78, 0);
    for (Precision prec : {Precision::BF16, Precision::F16}) {
      const std::vector<float> nan_out(B * T * C, NAN), nan_d(B * T * 3 * C, NAN);
      Dev<float> gqkv(qkv), gmask(mask), gdout(dout),
          gwork(static_cast<size_t>(G::attention_backward_work_size(B, T, NH)));
      const float* bqkv = prec == Precision::BF16 ? nullptr : gqkv.p;
      std::vector<float> res[2];
      for (int skip = 0; skip < 2; ++skip) {
        G::set_attention_skip_padding(skip == 1);
        Dev<float> gout(nan_out), gd(nan_d),
            glse(static_cast<size_t>(G::attention_saved_size(B, T, C, NH, c.p > 0, prec)));
        G::attention_forward(gout.p, glse.p, gqkv.p, gmask.p, B, T, C, NH, c.p, rng, 1000, prec);
        G::attention_backward(gd.p, gwork.p, gdout.p, bqkv, gout.p, nullptr, glse.p, gmask.p, B, T, C, NH, c.p, rng,
                              1000, prec);
        const auto o = gout.back(), l = glse.back(), d = gd.back();
        res[skip] = o;
        res[skip].insert(res[skip].end(), l.begin(),
                         l.begin() + B * NH * T);  // lse (not the decisions: skipped tiles' are unwritten)
        res[skip].insert(res[skip].end(), d.begin(), d.end());
      }
      G::set_attention_skip_padding(true);
      char name[160];
      std::snprintf(name, sizeof name, "attention %s B%ld T%ld HS%ld p%.1f: stopping at the last key = every key",
                    prec == Precision::BF16 ? "bf16" : "fp16", long(B), long(T), long(c.HS), double(c.p));
      check_equal(name, res[0], res[1]);
    }
  }
}

// Unpadded batches (attention/varlen.h): bf16 reading qkv16 in place, the whole batch in one launch
// per kernel. Against the padded kernels once per sequence (B 1, T its length, a zero mask, its
// dropout numbers after the previous sequences', its slice of the saved buffer: what Backend's
// per-sequence default and BERTCC_CUDA_VARLEN=0 run) bit for bit: out, its bf16 rounding, the saved
// buffer (lse, dropout decisions), dqkv and its rounding, the backward from out16 alone as bf16
// models run it; and against the CPU's varlen kernel within bf16's tolerance.
void test_attention_varlen() {
  struct Case {
    int64_t NH, HS;
    float p;
    std::vector<int64_t> lens;
  };
  const Case cases[] = {{2, 64, 0.1f, {7, 1, 37, 16, 3}},
                        {2, 64, 0.0f, {7, 1, 37, 16, 3}},
                        {4, 64, 0.1f, {200, 1, 384, 129}},
                        {2, 128, 0.1f, {33, 5, 96, 64}},
                        {3, 32, 0.0f, {70, 1, 129}},
                        {2, 16, 0.1f, {19, 65}},
                        {12, 64, 0.1f, {128}}};
  const Rng rng(79, 0);
  const uint64_t base = 1000;
  for (const Case& c : cases) {
    const int64_t B = static_cast<int64_t>(c.lens.size()), NH = c.NH, C = NH * c.HS;
    std::vector<int64_t> cu(B + 1, 0);
    for (int64_t b = 0; b < B; ++b) cu[b + 1] = cu[b] + c.lens[b];
    const int64_t N = cu[B];
    const auto qkv = randv(N * 3 * C, -2, 2), dout = randv(N * C);
    std::vector<bf16_t> q16(qkv.size());
    for (size_t i = 0; i < qkv.size(); ++i) q16[i] = f32_to_bf16(qkv[i]);
    // the saved buffer and its slices as Backend's default lays them out
    std::vector<int64_t> off(B + 1, 0);
    for (int64_t b = 0; b < B; ++b)
      off[b + 1] =
          off[b] + (G::attention_saved_size(1, c.lens[b], C, NH, c.p > 0, Precision::BF16, true) + 15) / 16 * 16;
    const std::vector<float> nan_out(N * C, NAN), nan_d(N * 3 * C, NAN), nan_saved(off[B], NAN);
    const std::vector<bf16_t> nan16(N * C, 0xFFFF), nan16d(N * 3 * C, 0xFFFF);
    Dev<bf16_t> gq16(q16);
    Dev<float> gdout(dout), zeros(static_cast<size_t>(N)), gwork(static_cast<size_t>(N * NH));
    std::vector<float> res[2];
    for (int form = 0; form < 2; ++form) {  // 0: one padded call per sequence; 1: varlen
      Dev<float> gout(nan_out), gsaved(nan_saved), gd(nan_d);
      Dev<bf16_t> gout16(nan16), gd16(nan16d);
      if (form == 1) {
        G::attention_varlen_forward(gout.p, gout16.p, gsaved.p, nullptr, gq16.p, cu.data(), B, C, NH, c.p, rng, base,
                                    Precision::BF16);
        G::attention_varlen_backward(gd.p, gd16.p, gwork.p, gdout.p, nullptr, gout16.p, nullptr, gq16.p, gsaved.p,
                                     cu.data(), B, C, NH, c.p, rng, base, Precision::BF16);
      } else {
        uint64_t sb = base;
        for (int64_t b = 0; b < B; ++b) {
          const int64_t r0 = cu[b], n = c.lens[b];
          G::attention_forward(gout.p + r0 * C, gsaved.p + off[b], nullptr, zeros.p, 1, n, C, NH, c.p, rng, sb,
                               Precision::BF16, gout16.p + r0 * C, gq16.p + r0 * 3 * C);
          G::attention_backward(gd.p + r0 * 3 * C, gwork.p, gdout.p + r0 * C, nullptr, nullptr, gout16.p + r0 * C,
                                gsaved.p + off[b], zeros.p, 1, n, C, NH, c.p, rng, sb, Precision::BF16,
                                gd16.p + r0 * 3 * C, gq16.p + r0 * 3 * C);
          sb += attention_drop_numbers(static_cast<uint64_t>(NH), static_cast<uint64_t>(n));
        }
      }
      const auto o = gout.back(), sv = gsaved.back(), d = gd.back();
      const auto o16 = gout16.back(), d16 = gd16.back();
      res[form] = o;
      res[form].insert(res[form].end(), sv.begin(), sv.end());
      res[form].insert(res[form].end(), d.begin(), d.end());
      for (bf16_t x : o16) res[form].push_back(static_cast<float>(x));
      for (bf16_t x : d16) res[form].push_back(static_cast<float>(x));
      if (form == 1) {
        std::vector<float> cout(N * C),
            csaved(K::attention_varlen_saved_size(cu.data(), B, C, NH, c.p > 0, Precision::BF16)), cd(N * 3 * C);
        K::attention_varlen_forward(cout.data(), csaved.data(), qkv.data(), cu.data(), B, C, NH, c.p, rng, base,
                                    Precision::BF16);
        K::attention_varlen_backward(cd.data(), dout.data(), qkv.data(), csaved.data(), cu.data(), B, C, NH, c.p,
                                     Precision::BF16);
        char name[160];
        std::snprintf(name, sizeof name, "attention varlen B%ld N%ld NH%ld HS%ld p%.1f: out vs CPU", long(B), long(N),
                      long(NH), long(c.HS), double(c.p));
        check(name, cout, o, 1e-2);
        std::snprintf(name, sizeof name, "attention varlen B%ld N%ld NH%ld HS%ld p%.1f: dqkv vs CPU", long(B), long(N),
                      long(NH), long(c.HS), double(c.p));
        check(name, cd, d, 1e-2);
      }
    }
    char name[160];
    std::snprintf(name, sizeof name, "attention varlen B%ld N%ld HS%ld p%.1f = per sequence", long(B), long(N),
                  long(c.HS), double(c.p));
    check_equal(name, res[0], res[1]);
  }
}

// The CUDA backend's attention_varlen_* (backend/ops.cpp) against its one call per sequence (_per_sequence)
// on the same backend, out and dqkv bit for bit: bf16 with qkv16 and fp32 (the varlen kernels; fp32
// also against the CPU's fp32 varlen kernel), fp16 (the default itself, or one padded call where
// every sequence has one length).
void test_attention_varlen_backend() {
  Backend& be = backend_for("cuda:" + std::to_string(g_device));
  const int64_t NH = 2, C = 128;
  const Rng rng(80, 0);
  for (const std::vector<int64_t>& lens : {std::vector<int64_t>{7, 1, 37}, std::vector<int64_t>{16, 16, 16}})
    for (Precision prec : {Precision::BF16, Precision::F32, Precision::F16}) {
      const int64_t B = static_cast<int64_t>(lens.size());
      std::vector<int64_t> cu(B + 1, 0);
      for (int64_t b = 0; b < B; ++b) cu[b + 1] = cu[b] + lens[b];
      const int64_t N = cu[B];
      const bool bf = prec == Precision::BF16;
      const auto qkv = randv(N * 3 * C, -2, 2), dout = randv(N * C);
      std::vector<bf16_t> q16(qkv.size());
      for (size_t i = 0; i < qkv.size(); ++i) q16[i] = f32_to_bf16(qkv[i]);
      Dev<float> gqkv(qkv), gdout(dout);
      Dev<bf16_t> gq16(q16);
      const float* fq = bf ? nullptr : gqkv.p;
      const bf16_t* hq = bf ? gq16.p : nullptr;
      std::vector<float> res[2];
      for (int form = 0; form < 2; ++form) {  // 0: one call per sequence; 1: the CUDA backend's
        Dev<float> out(static_cast<size_t>(N * C)), dq(static_cast<size_t>(N * 3 * C)),
            saved(static_cast<size_t>(be.attention_varlen_saved_size(cu.data(), B, C, NH, true, prec, bf))),
            work(static_cast<size_t>(be.attention_varlen_work_size(cu.data(), B, C, NH)));
        if (form == 1) {
          be.attention_varlen_forward(out.p, nullptr, saved.p, work.p, fq, hq, cu.data(), B, C, NH, 0.1f, rng, 1000,
                                      prec);
          be.attention_varlen_backward(dq.p, nullptr, work.p, gdout.p, fq, hq, out.p, nullptr, saved.p, cu.data(), B, C,
                                       NH, 0.1f, rng, 1000, prec);
        } else {
          be.attention_varlen_forward_per_sequence(out.p, nullptr, saved.p, work.p, fq, hq, cu.data(), B, C, NH, 0.1f,
                                                   rng, 1000, prec);
          be.attention_varlen_backward_per_sequence(dq.p, nullptr, work.p, gdout.p, fq, hq, out.p, nullptr, saved.p,
                                                    cu.data(), B, C, NH, 0.1f, rng, 1000, prec);
        }
        res[form] = out.back();
        const auto d = dq.back();
        res[form].insert(res[form].end(), d.begin(), d.end());
      }
      if (prec == Precision::F32) {  // the fp32 varlen kernels against the CPU's fp32 varlen kernel
        std::vector<float> cout(N * C), csaved(K::attention_varlen_saved_size(cu.data(), B, C, NH, true, prec)),
            cd(N * 3 * C);
        K::attention_varlen_forward(cout.data(), csaved.data(), qkv.data(), cu.data(), B, C, NH, 0.1f, rng, 1000, prec);
        K::attention_varlen_backward(cd.data(), dout.data(), qkv.data(), csaved.data(), cu.data(), B, C, NH, 0.1f,
                                     prec);
        cout.insert(cout.end(), cd.begin(), cd.end());
        char what[160];
        std::snprintf(what, sizeof what, "attention varlen backend fp32 lengths %ld,%ld,%ld vs CPU", long(lens[0]),
                      long(lens[1]), long(lens[2]));
        check(what, cout, res[1], 1e-5);
      }
      char name[160];
      std::snprintf(name, sizeof name, "attention varlen backend %s lengths %ld,%ld,%ld = default",
                    bf                       ? "bf16"
                    : prec == Precision::F16 ? "fp16"
                                             : "fp32",
                    long(lens[0]), long(lens[1]), long(lens[2]));
      check_equal(name, res[0], res[1]);
    }
}

// BERTCC_ATTENTION=cudnn's path through the backend's padded attention (set_attention_impl, as the
// variable sets it): bf16, head sizes 64 and 128, right-padded masks, training with dropout 0.1 and
// 0 and the inference forward, against bertcc's kernels through the same calls (the same dropout
// decisions, so the same math: within bf16 tolerance); and fp32, which cuDNN does not take, giving
// bertcc's bits exactly. Where cuDNN cannot be loaded the group says so and fails only when
// BERTCC_ATTENTION=cudnn asked for it.
void test_attention_cudnn() {
  const G::AttentionImpl was = G::attention_impl();
  const G::cudnn::Library& lib = G::cudnn::library();
  if (!lib.loaded) {
    const bool asked = was == G::AttentionImpl::Cudnn;
    std::printf("attention cudnn: cuDNN not loaded (%s)%s\n", lib.why.c_str(),
                asked ? ": FAIL (BERTCC_ATTENTION=cudnn)" : ", group skipped");
    if (asked) ++g_failures, ++g_checks;
    return;
  }
  Backend& be = backend_for("cuda:" + std::to_string(g_device));
  const Rng rng(91, 0);
  const AttentionHints hints{true, false};
  for (const int64_t hs : {64, 128})
    for (const float p : {0.1f, 0.0f}) {
      const int64_t B = 3, T = 200, NH = 2, C = NH * hs;
      const std::vector<int64_t> lens{T, T - 37, 5};
      std::vector<float> mask(B * T, 0.0f);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = lens[b]; t < T; ++t) mask[b * T + t] = -10000.0f;
      const auto qkv = randv(B * T * 3 * C, -2, 2), dout = randv(B * T * C);
      std::vector<bf16_t> q16(qkv.size());
      for (size_t i = 0; i < qkv.size(); ++i) q16[i] = f32_to_bf16(qkv[i]);
      Dev<bf16_t> gq16(q16);
      Dev<float> gmask(mask), gdout(dout);
      const int64_t saved_n = be.attention_saved_size(B, T, C, NH, p > 0, Precision::BF16, true);
      std::vector<float> res[2], lse[2], res_inf[2];
      bool taken = true;  // a shape cuDNN refuses fails here and the group goes on to the next one
      for (int path = 0; path < 2 && taken; ++path) {  // 0: bertcc's kernels, 1: cuDNN
        G::set_attention_impl(path ? G::AttentionImpl::Cudnn : G::AttentionImpl::Bertcc);
        // training (forward and backward) and the inference forward: each must be cuDNN's, or the
        // comparison below would be of bertcc's kernels with themselves
        for (const bool inference : {false, true})
          if (path == 1 && taken &&
              !G::attention_cudnn_takes(B, T, C, NH, inference ? 0.0f : p, Precision::BF16, gq16.p, true, inference)) {
            std::printf("attention cudnn hs %ld p %.1f: cuDNN does not take the %s shape (said above)  FAIL\n",
                        long(hs), p, inference ? "inference" : "training");
            ++g_failures, ++g_checks;
            taken = false;
          }
        if (!taken) break;
        Dev<bf16_t> out16(static_cast<size_t>(B * T * C)), dq16(static_cast<size_t>(B * T * 3 * C)),
            inf16(static_cast<size_t>(B * T * C));
        Dev<float> saved(static_cast<size_t>(saved_n)), dq(static_cast<size_t>(B * T * 3 * C)),
            work(static_cast<size_t>(be.attention_work_size(B, T, C, NH, p > 0, Precision::BF16, false))),
            isaved(static_cast<size_t>(saved_n)),
            iwork(static_cast<size_t>(be.attention_work_size(B, T, C, NH, false, Precision::BF16, true)));
        be.attention_forward(nullptr, out16.p, saved.p, work.p, nullptr, gq16.p, gmask.p, B, T, C, NH, p, rng, 1000,
                             Precision::BF16, hints);
        be.attention_backward(dq.p, dq16.p, work.p, gdout.p, nullptr, gq16.p, nullptr, out16.p, saved.p, gmask.p, B, T,
                              C, NH, p, rng, 1000, Precision::BF16, hints);
        be.attention_forward(nullptr, inf16.p, isaved.p, iwork.p, nullptr, gq16.p, gmask.p, B, T, C, NH, 0.0f, rng, 0,
                             Precision::BF16, AttentionHints{true, true});
        for (const bf16_t x : out16.back()) res[path].push_back(bf16_to_f32(x));
        for (const bf16_t x : dq16.back()) res[path].push_back(bf16_to_f32(x));
        const auto d = dq.back();
        res[path].insert(res[path].end(), d.begin(), d.end());
        const auto sv = saved.back();
        lse[path].assign(sv.begin(), sv.begin() + B * NH * T);
        for (const bf16_t x : inf16.back()) res_inf[path].push_back(bf16_to_f32(x));
      }
      if (!taken) continue;
      char name[160];
      std::snprintf(name, sizeof name, "attention cudnn bf16 hs %ld p %.1f out16|dqkv16|dqkv vs bertcc", long(hs), p);
      check(name, res[0], res[1], 2e-2);
      std::snprintf(name, sizeof name, "attention cudnn bf16 hs %ld p %.1f lse (stats) vs bertcc", long(hs), p);
      check(name, lse[0], lse[1], 1e-3);
      std::snprintf(name, sizeof name, "attention cudnn bf16 hs %ld inference out16 vs bertcc", long(hs));
      check(name, res_inf[0], res_inf[1], 2e-2);
    }
  // fp32: not cuDNN's; with the switch on, bertcc's bits exactly
  {
    const int64_t B = 2, T = 64, NH = 2, C = 128;
    std::vector<float> mask(B * T, 0.0f);
    for (int64_t t = 40; t < T; ++t) mask[T + t] = -10000.0f;
    const auto qkv = randv(B * T * 3 * C, -2, 2), dout = randv(B * T * C);
    Dev<float> gqkv(qkv), gmask(mask), gdout(dout);
    std::vector<float> res[2];
    for (int path = 0; path < 2; ++path) {
      G::set_attention_impl(path ? G::AttentionImpl::Cudnn : G::AttentionImpl::Bertcc);
      Dev<float> out(static_cast<size_t>(B * T * C)), dq(static_cast<size_t>(B * T * 3 * C)),
          saved(static_cast<size_t>(be.attention_saved_size(B, T, C, NH, true, Precision::F32, false))),
          work(static_cast<size_t>(be.attention_work_size(B, T, C, NH, true, Precision::F32, false)));
      be.attention_forward(out.p, nullptr, saved.p, work.p, gqkv.p, nullptr, gmask.p, B, T, C, NH, 0.1f, rng, 1000,
                           Precision::F32, hints);
      be.attention_backward(dq.p, nullptr, work.p, gdout.p, gqkv.p, nullptr, out.p, nullptr, saved.p, gmask.p, B, T, C,
                            NH, 0.1f, rng, 1000, Precision::F32, hints);
      res[path] = out.back();
      const auto d = dq.back();
      res[path].insert(res[path].end(), d.begin(), d.end());
    }
    check_equal("attention cudnn switch on, fp32 (bertcc's) = switch off", res[0], res[1]);
  }
  G::set_attention_impl(was);
}

ParamTable optim_table() {
  ParamTable t;
  t.add("a.weight", {97, 131}, true);  // two 8192-element blocks
  t.add("a.bias", {97}, false);
  t.add("frozen.weight", {13, 7}, true);
  t.add("b.weight", {33, 5}, true);
  t.add("b.LayerNorm.weight", {33}, false);
  t.set_trainable("frozen.weight", false);
  t.set_lr_scale("b.weight", 0.5f);
  return t;
}

void test_optim() {
  const ParamTable t = optim_table();
  const size_t n = t.total();
  auto x = randv(n, -3, 3);
  const double cn = global_norm(x.data(), n);
  Dev<float> gx(x);
  const double gn = G::global_norm(gx.p, n);
  check("global_norm", {static_cast<float>(cn)}, {static_cast<float>(gn)}, 1e-6);
  // the CPU's blocked arithmetic, bit for bit: the unsharded norm on the device must equal the
  // ZeRO-1 norm summed on the host (three blocks and a cut one here)
  check_equal("global_norm (the CPU's bits)", std::vector<double>{cn}, std::vector<double>{gn});
  {  // ZeRO-1 with an empty part (begin == end): the step counts, nothing moves, no moments needed
    auto w = randv(n), g = randv(n, -0.5f, 0.5f);
    Dev<float> gw(w), gg(g);
    G::DeviceAdamState es;
    es.begin = es.end = t.at("b.weight").offset;
    LambOptions lo;
    G::lamb_step(t, gw.p, gg.p, es, 1e-2f, lo, global_norm(g.data(), n));
    check_equal("lamb, empty ZeRO-1 part: parameters unchanged", w, gw.back());
    check_equal("lamb, empty ZeRO-1 part: step counted", std::vector<int64_t>{1}, std::vector<int64_t>{es.step});
  }
  // which: LAMB, AdamW; shard: the whole buffer, or (ZeRO-1) the moments of the tensors from
  // frozen.weight on only, with the global norm given, the parameters before it left alone
  for (int shard = 0; shard < 2; ++shard)
    for (int which = 0; which < 2; ++which) {
      const size_t b = shard ? t.at("frozen.weight").offset : 0, e = shard ? n : 0, own = shard ? n - b : n;
      auto w = randv(n);
      AdamState cs;
      cs.begin = b;
      cs.end = e;
      G::DeviceAdamState gs;
      gs.begin = b;
      gs.end = e;
      Dev<float> gw(w), gm(own), gv(own);
      gs.m = gm.p;
      gs.v = gv.p;
      LambOptions lo;
      lo.max_grad_norm = 1.0f;
      AdamWOptions ao;
      ao.max_grad_norm = 1.0f;
      const std::string name = std::string(which == 0 ? "lamb" : "adamw") + (shard ? " (ZeRO-1 shard)" : "");
      for (int step = 0; step < 3; ++step) {
        auto g = randv(n, -0.5f, 0.5f);  // norm above 1: clipping is on
        const double given = shard ? global_norm(g.data(), n) : -1.0;
        const float lr = 1e-2f * static_cast<float>(step + 1);  // a new rate each step (the plan is kept)
        Dev<float> gg(g);
        double c_norm, g_norm;
        if (which == 0) {
          c_norm = lamb_step(t, w.data(), g.data(), cs, lr, lo, given);
          g_norm = G::lamb_step(t, gw.p, gg.p, gs, lr, lo, given);
        } else {
          c_norm = adamw_step(t, w.data(), g.data(), cs, lr, ao, given);
          g_norm = G::adamw_step(t, gw.p, gg.p, gs, lr, ao, given);
        }
        const std::string tag = name + " step " + std::to_string(step + 1);
        check(tag + " gradient norm", {static_cast<float>(c_norm)}, {static_cast<float>(g_norm)}, 1e-6);
        check(tag + " parameters", w, gw.back(), 1e-5);
      }
      check(name + " first moment", cs.m, gm.back(), 1e-5);
      check(name + " second moment", cs.v, gv.back(), 1e-5);
    }
  // the device keeps a table's chunk plan between steps: a table changed in place (the same
  // address: a tensor's learning-rate factor, a tensor frozen) must get a new one
  for (int which = 0; which < 2; ++which) {
    ParamTable u = optim_table();
    auto w = randv(n);
    AdamState cs;
    G::DeviceAdamState gs;
    Dev<float> gw(w), gm(n), gv(n);
    gs.m = gm.p;
    gs.v = gv.p;
    const std::string name = std::string(which == 0 ? "lamb" : "adamw") + ", table changed between steps";
    for (int step = 0; step < 3; ++step) {
      if (step == 1) u.set_lr_scale("b.weight", 0.25f);
      if (step == 2) u.set_trainable("a.bias", false);
      auto g = randv(n, -0.5f, 0.5f);
      Dev<float> gg(g);
      if (which == 0) {
        lamb_step(u, w.data(), g.data(), cs, 1e-2f, LambOptions{}, -1.0);
        G::lamb_step(u, gw.p, gg.p, gs, 1e-2f, LambOptions{}, -1.0);
      } else {
        adamw_step(u, w.data(), g.data(), cs, 1e-2f, AdamWOptions{}, -1.0);
        G::adamw_step(u, gw.p, gg.p, gs, 1e-2f, AdamWOptions{}, -1.0);
      }
      check(name + " step " + std::to_string(step + 1) + " parameters", w, gw.back(), 1e-5);
    }
  }
}

// ELECTRA's Gumbel-max sampling: the same picks as the host from the same counters (a BERT
// vocabulary and an odd one; a row of -inf with one NaN gives 0 on both; equal logits leave the
// choice to the noise alone)
void test_gumbel() {
  const Rng rng{1234, 0};
  for (int64_t V : {30522, 97}) {
    const int64_t M = 41;
    auto logits = randv(static_cast<size_t>(M * V), -4, 4);
    for (int64_t v = 0; v < V; ++v) logits[static_cast<size_t>(V + v)] = -INFINITY;
    logits[static_cast<size_t>(V + 3)] = NAN;
    for (int64_t v = 0; v < V; ++v) logits[static_cast<size_t>(2 * V + v)] = 0.5f;
    const uint64_t base = 4 * 1001;
    std::vector<int32_t> cpu(static_cast<size_t>(M)), gpu(static_cast<size_t>(M));
    K::gumbel_argmax(cpu.data(), logits.data(), M, V, rng, base);
    Dev<float> gl(logits);
    G::gumbel_argmax(gpu.data(), gl.p, M, V, rng, base);
    check_equal("gumbel_argmax V=" + std::to_string(V), cpu, gpu);
  }
}

// The joint SQuAD head's expected start state, strided into [expected ; h_cls] rows
void test_weighted_rows() {
  const int64_t B = 5, T = 77, C = 96, ld = 2 * C;
  auto x = randv(static_cast<size_t>(B * T * C));
  std::vector<double> w(static_cast<size_t>(B * T));
  for (size_t i = 0; i < w.size(); ++i) w[i] = 1.0 / static_cast<double>(1 + i % 13);
  std::vector<float> out(static_cast<size_t>(B * ld), 0.25f);
  K::weighted_row_sums(out.data(), ld, x.data(), w.data(), B, T, C);
  Dev<float> gx(x), gout(std::vector<float>(static_cast<size_t>(B * ld), 0.25f));
  G::weighted_row_sums(gout.p, ld, gx.p, w.data(), B, T, C);
  check("weighted_row_sums (strided)", out, gout.back(), 1e-6);
}

// The model on the device, inference: the one-layer arena (buffers sharing a region, each layer's
// output over its input) against the training arena, and the bf16-only encoder matrices
// (use_backend_for_inference, W null in the products) against the full placement: the same bits
// on this GPU, for a QA and a classification head, in bf16 and (arena only) fp32; the inference
// placement must hold less memory.
// A small model (vocabulary 512, hidden 128, 2 heads) for the model-level checks.
BertConfig small_model(int layers, int intermediate, std::vector<std::string> labels) {
  BertConfig c;
  c.vocab_size = 512;
  c.hidden_size = 128;
  c.num_hidden_layers = layers;
  c.num_attention_heads = 2;
  c.intermediate_size = intermediate;
  c.max_position_embeddings = 64;
  c.id2label = std::move(labels);
  return c;
}
// B random sequences of T tokens; row r ends in pad_step * r padding tokens; segment 1 after `split`.
BertBatch padded_batch(int64_t B, int64_t T, uint32_t seed, int64_t pad_step, int64_t split) {
  BertBatch b;
  b.B = B;
  b.T = T;
  std::mt19937 g(seed);
  for (int64_t i = 0; i < B * T; ++i) {
    const bool pad = i % T >= T - pad_step * (i / T);
    b.input_ids.push_back(pad ? 0 : 1 + static_cast<int32_t>(g() % 500));
    b.input_mask.push_back(pad ? 0 : 1);
    b.segment_ids.push_back(i % T > split ? 1 : 0);
  }
  return b;
}

void test_model_inference() {
  const BertConfig c = small_model(3, 384, {"a", "b", "c"});
  BertBatch b = padded_batch(4, 40, 5, 3, 20);
  b.start_positions = {1, 5, 9, 2};  // labels: the training arena's step has a backward
  b.end_positions = {3, 5, 12, 30};
  b.labels = {0, 2, 1, 1};
  Backend& be = backend_for("cuda:" + std::to_string(g_device));
  for (Heads h : {Heads::QuestionAnswering, Heads::SequenceClassification}) {
    const std::string hn = h == Heads::QuestionAnswering ? "qa" : "classify";
    for (Precision prec : {Precision::F32, Precision::BF16}) {
      const std::string pn = prec == Precision::BF16 ? " bf16" : " fp32";
      Bert full(c, h), lean(c, h);
      full.init_weights(3);
      lean.init_weights(3);
      const double m0 = be.buffer_mb();
      full.use_backend(be);
      const double m_full = be.buffer_mb() - m0;
      lean.use_backend_for_inference(be, prec);
      const double m_lean = be.buffer_mb() - m0 - m_full;
      Rng r1{9, 0}, r2{9, 0}, r3{9, 0};
      full.zero_grad();
      full.finetune_step(b, r1, StepArgs{.backward = true, .precision = prec});  // the training arena
      const std::vector<float> train_arena = full.head_logits();
      full.finetune_step(b, r2, StepArgs{.precision = prec});  // the inference arena
      check_equal("model " + hn + pn + ": inference arena = training arena", train_arena, full.head_logits());
      lean.finetune_step(b, r3, StepArgs{.precision = prec});
      check_equal("model " + hn + pn + ": inference placement = full", train_arena, lean.head_logits());
      ++g_checks;
      const bool smaller = prec == Precision::BF16 ? m_lean < m_full : m_lean == m_full;
      std::printf("%-58s %.3f MB against %.3f MB%s\n", ("model " + hn + pn + ": weights placed").c_str(), m_lean,
                  m_full, smaller ? "" : "  FAIL");
      if (!smaller) ++g_failures;
    }
  }
}

// --cuda-graphs: an inference forward recorded and replayed gives the unrecorded forward's bits,
// for new inputs of a recorded shape, after another shape has re-carved the arena, and after a
// larger one has grown it (the record is dropped and made again); recording refuses host work.
void test_graphs() {
  const BertConfig c = small_model(2, 256, {"a", "b"});
  Backend& be = backend_for("cuda:" + std::to_string(g_device));
  // the shapes in order: 4 x 40 three times (run, record, replay), new inputs, another shape, back,
  // a larger shape (the arena grows: the record is dropped), back twice (run, record again)
  const std::vector<std::pair<int64_t, uint32_t>> plan = {{4, 1}, {4, 2}, {4, 3}, {4, 4}, {2, 5},
                                                          {4, 6}, {9, 7}, {4, 8}, {4, 9}, {4, 10}};
  for (Precision prec : {Precision::F32, Precision::BF16}) {
    const std::string pn = prec == Precision::BF16 ? " bf16" : " fp32";
    Bert eager(c, Heads::SequenceClassification), recorded(c, Heads::SequenceClassification);
    eager.init_weights(3);
    recorded.init_weights(3);
    eager.use_backend_for_inference(be, prec);
    recorded.use_backend_for_inference(be, prec);
    const uint64_t launches0 = G::graph_launches();
    std::vector<float> want, got;
    for (const auto& [B, seed] : plan) {
      const BertBatch b = padded_batch(B, 40, seed, 2, 20);
      Rng r1{9, 0}, r2{9, 0};
      set_cuda_graphs(false);
      eager.finetune_step(b, r1, StepArgs{.precision = prec});
      const std::vector<float> e = eager.head_logits();
      want.insert(want.end(), e.begin(), e.end());
      set_cuda_graphs(true);
      recorded.finetune_step(b, r2, StepArgs{.precision = prec});
      const std::vector<float> r = recorded.head_logits();
      got.insert(got.end(), r.begin(), r.end());
    }
    set_cuda_graphs(false);
    check_equal("graphs" + pn + ": recorded forwards = unrecorded (10 batches, 3 shapes)", want, got);
    // as graphs: the 2nd to 4th runs of 4 x 40 (recorded at the 2nd) and the one after 2 x 40; after
    // 9 x 40 grew the arena, the 8th runs unrecorded and the 9th and 10th as a new record
    const uint64_t launches = G::graph_launches() - launches0;
    ++g_checks;
    std::printf("%-58s %llu (want 6)%s\n", ("graphs" + pn + ": forwards run as graphs").c_str(),
                static_cast<unsigned long long>(launches), launches == 6 ? "" : "  FAIL");
    if (launches != 6) ++g_failures;
  }
  // host work inside a recording is refused by name, and the recording ends cleanly
  {
    Dev<float> x(std::vector<float>(16, 1.0f));
    std::vector<float> h(16);
    std::string what;
    G::graph_capture_begin();
    try {
      G::copy_to_host(h.data(), x.p, sizeof(float) * 16);
    } catch (const std::exception& e) {
      what = e.what();
    }
    G::graph_capture_abort();
    ++g_checks;
    const bool ok = what.find("CUDA graph capture: a copy to the host") != std::string::npos && !G::capturing();
    std::printf("%-58s %s%s\n", "graphs: a host copy while recording is refused", what.substr(0, 60).c_str(),
                ok ? "" : "  FAIL");
    if (!ok) ++g_failures;
    check_equal("graphs: the stream works after an aborted recording", std::vector<float>(16, 1.0f), x.back());
  }
}

// Host-to-device copies (copy_to_device: pinned staging, queued on the stream): the source may be
// reused at once, the ring is reused only after its copies have run, the copies keep their order
// with the kernels around them, and the host does not wait for queued work.
void test_uploads() {
  // 1. Uploads of many sizes from one host buffer rewritten after each: 3 times the ring's 32 MiB,
  // with copies above the 4 MiB staging limit (cudaMemcpy) and tiny ones among them.
  {
    const std::vector<size_t> sizes = {1, 3, 1000, 3u << 20, (4u << 20), (4u << 20) + 4, 5u << 20, 257, 2u << 20};
    std::vector<void*> dev;
    std::vector<size_t> len;
    size_t total = 0;
    for (int i = 0; total < (size_t{96} << 20); ++i) {
      len.push_back(sizes[i % sizes.size()] + static_cast<size_t>(i));
      dev.push_back(G::alloc(len.back()));
      total += len.back();
    }
    const uint64_t staged0 = G::staged_copies(), waits0 = G::stage_waits();
    std::vector<unsigned char> host(len.empty() ? 0 : *std::max_element(len.begin(), len.end()));
    auto pattern = [](size_t i, size_t j) { return static_cast<unsigned char>((i * 131 + j * 7 + (j >> 9)) & 0xFF); };
    for (size_t i = 0; i < dev.size(); ++i) {
      for (size_t j = 0; j < len[i]; ++j) host[j] = pattern(i, j);
      G::copy_to_device(dev[i], host.data(), len[i]);
    }
    size_t diff = 0;
    std::vector<unsigned char> back;
    for (size_t i = 0; i < dev.size(); ++i) {
      back.assign(len[i], 0);
      G::copy_to_host(back.data(), dev[i], len[i]);
      for (size_t j = 0; j < len[i]; ++j) diff += back[j] != pattern(i, j);
      G::free(dev[i]);
    }
    ++g_checks;
    const uint64_t staged = G::staged_copies() - staged0;
    std::printf("%-58s %zu bytes differ in %zu uploads (%llu staged, %llu waits)%s\n",
                "uploads: 96 MiB through the ring, one host buffer", diff, dev.size(),
                static_cast<unsigned long long>(staged), static_cast<unsigned long long>(G::stage_waits() - waits0),
                diff == 0 && staged > 0 ? "" : "  FAIL");
    if (diff != 0 || staged == 0) ++g_failures;
  }
  // 2. In order with device work: x = A; y = x (queued); x = B; x *= 2
  {
    const std::vector<float> a = randv(5000), bv = randv(5000);
    Dev<float> x(a.size()), y(a.size());
    G::copy_to_device(x.p, a.data(), sizeof(float) * a.size());
    G::copy_device(y.p, x.p, sizeof(float) * a.size());
    G::copy_to_device(x.p, bv.data(), sizeof(float) * bv.size());
    G::scale(x.p, static_cast<int64_t>(bv.size()), 2.0f);
    std::vector<float> b2(bv);
    for (float& v : b2) v *= 2.0f;
    check_equal("uploads: in order with the kernels around them (first)", a, y.back());
    check_equal("uploads: in order with the kernels around them (second)", b2, x.back());
  }
  // 3. The host does not wait: an upload queued behind about 0.1 s of exact fp32 GEMMs returns
  // while they still run (cudaMemcpy from pageable memory would have waited for them).
  {
    const int64_t n = 4096;
    Dev<float> A(randv(static_cast<size_t>(n * n))), B(randv(static_cast<size_t>(n * n))),
        C(static_cast<size_t>(n * n));
    const std::vector<float> small = randv(1024);
    Dev<float> d(small.size());
    G::synchronize();
    for (int i = 0; i < 40; ++i) G::linear_forward(C.p, A.p, B.p, nullptr, n, n, n, Precision::F32);
    G::copy_to_device(d.p, small.data(), sizeof(float) * small.size());
    const bool busy = !G::stream_idle();
    ++g_checks;
    std::printf("%-58s %s%s\n", "uploads: the host does not wait for queued GEMMs",
                busy ? "returned while they ran" : "the GEMMs had finished", busy ? "" : "  FAIL");
    if (!busy) ++g_failures;
    check_equal("uploads: the copy queued behind them arrives", small, d.back());
  }
}

}  // namespace

int main(int argc, char** argv) {
  int device = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--device" && i + 1 < argc)
      device = std::atoi(argv[++i]);
    else if (a == "--filter" && i + 1 < argc)
      g_filter = argv[++i];
    else {
      std::fprintf(stderr, "usage: test_cuda_kernels [--device N] [--filter SUBSTRING]\n");
      return 2;
    }
  }
  if (!G::usable_device_or_skip()) return 77;
  try {
    G::set_device(device);
    g_device = device;
    const G::DeviceInfo d = G::device_info(device);
    std::printf("device %d: %s, compute capability %d.%d, %d SMs, %.1f GiB\n", device, d.name.c_str(), d.cc_major,
                d.cc_minor, d.sm_count, static_cast<double>(d.total_mem) / (1 << 30));
    if (selected("embeddings")) test_embeddings();
    if (selected("layernorm")) test_layernorm();
    if (selected("activations")) test_activations();
    if (selected("rows")) test_rows();
    if (selected("xent")) test_xent();
    if (selected("gemm")) test_gemm();
    if (selected("attention")) test_attention();
    if (selected("attention_padding")) test_attention_padding();
    if (selected("attention_varlen")) test_attention_varlen(), test_attention_varlen_backend();
    if (selected("attention_cudnn")) test_attention_cudnn();
    if (selected("optim")) test_optim();
    if (selected("gumbel")) test_gumbel();
    if (selected("rows")) test_weighted_rows();
    if (selected("model")) test_model_inference();
    if (selected("graphs")) test_graphs();
    if (selected("uploads")) test_uploads();
    G::synchronize();
  } catch (const std::exception& e) {
    std::printf("ERROR: %s\n", e.what());
    return 1;
  }
  std::printf("%d checks, %d failed\n", g_checks, g_failures);
  return g_failures ? 1 : 0;
}
