// Fine-tuning: the training loop (AdamW with bias correction, linear warm-up and decay, gradient
// clipping, accumulation, dropout, frozen lower layers, evaluation after each epoch, best model
// kept) and the epochs' order. Task code (GLUE, classification, NER, SQuAD) builds the features (features.h)
// and scores the predictions (inference.h).
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "bertcc/bert.h"
#include "bertcc/dist.h"
#include "bertcc/features.h"
#include "bertcc/range_test.h"

namespace bertcc {

// Hugging Face's LengthGroupedSampler applied to a shuffled order: consecutive mega-batches of
// min(n / (4 * batch_size), 50) batches (at least one), each sorted by length, longest first
// (stable), then the first element of the mega-batch holding the longest example swapped with the
// first element of the first mega-batch, so the largest batch comes first.
std::vector<size_t> length_grouped_order(const std::vector<size_t>& shuffled, const std::vector<size_t>& lengths,
                                         int64_t batch_size);

struct EvalResult {
  nlohmann::ordered_json metrics;  // printed and logged
  double score = 0;                // higher is better; decides the best model
};
using Evaluator = std::function<EvalResult(Bert& model)>;

struct FinetuneOptions {
  std::string output_dir, vocab_path;
  std::optional<bool> do_lower_case;  // written to the saved models' tokenizer_config.json
  int64_t train_batch_size = 32, gradient_accumulation_steps = 1, max_steps = -1, log_freq = 50;
  double num_train_epochs = 3.0, warmup_proportion = 0.1;
  float learning_rate = 5e-5f, weight_decay = 0.01f, max_grad_norm = 1.0f, adam_eps = 1e-6f;
  bool bias_correction = true;
  uint64_t seed = 42;
  Precision precision = Precision::BF16;
  int freeze_layers = -1;           // train only the top N encoder layers (-1 = all)
  double layerwise_lr_decay = 1.0;  // ELECTRA's per-layer learning-rate decay (1 = off)
  bool group_by_length = false;     // length_grouped_order on each epoch's shuffle
  // Checkpoints (OUTPUT/checkpoints/step_N: model, AdamW moments, step, RNG, best score) every N
  // steps (0: none) and on SIGINT/SIGTERM; `resume` continues from the newest valid one.
  int64_t num_steps_per_checkpoint = 0, keep_checkpoints = 1;
  bool resume = false;
  bool trust_unverified_checkpoint = false;  // with resume: accept a checkpoint without checksums
  dist::Options dp;                          // data parallelism (mpirun/srun)
  int64_t max_nonfinite_steps = 10;          // consecutive skipped non-finite steps that stop the run
  bool quiet = false;
  const RangeTest* range_test = nullptr;  // set: a range test, not training (bertcc lr-find)
};

struct FinetuneResult {
  nlohmann::ordered_json last_eval, best_eval;
  int64_t steps = 0;
  double seconds = 0, train_seq_per_s = 0;
  bool stopped = false;  // by SIGINT/SIGTERM: a checkpoint was written, no final model
};

// Throws, naming the flag and the value, on a hyper-parameter that is not finite or out of its
// range (run_finetune calls it first; the CLI calls it before loading anything).
void check_finetune_options(const FinetuneOptions& o);

// Trains `model` on `train`; after each epoch runs `eval` (if set) and keeps the best model in
// output_dir/best. The final model goes to output_dir (HF layout + vocab.txt), the log to
// output_dir/dllogger.json and the metrics to output_dir/eval_results.json.
FinetuneResult run_finetune(Bert& model, const std::vector<FtFeature>& train, const Evaluator& eval,
                            const FinetuneOptions& o);

}  // namespace bertcc
