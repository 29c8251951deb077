// The CUDA kernels that promise the CPU's bits (src/cuda/ordered_sums.cuh), run on the CPU by
// tests/cuda/sim/sim_runtime.h against the CPU kernels, bit for bit: the embedding gradients (word
// and token-type rows through the sorted runs, position rows), a scatter of int64 rows with long
// runs, and the gradient norm's blocks (16 FMA lanes per block). The stable sort that
// grouped_rows_add does with CUB is std::stable_sort here. Exit 0 all equal, 1 otherwise.
#define BERTCC_CUDA_SIM 1
#include "sim_runtime.h"
// the kernels' source, as nvcc compiles it for the GPU
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>

#include "bertcc/optim.h"
#include "cuda/ordered_sums.cuh"
#include "kernels/kernels.h"

using namespace bertcc;

namespace {

int g_fail = 0;
template <class T>
void expect_equal(const std::string& what, const std::vector<T>& cpu, const std::vector<T>& sim) {
  size_t diff = cpu.size() == sim.size() ? 0 : 1;
  for (size_t i = 0; i < cpu.size() && i < sim.size(); ++i) diff += std::memcmp(&cpu[i], &sim[i], sizeof(T)) != 0;
  std::printf("%-52s %zu of %zu differ%s\n", what.c_str(), diff, cpu.size(), diff ? "  FAIL" : "");
  if (diff) ++g_fail;
}

// grouped_rows_add's steps: a stable sort of (key, n), then run_add over the sorted runs.
template <class Key>
void grouped_rows_add_sim(float* dst, const float* src, const std::vector<Key>& keys, int64_t C) {
  const int32_t N = static_cast<int32_t>(keys.size());
  std::vector<int32_t> pos(keys.size());
  sim::launch({cuda::grid_for(N, 256), 1, 1}, 256, 0, [&] { cuda::iota_k(pos.data(), N); });
  std::stable_sort(pos.begin(), pos.end(), [&](int32_t a, int32_t b) { return keys[a] < keys[b]; });
  std::vector<Key> sorted(keys.size());
  for (size_t i = 0; i < pos.size(); ++i) sorted[i] = keys[pos[i]];
  sim::launch({static_cast<unsigned>(N), cuda::grid_for(C, 128), 1}, 128, 0,
              [&] { cuda::run_add<Key>(dst, src, sorted.data(), pos.data(), N, C); });
}

}  // namespace

int main() {
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto randv = [&](size_t n) {
    std::vector<float> v(n);
    for (auto& x : v) x = u(gen);
    return v;
  };
  {  // embeddings: a 300-id vocabulary, padding id 0 on the last 40% of each row, 3 token types
    const int64_t B = 4, T = 50, C = 150, V = 300, TT = 3;
    std::vector<int32_t> ids(B * T), seg(B * T);
    for (int64_t n = 0; n < B * T; ++n) {
      ids[n] = n % T >= T * 6 / 10 ? 0 : static_cast<int32_t>(gen() % V);
      seg[n] = static_cast<int32_t>(gen() % TT);
    }
    ids[7] = ids[19] = ids[33];
    const auto dout = randv(B * T * C);
    std::vector<float> dwte(V * C, 0.5f), dwpe(T * C, 0.5f), dwtt(TT * C, 0.5f);
    kernels::embeddings_backward(dwte.data(), dwpe.data(), dwtt.data(), dout.data(), ids.data(), seg.data(), B, T, C, V,
                                 TT);
    std::vector<float> swte(V * C, 0.5f), swpe(T * C, 0.5f), swtt(TT * C, 0.5f);
    grouped_rows_add_sim(swte.data(), dout.data(), ids, C);
    sim::launch({static_cast<unsigned>(T), cuda::grid_for(C, 128), 1}, 128, 0,
                [&] { cuda::position_grad(swpe.data(), dout.data(), B, T, C); });
    grouped_rows_add_sim(swtt.data(), dout.data(), seg, C);
    expect_equal("embeddings: word rows (a padding run of 80)", dwte, swte);
    expect_equal("embeddings: position rows", dwpe, swpe);
    expect_equal("embeddings: token-type rows (3 types)", dwtt, swtt);
  }
  {  // scatter of int64 rows: runs of 97 (the joint SQuAD head's repeated start rows)
    const int64_t N = 60, C = 130, M = 400;
    std::vector<int64_t> rows(M);
    for (int64_t m = 0; m < M; ++m) rows[m] = m % 5 == 4 ? (m * 13) % N : (m / 97) * 3;
    const auto dout = randv(M * C);
    std::vector<float> cpu(N * C, 0.25f), sim(N * C, 0.25f);
    kernels::scatter_add_rows(cpu.data(), dout.data(), rows.data(), M, C);
    grouped_rows_add_sim(sim.data(), dout.data(), rows, C);
    expect_equal("scatter_add_rows (int64 rows, runs of 97)", cpu, sim);
  }
  // the norm: whole blocks and a cut one, over one CTA's blocks and beyond (17 and 18: the second
  // CTA's first lanes); a cut block shorter than one round of eight loads; a single short block
  for (const size_t n : {3 * kNormBlock + 1234, 17 * kNormBlock + 5, 16 * kNormBlock + 100, size_t{37}}) {
    std::vector<float> x(n);
    for (auto& v : x) v = 3.0f * u(gen);
    const int64_t nb = static_cast<int64_t>((n + kNormBlock - 1) / kNormBlock);
    std::vector<double> part(nb, -1.0);
    sim::launch({cuda::grid_for(nb, cuda::kSumsqBlocksPerCta), 1, 1}, cuda::kSumsqThreads, 0,
                [&] { cuda::sumsq_blocks(part.data(), x.data(), static_cast<int64_t>(n)); });
    double s = 0;
    for (double p : part) s += p;
    expect_equal("global_norm (16 FMA lanes per block), n = " + std::to_string(n),
                 std::vector<double>{global_norm(x.data(), n)}, std::vector<double>{std::sqrt(s)});
  }
  std::printf("%d failed\n", g_fail);
  return g_fail ? 1 : 0;
}
