// NVIDIA's run_pretraining.py as a library: LAMB/AdamW over the flat buffers, poly warm-up
// schedule, gradient accumulation, checkpoints with bit-exact resume, DLLogger JSON lines.
#pragma once
#include <cstdint>
#include <string>

#include "bertcc/dist.h"
#include "bertcc/range_test.h"

namespace bertcc {

struct PretrainOptions {
  std::string config, input_dir, output_dir, init_checkpoint, vocab;
  // "bert" (MLM + NSP) or "electra" (replaced-token detection); empty: the config's model_type.
  std::string model_type;
  // ELECTRA: the generator's config (preset or file); empty = the discriminator's with
  // hidden_size x generator_hidden_size (0 = Google's fraction: 1/4 small and large, 1/3 base),
  // heads hidden / 64, intermediate 4 x hidden, same depth and embeddings.
  std::string generator_config;
  double generator_hidden_size = 0;
  double disc_weight = 50;  // ELECTRA's lambda
  int64_t train_batch_size = 256, gradient_accumulation_steps = 1, max_steps = 1000;
  double learning_rate = 6e-3, warmup_proportion = 0.2843;
  std::string optimizer = "lamb", precision = "auto";
  double loss_scale = 0;             // fp16: 0 = dynamic, > 0 = static; bf16/fp32 use 1
  double init_loss_scale = 65536;    // dynamic scaling starts here (apex's 2^16)
  int64_t loss_scale_window = 2000;  // clean steps before the scale doubles
  int64_t max_predictions_per_seq = 20, num_steps_per_checkpoint = 200, keep_checkpoints = 3, log_freq = 1;
  bool resume_from_checkpoint = false;
  bool trust_unverified_checkpoint = false;  // resume a checkpoint that lacks its checksums
  bool phase2 = false;                       // continue from phase 1: optimizer step and schedule restart
  int64_t phase1_end_step = 0;               // the phase-1 step phase 2 continues from (names/logs add it)
  std::string eval_dir;                      // held-out shards: MLM/NSP accuracy every eval_freq steps and at the end
  int64_t eval_freq = 0;                     // 0: at checkpoints
  int64_t eval_batches = 20;
  int64_t length_binning = 0;  // > 0: sort by length within groups of this many batches
  uint64_t seed = 12345;
  int threads = 0;  // per rank; 0 = the host's cores shared by its ranks
  // cpu | cuda | cuda:N | cpu-staged: where the model, its gradients and the optimizer compute
  std::string device = "cpu";
  dist::Options dp;                  // data parallelism (mpirun/srun)
  int64_t max_nonfinite_steps = 10;  // consecutive skipped non-finite steps that stop the run
  // set: a range test (bertcc lr-find pretrain), not training: the rate of each step is the
  // test's, and no checkpoint, log, evaluation or model is written
  const RangeTest* range_test = nullptr;
};

// Runs (or resumes) pre-training; returns the process exit code. SIGINT/SIGTERM finish the
// current step, save a checkpoint and return 0.
int run_pretraining(const PretrainOptions& o);

}  // namespace bertcc
