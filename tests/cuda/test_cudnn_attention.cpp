// cuDNN attention (src/cuda/cudnn_attention.h), in what a machine can check:
//   without a device: libcudnn opens, its version, every tensor and operation descriptor of the
//   forward graph finalizes and so does the operation graph (no handle), for head sizes 64 and 128;
//   what cudnnCreate says;
//   with one: the forward against a double-precision reference on the same bf16 inputs, padded
//   sequences included (max |cudnn - reference| <= 2e-2 over the rows computed); cuDNN's
//   description of the device, and a plan built from it alone (reported).
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

#include "cuda/cuda_kernels.h"
#include "cuda/cudnn_attention.h"

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

}  // namespace

int main(int argc, char** argv) {
  bool steps = false;
  std::string save_prop, prop_file, prop;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--steps") steps = true;
    else if (a == "--save-deviceprop" && i + 1 < argc) save_prop = argv[++i];
    else if (a == "--deviceprop" && i + 1 < argc) prop_file = argv[++i];
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
  for (const auto& s : shapes) {
    std::vector<std::string> log;
    std::string why;
    const bool ok = D::check_forward_graph(s[0], s[1], s[2], s[3], &log, &why);
    const auto done = std::count_if(log.begin(), log.end(), [](const std::string& l) {
      return l.size() > 9 && l.compare(l.size() - 9, 9, "finalized") == 0;
    });
    std::printf("%s forward graph B=%ld T=%ld NH=%ld HS=%ld: %ld descriptors finalized%s%s\n", ok ? "ok  " : "FAIL", s[0],
                s[1], s[2], s[3], static_cast<long>(done), ok ? "" : ", then ", ok ? "" : why.c_str());
    for (const auto& l : log)  // every step with --steps or on a failure; the heuristics' answer always
      if (steps || !ok || l.compare(0, 10, "heuristics") == 0 || l.compare(0, 11, "not checked") == 0)
        std::printf("    %s\n", l.c_str());
    if (!ok) ++g_failures;
    if (!prop.empty()) {  // the heuristics and a plan for the described device
      log.clear();
      const bool planned = D::check_forward_graph(s[0], s[1], s[2], s[3], &log, &why, &prop);
      std::printf("%s plan for %s, B=%ld T=%ld NH=%ld HS=%ld%s%s\n", planned ? "ok  " : "FAIL", prop_file.c_str(), s[0],
                  s[1], s[2], s[3], planned ? "" : ": ", planned ? "" : why.c_str());
      for (const auto& l : log)
        if (steps || l.compare(0, 10, "heuristics") == 0 || l.compare(0, 9, "not taken") == 0 ||
            l.compare(0, 14, "execution plan") == 0)
          std::printf("    %s\n", l.c_str());
      if (!planned) ++g_failures;
    }
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
    std::printf("no CUDA device (%s): the forward not run\n", why.c_str());
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
  }
  std::printf("%s\n", g_failures ? "FAILED" : "all passed");
  return g_failures ? 1 : 0;
}
