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
// Where a fine-tuning run's options name what every run has.
RunOptions run_options(const FinetuneOptions& o) { return run_options_of(o, "finetune", o.resume); }

// A fine-tuning run as a task of a TrainingRun: the epochs' order, the micro-batches and their
// loss, the evaluation after each epoch and the best model, the log lines and the progress bar,
// the final model and summary. run_finetune() is run_all().
class Finetuning : public TrainingTask {
 public:
  Finetuning(Bert& model, const std::vector<FtFeature>& train, const Evaluator& eval, const FinetuneOptions& o)
      : model(model),
        train(train),
        eval(eval),
        opts(o),
        run(run_options(o)),
        state(run.state),
        examples(static_cast<int64_t>(train.size())) {}
  FinetuneResult run_all();

 private:
  void start();
  void resume();
  void make_step() override;
  StepEnd train_step() override;
  void finish(bool stopped) override;
  void log_step(int64_t epoch, float lr, double wall);
  void draw_bar(double step_loss, double wall);
  void early_line(double step_loss, double wall);
  void run_eval(const nlohmann::ordered_json& epochs_done, const char* when);
  std::string checkpoint_note() const;
  void check_converging(const char* before) const;
  void check_outputs_finite();
  void write_final();
  double epochs_done(int64_t s) const { return static_cast<double>(s) / static_cast<double>(steps_per_epoch); }
  void clear_bar() const {
    if (bar.on) std::cerr << "\r\033[K";
  }
  double seq_per_s() const {
    return static_cast<double>(state.totals.seqs - before.seqs) /
           std::max(state.totals.train_seconds - before.seconds, 1e-9);
  }
  int64_t total_steps() const { return run.total_steps; }
  const RangeTest* range_test() const { return opts.range_test; }  // set: a range test, which writes nothing

  Bert& model;
  const std::vector<FtFeature>& train;
  const Evaluator& eval;
  const FinetuneOptions& opts;
  TrainingRun run;
  TrainerState& state;  // run.state: the step (which fixes the epoch, its shuffle and the position in it),
                        // the dropout RNG, the best evaluation so far and the totals
  const int64_t examples;
  int64_t accum_steps = 1, micro_batch_size = 1, global_batch = 1, steps_per_epoch = 1;
  AdamWOptions adamw;
  FinetuneResult result;
  // The totals restored from a checkpoint: this process's rate is logged.
  struct {
    double seconds = 0;
    int64_t seqs = 0;
  } before;
  // Since the last log line: the mean step loss and padded length logged.
  struct SinceLog {
    double loss_sum = 0;
    int64_t steps = 0, padded_tokens = 0, rows = 0;
    std::chrono::steady_clock::time_point line;  // when it was printed
  } since_log;
  double loss_sum_run = 0;  // over this process's steps (the summary's train_loss is their mean)
  // On a terminal: a bar redrawn in place, with the rate and the time left; the log lines and
  // evaluations print above it. Epochs are counted as epochs done (1.00 after the first), as in
  // the evaluations and Hugging Face's logs.
  struct Bar {
    bool on = false;
    double epochs_total = 0;
    double shown_loss = NAN;  // the last logged mean
    std::chrono::steady_clock::time_point drawn;
  } bar;
  std::vector<size_t> lengths, perm;  // the examples' lengths (--group-by-length); the epoch's order
  int64_t perm_epoch = -1;
};

