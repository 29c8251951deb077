#include "bertcc/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "backend/backend.h"
#include "bertcc/dist.h"
#include "bertcc/electra.h"
#include "bertcc/error.h"
#include "bertcc/fileio.h"
#include "bertcc/model_dir.h"
#include "bertcc/pretrain_data.h"
#include "bertcc/run_lock.h"
#include "bertcc/runtime.h"
#include "bertcc/signals.h"
#include "bertcc/tensorboard.h"
#include "bertcc/tokenizer.h"
#include "train/checkpoint.h"
#include "train/data_parallel.h"
#include "train/dllogger.h"
#include "train/hparams.h"
#include "train/progress.h"
#include "train/run.h"
#include "train/step.h"

namespace bertcc {

namespace {

// The models a pre-training run trains: BERT (MLM + NSP), or ELECTRA's discriminator and generator
// (sharing their embeddings; one optimizer over both, one global gradient norm).
struct PretrainModels {
  bool electra = false;
  std::unique_ptr<Bert> main, gen;  // BERT or the discriminator; the generator
  std::vector<Bert*> all() const {
    return electra ? std::vector<Bert*>{main.get(), gen.get()} : std::vector<Bert*>{main.get()};
  }
};

// ELECTRA's counts over a step or an evaluation, summed over micro-batches and ranks.
constexpr size_t kElectraSums = 9;
void add_electra(double* s, const ElectraLoss& l) {
  const double v[kElectraSums] = {l.gen_loss_sum,
                                  l.disc_loss_sum,
                                  static_cast<double>(l.masked),
                                  static_cast<double>(l.gen_correct),
                                  static_cast<double>(l.tokens),
                                  static_cast<double>(l.disc_correct),
                                  static_cast<double>(l.replaced),
                                  static_cast<double>(l.replaced_hit),
                                  static_cast<double>(l.predicted_replaced)};
  for (size_t i = 0; i < kElectraSums; ++i) s[i] += v[i];
}

// The logged metrics: losses are means over the masked (generator) and real (discriminator)
// tokens; precision and recall are those of "replaced" calls; replaced_fraction is the share of
// masked tokens the generator changed.
void electra_metrics(const double* s, double disc_weight, const std::string& prefix, nlohmann::ordered_json& d) {
  auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
  const double gen = ratio(s[0], s[2]), disc = ratio(s[1], s[4]);
  d[prefix + "loss"] = gen + disc_weight * disc;
  d[prefix + "generator_loss"] = gen;
  d[prefix + "generator_accuracy"] = ratio(s[3], s[2]);
  d[prefix + "discriminator_loss"] = disc;
  d[prefix + "discriminator_accuracy"] = ratio(s[5], s[4]);
  d[prefix + "discriminator_precision"] = ratio(s[7], s[8]);
  d[prefix + "discriminator_recall"] = ratio(s[7], s[6]);
  d[prefix + "replaced_fraction"] = ratio(s[6], s[2]);
}

// The newest OUTPUT/checkpoints/step_N with a config.json (ELECTRA: discriminator/config.json), or "".
std::string newest_checkpoint_dir(const std::string& output_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path root = fs::path(output_dir) / "checkpoints";
  int64_t best = -1;
  std::string dir;
  if (!fs::is_directory(root, ec)) return "";
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("step_", 0) != 0 || n.size() == 5 || n.size() > 23 ||
        n.find_first_not_of("0123456789", 5) != std::string::npos)
      continue;
    const int64_t step = std::stoll(n.substr(5));
    if (step > best &&
        (fs::exists(e.path() / "config.json") || fs::exists(e.path() / "discriminator" / "config.json"))) {
      best = step;
      dir = e.path().string();
    }
  }
  return dir;
}

// Start-up check on a sample of the shards (up to 4 of them, their first 512 rows): every token id
// of input_ids and masked_lm_ids is below the vocabulary size. Shards that cannot be read are left
// to the loader, whose errors name the field at fault.
void check_shard_token_ids(const std::vector<std::string>& shards, int64_t vocab_size, const std::string& vocab) {
  const size_t n = shards.size(), picks = std::min<size_t>(n, 4);
  for (size_t k = 0; k < picks; ++k) {
    const std::string& path = shards[picks == 1 ? 0 : k * (n - 1) / (picks - 1)];
    PretrainShard sh;
    try {
      std::vector<int32_t> lengths;
      const bool masked = pretrain_shard_has_masks(path);
      std::vector<int64_t> rows(static_cast<size_t>(std::min<int64_t>(probe_shard_rows(path), 512)));
      for (size_t r = 0; r < rows.size(); ++r) rows[r] = static_cast<int64_t>(r);
      if (rows.empty()) continue;
      sh = read_pretrain_shard_layout(path, masked ? nullptr : &lengths, &rows);
    } catch (const std::exception&) {
      continue;
    }
    for (const auto* field : {&sh.input_ids, &sh.masked_lm_ids}) {
      if (field->empty()) continue;
      const auto top = std::max_element(field->begin(), field->end());
      const int64_t row = (top - field->begin()) / std::max<int64_t>(1, field == &sh.input_ids ? sh.S : sh.P);
      BERTCC_CHECK(*top < vocab_size, path, ": ", field == &sh.input_ids ? "input_ids" : "masked_lm_ids",
                   " holds token id ", *top, " (row ", row, ") but the vocabulary ", vocab, " has ", vocab_size,
                   " entries: the shards were made with another vocabulary (pass the --vocab that "
                   "create-pretraining-data was given)");
    }
  }
}
}  // namespace

