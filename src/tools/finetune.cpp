// bertcc finetune glue|classify|ner|squad: NVIDIA's run_glue.py / run_squad.py and the NVAITC
// text-classification recipe as native commands. This file: the shared flags and set-up, GLUE
// (all nine tasks) and CSV/TSV text classification.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "backend/backend.h"
#include "bertcc/dist.h"
#include "bertcc/error.h"
#include "bertcc/fileio.h"
#include "bertcc/glue.h"
#include "bertcc/head_spec.h"
#include "bertcc/inference.h"
#include "bertcc/model_dir.h"
#include "bertcc/parallel.h"
#include "bertcc/runtime.h"
#include "bertcc/text_table.h"
#include "tools/finetune_common.h"
#include "train/progress.h"
#include "train/run.h"

namespace bertcc::tools {
namespace fs = std::filesystem;

void add_ft_flags(CLI::App* sub, FtCli& o) {
  // Under `bertcc lr-find` the same task trains for a range test: no mode, schedule or checkpoints.
  const bool lrf = sub->get_parent() && sub->get_parent()->get_name() == "lr-find";
  if (lrf) {
    o.mode = "train";
    o.lr_find = std::make_shared<LrFindCli>();
    add_lr_find_flags(sub, *o.lr_find);
  } else {
    sub->add_option("--mode", o.mode,
                    "what to do: train, eval, prediction or a combination (\"train eval\", \"train eval prediction\", "
                    "train_and_predict, ...)");
  }
  sub->add_option(flag("--model", {"--init-checkpoint"}), o.init_checkpoint,
                  lrf ? "Hugging Face model directory to start from (only read: the test saves no model)"
                      : "Hugging Face model directory: the pre-trained backbone (train) or the fine-tuned model (eval, "
                        "prediction without train)")
      ->required();
  sub->add_option("--vocab", o.vocab, "vocab.txt (default: the one in --model)");
  sub->add_flag(flag("--do-lower-case"), o.do_lower_case,
                "lower-case and strip accents (default: from the vocabulary)");
  sub->add_flag(flag("--no-lower-case"), o.no_lower_case, "keep case and accents");
  sub->add_option(
      flag("--output-dir"), o.output_dir,
      lrf ? "folder for the curve: lr_find.svg and lr_find.json" : "fine-tuned model, logs, metrics and predictions");
  sub->add_option(flag("--max-seq-length"), o.max_seq_length, "maximum tokens per sequence")
      ->check(in_range(8, 4096, "tokens per sequence"));
  sub->add_option(flag("--train-batch-size"), o.train_batch_size, "sequences per optimizer step")
      ->check(in_range(1, 1 << 20, "sequences per step, split into --gradient-accumulation-steps micro-batches"));
  sub->add_option(flag("--eval-batch-size"), o.eval_batch_size, "sequences per evaluation batch")
      ->check(in_range(1, kMaxBatch, "sequences held in memory at once"));
  sub->add_option(flag("--gradient-accumulation-steps"), o.gradient_accumulation_steps,
                  "micro-batches per step (NVIDIA: the batch is split into this many)")
      ->check(in_range(1, 1 << 20, "micro-batches per step"));
  if (!lrf) {
    sub->add_option(flag("--learning-rate"), o.learning_rate, "peak learning rate (AdamW)")
        ->check(in_range(0, kFloatMax, "a learning rate", true));
    sub->add_option(flag("--num-train-epochs"), o.num_train_epochs, "epochs (fractions allowed)")
        ->check(in_range(0, 1e6, "passes over the training data", true));
    sub->add_option(flag("--max-steps"), o.max_steps, "optimizer steps (overrides --num-train-epochs)")
        ->check(in_range(-1, kMaxSteps, "optimizer steps; -1 = from --num-train-epochs"));
    sub->add_option(flag("--warmup-proportion"), o.warmup_proportion, "fraction of steps of linear warm-up")
        ->check(in_range(0, 1, "a fraction of the steps"));
  }
  sub->add_option(flag("--weight-decay"), o.weight_decay, "AdamW decoupled weight decay (not on biases/LayerNorm)")
      ->check(in_range(0, kFloatMax, "a decay rate"));
  sub->add_option(flag("--max-grad-norm"), o.max_grad_norm, "gradient clipping (global norm; <= 0 disables)")
      ->check(in_range(-kFloatMax, kFloatMax, "a norm; <= 0 disables clipping"));
  sub->add_flag(flag("--no-bias-correction"), o.no_bias_correction,
                "AdamW without bias correction (BertAdam, as NVIDIA's run_squad.py)");
  const std::string auto_help =
      "auto (default: bf16 on a GPU and on a CPU with AVX512-BF16 or AMX, fp32 on other CPUs) | bf16 (fp32 master "
      "weights) | fp32";
  if (lrf)  // the range test trains: no int8
    sub->add_option("--precision", o.precision, auto_help)->check(CLI::IsMember({"auto", "fp32", "bf16"}));
  else
    sub->add_option("--precision", o.precision,
                    auto_help +
                        " | int8 (--mode eval/prediction only, CPU: the encoder's linear layers and word "
                        "embeddings quantized to int8; the rest fp32)")
        ->check(CLI::IsMember({"auto", "fp32", "bf16", "int8"}));
  sub->add_option("--seed", o.seed, "seed for the new head, data order and dropout")
      ->check(in_range(0, kMaxSeed, "a seed"));
  sub->add_option(flag("--freeze-layers"), o.freeze_layers,
                  "train only the top N encoder layers and the head (NVAITC fine_tune_layers); -1 = all")
      ->check(in_range(-1, 1024, "encoder layers (a config has at most 1024); -1 = all"));
  sub->add_option(flag("--layerwise-lr-decay"), o.layerwise_lr_decay,
                  "ELECTRA's layer-wise learning-rate decay (e.g. 0.8): layer l learns at lr x decay^(L + 1 - l), "
                  "the embeddings at lr x decay^(L + 2); 1 = off")
      ->check(in_range(1e-6, 1, "a factor per layer; 1 = off"));
  sub->add_flag(flag("--group-by-length"), o.group_by_length,
                "batches of similar length (Hugging Face's group_by_length: shuffled mega-batches of 50 batches, "
                "each sorted by length, the longest batch first): less padding, faster");
  if (!lrf) {
    sub->add_option(flag("--num-steps-per-checkpoint"), o.num_steps_per_checkpoint,
                    "write OUTPUT/checkpoints/step_N (model, optimizer, step, RNG, best score) every N steps; 0 = "
                    "only when stopped by SIGINT/SIGTERM")
        ->check(in_range(0, kMaxSteps, "steps between checkpoints; 0 = none"));
    sub->add_option(flag("--keep-checkpoints"), o.keep_checkpoints, "checkpoints kept (default 1)")
        ->check(in_range(1, 1 << 20, "checkpoints kept on disk"));
    sub->add_flag(flag("--resume-from-checkpoint"), o.resume,
                  "continue from the newest valid checkpoint in --output-dir (same flags as the interrupted run; "
                  "checksums verified first: a damaged or unverifiable one is skipped with a warning; an error if "
                  "every one is)");
    sub->add_flag(flag("--trust-unverified-checkpoint"), o.trust_unverified_checkpoint,
                  "with --resume-from-checkpoint: also accept a checkpoint without checksums (one written by "
                  "hand or by an old bertcc), with a warning; a checksum that differs is still refused");
    sub->add_option(flag("--log-freq"), o.log_freq, "log every N steps")
        ->check(in_range(1, kMaxSteps, "steps between log lines"));
  }
  sub->add_option("--threads", o.threads, "threads per rank (default: the host's cores / its ranks)")
      ->check(threads_check());
  add_device_flags(sub, o.device);
  if (!lrf) add_int8_flags(sub);
  sub->add_option(flag("--max-nonfinite-steps"), o.max_nonfinite_steps,
                  "stop when this many consecutive steps have a non-finite loss or gradients (default 10)")
      ->check(in_range(1, kMaxSteps, "consecutive steps"));
  add_data_parallel_flags(sub, o.dp);
}

bool is_lead() { return dist::world().rank() == 0; }

FtSetup ft_setup(const FtCli& o) {
  FtSetup s;
  std::string m = o.mode;
  for (const char* sep : {"_and_", ",", "+"})
    for (size_t p; (p = m.find(sep)) != std::string::npos;) m.replace(p, std::string(sep).size(), " ");
  std::istringstream is(m);
  for (std::string w; is >> w;) {
    if (w == "predict" || w == "predictions") w = "prediction";
    if (w == "evaluate" || w == "evaluation") w = "eval";
    BERTCC_CHECK(w == "train" || w == "eval" || w == "prediction", "--mode: unknown word '", w,
                 "' (train, eval, prediction)");
    s.mode.insert(w);
  }
  BERTCC_CHECK(!s.mode.empty(), "--mode is empty");
  if (o.lr_find) check_lr_find(*o.lr_find);
  BERTCC_CHECK(!(s.has("train") && o.output_dir.empty()), "--output-dir is required with --mode train");
  BERTCC_CHECK(!(o.do_lower_case && o.no_lower_case), "--do-lower-case and --no-lower-case contradict each other");
  if (s.has("train"))  // training writes the model files into --output-dir (eval and prediction only add results)
    for (const auto& [in, flag] : {std::pair{o.init_checkpoint, "--model"},
                                   {o.data_dir, "--data-dir"},
                                   {o.train_file, "--train-file"},
                                   {o.predict_file, "--predict-file"},
                                   {o.vocab, "--vocab"}})
      check_output_not_input(o.output_dir, "--output-dir", in, flag);
  if (s.has("train")) check_finetune_options(ft_options(o, s));  // before anything is loaded
  set_threads(threads_per_rank(o.threads, dist::world()));
  Backend& be = backend_for_rank(o.device, dist::world());
  const PrecisionChoice pc = choose_precision(o.precision, be.on_host() ? cpu_report() : CpuReport{}, !be.on_host());
  s.prec = pc.prec;
  BERTCC_CHECK(s.prec != Precision::I8 || !s.has("train"),
               "--precision int8 is for inference (--mode eval, "
               "prediction): train in fp32 or bf16, then evaluate the model in int8");
  if (is_lead() && !pc.why.empty()) std::cerr << pc.why << "\n";
  if (is_lead()) std::cerr << (be.on_host() ? describe_backend(s.prec) : be.describe()) << "\n";
  if (o.vocab.empty()) check_model_dir_for(o.init_checkpoint, Heads::None, "finetune");  // before its vocab.txt
  s.vocab_path = o.vocab.empty() ? join_path(o.init_checkpoint, "vocab.txt") : o.vocab;
  BERTCC_CHECK(file_exists(s.vocab_path), s.vocab_path, ": no vocabulary (pass --vocab)");
  s.vocab = std::make_unique<Vocab>(Vocab::load(s.vocab_path));
  // Default: the model directory's tokenizer_config.json, else guessed from the vocabulary.
  const bool lower = o.do_lower_case   ? true
                     : o.no_lower_case ? false
                                       : model_dir_lower_case(o.vocab.empty() ? o.init_checkpoint : "", *s.vocab);
  s.tok = std::make_unique<BertTokenizer>(*s.vocab, lower);
  if (!o.output_dir.empty() && is_lead()) {
    s.output_made->make(o.output_dir);
    s.lock = std::make_unique<RunLock>(o.output_dir, "--output-dir", o.lr_find ? "lr-find" : "finetune");
  }
  return s;
}

std::unique_ptr<Bert> ft_load_model(const FtCli& o, const FtSetup& s, Heads heads, std::vector<std::string>& labels) {
  std::unique_ptr<Bert> m;
  if (s.has("train")) {
    check_model_dir_for(o.init_checkpoint, Heads::None, "finetune");  // any model: the head is new
    NewHeads nh{labels, o.task_name, o.seed};
    m = load_model_dir(o.init_checkpoint, heads, &nh);
  } else {
    check_model_dir_for(o.init_checkpoint, heads, "finetune --mode " + o.mode);  // evaluating a model of another kind
    m = load_model_dir(o.init_checkpoint, heads);
    const auto& have = m->config().id2label;
    if (labels.empty()) labels = have;
    BERTCC_CHECK(!head_spec(heads).needs_labels || have == labels, o.init_checkpoint,
                 ": the model's labels (config.json id2label) differ from this task's");
  }
  BERTCC_CHECK(m->config().vocab_size >= s.vocab->size(), s.vocab_path, ": vocabulary has ", s.vocab->size(),
               " entries but the model only ", m->config().vocab_size);
  BERTCC_CHECK(o.max_seq_length <= m->config().max_position_embeddings, "--max-seq-length ", o.max_seq_length,
               " exceeds the model's max_position_embeddings ", m->config().max_position_embeddings, " (",
               join_path(o.init_checkpoint, "config.json"), "); pass --max-seq-length ",
               m->config().max_position_embeddings, " or less");
  Backend& be = backend_for_rank(o.device, dist::world());
  if (!be.on_host()) m->use_backend(be);
  return m;
}

FinetuneOptions ft_options(const FtCli& o, const FtSetup& s) {
  FinetuneOptions f;
  f.output_dir = o.output_dir;
  f.vocab_path = s.vocab_path;
  if (s.tok) f.do_lower_case = s.tok->lower_case();
  f.train_batch_size = o.train_batch_size;
  f.gradient_accumulation_steps = o.gradient_accumulation_steps;
  f.max_steps = o.max_steps;
  f.log_freq = o.log_freq;
  f.num_train_epochs = o.num_train_epochs;
  f.warmup_proportion = o.warmup_proportion;
  f.learning_rate = o.learning_rate;
  f.weight_decay = o.weight_decay;
  f.max_grad_norm = o.max_grad_norm;
  f.bias_correction = !o.no_bias_correction;
  f.seed = o.seed;
  f.precision = s.prec;
  f.freeze_layers = o.freeze_layers;
  f.layerwise_lr_decay = o.layerwise_lr_decay;
  f.group_by_length = o.group_by_length;
  f.num_steps_per_checkpoint = o.num_steps_per_checkpoint;
  f.keep_checkpoints = o.keep_checkpoints;
  f.resume = o.resume;
  f.trust_unverified_checkpoint = o.trust_unverified_checkpoint;
  f.dp = o.dp;
  f.max_nonfinite_steps = o.max_nonfinite_steps;
  return f;
}

void print_eval_metrics(const nlohmann::ordered_json& metrics, const std::string& output_dir, bool in_summary) {
  if (!is_lead()) return;
  if (!in_summary || !interactive_terminal(STDOUT_FILENO)) std::cout << metrics.dump() << "\n";
  if (!output_dir.empty()) write_file_atomic(join_path(output_dir, "eval_metrics.json"), metrics.dump(2) + "\n");
}

void record_fine_tuned_length(const std::string& output_dir, int max_seq_length) {
  for (const std::string& dir : {output_dir, join_path(output_dir, "best")}) {
    const std::string path = join_path(dir, "tokenizer_config.json");
    if (!file_exists(path)) continue;
    nlohmann::ordered_json j;
    try {
      j = nlohmann::ordered_json::parse(read_file(path));
    } catch (const nlohmann::json::exception& e) {
      fail(path, ": not valid JSON: ", e.what());
    }
    BERTCC_CHECK(j.is_object(), path, ": expected a JSON object");
    j["model_max_length"] = max_seq_length;
    write_file_atomic(path, j.dump(2) + "\n");
  }
}

int fine_tuned_length(const std::string& model_dir, int positions) {
  const std::string path = join_path(model_dir, "tokenizer_config.json");
  if (!file_exists(path)) return 0;
  try {
    const auto j = nlohmann::json::parse(read_file(path));
    if (j.is_object() && j.contains("model_max_length") && j["model_max_length"].is_number_integer()) {
      const int64_t n = j["model_max_length"].get<int64_t>();
      return n >= 8 && n < positions ? static_cast<int>(n) : 0;
    }
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": not valid JSON: ", e.what());
  }
  return 0;
}