// The sizes of a step and of the run, the backend, the memory check.
void Finetuning::start() {
  BERTCC_CHECK(!train.empty(), "fine-tuning: no training examples");
  BERTCC_CHECK(range_test() || !opts.output_dir.empty(), "--output-dir is required for training");
  check_finetune_options(opts);
  if (run.lead && !range_test()) fs::create_directories(opts.output_dir);
  model.freeze_below_top_layers(opts.freeze_layers);
  model.set_layerwise_lr_decay(static_cast<float>(opts.layerwise_lr_decay));
  accum_steps = opts.gradient_accumulation_steps;
  micro_batch_size = opts.train_batch_size / accum_steps;  // NVIDIA semantics (per rank)
  // A step takes the next world_size x train_batch_size examples of the epoch's order; they form
  // world_size x accum_steps micro-batches of which rank r runs r*accum_steps .. r*accum_steps +
  // accum_steps - 1.
  global_batch = run.world_size * opts.train_batch_size;
  int64_t longest = 1;  // the longest training batch, padded as make_finetune_batch pads it
  for (const FtFeature& f : train) longest = std::max(longest, static_cast<int64_t>(f.input_ids.size()));
  const int64_t padded = padded_length(longest, model.config().max_position_embeddings);
  // The model computes where it was put (Bert::use_backend): weights, gradients and moments on a
  // device stay there; checkpoints and saved models are downloaded.
  run.use_backend(model.backend());
  if (!run.on_device)
    check_training_memory({&model}, std::min(micro_batch_size, examples), padded, opts.precision, "finetune");
  model.reserve_activations(std::min(micro_batch_size, examples), padded, opts.precision);
  steps_per_epoch = (examples + global_batch - 1) / global_batch;
  const double epoch_steps = std::ceil(opts.num_train_epochs * static_cast<double>(steps_per_epoch));
  BERTCC_CHECK(opts.max_steps > 0 || epoch_steps <= static_cast<double>(kMaxTrainSteps), "--num-train-epochs ",
               opts.num_train_epochs, ": ", epoch_steps, " steps of ", steps_per_epoch, " per epoch, more than ",
               kMaxTrainSteps);
  run.total_steps = opts.max_steps > 0 ? opts.max_steps : std::max<int64_t>(1, static_cast<int64_t>(epoch_steps));
  run.eval_every = steps_per_epoch;
}

// Fresh or resumed moments and state, the log's parameters, ZeRO-1, the moments to the backend.
void Finetuning::resume() {
  TrainedModel& trained = run.models.emplace_back();
  trained.model = &model;
  trained.host_moments.m.assign(model.params().size(), 0.0f);
  trained.host_moments.v.assign(model.params().size(), 0.0f);
  adamw.weight_decay = opts.weight_decay;
  adamw.max_grad_norm = opts.max_grad_norm;
  adamw.eps = opts.adam_eps;
  adamw.bias_correction = opts.bias_correction;
  state.rng = Rng{opts.seed, 0};
  run.resume();
  // The log is opened once the checkpoint is resumed: a refused resume leaves the output as it was.
  run.open_logs({{"train_examples", examples},
                 {"train_batch_size", opts.train_batch_size},
                 {"world_size", run.world_size},
                 {"global_batch_size", global_batch},
                 {"gradient_accumulation_steps", opts.gradient_accumulation_steps},
                 {"learning_rate", opts.learning_rate},
                 {"num_train_epochs", opts.num_train_epochs},
                 {"max_steps", total_steps()},
                 {"warmup_proportion", opts.warmup_proportion},
                 {"precision", precision_name(opts.precision)},
                 {"seed", opts.seed},
                 {"freeze_layers", opts.freeze_layers},
                 {"layerwise_lr_decay", opts.layerwise_lr_decay},
                 {"group_by_length", opts.group_by_length},
                 {"architecture", model.architecture()}},
                /*with_tensorboard=*/false);
  run.shard_moments();
  if (const OptimizerShards* shards = trained.shards.get(); shards && run.lead)
    std::cerr << "finetune: optimizer moments " << 8.0 * static_cast<double>(shards->end(0)) / 1048576.0
              << " MB on rank 0 (ZeRO-1: sharded over " << run.world_size << " ranks; unsharded "
              << 8.0 * static_cast<double>(model.table().total()) / 1048576.0 << " MB)\n";
  // (with ZeRO-1, the moments of this rank's part)
  if (run.on_device && run.resumed) model.params_to_device();
  run.place_moments();
}

