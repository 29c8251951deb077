// What a training run needs besides its step: the threads and backend of this rank, and whether
// a step fits in memory.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "bertcc/bert.h"
#include "bertcc/dist.h"

namespace bertcc {

// Threads for this rank: `requested` if > 0, else OMP_NUM_THREADS if set, else the host's cores
// shared by its ranks.
int threads_per_rank(int requested, const dist::Communicator& comm);

// This rank's backend for --device (dist::device_for_rank: "cuda" with several ranks on a host is
// cuda:<local rank>); a rank without its GPU is refused naming the mapping and how to share one.
Backend& backend_for_rank(const std::string& device, dist::Communicator& comm);

// Refuses a run whose training step would not fit in memory, before it allocates: for each model
// the optimizer moments (8 bytes per parameter), the bf16 weight copy (bf16) and the activations
// of a micro-batch of B x T tokens (the weights and gradients are already held). `who` prefixes
// the message.
void check_training_memory(const std::vector<const Bert*>& models, int64_t B, int64_t T, Precision prec,
                           const char* who);

}  // namespace bertcc
