// The fine-tuning loop (NVIDIA run_squad/run_glue and HF Trainer semantics): shuffled batches,
// AdamW with bias correction and decoupled weight decay, linear warm-up then linear decay,
// gradient clipping at 1.0, gradient accumulation, dropout on, evaluation after each epoch and
// the best model kept.
#include "bertcc/finetune.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <numeric>

#include "backend/backend.h"
#include "bertcc/dist.h"
#include "bertcc/error.h"
#include "bertcc/fileio.h"
#include "bertcc/inference.h"
#include "bertcc/model_dir.h"
#include "bertcc/ner.h"
#include "bertcc/optim.h"
#include "bertcc/signals.h"
#include "train/checkpoint.h"
#include "train/data_parallel.h"
#include "train/dllogger.h"
#include "train/hparams.h"
#include "train/progress.h"
#include "train/run.h"
#include "train/step.h"

namespace bertcc {
namespace fs = std::filesystem;

namespace {
// Fisher-Yates driven by the SplitMix64 stream of (seed, epoch): the same order on every platform.
std::vector<size_t> epoch_permutation(size_t n, uint64_t seed, int64_t epoch) {
  std::vector<size_t> p(n);
  std::iota(p.begin(), p.end(), size_t{0});
  uint64_t s = seed * 0x2545F4914F6CDD1Dull + static_cast<uint64_t>(epoch) + 1;
  for (size_t i = n; i > 1; --i, s += kSplitMixGamma) std::swap(p[i - 1], p[splitmix64(s) % i]);
  return p;
}

}  // namespace

std::vector<size_t> length_grouped_order(const std::vector<size_t>& shuffled, const std::vector<size_t>& lengths,
                                         int64_t batch_size) {
  const size_t n = shuffled.size(), bs = static_cast<size_t>(std::max<int64_t>(batch_size, 1));
  const size_t mega = std::max<size_t>(1, std::min<size_t>(n / (bs * 4), 50)) * bs;
  std::vector<size_t> out = shuffled;
  size_t longest_mega = 0, longest = 0;
  for (size_t m0 = 0; m0 < n; m0 += mega) {
    const auto first = out.begin() + static_cast<std::ptrdiff_t>(m0);
    const auto last = out.begin() + static_cast<std::ptrdiff_t>(std::min(n, m0 + mega));
    std::stable_sort(first, last, [&](size_t a, size_t b) { return lengths[a] > lengths[b]; });
    if (m0 == 0 || lengths[*first] > longest) {  // first maximum, as torch.argmax
      longest = lengths[*first];
      longest_mega = m0;
    }
  }
  if (n > 0) std::swap(out[0], out[longest_mega]);
  return out;
}

namespace {
void save_dir_atomic(const Bert& model, const std::string& dir, const std::string& vocab, std::optional<bool> lower) {
  const std::string tmp = dir + ".tmp";
  fs::remove_all(tmp);
  save_model_dir(model, tmp, vocab, lower);
  replace_dir(tmp, dir);
}
}  // namespace

void check_finetune_options(const FinetuneOptions& o) {
  BERTCC_CHECK(o.train_batch_size >= 1 && o.gradient_accumulation_steps >= 1 &&
                   o.train_batch_size % o.gradient_accumulation_steps == 0,
               "--train-batch-size (", o.train_batch_size,
               ") must be a positive multiple of --gradient-accumulation-steps (", o.gradient_accumulation_steps, ")");
  check_positive("--learning-rate", o.learning_rate);
  check_fraction("--warmup-proportion", o.warmup_proportion);
  check_nonnegative("--weight-decay", o.weight_decay);
  check_hparam("--max-grad-norm", o.max_grad_norm, -HUGE_VAL, false, HUGE_VAL, false, "(<= 0 disables clipping)");
  check_positive("--adam-eps", o.adam_eps);
  check_hparam("--layerwise-lr-decay", o.layerwise_lr_decay, 0, false, 1, true, "in (0, 1]");
  if (o.max_steps != -1)
    check_int("--max-steps", o.max_steps, 1, kMaxTrainSteps);  // -1: from the epochs
  else
    check_hparam("--num-train-epochs", o.num_train_epochs, 0, false, 1e6, true, "in (0, 1e6]");
  check_int("--log-freq", o.log_freq, 1, kMaxTrainSteps);
  check_int("--num-steps-per-checkpoint", o.num_steps_per_checkpoint, 0, kMaxTrainSteps);
  check_int("--keep-checkpoints", o.keep_checkpoints, 1, 1 << 20);
  check_int("--freeze-layers", o.freeze_layers, -1, 1 << 20);
  check_int("--max-nonfinite-steps", o.max_nonfinite_steps, 1, kMaxTrainSteps);
  check_positive("--bucket-cap-mb", o.dp.bucket_cap_mb);
  check_nonnegative("--watchdog-timeout", o.dp.watchdog_timeout);
}

namespace {
// A fine-tuning run: its setup, the loop over TrainStep steps, evaluations, checkpoints, logs and
// the progress bar. run_finetune() is run().
class Finetuning {
 public:
  Finetuning(Bert& model, const std::vector<FtFeature>& train, const Evaluator& eval, const FinetuneOptions& o)
      : model(model),
        train(train),
        eval(eval),
        o(o),
        rt(o.range_test),
        comm(dist::world()),
        W(comm.world()),
        R(comm.rank()),
        lead(R == 0),
        n(static_cast<int64_t>(train.size())) {}
  FinetuneResult run();

