// Pieces shared by pre-training and fine-tuning for gradient accumulation and data parallelism.
//
// A step's micro-batches are numbered k = 0 .. world x accumulation - 1 in the global order; rank r
// runs k = r*A .. r*A + A - 1. Everything that decides a micro-batch's result is a function of
// (seed, step, k) — its rows, its dropout masks, its loss normaliser — so a step computes the same
// micro-batch gradients whatever the world size; they are summed in order k.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "bertcc/dist.h"
#include "bertcc/rng.h"

namespace bertcc {

// Threads for this rank: `requested` if > 0, else the host's cores shared by its ranks.
int threads_per_rank(int requested, const dist::Communicator& comm);

// The dropout RNG of micro-batch k of optimizer step `step` (phase 1 or 2).
Rng micro_batch_rng(uint64_t seed, int phase, int64_t step, int64_t k);

// Sums a step's micro-batch gradients as separately computed tensors: ((g0 + g1) + g2) ..., as
// PyTorch accumulates .grad and as the all-reduce sums ranks, so 2 ranks x 1 micro-batch and
// 1 rank x 2 micro-batches give bit-identical gradients. Costs one extra gradient buffer and a
// pass over it per micro-batch after the first (nothing when accumulation is 1).
class GradAccumulator {
 public:
  // Call before micro-batch a (0-based) runs its backward into `grads`, which is zero for a = 0.
  void before(int64_t a, std::vector<float>& grads);
  // Call after micro-batch a's backward.
  void after(int64_t a, std::vector<float>& grads);
  // After the last micro-batch: `grads` holds the sum.
  void finish(int64_t micro_batches, std::vector<float>& grads);

 private:
  std::vector<float> acc_;
};

// Every rank must agree on a value (a resumed step, a data-set size): throws naming `what` and
// each rank's value when they differ.
void check_same_on_all_ranks(dist::Communicator& comm, double value, const std::string& what);

}  // namespace bertcc
