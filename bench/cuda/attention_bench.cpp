// Fused attention on the GPU: bertcc's CUDA kernels (fp32 on CUDA cores; bf16 and fp16 on Tensor
// Cores) timed forward and backward on BERT's shapes, with a padding mask and dropout as in
// pre-training. One JSON line per (shape, precision); bench/cuda/attention_peer.py times PyTorch's
// scaled_dot_product_attention on the same shapes for the ratio. TFLOP/s count the usual
// attention FLOPs: forward 4*B*NH*T^2*HS, backward 2.5x that (FlashAttention's convention; these
// kernels recompute S in both backward kernels, so they do 14/10 of the counted backward work).
//   bertcc_cuda_attention_bench [--shapes B,T,NH,HS;...] [--iters N] [--dropout P] [--precisions fp32,bf16,fp16]
//                               [--padding F]  (every other sequence ends in F*T padding keys; 0.125)
//                               [--varlen]  (also bf16 unpadded: the real tokens of the same batch packed,
//                                            attention/varlen.h's one launch per kernel against one padded
//                                            call per sequence, as impl bertcc-varlen and bertcc-perseq)
//                               [--cudnn]  (also the inference forward in bf16 without dropout: cuDNN's fused
//                                           attention, attention/cudnn_graphs.h, as impl cudnn, against bertcc's
//                                           kernels on the same qkv16, as bertcc-infer; max |difference|
//                                           printed, exit 1 above 2e-2 or when cuDNN cannot run a shape)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bertcc/error.h"
#include "bertcc/rng.h"
#include "core/settings.h"
#include "cuda/attention/cudnn_graphs.h"
#include "cuda/attention/varlen.h"
#include "cuda/cuda_kernels.h"

using namespace bertcc;
namespace G = bertcc::cuda;

