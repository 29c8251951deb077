// One training run, shared by pre-training and fine-tuning (TrainingRun), the interface a training
// task implements (TrainingTask), and what a run needs besides its step: the threads and backend of
// this rank, and whether a step fits in memory.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "bertcc/bert.h"
#include "bertcc/dist.h"
#include "bertcc/optim.h"
#include "bertcc/tensorboard.h"
#include "train/checkpoint.h"
#include "train/data_parallel.h"
#include "train/dllogger.h"
#include "train/step.h"

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

// A model a run trains, with what its checkpoints hold besides its weights.
struct TrainedModel {
  std::string dir;                          // its folder in a checkpoint: "" (the root), ELECTRA's "discriminator"
  Bert* model = nullptr;                    // (owned by the task)
  AdamState host_moments;                   // fresh or resumed; place_moments() hands them to the backend
  OptimizerState moments;                   // where the backend computes
  std::unique_ptr<OptimizerShards> shards;  // ZeRO-1: this rank's part of the moments (null: replicated)
};

// What every training run's options say, in the run's words.
struct RunOptions {
  const char* who = "train";  // the messages' prefix: "pretrain", "finetune"
  std::string output_dir;
  dist::Options dp;
  int64_t checkpoint_every = 0, keep_checkpoints = 1, log_every = 1;
  bool resume = false, trust_unverified_checkpoint = false;
  bool writes = true;  // false: a range test, which writes no log, checkpoint or model
};

// The RunOptions of a command's options `o` (PretrainOptions, FinetuneOptions: the fields every
// run has, under the same names), with the resume flag `resume` (the two name it differently).
template <typename Options>
RunOptions run_options_of(const Options& o, const char* who, bool resume) {
  RunOptions r;
  r.who = who;
  r.output_dir = o.output_dir;
  r.dp = o.dp;
  r.checkpoint_every = o.num_steps_per_checkpoint;
  r.keep_checkpoints = o.keep_checkpoints;
  r.log_every = o.log_freq;
  r.resume = resume;
  r.trust_unverified_checkpoint = o.trust_unverified_checkpoint;
  r.writes = o.range_test == nullptr;
  return r;
}

// This process's part of the run: when its loop started and from which step, for the time left
// and the closing block.
struct RunClock {
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  int64_t first_step = 0;  // (after a resume, the checkpoint's)
  double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); }
  int64_t steps_run(int64_t step) const { return step - first_step; }
};

// What differs between training tasks (pre-training, fine-tuning): TrainingRun::train drives it.
class TrainingTask {
 public:
  enum class StepEnd { Next, Stopped, Ended };  // Stopped: by a signal; Ended: a range test is done
  virtual ~TrainingTask() = default;
  // The task's TrainStep over the run's models (TrainingRun::make_step with its options).
  virtual void make_step() = 0;
  // One optimizer step over this rank's micro-batches, then the task's logs, evaluations and
  // checkpoints as the run's cadence says (checkpoint_due, evaluation_due, log_due).
  virtual StepEnd train_step() = 0;
  // After the loop: the final evaluation and model, or a stopped run's checkpoint.
  virtual void finish(bool stopped) = 0;
};

// One training run, as marian's Scheduler: the rank and world, the backend and its device
// communicator, the models' moments (and ZeRO-1 shards), the state a checkpoint resumes, the
// logs, the watchdog and stop signals, checkpoint save and resume, the cadence of logs,
// evaluations and checkpoints, and the loop (train). A task (TrainingTask) supplies the models,
// the micro-batches, the loss and the evaluation.
class TrainingRun {
 public:
  explicit TrainingRun(RunOptions opts);

  // The backend the models compute on, and for several ranks the device communicator of its
  // gradients (make_device_comm: NCCL, the staged one, or none for the host path).
  void use_backend(Backend& be);
  // The newest checkpoint into `state` and each model's weights and host moments (opts.resume);
  // every rank must resume the same step. Sets `resumed`.
  void resume();
  // ZeRO-1 (--zero1 with several ranks): each model keeps its part of the moments.
  void shard_moments();
  // The moments (fresh or resumed) to where the backend computes.
  void place_moments();
  // Rank 0's DLLogger (and TensorBoard events) in the output folder, starting with `params`.
  void open_logs(const nlohmann::ordered_json& params, bool with_tensorboard);
  // The run's TrainStep over `models`: `overlap`: their gradient buckets are reduced during
  // backward.
  void make_step(TrainStepOptions so, LossScale scale, bool overlap);
  // A checkpoint of `state` and every model (rank 0 writes; with ZeRO-1 every rank first sends it
  // its moments). `label`: the step's name (phase 2: the step plus the phase-1 end).
  void save(const std::string& vocab_path, int64_t label);
  // SIGINT/SIGTERM taken, the watchdog started, then task.train_step() until total_steps, a
  // signal or the task's end; then task.finish().
  void train(TrainingTask& task);
  // train() without the signals and the watchdog: task.make_step(), the steps, task.finish().
  void loop(TrainingTask& task);

  // The cadence, after state.step's update.
  bool log_due() const { return state.step % opts.log_every == 0 || state.step == total_steps; }
  bool checkpoint_due() const {
    return opts.checkpoint_every > 0 && state.step % opts.checkpoint_every == 0 && state.step < total_steps;
  }
  bool evaluation_due() const { return eval_every > 0 && state.step % eval_every == 0; }
  // The models as save_checkpoint and load_latest_checkpoint take them (with their host moments).
  std::vector<CheckpointPart> checkpoint_parts();

  const RunOptions opts;
  dist::Communicator& comm;
  const int world_size, rank;
  const bool lead;  // rank 0: only it writes logs, events, checkpoints and models
  Backend* backend = nullptr;
  bool on_device = false;  // weights, gradients and moments on a device
  std::unique_ptr<dist::DeviceCommunicator> device_comm;
  std::vector<TrainedModel> models;  // set by the task before resume()
  // Everything a resumed run needs besides weights and moments: the step, the RNG, the data
  // position, the loss scale, the best evaluation so far.
  TrainerState state;
  bool resumed = false;
  int64_t total_steps = 1;
  int64_t eval_every = 0;  // 0: evaluations at the task's own points only
  std::unique_ptr<DLLogger> log;
  std::unique_ptr<TensorBoardWriter> tensorboard;
  std::unique_ptr<dist::Watchdog> watchdog;
  std::unique_ptr<TrainStep> step;
  RunClock clock;
};

}  // namespace bertcc