 private:
  void start();
  void resume();
  void make_step();
  bool train_step();
  void log_step(int64_t epoch, float lr, double wall);
  void draw_bar(double step_loss, double wall);
  void early_line(double step_loss, double wall);
  void run_eval(const nlohmann::ordered_json& epochs_done, const char* when);
  void save();
  std::string checkpoint_note() const;
  void check_converging(const char* before) const;
  void check_outputs_finite();
  FinetuneResult finish();
  double epochs_done(int64_t s) const { return static_cast<double>(s) / static_cast<double>(steps_per_epoch); }
  void clear_bar() const {
    if (bar) std::cerr << "\r\033[K";
  }
  double seq_per_s() const {
    return static_cast<double>(st.totals.seqs - seqs_before) / std::max(st.totals.train_seconds - seconds_before, 1e-9);
  }

  Bert& model;
  const std::vector<FtFeature>& train;
  const Evaluator& eval;
  const FinetuneOptions& o;
  const RangeTest* rt;  // a range test writes nothing
  dist::Communicator& comm;
  const int64_t W, R;
  const bool lead;  // only rank 0 writes
  const int64_t n;
  int64_t A = 1, micro = 1, global_batch = 1, steps_per_epoch = 1, total = 1;
  Backend* be = nullptr;
  bool dev = false;
  std::unique_ptr<dist::DeviceCommunicator> dcomm;
  AdamState opt;           // host form: fresh or loaded, then moved to the backend (moments_take)
  OptimizerState moments;  // where the backend computes
  AdamWOptions ao;
  // Everything a resumed run needs besides weights and moments: the step (which fixes the epoch,
  // its shuffle and the position in it), the dropout RNG and the best evaluation so far.
  TrainerState st;
  bool loaded = false;
  std::unique_ptr<DLLogger> log;
  std::unique_ptr<OptimizerShards> shards;   // ZeRO-1
  std::unique_ptr<dist::Watchdog> watchdog;  // evaluation and checkpoints pause it
  std::unique_ptr<TrainStep> step_fn;
  FinetuneResult res;
  std::chrono::steady_clock::time_point t0, last_bar, last_line;
  int64_t step = 0;
  double seconds_before = 0;  // this process's rate is logged per step
  int64_t seqs_before = 0;
  double loss_acc = 0;
  int64_t loss_n = 0, padded_since = 0, rows_since = 0;  // for the logged mean padded length
  // On a terminal: a bar redrawn in place, with the rate and the time left; the log lines and
  // evaluations print above it. Epochs are counted as epochs done (1.00 after the first), as in
  // the evaluations and Hugging Face's logs.
  bool bar = false;
  double epochs_total = 0;
  int64_t first_step = 0;  // (after a resume, the checkpoint's)
  double loss_run = 0;     // the mean step loss of this process's steps (the summary's train_loss)
  int64_t steps_run = 0;
  double shown_loss = NAN;  // the bar's loss: the last logged mean
  std::vector<size_t> lengths, perm;
  int64_t perm_epoch = -1;
};

// The sizes of a step and of the run, the backend, the memory check.
void Finetuning::start() {
  BERTCC_CHECK(!train.empty(), "fine-tuning: no training examples");
  BERTCC_CHECK(rt || !o.output_dir.empty(), "--output-dir is required for training");
  check_finetune_options(o);
  if (lead && !rt) fs::create_directories(o.output_dir);
  model.freeze_below_top_layers(o.freeze_layers);
  model.set_layerwise_lr_decay(static_cast<float>(o.layerwise_lr_decay));
  A = o.gradient_accumulation_steps;
  micro = o.train_batch_size / A;  // NVIDIA semantics (per rank)
  // A step takes the next W x train_batch_size examples of the epoch's order; they form W x A
  // micro-batches of which rank R runs R*A .. R*A+A-1.
  global_batch = W * o.train_batch_size;
  int64_t longest = 1;  // the longest training batch, padded as make_finetune_batch pads it
  for (const FtFeature& f : train) longest = std::max(longest, static_cast<int64_t>(f.input_ids.size()));
  const int64_t padded = padded_length(longest, model.config().max_position_embeddings);
  // The model computes where it was put (Bert::use_backend): weights, gradients and moments on a
  // device stay there; checkpoints and saved models are downloaded.
  be = &model.backend();
  dev = !be->on_host();
  dcomm = dev ? make_device_comm(comm, o.dp, *be, "finetune") : nullptr;
  if (!dev) check_training_memory({&model}, std::min(micro, n), padded, o.precision, "finetune");
  model.reserve_activations(std::min(micro, n), padded, o.precision);
  steps_per_epoch = (n + global_batch - 1) / global_batch;
  const double epoch_steps = std::ceil(o.num_train_epochs * static_cast<double>(steps_per_epoch));
  BERTCC_CHECK(o.max_steps > 0 || epoch_steps <= static_cast<double>(kMaxTrainSteps), "--num-train-epochs ",
               o.num_train_epochs, ": ", epoch_steps, " steps of ", steps_per_epoch, " per epoch, more than ",
               kMaxTrainSteps);
  total = o.max_steps > 0 ? o.max_steps : std::max<int64_t>(1, static_cast<int64_t>(epoch_steps));
}

// Fresh or resumed moments and state, the log's parameters, ZeRO-1, the moments to the backend.
void Finetuning::resume() {
  opt.m.assign(model.params().size(), 0.0f);
  opt.v.assign(model.params().size(), 0.0f);
  ao.weight_decay = o.weight_decay;
  ao.max_grad_norm = o.max_grad_norm;
  ao.eps = o.adam_eps;
  ao.bias_correction = o.bias_correction;
  st.rng = Rng{o.seed, 0};
  loaded =
      o.resume && load_latest_checkpoint(o.output_dir, model, opt, st, "finetune", lead, o.trust_unverified_checkpoint);
  if (W > 1)
    check_same_on_all_ranks(comm, loaded ? static_cast<double>(st.step) : -1.0,
                            "the checkpoint to resume from (is " + o.output_dir + " on a shared file system?)");
  // The log is opened once the checkpoint is resumed: a refused resume leaves the output as it was.
  if (lead && !rt) log = std::make_unique<DLLogger>(o.output_dir + "/dllogger.json");
  nlohmann::ordered_json params{{"train_examples", n},
                                {"train_batch_size", o.train_batch_size},
                                {"world_size", W},
                                {"global_batch_size", global_batch},
                                {"gradient_accumulation_steps", o.gradient_accumulation_steps},
                                {"learning_rate", o.learning_rate},
                                {"num_train_epochs", o.num_train_epochs},
                                {"max_steps", total},
                                {"warmup_proportion", o.warmup_proportion},
                                {"precision", precision_name(o.precision)},
                                {"seed", o.seed},
                                {"freeze_layers", o.freeze_layers},
                                {"layerwise_lr_decay", o.layerwise_lr_decay},
                                {"group_by_length", o.group_by_length},
                                {"architecture", model.architecture()}};
  if (log) log->log("PARAMETER", params);
  if (o.dp.zero1 && W > 1) {
    shards = std::make_unique<OptimizerShards>(model.table(), static_cast<int>(W));
    shards->keep_own(opt, static_cast<int>(R));
    if (lead)
      std::cerr << "finetune: optimizer moments " << 8.0 * static_cast<double>(shards->end(0)) / 1048576.0
                << " MB on rank 0 (ZeRO-1: sharded over " << W << " ranks; unsharded "
                << 8.0 * static_cast<double>(model.table().total()) / 1048576.0 << " MB)\n";
  }
  // (with ZeRO-1, the moments of this rank's part)
  if (dev && loaded) model.params_to_device();
  be->moments_take(std::move(opt), model.table().total(), moments);
}

// Rank 0 writes checkpoints; with ZeRO-1 every rank first sends it its moments.
void Finetuning::save() {
  AdamState* host = &opt;
  if (lead || shards) {  // ZeRO-1: every rank's part of the moments comes down
    if (lead) model.params_to_host();
    host = &be->moments_view(moments, opt);
  }
  AdamState full;
  if (shards) full = shards->gather_full(comm, *host);
  if (watchdog) watchdog->beat("writing a checkpoint (rank 0)", st.step, /*paused=*/true);
  if (lead) save_checkpoint(o.output_dir, model, shards ? full : *host, st, o.vocab_path, o.keep_checkpoints);
  comm.barrier();
  if (watchdog) watchdog->beat("after a checkpoint", st.step);
}

// epochs: the epochs done, a whole number at an epoch's end, else rounded to 2 decimals (a run
// that --max-steps ends within an epoch), as the step lines and Hugging Face's logs count them
void Finetuning::run_eval(const nlohmann::ordered_json& epochs, const char* when) {
  if (!eval) return;
  check_converging("evaluating");
  if (watchdog) watchdog->beat("evaluation", step, /*paused=*/true);
  EvalResult r;
  try {  // a model whose outputs are not finite has diverged: it scores nothing and is never the best
    r = eval(model);
  } catch (const Error& e) {
    fail("finetune: the evaluation after step ", step, " failed: ", e.what(), checkpoint_note());
  }
  r.metrics["epoch"] = epochs;
  r.metrics["step"] = step;
  res.last_eval = r.metrics;
  if (lead) log->log(nlohmann::ordered_json::array({epochs, step}), r.metrics, "EVAL");
  const bool better = r.score > st.best_score;  // the same on every rank: the logits are gathered
  if (!o.quiet && lead) {
    clear_bar();
    std::cerr << "eval (" << when << ") " << r.metrics.dump() << (better ? "  [best]" : "") << "\n";
  }
  if (better) {
    if (lead) model.params_to_host();
    if (lead)  // (NaN logits still score: their argmax is label 0)
      check_weights_finite(model, "finetune: not keeping the model of step " + std::to_string(step) + " as the best (" +
                                      o.output_dir + "/best)");
    st.best_score = r.score;
    st.best_metrics = r.metrics.dump();
    res.best_eval = r.metrics;
    if (lead) save_dir_atomic(model, o.output_dir + "/best", o.vocab_path, o.do_lower_case);
  }
  comm.barrier();
  if (watchdog) watchdog->beat("after evaluation", step);
}

// Where the last good state is, for the messages of a run that diverged.
std::string Finetuning::checkpoint_note() const {
  return o.num_steps_per_checkpoint > 0
             ? "; the newest checkpoint in " + o.output_dir + "/checkpoints is the last good state"
             : std::string("; no final model written");
}

// The last steps were skipped as non-finite (too few for --max-nonfinite-steps to stop the run):
// the run diverged; it must not evaluate, keep a best model or write a final one.
void Finetuning::check_converging(const char* before) const {
  const int64_t bad = step_fn ? step_fn->nonfinite_run() : 0;
  BERTCC_CHECK(bad == 0, "finetune: the run diverged at step ", step - bad + 1, " (the last ", bad,
               " step(s) had a non-finite loss or gradients: try a lower learning rate); stopping before ", before,
               checkpoint_note());
}

// Finite weights can still give non-finite outputs (weights near 1e30 overflow the forward pass):
// the final model's logits on a few training examples must be finite.
void Finetuning::check_outputs_finite() {
  std::vector<FtFeature> probe(train.begin(), train.begin() + std::min<int64_t>(n, 8));
  try {
    (void)predict_logits(model, probe, static_cast<int64_t>(probe.size()), o.precision);
  } catch (const Error& e) {
    fail("finetune: not writing the final model to ", o.output_dir, ": training ", e.what(),
         "; the run diverged: try a lower learning rate", checkpoint_note());
  }
}

// The training step: AdamW over the one model.
void Finetuning::make_step() {
  TrainStepOptions so;
  so.optimizer = Optimizer::AdamW;
  so.adamw = ao;
  so.who = "finetune";
  so.max_nonfinite_steps = o.max_nonfinite_steps;
  so.diverged_note =
      "(diverged: try a lower learning rate); stopping without writing a final model "
      "(--max-nonfinite-steps)";
  // skipped; a run of them means divergence: stop before anything non-finite is saved
  so.on_skip = [this](double loss, double gnorm) {
    std::cerr << "finetune: step " << step + 1 << ": non-finite loss (" << loss << ") or gradient norm (" << gnorm
              << "), step skipped\n";
  };
  step_fn = std::make_unique<TrainStep>(comm, *be, dcomm.get(), o.dp, std::move(so));
  step_fn->add_model(model, moments, shards.get(), /*overlap=*/true);
}

// One optimizer step over this rank's micro-batches of the epoch's order; false when a signal
// stopped the run or a range test ended it.
bool Finetuning::train_step() {
  watchdog->beat("the step's first all-reduce", step);
  double stop = signals::stop_requested() ? 1.0 : 0.0;  // a signal to any rank stops every rank at this step
  comm.allreduce_sum(&stop, 1);
  if (stop > 0) return false;
  const int64_t epoch = step / steps_per_epoch, s = step % steps_per_epoch;
  if (epoch != perm_epoch) {
    perm = epoch_permutation(train.size(), o.seed, epoch);
    if (o.group_by_length) perm = length_grouped_order(perm, lengths, global_batch);
    perm_epoch = epoch;
  }
  const auto ts = std::chrono::steady_clock::now();
  const int64_t first = s * global_batch, last = std::min(n, first + global_batch);
  // This step's loss and its padded, real and row counts, summed over ranks below.
  double sv[4] = {0, 0, 0, 0};
  // This rank's micro-batches: the epoch's last step may leave some of them empty.
  const int64_t count = std::clamp<int64_t>((last - first - R * A * micro + micro - 1) / micro, 0, A);
  auto micro_batch = [&](int64_t a) {
    const int64_t k = R * A + a, m0 = first + k * micro;
    std::vector<size_t> idx(perm.begin() + m0, perm.begin() + std::min(last, m0 + micro));
    const BertBatch b = make_finetune_batch(train, idx, model.heads(), true, model.config().max_position_embeddings);
    sv[1] += static_cast<double>(b.B * b.T);
    sv[3] += static_cast<double>(b.B);
    for (size_t i : idx) sv[2] += static_cast<double>(train[i].input_ids.size());
    // Each micro-batch's mean loss weighs by its share of the step's examples.
    const float w = static_cast<float>(idx.size()) / static_cast<float>(last - first);
    Rng rng = micro_batch_rng(o.seed, 1, step, k);
    const FinetuneLoss l = model.finetune_step(b, /*training=*/true, /*backward=*/true, o.precision, rng, w);
    sv[0] += w * l.loss;
  };
  auto reduce_loss = [&]() {
    comm.allreduce_sum(sv, 4);
    st.totals.padded_tokens += static_cast<int64_t>(sv[1]);
    padded_since += static_cast<int64_t>(sv[1]);
    st.totals.real_tokens += static_cast<int64_t>(sv[2]);
    rows_since += static_cast<int64_t>(sv[3]);
    return sv[0];
  };
  const float lr = rt ? rt->lr(step) : linear_warmup_lr(o.learning_rate, step, total, o.warmup_proportion);
  const double step_loss = step_fn->run(count, micro_batch, reduce_loss, lr, watchdog.get(), step).loss;
  ++step;
  st.totals.seqs += last - first;
  st.totals.train_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - ts).count();
  loss_acc += step_loss;
  ++loss_n;
  loss_run += step_loss;
  ++steps_run;
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (step % o.log_freq == 0 || step == total) log_step(epoch, lr, wall);
  if (rt) return rt->after_step(step, lr, step_loss);
  draw_bar(step_loss, wall);
  if (step % o.log_freq != 0 && step != total) early_line(step_loss, wall);
  if (step % steps_per_epoch == 0)
    run_eval(epoch + 1, step < total ? "end of epoch" : "end of training");
  else if (step == total)
    run_eval(std::round(epochs_done(step) * 100) / 100, "end of training");
  st.step = step;
  if (step < total && o.num_steps_per_checkpoint > 0 && step % o.num_steps_per_checkpoint == 0) save();
  return true;
}

void Finetuning::log_step(int64_t epoch, float lr, double wall) {
  const double sps = seq_per_s();
  nlohmann::ordered_json d{{"loss", loss_acc / static_cast<double>(loss_n)},
                           {"learning_rate", lr},
                           {"seq_per_s", sps},
                           {"padded_length", static_cast<double>(padded_since) / std::max<int64_t>(rows_since, 1)}};
  if (log) log->log(nlohmann::ordered_json::array({epoch, step}), d);
  shown_loss = d["loss"].get<double>();
  if (!o.quiet && lead) {
    clear_bar();
    std::cerr << "step " << step << "/" << total << " epoch " << fixed(epochs_done(step), 2) << " loss "
              << d["loss"].get<double>() << " lr " << lr << " " << static_cast<int>(sps) << " seq/s eta "
              << eta(wall, steps_run, total - first_step) << "\n";
  }
  loss_acc = 0;
  loss_n = 0;
  padded_since = rows_since = 0;
  last_line = std::chrono::steady_clock::now();
}

// Plain lines (no bar): before the first --log-freq line, steps 1, 2, 4, 8, ... say the rate and
// the time left, and later a line every 30 s without one, so a slow run is never silent for long.
// The log and the loss averages are untouched (log_step's).
void Finetuning::early_line(double step_loss, double wall) {
  if (bar || !lead || o.quiet) return;
  const auto now = std::chrono::steady_clock::now();
  const bool doubling = step < o.log_freq && (step & (step - 1)) == 0;
  if (!doubling && now - last_line < std::chrono::seconds(30)) return;
  last_line = now;
  std::cerr << "step " << step << "/" << total << " epoch " << fixed(epochs_done(step), 2) << " loss "
            << fixed(step_loss) << " " << static_cast<int>(seq_per_s()) << " seq/s eta "
            << eta(wall, steps_run, total - first_step) << "\n";
}

void Finetuning::draw_bar(double step_loss, double wall) {
  if (!bar || (step != total && std::chrono::steady_clock::now() - last_bar <= std::chrono::milliseconds(200))) return;
  last_bar = std::chrono::steady_clock::now();
  std::cerr << "\r" << progress_bar(step, total) << " " << step << "/" << total << " epoch "
            << fixed(epochs_done(step), 2) << "/" << fixed(epochs_total, 2) << " loss "
            << (std::isfinite(shown_loss) ? fixed(shown_loss) : fixed(step_loss)) << " "
            << static_cast<int>(seq_per_s()) << " seq/s " << clock_time(wall) << "<"
            << eta(wall, steps_run, total - first_step) << "\033[K" << std::flush;
}

// After the loop: a range test's end, a signal's checkpoint, or the final model and summary.
FinetuneResult Finetuning::finish() {
  clear_bar();
  res.steps = step;
  if (rt) return res;
  if (step < total) {  // stopped by a signal: save the state reached
    const bool saved = o.num_steps_per_checkpoint > 0 && step % o.num_steps_per_checkpoint == 0 && step > 0;
    if (!saved) save();
    if (lead)
      std::cerr << "finetune: stopped by signal after step " << step << "; checkpoint in " << o.output_dir
                << "/checkpoints/step_" << step << " (to resume: the same command with --resume-from-checkpoint)\n";
    comm.barrier();
    res.stopped = true;
    return res;
  }
  check_converging("writing the final model");
  check_outputs_finite();  // (every rank: the logits are gathered)
  watchdog->beat("saving the model", step);
  if (!lead) {
    comm.barrier();  // wait for rank 0's files before exiting
    return res;
  }
  model.params_to_host();
  check_weights_finite(model, "finetune: not writing the final model to " + o.output_dir);
  save_model_dir(model, o.output_dir, o.vocab_path, o.do_lower_case);
  const TrainerState::Totals& t = st.totals;
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  res.train_seq_per_s = static_cast<double>(t.seqs) / std::max(t.train_seconds, 1e-9);
  nlohmann::ordered_json summary{
      {"steps", step},
      {"train_seconds", t.train_seconds},
      {"train_seq_per_s", res.train_seq_per_s},
      {"mean_padded_length", static_cast<double>(t.padded_tokens) / std::max<int64_t>(t.seqs, 1)},
      {"mean_length", static_cast<double>(t.real_tokens) / std::max<int64_t>(t.seqs, 1)},
      {"last_eval", res.last_eval},
      {"best_eval", res.best_eval}};
  log->log(nlohmann::ordered_json::array(), summary);
  write_file_atomic(o.output_dir + "/eval_results.json", summary.dump(2) + "\n");
  comm.barrier();
  if (o.quiet) return res;
  // as the Trainer ends: train metrics, eval metrics, where the model went
  std::vector<std::pair<std::string, std::string>> rows{
      {"epoch", fixed(epochs_done(step), 2)},
      {"train_steps", std::to_string(step)},
      {"train_samples", std::to_string(t.seqs)},
      {"train_runtime", clock_time(res.seconds, true)},
      {"train_samples_per_second", fixed(res.train_seq_per_s, 3)},
      {"train_loss", steps_run ? fixed(loss_run / static_cast<double>(steps_run)) : std::string("-")}};
  if (first_step > 0)
    rows.push_back({"resumed_from_step", std::to_string(first_step) + " (runtime and train_loss: this run's steps)"});
  std::string out = metrics_block("train metrics", rows);
  if (res.last_eval.is_object()) {
    std::vector<std::pair<std::string, std::string>> ev;
    for (const auto& [k, v] : res.last_eval.items())
      if (k != "per_type") ev.push_back({"eval_" + k, v.dump()});
    out += metrics_block("eval metrics", ev);
    // NER: seqeval's table per entity type, as users read it (the JSON is in eval_metrics.json)
    if (res.last_eval.contains("per_type")) out += "\n" + ner_classification_report(res.last_eval);
  }
  out += "model written to " + o.output_dir;
  if (res.best_eval.is_object())  // two models: the last step's, and the best evaluation's
    out += " (the last step's); best evaluation's model (step " +
           res.best_eval.value("step", nlohmann::ordered_json(0)).dump() + ") in " + o.output_dir + "/best";
  std::cerr << out << "\n";
  return res;
}

FinetuneResult Finetuning::run() {
  start();
  resume();
  if (o.resume && !loaded && lead)
    std::cerr << "finetune: no checkpoint in " << o.output_dir << "/checkpoints; starting from step 0\n";
  BERTCC_CHECK(st.step <= total, o.output_dir, ": the checkpoint is at step ", st.step, ", past this run's ", total,
               " steps");
  if (!st.best_metrics.empty()) res.best_eval = nlohmann::ordered_json::parse(st.best_metrics);
  t0 = std::chrono::steady_clock::now();
  // Totals since step 0 (restored on resume); padded: batch rows x padded length, real: the rows' own lengths.
  step = st.step;
  seconds_before = st.totals.train_seconds;
  seqs_before = st.totals.seqs;
  bar = lead && !o.quiet && !rt && interactive_terminal(STDERR_FILENO);
  epochs_total = static_cast<double>(total) / static_cast<double>(steps_per_epoch);
  first_step = st.step;
  last_bar = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  last_line = std::chrono::steady_clock::now();
  if (o.group_by_length)
    for (const FtFeature& f : train) lengths.push_back(f.input_ids.size());
  signals::take_stop_signals();  // SIGINT/SIGTERM: finish the step, save, return
  watchdog = std::make_unique<dist::Watchdog>(comm, W > 1 ? o.dp.watchdog_timeout : 0);
  make_step();
  while (step < total)
    if (!train_step()) break;
  return finish();
}
}  // namespace

FinetuneResult run_finetune(Bert& model, const std::vector<FtFeature>& train, const Evaluator& eval,
                            const FinetuneOptions& o) {
  return Finetuning(model, train, eval, o).run();
}

}  // namespace bertcc
