// bench/ab_row_gemm.sh's harness: the fp32 row kernel (src/kernels/gemm_rows.cpp) of two revisions,
// compiled into the namespaces ab_a and ab_b, called in turn in one process on bert-base's four
// linear layers. Not part of the build: the script compiles it with the two copies.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define BERTCC_AB_DECLARE(ns)                                                                                          \
  namespace bertcc::kernels::ns {                                                                                      \
  int64_t row_panels_size(int64_t N, int64_t K);                                                                       \
  void pack_row_panels(const float* W, int64_t N, int64_t K, float* out);                                              \
  void linear_forward_rows_packed(float* y, const float* x, const float* panels, const float* b, int64_t M, int64_t N, \
                                  int64_t K);                                                                          \
  }
BERTCC_AB_DECLARE(ab_a)
BERTCC_AB_DECLARE(ab_b)

// What gemm_rows.cpp takes from the rest of bertcc: the row kernel is asked for, and its panel size.
namespace bertcc {
bool onednn_f32_rows_invariant() { return false; }
namespace kernels {
int64_t row_panels_size(int64_t N, int64_t K) { return ab_a::row_panels_size(N, K); }
}  // namespace kernels
}  // namespace bertcc

int main(int argc, char** argv) {
  namespace k = bertcc::kernels;
  if (argc != 3) {
    std::fprintf(stderr, "usage: row_gemm_ab ROWS ROUNDS\n");
    return 2;
  }
  const int64_t M = std::atol(argv[1]);
  const int rounds = std::atoi(argv[2]);
  if (M < 1 || rounds < 1) {
    std::fprintf(stderr, "row_gemm_ab: ROWS and ROUNDS must be positive\n");
    return 2;
  }
  const int64_t C = 768, I = 3072, kLayers = 12;
  const int64_t shapes[4][2] = {{3 * C, C}, {C, C}, {I, C}, {C, I}};
  const char* names[4] = {"QKV", "attention output", "feed-forward in", "feed-forward out"};
  using Fn = void (*)(float*, const float*, const float*, const float*, int64_t, int64_t, int64_t);
  const Fn fn[2] = {k::ab_a::linear_forward_rows_packed, k::ab_b::linear_forward_rows_packed};
  bool same = true;
  for (const int copies : {1, static_cast<int>(kLayers)}) {
    std::printf("%s weights (%d cop%s, one per call in turn), %lld rows, %d threads; GFLOP/s, best of %d calls\n",
                copies == 1 ? "warm" : "cold", copies, copies == 1 ? "y" : "ies", static_cast<long long>(M),
                omp_get_max_threads(), 5 * rounds);
    double total[2] = {0, 0}, flops = 0;
    for (int s = 0; s < 4; ++s) {
      const int64_t N = shapes[s][0], K = shapes[s][1];
      std::vector<float> x(M * K), W(N * K), b(N);
      for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 17) * 0.01f - 0.08f;
      for (size_t i = 0; i < W.size(); ++i) W[i] = static_cast<float>(i % 13) * 0.02f - 0.12f;
      for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 7) * 0.1f;
      std::vector<std::vector<float>> pk[2];
      std::vector<float> y[2];
      for (int v = 0; v < 2; ++v) {
        const int64_t size = v ? k::ab_b::row_panels_size(N, K) : k::ab_a::row_panels_size(N, K);
        pk[v].assign(copies, std::vector<float>(size));
        for (auto& p : pk[v]) (v ? k::ab_b::pack_row_panels : k::ab_a::pack_row_panels)(W.data(), N, K, p.data());
        y[v].assign(M * N, 0.0f);
      }
      double best[2] = {1e30, 1e30};
      int layer = 0;
      for (int r = 0; r < rounds; ++r)
        for (int v = 0; v < 2; ++v)
          for (int it = 0; it < 5; ++it) {
            const auto t0 = std::chrono::steady_clock::now();
            fn[v](y[v].data(), x.data(), pk[v][layer++ % copies].data(), b.data(), M, N, K);
            best[v] = std::min(best[v], std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
          }
      const bool bits = std::memcmp(y[0].data(), y[1].data(), y[0].size() * sizeof(float)) == 0;
      same = same && bits;
      const double f = 2.0 * M * N * K;
      flops += f;
      for (int v = 0; v < 2; ++v) total[v] += best[v];
      std::printf("  %-17s %5lld x %5lld x %5lld   A %6.1f   B %6.1f   B/A %.3f   %s\n", names[s],
                  static_cast<long long>(M), static_cast<long long>(N), static_cast<long long>(K), f / best[0] / 1e9,
                  f / best[1] / 1e9, best[0] / best[1], bits ? "same bits" : "BITS DIFFER");
    }
    std::printf("  all four                                A %6.1f   B %6.1f   B/A %.3f\n", flops / total[0] / 1e9,
                flops / total[1] / 1e9, total[0] / total[1]);
  }
  return same ? 0 : 1;
}