namespace {

// How often an evaluation saw each held-out sequence: --eval-batches may ask for more batches
// than the shards hold, and the loader then starts over. Said with the metrics, never hidden.
// The sequences counted are those of the first pass: a shard's incomplete last batch is skipped.
struct EvalPass {
  int64_t first = 0, seen = 0;  // sequences in the first pass (all of them once it wrapped), in all
  bool wrapped = false;
  // `epoch`: the cursor's epoch after reading the batch, which is the batch's (the loader starts
  // over before it reads)
  void add(int64_t epoch, int64_t rows) {
    seen += rows;
    if (epoch == 0)
      first += rows;
    else
      wrapped = true;
  }
  std::string note(int64_t micro) const {
    if (!wrapped || first == 0) return "";
    char b[200];
    std::snprintf(b, sizeof b,
                  "; the held-out set's %lld sequences were each seen %.2f times (--eval-batches %lld sees each once)",
                  static_cast<long long>(first), static_cast<double>(seen) / static_cast<double>(first),
                  static_cast<long long>((first + micro - 1) / micro));
    return b;
  }
};

void check_pretrain_options(const PretrainOptions& o) {
  BERTCC_CHECK(o.gradient_accumulation_steps >= 1 && o.train_batch_size % o.gradient_accumulation_steps == 0,
               "--train-batch-size (", o.train_batch_size, ") must be a multiple of --gradient-accumulation-steps (",
               o.gradient_accumulation_steps, ")");
  BERTCC_CHECK(o.max_steps >= 1, "--max-steps must be positive");
  check_int("--max-steps", o.max_steps, 1, kMaxTrainSteps);
  check_int("--train-batch-size", o.train_batch_size, 1, int64_t{1} << 40);
  check_positive("--learning-rate", o.learning_rate);
  check_fraction("--warmup-proportion", o.warmup_proportion);
  check_nonnegative("--disc-weight", o.disc_weight);
  check_nonnegative("--generator-hidden-size", o.generator_hidden_size);
  check_nonnegative("--loss-scale", o.loss_scale);
  check_positive("--init-loss-scale", o.init_loss_scale);
  check_int("--loss-scale-window", o.loss_scale_window, 1, kMaxTrainSteps);
  check_int("--max-predictions-per-seq", o.max_predictions_per_seq, 1, 1 << 20);
  check_int("--num-steps-per-checkpoint", o.num_steps_per_checkpoint, 0, kMaxTrainSteps);
  check_int("--keep-checkpoints", o.keep_checkpoints, 1, 1 << 20);
  check_int("--log-freq", o.log_freq, 1, kMaxTrainSteps);
  check_int("--phase1-end-step", o.phase1_end_step, 0, kMaxTrainSteps);
  check_int("--eval-freq", o.eval_freq, 0, kMaxTrainSteps);
  check_int("--eval-batches", o.eval_batches, 1, 1 << 30);
  check_int("--length-binning", o.length_binning, 0, 1 << 30);
  check_positive("--bucket-cap-mb", o.dp.bucket_cap_mb);
  check_nonnegative("--watchdog-timeout", o.dp.watchdog_timeout);
  BERTCC_CHECK(!o.output_dir.empty(), "--output-dir is required");
  for (const auto& [in, flag] : {std::pair{o.input_dir, "--input-dir"},
                                 {o.eval_dir, "--eval-dir"},
                                 {o.init_checkpoint, "--model"},
                                 {o.vocab, "--vocab"}})
    check_output_not_input(o.output_dir, "--output-dir", in, flag);
  BERTCC_CHECK(o.max_nonfinite_steps >= 1, "--max-nonfinite-steps must be >= 1");
  BERTCC_CHECK(!o.range_test || (!o.resume_from_checkpoint && !o.phase2),
               "lr-find pretrain starts from --model or --config: it resumes no checkpoint");
}

// Where a pre-training run's options name what every run has.
RunOptions run_options(const PretrainOptions& o) { return run_options_of(o, "pretrain", o.resume_from_checkpoint); }

// A pre-training run (BERT or ELECTRA) as a task of a TrainingRun: the model files, the models,
// the shards and their masking, the phases, the micro-batches and their losses, the evaluation on
// held-out shards, the logs and the final models. run_pretraining() is run().
class Pretraining : public TrainingTask {
 public:
  explicit Pretraining(const PretrainOptions& o) : opts(o), run(run_options(o)), state(run.state) {}
  int run_all();

 private:
  void start();
  void resolve_model_files();
  void load_models();
  void check_vocab_and_shards();
  void resume();
  void adopt_checkpoint_batch();
  void shard_and_report();
  void start_phase2();
  void place_on_backend();
  void open_logs();
  void make_step() override;
  StepEnd train_step() override;
  void finish(bool stopped) override;
  void log_step(double step_loss, double mlm_loss, double nsp_loss, const std::vector<double>& loss_sums, float lr);
  void evaluate();
  void evaluate_bert();
  void evaluate_electra();
  void report_eval(const nlohmann::ordered_json& d);
  void write_models();
  void closing_block();
  int64_t label() const { return state.step + state.step_offset; }
  const RangeTest* range_test() const { return opts.range_test; }  // set: a range test, which writes nothing

