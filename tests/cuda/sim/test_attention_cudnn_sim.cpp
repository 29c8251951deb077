// The kernels of the cuDNN attention path (src/cuda/attention/cudnn_switch_kernels.cuh,
// BERTCC_ATTENTION=cudnn), compiled for the CPU and run by tests/cuda/sim/sim_runtime.h:
// - mask_lengths: q_len, kv_len and the right-padding flag of masks with and without padding,
//   with holes, with a bias on an unmasked key, all padding, NaN, against a reference written here;
// - keep_mask: every element of the bf16 keep mask against attn::keep (bertcc's kernels' decision)
//   and against the CPU attention's own decisions (its saved dropped-out probabilities: zero
//   exactly where it dropped), outputs poisoned first;
// - zero_padding_keys: dK and dV rows of padding keys zeroed, everything else untouched.
// Exit 0 all passed, 1 a failure.
#define BERTCC_CUDA_SIM 1
#include "sim_runtime.h"
// the kernels' source, as nvcc compiles it for the GPU
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "cuda/attention/cudnn_switch_kernels.cuh"
#include "kernels/kernels.h"

using namespace bertcc;
namespace A = bertcc::cuda::attn;

namespace {

int g_fail = 0, g_checks = 0;
void expect(bool ok, const std::string& what) {
  ++g_checks;
  if (!ok) {
    ++g_fail;
    std::printf("  FAIL %s\n", what.c_str());
  }
}

// One batch of masks: each row given as its T values.
void lengths_case(const std::string& name, const std::vector<std::vector<float>>& rows) {
  const int64_t B = static_cast<int64_t>(rows.size()), T = static_cast<int64_t>(rows[0].size());
  std::vector<float> mask;
  for (const auto& r : rows) mask.insert(mask.end(), r.begin(), r.end());
  std::vector<int32_t> q(B, -7), kv(B, -7), pre(B, -7);
  sim::launch({static_cast<unsigned>(B), 1, 1}, 32, 0,
              [&] { A::mask_lengths(q.data(), kv.data(), pre.data(), mask.data(), T); });
  int bad = 0;
  for (int64_t b = 0; b < B; ++b) {
    // reference: the last key above -10000 (NaN is above), then the prefix form
    const std::vector<float>& r = rows[b];
    int64_t last = -1;
    for (int64_t j = 0; j < T; ++j)
      if (!(r[j] <= -10000.0f)) last = j;
    bool prefix = last >= 0;
    for (int64_t j = 0; j <= last; ++j) prefix = prefix && r[j] == 0.0f;
    const int32_t want_kv = static_cast<int32_t>(last + 1), want_pre = prefix ? 1 : 0;
    if (q[b] != T || kv[b] != want_kv || pre[b] != want_pre) {
      ++bad;
      std::printf("  %s row %lld: q_len %d kv_len %d prefix %d, want %lld %d %d\n", name.c_str(),
                  static_cast<long long>(b), q[b], kv[b], pre[b], static_cast<long long>(T), want_kv, want_pre);
    }
  }
  expect(bad == 0, "mask_lengths " + name);
  std::printf("  mask_lengths %-44s B=%lld T=%lld: %s\n", name.c_str(), static_cast<long long>(B),
              static_cast<long long>(T), bad ? "FAIL" : "ok");
}

std::vector<float> prefix_row(int64_t T, int64_t n) {
  std::vector<float> r(T, -10000.0f);
  for (int64_t j = 0; j < n; ++j) r[j] = 0.0f;
  return r;
}

void lengths_cases() {
  // right-padded: every length from 1 to T at T = 77 (lengths past each 32-key stride of the warp)
  std::vector<std::vector<float>> rows;
  for (int64_t n = 1; n <= 77; ++n) rows.push_back(prefix_row(77, n));
  lengths_case("right-padded, every length 1..77", rows);
  lengths_case("no padding (T=512)", {prefix_row(512, 512), prefix_row(512, 512)});
  lengths_case("right-padded T=512 (1, 300, 511)", {prefix_row(512, 1), prefix_row(512, 300), prefix_row(512, 511)});
  std::vector<float> hole = prefix_row(128, 90);
  hole[40] = -10000.0f;
  std::vector<float> first = prefix_row(128, 90);
  first[0] = -10000.0f;
  std::vector<float> late = prefix_row(128, 20);
  late[127] = 0.0f;  // an unmasked key after the padding: kv_len 128, not a prefix
  lengths_case("holes (inside, first key, a key after padding)", {hole, first, late, prefix_row(128, 64)});
  lengths_case("all padding", {prefix_row(64, 0), prefix_row(64, 10)});
  std::vector<float> biased = prefix_row(96, 50);
  biased[7] = -1.0f;  // unmasked, but a bias cuDNN's graph does not add
  std::vector<float> deeper = prefix_row(96, 50);
  deeper[80] = -20000.0f;  // padding below -10000 is still padding
  std::vector<float> nan = prefix_row(96, 50);
  nan[70] = NAN;  // NaN counts as unmasked (count_keys' rule): not a prefix
  lengths_case("bias, deeper padding, NaN", {biased, deeper, nan});
}

// Every element of keep_mask against attn::keep and against the CPU attention's decisions.
void keep_case(int64_t B, int64_t NH, int64_t T, float p, uint64_t seed) {
  const Rng rng(seed, 0);
  const uint64_t base = 4096;
  const int64_t hs = 16, C = NH * hs;
  const A::Shape s = A::make_shape(B, T, C, NH, p, rng, base);
  const int64_t n = B * NH * T * T;
  std::vector<uint16_t> mask(static_cast<size_t>(n), 0xFFFF);  // poison: neither 1.0 nor 0
  sim::launch({bertcc::cuda::grid_for(B * NH * T * ((T + 1) / 2), 256), 1, 1}, 256, 0,
              [&] { A::keep_mask(mask.data(), s); });
  // the CPU's forward in fp32 with a zero mask: its saved Pd is P / (1 - p) where kept, 0 where
  // dropped, and P > 0 everywhere here (scores of small inputs)
  std::mt19937 gen(static_cast<unsigned>(seed));
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  std::vector<float> qkv(static_cast<size_t>(B * T * 3 * C)), zeros(static_cast<size_t>(B * T), 0.0f),
      out(static_cast<size_t>(B * T * C));
  for (auto& x : qkv) x = u(gen);
  std::vector<float> saved(static_cast<size_t>(kernels::attention_saved_size(B, T, C, NH, true, Precision::F32))),
      work(static_cast<size_t>(kernels::attention_work_size(B, T, C, NH)));
  kernels::attention_forward(out.data(), saved.data(), work.data(), qkv.data(), zeros.data(), B, T, C, NH, p, rng, base,
                             Precision::F32);
  const float* pd = saved.data() + n;  // Pd after P
  int64_t vs_keep = 0, vs_cpu = 0, dropped = 0;
  for (int64_t bh = 0; bh < B * NH; ++bh)
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < T; ++j) {
        const int64_t e = (bh * T + i) * T + j;
        const bool keep = A::keep(s, bh, i, j);
        const uint16_t want = keep ? 0x3F80 : 0;
        vs_keep += mask[e] != want;
        vs_cpu += (mask[e] == 0x3F80) != (pd[e] != 0.0f);
        dropped += !keep;
      }
  const std::string tag = "keep_mask B=" + std::to_string(B) + " NH=" + std::to_string(NH) + " T=" + std::to_string(T) +
                          " p=" + std::to_string(p);
  expect(vs_keep == 0, tag + ": against attn::keep");
  expect(vs_cpu == 0, tag + ": against the CPU's decisions");
  // the decisions are dropout's at all: the dropped share near p (n >= 2,000 elements here)
  const double share = static_cast<double>(dropped) / static_cast<double>(n);
  expect(std::fabs(share - p) < 5.0 * std::sqrt(p * (1 - p) / static_cast<double>(n)) + 1e-3, tag + ": dropped share");
  std::printf("  %-46s %lld elements: %lld differ from attn::keep, %lld from the CPU; dropped %.4f\n", tag.c_str(),
              static_cast<long long>(n), static_cast<long long>(vs_keep), static_cast<long long>(vs_cpu), share);
}

