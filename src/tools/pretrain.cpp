// bertcc pretrain: NVIDIA's run_pretraining.py flags in dash form (underscore aliases accepted).
#include "backend/backend.h"
#include "bertcc/trainer.h"
#include "tools/cli_common.h"

namespace bertcc::tools {

// range_test (lr-find pretrain): the flags of the model, data and step only; the rate, schedule,
// checkpoints, evaluation and logs are the test's or absent.
void add_pretrain_flags(CLI::App* sub, PretrainOptions& opt, bool range_test) {
  PretrainOptions* o = &opt;
  sub->add_option(flag("--config"), o->config,
                  "required: a preset (bert-tiny|mini|small|medium|base|large, electra-small|base|large) or a "
                  "config.json; not needed with --model (ignored) or when resuming a checkpoint in --output-dir");
  sub->add_option(flag("--model-type"), o->model_type,
                  "bert | electra (default: the config's model_type; electra presets are electra)")
      ->check(CLI::IsMember({"bert", "electra"}));
  sub->add_option(flag("--generator-config"), o->generator_config,
                  "ELECTRA: the generator's preset or config.json (default: from --generator-hidden-size)");
  sub->add_option(flag("--generator-hidden-size"), o->generator_hidden_size,
                  "ELECTRA: generator hidden size as a fraction of the discriminator's (default: Google's, 1/4 small "
                  "and large, 1/3 base)")
      ->check(in_range(0, 1, "a fraction of the discriminator's hidden size; 0 = Google's"));
  sub->add_option(flag("--disc-weight"), o->disc_weight, "ELECTRA: discriminator loss weight lambda (default 50)")
      ->check(in_range(0, kFloatMax, "a loss weight"));
  sub->add_option(flag("--input-dir"), o->input_dir, "folder of HDF5 shards (NVIDIA layout or dynamic-masking)")
      ->required();
  sub->add_option(flag("--output-dir"), o->output_dir,
                  range_test ? "folder for the curve: lr_find.svg and lr_find.json"
                             : "output folder (checkpoints/, model/ — ELECTRA: discriminator/ and generator/ —, "
                               "dllogger.json)")
      ->required();
  sub->add_option(flag("--model", {"--init-checkpoint"}), o->init_checkpoint,
                  "HF model directory to start from (NVIDIA's --init-checkpoint) (ELECTRA: a folder with "
                  "discriminator/ and generator/)");
  sub->add_option(flag("--vocab"), o->vocab,
                  "required: the vocab.txt the shards were made with (sets the vocabulary size; copied into every "
                  "model directory written); default: the vocab.txt of --model or of the checkpoint resumed");
  sub->add_option(flag("--train-batch-size"), o->train_batch_size, "sequences per optimizer step (default 256)")
      ->check(in_range(1, 1 << 20, "sequences per step, split into --gradient-accumulation-steps micro-batches"));
  sub->add_option(flag("--gradient-accumulation-steps"), o->gradient_accumulation_steps,
                  "micro-batches per step; each is train-batch-size / this (NVIDIA semantics)")
      ->check(in_range(1, 1 << 20, "micro-batches per step"));
  if (!range_test) {
    sub->add_option(flag("--learning-rate"), o->learning_rate, "default 6e-3 (NVIDIA phase 1)")
        ->check(in_range(0, kFloatMax, "a learning rate", true));
    sub->add_option(flag("--max-steps"), o->max_steps, "optimizer steps (default 1000)")
        ->check(in_range(1, kMaxSteps, "optimizer steps"));
    sub->add_option(flag("--warmup-proportion"), o->warmup_proportion, "default 0.2843")
        ->check(in_range(0, 1, "a fraction of the steps"));
  }
  sub->add_option(flag("--optimizer"), o->optimizer, "lamb | adamw")->check(CLI::IsMember({"lamb", "adamw"}));
  sub->add_option(flag("--precision"), o->precision,
                  "auto (default: bf16 on a GPU and on a CPU with AVX512-BF16 or AMX, fp32 on other CPUs) | bf16 | "
                  "fp32 | fp16 (fp16 is emulated on CPU: loss-scaling logic)")
      ->check(CLI::IsMember({"auto", "bf16", "fp32", "fp16"}));
  sub->add_option(flag("--loss-scale"), o->loss_scale, "fp16: 0 = dynamic (default), > 0 = static")
      ->check(in_range(0, kFloatMax, "a loss scale; 0 = dynamic"));
  sub->add_option(flag("--init-loss-scale"), o->init_loss_scale, "fp16 dynamic scaling: initial scale (default 65536)")
      ->check(in_range(0, kFloatMax, "a loss scale", true));
  sub->add_option(flag("--loss-scale-window"), o->loss_scale_window,
                  "fp16 dynamic scaling: clean steps before doubling (default 2000)")
      ->check(in_range(1, kMaxSteps, "steps"));
  sub->add_option(flag("--max-predictions-per-seq"), o->max_predictions_per_seq,
                  "masked positions per sequence for dynamic-masking shards (default 20)")
      ->check(in_range(1, 1 << 20, "masked positions per sequence, a buffer per row"));
  sub->add_option(flag("--seed"), o->seed, "default 12345")->check(in_range(0, kMaxSeed, "a seed"));
  if (!range_test) {
    sub->add_option(flag("--num-steps-per-checkpoint"), o->num_steps_per_checkpoint, "default 200")
        ->check(in_range(0, kMaxSteps, "steps between checkpoints; 0 = none"));
    sub->add_option(flag("--keep-checkpoints"), o->keep_checkpoints, "default 3")
        ->check(in_range(1, 1 << 20, "checkpoints kept on disk"));
    sub->add_flag(flag("--resume-from-checkpoint"), o->resume_from_checkpoint,
                  "continue from the newest valid checkpoint in --output-dir (checksums verified first: a damaged "
                  "or unverifiable one is skipped with a warning; an error if every one is)");
    sub->add_flag(flag("--trust-unverified-checkpoint"), o->trust_unverified_checkpoint,
                  "with --resume-from-checkpoint: also accept a checkpoint without checksums (one written by "
                  "hand or by an old bertcc), with a warning; a checksum that differs is still refused");
    sub->add_flag(flag("--phase2"), o->phase2,
                  "phase 2: continue from the phase-1 checkpoint (with --resume-from-checkpoint) or --model; "
                  "optimizer step and schedule restart");
    sub->add_option(flag("--phase1-end-step"), o->phase1_end_step,
                    "the last phase-1 step (checked against the checkpoint)")
        ->check(in_range(0, kMaxSteps, "a step"));
    sub->add_option(flag("--eval-dir"), o->eval_dir, "held-out shards for MLM/NSP accuracy");
    sub->add_option(flag("--eval-freq"), o->eval_freq,
                    "evaluate every N steps (default: at checkpoints) and at the end")
        ->check(in_range(0, kMaxSteps, "steps between evaluations; 0 = at checkpoints"));
    sub->add_option(flag("--eval-batches"), o->eval_batches, "micro-batches per evaluation (default 20)")
        ->check(in_range(1, 1 << 30, "micro-batches per evaluation"));
  }
  sub->add_option(flag("--length-binning"), o->length_binning,
                  "sort rows by length within groups of N batches after shuffling (default 0: off)")
      ->check(in_range(0, 1 << 30, "batches per sorted group; 0 = off"));
  if (!range_test)
    sub->add_option(flag("--log-freq"), o->log_freq, "log every N steps (default 1)")
        ->check(in_range(1, kMaxSteps, "steps between log lines"));
  if (!range_test)  // (a range test ends at its first non-finite loss)
    sub->add_option(flag("--max-nonfinite-steps"), o->max_nonfinite_steps,
                    "stop when this many consecutive steps have a non-finite loss or gradients (default 10; with "
                    "fp16 dynamic scaling, counted once the scale is 1)")
        ->check(in_range(1, kMaxSteps, "consecutive steps"));
  add_device_flags(sub, o->device);
  sub->add_option("--threads", o->threads, "threads per rank (default: the host's cores / its ranks)")
      ->check(threads_check());
  add_data_parallel_flags(sub, o->dp);
}

void add_pretrain(CLI::App& app) {
  auto o = std::make_shared<PretrainOptions>();
  auto* sub = app.add_subcommand(
      "pretrain", "Pre-train BERT (masked LM + NSP) or ELECTRA (replaced-token detection) with LAMB or AdamW");
  add_pretrain_flags(sub, *o, /*range_test=*/false);
  sub->callback([o]() {
    const int rc = run_pretraining(*o);
    if (rc != 0) throw CLI::RuntimeError(rc);
  });
}

}  // namespace bertcc::tools
