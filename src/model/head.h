// A head's step (private to src/model): its weights, bound once from the model's table when the
// model is built (no name lookups on the step path), its scratch, and its forward and backward
// on the encoder's outputs. One class per head in src/model/heads/, made by its HeadSpec::make.
// Bert is a composition of ModelWeights, Encoder and its Head; this base binds to the other two
// (model/parts.h) and hands its subclasses their step helpers.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "bertcc/bert.h"
#include "bertcc/head_spec.h"
#include "model/encoder.h"
#include "model/weights.h"

namespace bertcc {

class Head {
 public:
  explicit Head(Bert& m);
  virtual ~Head() = default;
  Head(const Head&) = delete;
  Head& operator=(const Head&) = delete;

  // Bert::pretrain_step's contract (the masked-LM heads); the base refuses.
  virtual PretrainLoss pretrain_step(const BertBatch& batch, Rng& rng, const StepArgs& args);
  // Bert::finetune_step's contract (logits into head_logits_); StepArgs::denom > 0 replaces the
  // batch's own count as the loss's normaliser where the head takes one (the discriminator). The
  // base refuses.
  virtual FinetuneLoss finetune_step(const BertBatch& batch, Rng& rng, const StepArgs& args);
  // Whether the labels of row b that the head reads lie in the row's first n tokens, its real
  // ones: the encoder computes a batch unpadded (the real tokens packed) only when every row's do,
  // since a label in the padding has no packed row for the head to read. The data never puts one
  // there; a caller's batch may.
  virtual bool labels_within(const BertBatch& batch, int64_t b, int64_t n) const {
    (void)batch, (void)b, (void)n;
    return true;
  }

 protected:
  // Binding (constructors): a Linear's weight and bias (none when !bias), a LayerNorm's.
  LinearRef lin(const std::string& n, bool bias = true) const;
  NormRef norm(const std::string& n) const;
  ParamRef ref(const std::string& n) const { return weights_.table().ref(n); }
  ParamRef word_embeddings() const { return encoder_.refs().word; }  // the tied masked-LM decoder

  // The step helpers: weights, bf16 weights and gradients where the backend computes
  // (weights.h), head scratch, host/backend copies, the encoder's pass and its outputs (encoder.h).
  Backend& backend() const { return weights_.backend(); }
  const float* w(ParamRef r) const { return weights_.w(r); }
  const bf16_t* w16(ParamRef r, Precision p) const { return weights_.w16(r, p); }
  float* dgrad(ParamRef r) { return weights_.dgrad(r); }
  float* scratch(std::vector<float>& v, int64_t n, bool zeroed) { return encoder_.scratch(v, n, zeroed); }
  const std::vector<float>& to_host(std::vector<float>& v, const float* p, int64_t n) {
    return encoder_.to_host(v, p, n);
  }
  float* to_backend(std::vector<float>& v) { return encoder_.to_backend(v); }
  const int64_t* rows_on_backend(std::vector<int64_t>& v) { return encoder_.rows_on_backend(v); }
  void encode(const BertBatch& batch, bool training, Precision prec, Rng& rng, bool backward,
              bool cls_rows_only = false) {
    encoder_.encode(batch, training, prec, rng, backward, *this, cls_rows_only);
  }
  void encode_backward(const float* dseq, const float* dpooled, Precision prec) {
    encoder_.encode_backward(dseq, dpooled, prec);
  }
  // The encoder's output rows (rows() of them, [rows, C]: the batch's real tokens packed, or B x T
  // padded), what the heads read and what encode_backward's sequence gradient is laid out as.
  const float* sequence_rows() const { return encoder_.sequence_rows(); }
  int64_t rows() const { return encoder_.sequence_row_count(); }
  // Sequence b's first row and its length in those rows (padded: b T and T).
  std::pair<int64_t, int64_t> seq(int64_t b) const;
  // The [CLS] rows (seq(b).first), on the host.
  std::vector<int64_t>& cls_rows();
  const float* pooled_output() const { return encoder_.pooled_output(); }
  bool last_packed() const { return encoder_.last_packed(); }
  // Host per-token values between the rows and the padded layout [B,T,K]: `unpack_rows` lays K values
  // per row out padded (`pad`'s K values, or zeros when null, at the padding); `pack_rows` takes the
  // real tokens' values of a padded [B,T,K] in row order.
  void unpack_rows(const float* src, int64_t K, const float* pad, std::vector<float>& out);
  void pack_rows(const std::vector<float>& padded, int64_t K, std::vector<float>& out);
  // The masked-LM heads' scratch in the activation arena (sized by the masked positions).
  Acts& acts() { return encoder_.acts(); }

  ModelWeights& weights_;
  Encoder& encoder_;
  const BertConfig& cfg_;            // the model's (its beams may change: set_joint_beam)
  std::vector<float>& head_logits_;  // the model's head_logits()
};

}  // namespace bertcc
