// Google's create_pretraining_data.py (as NVIDIA ships it), with the same random choices for the
// same seed: documents shuffled, dupe_factor passes, short sequences with short_seq_prob,
// random-next with the "put back unused segments" rule, truncate_seq_pair from front or back,
// num_to_predict = min(max_pred, max(1, round_half_even(len * prob))), 80/10/10 masking, optional
// whole-word masking, instances shuffled. Output: NVIDIA's HDF5 layout.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "bertcc/dynamic_masking.h"
#include "bertcc/pretrain_data.h"
#include "bertcc/pyrandom.h"
#include "bertcc/tokenizer.h"

namespace bertcc {

struct PretrainingDataOptions {
  int64_t max_seq_length = 128;
  int64_t max_predictions_per_seq = 20;
  double masked_lm_prob = 0.15;
  double short_seq_prob = 0.1;
  int64_t dupe_factor = 10;
  uint64_t random_seed = 12345;
  bool whole_word_mask = false;
  bool dynamic_masking = false;  // leave tokens unmasked (the loader masks per epoch)
};

using Document = std::vector<std::vector<int32_t>>;  // sentences of token ids

struct TrainingInstance {
  std::vector<int32_t> tokens, segment_ids, masked_positions, masked_labels;
  bool is_random_next = false;
};

// Reads Google's input format (one sentence per line, blank line between documents); blank
// means empty after Python's str.strip(). Lines that tokenize to nothing are skipped.
void read_documents(const std::string& path, const BertTokenizer& tok, std::vector<Document>& docs,
                    TokenizeStats* stats = nullptr);

std::vector<TrainingInstance> create_training_instances(std::vector<Document> docs, const Vocab& vocab,
                                                        const PretrainingDataOptions& o, PyRandom& rng);

PretrainShard instances_to_shard(const std::vector<TrainingInstance>& inst, const PretrainingDataOptions& o);
UnmaskedShard instances_to_unmasked_shard(const std::vector<TrainingInstance>& inst, const PretrainingDataOptions& o);

}  // namespace bertcc
