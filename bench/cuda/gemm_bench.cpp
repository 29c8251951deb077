// The GEMMs of a BERT encoder layer on the GPU, each timed as bertcc runs it (bf16 operands, fp32
// output, the bias in cuBLASLt's epilogue, the gradients' products adding into fp32), against the
// other answers of cuBLASLt's heuristic for the same problem and, for the products that write an
// activation, against the same product writing bf16. One JSON line per product: where a training
// step's GEMM time goes, whether cuBLASLt's first answer is its best, and what fp32 outputs cost.
// The same-run probe (bertcc bench's: C = A B, no transposes, fp32 output) comes first.
// With --tune FILE: each product (and the QKV and FFN1 forwards writing bf16, as the model runs them)
// through bertcc's GEMM with tuning on (src/cuda/gemm_tuning.h), on random operands: one JSON line
// per product with the heuristic's first answer's time and the tuned one's, the table in FILE.
//   bertcc_cuda_gemm_bench [--tokens N,...] [--hidden C] [--intermediate I] [--algos K] [--iters N] [--tune FILE]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/cuda_kernels.h"
#include "cuda/gemm_tuning.h"

using namespace bertcc;
namespace G = bertcc::cuda;

namespace {
struct Dev {
  void* p;
  explicit Dev(size_t bytes) : p(G::alloc(bytes)) {}
  ~Dev() { G::free(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
};

// Small finite bf16 values (0x3c3c: about 0.0115) and fp32 outputs and biases of zeros.
void fill16(void* p, size_t elems) {
  std::vector<uint16_t> h(elems, 0x3c3c);
  G::copy_to_device(p, h.data(), elems * sizeof(uint16_t));
}

// Random bf16 values in [-1, 1) and fp32 values in [-0.1, 0.1) (tuning times on data like the model's:
// constants and zeros can run faster).
std::vector<uint16_t> fill16_random(void* p, size_t elems, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<uint16_t> h(elems);
  for (auto& x : h) x = f32_to_bf16(u(gen));
  G::copy_to_device(p, h.data(), elems * sizeof(uint16_t));
  return h;
}
std::vector<float> fill32_random(void* p, size_t elems, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-0.1f, 0.1f);
  std::vector<float> h(elems);
  for (auto& x : h) x = u(gen);
  G::copy_to_device(p, h.data(), elems * sizeof(float));
  return h;
}

// 256 sampled elements of g's output (fp32, or bf16 in out16) against float64 on the host: the
// tuned algorithm computed op(A) op(B) (+ bias) (+ C's old value, c0) once. The largest error,
// relative to the sum of the terms' magnitudes.
double check_product(const GemmArgs& g, const std::vector<uint16_t>& a, const std::vector<uint16_t>& b,
                     const std::vector<float>& bias, const std::vector<float>& c0, const void* out16) {
  const size_t n = static_cast<size_t>(g.M * g.ldc);
  std::vector<float> got(n);
  if (out16) {
    std::vector<uint16_t> h(n);
    G::copy_to_host(h.data(), out16, n * sizeof(uint16_t));
    for (size_t i = 0; i < n; ++i) got[i] = bf16_to_f32(h[i]);
  } else {
    G::copy_to_host(got.data(), g.C, n * sizeof(float));
  }
  std::mt19937 gen(7);
  double worst = 0;
  for (int s = 0; s < 256; ++s) {
    const int64_t r = static_cast<int64_t>(gen() % static_cast<uint32_t>(g.M)),
                  c = static_cast<int64_t>(gen() % static_cast<uint32_t>(g.N));
    double ref = 0, mag = 0;
    for (int64_t k = 0; k < g.K; ++k) {
      const double x = bf16_to_f32(a[static_cast<size_t>(g.trans_a ? k * g.lda + r : r * g.lda + k)]);
      const double y = bf16_to_f32(b[static_cast<size_t>(g.trans_b ? c * g.ldb + k : k * g.ldb + c)]);
      ref += x * y;
      mag += std::fabs(x * y);
    }
    if (g.bias) ref += bias[static_cast<size_t>(c)], mag += std::fabs(bias[static_cast<size_t>(c)]);
    if (g.accumulate) {
      const double old = c0[static_cast<size_t>(r * g.ldc + c)];
      ref += old, mag += std::fabs(old);
    }
    worst = std::max(worst, std::fabs(got[static_cast<size_t>(r * g.ldc + c)] - ref) / std::max(mag, 1e-30));
  }
  return worst;
}

struct Product {
  std::string name;
  GemmArgs g;
  bool writes_activation;  // forward outputs and input gradients (bf16 output timed too)
};
}  // namespace

int main(int argc, char** argv) {
  std::string tokens = "8192,12288,24576";
  int64_t C = 1024, I = 4096;
  int algos = 8, iters = 10;
  std::string tune_file;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--tokens" && i + 1 < argc)
      tokens = argv[++i];
    else if (a == "--hidden" && i + 1 < argc)
      C = std::atoll(argv[++i]);
    else if (a == "--intermediate" && i + 1 < argc)
      I = std::atoll(argv[++i]);
    else if (a == "--algos" && i + 1 < argc)
      algos = std::max(1, std::atoi(argv[++i]));
    else if (a == "--iters" && i + 1 < argc)
      iters = std::max(1, std::atoi(argv[++i]));
    else if (a == "--tune" && i + 1 < argc)
      tune_file = argv[++i];
    else {
      std::fprintf(stderr,
                   "usage: bertcc_cuda_gemm_bench [--tokens N,...] [--hidden C] [--intermediate I] "
                   "[--algos K] [--iters N] [--tune FILE]\n");
      return 2;
    }
  }
  if (!G::usable_device_or_skip()) return 77;
  try {
    G::set_device(0);
    std::printf("{\"gpu\": \"%s\"}\n", G::device_info(0).name.c_str());
    if (!tune_file.empty()) G::configure_gemm_tuning(tune_file, true);
    std::stringstream ts(tokens);
    std::string tok;
    while (std::getline(ts, tok, ',')) {
      const int64_t N = std::atoll(tok.c_str());
      if (N <= 0) continue;
      if (tune_file.empty())  // (in tuning, its shape would be tuned too, on its constant operands)
        std::printf("{\"tokens\": %lld, \"probe_tflops\": %.1f}\n", static_cast<long long>(N),
                    G::gemm_probe_tflops(N, I, C, Precision::BF16, 5));
      // operands big enough for any product of the layer: activations [N, I], weights [I, C] or
      // [3C, C], outputs fp32 [N, I]
      const int64_t big = std::max(I, 3 * C);
      Dev x16(static_cast<size_t>(N * big) * 2), y16(static_cast<size_t>(N * big) * 2),
          w16(static_cast<size_t>(big * C) * 2), w16b(static_cast<size_t>(big * C) * 2),
          out(static_cast<size_t>(N * big) * 4), bias(static_cast<size_t>(big) * 4);
      if (tune_file.empty()) {
        fill16(x16.p, static_cast<size_t>(N * big));
        fill16(y16.p, static_cast<size_t>(N * big));
        fill16(w16.p, static_cast<size_t>(big * C));
        fill16(w16b.p, static_cast<size_t>(big * C));
        G::zero(out.p, static_cast<size_t>(N * big) * 4);
        G::zero(bias.p, static_cast<size_t>(big) * 4);
      }
      std::vector<uint16_t> hx, hy, hw;  // host copies, tuning only (check_product)
      std::vector<float> hbias;
      if (!tune_file.empty()) {
        hx = fill16_random(x16.p, static_cast<size_t>(N * big), 1);
        hy = fill16_random(y16.p, static_cast<size_t>(N * big), 2);
        hw = fill16_random(w16.p, static_cast<size_t>(big * C), 3);
        fill32_random(out.p, static_cast<size_t>(N * big), 5);
        hbias = fill32_random(bias.p, static_cast<size_t>(big), 6);
      }
      std::vector<Product> ps;
      // linear (out features n, in features k) as cuda::linear_forward / linear_backward call it
      auto linear = [&](const std::string& name, int64_t n, int64_t k) {
        GemmArgs f;  // y[N, n] = x[N, k] W[n, k]^T + b
        f.M = N, f.N = n, f.K = k, f.lda = k, f.ldb = k, f.trans_b = true, f.ldc = n;
        f.A16 = static_cast<const bf16_t*>(x16.p), f.B16 = static_cast<const bf16_t*>(w16.p);
        f.C = static_cast<float*>(out.p), f.bias = static_cast<const float*>(bias.p);
        ps.push_back({name + " forward", f, true});
        GemmArgs dx;  // dx[N, k] = dy[N, n] W[n, k]
        dx.M = N, dx.N = k, dx.K = n, dx.lda = n, dx.ldb = k, dx.ldc = k;
        dx.A16 = static_cast<const bf16_t*>(y16.p), dx.B16 = static_cast<const bf16_t*>(w16.p);
        dx.C = static_cast<float*>(out.p);
        ps.push_back({name + " dx", dx, true});
        GemmArgs dw;  // dW[n, k] += dy^T[n, N] x[N, k]
        dw.M = n, dw.N = k, dw.K = N, dw.lda = n, dw.trans_a = true, dw.ldb = k, dw.ldc = k, dw.accumulate = true;
        dw.A16 = static_cast<const bf16_t*>(y16.p), dw.B16 = static_cast<const bf16_t*>(x16.p);
        dw.C = static_cast<float*>(out.p);
        ps.push_back({name + " dW", dw, false});
      };
      linear("qkv", 3 * C, C);
      linear("attention output", C, C);
      linear("ffn1", I, C);
      linear("ffn2", C, I);
      if (!tune_file.empty()) {
        // bf16 operands' output for the QKV and FFN1 forwards (LinearIo::y16), as the model asks
        Dev o16(static_cast<size_t>(N * big) * 2);
        double first_total = 0, tuned_total = 0, flops_total = 0;
        int bad = 0;
        auto host_of = [&](const void* p) -> const std::vector<uint16_t>& {
          return p == x16.p ? hx : p == y16.p ? hy : hw;
        };
        // g's output checked (fp32 output: within 1e-4 of the terms' magnitudes; bf16: 2^-7), then reported
        auto report = [&](const std::string& name, const GemmArgs& g, const std::vector<float>& c0, const void* o) {
          G::synchronize();
          const double err = check_product(g, host_of(g.A16), host_of(g.B16), hbias, c0, o);
          if (!(err <= (o ? 1.0 / 128 : 1e-4))) {
            ++bad;
            std::printf("{\"tokens\": %lld, \"product\": \"%s\", \"error\": \"wrong output: %.3g\"}\n",
                        static_cast<long long>(N), name.c_str(), err);
          }
          const G::LastGemm l = G::last_gemm();
          if (!l.choice) {
            std::printf("{\"tokens\": %lld, \"product\": \"%s\", \"source\": \"%s\", \"error\": \"not tuned\"}\n",
                        static_cast<long long>(N), name.c_str(), l.source.c_str());
            return;
          }
          const double f = l.shape.flops(), t0 = l.choice->first_ms, t1 = l.choice->ms;
          first_total += t0 > 0 ? t0 : t1;
          tuned_total += t1;
          flops_total += f;
          std::printf(
              "{\"tokens\": %lld, \"product\": \"%s\", \"M\": %lld, \"N\": %lld, \"K\": %lld, \"out\": \"%s\", "
              "\"source\": \"%s\", \"first_ms\": %.4f, \"first_tflops\": %.1f, \"tuned_ms\": %.4f, "
              "\"tuned_tflops\": %.1f, \"answer\": %d, \"answers\": %d, \"rejected\": %d, \"noise\": %.4f, "
              "\"algo\": \"%s\", \"check\": %.3g}\n",
              static_cast<long long>(N), name.c_str(), static_cast<long long>(l.shape.m),
              static_cast<long long>(l.shape.n), static_cast<long long>(l.shape.k), l.shape.out.c_str(),
              l.source.c_str(), t0, t0 > 0 ? f / t0 / 1e9 : 0.0, t1, f / t1 / 1e9, l.choice->rank, l.choice->candidates,
              l.choice->rejected, l.choice->spread, l.choice->info.c_str(), err);
        };
        for (const Product& p : ps) {
          std::vector<float> c0;  // C before an accumulating product
          if (p.g.accumulate) {
            c0.resize(static_cast<size_t>(p.g.M * p.g.ldc));
            G::copy_to_host(c0.data(), p.g.C, c0.size() * sizeof(float));
          }
          G::gemm(p.g, Precision::BF16);
          report(p.name, p.g, c0, nullptr);
        }
        for (const auto& [name, n] : {std::pair<std::string, int64_t>{"qkv", 3 * C}, {"ffn1", I}}) {
          G::linear_forward(static_cast<float*>(out.p), nullptr, nullptr, static_cast<const float*>(bias.p), N, n, C,
                            Precision::BF16, static_cast<const bf16_t*>(w16.p), static_cast<const bf16_t*>(x16.p),
                            nullptr, static_cast<bf16_t*>(o16.p));
          GemmArgs g;  // linear_forward's product
          g.M = N, g.N = n, g.K = C, g.lda = C, g.ldb = C, g.trans_b = true, g.ldc = n;
          g.A16 = static_cast<const bf16_t*>(x16.p), g.B16 = static_cast<const bf16_t*>(w16.p);
          g.bias = static_cast<const float*>(bias.p);
          report(name + " forward, bf16 output", g, {}, o16.p);
        }
        std::printf(
            "{\"tokens\": %lld, \"layer_first_ms\": %.4f, \"layer_tuned_ms\": %.4f, \"layer_first_tflops\": %.1f, "
            "\"layer_tuned_tflops\": %.1f}\n",
            static_cast<long long>(N), first_total, tuned_total, flops_total / first_total / 1e9,
            flops_total / tuned_total / 1e9);
        if (bad) {
          std::fprintf(stderr, "bertcc_cuda_gemm_bench: %d products gave wrong outputs after tuning\n", bad);
          return 1;
        }
        continue;
      }
      double ours_total = 0, best_total = 0, bf16_total = 0, flops_total = 0;
      for (const Product& p : ps) {
        const double flops = 2.0 * static_cast<double>(p.g.M) * p.g.N * p.g.K;
        const std::vector<double> ms = G::gemm_algo_ms(p.g, false, algos, iters);
        if (ms.empty() || ms[0] <= 0) {
          std::printf("{\"tokens\": %lld, \"product\": \"%s\", \"error\": \"no algorithm ran\"}\n",
                      static_cast<long long>(N), p.name.c_str());
          continue;
        }
        size_t best = 0;
        for (size_t i = 1; i < ms.size(); ++i)
          if (ms[i] > 0 && ms[i] < ms[best]) best = i;
        double b16 = -1;
        if (p.writes_activation) {
          const std::vector<double> m16 = G::gemm_algo_ms(p.g, true, 1, iters);
          if (!m16.empty()) b16 = m16[0];
        }
        ours_total += ms[0];
        best_total += ms[best];
        bf16_total += b16 > 0 ? b16 : ms[0];
        flops_total += flops;
        std::printf(
            "{\"tokens\": %lld, \"product\": \"%s\", \"M\": %lld, \"N\": %lld, \"K\": %lld, \"ms\": %.4f, "
            "\"tflops\": %.1f, \"answers\": %zu, \"best_answer\": %zu, \"best_ms\": %.4f, \"best_tflops\": %.1f, "
            "\"bf16_out_ms\": %.4f}\n",
            static_cast<long long>(N), p.name.c_str(), static_cast<long long>(p.g.M), static_cast<long long>(p.g.N),
            static_cast<long long>(p.g.K), ms[0], flops / ms[0] / 1e9, ms.size(), best, ms[best],
            flops / ms[best] / 1e9, b16);
      }
      std::printf(
          "{\"tokens\": %lld, \"layer_ms\": %.4f, \"layer_tflops\": %.1f, \"best_answers_ms\": %.4f, "
          "\"bf16_outputs_ms\": %.4f}\n",
          static_cast<long long>(N), ours_total, flops_total / ours_total / 1e9, best_total, bf16_total);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bertcc_cuda_gemm_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
