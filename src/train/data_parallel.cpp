#include "train/data_parallel.h"

#include <algorithm>
#include <sstream>
#include <thread>

#include "bertcc/error.h"

namespace bertcc {

int threads_per_rank(int requested, const dist::Communicator& comm) {
  if (requested > 0) return requested;
  if (comm.local_world() <= 1) return 0;  // 0: the runtime's default (all cores)
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / comm.local_world());
}

Rng micro_batch_rng(uint64_t seed, int phase, int64_t step, int64_t k) {
  uint64_t s = splitmix64(seed ^ (static_cast<uint64_t>(phase) << 56));
  s = splitmix64(s ^ static_cast<uint64_t>(step));
  s = splitmix64(s ^ static_cast<uint64_t>(k));
  return Rng{s, 0};
}

void GradAccumulator::before(int64_t a, std::vector<float>& grads) {
  if (a == 0) return;
  if (a == 1) {
    acc_.resize(grads.size());
    std::swap(acc_, grads);  // acc_ = g0; grads becomes scratch for g1
  }
  float* g = grads.data();
  const int64_t n = static_cast<int64_t>(grads.size());
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) g[i] = 0.0f;
}

void GradAccumulator::after(int64_t a, std::vector<float>& grads) {
  if (a == 0) return;
  float* acc = acc_.data();
  const float* g = grads.data();
  const int64_t n = static_cast<int64_t>(grads.size());
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) acc[i] += g[i];
}

void GradAccumulator::finish(int64_t micro_batches, std::vector<float>& grads) {
  if (micro_batches > 1) std::swap(acc_, grads);
}

void check_same_on_all_ranks(dist::Communicator& comm, double value, const std::string& what) {
  std::vector<double> all(static_cast<size_t>(comm.world()));
  comm.allgather(&value, 1, all.data());
  if (std::all_of(all.begin(), all.end(), [&](double v) { return v == all[0]; })) return;
  std::ostringstream os;
  for (size_t r = 0; r < all.size(); ++r) os << (r ? ", " : "") << "rank " << r << ": " << all[r];
  fail("ranks disagree on ", what, " (", os.str(), ")");
}

}  // namespace bertcc