  const PretrainOptions& opts;
  RunLock run_lock;       // (first: released after every file of the run is closed)
  PretrainModels models;  // (before the run, whose step holds them)
  TrainingRun run;
  TrainerState& state;  // run.state
  dist::WireDtype wire = dist::WireDtype::F32;
  Precision prec = Precision::F32;
  Optimizer optimizer = Optimizer::Lamb;
  // the model's files
  std::string resume_dir, config_path, generator_config_path, vocab_path;
  bool resume_electra = false;
  std::unique_ptr<Vocab> vocab;
  Bert* model = nullptr;  // BERT or the discriminator
  MaskingOptions masking;
  // A step is world_size x accum_steps micro-batches of the global order; this rank runs
  // micro-batches rank*accum_steps .. rank*accum_steps + accum_steps - 1.
  int64_t accum_steps = 1, micro_batch_size = 1, micro_batches_per_step = 1, global_batch = 1;
  std::unique_ptr<PretrainLoader> loader, eval_loader;
  bool fp16 = false, dynamic_scale = false, phase2_start = false;
  nlohmann::ordered_json last_eval;  // the closing block's eval metrics
  bool tty = false;                  // rank 0 draws a bar on a terminal
  bool memory_checked = false;
  // Since the last log line: for the logged rate and all-reduce wait.
  struct SinceLog {
    std::chrono::steady_clock::time_point start;
    int64_t seqs = 0;
    double allreduce_seconds = 0;
    int64_t allreduce_steps = 0;
  } since_log;
  // This process's steps, for the closing block (its first step and time are run.clock's).
  struct Totals {
    int64_t seqs = 0, skipped_steps = 0;
    double last_loss = NAN;
  } totals;
};

// The backend, the models, the data and the state to start from (fresh or resumed).
void Pretraining::start() {
  set_threads(threads_per_rank(opts.threads, run.comm));
  wire = dist::parse_wire_dtype(opts.dp.allreduce_dtype);
  optimizer = parse_optimizer(opts.optimizer);
  check_pretrain_options(opts);
  Backend& be = backend_for_rank(opts.device, run.comm);
  const bool dev = !be.on_host();
  const PrecisionChoice pc = choose_precision(opts.precision, dev ? CpuReport{} : cpu_report(), dev);
  prec = pc.prec;
  if (run.lead && !pc.why.empty()) std::cerr << pc.why << "\n";
  // (NCCL for the gradients of several GPUs; refusals before anything is written)
  run.use_backend(be);
  if (run.lead) {
    std::filesystem::create_directories(opts.output_dir);
    run_lock = RunLock(opts.output_dir, "--output-dir", "pretrain");
    std::cerr << (dev ? be.describe() : describe_backend(prec == Precision::BF16)) << "\n";
  }
  resolve_model_files();
  load_models();
  check_vocab_and_shards();
  accum_steps = opts.gradient_accumulation_steps;
  micro_batch_size = opts.train_batch_size / accum_steps;
  micro_batches_per_step = static_cast<int64_t>(run.world_size) * accum_steps;
  global_batch = micro_batches_per_step * micro_batch_size;
  loader = std::make_unique<PretrainLoader>(list_shards(opts.input_dir), micro_batch_size, opts.seed, masking, 0, 1,
                                            opts.length_binning);
  run.total_steps = opts.max_steps;
  resume();
  place_on_backend();
}

// Model: an HF checkpoint, or a fresh initialisation from a config and vocabulary. --config is
// required unless --init-checkpoint gives the model or --resume-from-checkpoint finds a checkpoint
// in --output-dir (its config.json); --vocab likewise (the shards do not record their vocabulary).
void Pretraining::resolve_model_files() {
  BERTCC_CHECK(opts.model_type.empty() || opts.model_type == "bert" || opts.model_type == "electra",
               "--model-type must be bert or electra");
  resume_dir = opts.resume_from_checkpoint ? newest_checkpoint_dir(opts.output_dir) : "";
  resume_electra = !resume_dir.empty() && file_exists(resume_dir + "/discriminator/config.json");
  config_path = opts.config;
  generator_config_path = opts.generator_config;
  if (opts.init_checkpoint.empty() && config_path.empty()) {
    BERTCC_CHECK(!resume_dir.empty(), "pretrain: --config is required: a named config (", config_preset_names(),
                 ") or a config.json",
                 opts.resume_from_checkpoint
                     ? std::string("; ") + opts.output_dir + "/checkpoints holds no checkpoint to resume"
                     : std::string(" (or --model DIR to continue from a model)"));
    config_path = resume_electra ? resume_dir + "/discriminator/config.json" : resume_dir + "/config.json";
    if (resume_electra && generator_config_path.empty()) generator_config_path = resume_dir + "/generator/config.json";
    if (run.lead) std::cerr << "pretrain: model configuration from " << config_path << "\n";
  }
  // The vocabulary: --vocab, else the one of --init-checkpoint or of the checkpoint resumed. One taken
  // from a checkpoint is copied to OUTPUT/vocab.txt (older checkpoints are deleted as the run goes on).
  vocab_path = opts.vocab;
  if (vocab_path.empty()) {
    std::vector<std::pair<std::string, bool>> dirs;  // (directory, a checkpoint of this run)
    if (!opts.init_checkpoint.empty())
      dirs = {{opts.init_checkpoint, false}, {opts.init_checkpoint + "/discriminator", false}};
    if (!resume_dir.empty()) dirs.insert(dirs.end(), {{resume_dir, true}, {resume_dir + "/discriminator", true}});
    for (const auto& [d, ours] : dirs) {
      if (!file_exists(join_path(d, "vocab.txt"))) continue;
      vocab_path = join_path(d, "vocab.txt");
      if (ours) {
        const std::string copy = join_path(opts.output_dir, "vocab.txt");
        if (run.lead) write_file_atomic(copy, read_file(vocab_path));
        run.comm.barrier();
        vocab_path = copy;
      }
      break;
    }
    BERTCC_CHECK(!vocab_path.empty(), "pretrain: --vocab is required: the vocab.txt the shards were made with ",
                 "(create-pretraining-data's --vocab; the shards do not record it)",
                 opts.init_checkpoint.empty() ? std::string("") : "; " + opts.init_checkpoint + " has no vocab.txt");
    if (run.lead) std::cerr << "pretrain: vocabulary " << vocab_path << "\n";
  }
  vocab = std::make_unique<Vocab>(Vocab::load(vocab_path));
}

void Pretraining::load_models() {
  if (!opts.init_checkpoint.empty()) {
    const std::string disc_dir = opts.init_checkpoint + "/discriminator";
    models.electra =
        opts.model_type == "electra" || (opts.model_type.empty() && file_exists(disc_dir + "/config.json"));
    if (models.electra) {
      BERTCC_CHECK(
          file_exists(disc_dir) && file_exists(opts.init_checkpoint + "/generator"), opts.init_checkpoint,
          ": an ELECTRA --model (--init-checkpoint) is a folder with discriminator/ and generator/ (as a pre-training "
          "run writes)");
      models.main = load_model_dir(disc_dir, Heads::Discriminator);
      models.gen = load_model_dir(opts.init_checkpoint + "/generator", Heads::Generator);
    } else {
      models.main = load_model_dir(opts.init_checkpoint, Heads::PreTraining);
    }
  } else {
    BertConfig cfg = config_from_name_or_path(config_path);
    cfg.vocab_size = vocab->size();
    // ELECTRA when the config says so, or when the config itself came from an ELECTRA checkpoint (a
    // BERT --config given on ELECTRA checkpoints trains BERT, and the resume refuses them)
    models.electra = opts.model_type.empty() ? cfg.electra() || (resume_electra && opts.config.empty())
                                             : opts.model_type == "electra";
    if (models.electra) {
      cfg.model_type = "electra";
      BertConfig gcfg = generator_config_path.empty() ? electra_generator_config(cfg, opts.generator_hidden_size)
                                                      : config_from_name_or_path(generator_config_path);
      gcfg.model_type = "electra";
      gcfg.vocab_size = vocab->size();
      models.main = std::make_unique<Bert>(cfg, Heads::Discriminator);
      models.gen = std::make_unique<Bert>(gcfg, Heads::Generator);
      models.main->init_weights(opts.seed);
      models.gen->init_weights(opts.seed + 1);
    } else {
      models.main = std::make_unique<Bert>(cfg, Heads::PreTraining);
      models.main->init_weights(opts.seed);
    }
  }
  if (models.electra) electra_share_embeddings(*models.main, *models.gen);  // also checks that the shared shapes agree
  model = models.main.get();
  // What the run checkpoints and steps: one optimizer over both ELECTRA models, each with its own
  // moments in its own folder of a checkpoint.
  for (Bert* m : models.all()) {
    TrainedModel& t = run.models.emplace_back();
    t.dir = !models.electra ? "" : m == model ? "discriminator" : "generator";
    t.model = m;
  }
}

// The vocabulary against the model and the shards' token ids; the masking it gives.
void Pretraining::check_vocab_and_shards() {
  const Vocab& v = *vocab;
  BERTCC_CHECK(v.size() == model->config().vocab_size, vocab_path, ": ", v.size(), " entries but the model has ",
               model->config().vocab_size);
  const int32_t cls = v.id("[CLS]"), sep = v.id("[SEP]"), mask = v.id("[MASK]");
  check_shard_token_ids(list_shards(opts.input_dir), model->config().vocab_size, "(" + vocab_path + ")");
  if (!opts.eval_dir.empty())
    check_shard_token_ids(list_shards(opts.eval_dir), model->config().vocab_size, "(" + vocab_path + ")");
  masking.max_predictions_per_seq = opts.max_predictions_per_seq;
  masking.vocab_size = model->config().vocab_size;
  masking.cls_id = cls;
  masking.sep_id = sep;
  masking.mask_id = mask;
  if (models.electra) {  // ELECTRA's masking: 85 % [MASK], 15 % unchanged, no random tokens
    masking.mask_below = 0.85f;
    masking.random_from = 1.0f;
  }
}

// The newest checkpoint (--resume-from-checkpoint), its global batch, ZeRO-1 and phase 2.
void Pretraining::resume() {
  state.rng = Rng{opts.seed, 0};
  fp16 = prec == Precision::F16;
  dynamic_scale = fp16 && opts.loss_scale <= 0;
  state.loss_scale = fp16 ? (dynamic_scale ? opts.init_loss_scale : opts.loss_scale) : 1.0;
  run.resume();
  if (run.resumed && models.electra) electra_share_embeddings(*models.main, *models.gen);
  if (run.world_size > 1)
    check_same_on_all_ranks(
        run.comm, static_cast<double>(model->table().total() + (models.gen ? models.gen->table().total() : 0)),
        "the number of parameters");
  phase2_start = opts.phase2 && (!run.resumed || state.phase == 1);
  adopt_checkpoint_batch();
  state.global_batch = global_batch;
  shard_and_report();
  if (opts.resume_from_checkpoint && !run.resumed && run.lead)
    std::cerr << "pretrain: no checkpoint in " << opts.output_dir << "/checkpoints; starting from step 0\n";
  if (phase2_start) start_phase2();
  BERTCC_CHECK(!run.resumed || opts.phase2 || state.phase == 1, opts.output_dir,
               ": the newest checkpoint is from phase 2; add --phase2 to resume it");
}

// A checkpoint resumed at another world size keeps its global batch: the accumulation adjusts
// (same micro-batch), so the run continues with the same steps and data order.
void Pretraining::adopt_checkpoint_batch() {
  if (!run.resumed || phase2_start || state.global_batch <= 0 || state.global_batch == global_batch) return;
  const int64_t W = run.world_size;
  if (state.global_batch % (W * micro_batch_size) == 0) {
    accum_steps = state.global_batch / (W * micro_batch_size);
    micro_batches_per_step = W * accum_steps;
    global_batch = state.global_batch;
    if (run.lead)
      std::cerr << "pretrain: the checkpoint's global batch is " << global_batch << " sequences: "
                << "gradient accumulation set to " << accum_steps << " (" << W << " rank(s) x " << accum_steps
                << " x micro-batch " << micro_batch_size << ")\n";
  } else if (run.lead) {
    std::cerr << "pretrain: warning: the checkpoint was written with a global batch of " << state.global_batch
              << " sequences, which " << W << " rank(s) with micro-batches of " << micro_batch_size
              << " cannot form; continuing with " << global_batch << " per step (same data order)\n";
  }
}

// ZeRO-1: one set of shards per model (ELECTRA's generator and discriminator each split their own
// moments).
void Pretraining::shard_and_report() {
  run.shard_moments();
  const int W = run.world_size;
  if (!run.lead || W <= 1) return;
  const bool sharded = run.models[0].shards != nullptr;
  double full_mb = 0, own_mb = 0;
  for (const TrainedModel& m : run.models) {
    const double full = 2.0 * 4 * static_cast<double>(m.model->table().total()) / 1048576.0;
    full_mb += full;
    own_mb += !sharded ? full : 2.0 * 4 * static_cast<double>(m.shards->end(0) - m.shards->begin(0)) / 1048576.0;
  }
  std::cerr << "pretrain: optimizer moments " << own_mb << " MB on rank 0"
            << (sharded ? " (ZeRO-1: sharded over " + std::to_string(W) + " ranks; unsharded " +
                              std::to_string(static_cast<int64_t>(full_mb + 0.5)) +
                              " MB; gradients reduce-scattered, parameters all-gathered)"
                        : std::string(" (replicated on every rank; --zero1 shards them)"))
            << "\n";
  std::cerr << "pretrain: " << W << " ranks (" << run.comm.name() << "), " << threads()
            << " threads each; global batch " << global_batch << " = " << W << " x " << accum_steps << " x "
            << micro_batch_size << ", all-reduce in " << dist::wire_dtype_name(wire) << "\n";
}

// Start of phase 2 (NVIDIA): phase-1 weights and moments, optimizer step, schedule and data
// position restarted; steps are named from the phase-1 end step on.
void Pretraining::start_phase2() {
  if (run.resumed)
    BERTCC_CHECK(opts.phase1_end_step <= 0 || state.step == opts.phase1_end_step, "--phase1-end-step ",
                 opts.phase1_end_step, " but the newest phase-1 checkpoint is at step ", state.step);
  state.step_offset = run.resumed ? state.step : opts.phase1_end_step;
  state.step = 0;
  state.phase = 2;
  state.cursor = DataCursor{};
  state.rng = Rng{opts.seed, 0};
  for (TrainedModel& m : run.models) m.host_moments.step = 0;
  if (run.lead) std::cerr << "pretrain: phase 2 starts after phase-1 step " << state.step_offset << "\n";
}

// The weights (on a device) and the moments (fresh or resumed) go where the backend computes; the
// host copies are refreshed from there before each checkpoint.
void Pretraining::place_on_backend() {
  if (run.on_device)
    for (const TrainedModel& m : run.models) m.model->use_backend(*run.backend);
  run.place_moments();
}

// Logs exist on rank 0 only.
void Pretraining::open_logs() {
  nlohmann::ordered_json params;
  for (const auto& [k, v] : std::initializer_list<std::pair<const char*, nlohmann::ordered_json>>{
           {"train_batch_size", accum_steps * micro_batch_size},
           {"gradient_accumulation_steps", accum_steps},
           {"learning_rate", opts.learning_rate},
           {"max_steps", opts.max_steps},
           {"warmup_proportion", opts.warmup_proportion},
           {"model_type", models.electra ? "electra" : "bert"},
           {"optimizer", opts.optimizer},
           {"precision", precision_name(prec)},
           {"seed", opts.seed},
           {"world_size", run.world_size},
           {"global_batch_size", global_batch},
           {"allreduce_dtype", dist::wire_dtype_name(wire)},
           {"start_step", state.step + state.step_offset},
           {"phase", state.phase},
           {"phase1_end_step", state.step_offset}})
    params[k] = v;
  if (models.electra) {
    params["generator_hidden_size"] = models.gen->config().hidden_size;
    params["disc_weight"] = opts.disc_weight;
  }
  run.open_logs(params, /*with_tensorboard=*/true);
  if (run.lead && models.electra)
    std::cerr << "pretrain: ELECTRA: discriminator " << model->table().total() << " parameters (hidden "
              << model->config().hidden_size << "), generator " << models.gen->table().total() << " (hidden "
              << models.gen->config().hidden_size << "), shared embeddings; discriminator weight " << opts.disc_weight
              << "\n";
  // Held-out evaluation: the first eval_batches micro-batches of the eval shards, dropout off;
  // batch b is evaluated by rank b % world_size and the sums are reduced, so every world size
  // reports the same metrics.
  if (!opts.eval_dir.empty() && !range_test())
    eval_loader = std::make_unique<PretrainLoader>(list_shards(opts.eval_dir), micro_batch_size, opts.seed, masking);
  run.eval_every = opts.eval_freq > 0 ? opts.eval_freq : opts.num_steps_per_checkpoint;
}

void Pretraining::evaluate() { models.electra ? evaluate_electra() : evaluate_bert(); }

void Pretraining::report_eval(const nlohmann::ordered_json& d) {
  const double loss = d.contains("eval.loss") ? d["eval.loss"].get<double>() : 0.0;
  BERTCC_CHECK(std::isfinite(loss), "pretrain: the evaluation at step ", label(), " has a non-finite loss (", loss,
               "): the run diverged; stopping without a final model: the newest checkpoint in ", opts.output_dir,
               "/checkpoints is the last good state");
  last_eval = d;
  run.log->log({state.cursor.epoch, label()}, d);
}

void Pretraining::evaluate_electra() {
  DataCursor c;
  // One row of sums per batch (zero on the ranks that did not evaluate it), summed in batch order
  // after the all-reduce: the same bits at every world size.
  std::vector<double> rows(static_cast<size_t>(opts.eval_batches) * kElectraSums, 0.0);
  ElectraStepOptions so;  // no dropout, no backward
  so.precision = prec;
  so.disc_weight = static_cast<float>(opts.disc_weight);
  EvalPass pass;
  for (int64_t b = 0; b < opts.eval_batches; ++b) {
    const BertBatch batch = eval_loader->next(c);
    pass.add(c.epoch, batch.B);
    if (b % run.world_size != run.rank) continue;
    batch.validate(model->config(), batch.source);
    Rng r = micro_batch_rng(opts.seed, 0, -1, b);  // the sampling noise of eval batch b, whatever the world size
    add_electra(rows.data() + b * kElectraSums, electra_step(*models.gen, *model, batch, r, so));
  }
  run.comm.allreduce_sum(rows.data(), rows.size());
  double sums[kElectraSums] = {};
  for (int64_t b = 0; b < opts.eval_batches; ++b)
    for (size_t i = 0; i < kElectraSums; ++i) sums[i] += rows[b * kElectraSums + i];
  if (!run.lead) return;
  nlohmann::ordered_json d;
  electra_metrics(sums, opts.disc_weight, "eval.", d);
  report_eval(d);
  for (auto it = d.begin(); it != d.end(); ++it)
    run.tensorboard->scalar("eval/" + it.key().substr(5), it.value().get<float>(), label());
  std::printf(
      "%seval at step %lld: loss %.4f, generator loss %.4f accuracy %.4f, discriminator loss %.4f accuracy "
      "%.4f precision %.4f recall %.4f (%lld masked, %lld replaced%s)\n",
      interactive_terminal(1) ? "\n" : "", static_cast<long long>(label()), d["eval.loss"].get<double>(),
      d["eval.generator_loss"].get<double>(), d["eval.generator_accuracy"].get<double>(),
      d["eval.discriminator_loss"].get<double>(), d["eval.discriminator_accuracy"].get<double>(),
      d["eval.discriminator_precision"].get<double>(), d["eval.discriminator_recall"].get<double>(),
      static_cast<long long>(sums[2]), static_cast<long long>(sums[6]), pass.note(micro_batch_size).c_str());
  std::fflush(stdout);
}

void Pretraining::evaluate_bert() {
  DataCursor c;
  // Per-batch rows {loss, masked, MLM correct, NSP correct, sequences}, zero where another rank
  // evaluated the batch, summed in batch order after the all-reduce (same bits at every world size).
  std::vector<double> rows(static_cast<size_t>(opts.eval_batches) * 5, 0.0);
  Rng eval_rng{0, 0};
  EvalPass pass;
  for (int64_t b = 0; b < opts.eval_batches; ++b) {
    const BertBatch batch = eval_loader->next(c);
    pass.add(c.epoch, batch.B);
    if (b % run.world_size != run.rank) continue;
    batch.validate(model->config(), batch.source);
    const PretrainLoss l = model->pretrain_step(batch, eval_rng, StepArgs{.precision = prec});
    double* row = rows.data() + b * 5;
    row[0] = l.loss;
    row[1] = static_cast<double>(l.mlm_count);
    row[2] = static_cast<double>(l.mlm_correct);
    row[3] = static_cast<double>(l.nsp_correct);
    row[4] = static_cast<double>(batch.B);
  }
  if (run.world_size > 1) run.comm.allreduce_sum(rows.data(), rows.size());
  double loss = 0, v[4] = {0, 0, 0, 0};
  for (int64_t b = 0; b < opts.eval_batches; ++b) {
    loss += rows[b * 5];
    for (int i = 0; i < 4; ++i) v[i] += rows[b * 5 + 1 + i];
  }
  PretrainLoss sum;
  sum.mlm_count = static_cast<int64_t>(v[0]);
  sum.mlm_correct = static_cast<int64_t>(v[1]);
  sum.nsp_correct = static_cast<int64_t>(v[2]);
  const int64_t nsp_n = static_cast<int64_t>(v[3]);
  if (!run.lead) return;
  nlohmann::ordered_json d;
  d["eval.loss"] = loss / static_cast<double>(opts.eval_batches);
  d["eval.mlm_accuracy"] =
      static_cast<double>(sum.mlm_correct) / static_cast<double>(std::max<int64_t>(1, sum.mlm_count));
  d["eval.nsp_accuracy"] = static_cast<double>(sum.nsp_correct) / static_cast<double>(std::max<int64_t>(1, nsp_n));
  report_eval(d);
  for (const char* k : {"eval.loss", "eval.mlm_accuracy", "eval.nsp_accuracy"})
    run.tensorboard->scalar(std::string("eval/") + (k + 5), d[k].get<float>(), label());
  std::printf("%seval at step %lld: loss %.4f, MLM accuracy %.4f, NSP accuracy %.4f (%lld masked tokens%s)\n",
              interactive_terminal(1) ? "\n" : "", static_cast<long long>(label()), d["eval.loss"].get<double>(),
              d["eval.mlm_accuracy"].get<double>(), d["eval.nsp_accuracy"].get<double>(),
              static_cast<long long>(sum.mlm_count), pass.note(micro_batch_size).c_str());
  std::fflush(stdout);
}

// The training step: one model (BERT) or two (ELECTRA's discriminator, then its generator).
void Pretraining::make_step() {
  tty = run.lead && interactive_terminal(1);
  since_log.start = std::chrono::steady_clock::now();
  TrainStepOptions so;
  so.optimizer = optimizer;
  so.who = "pretrain";
  so.max_nonfinite_steps = opts.max_nonfinite_steps;
  so.diverged_note = "(diverged, or non-finite weights); stopping without saving: the newest checkpoint in " +
                     opts.output_dir + "/checkpoints is the last good state (--max-nonfinite-steps)";
  so.on_skip = [this](double loss, double gnorm) {
    if (fp16)
      std::fprintf(stderr, "%spretrain: step %lld: gradient overflow (loss scale %g), step skipped\n", tty ? "\n" : "",
                   static_cast<long long>(label() + 1), state.loss_scale);
    else
      std::fprintf(stderr, "%spretrain: step %lld: non-finite loss (%g) or gradient norm (%g), step skipped\n",
                   tty ? "\n" : "", static_cast<long long>(label() + 1), loss, gnorm);
  };
  // ELECTRA: the generator's copies of the shared embeddings follow the discriminator's.
  if (models.electra) so.after_update = [this]() { electra_share_embeddings(*models.main, *models.gen); };
  // ELECTRA's discriminator receives the generator's share of the embedding gradients after both
  // backward passes, so its buckets are not reduced during backward.
  run.make_step(std::move(so), LossScale{&state.loss_scale, &state.clean_steps, dynamic_scale, opts.loss_scale_window},
                /*overlap=*/!models.electra);
  const dist::DeviceCommunicator* dcomm = run.device_comm.get();
  if (run.lead && run.on_device && (run.world_size > 1 || dcomm))
    std::cerr << "pretrain: gradients reduced "
              << (dcomm ? dcomm->route() : std::string("through the host (") + run.comm.name() + ")")
              << (dcomm && opts.dp.allreduce_dtype != "fp32" ? ", " + opts.dp.allreduce_dtype + " on the wire" : "")
              << (run.step->overlapping() ? ", in buckets of " + (std::ostringstream() << opts.dp.bucket_cap_mb).str() +
                                                " MB started during backward"
                                          : "")
              << "\n";
}

// One optimizer step over this rank's micro-batches; Stopped when a signal stopped the run.
TrainingTask::StepEnd Pretraining::train_step() {
  const int64_t W = run.world_size, A = accum_steps, first_micro = run.rank * accum_steps;
  run.watchdog->beat("loading the step's batches", label());
  DataCursor next_cursor = state.cursor;
  const std::vector<BertBatch> batches = loader->next_step(next_cursor, micro_batches_per_step, first_micro, A);
  // One small all-reduce per step: the global masked-token count (the MLM loss is the mean over
  // every masked token of the global batch) and the stop flag (a signal to any rank stops all
  // ranks at the same step).
  // ELECTRA's discriminator loss is the mean over the real tokens: their count too.
  double head[3] = {0, 0, signals::stop_requested() ? 1.0 : 0.0};
  for (const BertBatch& b : batches) {
    b.validate(model->config(), b.source);  // ids, positions, labels in range before they index anything
    for (int32_t l : b.mlm_labels) head[0] += l != -1;
    if (models.electra)
      for (int32_t m : b.input_mask) head[1] += m != 0;
  }
  run.watchdog->beat("the step's first all-reduce", label());
  run.comm.allreduce_sum(head, 3);
  if (head[2] > 0) return StepEnd::Stopped;
  state.cursor = next_cursor;
  if (!memory_checked && !batches.empty()) {  // the sequence length is the shards'
    if (!run.on_device) {                     // (a device's allocations say themselves when they do not fit)
      const std::vector<Bert*> all = models.all();
      check_training_memory(std::vector<const Bert*>(all.begin(), all.end()), batches[0].B, batches[0].T, prec,
                            "pretrain");
    }
    memory_checked = true;
  }
  const float scale = static_cast<float>(state.loss_scale);
  const float mlm_denom = static_cast<float>(std::max(1.0, head[0]));
  const float nsp_denom = static_cast<float>(global_batch);
  // BERT: MLM and NSP cross-entropy sums over this rank's micro-batches; ELECTRA: add_electra's.
  std::vector<double> loss_sums(models.electra ? kElectraSums : 2, 0.0);
  ElectraStepOptions so;
  so.training = so.backward = true;
  so.precision = prec;
  so.disc_weight = static_cast<float>(opts.disc_weight);
  so.loss_scale = scale;
  so.mlm_denom = mlm_denom;
  so.disc_denom = static_cast<float>(std::max(1.0, head[1]));
  auto micro_batch = [&](int64_t a) {
    const BertBatch& batch = batches[static_cast<size_t>(a)];
    Rng rng = micro_batch_rng(opts.seed, state.phase, state.step, first_micro + a);
    if (models.electra) {
      add_electra(loss_sums.data(), electra_step(*models.gen, *model, batch, rng, so));
    } else {
      const PretrainLoss l = model->pretrain_step(batch, rng,
                                                  StepArgs{.training = true,
                                                           .backward = true,
                                                           .precision = prec,
                                                           .loss_scale = scale,
                                                           .mlm_denom = mlm_denom,
                                                           .nsp_denom = nsp_denom});
      loss_sums[0] += l.mlm_loss_sum;
      loss_sums[1] += l.nsp_loss_sum;
    }
    if (run.lead) since_log.seqs += batch.B * W;  // for the logged rate
    if (run.lead) totals.seqs += batch.B * W;
  };
  // BERT: MLM and NSP; ELECTRA: generator MLM and discriminator losses (global means).
  double mlm_loss = 0, nsp_loss = 0;
  auto reduce_loss = [&]() {
    run.comm.allreduce_sum(loss_sums.data(), loss_sums.size());
    mlm_loss = head[0] > 0 ? loss_sums[0] / head[0] : 0.0;
    nsp_loss =
        models.electra ? loss_sums[1] / std::max(1.0, head[1]) : loss_sums[1] / static_cast<double>(global_batch);
    return models.electra ? mlm_loss + opts.disc_weight * nsp_loss : mlm_loss + nsp_loss;
  };
  const float lr = range_test() ? range_test()->lr(state.step)
                                : pretrain_lr(optimizer, static_cast<float>(opts.learning_rate), state.step,
                                              opts.max_steps, opts.warmup_proportion);
  const StepResult r = run.step->run(A, micro_batch, reduce_loss, lr, run.watchdog.get(), label());
  since_log.allreduce_seconds += run.step->take_wait_seconds();
  ++since_log.allreduce_steps;
  if (!r.applied) ++totals.skipped_steps;
  ++state.step;
  totals.last_loss = r.loss;
  if (range_test())  // nothing logged, saved or evaluated
    return range_test()->after_step(state.step, lr, r.loss) ? StepEnd::Next : StepEnd::Ended;
  if (run.lead && run.log_due()) log_step(r.loss, mlm_loss, nsp_loss, loss_sums, lr);
  if (run.checkpoint_due()) run.save(vocab_path, label());
  run.watchdog->beat("evaluation", label());
  if (eval_loader && run.evaluation_due() && state.step < opts.max_steps) evaluate();
  return StepEnd::Next;
}

// Rank 0's log line, DLLogger record and TensorBoard scalars of a step.
void Pretraining::log_step(double step_loss, double mlm_loss, double nsp_loss, const std::vector<double>& loss_sums,
                           float lr) {
  const auto now = std::chrono::steady_clock::now();
  const double secs = std::chrono::duration<double>(now - since_log.start).count();
  const double sps = static_cast<double>(since_log.seqs) / std::max(secs, 1e-9);
  nlohmann::ordered_json d;
  if (models.electra) {
    electra_metrics(loss_sums.data(), opts.disc_weight, "", d);
  } else {
    d["loss"] = step_loss;
    d["mlm_loss"] = mlm_loss;
    d["nsp_loss"] = nsp_loss;
  }
  d["learning_rate"] = lr;
  d["loss_scale"] = state.loss_scale;
  d["skipped_steps"] = totals.skipped_steps;
  d["seq_per_s"] = sps;
  if (run.world_size > 1)
    d["allreduce_wait_s"] =
        since_log.allreduce_seconds / static_cast<double>(std::max<int64_t>(1, since_log.allreduce_steps));
  since_log = SinceLog{now};
  run.log->log({state.cursor.epoch, label()}, d);
  for (auto it = d.begin(); it != d.end(); ++it)
    if (it.key() != "skipped_steps" && it.key() != "loss_scale" && it.key() != "allreduce_wait_s")
      run.tensorboard->scalar("train/" + it.key(), it.value().get<float>(), label());
  char line[240];
  const long long step = state.step, max_steps = opts.max_steps;
  if (models.electra)
    std::snprintf(line, sizeof line,
                  "step %lld/%lld loss %.4f (gen %.4f acc %.3f, disc %.4f acc %.3f) lr %.3g %.1f seq/s", step,
                  max_steps, step_loss, mlm_loss, d["generator_accuracy"].get<double>(), nsp_loss,
                  d["discriminator_accuracy"].get<double>(), lr, sps);
  else
    std::snprintf(line, sizeof line, "step %lld/%lld loss %.4f (mlm %.4f nsp %.4f) lr %.3g %.1f seq/s", step, max_steps,
                  step_loss, mlm_loss, nsp_loss, lr, sps);
  // The time left at this process's pace (evaluations and checkpoints included).
  const std::string left =
      eta(run.clock.seconds(), run.clock.steps_run(state.step), run.clock.steps_run(opts.max_steps));
  if (tty) {
    std::printf("\r%s %s eta %s\033[K", progress_bar(state.step, opts.max_steps).c_str(), line, left.c_str());
    if (state.step == opts.max_steps) std::printf("\n");
  } else {
    std::printf("%s eta %s\n", line, left.c_str());
  }
  std::fflush(stdout);
}

// The final evaluation, checkpoint and model, and the closing block.
void Pretraining::finish(bool stopped) {
  if (range_test()) {  // the range test's curve is its caller's to write
    run.comm.barrier();
    return;
  }
  run.watchdog->beat("the final evaluation and save", label());
  // The last steps were skipped as non-finite: the run diverged, though too late for
  // --max-nonfinite-steps to stop it; no evaluation, no final model, and exit 1.
  const int64_t bad = stopped ? 0 : run.step->nonfinite_run();
  BERTCC_CHECK(
      bad == 0, "pretrain: the run diverged at step ", label() - bad + 1, " (the last ", bad,
      " step(s) had a non-finite loss or gradients); stopping without a final model: the newest checkpoint in ",
      opts.output_dir, "/checkpoints is the last good state");
  if (eval_loader && state.step >= opts.max_steps) evaluate();
  run.save(vocab_path, label());
  if (run.lead) {
    if (state.step >= opts.max_steps) write_models();
    if (!stopped) closing_block();
    std::cerr << (stopped ? "pretrain: stopped by signal after step " : "pretrain: finished at step ") << state.step
              << "; checkpoint in " << opts.output_dir << "/checkpoints/step_" << state.step + state.step_offset
              << (stopped ? " (to resume: the same command with --resume-from-checkpoint)" : "") << "\n";
  }
  run.comm.barrier();  // no rank exits (and tears MPI down) before rank 0 has saved
}

// As NVIDIA's scripts write them: OUTPUT/model, or ELECTRA's discriminator/ (fine-tune this) and
// generator/.
void Pretraining::write_models() {
  if (models.electra) {
    save_model_dir(*models.main, opts.output_dir + "/discriminator", vocab_path);
    save_model_dir(*models.gen, opts.output_dir + "/generator", vocab_path);
  } else {
    save_model_dir(*model, opts.output_dir + "/model", vocab_path);
  }
}

// As the Trainer ends: train metrics, eval metrics, where the model went.
void Pretraining::closing_block() {
  const double secs = run.clock.seconds();
  std::vector<std::pair<std::string, std::string>> rows{
      {"train_steps", std::to_string(state.step)},
      {"train_samples", std::to_string(totals.seqs)},
      {"train_runtime", clock_time(secs, true)},
      {"train_samples_per_second", fixed(static_cast<double>(totals.seqs) / std::max(secs, 1e-9), 3)},
      {"train_loss",
       std::isfinite(totals.last_loss) ? fixed(totals.last_loss) + " (the last step's)" : std::string("-")}};
  if (run.clock.first_step > 0)
    rows.push_back(
        {"resumed_from_step", std::to_string(run.clock.first_step) + " (samples and runtime: this run's steps)"});
  std::string out = metrics_block("train metrics", rows);
  if (last_eval.is_object()) {
    std::vector<std::pair<std::string, std::string>> ev;
    for (const auto& [k, v] : last_eval.items())
      ev.push_back({k, v.is_number_float() ? fixed(v.get<double>()) : v.dump()});
    out += metrics_block("eval metrics", ev);
  }
  if (state.step >= opts.max_steps)
    out +=
        "model written to " + opts.output_dir + (models.electra ? "/discriminator (and generator/)" : "/model") + "\n";
  std::cerr << out;
}

int Pretraining::run_all() {
  start();
  open_logs();
  run.train(*this);
  return 0;
}
}  // namespace

int run_pretraining(const PretrainOptions& o) { return Pretraining(o).run_all(); }

}  // namespace bertcc
