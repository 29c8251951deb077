// cuDNN attention (src/cuda/attention/cudnn_graphs.h), in what a machine can check:
//   without a device: libcudnn opens, its version, every tensor and operation descriptor of the
//   forward graph, of the training forward and of the backward graph (these two without and with
//   dropout) finalizes and so does each operation graph (no handle), for head sizes 64 and 128;
//   what cudnnCreate says;
//   with one: the forward against a double-precision reference on the same bf16 inputs, padded
//   sequences included (max |cudnn - reference| <= 2e-2 over the rows computed); the training
//   forward (out within 2e-2, stats within 2e-3) and the backward (dQ, dK, dV within 2e-2 times
//   max(1, the largest reference entry)) the same way, with p = 0 and p = 0.1 as bertcc's CPU
//   attention decides it (the mask from bertcc/rng.h's Philox layout); cuDNN's description of the
//   device, and a plan built from it alone (reported).
// Exit 0 all passed, 1 a failure, 77 libcudnn not found (ctest: skipped).
//   test_cudnn_attention [--steps]  (every descriptor's step printed)
//                        [--save-deviceprop FILE]  (with a device: cuDNN's JSON description of it)
//                        [--deviceprop FILE]  (such a description: the heuristics and a plan for that
//                                              device too, without it)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bertcc/rng.h"
#include "cuda/attention/cudnn_graphs.h"
#include "cuda/cuda_kernels.h"

using namespace bertcc;
namespace G = bertcc::cuda;
namespace D = bertcc::cuda::cudnn;

namespace {

int g_failures = 0;

// The forward for one shape against the reference: rows t < q_len[b], keys j < kv_len[b].
void check_forward(long B, long T, long NH, long HS, const std::vector<int32_t>& q_len,
                   const std::vector<int32_t>& kv_len) {
  const long C = NH * HS;
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<bf16_t> qkv(B * T * 3 * C);
  for (auto& x : qkv) x = f32_to_bf16(u(gen));
  bf16_t* dq = static_cast<bf16_t*>(G::alloc(qkv.size() * sizeof(bf16_t)));
  bf16_t* dout = static_cast<bf16_t*>(G::alloc(B * T * C * sizeof(bf16_t)));
  int32_t* dlq = static_cast<int32_t*>(G::alloc(B * sizeof(int32_t)));
  int32_t* dlkv = static_cast<int32_t*>(G::alloc(B * sizeof(int32_t)));
  G::copy_to_device(dq, qkv.data(), qkv.size() * sizeof(bf16_t));
  G::copy_to_device(dlq, q_len.data(), B * sizeof(int32_t));
  G::copy_to_device(dlkv, kv_len.data(), B * sizeof(int32_t));
  G::zero(dout, B * T * C * sizeof(bf16_t));
  std::string why;
  const bool ran = D::sdpa_forward_bf16(dout, dq, dlq, dlkv, B, T, NH, HS, &why);
  std::vector<bf16_t> out(B * T * C);
  if (ran) {
    G::synchronize();
    G::copy_to_host(out.data(), dout, out.size() * sizeof(bf16_t));
  }
  G::free(dq);
  G::free(dout);
  G::free(dlq);
  G::free(dlkv);
  char name[96];
  std::snprintf(name, sizeof name, "forward B=%ld T=%ld NH=%ld HS=%ld", B, T, NH, HS);
  if (!ran) {
    std::printf("FAIL %s: %s\n", name, why.c_str());
    ++g_failures;
    return;
  }
  auto at = [&](long b, long t, long c) { return static_cast<double>(bf16_to_f32(qkv[(b * T + t) * 3 * C + c])); };
  const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
  double err = 0;
  std::vector<double> p(T);
  for (long b = 0; b < B; ++b)
    for (long h = 0; h < NH; ++h)
      for (long t = 0; t < q_len[b]; ++t) {
        double mx = -1e300, sum = 0;
        for (long j = 0; j < kv_len[b]; ++j) {
          double s = 0;
          for (long d = 0; d < HS; ++d) s += at(b, t, h * HS + d) * at(b, j, C + h * HS + d);
          p[j] = s * scale;
          mx = std::max(mx, p[j]);
        }
        for (long j = 0; j < kv_len[b]; ++j) sum += (p[j] = std::exp(p[j] - mx));
        for (long d = 0; d < HS; ++d) {
          double o = 0;
          for (long j = 0; j < kv_len[b]; ++j) o += p[j] / sum * at(b, j, 2 * C + h * HS + d);
          const double e = std::fabs(o - bf16_to_f32(out[(b * T + t) * C + h * HS + d]));
          err = std::isnan(e) ? HUGE_VAL : std::max(err, e);  // a NaN fails
        }
      }
  const bool ok = err <= 2e-2;
  std::printf("%s %s: max |cudnn - reference| %.3g\n", ok ? "ok  " : "FAIL", name, err);
  if (!ok) ++g_failures;
}

// max |got - want| over the entries `use` selects, NaN as infinity; *peak: max |want| there.
template <class Got, class Use>
double max_err(const std::vector<double>& want, Got got, Use use, double* peak) {
  double err = 0;
  *peak = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (!use(i)) continue;
    const double e = std::fabs(got(i) - want[i]);
    err = std::isnan(e) ? HUGE_VAL : std::max(err, e);
    *peak = std::max(*peak, std::fabs(want[i]));
  }
  return err;
}

