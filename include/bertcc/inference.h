// Inference on features: the head logits, hidden states, embeddings and masked-token logits of a
// model for many features in length-sorted batches (dropout off), and the decoding the server and
// the commands share. Model layer: the training loop, the server and the inference commands all
// call it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "bertcc/bert.h"
#include "bertcc/features.h"
#include "bertcc/ner.h"
#include "bertcc/token_classification.h"

namespace bertcc {

// Index of the largest of v[begin, end) relative to begin (first on ties).
int argmax(const std::vector<float>& v, size_t begin = 0, size_t end = size_t(-1));
// Head logits of every feature (in input order), computed in length-sorted batches, dropout off.
// Under data parallelism each rank predicts every W-th batch and the logits are gathered.
std::vector<std::vector<float>> predict_logits(Bert& model, const std::vector<FtFeature>& f, int64_t batch_size,
                                               Precision prec);

// The model computations behind tasks.h's embed_texts and fill_masks and the server's BertModel,
// in length-sorted batches of `batch_size`.
std::vector<std::vector<float>> predict_embeddings(Bert& model, const std::vector<FtFeature>& f, int64_t batch_size,
                                                   Precision prec);
std::vector<std::vector<float>> predict_masked(Bert& model, const std::vector<FtFeature>& f, int64_t batch_size,
                                               Precision prec, int32_t mask_id);
// BertModel's outputs: per feature, the last hidden state of its tokens [length, hidden] followed
// by the pooler output [hidden] when the model has a pooler (BERT's; ELECTRA has none).
std::vector<std::vector<float>> predict_hidden(Bert& model, const std::vector<FtFeature>& f, int64_t batch_size,
                                               Precision prec);

// Predicted tag of every word of every sentence ("O" for words without sub-tokens).
std::vector<std::vector<std::string>> ner_predict(Bert& model, const NerFeatures& nf,
                                                  const std::vector<NerSentence>& sents,
                                                  const std::vector<std::string>& labels, int64_t batch_size,
                                                  Precision prec);
// The same from logits already computed for nf.f (one vector per sequence, [T, labels]).
std::vector<std::vector<std::string>> ner_decode(const NerFeatures& nf, const std::vector<NerSentence>& sents,
                                                 const std::vector<std::string>& labels,
                                                 const std::vector<std::vector<float>>& logits);

}  // namespace bertcc