// epochs: the epochs done, a whole number at an epoch's end, else rounded to 2 decimals (a run
// that --max-steps ends within an epoch), as the step lines and Hugging Face's logs count them
void Finetuning::run_eval(const nlohmann::ordered_json& epochs, const char* when) {
  if (!eval) return;
  const int64_t step = state.step;
  check_converging("evaluating");
  run.watchdog->beat("evaluation", step, /*paused=*/true);
  EvalResult r;
  try {  // a model whose outputs are not finite has diverged: it scores nothing and is never the best
    r = eval(model);
  } catch (const Error& e) {
    fail("finetune: the evaluation after step ", step, " failed: ", e.what(), checkpoint_note());
  }
  r.metrics["epoch"] = epochs;
  r.metrics["step"] = step;
  result.last_eval = r.metrics;
  if (run.lead) run.log->log(nlohmann::ordered_json::array({epochs, step}), r.metrics, "EVAL");
  const bool better = r.score > state.best_score;  // the same on every rank: the logits are gathered
  if (!opts.quiet && run.lead) {
    clear_bar();
    std::cerr << "eval (" << when << ") " << r.metrics.dump() << (better ? "  [best]" : "") << "\n";
  }
  if (better) {
    if (run.lead) model.params_to_host();
    if (run.lead)  // (NaN logits still score: their argmax is label 0)
      check_weights_finite(model, "finetune: not keeping the model of step " + std::to_string(step) + " as the best (" +
                                      opts.output_dir + "/best)");
    state.best_score = r.score;
    state.best_metrics = r.metrics.dump();
    result.best_eval = r.metrics;
    if (run.lead) save_dir_atomic(model, opts.output_dir + "/best", opts.vocab_path, opts.do_lower_case);
  }
  run.comm.barrier();
  run.watchdog->beat("after evaluation", step);
}

// Where the last good state is, for the messages of a run that diverged.
std::string Finetuning::checkpoint_note() const {
  return opts.num_steps_per_checkpoint > 0
             ? "; the newest checkpoint in " + opts.output_dir + "/checkpoints is the last good state"
             : std::string("; no final model written");
}

// The last steps were skipped as non-finite (too few for --max-nonfinite-steps to stop the run):
// the run diverged; it must not evaluate, keep a best model or write a final one.
void Finetuning::check_converging(const char* before) const {
  const int64_t bad = run.step ? run.step->nonfinite_run() : 0;
  BERTCC_CHECK(bad == 0, "finetune: the run diverged at step ", state.step - bad + 1, " (the last ", bad,
               " step(s) had a non-finite loss or gradients: try a lower learning rate); stopping before ", before,
               checkpoint_note());
}

// Finite weights can still give non-finite outputs (weights near 1e30 overflow the forward pass):
// the final model's logits on a few training examples must be finite.
void Finetuning::check_outputs_finite() {
  std::vector<FtFeature> probe(train.begin(), train.begin() + std::min<int64_t>(examples, 8));
  try {
    (void)predict_logits(model, probe, static_cast<int64_t>(probe.size()), opts.precision);
  } catch (const Error& e) {
    fail("finetune: not writing the final model to ", opts.output_dir, ": training ", e.what(),
         "; the run diverged: try a lower learning rate", checkpoint_note());
  }
}

// The training step: AdamW over the one model.
void Finetuning::make_step() {
  TrainStepOptions so;
  so.optimizer = Optimizer::AdamW;
  so.adamw = adamw;
  so.who = "finetune";
  so.max_nonfinite_steps = opts.max_nonfinite_steps;
  so.diverged_note =
      "(diverged: try a lower learning rate); stopping without writing a final model "
      "(--max-nonfinite-steps)";
  // skipped; a run of them means divergence: stop before anything non-finite is saved
  so.on_skip = [this](double loss, double gnorm) {
    std::cerr << "finetune: step " << state.step + 1 << ": non-finite loss (" << loss << ") or gradient norm (" << gnorm
              << "), step skipped\n";
  };
  run.make_step(std::move(so), LossScale{}, /*overlap=*/true);
}

