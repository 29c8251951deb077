// BertBatch's checks (batch.h).
#include "bertcc/batch.h"

#include "bertcc/error.h"

namespace bertcc {

void BertBatch::validate(const BertConfig& c, const std::string& where) const {
  const size_t n = static_cast<size_t>(B * T);
  BERTCC_CHECK(B > 0 && T > 0, where, ": empty batch");
  BERTCC_CHECK(input_ids.size() == n && segment_ids.size() == n && input_mask.size() == n, where,
               ": input_ids/segment_ids/input_mask must all be [", B, ",", T, "]");
  BERTCC_CHECK(T <= c.max_position_embeddings, where, ": sequence length ", T, " exceeds max_position_embeddings ",
               c.max_position_embeddings);
  for (size_t i = 0; i < n; ++i) {
    BERTCC_CHECK(input_ids[i] >= 0 && input_ids[i] < c.vocab_size, where, ": input_ids[", i / T, "][", i % T,
                 "] = ", input_ids[i], " is outside the vocabulary (size ", c.vocab_size, ")");
    BERTCC_CHECK(segment_ids[i] >= 0 && segment_ids[i] < c.type_vocab_size, where, ": segment_ids[", i / T, "][", i % T,
                 "] = ", segment_ids[i], " is outside [0, ", c.type_vocab_size, ")");
    BERTCC_CHECK(input_mask[i] == 0 || input_mask[i] == 1, where, ": input_mask[", i / T, "][", i % T,
                 "] must be 0 or 1");
  }
  if (!mlm_labels.empty()) {
    BERTCC_CHECK(mlm_labels.size() == n, where, ": masked-LM labels must be [", B, ",", T, "]");
    for (size_t i = 0; i < n; ++i)
      BERTCC_CHECK(mlm_labels[i] == -1 || (mlm_labels[i] >= 0 && mlm_labels[i] < c.vocab_size), where,
                   ": masked_lm_ids value ", mlm_labels[i], " (row ", i / T, ", position ", i % T,
                   ") is outside the vocabulary");
  }
  if (!nsp_labels.empty()) {
    BERTCC_CHECK(nsp_labels.size() == static_cast<size_t>(B), where, ": next_sentence_labels must be [", B, "]");
    for (int64_t b = 0; b < B; ++b)
      BERTCC_CHECK(nsp_labels[b] == 0 || nsp_labels[b] == 1, where, ": next_sentence_labels[", b, "] = ", nsp_labels[b],
                   " must be 0 or 1");
  }
}

}  // namespace bertcc