namespace {
// The dropout counters' first number, a multiple of 4 as Rng::reserve gives the model (until
// 2026-11-28 this bench passed 7, which sent the Tensor Core forward down a per-element draw path
// the model never took; that path is gone)
constexpr uint64_t kBase = 8;
struct Buf {
  float* p;
  explicit Buf(const std::vector<float>& v) : p(static_cast<float*>(G::alloc(v.size() * sizeof(float)))) {
    G::copy_to_device(p, v.data(), v.size() * sizeof(float));
  }
  ~Buf() { G::free(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
};

// The mean time of one call over `iters` calls queued back to back between two synchronisations, so
// that the host's launch work overlaps the GPU's as in training (timing each call between
// synchronisations added the launch latency of its kernels to every call: 0.54 ms for a forward
// whose kernels took 0.32 ms in a training step's CUDA-event profile, H200).
template <class F>
double mean_ms(int iters, F f) {
  f();
  G::synchronize();  // warm-up (module load, shared-memory attributes)
  const auto a = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) f();
  G::synchronize();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count() / iters;
}
// A device buffer of n values of T (zeros), or a copy of v.
template <class T>
struct DBuf {
  T* p;
  explicit DBuf(size_t n) : p(static_cast<T*>(G::alloc(std::max<size_t>(n, 1) * sizeof(T)))) {
    G::zero(p, n * sizeof(T));
  }
  explicit DBuf(const std::vector<T>& v) : DBuf(v.size()) { G::copy_to_device(p, v.data(), v.size() * sizeof(T)); }
  ~DBuf() { G::free(p); }
  DBuf(const DBuf&) = delete;
  DBuf& operator=(const DBuf&) = delete;
};

// --varlen: the batch's real tokens (sequence b: its first lens[b] rows) packed, bf16 from qkv16 in
// place as the model runs it; one JSON line for the varlen kernels, one for a padded call per
// sequence (what BERTCC_CUDA_VARLEN=0 runs). FLOPs: those of the real tokens (sum of n^2).
void bench_varlen(const std::vector<float>& qkv, const std::vector<float>& dout, const std::vector<long>& lens, long T,
                  long NH, long HS, float p, int iters, double padding) {
  const long B = static_cast<long>(lens.size()), C = NH * HS;
  std::vector<int64_t> cu(B + 1, 0), off(B + 1, 0);
  double n2 = 0;
  for (long b = 0; b < B; ++b) {
    cu[b + 1] = cu[b] + lens[b];
    off[b + 1] = off[b] + (G::attention_saved_size(1, lens[b], C, NH, p > 0, Precision::BF16, true) + 15) / 16 * 16;
    n2 += double(lens[b]) * lens[b];
  }
  const long N = static_cast<long>(cu[B]);
  std::vector<bf16_t> q16(N * 3 * C);
  std::vector<float> d(N * C);
  for (long b = 0; b < B; ++b)
    for (long t = 0; t < lens[b]; ++t) {
      for (long c = 0; c < 3 * C; ++c) q16[(cu[b] + t) * 3 * C + c] = f32_to_bf16(qkv[(b * T + t) * 3 * C + c]);
      for (long c = 0; c < C; ++c) d[(cu[b] + t) * C + c] = dout[(b * T + t) * C + c];
    }
  DBuf<bf16_t> gq(q16), out16(N * C), dqkv16(N * 3 * C);
  DBuf<float> gd(d), dqkv(N * 3 * C), saved(off[B]), work(N * NH), zeros(T);
  const Rng rng(42, 0);
  for (int form = 0; form < 2; ++form) {
    const double f = mean_ms(iters, [&] {
      if (form == 1)
        return G::attention_varlen_forward(nullptr, out16.p, saved.p, nullptr, gq.p, cu.data(), B, C, NH, p, rng, kBase,
                                           Precision::BF16);
      uint64_t sb = kBase;
      for (long b = 0; b < B; ++b) {
        G::attention_forward(nullptr, saved.p + off[b], nullptr, zeros.p, 1, lens[b], C, NH, p, rng, sb,
                             Precision::BF16, out16.p + cu[b] * C, gq.p + cu[b] * 3 * C);
        sb += attention_drop_numbers(NH, lens[b]);
      }
    });
    const double bw = mean_ms(iters, [&] {
      if (form == 1)
        return G::attention_varlen_backward(dqkv.p, dqkv16.p, work.p, gd.p, nullptr, out16.p, nullptr, gq.p, saved.p,
                                            cu.data(), B, C, NH, p, rng, kBase, Precision::BF16);
      uint64_t sb = kBase;
      for (long b = 0; b < B; ++b) {
        G::attention_backward(dqkv.p + cu[b] * 3 * C, work.p, gd.p + cu[b] * C, nullptr, nullptr, out16.p + cu[b] * C,
                              saved.p + off[b], zeros.p, 1, lens[b], C, NH, p, rng, sb, Precision::BF16,
                              dqkv16.p + cu[b] * 3 * C, gq.p + cu[b] * 3 * C);
        sb += attention_drop_numbers(NH, lens[b]);
      }
    });
    const double flop = 4.0 * NH * n2 * HS;
    std::printf(
        "{\"impl\": \"%s\", \"precision\": \"bf16\", \"B\": %ld, \"T\": %ld, \"NH\": %ld, \"HS\": %ld, "
        "\"dropout\": %.2f, \"padding\": %.3f, \"tokens\": %ld, \"fwd_ms\": %.4f, \"bwd_ms\": %.4f, "
        "\"fwd_tflops\": %.2f, \"bwd_tflops\": %.2f}\n",
        form ? "bertcc-varlen" : "bertcc-perseq", B, T, NH, HS, double(p), padding, N, f, bw, flop / f * 1e-9,
        2.5 * flop / bw * 1e-9);
    std::fflush(stdout);
  }
}

// --cudnn: the inference forward (bf16, no dropout) by cuDNN and by bertcc's kernels on the same
// qkv16. Every row computed (q_len = T, as bertcc's kernels do); keys past sequence b's lens[b]
// masked (bertcc: -10000 added, cuDNN: kv_len). One JSON line each; false when cuDNN could not run
// the shape or the outputs differ by more than 2e-2 somewhere.
bool bench_cudnn(const std::vector<float>& qkv, const std::vector<long>& lens, long T, long NH, long HS, int iters,
                 double padding) {
  const long B = static_cast<long>(lens.size()), C = NH * HS;
  std::vector<bf16_t> q16(qkv.size());
  for (size_t i = 0; i < qkv.size(); ++i) q16[i] = f32_to_bf16(qkv[i]);
  std::vector<float> mask(B * T, 0.0f);
  std::vector<int32_t> q_len(B, static_cast<int32_t>(T)), kv_len(B);
  for (long b = 0; b < B; ++b) {
    kv_len[b] = static_cast<int32_t>(lens[b]);
    for (long t = lens[b]; t < T; ++t) mask[b * T + t] = -10000.0f;
  }
  DBuf<bf16_t> gq(q16), ours(B * T * C), theirs(B * T * C);
  DBuf<float> m(mask), lse(static_cast<size_t>(G::attention_saved_size(B, T, C, NH, false, Precision::BF16, true)));
  DBuf<int32_t> gql(q_len), gkvl(kv_len);
  const Rng rng(42, 0);
  std::string why;
  auto cudnn = [&] { return G::cudnn::sdpa_forward_bf16(theirs.p, gq.p, gql.p, gkvl.p, B, T, NH, HS, &why); };
  auto kernels = [&] {
    G::attention_forward(nullptr, lse.p, nullptr, m.p, B, T, C, NH, 0.0f, rng, kBase, Precision::BF16, ours.p, gq.p);
  };
  if (!cudnn()) {
    std::fprintf(stderr, "cuDNN attention unavailable for B=%ld T=%ld NH=%ld HS=%ld: %s\n", B, T, NH, HS, why.c_str());
    return false;
  }
  kernels();
  std::vector<bf16_t> a(B * T * C), c(B * T * C);
  G::copy_to_host(a.data(), ours.p, a.size() * sizeof(bf16_t));
  G::copy_to_host(c.data(), theirs.p, c.size() * sizeof(bf16_t));
  double diff = 0;  // a NaN on either side counts as infinite
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(static_cast<double>(bf16_to_f32(a[i])) - bf16_to_f32(c[i]));
    diff = std::isnan(d) ? HUGE_VAL : std::max(diff, d);
  }
  const double fb = mean_ms(iters, kernels), fc = mean_ms(iters, [&] {
                                               if (!cudnn()) fail("cuDNN attention failed after its first call: ", why);
                                             });
  const double flop = 4.0 * B * NH * double(T) * T * HS;
  for (int k = 0; k < 2; ++k)
    std::printf(
        "{\"impl\": \"%s\", \"precision\": \"bf16\", \"B\": %ld, \"T\": %ld, \"NH\": %ld, \"HS\": %ld, "
        "\"dropout\": 0.00, \"padding\": %.3f, \"fwd_ms\": %.4f, \"fwd_tflops\": %.2f, \"max_abs_diff\": %.3g}\n",
        k ? "cudnn" : "bertcc-infer", B, T, NH, HS, padding, k ? fc : fb, flop / (k ? fc : fb) * 1e-9, diff);
  std::fflush(stdout);
  if (diff > 2e-2) std::fprintf(stderr, "cuDNN and bertcc's forward differ by %.3g (> 2e-2)\n", diff);
  return diff <= 2e-2;
}
}  // namespace

