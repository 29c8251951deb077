#include "train/step.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "bertcc/error.h"

namespace bertcc {

Optimizer parse_optimizer(const std::string& name) {
  BERTCC_CHECK(name == "lamb" || name == "adamw", "--optimizer must be lamb or adamw");
  return name == "lamb" ? Optimizer::Lamb : Optimizer::AdamW;
}

float pretrain_lr(Optimizer opt, float base, int64_t step, int64_t total, double warmup) {
  return opt == Optimizer::Lamb ? poly_warmup_lr(base, step, total, warmup)
                                : linear_warmup_lr(base, step, total, warmup);
}

// A trained model with its gradient synchroniser (host or device), moments and ZeRO-1 shards.
struct TrainStep::Model {
  Bert* m = nullptr;
  OptimizerState* moments = nullptr;
  const OptimizerShards* shards = nullptr;
  std::unique_ptr<GradSync> sync;         // the host's
  std::unique_ptr<DeviceGradSync> dsync;  // a device's
};

TrainStep::TrainStep(dist::Communicator& comm, Backend& be, dist::DeviceCommunicator* dcomm, const dist::Options& dp,
                     TrainStepOptions o, LossScale scale)
    : comm_(comm), be_(be), dcomm_(dcomm), dp_(dp), o_(std::move(o)), ls_(scale) {
  if (!ls_.scale) ls_.scale = &one_;  // no loss scaling: a static scale of 1
  if (!ls_.clean_steps) ls_.clean_steps = &clean_;
}

TrainStep::~TrainStep() = default;

void TrainStep::add_model(Bert& m, OptimizerState& moments, const OptimizerShards* shards, bool overlap) {
  auto t = std::make_unique<Model>();
  t->m = &m;
  t->moments = &moments;
  t->shards = shards;
  if (!be_.on_host()) {
    t->dsync = std::make_unique<DeviceGradSync>(comm_, dp_, m, dcomm_, overlap);
  } else if (overlap) {
    t->sync = std::make_unique<GradSync>(comm_, dp_, m, o_.who);
  } else {
    const size_t bucket_elems = static_cast<size_t>(std::max(1.0, dp_.bucket_cap_mb * 1048576.0 / sizeof(float)));
    t->sync = std::make_unique<GradSync>(comm_, dist::parse_wire_dtype(dp_.allreduce_dtype), bucket_elems, false);
  }
  // ZeRO-1: each rank receives only its part's gradient sums (a reduce-scatter), updates its part
  // and all-gathers the parameters: a third less traffic than all-reduce + all-gather.
  if (shards && t->sync) t->sync->scatter_to(shards->bounds());
  if (shards && t->dsync) t->dsync->scatter_to(shards->bounds());
  models_.push_back(std::move(t));
}

bool TrainStep::overlapping() const {
  return !models_.empty() && models_.front()->dsync && models_.front()->dsync->overlapping();
}

void TrainStep::sync_before(int64_t a, int64_t count) {
  for (auto& t : models_) {
    if (t->sync) t->sync->before(a, count, t->m->grads());
    if (t->dsync) t->dsync->before(a, count);
  }
}

void TrainStep::sync_after(int64_t a, int64_t count) {
  for (auto& t : models_) {
    if (t->sync) t->sync->after(a, count, t->m->grads());
    if (t->dsync) t->dsync->after(a, count);
  }
}

// Gradients reduced once per optimizer step, after accumulation (NVIDIA's
// allreduce_post_accumulation), in buckets overlapped with the last micro-batch's backward; every
// rank then holds the same global gradient (ZeRO-1: its part of it).
void TrainStep::sync_finish(int64_t count) {
  for (auto& t : models_) {
    if (t->sync) {
      t->sync->finish(count, t->m->grads());
      wait_s_ += t->sync->last_wait_seconds();
    }
    if (t->dsync) {
      t->dsync->finish(count);
      wait_s_ += t->dsync->last_wait_seconds();
    }
  }
}

// The global gradient norm over every trained model (ELECTRA: one optimizer over both).
double TrainStep::grad_norm() {
  auto norm_of = [&](Model& t) {
    if (t.shards) return sharded_global_norm(comm_, *t.m, *t.shards);
    return be_.global_norm(t.m->grads_on_backend(), t.m->table().total());
  };
  if (models_.size() == 1) return norm_of(*models_.front());
  double sq = 0;
  for (auto& t : models_) {
    const double n = norm_of(*t);
    sq += n * n;
  }
  return std::sqrt(sq);
}

void TrainStep::unscale(float factor) {
  for (auto& t : models_) be_.scale(t->m->grads_on_backend(), static_cast<int64_t>(t->m->table().total()), factor);
}

// The optimizer through the backend (clipping by `norm` inside it), then ZeRO-1's all-gather of the
// parameters each rank updated.
void TrainStep::update(float lr, double norm, dist::Watchdog* watchdog, int64_t label) {
  for (auto& t : models_) {
    Bert& m = *t->m;
    if (o_.optimizer == Optimizer::Lamb)
      be_.lamb_step(m.table(), m.params_on_backend(), m.grads_on_backend(), *t->moments, lr, o_.lamb, norm);
    else
      be_.adamw_step(m.table(), m.params_on_backend(), m.grads_on_backend(), *t->moments, lr, o_.adamw, norm);
  }
  bool gathered = false;
  for (auto& t : models_) {
    if (!t->shards) continue;
    if (!gathered && watchdog) watchdog->beat("the ZeRO-1 parameter all-gather", label);
    gathered = true;
    t->shards->allgather_params(comm_, dcomm_, *t->m);
  }
  if (o_.after_update) o_.after_update();
}

// A non-finite step is skipped and, with dynamic scaling, the scale halves. Divergence: too many in
// a row (with dynamic scaling, once the scale is down to 1) end the run.
void TrainStep::skip(double loss, double gnorm, int64_t label) {
  if (comm_.rank() == 0 && o_.on_skip) o_.on_skip(loss, gnorm);
  if (!ls_.dynamic || *ls_.scale <= 1.0) ++bad_run_;
  BERTCC_CHECK(bad_run_ < o_.max_nonfinite_steps, o_.who, ": ", bad_run_,
               " consecutive steps with a non-finite loss or gradients (diverged at step ", label - bad_run_ + 2, ") ",
               o_.diverged_note);
  if (ls_.dynamic) *ls_.scale = std::max(1.0, *ls_.scale / 2);
  *ls_.clean_steps = 0;
}

StepResult TrainStep::run(int64_t count, const std::function<void(int64_t)>& micro_batch,
                          const std::function<double()>& reduce_loss, float lr, dist::Watchdog* watchdog,
                          int64_t label) {
  if (watchdog) watchdog->beat("forward/backward", label);
  for (auto& t : models_) t->m->zero_grad();
  for (int64_t a = 0; a < count; ++a) {
    sync_before(a, count);
    micro_batch(a);
    sync_after(a, count);
  }
  if (watchdog) watchdog->beat("the gradient all-reduce", label);
  sync_finish(count);
  StepResult r;
  r.loss = reduce_loss();
  // The check for inf/NaN, then the fp16 loss scale's unscaling.
  r.gnorm = grad_norm();
  if (!std::isfinite(r.gnorm) || !std::isfinite(r.loss)) {
    skip(r.loss, r.gnorm, label);
    return r;  // (applied stays false)
  }
  bad_run_ = 0;
  const float factor = static_cast<float>(1.0 / *ls_.scale);
  if (factor != 1.0f) unscale(factor);
  // Without loss scaling, the norm computed for the check serves the optimizer's clipping.
  update(lr, factor == 1.0f ? r.gnorm : grad_norm(), watchdog, label);
  if (ls_.dynamic && ++*ls_.clean_steps >= ls_.window) {
    *ls_.scale *= 2;
    *ls_.clean_steps = 0;
  }
  r.applied = true;
  return r;
}

}  // namespace bertcc
