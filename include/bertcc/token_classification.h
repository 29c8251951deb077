// Token classification (NER) on words: each word's label sits on its first sub-token (the others
// are ignored, -100), as Hugging Face's run_ner; a sentence longer than max_seq_length is split
// between words into several sequences, so every word gets a prediction. Used by
// `bertcc finetune ner` and `bertcc tag`; the predictions per word come from ner_predict and
// ner_decode (inference.h).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "bertcc/features.h"
#include "bertcc/ner.h"

namespace bertcc {

struct NerFeatures {
  std::vector<FtFeature> f;
  std::vector<size_t> sentence;                // per sequence: its sentence
  std::vector<size_t> first_word;              // per sequence: its first word
  std::vector<std::vector<int32_t>> word_pos;  // per sequence: first sub-token of each word (-1: none)
};

// With `with_labels`, every tag must be in `index` (else an error naming path:line).
NerFeatures ner_features(const BertTokenizer& tok, const std::vector<NerSentence>& sents,
                         const std::map<std::string, int32_t>& index, bool with_labels, int max_seq_length,
                         const std::string& path);

}  // namespace bertcc