void zero_keys_case() {
  const int64_t B = 3, T = 40, C = 64;
  const std::vector<int32_t> kv{40, 17, 1};
  std::vector<uint16_t> d(static_cast<size_t>(B * T * 3 * C));
  for (size_t i = 0; i < d.size(); ++i) d[i] = static_cast<uint16_t>(0x3000 + i % 4096);
  const std::vector<uint16_t> before = d;
  sim::launch({bertcc::cuda::grid_for(B * T * (2 * C / 8), 256), 1, 1}, 256, 0,
              [&] { A::zero_padding_keys(d.data(), kv.data(), B, T, C); });
  int64_t bad = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < 3 * C; ++c) {
        const size_t e = static_cast<size_t>((b * T + t) * 3 * C + c);
        const bool zeroed = t >= kv[b] && c >= C;  // dK, dV of a padding key
        bad += d[e] != (zeroed ? 0 : before[e]);
      }
  expect(bad == 0, "zero_padding_keys");
  std::printf("  zero_padding_keys B=3 T=40 C=64 (lengths 40, 17, 1): %lld elements wrong\n",
              static_cast<long long>(bad));
}

}  // namespace

int main() {
  std::printf("cuDNN path kernels (attention/cudnn_switch_kernels.cuh) on the simulator\n");
  lengths_cases();
  keep_case(2, 3, 37, 0.1f, 11);  // T odd: the last pair has one key
  keep_case(1, 2, 64, 0.5f, 12);
  keep_case(2, 2, 130, 0.1f, 13);  // past two 64-row tiles, T not a multiple of 16
  keep_case(1, 1, 16, 0.9f, 14);
  zero_keys_case();
  std::printf("%d checks, %d failed\n", g_checks, g_fail);
  return g_fail ? 1 : 0;
}
