// Shared pieces of `bertcc finetune <task>`: NVIDIA-style flags, --mode parsing, model loading
// for training (new head) or evaluation (a fine-tuned model), tokenizer set-up.
#pragma once
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "bertcc/finetune.h"
#include "bertcc/run_lock.h"
#include "bertcc/tokenizer.h"
#include "tools/cli_common.h"

namespace bertcc::tools {

// bertcc lr-find's own flags (fastai's lr_find defaults).
struct LrFindCli {
  double start_lr = 1e-7, end_lr = 10, smoothing = 0.98, diverge_factor = 4;
  int64_t num_steps = 100;
};

struct FtCli {
  std::string mode = "train eval", init_checkpoint, vocab, data_dir, train_file, predict_file, task_name, output_dir,
              precision = "auto", device = "cpu";
  bool do_lower_case = false, no_lower_case = false, no_bias_correction = false, group_by_length = false;
  bool resume = false;
  bool trust_unverified_checkpoint = false;
  int64_t num_steps_per_checkpoint = 0, keep_checkpoints = 1;
  int max_seq_length = 128, threads = 0, freeze_layers = -1;
  double layerwise_lr_decay = 1.0;
  int64_t train_batch_size = 32, eval_batch_size = 64, gradient_accumulation_steps = 1, max_steps = -1, log_freq = 50;
  double num_train_epochs = 3.0, warmup_proportion = 0.1;
  float learning_rate = 5e-5f, weight_decay = 0.01f, max_grad_norm = 1.0f;
  uint64_t seed = 42;
  int64_t max_nonfinite_steps = 10;
  dist::Options dp;
  std::shared_ptr<LrFindCli> lr_find;  // set under `bertcc lr-find`: a range test instead of training
};

// Rank 0 of a data-parallel job (or the only process): the one that writes files and prints results.
bool is_lead();

// Adds the common flags to `sub`, bound to `o`.
void add_ft_flags(CLI::App* sub, FtCli& o);

struct FtSetup {
  std::set<std::string> mode;  // train, eval, prediction
  Precision prec = Precision::BF16;
  std::string vocab_path;
  std::unique_ptr<Vocab> vocab;
  std::unique_ptr<BertTokenizer> tok;
  // --output-dir, when this run made it: removed again if the run is refused (it is empty then)
  std::unique_ptr<FoldersMade> output_made = std::make_unique<FoldersMade>();
  // --output-dir held by this run alone (after output_made: released before an empty folder is removed)
  std::unique_ptr<RunLock> lock;
  bool has(const char* m) const { return mode.count(m) > 0; }
};
FtSetup ft_setup(const FtCli& o);

// Training: the --init-checkpoint backbone with a new head for `labels`. Otherwise: the fine-tuned
// model in --init-checkpoint, whose labels must equal `labels` (unless `labels` is empty: taken
// from the model).
std::unique_ptr<Bert> ft_load_model(const FtCli& o, const FtSetup& s, Heads heads, std::vector<std::string>& labels);
FinetuneOptions ft_options(const FtCli& o, const FtSetup& s);

// Training (run_finetune), or under `bertcc lr-find` the range test, which writes
// OUTPUT/lr_find.{json,svg}, prints the suggested rate and returns a result marked stopped.
FinetuneResult finetune_or_find(Bert& model, const std::vector<FtFeature>& train, const Evaluator& eval, const FtCli& o,
                                const FtSetup& s);
void add_lr_find_flags(CLI::App* sub, LrFindCli& f);
// Throws, naming the flag, on a rate range that is not one (before anything is loaded).
void check_lr_find(const LrFindCli& f);

// Prints the metrics as one JSON line and writes OUTPUT_DIR/eval_metrics.json (if an output dir is
// set). `in_summary`: the training summary on the terminal has just shown them, so the line goes
// only to a stdout that is not a terminal (a file or a pipe, for scripts).
void print_eval_metrics(const nlohmann::ordered_json& metrics, const std::string& output_dir, bool in_summary = false);

// The length a model was fine-tuned at, as Hugging Face records it: tokenizer_config.json's
// model_max_length in OUTPUT (and OUTPUT/best), rewritten after training (a run saves the
// position table's size there). fine_tuned_length: that length when below `positions`, else 0.
void record_fine_tuned_length(const std::string& output_dir, int max_seq_length);
int fine_tuned_length(const std::string& model_dir, int positions);

// The final model's metrics: the evaluation at the end of the training run `trained` when it made
// one (on these weights), else a new evaluation. One pass over the evaluation data either way.
nlohmann::ordered_json final_eval(const FinetuneResult& trained, const Evaluator& eval, Bert& model);

void add_finetune_glue_classify(CLI::App* ft);
void add_finetune_ner(CLI::App* ft);
void add_finetune_squad(CLI::App* ft);

}  // namespace bertcc::tools
