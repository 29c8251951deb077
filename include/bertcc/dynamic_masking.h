// Dynamic masking (as RoBERTa and NVIDIA's LDDL): shards hold unmasked sequence pairs with NSP
// labels and lengths; the loader masks each example anew every epoch, deterministically in
// (seed, epoch, row). Shard layout (HDF5): input_ids i4 [N,S], input_mask i1, segment_ids i1,
// next_sentence_labels i1 [N], lengths i4 [N]; no masked_lm_* datasets.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "bertcc/batch.h"
#include "bertcc/pretrain_data.h"

namespace bertcc {

struct UnmaskedShard {
  int64_t N = 0, S = 0;
  std::vector<int32_t> input_ids, input_mask, segment_ids, next_sentence_labels, lengths;
};

// From the masked layout's common fields (input_ids, input_mask, segment_ids, NSP labels).
UnmaskedShard unmasked_from(PretrainShard&& p, std::vector<int32_t> lengths);
void write_unmasked_shard(const std::string& path, const UnmaskedShard& s);
// rows (sorted, distinct): only those rows, in that order (see read_pretrain_shard_layout).
UnmaskedShard read_unmasked_shard(const std::string& path, const std::vector<int64_t>* rows = nullptr);
// True if the file has no masked_lm_positions dataset (i.e. is a dynamic-masking shard).
bool is_unmasked_shard(const std::string& path);

struct MaskingOptions {
  double masked_lm_prob = 0.15;
  int64_t max_predictions_per_seq = 20;
  int32_t vocab_size = 0, cls_id = -1, sep_id = -1, mask_id = -1;
  // A masked position draws u in [0, 1): u < mask_below -> [MASK], u >= random_from -> a random id,
  // else unchanged. BERT: 0.8 / 0.9 (80/10/10); ELECTRA: 0.85 / 1 (85 % [MASK], 15 % unchanged).
  float mask_below = 0.8f, random_from = 0.9f;
};

class DynamicMasker {
 public:
  DynamicMasker(const MaskingOptions& o, uint64_t seed);
  // Google's rule per row: num = min(max_pred, max(1, round(len * prob))) positions among the
  // non-[CLS]/[SEP] tokens, 80% [MASK], 10% unchanged, 10% a uniformly random id (the split set by
  // mask_below / random_from).
  // out_ids/labels are [S]; labels hold the original id at masked positions and -1 elsewhere.
  void mask_row(const int32_t* ids, int64_t len, int64_t S, uint64_t epoch, uint64_t row, int32_t* out_ids,
                int32_t* labels) const;
  // ids: each row's number in its file (the seed of its masks) where s holds only some of the
  // file's rows; nullptr: rows are those numbers.
  BertBatch make_batch(const UnmaskedShard& s, const std::vector<int64_t>& rows, uint64_t epoch,
                       const std::vector<int64_t>* ids = nullptr) const;

 private:
  MaskingOptions o_;
  uint64_t seed_;
};

// The rows of a shard in the order an epoch visits them: a seeded shuffle; with bin_size > 0,
// consecutive groups of bin_size rows (after shuffling) are sorted by length, so batches drawn
// from a group have similar lengths (length binning) while the group order stays random.
std::vector<int64_t> epoch_order(const UnmaskedShard& s, uint64_t seed, uint64_t epoch, int64_t bin_size);

}  // namespace bertcc
