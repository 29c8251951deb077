// Fine-tuning features (token ids + the labels of one head) and batches padded to the longest row:
// the data side of fine-tuning and inference, without the model.
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "bertcc/batch.h"
#include "bertcc/heads.h"
#include "bertcc/tokenizer.h"

namespace bertcc {

struct FtFeature {
  std::vector<int32_t> input_ids, segment_ids;  // [CLS] ... [SEP] (...[SEP]), unpadded
  int32_t label = -1;                           // sequence classification
  float target = 0;                             // regression
  std::vector<int32_t> token_labels;            // token classification, -100 = ignored
  int32_t start = 0, end = 0;                   // question answering (0 = [CLS]: no answer in span)
};

// [CLS] a [SEP] (b [SEP]) with Google's truncation (pop from the longer side, ties from b) to
// max_seq_length.
FtFeature encode_pair(const BertTokenizer& tok, std::string_view a, std::string_view b, int max_seq_length);
void truncate_seq_pair(std::vector<int32_t>& a, std::vector<int32_t>& b, size_t max_total);

// The padded length of a batch whose longest row has `longest` tokens: rounded up to a multiple
// of 8, capped at `max_len` (but never below `longest`).
int64_t padded_length(int64_t longest, int64_t max_len);
// Rows `idx` of `f` as a batch padded to padded_length(longest row, max_len), with the `labels`
// the head takes (Bert::head_labels, HeadSpec::labels) when `with_labels`.
BertBatch make_finetune_batch(const std::vector<FtFeature>& f, const std::vector<size_t>& idx, HeadLabels labels,
                              bool with_labels, int64_t max_len);

}  // namespace bertcc