// One optimizer step over this rank's micro-batches of the epoch's order; Stopped when a signal
// stopped the run, Ended when a range test ended it.
TrainingTask::StepEnd Finetuning::train_step() {
  run.watchdog->beat("the step's first all-reduce", state.step);
  double stop = signals::stop_requested() ? 1.0 : 0.0;  // a signal to any rank stops every rank at this step
  run.comm.allreduce_sum(&stop, 1);
  if (stop > 0) return StepEnd::Stopped;
  const int64_t epoch = state.step / steps_per_epoch, s = state.step % steps_per_epoch;
  if (epoch != perm_epoch) {
    perm = epoch_permutation(train.size(), opts.seed, epoch);
    if (opts.group_by_length) perm = length_grouped_order(perm, lengths, global_batch);
    perm_epoch = epoch;
  }
  const auto ts = std::chrono::steady_clock::now();
  const int64_t first = s * global_batch, last = std::min(examples, first + global_batch);
  const int64_t A = accum_steps, micro = micro_batch_size, first_micro = run.rank * accum_steps;
  // This step's loss and its padded, real and row counts, summed over ranks below.
  double sv[4] = {0, 0, 0, 0};
  // This rank's micro-batches: the epoch's last step may leave some of them empty.
  const int64_t count = std::clamp<int64_t>((last - first - first_micro * micro + micro - 1) / micro, 0, A);
  auto micro_batch = [&](int64_t a) {
    const int64_t k = first_micro + a, m0 = first + k * micro;
    std::vector<size_t> idx(perm.begin() + m0, perm.begin() + std::min(last, m0 + micro));
    const BertBatch b =
        make_finetune_batch(train, idx, model.head_labels(), true, model.config().max_position_embeddings);
    sv[1] += static_cast<double>(b.B * b.T);
    sv[3] += static_cast<double>(b.B);
    for (size_t i : idx) sv[2] += static_cast<double>(train[i].input_ids.size());
    // Each micro-batch's mean loss weighs by its share of the step's examples.
    const float w = static_cast<float>(idx.size()) / static_cast<float>(last - first);
    Rng rng = micro_batch_rng(opts.seed, 1, state.step, k);
    const FinetuneLoss l = model.finetune_step(
        b, rng, StepArgs{.training = true, .backward = true, .precision = opts.precision, .loss_scale = w});
    sv[0] += w * l.loss;
  };
  auto reduce_loss = [&]() {
    run.comm.allreduce_sum(sv, 4);
    state.totals.padded_tokens += static_cast<int64_t>(sv[1]);
    since_log.padded_tokens += static_cast<int64_t>(sv[1]);
    state.totals.real_tokens += static_cast<int64_t>(sv[2]);
    since_log.rows += static_cast<int64_t>(sv[3]);
    return sv[0];
  };
  const float lr = range_test()
                       ? range_test()->lr(state.step)
                       : linear_warmup_lr(opts.learning_rate, state.step, total_steps(), opts.warmup_proportion);
  const double step_loss = run.step->run(count, micro_batch, reduce_loss, lr, run.watchdog.get(), state.step).loss;
  ++state.step;
  state.totals.seqs += last - first;
  state.totals.train_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - ts).count();
  since_log.loss_sum += step_loss;
  ++since_log.steps;
  loss_sum_run += step_loss;
  const double wall = run.clock.seconds();
  if (run.log_due()) log_step(epoch, lr, wall);
  if (range_test()) return range_test()->after_step(state.step, lr, step_loss) ? StepEnd::Next : StepEnd::Ended;
  draw_bar(step_loss, wall);
  if (!run.log_due()) early_line(step_loss, wall);
  if (run.evaluation_due())
    run_eval(epoch + 1, state.step < total_steps() ? "end of epoch" : "end of training");
  else if (state.step == total_steps())
    run_eval(std::round(epochs_done(state.step) * 100) / 100, "end of training");
  if (run.checkpoint_due()) run.save(opts.vocab_path, state.step);
  return StepEnd::Next;
}

