// Checkpoints: OUTPUT/checkpoints/step_N/ = HF model directory + optimizer.safetensors +
// trainer_state.json (step, RNG, data cursor, checksums). Written to a temporary directory,
// fsynced, renamed; the newest valid one is used on resume.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "bertcc/bert.h"
#include "bertcc/optim.h"
#include "bertcc/pretrain_loader.h"

namespace bertcc {

struct TrainerState {
  int64_t step = 0;
  Rng rng;
  DataCursor cursor;
  double loss_scale = 1.0;
  int64_t clean_steps = 0;  // steps since the last overflow or scale increase (dynamic scaling)
  int phase = 1;
  int64_t step_offset = 0;     // phase 2: the phase-1 end step; names and logs use step + offset
  int64_t global_batch = 0;    // sequences per optimizer step over all ranks (0: not recorded)
  double best_score = -1e300;  // fine-tuning: the best evaluation so far (decides OUTPUT/best)
  std::string best_metrics;    // ... and its metrics (JSON text)
  // Fine-tuning: totals over all steps so far, so a resumed run's summary covers the whole run.
  struct Totals {
    double train_seconds = 0;
    int64_t seqs = 0, padded_tokens = 0, real_tokens = 0;
  } totals;
};

// Replaces directory `to` by `from` (a complete, fsynced directory) so that a kill at any moment
// leaves a complete `to`: an atomic exchange where the file system has one (renameat2), else via
// `<to>.old`, which restore_replaced_dirs puts back.
void replace_dir(const std::filesystem::path& from, const std::filesystem::path& to);
void restore_replaced_dirs(const std::filesystem::path& parent);

// A model and its optimizer moments in a checkpoint: at its root (`dir` empty) or in a
// subdirectory (ELECTRA: discriminator/ and generator/).
struct CheckpointPart {
  std::string dir;
  Bert* model;
  AdamState* opt;
};

// Throws, naming the first tensor with a NaN or an infinity, unless every weight (host copy) of
// `model` is finite. `what` begins the message ("finetune: not writing the final model").
void check_weights_finite(const Bert& model, const std::string& what);

// Refuses (check_weights_finite) weights that are not finite: a diverged run keeps its last good
// checkpoint.
void save_checkpoint(const std::string& output_dir, const std::vector<CheckpointPart>& parts, const TrainerState& st,
                     const std::string& vocab_path, int64_t keep);
void save_checkpoint(const std::string& output_dir, const Bert& model, const AdamState& opt, const TrainerState& st,
                     const std::string& vocab_path, int64_t keep);
// Resumes the newest checkpoint that passes its checksums (checked before any of its content is
// read); damaged ones (a checksum differs, a file is missing or unreadable) and unverified ones (a
// checksum is missing; accepted with a warning when `trust_unverified`) are skipped with a warning
// naming them. Returns false if there is no checkpoint at all; throws, touching nothing, when
// there are checkpoints but every one was refused, and when the newest verified one is of another
// model. Partial saves are removed. `who` prefixes the messages ("pretrain", "finetune").
// `lead`: this process tidies partial saves and prints; the other ranks of a data-parallel job
// only read.
bool load_latest_checkpoint(const std::string& output_dir, const std::vector<CheckpointPart>& parts, TrainerState& st,
                            const char* who = "pretrain", bool lead = true, bool trust_unverified = false);
bool load_latest_checkpoint(const std::string& output_dir, Bert& model, AdamState& opt, TrainerState& st,
                            const char* who = "pretrain", bool lead = true, bool trust_unverified = false);

}  // namespace bertcc
