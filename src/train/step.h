// One training step, shared by BERT pre-training, ELECTRA and fine-tuning, in named phases:
//
//   zero the gradients -> for each of this rank's micro-batches: forward/backward (the caller's
//   loss, a callback) between the gradient synchroniser's before/after -> gradient sync across
//   ranks (data_parallel.h: all-reduce, or ZeRO-1's reduce-scatter) -> the step's loss summed over
//   ranks (the caller's) -> global gradient norm + non-finite check (a skipped step; a run of them
//   stops the run; fp16 dynamic loss scaling) -> loss unscaling -> the optimizer (LAMB or AdamW,
//   always through the Backend, clipping by the global norm inside it) -> ZeRO-1's parameter
//   all-gather -> the caller's after-update hook (ELECTRA: the shared embeddings).
//
// The learning-rate schedule is the caller's (pretrain_lr, linear_warmup_lr, a range test's).
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "bertcc/bert.h"
#include "bertcc/dist.h"
#include "bertcc/optim.h"
#include "train/data_parallel.h"

namespace bertcc {

// The optimizer, parsed once from the --optimizer flag.
enum class Optimizer { Lamb, AdamW };
// "lamb" or "adamw"; anything else is refused ("--optimizer must be lamb or adamw").
Optimizer parse_optimizer(const std::string& name);
// NVIDIA's pre-training schedules: LAMB's polynomial decay after warm-up, AdamW's linear one; the
// learning rate of optimizer step k uses progress k / total.
float pretrain_lr(Optimizer opt, float base, int64_t step, int64_t total, double warmup);

// fp16 loss scaling: the scale and the clean steps since the last change live in the caller's
// TrainerState (checkpointed). Static (or none: scale 1) unless `dynamic`: an overflowing step
// halves the scale (down to 1), `window` clean steps double it.
struct LossScale {
  double* scale = nullptr;
  int64_t* clean_steps = nullptr;
  bool dynamic = false;
  int64_t window = 1;
};

struct TrainStepOptions {
  Optimizer optimizer = Optimizer::AdamW;
  LambOptions lamb;
  AdamWOptions adamw;
  const char* who = "train";  // the messages' prefix and GradSync's start-up note
  int64_t max_nonfinite_steps = 1;
  // The end of the divergence error after "N consecutive steps with a non-finite loss or gradients ".
  std::string diverged_note;
  // Rank 0, before the skip is counted: says that a step was skipped (its loss and norm).
  std::function<void(double loss, double gnorm)> on_skip;
  // After every applied update (ELECTRA: the generator's copies of the shared embeddings).
  std::function<void()> after_update;
};

// What a step did.
struct StepResult {
  double loss = 0;       // the caller's reduced loss
  double gnorm = 0;      // the global gradient norm (before unscaling)
  bool applied = false;  // false: a non-finite step, skipped
};

class TrainStep {
 public:
  TrainStep(dist::Communicator& comm, Backend& be, dist::DeviceCommunicator* dcomm, const dist::Options& dp,
            TrainStepOptions o, LossScale scale = {});
  ~TrainStep();
  TrainStep(const TrainStep&) = delete;
  TrainStep& operator=(const TrainStep&) = delete;

  // A model the step trains (several: ELECTRA's discriminator then generator, one optimizer and one
  // global norm over both), its moments where the backend computes (moments_to_backend) and its
  // ZeRO-1 shards (null: replicated). `overlap`: its gradient buckets are reduced during the last
  // micro-batch's backward (not ELECTRA's: the discriminator gets the generator's share of the
  // embedding gradients after both backward passes).
  void add_model(Bert& m, OptimizerState& moments, const OptimizerShards* shards, bool overlap);
  // Whether the device synchronisers start buckets during backward (the start-up note).
  bool overlapping() const;

  // One step of `count` micro-batches on this rank (also 0: the rank still joins the collectives).
  // micro_batch(a) runs micro-batch a's forward/backward; reduce_loss() sums the step's losses over
  // the ranks and returns its loss; `lr` is the schedule's. `label` names the step for the watchdog.
  StepResult run(int64_t count, const std::function<void(int64_t a)>& micro_batch,
                 const std::function<double()>& reduce_loss, float lr, dist::Watchdog* watchdog, int64_t label);

  // Consecutive steps (up to the last) whose loss or gradients were not finite and were skipped;
  // a run must not end, evaluate or save a model while this is above 0 (the model has diverged).
  int64_t nonfinite_run() const { return bad_run_; }

  // The time the gradient sync waited for communication, summed since the last take.
  double take_wait_seconds() {
    const double s = wait_s_;
    wait_s_ = 0;
    return s;
  }

 private:
  struct Model;
  void sync_before(int64_t a, int64_t count);
  void sync_after(int64_t a, int64_t count);
  void sync_finish(int64_t count);
  double grad_norm();
  void unscale(float factor);
  void update(float lr, double norm, dist::Watchdog* watchdog, int64_t label);
  void skip(double loss, double gnorm, int64_t label);

  dist::Communicator& comm_;
  Backend& be_;
  dist::DeviceCommunicator* dcomm_;
  dist::Options dp_;
  TrainStepOptions o_;
  LossScale ls_;
  double one_ = 1.0;
  int64_t clean_ = 0;
  std::vector<std::unique_ptr<Model>> models_;
  int64_t bad_run_ = 0;  // consecutive non-finite steps
  double wait_s_ = 0;
};

}  // namespace bertcc
