#include "train/run.h"

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "bertcc/error.h"
#include "bertcc/runtime.h"

namespace bertcc {

int threads_per_rank(int requested, const dist::Communicator& comm) {
  if (requested > 0) return requested;
  // 0: the runtime's default (OMP_NUM_THREADS when set, else all cores)
  if (comm.local_world() <= 1 || std::getenv("OMP_NUM_THREADS")) return 0;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / comm.local_world());
}

void check_training_memory(const std::vector<const Bert*>& models, int64_t B, int64_t T, Precision prec,
                           const char* who) {
  double need = 0;
  int64_t params = 0;
  for (const Bert* m : models) {
    const double P = static_cast<double>(m->table().total());
    params += m->table().total();
    need += P * (8.0 + (prec == Precision::BF16 ? 2.0 : 0.0));  // the moments (and the bf16 copy)
    if (!m->has_grads()) need += P * 4.0;                       // the gradients, allocated at the first backward
    need += Bert::activation_bytes(m->config(), B, T, m->config().attention_probs_dropout_prob > 0, prec);
  }
  check_memory(need,
               std::string(who) + ": a training step (micro-batches of " + std::to_string(B) + " x " +
                   std::to_string(T) + " tokens, " + std::to_string(params) +
                   " parameters: gradients, optimizer moments, activations)",
               "lower --train-batch-size, raise --gradient-accumulation-steps or shorten the sequences");
}

Backend& backend_for_rank(const std::string& device, dist::Communicator& comm) {
  const std::string mine = dist::device_for_rank(device, comm);
  try {
    return backend_for(mine);
  } catch (const Error& e) {
    if (mine == device) throw;
    fail(e.what(), " (", comm.local_world(), " ranks on this host and --device ", device,
         ": one GPU per rank, local rank ", comm.local_rank(), " -> --device ", mine,
         "; to share one GPU, name it: --device ", device, ":0, and the gradients go through the host)");
  }
}

}  // namespace bertcc
