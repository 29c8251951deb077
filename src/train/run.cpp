#include "train/run.h"

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "bertcc/error.h"
#include "bertcc/runtime.h"
#include "bertcc/signals.h"

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

TrainingRun::TrainingRun(RunOptions o)
    : opts(std::move(o)), comm(dist::world()), world_size(comm.world()), rank(comm.rank()), lead(rank == 0) {}

void TrainingRun::use_backend(Backend& be) {
  backend = &be;
  on_device = !be.on_host();
  device_comm = on_device ? make_device_comm(comm, opts.dp, be, opts.who) : nullptr;
}

std::vector<CheckpointPart> TrainingRun::checkpoint_parts() {
  std::vector<CheckpointPart> parts;
  for (TrainedModel& m : models) parts.push_back({m.dir, m.model, &m.host_moments});
  return parts;
}

void TrainingRun::resume() {
  resumed = opts.resume && load_latest_checkpoint(opts.output_dir, checkpoint_parts(), state, opts.who, lead,
                                                  opts.trust_unverified_checkpoint);
  if (world_size > 1)
    check_same_on_all_ranks(comm, resumed ? static_cast<double>(state.step + state.step_offset) : -1.0,
                            "the checkpoint to resume from (is " + opts.output_dir + " on a shared file system?)");
}

void TrainingRun::shard_moments() {
  if (!opts.dp.zero1 || world_size <= 1) return;
  for (TrainedModel& m : models) {
    m.shards = std::make_unique<OptimizerShards>(m.model->table(), world_size);
    m.shards->keep_own(m.host_moments, rank);
  }
}

void TrainingRun::place_moments() {
  for (TrainedModel& m : models) backend->moments_take(std::move(m.host_moments), m.model->table().total(), m.moments);
}

void TrainingRun::open_logs(const nlohmann::ordered_json& params, bool with_tensorboard) {
  if (lead && opts.writes) {
    log = std::make_unique<DLLogger>(opts.output_dir + "/dllogger.json");
    if (with_tensorboard) tensorboard = std::make_unique<TensorBoardWriter>(opts.output_dir + "/tensorboard");
  }
  if (log) log->log("PARAMETER", params);
}

void TrainingRun::make_step(TrainStepOptions so, LossScale scale, bool overlap) {
  step = std::make_unique<TrainStep>(comm, *backend, device_comm.get(), opts.dp, std::move(so), scale);
  for (TrainedModel& m : models) step->add_model(*m.model, m.moments, m.shards.get(), overlap);
}

void TrainingRun::save(const std::string& vocab_path, int64_t label) {
  watchdog->beat("gathering the moments for a checkpoint", label);
  std::vector<CheckpointPart> parts = checkpoint_parts();
  const bool sharded = !models.empty() && models[0].shards;
  if (lead || sharded)  // ZeRO-1: every rank's part of the moments comes down
    for (size_t i = 0; i < models.size(); ++i) {
      if (lead) models[i].model->params_to_host();
      parts[i].opt = &backend->moments_view(models[i].moments, models[i].host_moments);
    }
  std::vector<AdamState> full(parts.size());  // ZeRO-1: the full moments, on rank 0
  for (size_t i = 0; sharded && i < models.size(); ++i) {
    full[i] = models[i].shards->gather_full(comm, *parts[i].opt);
    parts[i].opt = &full[i];
  }
  watchdog->beat("writing a checkpoint (rank 0)", label, /*paused=*/true);
  if (lead) save_checkpoint(opts.output_dir, parts, state, vocab_path, opts.keep_checkpoints);
  comm.barrier();  // the other ranks wait here, unwatched, however long the file system takes
  watchdog->beat("after a checkpoint", label);
}

void TrainingRun::train(TrainingTask& task) {
  signals::take_stop_signals();  // SIGINT/SIGTERM: finish the step, save, return
  watchdog = std::make_unique<dist::Watchdog>(comm, world_size > 1 ? opts.dp.watchdog_timeout : 0);
  loop(task);
}

void TrainingRun::loop(TrainingTask& task) {
  task.make_step();
  clock.start = std::chrono::steady_clock::now();
  clock.first_step = state.step;
  TrainingTask::StepEnd end = TrainingTask::StepEnd::Next;
  while (state.step < total_steps && end == TrainingTask::StepEnd::Next) end = task.train_step();
  task.finish(end == TrainingTask::StepEnd::Stopped);
}

}  // namespace bertcc
