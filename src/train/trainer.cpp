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
  std::unique_ptr<Bert> main, gen;      // BERT or the discriminator; the generator
  AdamState opt, gen_opt;               // host form: fresh, loaded, then moved to the backend (moments_take)
  OptimizerState moments, gen_moments;  // where the backend computes
  std::vector<CheckpointPart> parts() {
    if (!electra) return {{"", main.get(), &opt}};
    return {{"discriminator", main.get(), &opt}, {"generator", gen.get(), &gen_opt}};
  }
  OptimizerState& moments_of(const CheckpointPart& p) { return p.opt == &opt ? moments : gen_moments; }
  std::vector<Bert*> all() {
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

// A pre-training run (BERT or ELECTRA): its setup, the loop over TrainStep steps, its
// evaluations, checkpoints and logs. run_pretraining() is run().
class Pretraining {
 public:
  explicit Pretraining(const PretrainOptions& o)
      : o(o), comm(dist::world()), W(comm.world()), R(comm.rank()), lead(R == 0) {}
  int run();

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
  void make_step();
  bool train_step();
  void log_step(double step_loss, double mlm_loss, double nsp_loss, const std::vector<double>& loss_sums, float lr);
  void evaluate();
  void evaluate_bert();
  void evaluate_electra();
  void report_eval(const nlohmann::ordered_json& d);
  void save();
  void finish(bool stopped);
  int64_t label() const { return st.step + st.step_offset; }
  const RangeTest* rt() const { return o.range_test; }  // set: a range test, which writes nothing

  const PretrainOptions& o;
  dist::Communicator& comm;
  const int W, R;
  const bool lead;  // only rank 0 writes logs, events, checkpoints and the model
  dist::WireDtype wire = dist::WireDtype::F32;
  Precision prec = Precision::F32;
  Optimizer optimizer = Optimizer::Lamb;
  Backend* be = nullptr;
  bool dev = false;  // weights, gradients and moments on a device
  std::unique_ptr<dist::DeviceCommunicator> dcomm;
  // the model's files
  RunLock run_lock;  // (first: released after every file of the run is closed)
  std::string resume_dir, config, generator_config, vocab_path;
  bool resume_electra = false;
  std::unique_ptr<Vocab> vocab;
  PretrainModels pm;
  Bert* model = nullptr;  // BERT or the discriminator
  MaskingOptions mopt;
  // A step is W x A micro-batches of the global order; this rank runs micro-batches R*A .. R*A+A-1.
  int64_t A = 1, micro = 1, per_step = 1, global_batch = 1;
  std::unique_ptr<PretrainLoader> loader, eval_loader;
  TrainerState st;
  bool fp16 = false, dynamic_scale = false, loaded = false, phase2_start = false;
  std::vector<std::unique_ptr<OptimizerShards>> shards;  // ZeRO-1: one per model (parts() order)
  std::unique_ptr<DLLogger> log;
  std::unique_ptr<TensorBoardWriter> tb;
  nlohmann::ordered_json last_eval;  // the closing block's eval metrics
  int64_t eval_every = 0;
  std::unique_ptr<dist::Watchdog> watchdog;
  std::unique_ptr<TrainStep> step;
  bool tty = false;
  std::chrono::steady_clock::time_point t_last, t_run;
  int64_t skipped_total = 0;
  int64_t seqs_since = 0;
  double allreduce_seconds = 0;  // time in the gradient all-reduce since the last log line
  int64_t allreduce_steps = 0;
  bool memory_checked = false;
  // For the time left and the closing block: this process's steps, sequences and wall time.
  int64_t first_step = 0, seqs_run = 0;
  double last_loss = NAN;
  bool range_ended = false;  // the range test's after_step ended the run
};

// The backend, the models, the data and the state to start from (fresh or resumed).
void Pretraining::start() {
  set_threads(threads_per_rank(o.threads, comm));
  wire = dist::parse_wire_dtype(o.dp.allreduce_dtype);
  optimizer = parse_optimizer(o.optimizer);
  check_pretrain_options(o);
  be = &backend_for_rank(o.device, comm);
  dev = !be->on_host();
  const PrecisionChoice pc = choose_precision(o.precision, dev ? CpuReport{} : cpu_report(), dev);
  prec = pc.prec;
  if (lead && !pc.why.empty()) std::cerr << pc.why << "\n";
  // (NCCL for the gradients of several GPUs; refusals before anything is written)
  dcomm = dev ? make_device_comm(comm, o.dp, *be, "pretrain") : nullptr;
  if (lead) {
    std::filesystem::create_directories(o.output_dir);
    run_lock = RunLock(o.output_dir, "--output-dir", "pretrain");
    std::cerr << (dev ? be->describe() : describe_backend(prec == Precision::BF16)) << "\n";
  }
  resolve_model_files();
  load_models();
  check_vocab_and_shards();
  A = o.gradient_accumulation_steps;
  micro = o.train_batch_size / A;
  per_step = static_cast<int64_t>(W) * A;
  global_batch = per_step * micro;
  loader = std::make_unique<PretrainLoader>(list_shards(o.input_dir), micro, o.seed, mopt, 0, 1, o.length_binning);
  resume();
  place_on_backend();
}

// Model: an HF checkpoint, or a fresh initialisation from a config and vocabulary. --config is
// required unless --init-checkpoint gives the model or --resume-from-checkpoint finds a checkpoint
// in --output-dir (its config.json); --vocab likewise (the shards do not record their vocabulary).
void Pretraining::resolve_model_files() {
  BERTCC_CHECK(o.model_type.empty() || o.model_type == "bert" || o.model_type == "electra",
               "--model-type must be bert or electra");
  resume_dir = o.resume_from_checkpoint ? newest_checkpoint_dir(o.output_dir) : "";
  resume_electra = !resume_dir.empty() && file_exists(resume_dir + "/discriminator/config.json");
  config = o.config;
  generator_config = o.generator_config;
  if (o.init_checkpoint.empty() && config.empty()) {
    BERTCC_CHECK(!resume_dir.empty(), "pretrain: --config is required: a named config (", config_preset_names(),
                 ") or a config.json",
                 o.resume_from_checkpoint
                     ? std::string("; ") + o.output_dir + "/checkpoints holds no checkpoint to resume"
                     : std::string(" (or --model DIR to continue from a model)"));
    config = resume_electra ? resume_dir + "/discriminator/config.json" : resume_dir + "/config.json";
    if (resume_electra && generator_config.empty()) generator_config = resume_dir + "/generator/config.json";
    if (lead) std::cerr << "pretrain: model configuration from " << config << "\n";
  }
  // The vocabulary: --vocab, else the one of --init-checkpoint or of the checkpoint resumed. One taken
  // from a checkpoint is copied to OUTPUT/vocab.txt (older checkpoints are deleted as the run goes on).
  vocab_path = o.vocab;
  if (vocab_path.empty()) {
    std::vector<std::pair<std::string, bool>> dirs;  // (directory, a checkpoint of this run)
    if (!o.init_checkpoint.empty()) dirs = {{o.init_checkpoint, false}, {o.init_checkpoint + "/discriminator", false}};
    if (!resume_dir.empty()) dirs.insert(dirs.end(), {{resume_dir, true}, {resume_dir + "/discriminator", true}});
    for (const auto& [d, ours] : dirs) {
      if (!file_exists(join_path(d, "vocab.txt"))) continue;
      vocab_path = join_path(d, "vocab.txt");
      if (ours) {
        const std::string copy = join_path(o.output_dir, "vocab.txt");
        if (lead) write_file_atomic(copy, read_file(vocab_path));
        comm.barrier();
        vocab_path = copy;
      }
      break;
    }
    BERTCC_CHECK(!vocab_path.empty(), "pretrain: --vocab is required: the vocab.txt the shards were made with ",
                 "(create-pretraining-data's --vocab; the shards do not record it)",
                 o.init_checkpoint.empty() ? std::string("") : "; " + o.init_checkpoint + " has no vocab.txt");
    if (lead) std::cerr << "pretrain: vocabulary " << vocab_path << "\n";
  }
  vocab = std::make_unique<Vocab>(Vocab::load(vocab_path));
}

void Pretraining::load_models() {
  if (!o.init_checkpoint.empty()) {
    const std::string disc_dir = o.init_checkpoint + "/discriminator";
    pm.electra = o.model_type == "electra" || (o.model_type.empty() && file_exists(disc_dir + "/config.json"));
    if (pm.electra) {
      BERTCC_CHECK(
          file_exists(disc_dir) && file_exists(o.init_checkpoint + "/generator"), o.init_checkpoint,
          ": an ELECTRA --model (--init-checkpoint) is a folder with discriminator/ and generator/ (as a pre-training "
          "run writes)");
      pm.main = load_model_dir(disc_dir, Heads::Discriminator);
      pm.gen = load_model_dir(o.init_checkpoint + "/generator", Heads::Generator);
    } else {
      pm.main = load_model_dir(o.init_checkpoint, Heads::PreTraining);
    }
  } else {
    BertConfig cfg = config_from_name_or_path(config);
    cfg.vocab_size = vocab->size();
    // ELECTRA when the config says so, or when the config itself came from an ELECTRA checkpoint (a
    // BERT --config given on ELECTRA checkpoints trains BERT, and the resume refuses them)
    pm.electra =
        o.model_type.empty() ? cfg.electra() || (resume_electra && o.config.empty()) : o.model_type == "electra";
    if (pm.electra) {
      cfg.model_type = "electra";
      BertConfig gcfg = generator_config.empty() ? electra_generator_config(cfg, o.generator_hidden_size)
                                                 : config_from_name_or_path(generator_config);
      gcfg.model_type = "electra";
      gcfg.vocab_size = vocab->size();
      pm.main = std::make_unique<Bert>(cfg, Heads::Discriminator);
      pm.gen = std::make_unique<Bert>(gcfg, Heads::Generator);
      pm.main->init_weights(o.seed);
      pm.gen->init_weights(o.seed + 1);
    } else {
      pm.main = std::make_unique<Bert>(cfg, Heads::PreTraining);
      pm.main->init_weights(o.seed);
    }
  }
  if (pm.electra) electra_share_embeddings(*pm.main, *pm.gen);  // also checks that the shared shapes agree
  model = pm.main.get();
}

// The vocabulary against the model and the shards' token ids; the masking it gives.
void Pretraining::check_vocab_and_shards() {
  const Vocab& v = *vocab;
  BERTCC_CHECK(v.size() == model->config().vocab_size, vocab_path, ": ", v.size(), " entries but the model has ",
               model->config().vocab_size);
  const int32_t cls = v.id("[CLS]"), sep = v.id("[SEP]"), mask = v.id("[MASK]");
  check_shard_token_ids(list_shards(o.input_dir), model->config().vocab_size, "(" + vocab_path + ")");
  if (!o.eval_dir.empty())
    check_shard_token_ids(list_shards(o.eval_dir), model->config().vocab_size, "(" + vocab_path + ")");
  mopt.max_predictions_per_seq = o.max_predictions_per_seq;
  mopt.vocab_size = model->config().vocab_size;
  mopt.cls_id = cls;
  mopt.sep_id = sep;
  mopt.mask_id = mask;
  if (pm.electra) {  // ELECTRA's masking: 85 % [MASK], 15 % unchanged, no random tokens
    mopt.mask_below = 0.85f;
    mopt.random_from = 1.0f;
  }
}

// The newest checkpoint (--resume-from-checkpoint), its global batch, ZeRO-1 and phase 2.
void Pretraining::resume() {
  st.rng = Rng{o.seed, 0};
  fp16 = prec == Precision::F16;
  dynamic_scale = fp16 && o.loss_scale <= 0;
  st.loss_scale = fp16 ? (dynamic_scale ? o.init_loss_scale : o.loss_scale) : 1.0;
  loaded = o.resume_from_checkpoint &&
           load_latest_checkpoint(o.output_dir, pm.parts(), st, "pretrain", lead, o.trust_unverified_checkpoint);
  if (loaded && pm.electra) electra_share_embeddings(*pm.main, *pm.gen);
  if (W > 1) {
    check_same_on_all_ranks(comm, loaded ? static_cast<double>(st.step + st.step_offset) : -1.0,
                            "the checkpoint to resume from (is " + o.output_dir + " on a shared file system?)");
    check_same_on_all_ranks(comm, static_cast<double>(model->table().total() + (pm.gen ? pm.gen->table().total() : 0)),
                            "the number of parameters");
  }
  phase2_start = o.phase2 && (!loaded || st.phase == 1);
  adopt_checkpoint_batch();
  st.global_batch = global_batch;
  shard_and_report();
  if (o.resume_from_checkpoint && !loaded && lead)
    std::cerr << "pretrain: no checkpoint in " << o.output_dir << "/checkpoints; starting from step 0\n";
  if (phase2_start) start_phase2();
  BERTCC_CHECK(!loaded || o.phase2 || st.phase == 1, o.output_dir,
               ": the newest checkpoint is from phase 2; add --phase2 to resume it");
}

// A checkpoint resumed at another world size keeps its global batch: the accumulation adjusts
// (same micro-batch), so the run continues with the same steps and data order.
void Pretraining::adopt_checkpoint_batch() {
  if (!loaded || phase2_start || st.global_batch <= 0 || st.global_batch == global_batch) return;
  if (st.global_batch % (W * micro) == 0) {
    A = st.global_batch / (W * micro);
    per_step = W * A;
    global_batch = st.global_batch;
    if (lead)
      std::cerr << "pretrain: the checkpoint's global batch is " << global_batch << " sequences: "
                << "gradient accumulation set to " << A << " (" << W << " rank(s) x " << A << " x micro-batch " << micro
                << ")\n";
  } else if (lead) {
    std::cerr << "pretrain: warning: the checkpoint was written with a global batch of " << st.global_batch
              << " sequences, which " << W << " rank(s) with micro-batches of " << micro
              << " cannot form; continuing with " << global_batch << " per step (same data order)\n";
  }
}

// ZeRO-1: one set of shards per model (parts() order; ELECTRA's generator and discriminator each
// split their own moments).
void Pretraining::shard_and_report() {
  if (o.dp.zero1 && W > 1)
    for (const CheckpointPart& p : pm.parts()) {
      shards.push_back(std::make_unique<OptimizerShards>(p.model->table(), W));
      shards.back()->keep_own(*p.opt, R);
    }
  if (lead && W > 1) {
    double full_mb = 0, own_mb = 0;
    const std::vector<CheckpointPart> parts = pm.parts();
    for (size_t i = 0; i < parts.size(); ++i) {
      const double full = 2.0 * 4 * static_cast<double>(parts[i].model->table().total()) / 1048576.0;
      full_mb += full;
      own_mb +=
          shards.empty() ? full : 2.0 * 4 * static_cast<double>(shards[i]->end(0) - shards[i]->begin(0)) / 1048576.0;
    }
    std::cerr << "pretrain: optimizer moments " << own_mb << " MB on rank 0"
              << (!shards.empty() ? " (ZeRO-1: sharded over " + std::to_string(W) + " ranks; unsharded " +
                                        std::to_string(static_cast<int64_t>(full_mb + 0.5)) +
                                        " MB; gradients reduce-scattered, parameters all-gathered)"
                                  : std::string(" (replicated on every rank; --zero1 shards them)"))
              << "\n";
  }
  if (lead && W > 1)
    std::cerr << "pretrain: " << W << " ranks (" << comm.name() << "), " << threads() << " threads each; global batch "
              << global_batch << " = " << W << " x " << A << " x " << micro << ", all-reduce in "
              << dist::wire_dtype_name(wire) << "\n";
}

// Start of phase 2 (NVIDIA): phase-1 weights and moments, optimizer step, schedule and data
// position restarted; steps are named from the phase-1 end step on.
void Pretraining::start_phase2() {
  if (loaded)
    BERTCC_CHECK(o.phase1_end_step <= 0 || st.step == o.phase1_end_step, "--phase1-end-step ", o.phase1_end_step,
                 " but the newest phase-1 checkpoint is at step ", st.step);
  st.step_offset = loaded ? st.step : o.phase1_end_step;
  st.step = 0;
  st.phase = 2;
  st.cursor = DataCursor{};
  st.rng = Rng{o.seed, 0};
  pm.opt.step = 0;
  pm.gen_opt.step = 0;
  if (lead) std::cerr << "pretrain: phase 2 starts after phase-1 step " << st.step_offset << "\n";
}

// The weights (on a device) and the moments (fresh or resumed) go where the backend computes; the
// host copies are refreshed from there before each checkpoint. ELECTRA: both models, each with its
// own moments (parts() order).
void Pretraining::place_on_backend() {
  for (const CheckpointPart& p : pm.parts()) {
    if (dev) p.model->use_backend(*be);
    be->moments_take(std::move(*p.opt), p.model->table().total(), pm.moments_of(p));
  }
}

// Logs exist on rank 0 only.
void Pretraining::open_logs() {
  if (lead && !rt()) {
    log = std::make_unique<DLLogger>(o.output_dir + "/dllogger.json");
    tb = std::make_unique<TensorBoardWriter>(o.output_dir + "/tensorboard");
  }
  nlohmann::ordered_json params;
  for (const auto& [k, v] : std::initializer_list<std::pair<const char*, nlohmann::ordered_json>>{
           {"train_batch_size", A * micro},
           {"gradient_accumulation_steps", A},
           {"learning_rate", o.learning_rate},
           {"max_steps", o.max_steps},
           {"warmup_proportion", o.warmup_proportion},
           {"model_type", pm.electra ? "electra" : "bert"},
           {"optimizer", o.optimizer},
           {"precision", precision_name(prec)},
           {"seed", o.seed},
           {"world_size", W},
           {"global_batch_size", global_batch},
           {"allreduce_dtype", dist::wire_dtype_name(wire)},
           {"start_step", st.step + st.step_offset},
           {"phase", st.phase},
           {"phase1_end_step", st.step_offset}})
    params[k] = v;
  if (pm.electra) {
    params["generator_hidden_size"] = pm.gen->config().hidden_size;
    params["disc_weight"] = o.disc_weight;
  }
  if (log) log->log("PARAMETER", params);
  if (lead && pm.electra)
    std::cerr << "pretrain: ELECTRA: discriminator " << model->table().total() << " parameters (hidden "
              << model->config().hidden_size << "), generator " << pm.gen->table().total() << " (hidden "
              << pm.gen->config().hidden_size << "), shared embeddings; discriminator weight " << o.disc_weight << "\n";
  // Held-out evaluation: the first eval_batches micro-batches of the eval shards, dropout off;
  // batch b is evaluated by rank b % W and the sums are reduced, so every world size reports the
  // same metrics.
  if (!o.eval_dir.empty() && !rt())
    eval_loader = std::make_unique<PretrainLoader>(list_shards(o.eval_dir), micro, o.seed, mopt);
  eval_every = o.eval_freq > 0 ? o.eval_freq : o.num_steps_per_checkpoint;
}

void Pretraining::evaluate() { pm.electra ? evaluate_electra() : evaluate_bert(); }

void Pretraining::report_eval(const nlohmann::ordered_json& d) {
  const double loss = d.contains("eval.loss") ? d["eval.loss"].get<double>() : 0.0;
  BERTCC_CHECK(std::isfinite(loss), "pretrain: the evaluation at step ", label(), " has a non-finite loss (", loss,
               "): the run diverged; stopping without a final model: the newest checkpoint in ", o.output_dir,
               "/checkpoints is the last good state");
  last_eval = d;
  log->log({st.cursor.epoch, label()}, d);
}

void Pretraining::evaluate_electra() {
  DataCursor c;
  // One row of sums per batch (zero on the ranks that did not evaluate it), summed in batch order
  // after the all-reduce: the same bits at every world size.
  std::vector<double> rows(static_cast<size_t>(o.eval_batches) * kElectraSums, 0.0);
  ElectraStepOptions so;
  so.disc_weight = static_cast<float>(o.disc_weight);
  EvalPass pass;
  for (int64_t b = 0; b < o.eval_batches; ++b) {
    const BertBatch batch = eval_loader->next(c);
    pass.add(c.epoch, batch.B);
    if (b % W != R) continue;
    batch.validate(model->config(), batch.source);
    Rng r = micro_batch_rng(o.seed, 0, -1, b);  // the sampling noise of eval batch b, whatever the world size
    add_electra(rows.data() + b * kElectraSums, electra_step(*pm.gen, *model, batch, false, false, prec, r, so));
  }
  comm.allreduce_sum(rows.data(), rows.size());
  double sums[kElectraSums] = {};
  for (int64_t b = 0; b < o.eval_batches; ++b)
    for (size_t i = 0; i < kElectraSums; ++i) sums[i] += rows[b * kElectraSums + i];
  if (!lead) return;
  nlohmann::ordered_json d;
  electra_metrics(sums, o.disc_weight, "eval.", d);
  report_eval(d);
  for (auto it = d.begin(); it != d.end(); ++it)
    tb->scalar("eval/" + it.key().substr(5), it.value().get<float>(), label());
  std::printf(
      "%seval at step %lld: loss %.4f, generator loss %.4f accuracy %.4f, discriminator loss %.4f accuracy "
      "%.4f precision %.4f recall %.4f (%lld masked, %lld replaced%s)\n",
      interactive_terminal(1) ? "\n" : "", static_cast<long long>(label()), d["eval.loss"].get<double>(),
      d["eval.generator_loss"].get<double>(), d["eval.generator_accuracy"].get<double>(),
      d["eval.discriminator_loss"].get<double>(), d["eval.discriminator_accuracy"].get<double>(),
      d["eval.discriminator_precision"].get<double>(), d["eval.discriminator_recall"].get<double>(),
      static_cast<long long>(sums[2]), static_cast<long long>(sums[6]), pass.note(micro).c_str());
  std::fflush(stdout);
}

void Pretraining::evaluate_bert() {
  DataCursor c;
  // Per-batch rows {loss, masked, MLM correct, NSP correct, sequences}, zero where another rank
  // evaluated the batch, summed in batch order after the all-reduce (same bits at every world size).
  std::vector<double> rows(static_cast<size_t>(o.eval_batches) * 5, 0.0);
  Rng eval_rng{0, 0};
  EvalPass pass;
  for (int64_t b = 0; b < o.eval_batches; ++b) {
    const BertBatch batch = eval_loader->next(c);
    pass.add(c.epoch, batch.B);
    if (b % W != R) continue;
    batch.validate(model->config(), batch.source);
    const PretrainLoss l = model->pretrain_step(batch, false, false, prec, eval_rng);
    double* row = rows.data() + b * 5;
    row[0] = l.loss;
    row[1] = static_cast<double>(l.mlm_count);
    row[2] = static_cast<double>(l.mlm_correct);
    row[3] = static_cast<double>(l.nsp_correct);
    row[4] = static_cast<double>(batch.B);
  }
  if (W > 1) comm.allreduce_sum(rows.data(), rows.size());
  double loss = 0, v[4] = {0, 0, 0, 0};
  for (int64_t b = 0; b < o.eval_batches; ++b) {
    loss += rows[b * 5];
    for (int i = 0; i < 4; ++i) v[i] += rows[b * 5 + 1 + i];
  }
  PretrainLoss sum;
  sum.mlm_count = static_cast<int64_t>(v[0]);
  sum.mlm_correct = static_cast<int64_t>(v[1]);
  sum.nsp_correct = static_cast<int64_t>(v[2]);
  const int64_t nsp_n = static_cast<int64_t>(v[3]);
  if (!lead) return;
  nlohmann::ordered_json d;
  d["eval.loss"] = loss / static_cast<double>(o.eval_batches);
  d["eval.mlm_accuracy"] =
      static_cast<double>(sum.mlm_correct) / static_cast<double>(std::max<int64_t>(1, sum.mlm_count));
  d["eval.nsp_accuracy"] = static_cast<double>(sum.nsp_correct) / static_cast<double>(std::max<int64_t>(1, nsp_n));
  report_eval(d);
  for (const char* k : {"eval.loss", "eval.mlm_accuracy", "eval.nsp_accuracy"})
    tb->scalar(std::string("eval/") + (k + 5), d[k].get<float>(), label());
  std::printf("%seval at step %lld: loss %.4f, MLM accuracy %.4f, NSP accuracy %.4f (%lld masked tokens%s)\n",
              interactive_terminal(1) ? "\n" : "", static_cast<long long>(label()), d["eval.loss"].get<double>(),
              d["eval.mlm_accuracy"].get<double>(), d["eval.nsp_accuracy"].get<double>(),
              static_cast<long long>(sum.mlm_count), pass.note(micro).c_str());
  std::fflush(stdout);
}

// Rank 0 writes checkpoints; with ZeRO-1 every rank first sends it its moments.
void Pretraining::save() {
  watchdog->beat("gathering the moments for a checkpoint", label());
  std::vector<CheckpointPart> parts = pm.parts();
  if (lead || !shards.empty())  // ZeRO-1: every rank's part of the moments comes down
    for (CheckpointPart& p : parts) {
      if (lead) p.model->params_to_host();
      p.opt = &be->moments_view(pm.moments_of(p), *p.opt);
    }
  std::vector<AdamState> full(parts.size());  // ZeRO-1: the full moments, on rank 0
  for (size_t i = 0; i < shards.size(); ++i) {
    full[i] = shards[i]->gather_full(comm, *parts[i].opt);
    parts[i].opt = &full[i];
  }
  watchdog->beat("writing a checkpoint (rank 0)", label(), /*paused=*/true);
  if (lead) save_checkpoint(o.output_dir, parts, st, vocab_path, o.keep_checkpoints);
  comm.barrier();  // the other ranks wait here, unwatched, however long the file system takes
  watchdog->beat("after a checkpoint", label());
}

// The training step: one model (BERT) or two (ELECTRA's discriminator, then its generator).
void Pretraining::make_step() {
  TrainStepOptions so;
  so.optimizer = optimizer;
  so.who = "pretrain";
  so.max_nonfinite_steps = o.max_nonfinite_steps;
  so.diverged_note = "(diverged, or non-finite weights); stopping without saving: the newest checkpoint in " +
                     o.output_dir + "/checkpoints is the last good state (--max-nonfinite-steps)";
  so.on_skip = [this](double loss, double gnorm) {
    if (fp16)
      std::fprintf(stderr, "%spretrain: step %lld: gradient overflow (loss scale %g), step skipped\n", tty ? "\n" : "",
                   static_cast<long long>(label() + 1), st.loss_scale);
    else
      std::fprintf(stderr, "%spretrain: step %lld: non-finite loss (%g) or gradient norm (%g), step skipped\n",
                   tty ? "\n" : "", static_cast<long long>(label() + 1), loss, gnorm);
  };
  // ELECTRA: the generator's copies of the shared embeddings follow the discriminator's.
  if (pm.electra) so.after_update = [this]() { electra_share_embeddings(*pm.main, *pm.gen); };
  LossScale ls{&st.loss_scale, &st.clean_steps, dynamic_scale, o.loss_scale_window};
  step = std::make_unique<TrainStep>(comm, *be, dcomm.get(), o.dp, std::move(so), ls);
  // ELECTRA's discriminator receives the generator's share of the embedding gradients after both
  // backward passes, so its buckets are not reduced during backward.
  const std::vector<CheckpointPart> parts = pm.parts();
  for (size_t i = 0; i < parts.size(); ++i)
    step->add_model(*parts[i].model, pm.moments_of(parts[i]), i < shards.size() ? shards[i].get() : nullptr,
                    !pm.electra);
  if (lead && dev && (W > 1 || dcomm))
    std::cerr << "pretrain: gradients reduced "
              << (dcomm ? dcomm->route() : std::string("through the host (") + comm.name() + ")")
              << (dcomm && o.dp.allreduce_dtype != "fp32" ? ", " + o.dp.allreduce_dtype + " on the wire" : "")
              << (step->overlapping() ? ", in buckets of " + (std::ostringstream() << o.dp.bucket_cap_mb).str() +
                                            " MB started during backward"
                                      : "")
              << "\n";
}

// One optimizer step over this rank's micro-batches; false when a signal stopped the run.
bool Pretraining::train_step() {
  watchdog->beat("loading the step's batches", label());
  DataCursor next_cursor = st.cursor;
  const std::vector<BertBatch> batches = loader->next_step(next_cursor, per_step, R * A, A);
  // One small all-reduce per step: the global masked-token count (the MLM loss is the mean over
  // every masked token of the global batch) and the stop flag (a signal to any rank stops all
  // ranks at the same step).
  // ELECTRA's discriminator loss is the mean over the real tokens: their count too.
  double head[3] = {0, 0, signals::stop_requested() ? 1.0 : 0.0};
  for (const BertBatch& b : batches) {
    b.validate(model->config(), b.source);  // ids, positions, labels in range before they index anything
    for (int32_t l : b.mlm_labels) head[0] += l != -1;
    if (pm.electra)
      for (int32_t m : b.input_mask) head[1] += m != 0;
  }
  watchdog->beat("the step's first all-reduce", label());
  comm.allreduce_sum(head, 3);
  if (head[2] > 0) return false;
  st.cursor = next_cursor;
  if (!memory_checked && !batches.empty()) {  // the sequence length is the shards'
    if (!dev) {                               // (a device's allocations say themselves when they do not fit)
      const std::vector<Bert*> models = pm.all();
      check_training_memory(std::vector<const Bert*>(models.begin(), models.end()), batches[0].B, batches[0].T, prec,
                            "pretrain");
    }
    memory_checked = true;
  }
  const float scale = static_cast<float>(st.loss_scale);
  const float mlm_denom = static_cast<float>(std::max(1.0, head[0]));
  const float nsp_denom = static_cast<float>(global_batch);
  // BERT: MLM and NSP cross-entropy sums over this rank's micro-batches; ELECTRA: add_electra's.
  std::vector<double> loss_sums(pm.electra ? kElectraSums : 2, 0.0);
  ElectraStepOptions so;
  so.disc_weight = static_cast<float>(o.disc_weight);
  so.loss_scale = scale;
  so.mlm_denom = mlm_denom;
  so.disc_denom = static_cast<float>(std::max(1.0, head[1]));
  auto micro_batch = [&](int64_t a) {
    const BertBatch& batch = batches[static_cast<size_t>(a)];
    Rng rng = micro_batch_rng(o.seed, st.phase, st.step, R * A + a);
    if (pm.electra) {
      add_electra(loss_sums.data(), electra_step(*pm.gen, *model, batch, true, true, prec, rng, so));
    } else {
      const PretrainLoss l = model->pretrain_step(batch, true, true, prec, rng, scale, mlm_denom, nsp_denom);
      loss_sums[0] += l.mlm_loss_sum;
      loss_sums[1] += l.nsp_loss_sum;
    }
    if (lead) seqs_since += batch.B * W;  // for the logged rate
    if (lead) seqs_run += batch.B * W;
  };
  // BERT: MLM and NSP; ELECTRA: generator MLM and discriminator losses (global means).
  double mlm_loss = 0, nsp_loss = 0;
  auto reduce_loss = [&]() {
    comm.allreduce_sum(loss_sums.data(), loss_sums.size());
    mlm_loss = head[0] > 0 ? loss_sums[0] / head[0] : 0.0;
    nsp_loss = pm.electra ? loss_sums[1] / std::max(1.0, head[1]) : loss_sums[1] / static_cast<double>(global_batch);
    return pm.electra ? mlm_loss + o.disc_weight * nsp_loss : mlm_loss + nsp_loss;
  };
  const float lr =
      rt() ? rt()->lr(st.step)
           : pretrain_lr(optimizer, static_cast<float>(o.learning_rate), st.step, o.max_steps, o.warmup_proportion);
  const StepResult r = step->run(A, micro_batch, reduce_loss, lr, watchdog.get(), label());
  allreduce_seconds += step->take_wait_seconds();
  ++allreduce_steps;
  if (!r.applied) ++skipped_total;
  ++st.step;
  last_loss = r.loss;
  if (rt()) {  // nothing logged, saved or evaluated
    range_ended = !rt()->after_step(st.step, lr, r.loss);
    return true;
  }
  if (lead && (st.step % o.log_freq == 0 || st.step == o.max_steps))
    log_step(r.loss, mlm_loss, nsp_loss, loss_sums, lr);
  if (o.num_steps_per_checkpoint > 0 && st.step % o.num_steps_per_checkpoint == 0 && st.step < o.max_steps) save();
  watchdog->beat("evaluation", label());
  if (eval_loader && eval_every > 0 && st.step % eval_every == 0 && st.step < o.max_steps) evaluate();
  return true;
}

// Rank 0's log line, DLLogger record and TensorBoard scalars of a step.
void Pretraining::log_step(double step_loss, double mlm_loss, double nsp_loss, const std::vector<double>& loss_sums,
                           float lr) {
  const auto now = std::chrono::steady_clock::now();
  const double secs = std::chrono::duration<double>(now - t_last).count();
  const double sps = seqs_since / std::max(secs, 1e-9);
  t_last = now;
  seqs_since = 0;
  nlohmann::ordered_json d;
  if (pm.electra) {
    electra_metrics(loss_sums.data(), o.disc_weight, "", d);
  } else {
    d["loss"] = step_loss;
    d["mlm_loss"] = mlm_loss;
    d["nsp_loss"] = nsp_loss;
  }
  d["learning_rate"] = lr;
  d["loss_scale"] = st.loss_scale;
  d["skipped_steps"] = skipped_total;
  d["seq_per_s"] = sps;
  if (W > 1) d["allreduce_wait_s"] = allreduce_seconds / static_cast<double>(std::max<int64_t>(1, allreduce_steps));
  allreduce_seconds = 0;
  allreduce_steps = 0;
  log->log({st.cursor.epoch, label()}, d);
  for (auto it = d.begin(); it != d.end(); ++it)
    if (it.key() != "skipped_steps" && it.key() != "loss_scale" && it.key() != "allreduce_wait_s")
      tb->scalar("train/" + it.key(), it.value().get<float>(), label());
  char line[240];
  if (pm.electra)
    std::snprintf(line, sizeof line,
                  "step %lld/%lld loss %.4f (gen %.4f acc %.3f, disc %.4f acc %.3f) lr %.3g %.1f seq/s",
                  static_cast<long long>(st.step), static_cast<long long>(o.max_steps), step_loss, mlm_loss,
                  d["generator_accuracy"].get<double>(), nsp_loss, d["discriminator_accuracy"].get<double>(), lr, sps);
  else
    std::snprintf(line, sizeof line, "step %lld/%lld loss %.4f (mlm %.4f nsp %.4f) lr %.3g %.1f seq/s",
                  static_cast<long long>(st.step), static_cast<long long>(o.max_steps), step_loss, mlm_loss, nsp_loss,
                  lr, sps);
  // The time left at this process's pace (evaluations and checkpoints included).
  const std::string left =
      eta(std::chrono::duration<double>(now - t_run).count(), st.step - first_step, o.max_steps - first_step);
  if (tty) {
    std::printf("\r%s %s eta %s\033[K", progress_bar(st.step, o.max_steps).c_str(), line, left.c_str());
    if (st.step == o.max_steps) std::printf("\n");
  } else {
    std::printf("%s eta %s\n", line, left.c_str());
  }
  std::fflush(stdout);
}

// The final evaluation, checkpoint and model, and the closing block.
void Pretraining::finish(bool stopped) {
  if (rt()) {  // the range test's curve is its caller's to write
    comm.barrier();
    return;
  }
  watchdog->beat("the final evaluation and save", label());
  // The last steps were skipped as non-finite: the run diverged, though too late for
  // --max-nonfinite-steps to stop it; no evaluation, no final model, and exit 1.
  const int64_t bad = stopped ? 0 : step->nonfinite_run();
  BERTCC_CHECK(
      bad == 0, "pretrain: the run diverged at step ", label() - bad + 1, " (the last ", bad,
      " step(s) had a non-finite loss or gradients); stopping without a final model: the newest checkpoint in ",
      o.output_dir, "/checkpoints is the last good state");
  if (eval_loader && st.step >= o.max_steps) evaluate();
  save();
  if (lead) {
    if (st.step >= o.max_steps) {
      if (pm.electra) {  // as NVIDIA's ELECTRA writes them: discriminator/ (fine-tune this) and generator/
        save_model_dir(*pm.main, o.output_dir + "/discriminator", vocab_path);
        save_model_dir(*pm.gen, o.output_dir + "/generator", vocab_path);
      } else {
        save_model_dir(*model, o.output_dir + "/model", vocab_path);
      }
    }
    if (!stopped) {  // as the Trainer ends: train metrics, eval metrics, where the model went
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_run).count();
      std::vector<std::pair<std::string, std::string>> rows{
          {"train_steps", std::to_string(st.step)},
          {"train_samples", std::to_string(seqs_run)},
          {"train_runtime", clock_time(secs, true)},
          {"train_samples_per_second", fixed(static_cast<double>(seqs_run) / std::max(secs, 1e-9), 3)},
          {"train_loss", std::isfinite(last_loss) ? fixed(last_loss) + " (the last step's)" : std::string("-")}};
      if (first_step > 0)
        rows.push_back({"resumed_from_step", std::to_string(first_step) + " (samples and runtime: this run's steps)"});
      std::string out = metrics_block("train metrics", rows);
      if (last_eval.is_object()) {
        std::vector<std::pair<std::string, std::string>> ev;
        for (const auto& [k, v] : last_eval.items())
          ev.push_back({k, v.is_number_float() ? fixed(v.get<double>()) : v.dump()});
        out += metrics_block("eval metrics", ev);
      }
      if (st.step >= o.max_steps)
        out += "model written to " + o.output_dir + (pm.electra ? "/discriminator (and generator/)" : "/model") + "\n";
      std::cerr << out;
    }
    std::cerr << (stopped ? "pretrain: stopped by signal after step " : "pretrain: finished at step ") << st.step
              << "; checkpoint in " << o.output_dir << "/checkpoints/step_" << st.step + st.step_offset
              << (stopped ? " (to resume: the same command with --resume-from-checkpoint)" : "") << "\n";
  }
  comm.barrier();  // no rank exits (and tears MPI down) before rank 0 has saved
}

int Pretraining::run() {
  start();
  open_logs();
  signals::take_stop_signals();  // SIGINT/SIGTERM: finish the step, save, return
  watchdog = std::make_unique<dist::Watchdog>(comm, W > 1 ? o.dp.watchdog_timeout : 0);
  tty = lead && interactive_terminal(1);
  t_last = std::chrono::steady_clock::now();
  make_step();
  t_run = std::chrono::steady_clock::now();
  first_step = st.step;
  bool stopped = false;
  while (st.step < o.max_steps && !range_ended)
    if (!train_step()) {
      stopped = true;
      break;
    }
  finish(stopped);
  return 0;
}
}  // namespace

int run_pretraining(const PretrainOptions& o) { return Pretraining(o).run(); }

}  // namespace bertcc
