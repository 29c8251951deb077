// The step shared by the heads that are one Linear on the encoder's output (HF's
// BertForQuestionAnswering, BertForSequenceClassification, BertForTokenClassification and their
// ELECTRA forms): input rows -> dropout (not QA, as HF) -> Linear -> logits in head_logits(); the
// loss runs on the host over the (small) logits, whose gradient goes back up. Each head's file
// gives its labels check and its loss (and the ELECTRA classifier its own input).
#pragma once
#include "model/head.h"

namespace bertcc {

class LinearHead : public Head {
 public:
  // per_token: logits for every token (else per row, from the pooled output); out: the Linear's
  // name; dropout: the config's head dropout while training.
  LinearHead(Bert& m, bool per_token, const std::string& out, bool dropout);
  FinetuneLoss finetune_step(const BertBatch& batch, Rng& rng, const StepArgs& args) override;

 protected:
  virtual int64_t width() const = 0;  // logits per row (K)
  // Whether the head reads the pooled output or the [CLS] rows and nothing else of the encoder's
  // output, so that an inference may compute the last layer for those rows alone (Encoder::encode)
  virtual bool reads_cls_rows_only() const { return false; }
  // Checks the batch's labels for the head; returns how many count in the loss.
  virtual int64_t check_labels(const BertBatch& b) const = 0;
  // The loss over head_logits_ (host) into out (loss, count, correct) and, when backward,
  // d(loss)/d(logits) into dlogits.
  virtual void loss(const BertBatch& b, bool backward, float loss_scale, int64_t count, FinetuneLoss& out,
                    std::vector<float>& dlogits) = 0;
  // The rows the head's dropout and Linear take (the sequence or the pooled output; ELECTRA's
  // classifier its own layers on [CLS]), and the backward from their gradient into the encoder.
  virtual const float* input(int64_t B, int64_t T, float p, Rng& rng, Precision prec);
  virtual void input_backward(const float* dsrc, int64_t B, int64_t T, float p, Rng& rng, Precision prec);

  // Labels in [0, K) at n positions (-100 skipped when `ignore`), counted; `what` names the shape.
  static int64_t count_labels(const BertBatch& b, int64_t n, int64_t K, bool ignore, const char* what);
  // Mean cross-entropy over the rows' labels (-100 ignored), its gradient into dlogits.
  void xent_loss(const BertBatch& b, bool backward, float loss_scale, int64_t count, FinetuneLoss& out,
                 std::vector<float>& dlogits);

  // The head's dropout on its R input rows (forward, or backward adding into out), its numbers
  // those of the padded rows [B,T] (per token) or [B].
  void dropout(float* out, const float* in, int64_t B, int64_t T, int64_t R, float p, Rng& rng, uint64_t base,
               bool back);

  bool per_token_, dropout_;
  LinearRef out_;  // qa_outputs, classifier or ELECTRA's classifier.out_proj
  // scratch (keys of scratch() on a device): input after dropout, its gradient, the input's gradient
  std::vector<float> in_, din_, dseq_, dlogits_, logits_dev_, dlogits_rows_, bias_;
};

}  // namespace bertcc
