#include "bertcc/trainer.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "bertcc/dist.h"
#include "bertcc/electra.h"
#include "bertcc/error.h"
#include "bertcc/signals.h"
#include "bertcc/fileio.h"
#include "bertcc/model_dir.h"
#include "bertcc/pretrain_data.h"
#include "bertcc/runtime.h"
#include "bertcc/tensorboard.h"
#include "bertcc/tokenizer.h"
#include "train/checkpoint.h"
#include "train/data_parallel.h"
#include "train/dllogger.h"
#include "train/hparams.h"
#include "train/progress.h"

namespace bertcc {

namespace {

// The models a pre-training run trains: BERT (MLM + NSP), or ELECTRA's discriminator and generator
// (sharing their embeddings; one optimizer over both, one global gradient norm).
struct PretrainModels {
  bool electra = false;
  std::unique_ptr<Bert> main, gen;  // BERT or the discriminator; the generator
  AdamState opt, gen_opt;
  std::vector<CheckpointPart> parts() {
    if (!electra) return {{"", main.get(), &opt}};
    return {{"discriminator", main.get(), &opt}, {"generator", gen.get(), &gen_opt}};
  }
  std::vector<Bert*> all() { return electra ? std::vector<Bert*>{main.get(), gen.get()} : std::vector<Bert*>{main.get()}; }
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
    if (step > best && (fs::exists(e.path() / "config.json") || fs::exists(e.path() / "discriminator" / "config.json"))) {
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

int run_pretraining(const PretrainOptions& o) {
  dist::Communicator& comm = dist::world();
  const int W = comm.world(), R = comm.rank();
  const bool lead = R == 0;  // only rank 0 writes logs, events, checkpoints and the model
  set_threads(threads_per_rank(o.threads, comm));
  const dist::WireDtype wire = dist::parse_wire_dtype(o.dp.allreduce_dtype);
  const Precision prec = parse_precision(o.precision);
  BERTCC_CHECK(o.optimizer == "lamb" || o.optimizer == "adamw", "--optimizer must be lamb or adamw");
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
  for (const auto& [in, flag] : {std::pair{o.input_dir, "--input-dir"}, {o.eval_dir, "--eval-dir"},
                                 {o.init_checkpoint, "--model"}, {o.vocab, "--vocab"}})
    check_output_not_input(o.output_dir, "--output-dir", in, flag);
  BERTCC_CHECK(o.max_nonfinite_steps >= 1, "--max-nonfinite-steps must be >= 1");
  Backend& be = backend_for_rank(o.device, comm);
  const bool dev = !be.on_host();  // weights, gradients and moments on a device
  // (NCCL for the gradients of several GPUs; refusals before anything is written)
  std::unique_ptr<dist::DeviceCommunicator> dcomm = dev ? make_device_comm(comm, o.dp, be, "pretrain") : nullptr;
  if (lead) {
    std::filesystem::create_directories(o.output_dir);
    std::cerr << (dev ? be.describe() : describe_backend(prec == Precision::BF16)) << "\n";
  }

  // Model: an HF checkpoint, or a fresh initialisation from a config and vocabulary. --config is
  // required unless --init-checkpoint gives the model or --resume-from-checkpoint finds a checkpoint
  // in --output-dir (its config.json); --vocab likewise (the shards do not record their vocabulary).
  PretrainModels pm;
  int32_t cls = 101, sep = 102, mask = 103;
  BERTCC_CHECK(o.model_type.empty() || o.model_type == "bert" || o.model_type == "electra",
               "--model-type must be bert or electra");
  const std::string resume_dir = o.resume_from_checkpoint ? newest_checkpoint_dir(o.output_dir) : "";
  const bool resume_electra = !resume_dir.empty() && file_exists(resume_dir + "/discriminator/config.json");
  std::string config = o.config, generator_config = o.generator_config;
  if (o.init_checkpoint.empty() && config.empty()) {
    BERTCC_CHECK(!resume_dir.empty(), "pretrain: --config is required: a named config (", config_preset_names(),
                 ") or a config.json",
                 o.resume_from_checkpoint ? std::string("; ") + o.output_dir + "/checkpoints holds no checkpoint to resume"
                                          : std::string(" (or --model DIR to continue from a model)"));
    config = resume_electra ? resume_dir + "/discriminator/config.json" : resume_dir + "/config.json";
    if (resume_electra && generator_config.empty()) generator_config = resume_dir + "/generator/config.json";
    if (lead) std::cerr << "pretrain: model configuration from " << config << "\n";
  }
  // The vocabulary: --vocab, else the one of --init-checkpoint or of the checkpoint resumed. One taken
  // from a checkpoint is copied to OUTPUT/vocab.txt (older checkpoints are deleted as the run goes on).
  std::string vocab_path = o.vocab;
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
  std::unique_ptr<Vocab> vocab = std::make_unique<Vocab>(Vocab::load(vocab_path));
  if (!o.init_checkpoint.empty()) {
    const std::string disc_dir = o.init_checkpoint + "/discriminator";
    pm.electra = o.model_type == "electra" || (o.model_type.empty() && file_exists(disc_dir + "/config.json"));
    if (pm.electra) {
      BERTCC_CHECK(file_exists(disc_dir) && file_exists(o.init_checkpoint + "/generator"), o.init_checkpoint,
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
    pm.electra = o.model_type.empty() ? cfg.electra() || (resume_electra && o.config.empty()) : o.model_type == "electra";
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
  Bert* model = pm.main.get();
  {
    const Vocab& v = *vocab;
    BERTCC_CHECK(v.size() == model->config().vocab_size, vocab_path, ": ", v.size(), " entries but the model has ",
                 model->config().vocab_size);
    cls = v.id("[CLS]");
    sep = v.id("[SEP]");
    mask = v.id("[MASK]");
  }
  check_shard_token_ids(list_shards(o.input_dir), model->config().vocab_size, "(" + vocab_path + ")");
  if (!o.eval_dir.empty())
    check_shard_token_ids(list_shards(o.eval_dir), model->config().vocab_size, "(" + vocab_path + ")");
  MaskingOptions mopt;
  mopt.max_predictions_per_seq = o.max_predictions_per_seq;
  mopt.vocab_size = model->config().vocab_size;
  mopt.cls_id = cls;
  mopt.sep_id = sep;
  mopt.mask_id = mask;
  if (pm.electra) {  // ELECTRA's masking: 85 % [MASK], 15 % unchanged, no random tokens
    mopt.mask_below = 0.85f;
    mopt.random_from = 1.0f;
  }
  int64_t A = o.gradient_accumulation_steps;
  const int64_t micro = o.train_batch_size / A;
  // A step is W x A micro-batches of the global order; this rank runs micro-batches R*A .. R*A+A-1.
  int64_t per_step = static_cast<int64_t>(W) * A;
  int64_t global_batch = per_step * micro;
  PretrainLoader loader(list_shards(o.input_dir), micro, o.seed, mopt, 0, 1, o.length_binning);

  AdamState& opt = pm.opt;
  TrainerState st;
  st.rng = Rng{o.seed, 0};
  const bool fp16 = prec == Precision::F16;
  const bool dynamic_scale = fp16 && o.loss_scale <= 0;
  st.loss_scale = fp16 ? (dynamic_scale ? o.init_loss_scale : o.loss_scale) : 1.0;
  const bool loaded = o.resume_from_checkpoint && load_latest_checkpoint(o.output_dir, pm.parts(), st, "pretrain",
                                                                         lead, o.trust_unverified_checkpoint);
  if (loaded && pm.electra) electra_share_embeddings(*pm.main, *pm.gen);
  if (W > 1) {
    check_same_on_all_ranks(comm, loaded ? static_cast<double>(st.step + st.step_offset) : -1.0,
                            "the checkpoint to resume from (is " + o.output_dir + " on a shared file system?)");
    check_same_on_all_ranks(comm, static_cast<double>(model->table().total() + (pm.gen ? pm.gen->table().total() : 0)),
                            "the number of parameters");
  }
  // A checkpoint resumed at another world size keeps its global batch: the accumulation adjusts
  // (same micro-batch), so the run continues with the same steps and data order.
  const bool phase2_start = o.phase2 && (!loaded || st.phase == 1);
  if (loaded && !phase2_start && st.global_batch > 0 && st.global_batch != global_batch) {
    if (st.global_batch % (W * micro) == 0) {
      A = st.global_batch / (W * micro);
      per_step = W * A;
      global_batch = st.global_batch;
      if (lead)
        std::cerr << "pretrain: the checkpoint's global batch is " << global_batch << " sequences: "
                  << "gradient accumulation set to " << A << " (" << W << " rank(s) x " << A << " x micro-batch "
                  << micro << ")\n";
    } else if (lead) {
      std::cerr << "pretrain: warning: the checkpoint was written with a global batch of " << st.global_batch
                << " sequences, which " << W << " rank(s) with micro-batches of " << micro
                << " cannot form; continuing with " << global_batch << " per step (same data order)\n";
    }
  }
  st.global_batch = global_batch;
  // ZeRO-1: one set of shards per model (parts() order; ELECTRA's generator and discriminator
  // each split their own moments).
  std::vector<std::unique_ptr<OptimizerShards>> shards;
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
      own_mb += shards.empty() ? full : 2.0 * 4 * static_cast<double>(shards[i]->end(0) - shards[i]->begin(0)) / 1048576.0;
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
  if (o.resume_from_checkpoint && !loaded && lead)
    std::cerr << "pretrain: no checkpoint in " << o.output_dir << "/checkpoints; starting from step 0\n";
  if (phase2_start) {
    // Start of phase 2 (NVIDIA): phase-1 weights and moments, optimizer step, schedule and data
    // position restarted; steps are named from the phase-1 end step on.
    if (loaded)
      BERTCC_CHECK(o.phase1_end_step <= 0 || st.step == o.phase1_end_step, "--phase1-end-step ", o.phase1_end_step,
                   " but the newest phase-1 checkpoint is at step ", st.step);
    st.step_offset = loaded ? st.step : o.phase1_end_step;
    st.step = 0;
    st.phase = 2;
    st.cursor = DataCursor{};
    st.rng = Rng{o.seed, 0};
    opt.step = 0;
    pm.gen_opt.step = 0;
    if (lead) std::cerr << "pretrain: phase 2 starts after phase-1 step " << st.step_offset << "\n";
  }
  BERTCC_CHECK(!loaded || o.phase2 || st.phase == 1, o.output_dir,
               ": the newest checkpoint is from phase 2; add --phase2 to resume it");
  // On a device: the weights and the moments (fresh or resumed) move there; the host copies are
  // refreshed from it before each checkpoint.
  // ELECTRA: both models, each with its own moments (parts() order).
  OptimizerState dopt, dgen_opt;
  if (dev) {
    for (const CheckpointPart& p : pm.parts()) {
      p.model->use_backend(be);
      be.moments_from_host(*p.opt, p.model->table().total(), p.opt == &pm.opt ? dopt : dgen_opt);
      *p.opt = AdamState{};  // the moments live on the device now
    }
  }
  auto device_moments = [&](const CheckpointPart& p) -> OptimizerState& { return p.opt == &pm.opt ? dopt : dgen_opt; };
  // Logs exist on rank 0 only.
  std::unique_ptr<DLLogger> log;
  std::unique_ptr<TensorBoardWriter> tb;
  if (lead) {
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
           {"precision", o.precision},
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
  if (lead) log->log("PARAMETER", params);
  if (lead && pm.electra)
    std::cerr << "pretrain: ELECTRA: discriminator " << model->table().total() << " parameters (hidden "
              << model->config().hidden_size << "), generator " << pm.gen->table().total() << " (hidden "
              << pm.gen->config().hidden_size << "), shared embeddings; discriminator weight " << o.disc_weight << "\n";

  // Held-out evaluation: the first eval_batches micro-batches of the eval shards, dropout off;
  // batch b is evaluated by rank b % W and the sums are reduced, so every world size reports the
  // same metrics.
  std::unique_ptr<PretrainLoader> eval_loader;
  if (!o.eval_dir.empty()) eval_loader = std::make_unique<PretrainLoader>(list_shards(o.eval_dir), micro, o.seed, mopt);
  nlohmann::ordered_json last_eval;  // the closing block's eval metrics
  // How often an evaluation saw each held-out sequence: --eval-batches may ask for more batches
  // than the shards hold, and the loader then starts over. Said with the metrics, never hidden.
  struct EvalPass {
    int64_t first = 0, seen = 0;  // sequences in the first pass (all of them once it wrapped), in all
    bool wrapped = false;
    void add(int64_t epoch_before, int64_t rows) {
      seen += rows;
      if (epoch_before == 0) first += rows;
      else wrapped = true;
    }
    std::string note(int64_t micro) const {
      if (!wrapped || first == 0) return "";
      char b[200];
      std::snprintf(b, sizeof b, "; the held-out set's %lld sequences were each seen %.2f times (--eval-batches %lld sees each once)",
                    static_cast<long long>(first), static_cast<double>(seen) / static_cast<double>(first),
                    static_cast<long long>((first + micro - 1) / micro));
      return b;
    }
  };
  auto evaluate_electra = [&]() {
    DataCursor c;
    // One row of sums per batch (zero on the ranks that did not evaluate it), summed in batch order
    // after the all-reduce: the same bits at every world size.
    std::vector<double> rows(static_cast<size_t>(o.eval_batches) * kElectraSums, 0.0);
    ElectraStepOptions so;
    so.disc_weight = static_cast<float>(o.disc_weight);
    EvalPass pass;
    for (int64_t b = 0; b < o.eval_batches; ++b) {
      const int64_t epoch_before = c.epoch;
      const BertBatch batch = eval_loader->next(c);
      pass.add(epoch_before, batch.B);
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
    last_eval = d;
    log->log({st.cursor.epoch, st.step + st.step_offset}, d);
    for (auto it = d.begin(); it != d.end(); ++it)
      tb->scalar("eval/" + it.key().substr(5), it.value().get<float>(), st.step + st.step_offset);
    std::printf("%seval at step %lld: loss %.4f, generator loss %.4f accuracy %.4f, discriminator loss %.4f accuracy "
                "%.4f precision %.4f recall %.4f (%lld masked, %lld replaced%s)\n",
                ::isatty(1) ? "\n" : "", static_cast<long long>(st.step + st.step_offset), d["eval.loss"].get<double>(),
                d["eval.generator_loss"].get<double>(), d["eval.generator_accuracy"].get<double>(),
                d["eval.discriminator_loss"].get<double>(), d["eval.discriminator_accuracy"].get<double>(),
                d["eval.discriminator_precision"].get<double>(), d["eval.discriminator_recall"].get<double>(),
                static_cast<long long>(sums[2]), static_cast<long long>(sums[6]), pass.note(micro).c_str());
    std::fflush(stdout);
  };
  auto evaluate = [&]() {
    if (pm.electra) return evaluate_electra();
    DataCursor c;
    // Per-batch rows {loss, masked, MLM correct, NSP correct, sequences}, zero where another rank
    // evaluated the batch, summed in batch order after the all-reduce (same bits at every world size).
    std::vector<double> rows(static_cast<size_t>(o.eval_batches) * 5, 0.0);
    Rng eval_rng{0, 0};
    EvalPass pass;
    for (int64_t b = 0; b < o.eval_batches; ++b) {
      const int64_t epoch_before = c.epoch;
      const BertBatch batch = eval_loader->next(c);
      pass.add(epoch_before, batch.B);
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
    last_eval = d;
    log->log({st.cursor.epoch, st.step + st.step_offset}, d);
    for (const char* k : {"eval.loss", "eval.mlm_accuracy", "eval.nsp_accuracy"})
      tb->scalar(std::string("eval/") + (k + 5), d[k].get<float>(), st.step + st.step_offset);
    std::printf("%seval at step %lld: loss %.4f, MLM accuracy %.4f, NSP accuracy %.4f (%lld masked tokens%s)\n",
                ::isatty(1) ? "\n" : "", static_cast<long long>(st.step + st.step_offset), d["eval.loss"].get<double>(),
                d["eval.mlm_accuracy"].get<double>(), d["eval.nsp_accuracy"].get<double>(),
                static_cast<long long>(sum.mlm_count), pass.note(micro).c_str());
    std::fflush(stdout);
  };
  const int64_t eval_every = o.eval_freq > 0 ? o.eval_freq : o.num_steps_per_checkpoint;

  signals::take_stop_signals();  // SIGINT/SIGTERM: finish the step, save, return
  dist::Watchdog watchdog(comm, W > 1 ? o.dp.watchdog_timeout : 0);
  LambOptions lamb;
  AdamWOptions adamw;
  const bool tty = lead && ::isatty(1);
  auto t_last = std::chrono::steady_clock::now();
  int64_t skipped_total = 0;
  int64_t bad_run = 0;  // consecutive non-finite steps
  int64_t seqs_since = 0;
  double allreduce_seconds = 0;  // time in the gradient all-reduce since the last log line
  int64_t allreduce_steps = 0;
  // Rank 0 writes checkpoints; with ZeRO-1 every rank first sends it its moments.
  auto save = [&]() {
    watchdog.beat("gathering the moments for a checkpoint", st.step + st.step_offset);
    if (dev && (lead || !shards.empty()))  // ZeRO-1: every rank's part of the moments comes down
      for (const CheckpointPart& p : pm.parts()) {
        if (lead) p.model->params_to_host();
        be.moments_to_host(device_moments(p), *p.opt);
      }
    std::vector<CheckpointPart> parts = pm.parts();
    std::vector<AdamState> full(parts.size());  // ZeRO-1: the full moments, on rank 0
    for (size_t i = 0; i < shards.size(); ++i) {
      full[i] = shards[i]->gather_full(comm, *parts[i].opt);
      parts[i].opt = &full[i];
    }
    watchdog.beat("writing a checkpoint (rank 0)", st.step + st.step_offset, /*paused=*/true);
    if (lead) save_checkpoint(o.output_dir, parts, st, vocab_path, o.keep_checkpoints);
    comm.barrier();  // the other ranks wait here, unwatched, however long the file system takes
    watchdog.beat("after a checkpoint", st.step + st.step_offset);
  };
  // One gradient synchroniser per model. ELECTRA's discriminator receives the generator's share of the
  // embedding gradients after both backward passes, so its buckets are not reduced during backward.
  const std::vector<Bert*> models = pm.all();
  std::vector<std::unique_ptr<GradSync>> syncs;
  // On a device, one DeviceGradSync per model instead (data_parallel.h).
  std::vector<std::unique_ptr<DeviceGradSync>> dsyncs;
  const size_t bucket_elems = static_cast<size_t>(std::max(1.0, o.dp.bucket_cap_mb * 1048576.0 / sizeof(float)));
  if (dev)
    for (Bert* m : models) dsyncs.push_back(std::make_unique<DeviceGradSync>(comm, o.dp, *m, dcomm.get(), !pm.electra));
  else if (!pm.electra)
    syncs.push_back(std::make_unique<GradSync>(comm, o.dp, *model, "pretrain"));
  else
    for (size_t i = 0; i < models.size(); ++i)
      syncs.push_back(std::make_unique<GradSync>(comm, wire, bucket_elems, false));
  // ZeRO-1: each rank receives only its part's gradient sums (a reduce-scatter), updates its part
  // and all-gathers the parameters: a third less traffic than all-reduce + all-gather.
  for (size_t i = 0; i < shards.size() && i < syncs.size(); ++i) syncs[i]->scatter_to(shards[i]->bounds());
  for (size_t i = 0; i < shards.size() && i < dsyncs.size(); ++i) dsyncs[i]->scatter_to(shards[i]->bounds());
  if (lead && dev && (W > 1 || dcomm))
    std::cerr << "pretrain: gradients reduced " << (dcomm ? dcomm->route()
                                                           : std::string("through the host (") + comm.name() + ")")
              << (dcomm && o.dp.allreduce_dtype != "fp32" ? ", " + o.dp.allreduce_dtype + " on the wire" : "")
              << (dsyncs.front()->overlapping()
                      ? ", in buckets of " + (std::ostringstream() << o.dp.bucket_cap_mb).str() + " MB started during backward"
                      : "")
              << "\n";
  bool stopped = false;
  bool memory_checked = false;
  // For the time left and the closing block: this process's steps, sequences and wall time.
  const auto t_run = std::chrono::steady_clock::now();
  const int64_t first_step = st.step;
  int64_t seqs_run = 0;
  double last_loss = NAN;
  while (st.step < o.max_steps) {
    watchdog.beat("loading the step's batches", st.step + st.step_offset);
    DataCursor next_cursor = st.cursor;
    const std::vector<BertBatch> batches = loader.next_step(next_cursor, per_step, R * A, A);
    // One small all-reduce per step: the global masked-token count (the MLM loss is the mean over
    // every masked token of the global batch) and the stop flag (a signal to any rank stops all
    // ranks at the same step).
    // ELECTRA's discriminator loss is the mean over the real tokens: their count too.
    double head[3] = {0, 0, signals::stop_requested() ? 1.0 : 0.0};
    for (const BertBatch& b : batches) {
      b.validate(model->config(), b.source);  // ids, positions, labels in range before they index anything
      for (int32_t label : b.mlm_labels) head[0] += label != -1;
      if (pm.electra)
        for (int32_t m : b.input_mask) head[1] += m != 0;
    }
    watchdog.beat("the step's first all-reduce", st.step + st.step_offset);
    comm.allreduce_sum(head, 3);
    if (head[2] > 0) {
      stopped = true;
      break;
    }
    st.cursor = next_cursor;
    if (!memory_checked && !batches.empty()) {  // the sequence length is the shards'
      if (!dev)  // (a device's allocations say themselves when they do not fit)
        check_training_memory(std::vector<const Bert*>(models.begin(), models.end()), batches[0].B, batches[0].T, prec,
                            "pretrain");
      memory_checked = true;
    }
    const float scale = static_cast<float>(st.loss_scale);
    const float mlm_denom = static_cast<float>(std::max(1.0, head[0]));
    const float nsp_denom = static_cast<float>(global_batch);
    watchdog.beat("forward/backward", st.step + st.step_offset);
    for (Bert* m : models) m->zero_grad();
    // BERT: MLM and NSP cross-entropy sums over this rank's micro-batches; ELECTRA: add_electra's.
    std::vector<double> loss_sums(pm.electra ? kElectraSums : 2, 0.0);
    ElectraStepOptions so;
    so.disc_weight = static_cast<float>(o.disc_weight);
    so.loss_scale = scale;
    so.mlm_denom = mlm_denom;
    so.disc_denom = static_cast<float>(std::max(1.0, head[1]));
    for (int64_t a = 0; a < A; ++a) {
      const BertBatch& batch = batches[static_cast<size_t>(a)];
      Rng rng = micro_batch_rng(o.seed, st.phase, st.step, R * A + a);
      for (size_t i = 0; i < syncs.size(); ++i) syncs[i]->before(a, A, models[i]->grads());
      for (auto& d : dsyncs) d->before(a, A);
      if (pm.electra) {
        add_electra(loss_sums.data(), electra_step(*pm.gen, *model, batch, true, true, prec, rng, so));
      } else {
        const PretrainLoss l = model->pretrain_step(batch, true, true, prec, rng, scale, mlm_denom, nsp_denom);
        loss_sums[0] += l.mlm_loss_sum;
        loss_sums[1] += l.nsp_loss_sum;
      }
      for (size_t i = 0; i < syncs.size(); ++i) syncs[i]->after(a, A, models[i]->grads());
      for (auto& d : dsyncs) d->after(a, A);
      if (lead) seqs_since += batch.B * W;  // for the logged rate
      if (lead) seqs_run += batch.B * W;
    }
    // Gradients reduced once per optimizer step, after accumulation (NVIDIA's
    // allreduce_post_accumulation), in buckets overlapped with the last micro-batch's backward;
    // every rank then holds the same global gradient.
    watchdog.beat("the gradient all-reduce", st.step + st.step_offset);
    for (size_t i = 0; i < syncs.size(); ++i) {
      syncs[i]->finish(A, models[i]->grads());
      allreduce_seconds += syncs[i]->last_wait_seconds();
    }
    for (auto& d : dsyncs) {
      d->finish(A);
      allreduce_seconds += d->last_wait_seconds();
    }
    ++allreduce_steps;
    comm.allreduce_sum(loss_sums.data(), loss_sums.size());
    // BERT: MLM and NSP; ELECTRA: generator MLM and discriminator losses (global means).
    const double mlm_loss = head[0] > 0 ? loss_sums[0] / head[0] : 0.0;
    const double nsp_loss = pm.electra ? loss_sums[1] / std::max(1.0, head[1])
                                       : loss_sums[1] / static_cast<double>(global_batch);
    const double step_loss = pm.electra ? mlm_loss + o.disc_weight * nsp_loss : mlm_loss + nsp_loss;
    // The global gradient norm over every trained model (ELECTRA: one optimizer over both).
    auto grad_norm = [&]() {
      auto norm_of = [&](size_t i) {  // models[i] and shards[i] are the same model (parts() order)
        Bert* m = models[i];
        if (i < shards.size()) return sharded_global_norm(comm, *m, *shards[i]);
        return dev ? be.global_norm(m->grads_on_backend(), m->table().total())
                   : global_norm(m->grads().data(), m->grads().size());
      };
      if (models.size() == 1) return norm_of(0);
      double sq = 0;
      for (size_t i = 0; i < models.size(); ++i) {
        const double n = norm_of(i);
        sq += n * n;
      }
      return std::sqrt(sq);
    };
    // Unscale (fp16 loss scale) and check for inf/NaN: an overflowing step is skipped and, with
    // dynamic scaling, the scale halves; after loss_scale_window clean steps it doubles.
    const double gnorm = grad_norm();
    const bool overflow = !std::isfinite(gnorm) || !std::isfinite(step_loss);
    // NVIDIA's scheduler: the learning rate of optimizer step k uses progress k / max_steps.
    const float lr =
        o.optimizer == "lamb"
            ? poly_warmup_lr(static_cast<float>(o.learning_rate), st.step, o.max_steps, o.warmup_proportion)
            : linear_warmup_lr(static_cast<float>(o.learning_rate), st.step, o.max_steps, o.warmup_proportion);
    if (overflow) {
      ++skipped_total;
      if (lead) {
        if (fp16)
          std::fprintf(stderr, "%spretrain: step %lld: gradient overflow (loss scale %g), step skipped\n",
                       tty ? "\n" : "", static_cast<long long>(st.step + st.step_offset + 1), st.loss_scale);
        else
          std::fprintf(stderr, "%spretrain: step %lld: non-finite loss (%g) or gradient norm (%g), step skipped\n",
                       tty ? "\n" : "", static_cast<long long>(st.step + st.step_offset + 1), step_loss, gnorm);
      }
      // Divergence: too many non-finite steps in a row (with fp16 dynamic scaling, once the scale
      // is down to 1) end the run; the last checkpoint stays the last good state.
      if (!dynamic_scale || st.loss_scale <= 1.0) ++bad_run;
      BERTCC_CHECK(bad_run < o.max_nonfinite_steps, "pretrain: ", bad_run,
                   " consecutive steps with a non-finite loss or gradients (diverged, or non-finite weights); "
                   "stopping without saving: the newest checkpoint in ", o.output_dir,
                   "/checkpoints is the last good state (--max-nonfinite-steps)");
      if (dynamic_scale) st.loss_scale = std::max(1.0, st.loss_scale / 2);
      st.clean_steps = 0;
    } else {
      bad_run = 0;
      const float unscale = static_cast<float>(1.0 / st.loss_scale);
      if (unscale != 1.0f && dev)
        for (Bert* m : models) be.scale(m->grads_on_backend(), static_cast<int64_t>(m->table().total()), unscale);
      else if (unscale != 1.0f)
        for (Bert* m : models)
          for (auto& g : m->grads()) g *= unscale;
      // Without loss scaling, the norm computed for the overflow check serves the optimizer's clipping.
      const double norm = unscale == 1.0f ? gnorm : grad_norm();
      for (const CheckpointPart& p : pm.parts()) {
        Bert& m = *p.model;
        if (dev && o.optimizer == "lamb")
          be.lamb_step(m.table(), m.params_on_backend(), m.grads_on_backend(), device_moments(p), lr, lamb, norm);
        else if (dev)
          be.adamw_step(m.table(), m.params_on_backend(), m.grads_on_backend(), device_moments(p), lr, adamw, norm);
        else if (o.optimizer == "lamb")
          lamb_step(m.table(), m.params().data(), m.grads().data(), *p.opt, lr, lamb, norm);
        else
          adamw_step(m.table(), m.params().data(), m.grads().data(), *p.opt, lr, adamw, norm);
      }
      if (!shards.empty()) {  // every rank updated its own tensors: share them
        watchdog.beat("the ZeRO-1 parameter all-gather", st.step + st.step_offset);
        for (size_t i = 0; i < shards.size(); ++i) shards[i]->allgather_params(comm, dcomm.get(), *models[i]);
      }
      // ELECTRA: the generator's copies of the shared embeddings follow the discriminator's.
      if (pm.electra) electra_share_embeddings(*pm.main, *pm.gen);
      if (dynamic_scale && ++st.clean_steps >= o.loss_scale_window) {
        st.loss_scale *= 2;
        st.clean_steps = 0;
      }
    }
    ++st.step;
    last_loss = step_loss;
    if (lead && (st.step % o.log_freq == 0 || st.step == o.max_steps)) {
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
      log->log({st.cursor.epoch, st.step + st.step_offset}, d);
      for (auto it = d.begin(); it != d.end(); ++it)
        if (it.key() != "skipped_steps" && it.key() != "loss_scale" && it.key() != "allreduce_wait_s")
          tb->scalar("train/" + it.key(), it.value().get<float>(), st.step + st.step_offset);
      char line[240];
      if (pm.electra)
        std::snprintf(line, sizeof line, "step %lld/%lld loss %.4f (gen %.4f acc %.3f, disc %.4f acc %.3f) lr %.3g %.1f seq/s",
                      static_cast<long long>(st.step), static_cast<long long>(o.max_steps), step_loss, mlm_loss,
                      d["generator_accuracy"].get<double>(), nsp_loss, d["discriminator_accuracy"].get<double>(), lr, sps);
      else
        std::snprintf(line, sizeof line, "step %lld/%lld loss %.4f (mlm %.4f nsp %.4f) lr %.3g %.1f seq/s",
                      static_cast<long long>(st.step), static_cast<long long>(o.max_steps), step_loss, mlm_loss,
                      nsp_loss, lr, sps);
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
    if (o.num_steps_per_checkpoint > 0 && st.step % o.num_steps_per_checkpoint == 0 && st.step < o.max_steps) save();
    watchdog.beat("evaluation", st.step + st.step_offset);
    if (eval_loader && eval_every > 0 && st.step % eval_every == 0 && st.step < o.max_steps) evaluate();
  }
  watchdog.beat("the final evaluation and save", st.step + st.step_offset);
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
        for (const auto& [k, v] : last_eval.items()) ev.push_back({k, v.is_number_float() ? fixed(v.get<double>()) : v.dump()});
        out += metrics_block("eval metrics", ev);
      }
      if (st.step >= o.max_steps)
        out += "model written to " + o.output_dir + (pm.electra ? "/discriminator (and generator/)" : "/model") + "\n";
      std::cerr << out;
    }
    std::cerr << (stopped ? "pretrain: stopped by signal after step " : "pretrain: finished at step ") << st.step
              << "; checkpoint in " << o.output_dir << "/checkpoints/step_" << st.step + st.step_offset << "\n";
  }
  comm.barrier();  // no rank exits (and tears MPI down) before rank 0 has saved
  return 0;
}

}  // namespace bertcc
