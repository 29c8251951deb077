// What the model consumes and returns, below the model so that the data pipeline can make batches
// without it: a padded batch (pre-training and fine-tuning labels) and the losses of a step.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "bertcc/config.h"

namespace bertcc {

// A batch in model form. Sizes B x T; masked-LM labels are per token, -1 = ignored.
struct BertBatch {
  int64_t B = 0, T = 0;
  std::vector<int32_t> input_ids, segment_ids, input_mask, mlm_labels;  // [B*T]
  std::vector<int32_t> nsp_labels;                                      // [B]
  // Fine-tuning labels: `labels` is [B] (sequence classification) or [B*T] (token classification,
  // -100 = ignored); `targets` [B] (regression, num_labels == 1); start/end positions [B]
  // (question answering; values outside [0, T) are ignored, as HF clamps them to T).
  std::vector<int32_t> labels, start_positions, end_positions;
  std::vector<float> targets;
  std::string source;  // where the rows come from (a shard's path), for error messages
  void validate(const BertConfig& c, const std::string& where) const;  // throws naming the field
};

struct PretrainLoss {
  double loss = 0, mlm_loss = 0, nsp_loss = 0;
  double mlm_loss_sum = 0, nsp_loss_sum = 0;  // sums over masked tokens / sequences (before the means)
  int64_t mlm_count = 0, mlm_correct = 0, nsp_correct = 0;
};

// Fine-tuning loss and counts (accuracy numerator and denominator; QA counts start and end).
struct FinetuneLoss {
  double loss = 0;
  int64_t count = 0, correct = 0;
};

}  // namespace bertcc