void Finetuning::log_step(int64_t epoch, float lr, double wall) {
  const double sps = seq_per_s();
  const int64_t step = state.step;
  nlohmann::ordered_json d{
      {"loss", since_log.loss_sum / static_cast<double>(since_log.steps)},
      {"learning_rate", lr},
      {"seq_per_s", sps},
      {"padded_length", static_cast<double>(since_log.padded_tokens) / std::max<int64_t>(since_log.rows, 1)}};
  if (run.log) run.log->log(nlohmann::ordered_json::array({epoch, step}), d);
  bar.shown_loss = d["loss"].get<double>();
  if (!opts.quiet && run.lead) {
    clear_bar();
    std::cerr << "step " << step << "/" << total_steps() << " epoch " << fixed(epochs_done(step), 2) << " loss "
              << d["loss"].get<double>() << " lr " << lr << " " << static_cast<int>(sps) << " seq/s eta "
              << eta(wall, run.clock.steps_run(step), run.clock.steps_run(total_steps())) << "\n";
  }
  since_log = SinceLog{};
  since_log.line = std::chrono::steady_clock::now();
}

// Plain lines (no bar): before the first --log-freq line, steps 1, 2, 4, 8, ... say the rate and
// the time left, and later a line every 30 s without one, so a slow run is never silent for long.
// The log and the loss averages are untouched (log_step's).
void Finetuning::early_line(double step_loss, double wall) {
  if (bar.on || !run.lead || opts.quiet) return;
  const int64_t step = state.step;
  const auto now = std::chrono::steady_clock::now();
  const bool doubling = step < opts.log_freq && (step & (step - 1)) == 0;
  if (!doubling && now - since_log.line < std::chrono::seconds(30)) return;
  since_log.line = now;
  std::cerr << "step " << step << "/" << total_steps() << " epoch " << fixed(epochs_done(step), 2) << " loss "
            << fixed(step_loss) << " " << static_cast<int>(seq_per_s()) << " seq/s eta "
            << eta(wall, run.clock.steps_run(step), run.clock.steps_run(total_steps())) << "\n";
}

void Finetuning::draw_bar(double step_loss, double wall) {
  const int64_t step = state.step, total = total_steps();
  if (!bar.on || (step != total && std::chrono::steady_clock::now() - bar.drawn <= std::chrono::milliseconds(200)))
    return;
  bar.drawn = std::chrono::steady_clock::now();
  std::cerr << "\r" << progress_bar(step, total) << " " << step << "/" << total << " epoch "
            << fixed(epochs_done(step), 2) << "/" << fixed(bar.epochs_total, 2) << " loss "
            << (std::isfinite(bar.shown_loss) ? fixed(bar.shown_loss) : fixed(step_loss)) << " "
            << static_cast<int>(seq_per_s()) << " seq/s " << clock_time(wall) << "<"
            << eta(wall, run.clock.steps_run(step), run.clock.steps_run(total)) << "\033[K" << std::flush;
}

// After the loop: a range test's end, a signal's checkpoint, or the final model and summary.
void Finetuning::finish(bool stopped) {
  const int64_t step = state.step;
  clear_bar();
  result.steps = step;
  if (range_test()) return;
  if (stopped) {  // by a signal: save the state reached
    const bool saved = opts.num_steps_per_checkpoint > 0 && step % opts.num_steps_per_checkpoint == 0 && step > 0;
    if (!saved) run.save(opts.vocab_path, step);
    if (run.lead)
      std::cerr << "finetune: stopped by signal after step " << step << "; checkpoint in " << opts.output_dir
                << "/checkpoints/step_" << step << " (to resume: the same command with --resume-from-checkpoint)\n";
    run.comm.barrier();
    result.stopped = true;
    return;
  }
  check_converging("writing the final model");
  check_outputs_finite();  // (every rank: the logits are gathered)
  run.watchdog->beat("saving the model", step);
  if (!run.lead) {
    run.comm.barrier();  // wait for rank 0's files before exiting
    return;
  }
  write_final();
}