// The training forward (out, stats) and the backward (dQ, dK, dV) for one shape against a float64
// reference on the same bf16 inputs, with dropout p decided as bertcc's CPU attention decides it
// (bertcc/rng.h: Philox number attention_drop_number of the site, its 16 bits against
// dropout_threshold16), passed as the bf16 keep mask. Rows t < q_len[b], keys j < kv_len[b].
void check_train(long B, long T, long NH, long HS, const std::vector<int32_t>& q_len,
                 const std::vector<int32_t>& kv_len, float p) {
  const long C = NH * HS;
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<bf16_t> qkv(B * T * 3 * C), dout(B * T * C);
  for (auto& x : qkv) x = f32_to_bf16(u(gen));
  for (auto& x : dout) x = f32_to_bf16(u(gen));
  std::vector<bf16_t> mask;
  std::vector<double> keep(B * NH * T * T, 1.0);
  if (p > 0) {
    Rng rng(1234, 8);
    const uint64_t base = rng.reserve(attention_drop_numbers(B * NH, T));
    std::vector<uint32_t> nums(attention_drop_numbers(B * NH, T));
    rng.fill_u32(base, nums.size(), nums.data());
    const uint32_t thr = dropout_threshold16(p);
    mask.resize(keep.size());
    for (long bh = 0; bh < B * NH; ++bh)
      for (long i = 0; i < T; ++i)
        for (long j = 0; j < T; ++j) {
          const bool k = attention_drop_bits(nums[attention_drop_number(bh, i, j, T)], j) >= thr;
          keep[(bh * T + i) * T + j] = k ? 1.0 : 0.0;
          mask[(bh * T + i) * T + j] = f32_to_bf16(k ? 1.0f : 0.0f);
        }
  }
  auto dev = [](const void* host, size_t bytes) {
    void* d = G::alloc(bytes);
    if (host)
      G::copy_to_device(d, host, bytes);
    else
      G::zero(d, bytes);
    return d;
  };
  auto* d_qkv = static_cast<bf16_t*>(dev(qkv.data(), qkv.size() * sizeof(bf16_t)));
  auto* d_dout = static_cast<bf16_t*>(dev(dout.data(), dout.size() * sizeof(bf16_t)));
  auto* d_out = static_cast<bf16_t*>(dev(nullptr, B * T * C * sizeof(bf16_t)));
  auto* d_dqkv = static_cast<bf16_t*>(dev(nullptr, qkv.size() * sizeof(bf16_t)));
  auto* d_stats = static_cast<float*>(dev(nullptr, B * NH * T * sizeof(float)));
  auto* d_lq = static_cast<int32_t*>(dev(q_len.data(), B * sizeof(int32_t)));
  auto* d_lkv = static_cast<int32_t*>(dev(kv_len.data(), B * sizeof(int32_t)));
  auto* d_mask = p > 0 ? static_cast<bf16_t*>(dev(mask.data(), mask.size() * sizeof(bf16_t))) : nullptr;
  std::string why;
  bool ran = D::sdpa_train_forward_bf16(d_out, d_stats, d_qkv, d_lq, d_lkv, d_mask, p, B, T, NH, HS, &why);
  const bool fwd_ran = ran;
  if (ran)
    ran = D::sdpa_backward_bf16(d_dqkv, d_qkv, d_out, d_dout, d_stats, d_lq, d_lkv, d_mask, p, B, T, NH, HS, &why);
  std::vector<bf16_t> out(B * T * C), dqkv(qkv.size());
  std::vector<float> stats(B * NH * T);
  if (fwd_ran) {
    G::synchronize();
    G::copy_to_host(out.data(), d_out, out.size() * sizeof(bf16_t));
    G::copy_to_host(stats.data(), d_stats, stats.size() * sizeof(float));
    G::copy_to_host(dqkv.data(), d_dqkv, dqkv.size() * sizeof(bf16_t));
  }
  for (void* d :
       {static_cast<void*>(d_qkv), static_cast<void*>(d_dout), static_cast<void*>(d_out), static_cast<void*>(d_dqkv),
        static_cast<void*>(d_stats), static_cast<void*>(d_lq), static_cast<void*>(d_lkv), static_cast<void*>(d_mask)})
    if (d) G::free(d);
  char name[128];
  std::snprintf(name, sizeof name, "training B=%ld T=%ld NH=%ld HS=%ld p=%g", B, T, NH, HS, p);
  if (!ran) {
    std::printf("FAIL %s: %s%s\n", name, fwd_ran ? "backward: " : "forward: ", why.c_str());
    ++g_failures;
    return;
  }
  // the reference: P = softmax(scale Q K^T), Pd = P * keep / (1-p), O = Pd V, stats = log-sum-exp;
  // dV = Pd^T dO, dP = (dO V^T) * keep / (1-p), dS = P * (dP - rowsum(P * dP)),
  // dQ = scale dS K, dK = scale dS^T Q
  auto at = [&](long b, long t, long c) { return static_cast<double>(bf16_to_f32(qkv[(b * T + t) * 3 * C + c])); };
  auto dO = [&](long b, long t, long c) { return static_cast<double>(bf16_to_f32(dout[(b * T + t) * C + c])); };
  const double scale = 1.0 / std::sqrt(static_cast<double>(HS)), ks = p > 0 ? 1.0 / (1.0 - p) : 1.0;
  std::vector<double> o_ref(B * T * C, 0), lse_ref(B * NH * T, 0), dqkv_ref(qkv.size(), 0);
  std::vector<double> P(T * T), dS(T * T);
  for (long b = 0; b < B; ++b)
    for (long h = 0; h < NH; ++h) {
      const long bh = b * NH + h, q0 = h * HS, k0 = C + h * HS, v0 = 2 * C + h * HS, lq = q_len[b], lk = kv_len[b];
      for (long t = 0; t < lq; ++t) {
        double mx = -1e300, sum = 0;
        for (long j = 0; j < lk; ++j) {
          double sc = 0;
          for (long d = 0; d < HS; ++d) sc += at(b, t, q0 + d) * at(b, j, k0 + d);
          P[t * T + j] = sc * scale;
          mx = std::max(mx, P[t * T + j]);
        }
        for (long j = 0; j < lk; ++j) sum += std::exp(P[t * T + j] - mx);
        const double lse = mx + std::log(sum);
        lse_ref[bh * T + t] = lse;
        for (long j = 0; j < lk; ++j) P[t * T + j] = std::exp(P[t * T + j] - lse);
        for (long d = 0; d < HS; ++d) {
          double o = 0;
          for (long j = 0; j < lk; ++j) o += P[t * T + j] * keep[(bh * T + t) * T + j] * ks * at(b, j, v0 + d);
          o_ref[(b * T + t) * C + h * HS + d] = o;
        }
        double rs = 0;
        for (long j = 0; j < lk; ++j) {
          double dp = 0;
          for (long d = 0; d < HS; ++d) dp += dO(b, t, h * HS + d) * at(b, j, v0 + d);
          dS[t * T + j] = dp * keep[(bh * T + t) * T + j] * ks;
          rs += P[t * T + j] * dS[t * T + j];
        }
        for (long j = 0; j < lk; ++j) dS[t * T + j] = P[t * T + j] * (dS[t * T + j] - rs);
      }
      for (long t = 0; t < lq; ++t)
        for (long j = 0; j < lk; ++j) {
          const double pd = P[t * T + j] * keep[(bh * T + t) * T + j] * ks, ds = dS[t * T + j] * scale;
          for (long d = 0; d < HS; ++d) {
            dqkv_ref[(b * T + t) * 3 * C + q0 + d] += ds * at(b, j, k0 + d);
            dqkv_ref[(b * T + j) * 3 * C + k0 + d] += ds * at(b, t, q0 + d);
            dqkv_ref[(b * T + j) * 3 * C + v0 + d] += pd * dO(b, t, h * HS + d);
          }
        }
    }
  double peak = 0;
  // out: rows t < q_len
  const double e_out = max_err(
      o_ref, [&](size_t i) { return static_cast<double>(bf16_to_f32(out[i])); },
      [&](size_t i) { return static_cast<long>(i / C % T) < q_len[i / C / T]; }, &peak);
  const double e_lse = max_err(
      lse_ref, [&](size_t i) { return static_cast<double>(stats[i]); },
      [&](size_t i) { return static_cast<long>(i % T) < q_len[i / T / NH]; }, &peak);
  // dQ, dK, dV: rows t < q_len of dQ, j < kv_len of dK and dV; relative to the largest entry (>= 1)
  double e_d[3], peak_d[3];
  for (int part = 0; part < 3; ++part)
    e_d[part] = max_err(
        dqkv_ref, [&](size_t i) { return static_cast<double>(bf16_to_f32(dqkv[i])); },
        [&](size_t i) {
          const long c = static_cast<long>(i % (3 * C)), t = static_cast<long>(i / (3 * C) % T),
                     b = static_cast<long>(i / (3 * C) / T);
          return c / C == part && t < (part == 0 ? q_len[b] : kv_len[b]);
        },
        &peak_d[part]);
  bool ok = e_out <= 2e-2 && e_lse <= 2e-3;  // out as the inference forward's check
  for (int part = 0; part < 3; ++part) ok = ok && e_d[part] <= 2e-2 * std::max(1.0, peak_d[part]);
  std::printf("%s %s: max |cudnn - reference| out %.3g, stats %.3g", ok ? "ok  " : "FAIL", name, e_out, e_lse);
  const char* names[] = {"dQ", "dK", "dV"};
  for (int part = 0; part < 3; ++part) std::printf(", %s %.3g (largest %.3g)", names[part], e_d[part], peak_d[part]);
  std::printf("\n");
  if (!ok) ++g_failures;
}

}  // namespace

