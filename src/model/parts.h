// A Bert's parts (private to src/model), for the model's own files: the Head base binds to them
// (head.h), ELECTRA's step shares embeddings between two models through them (electra.cpp).
#pragma once
#include <vector>

#include "bertcc/bert.h"
#include "model/encoder.h"
#include "model/weights.h"

namespace bertcc {

struct ModelParts {
  static ModelWeights& weights(Bert& m) { return *m.weights_; }
  static const ModelWeights& weights(const Bert& m) { return *m.weights_; }
  static Encoder& encoder(Bert& m) { return *m.encoder_; }
  static const Encoder& encoder(const Bert& m) { return *m.encoder_; }
  static BertConfig& config(Bert& m) { return m.cfg_; }
  static std::vector<float>& head_logits(Bert& m) { return m.head_logits_; }
};

}  // namespace bertcc