// Rank 0: the final model, eval_results.json and, as the Trainer ends, train metrics, eval metrics
// and where the model went.
void Finetuning::write_final() {
  const int64_t step = state.step;
  model.params_to_host();
  check_weights_finite(model, "finetune: not writing the final model to " + opts.output_dir);
  save_model_dir(model, opts.output_dir, opts.vocab_path, opts.do_lower_case);
  const TrainerState::Totals& t = state.totals;
  result.seconds = run.clock.seconds();
  result.train_seq_per_s = static_cast<double>(t.seqs) / std::max(t.train_seconds, 1e-9);
  nlohmann::ordered_json summary{
      {"steps", step},
      {"train_seconds", t.train_seconds},
      {"train_seq_per_s", result.train_seq_per_s},
      {"mean_padded_length", static_cast<double>(t.padded_tokens) / std::max<int64_t>(t.seqs, 1)},
      {"mean_length", static_cast<double>(t.real_tokens) / std::max<int64_t>(t.seqs, 1)},
      {"last_eval", result.last_eval},
      {"best_eval", result.best_eval}};
  run.log->log(nlohmann::ordered_json::array(), summary);
  write_file_atomic(opts.output_dir + "/eval_results.json", summary.dump(2) + "\n");
  run.comm.barrier();
  if (opts.quiet) return;
  const int64_t steps_run = run.clock.steps_run(step);
  std::vector<std::pair<std::string, std::string>> rows{
      {"epoch", fixed(epochs_done(step), 2)},
      {"train_steps", std::to_string(step)},
      {"train_samples", std::to_string(t.seqs)},
      {"train_runtime", clock_time(result.seconds, true)},
      {"train_samples_per_second", fixed(result.train_seq_per_s, 3)},
      {"train_loss", steps_run ? fixed(loss_sum_run / static_cast<double>(steps_run)) : std::string("-")}};
  if (run.clock.first_step > 0)
    rows.push_back(
        {"resumed_from_step", std::to_string(run.clock.first_step) + " (runtime and train_loss: this run's steps)"});
  std::string out = metrics_block("train metrics", rows);
  if (result.last_eval.is_object()) {
    std::vector<std::pair<std::string, std::string>> ev;
    for (const auto& [k, v] : result.last_eval.items())
      if (k != "per_type") ev.push_back({"eval_" + k, v.dump()});
    out += metrics_block("eval metrics", ev);
    // NER: seqeval's table per entity type, as users read it (the JSON is in eval_metrics.json)
    if (result.last_eval.contains("per_type")) out += "\n" + ner_classification_report(result.last_eval);
  }
  out += "model written to " + opts.output_dir;
  if (result.best_eval.is_object())  // two models: the last step's, and the best evaluation's
    out += " (the last step's); best evaluation's model (step " +
           result.best_eval.value("step", nlohmann::ordered_json(0)).dump() + ") in " + opts.output_dir + "/best";
  std::cerr << out << "\n";
}

FinetuneResult Finetuning::run_all() {
  start();
  resume();
  if (opts.resume && !run.resumed && run.lead)
    std::cerr << "finetune: no checkpoint in " << opts.output_dir << "/checkpoints; starting from step 0\n";
  BERTCC_CHECK(state.step <= total_steps(), opts.output_dir, ": the checkpoint is at step ", state.step,
               ", past this run's ", total_steps(), " steps");
  if (!state.best_metrics.empty()) result.best_eval = nlohmann::ordered_json::parse(state.best_metrics);
  // Totals since step 0 (restored on resume); padded: batch rows x padded length, real: the rows' own lengths.
  before.seconds = state.totals.train_seconds;
  before.seqs = state.totals.seqs;
  bar.on = run.lead && !opts.quiet && !range_test() && interactive_terminal(STDERR_FILENO);
  bar.epochs_total = static_cast<double>(total_steps()) / static_cast<double>(steps_per_epoch);
  bar.drawn = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  since_log.line = std::chrono::steady_clock::now();
  if (opts.group_by_length)
    for (const FtFeature& f : train) lengths.push_back(f.input_ids.size());
  run.train(*this);
  return result;
}
}  // namespace

FinetuneResult run_finetune(Bert& model, const std::vector<FtFeature>& train, const Evaluator& eval,
                            const FinetuneOptions& o) {
  return Finetuning(model, train, eval, o).run_all();
}

}  // namespace bertcc