nlohmann::ordered_json final_eval(const FinetuneResult& trained, const Evaluator& eval, Bert& model) {
  if (trained.last_eval.is_object() && trained.last_eval.value("step", int64_t{-1}) == trained.steps)
    return trained.last_eval;
  return eval(model).metrics;
}

namespace {

// ---------------------------------------------------------------------------------------------
// GLUE
// ---------------------------------------------------------------------------------------------
struct GlueSet {
  std::string name, path;  // name: "" or "mm" (MNLI mismatched)
};

// dev/test files: DIR/dev.tsv, or for MNLI DIR/dev_matched.tsv + DIR/dev_mismatched.tsv.
std::vector<GlueSet> glue_sets(const std::string& dir, bool mnli, const std::string& split) {
  std::vector<GlueSet> r;
  if (!mnli) {
    r.push_back(GlueSet{"", join_path(dir, split + ".tsv")});
    return r;
  }
  r.push_back(GlueSet{"", join_path(dir, split + "_matched.tsv")});
  r.push_back(GlueSet{"mm", join_path(dir, split + "_mismatched.tsv")});
  return r;
}

// Sentence (pair) features for GLUE and CSV/TSV classification: labels map to their index in
// `labels`, or to a regression target when `labels` is empty; examples without a label get none.
std::vector<FtFeature> pair_features(const FtSetup& s, const std::vector<GlueExample>& ex,
                                     const std::vector<std::string>& labels, int max_len, const std::string& path) {
  std::map<std::string, int32_t> index;
  for (size_t i = 0; i < labels.size(); ++i) index[labels[i]] = static_cast<int32_t>(i);
  std::vector<FtFeature> f(ex.size());
  ParallelErrors errors;
#pragma omp parallel for schedule(dynamic, 64)
  for (size_t i = 0; i < ex.size(); ++i)
    errors.run(i, [&, i] { f[i] = encode_pair(*s.tok, ex[i].text_a, ex[i].text_b, max_len); });
  errors.rethrow();
  for (size_t i = 0; i < ex.size(); ++i) {
    if (ex[i].label.empty()) continue;
    if (labels.empty()) {
      try {
        f[i].target = std::stof(ex[i].label);
      } catch (...) {
        fail(path, ": example ", i + 1, ": label '", ex[i].label, "' is not a number");
      }
    } else {
      auto it = index.find(ex[i].label);
      BERTCC_CHECK(it != index.end(), path, ": example ", i + 1, ": unknown label '", ex[i].label, "'");
      f[i].label = it->second;
    }
  }
  return f;
}

// Predicted label names (regression: the score) for each feature.
// Each row's label (regression: its value, 9 digits)
std::vector<std::string> cls_labels_of(const std::vector<std::vector<float>>& logits,
                                       const std::vector<std::string>& labels) {
  std::vector<std::string> out;
  for (const auto& l : logits) {
    if (labels.empty()) {
      std::ostringstream ss;
      ss << std::setprecision(9) << l[0];
      out.push_back(ss.str());
    } else {
      out.push_back(labels[static_cast<size_t>(argmax(l))]);
    }
  }
  return out;
}

std::vector<std::string> glue_predict(Bert& m, const std::vector<FtFeature>& f, const std::vector<std::string>& labels,
                                      const FtCli& o, Precision prec) {
  return cls_labels_of(predict_logits(m, f, o.eval_batch_size, prec), labels);
}

void run_glue(const FtCli& o) {
  FtSetup s = ft_setup(o);
  BERTCC_CHECK(!o.task_name.empty(), "--task-name is required (cola, sst-2, mrpc, sts-b, qqp, mnli, qnli, rte, wnli)");
  BERTCC_CHECK(!o.data_dir.empty(), "--data-dir is required (the task's GLUE folder)");
  const std::string task = glue_task(o.task_name);
  std::vector<std::string> labels = glue_labels(task);
  std::vector<std::string> model_labels = labels.empty() ? std::vector<std::string>{"LABEL_0"} : labels;
  FtCli oo = o;
  oo.task_name = task;
  auto model = ft_load_model(oo, s, Heads::SequenceClassification, model_labels);
  const bool mnli = task == "mnli";
  const std::vector<GlueSet> dev = glue_sets(o.data_dir, mnli, "dev");
  struct DevData {
    std::string name;
    std::vector<std::string> gold;
    std::vector<FtFeature> f;
  };
  std::vector<DevData> devs;
  if (s.has("eval") || s.has("train")) {
    for (const auto& d : dev) {
      if (!s.has("eval") && !file_exists(d.path)) continue;
      const auto ex = read_glue(task, d.path);
      DevData dd{d.name, {}, pair_features(s, ex, labels, o.max_seq_length, d.path)};
      for (const auto& e : ex) {
        BERTCC_CHECK(!e.label.empty(), d.path, ": the dev file has no labels");
        dd.gold.push_back(e.label);
      }
      devs.push_back(std::move(dd));
    }
  }
  const std::string primary = glue_primary_metric(task);
  Evaluator eval = [&](Bert& m) {
    EvalResult r;
    r.metrics["task"] = task;
    for (const auto& d : devs) {
      const auto pred = glue_predict(m, d.f, labels, o, s.prec);
      const auto mt = glue_metrics(task, pred, d.gold);
      for (auto it = mt.begin(); it != mt.end(); ++it)
        r.metrics[(d.name.empty() ? "" : d.name + "_") + it.key()] = it.value();
      r.metrics[(d.name.empty() ? "" : d.name + "_") + std::string("examples")] = d.gold.size();
    }
    r.score = r.metrics.contains(primary) ? r.metrics[primary].get<double>() : 0.0;
    return r;
  };
  FinetuneResult trained;
  if (s.has("train")) {
    const std::string train_path = o.train_file.empty() ? join_path(o.data_dir, "train.tsv") : o.train_file;
    const auto ex = read_glue(task, train_path);
    for (size_t i = 0; i < ex.size(); ++i)
      BERTCC_CHECK(!ex[i].label.empty(), train_path, ": example ", i + 1, " has no label");
    const auto train = pair_features(s, ex, labels, o.max_seq_length, train_path);
    std::cerr << "GLUE " << task << ": " << train.size() << " training examples, " << labels.size() << " labels\n";
    trained = finetune_or_find(*model, train, devs.empty() ? Evaluator{} : eval, o, s);
    if (trained.stopped) return;
  }
  if (s.has("eval")) print_eval_metrics(final_eval(trained, eval, *model), o.output_dir, trained.last_eval.is_object());
  if (s.has("prediction")) {
    BERTCC_CHECK(!o.output_dir.empty(), "--output-dir is required with --mode prediction");
    const std::vector<GlueSet> test = glue_sets(o.data_dir, mnli, "test");
    for (const auto& t : test) {
      const auto ex = read_glue(task, t.path, GlueSplit::Test);
      const auto pred = glue_predict(*model, pair_features(s, ex, {}, o.max_seq_length, t.path), labels, o, s.prec);
      std::string out = "index\tprediction\n";
      for (size_t i = 0; i < pred.size(); ++i) {
        std::string p = pred[i];
        if (labels.empty()) {  // STS-B: clip to [0, 5], 3 decimals
          std::ostringstream ss;
          ss << std::fixed << std::setprecision(3) << std::clamp(std::stod(p), 0.0, 5.0);
          p = ss.str();
        }
        out += std::to_string(i) + "\t" + p + "\n";
      }
      const std::string path = join_path(o.output_dir, glue_submission_name(task, t.name == "mm") + ".tsv");
      if (is_lead()) write_file_atomic(path, out);
      std::cerr << "wrote " << pred.size() << " predictions to " << path << "\n";
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Text classification from CSV/TSV
// ---------------------------------------------------------------------------------------------
struct ClsCli {
  std::string label_column = "0";              // a 0-based number or a column name
  std::vector<std::string> text_columns{"1"};  // the same
  bool skip_header = false;
  bool columns_given = false;            // --label-column or --text-columns on the command line
  std::vector<std::string> label_names;  // --label-names
};

// A classification file read: the examples, where each came from, and its columns.
struct ClsData {
  std::vector<GlueExample> ex;
  std::vector<int64_t> lines;
  std::vector<TableRow> rows;
  TableColumns cols;
  std::string path;
};

std::string clip_for_message(const std::string& s) {
  if (s.size() <= 40) return s;
  size_t n = 40;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;  // not inside a UTF-8 character
  return s.substr(0, n) + "\u2026";
}

// What to pass instead: the column whose cells are all `labels` (by name when the file has names).
std::string label_column_hint(const ClsData& d, const std::vector<std::string>& labels) {
  std::set<std::string> known(labels.begin(), labels.end());
  const size_t first = d.cols.header ? 1 : 0;
  for (size_t col = 0; !known.empty() && first < d.rows.size() && col < d.rows[first].cols.size(); ++col) {
    if (static_cast<int>(col) == d.cols.label) continue;
    bool all = true;
    for (size_t i = first; all && i < d.rows.size(); ++i)
      all = col < d.rows[i].cols.size() && known.count(d.rows[i].cols[col]);
    if (all) {
      const bool named = col < d.cols.names.size() && !d.cols.names[col].empty();
      return "pass --label-column " + (named ? d.cols.names[col] : std::to_string(col));
    }
  }
  return d.cols.header ? "pass --label-column with the label column's name or number"
                       : "pass --label-column with the label column's number, or --skip-header";
}

// Rows as (text_a, text_b, label) examples; labels are kept only when `need_labels`. Columns by
// number or name (resolve_table_columns: the header rule); `known`: the labels the header test
// compares the first row's label cell with (empty: the other rows').
ClsData read_cls(const std::string& path, const ClsCli& c, bool need_labels, const std::vector<std::string>& known) {
  ClsData d;
  d.path = path;
  std::vector<std::string> keys;
  d.rows = is_json_lines(path) ? read_json_lines(path, keys) : read_table(path, delimiter_for(path));
  // No columns given: a file whose header (or JSON keys) has Hugging Face's names is read by them
  // (a labelled file needs its "label" column too), else columns 0 (label) and 1 (text).
  std::string label = c.label_column;
  std::vector<std::string> texts = c.text_columns;
  std::string hf_label;
  std::vector<std::string> hf_texts;
  if (!c.columns_given && hf_named_columns(d.rows, keys, hf_label, hf_texts) && (!hf_label.empty() || !need_labels)) {
    label = hf_label;
    texts = hf_texts;
    if (is_lead()) {
      std::string t;
      for (const auto& x : texts) t += (t.empty() ? "" : ",") + x;
      std::cerr << "note: " << path << ": columns by their names: text " << t
                << (hf_label.empty() ? "" : ", label " + hf_label)
                << " (--label-column/--text-columns choose others)\n";
    }
  }
  d.cols = resolve_table_columns(d.rows, keys, path, label, texts, c.skip_header, known);
  const TableColumns& tc = d.cols;
  if (tc.header && !c.skip_header && is_lead() && keys.empty())
    std::cerr << "note: " << path << ":" << d.rows[0].line << ": the first row (" << describe_table_columns(d.rows, tc)
              << ") is read as a header\n";
  int max_col = tc.label;
  for (int t : tc.text) max_col = std::max(max_col, t);
  for (size_t i = tc.header ? 1 : 0; i < d.rows.size(); ++i) {
    const auto& r = d.rows[i];
    const bool has_label = static_cast<int>(r.cols.size()) > tc.label && tc.label >= 0;
    BERTCC_CHECK(static_cast<int>(r.cols.size()) > max_col || (!need_labels && !has_label), path, ":", r.line,
                 ": expected at least ", max_col + 1, " columns, found ", r.cols.size(), " (",
                 describe_table_columns(d.rows, tc), ")");
    GlueExample e;
    e.text_a = r.cols[static_cast<size_t>(tc.text[0])];
    if (tc.text.size() > 1) e.text_b = r.cols[static_cast<size_t>(tc.text[1])];
    if (need_labels) {
      e.label = r.cols[static_cast<size_t>(tc.label)];
      BERTCC_CHECK(!e.label.empty(), path, ":", r.line, ": empty label in column ", tc.label, " (",
                   describe_table_columns(d.rows, tc), ")");
    }
    d.ex.push_back(std::move(e));
    d.lines.push_back(r.line);
  }
  BERTCC_CHECK(!d.ex.empty(), path, ": no examples");
  return d;
}

// Every label of `d` is one of `labels`, or an error naming the line, the column and the fix.
void check_cls_labels(const ClsData& d, const std::vector<std::string>& labels) {
  const std::set<std::string> known(labels.begin(), labels.end());
  for (size_t i = 0; i < d.ex.size(); ++i) {
    if (known.count(d.ex[i].label)) continue;
    std::string have;
    for (size_t k = 0; k < labels.size() && k < 8; ++k) have += (k ? ", " : "") + clip_for_message(labels[k]);
    if (labels.size() > 8) have += ", ...";
    fail("unknown label '", clip_for_message(d.ex[i].label), "' in column ", d.cols.label, " of ", d.path, " line ",
         d.lines[i], " (the model's labels: ", have, "); ", describe_table_columns(d.rows, d.cols), " \u2014 ",
         label_column_hint(d, labels));
  }
}

std::vector<std::string> sorted_labels(const std::vector<GlueExample>& ex) {
  std::vector<std::string> u;
  for (const auto& e : ex) u.push_back(e.label);
  std::sort(u.begin(), u.end());
  u.erase(std::unique(u.begin(), u.end()), u.end());
  const bool numeric = std::all_of(u.begin(), u.end(), [](const std::string& s) {
    return !s.empty() && s.size() < 18 &&
           std::all_of(s.begin(), s.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
  });
  if (numeric)
    std::sort(u.begin(), u.end(),
              [](const std::string& x, const std::string& y) { return std::stoll(x) < std::stoll(y); });
  return u;
}

nlohmann::ordered_json cls_metrics(const std::vector<std::string>& pred, const std::vector<std::string>& gold,
                                   const std::vector<std::string>& labels) {
  nlohmann::ordered_json r;
  r["acc"] = glue_accuracy(pred, gold);
  double f1_sum = 0;
  for (const auto& l : labels) f1_sum += glue_f1(pred, gold, l);
  r["macro_f1"] = f1_sum / static_cast<double>(labels.size());
  r["examples"] = gold.size();
  return r;
}

// --label-names: NAME,... names the training labels in their sorted order (AG News' 1..4:
// World,Sports,Business,Sci/Tech); RAW=NAME,... names each label value, in any file. {} without it.
std::map<std::string, std::string> label_name_map(const std::vector<std::string>& spec,
                                                  const std::vector<std::string>& sorted_raw) {
  std::map<std::string, std::string> m;
  if (spec.empty()) return m;
  const bool pairs = spec[0].find('=') != std::string::npos;
  std::set<std::string> seen;
  for (size_t i = 0; i < spec.size(); ++i) {
    const size_t eq = spec[i].find('=');
    BERTCC_CHECK((eq != std::string::npos) == pairs,
                 "--label-names: give NAME,NAME,... or RAW=NAME,RAW=NAME,..., not both ('", spec[i], "')");
    const std::string raw = pairs ? spec[i].substr(0, eq) : "", name = pairs ? spec[i].substr(eq + 1) : spec[i];
    BERTCC_CHECK(!name.empty() && seen.insert(name).second, "--label-names: the name '", name,
                 "' is empty or repeated");
    if (pairs) m[raw] = name;
  }
  if (pairs) return m;
  BERTCC_CHECK(!sorted_raw.empty(),
               "--label-names NAME,...: the names follow the training labels' order; to name the "
               "labels of a file without training, give RAW=NAME,...");
  BERTCC_CHECK(spec.size() == sorted_raw.size(), "--label-names gives ", spec.size(), " names for the ",
               sorted_raw.size(), " training labels (", sorted_raw.front(), " .. ", sorted_raw.back(), ")");
  for (size_t i = 0; i < spec.size(); ++i) m[sorted_raw[i]] = spec[i];
  return m;
}

void rename_labels(std::vector<GlueExample>& ex, const std::map<std::string, std::string>& names) {
  for (auto& e : ex)
    if (const auto it = names.find(e.label); it != names.end()) e.label = it->second;
}

void run_classify(const FtCli& o, const ClsCli& c) {
  FtSetup s = ft_setup(o);
  BERTCC_CHECK(c.text_columns.size() == 1 || c.text_columns.size() == 2, "--text-columns takes one or two columns");
  BERTCC_CHECK(!c.label_column.empty() && std::none_of(c.text_columns.begin(), c.text_columns.end(),
                                                       [](const std::string& v) { return v.empty(); }),
               "--label-column and --text-columns are 0-based column numbers or column names");
  std::vector<GlueExample> train;
  std::vector<std::string> labels;
  if (s.has("train")) {
    BERTCC_CHECK(!o.train_file.empty(), "--train-file is required with --mode train");
    ClsData td = read_cls(o.train_file, c, true, {});
    labels = sorted_labels(td.ex);
    BERTCC_CHECK(labels.size() >= 2, o.train_file, ": needs at least two distinct labels (column ", td.cols.label,
                 " holds only '", clip_for_message(labels.front()), "'; ", describe_table_columns(td.rows, td.cols),
                 ")");
    // Nearly one label per example: the label column is most likely a text column.
    BERTCC_CHECK(labels.size() <= 20 || labels.size() * 2 <= td.ex.size(), o.train_file, ": column ", td.cols.label,
                 " has ", labels.size(), " distinct labels in ", td.ex.size(), " examples (e.g. '",
                 clip_for_message(td.ex[0].label), "'): is it a text column? ",
                 describe_table_columns(td.rows, td.cols),
                 " \u2014 pass --label-column with the label column's name or number");
    train = std::move(td.ex);
  }
  // the model's id2label: the names, in the raw labels' order
  const auto names = label_name_map(c.label_names, labels);
  std::vector<std::string> raw = labels;
  for (const auto& [r, n] : names) raw.push_back(r);
  rename_labels(train, names);
  for (auto& l : labels)
    if (names.count(l)) l = names.at(l);
  auto model = ft_load_model(o, s, Heads::SequenceClassification, labels);
  std::vector<GlueExample> dev;
  std::vector<std::string> gold;
  std::vector<FtFeature> dev_f;
  if (s.has("eval")) {
    BERTCC_CHECK(!o.predict_file.empty(), "--predict-file (labelled evaluation data) is required with --mode eval");
    ClsData dd = read_cls(o.predict_file, c, true, raw.empty() ? labels : raw);
    rename_labels(dd.ex, names);
    check_cls_labels(dd, labels);
    dev = std::move(dd.ex);
    for (const auto& e : dev) gold.push_back(e.label);
    dev_f = pair_features(s, dev, labels, o.max_seq_length, o.predict_file);
  }
  // the last evaluation's logits: the predictions of --predict-file when nothing trained since
  std::vector<std::vector<float>> dev_logits;
  Evaluator eval = [&](Bert& m) {
    EvalResult r;
    dev_logits = predict_logits(m, dev_f, o.eval_batch_size, s.prec);
    r.metrics = cls_metrics(cls_labels_of(dev_logits, labels), gold, labels);
    r.score = r.metrics["acc"].get<double>();
    return r;
  };
  FinetuneResult trained;
  if (s.has("train")) {
    const auto tf = pair_features(s, train, labels, o.max_seq_length, o.train_file);
    std::cerr << "classify: " << tf.size() << " training examples, labels:";
    for (const auto& l : labels) std::cerr << " " << l;
    std::cerr << "\n";
    trained = finetune_or_find(*model, tf, s.has("eval") ? eval : Evaluator{}, o, s);
    if (trained.stopped) return;
  }
  if (s.has("eval")) print_eval_metrics(final_eval(trained, eval, *model), o.output_dir, trained.last_eval.is_object());
  if (s.has("prediction")) {
    BERTCC_CHECK(!o.predict_file.empty() && !o.output_dir.empty(),
                 "--predict-file and --output-dir are required with --mode prediction");
    // with eval, the evaluation of the final model has just predicted --predict-file
    const auto logits = dev.empty() ? predict_logits(*model,
                                                     pair_features(s, read_cls(o.predict_file, c, false, labels).ex,
                                                                   labels, o.max_seq_length, o.predict_file),
                                                     o.eval_batch_size, s.prec)
                                    : dev_logits;
    std::string out = "index\tprediction\tprobability\n";
    for (size_t i = 0; i < logits.size(); ++i) {
      const auto& l = logits[i];
      const int k = argmax(l);
      double z = 0;
      for (float v : l) z += std::exp(static_cast<double>(v - l[static_cast<size_t>(k)]));
      std::ostringstream ss;
      ss << i << "\t" << labels[static_cast<size_t>(k)] << "\t" << std::setprecision(6) << 1.0 / z << "\n";
      out += ss.str();
    }
    if (is_lead()) write_file_atomic(join_path(o.output_dir, "predictions.tsv"), out);
    std::cerr << "wrote " << logits.size() << " predictions to " << join_path(o.output_dir, "predictions.tsv") << "\n";
  }
}

}  // namespace

void add_finetune_glue_classify(CLI::App* ft) {
  auto o = std::make_shared<FtCli>();
  auto* g = ft->add_subcommand("glue",
                               "GLUE (CoLA, SST-2, MRPC, STS-B, QQP, MNLI, QNLI, RTE, WNLI): train on "
                               "train.tsv, evaluate on dev.tsv, predict test.tsv in the submission format");
  add_ft_flags(g, *o);
  g->add_option(flag("--task-name"), o->task_name, "cola, sst-2, mrpc, sts-b, qqp, mnli, qnli, rte, wnli")->required();
  g->add_option(flag("--data-dir"), o->data_dir, "the task's GLUE folder (train.tsv, dev.tsv, test.tsv)")->required();
  g->add_option(flag("--train-file"), o->train_file, "training TSV (default: DATA_DIR/train.tsv)");
  g->callback([o]() { run_glue(*o); });

  auto oc = std::make_shared<FtCli>();
  auto cc = std::make_shared<ClsCli>();
  auto* c = ft->add_subcommand("classify",
                               "text classification from CSV (RFC 4180 quotes) or TSV: a label column and one or two "
                               "text columns (AG News: --label-column 0 --text-columns 1,2)");
  add_ft_flags(c, *oc);
  c->add_option(flag("--train-file"), oc->train_file, "labelled training data (.csv or .tsv)");
  c->add_option(flag("--predict-file"), oc->predict_file, "evaluation (eval: labelled) or prediction data");
  c->add_option(flag("--label-column"), cc->label_column,
                "the label column: a 0-based number or a header name (default: the column named label when "
                "the file names its columns as Hugging Face's files do, else 0)");
  c->add_option(flag("--text-columns") + "," + flag("--text-column"), cc->text_columns,
                "text column(s), one or two: 0-based numbers or header names (default: the columns named "
                "sentence1,sentence2, text or sentence, else 1)")
      ->delimiter(',');
  c->add_flag(flag("--skip-header"), cc->skip_header,
              "the first row is a header (implied when a column is given by name; detected when its label cell is "
              "no label and its cells are names)");
  c->add_option(flag("--label-names"), cc->label_names,
                "names for the labels, the model's id2label: NAME,... in the training labels' sorted order (AG News: "
                "World,Sports,Business,Sci/Tech for 1..4), or RAW=NAME,... (also for eval and prediction files)")
      ->delimiter(',');
  c->callback([oc, cc, c]() {
    cc->columns_given = c->get_option("--label-column")->count() + c->get_option("--text-columns")->count() > 0;
    run_classify(*oc, *cc);
  });
}

void add_finetune(CLI::App& app) {
  auto* ft = app.add_subcommand("finetune", "fine-tune and evaluate: glue, classify, ner, squad");
  ft->require_subcommand(1);
  add_finetune_glue_classify(ft);
  add_finetune_ner(ft);
  add_finetune_squad(ft);
}

}  // namespace bertcc::tools