int main(int argc, char** argv) {
  std::string shapes = "16,512,16,64;64,128,16,64;128,128,12,64;8,512,8,128", precs = "fp32,bf16,fp16";
  double padding = 0.125;  // every other sequence ends in this fraction of T as padding keys
  int iters = 20;
  float p = 0.1f;
  bool varlen = false, cudnn = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--shapes" && i + 1 < argc)
      shapes = argv[++i];
    else if (a == "--iters" && i + 1 < argc)
      iters = std::max(1, std::atoi(argv[++i]));
    else if (a == "--dropout" && i + 1 < argc)
      p = static_cast<float>(std::atof(argv[++i]));
    else if (a == "--precisions" && i + 1 < argc)
      precs = argv[++i];
    else if (a == "--padding" && i + 1 < argc)
      padding = std::atof(argv[++i]);
    else if (a == "--varlen")
      varlen = true;
    else if (a == "--cudnn")
      cudnn = true;
    else {
      std::fprintf(stderr,
                   "usage: bertcc_cuda_attention_bench [--shapes B,T,NH,HS;...] [--iters N] [--dropout P] "
                   "[--precisions fp32,bf16,fp16] [--padding F] [--varlen] [--cudnn]\n");
      return 2;
    }
  }
  if (!(padding >= 0.0 && padding < 1.0)) {
    std::fprintf(stderr, "--padding: %g is not a fraction in [0, 1)\n", padding);
    return 2;
  }
  if (!G::usable_device_or_skip()) return 77;
  try {
    G::set_device(0);
    const G::DeviceInfo d = G::device_info(0);
    std::fprintf(stderr, "device: %s, compute capability %d.%d\n", d.name.c_str(), d.cc_major, d.cc_minor);
    if (cudnn) {
      const G::cudnn::Library& lib = G::cudnn::library();
      if (!lib.loaded) {
        std::fprintf(stderr, "--cudnn: %s\n", lib.why.c_str());
        return 1;
      }
      std::fprintf(stderr, "cuDNN: %s, version %zu\n", lib.path.c_str(), lib.version);
    }
    int status = 0;
    std::mt19937 gen(1);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::stringstream ss(shapes);
    std::string shape;
    while (std::getline(ss, shape, ';')) {
      long B = 0, T = 0, NH = 0, HS = 0;
      if (std::sscanf(shape.c_str(), "%ld,%ld,%ld,%ld", &B, &T, &NH, &HS) != 4) {
        std::fprintf(stderr, "--shapes: '%s' is not B,T,NH,HS\n", shape.c_str());
        return 2;
      }
      const long C = NH * HS;
      std::vector<float> qkv(B * T * 3 * C), dout(B * T * C), mask(B * T, 0.0f);
      for (auto& x : qkv) x = u(gen);
      for (auto& x : dout) x = u(gen);
      for (long b = 0; b < B; ++b)  // every other sequence ends in padding (--padding: an eighth of T)
        for (long t = T - (b % 2) * static_cast<long>(padding * static_cast<double>(T)); t < T; ++t)
          mask[b * T + t] = -10000.0f;
      Buf q(qkv), dO(dout), m(mask), out(std::vector<float>(B * T * C)),
          lse(std::vector<float>(static_cast<size_t>(G::attention_saved_size(B, T, C, NH, p > 0, Precision::BF16)))),
          dqkv(std::vector<float>(B * T * 3 * C)),
          work(std::vector<float>(static_cast<size_t>(G::attention_backward_work_size(B, T, NH))));
      const Rng rng(42, 0);
      // BERTCC_ATTENTION_FWD_ROWS (attention/tensor_core.cu: 64 or 128 query rows per forward block) and
      // BERTCC_ATTENTION_FWD_MIN_BLOCKS (1 or 4 blocks per SM the forward's registers allow) named
      // in the label, so that runs of the forms can be told apart
      // BERTCC_ATTENTION_SKIP_PADDING=0: every key visited, also those past a sequence's last unmasked
      // key (attention/tensor_core_kernels.cuh: count_keys), as "-allkeys" (core/settings.h)
      const RuntimeSettings& rs = settings();
      const std::string impl =
          std::string("bertcc") + (rs.attention_fwd_rows ? "-fwd" + std::to_string(rs.attention_fwd_rows) : "") +
          (rs.attention_fwd_min_blocks ? "-mb" + std::to_string(rs.attention_fwd_min_blocks) : "") +
          (rs.attention_skip_padding ? "" : "-allkeys");
      std::stringstream ps(precs);
      std::string pn;
      while (std::getline(ps, pn, ',')) {
        const Precision prec = pn == "bf16" ? Precision::BF16 : pn == "fp16" ? Precision::F16 : Precision::F32;
        const double f =
            mean_ms(iters, [&] { G::attention_forward(out.p, lse.p, q.p, m.p, B, T, C, NH, p, rng, kBase, prec); });
        const double bw = mean_ms(iters, [&] {
          G::attention_backward(dqkv.p, work.p, dO.p, q.p, out.p, nullptr, lse.p, m.p, B, T, C, NH, p, rng, kBase,
                                prec);
        });
        const double flop = 4.0 * B * NH * double(T) * T * HS;
        std::printf(
            "{\"impl\": \"%s\", \"precision\": \"%s\", \"B\": %ld, \"T\": %ld, \"NH\": %ld, \"HS\": %ld, "
            "\"dropout\": %.2f, \"padding\": %.3f, \"fwd_ms\": %.4f, \"bwd_ms\": %.4f, \"fwd_tflops\": %.2f, "
            "\"bwd_tflops\": %.2f}\n",
            impl.c_str(), pn.c_str(), B, T, NH, HS, double(p), padding, f, bw, flop / f * 1e-9, 2.5 * flop / bw * 1e-9);
        std::fflush(stdout);
        if (varlen && prec == Precision::BF16) {
          std::vector<long> lens(B);
          for (long b = 0; b < B; ++b) lens[b] = T - (b % 2) * static_cast<long>(padding * static_cast<double>(T));
          bench_varlen(qkv, dout, lens, T, NH, HS, p, iters, padding);
        }
      }
      if (cudnn) {
        std::vector<long> lens(B);
        for (long b = 0; b < B; ++b) lens[b] = T - (b % 2) * static_cast<long>(padding * static_cast<double>(T));
        if (!bench_cudnn(qkv, lens, T, NH, HS, iters, padding)) status = 1;
      }
    }
    return status;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ERROR: %s\n", e.what());
    return 1;
  }
}