int main(int argc, char** argv) {
  bool steps = false;
  std::string save_prop, prop_file, prop;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--steps")
      steps = true;
    else if (a == "--save-deviceprop" && i + 1 < argc)
      save_prop = argv[++i];
    else if (a == "--deviceprop" && i + 1 < argc)
      prop_file = argv[++i];
    else {
      std::fprintf(stderr, "usage: test_cudnn_attention [--steps] [--save-deviceprop FILE] [--deviceprop FILE]\n");
      return 2;
    }
  }
  if (!prop_file.empty()) {
    std::ifstream f(prop_file, std::ios::binary);
    std::ostringstream ss;
    ss << f.rdbuf();
    if (!f || ss.str().empty()) {
      std::fprintf(stderr, "--deviceprop: cannot read %s\n", prop_file.c_str());
      return 2;
    }
    prop = ss.str();
  }
  const D::Library& lib = D::library();
  if (!lib.loaded) {
    std::printf("SKIPPED: cuDNN not loaded: %s\n", lib.why.c_str());
    return 77;
  }
  std::printf("libcudnn: %s, version %zu\n", lib.path.c_str(), lib.version);
  // the descriptors, without a device: head sizes 64 and 128, BERT-base/large shapes and odd ones
  const long shapes[][4] = {{2, 77, 3, 64}, {16, 512, 16, 64}, {64, 128, 12, 64}, {8, 512, 8, 128}, {3, 33, 2, 128}};
  // the graph of `what` for a shape: every descriptor finalized, then (--deviceprop) a plan
  using Check =
      bool (*)(int64_t, int64_t, int64_t, int64_t, bool, std::vector<std::string>*, std::string*, const std::string*);
  auto check_graph = [&](const char* what, Check fn, bool dropout, const long* s) {
    std::vector<std::string> log;
    std::string why;
    const bool ok = fn(s[0], s[1], s[2], s[3], dropout, &log, &why, nullptr);
    const auto done = std::count_if(log.begin(), log.end(), [](const std::string& l) {
      return l.size() > 9 && l.compare(l.size() - 9, 9, "finalized") == 0;
    });
    std::printf("%s %s graph B=%ld T=%ld NH=%ld HS=%ld: %ld descriptors finalized%s%s\n", ok ? "ok  " : "FAIL", what,
                s[0], s[1], s[2], s[3], static_cast<long>(done), ok ? "" : ", then ", ok ? "" : why.c_str());
    for (const auto& l : log)  // every step with --steps or on a failure; the heuristics' answer always
      if (steps || !ok || l.compare(0, 10, "heuristics") == 0 || l.compare(0, 11, "not checked") == 0)
        std::printf("    %s\n", l.c_str());
    if (!ok) ++g_failures;
    if (!prop.empty()) {  // the heuristics and a plan for the described device
      log.clear();
      const bool planned = fn(s[0], s[1], s[2], s[3], dropout, &log, &why, &prop);
      std::printf("%s %s plan for %s, B=%ld T=%ld NH=%ld HS=%ld%s%s\n", planned ? "ok  " : "FAIL", what,
                  prop_file.c_str(), s[0], s[1], s[2], s[3], planned ? "" : ": ", planned ? "" : why.c_str());
      for (const auto& l : log)
        if (steps || l.compare(0, 10, "heuristics") == 0 || l.compare(0, 9, "not taken") == 0 ||
            l.compare(0, 14, "execution plan") == 0 || l.compare(0, 9, "workspace") == 0)
          std::printf("    %s\n", l.c_str());
      if (!planned) ++g_failures;
    }
  };
  const Check forward = [](int64_t B, int64_t T, int64_t NH, int64_t D, bool, std::vector<std::string>* log,
                           std::string* why,
                           const std::string* prop) { return D::check_forward_graph(B, T, NH, D, log, why, prop); };
  for (const auto& s : shapes) {
    check_graph("forward", forward, false, s);
    check_graph("training forward", D::check_train_forward_graph, false, s);
    check_graph("training forward with dropout", D::check_train_forward_graph, true, s);
    check_graph("backward", D::check_backward_graph, false, s);
    check_graph("backward with dropout", D::check_backward_graph, true, s);
  }
  {  // refused before cuDNN sees it (a zero dimension makes cuDNN 9.19's finalize divide by zero)
    std::string why;
    const bool built = D::check_forward_graph(2, 0, 2, 64, nullptr, &why);
    const bool ok = !built && why == "empty shape B=2 T=0 NH=2 D=64";
    std::printf("%s T=0 refused: %s\n", ok ? "ok  " : "FAIL", built ? "(built)" : why.c_str());
    if (!ok) ++g_failures;
  }
  std::string why;
  if (G::device_count(&why) == 0) {
    std::printf("cudnnCreate without a device: %s\n", D::probe_handle().c_str());
    std::printf("no CUDA device (%s): the forward, training forward and backward not run\n", why.c_str());
  } else {
    G::set_device(0);
    std::printf("cudnnCreate: %s\n", D::probe_handle().c_str());
    // cuDNN's description of this device, and whether a plan builds from it alone (reported: the
    // CPU machine's way to check plans)
    std::string json;
    if (!D::device_properties_json(&json, &why)) {
      std::printf("device properties: %s\n", why.c_str());
    } else {
      std::printf("device properties: %zu bytes of JSON\n", json.size());
      if (!save_prop.empty()) {
        std::ofstream(save_prop, std::ios::binary) << json;
        std::printf("device properties written to %s\n", save_prop.c_str());
      }
      std::vector<std::string> log;
      const bool planned = D::check_forward_graph(2, 128, 4, 64, &log, &why, &json);
      std::printf("plan from the device properties alone: %s\n", planned ? log.back().c_str() : why.c_str());
    }
    // padded sequences, rows past q_len left to cuDNN; then every row with padded keys only (as
    // bertcc's kernels compute) at an odd length. 512: the attention bench's --cudnn shapes.
    for (const long HS : {64L, 128L}) {
      check_forward(4, 128, 4, HS, {128, 100, 128, 1}, {128, 100, 128, 1});
      check_forward(2, 77, 3, HS, {77, 77}, {77, 40});
    }
    // the training graphs, without and with dropout (bertcc's decisions as the mask)
    for (const long HS : {64L, 128L})
      for (const float p : {0.0f, 0.1f}) {
        check_train(4, 128, 4, HS, {128, 100, 128, 1}, {128, 100, 128, 1}, p);
        check_train(2, 77, 3, HS, {77, 77}, {77, 40}, p);
      }
  }
  std::printf("%s\n", g_failures ? "FAILED" : "all passed");
  return g_failures ? 1 : 0;
}
