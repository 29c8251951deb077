// The masked-LM step shared by BertForPreTraining (pretraining.cpp: cls.predictions + the NSP head
// cls.seq_relationship) and ELECTRA's generator (generator.cpp: generator_predictions +
// generator_lm_head, no NSP). Both decode with the word embeddings (tied), on the masked
// positions only.
#pragma once
#include "model/head.h"

namespace bertcc {

class MaskedLmHead : public Head {
 public:
  MaskedLmHead(Bert& m, bool nsp);
  PretrainLoss pretrain_step(const BertBatch& batch, Rng& rng, const StepArgs& args) override;
  // A masked-LM label in the padding has no packed row to decode.
  bool labels_within(const BertBatch& batch, int64_t b, int64_t n) const override;

 private:
  // What the forward leaves for the backward (buffers where the backend computes).
  struct Fwd {
    int64_t M = 0;
    const int64_t* rows = nullptr;
    float *hm = nullptr, *t1 = nullptr, *tg = nullptr, *tl = nullptr, *tmean = nullptr, *trstd = nullptr;
    float *logits = nullptr, *nsp_logits = nullptr;
  };
  void mlm_forward(const BertBatch& batch, bool backward, Precision prec, Rng& rng, float loss_scale, float mlm_denom,
                   std::vector<float>* mlm_logits_out, std::vector<int32_t>* picks, Fwd& f, PretrainLoss& out);
  void nsp_forward(const BertBatch& batch, bool backward, Precision prec, float loss_scale, float nsp_denom, Fwd& f,
                   PretrainLoss& out);
  void backward(const BertBatch& batch, Precision prec, const Fwd& f);
  // int8: logits[M, vocab] of x [M, width] from the word embeddings' int8 rows (false for other
  // precisions: the fp32 decoder then).
  bool decode_int8(float* logits, const float* x, int64_t M, Precision prec);
  // The transform's activation and width: BERT's from the config at the hidden width; ELECTRA's
  // generator gelu (HF fixes it) at embedding_size.
  Activation act() const { return nsp_ ? cfg_.activation() : Activation::GeluErf; }
  int64_t width() const { return nsp_ ? cfg_.hidden_size : cfg_.embedding_dim(); }

  bool nsp_;
  LinearRef dense_;  // the transform
  NormRef lnorm_;
  ParamRef obias_;     // the decoder's bias (its weight is the word embeddings)
  LinearRef nsp_out_;  // cls.seq_relationship
};

}  // namespace bertcc
