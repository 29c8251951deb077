#include "model/heads/linear_head.h"

#include "bertcc/error.h"
#include "kernels/kernels.h"

namespace bertcc {

LinearHead::LinearHead(Bert& m, bool per_token, const std::string& out, bool dropout)
    : Head(m), per_token_(per_token), dropout_(dropout), out_(lin(out)) {}

int64_t LinearHead::count_labels(const BertBatch& b, int64_t n, int64_t K, bool ignore, const char* what) {
  BERTCC_CHECK(b.labels.size() == size_t(n), "finetune_step: classification needs labels [", what, " = ", n, "]");
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (ignore && b.labels[i] == -100) continue;
    BERTCC_CHECK(b.labels[i] >= 0 && b.labels[i] < K, "finetune_step: label ", b.labels[i], " at ", i,
                 " is outside [0, ", K, ")");
    ++count;
  }
  return count;
}

const float* LinearHead::input(int64_t, int64_t, float, Rng&, Precision) {
  return per_token_ ? sequence_rows() : pooled_output();
}

// The head's dropout on its R input rows, forward or backward (adding into out): its numbers laid
// out as the padded rows' (a token's are those of its padded position, whatever the batch's layout).
void LinearHead::dropout(float* out, const float* in, int64_t B, int64_t T, int64_t R, float p, Rng& rng, uint64_t base,
                         bool back) {
  Backend& be = backend();
  const int64_t C = cfg_.hidden_size;
  auto one = [&](int64_t r0, int64_t n, uint64_t at) {
    if (back)
      be.dropout_backward(out + r0 * C, in + r0 * C, n * C, p, rng, at);
    else
      be.dropout_forward(out + r0 * C, in + r0 * C, n * C, p, rng, at);
  };
  if (!per_token_ || !last_packed()) return one(0, R, base);
  for (int64_t b = 0; b < B; ++b) {
    const auto [r0, n] = seq(b);
    one(r0, n, base + static_cast<uint64_t>(b * T * C));
  }
}

void LinearHead::input_backward(const float* dsrc, int64_t, int64_t, float, Rng&, Precision prec) {
  if (per_token_)
    encode_backward(dsrc, nullptr, prec);
  else
    encode_backward(nullptr, dsrc, prec);
}

// Fine-tuning forward (and backward): input -> dropout -> Linear -> logits; the head's loss.
FinetuneLoss LinearHead::finetune_step(const BertBatch& batch, Rng& rng, const StepArgs& args) {
  const bool training = args.training, backward = args.backward;
  const Precision prec = args.precision;
  const float loss_scale = args.loss_scale;
  const int64_t B = batch.B, T = batch.T, C = cfg_.hidden_size, K = width();
  const bool have_labels =
      backward || !(batch.labels.empty() && batch.targets.empty() && batch.start_positions.empty());
  const int64_t count = have_labels ? check_labels(batch) : 0;
  encode(batch, training, prec, rng, backward, reads_cls_rows_only());
  Backend& be = backend();
  FinetuneLoss out;
  out.count = count;
  // rows the head sees: the encoder's (the real tokens alone when packed) or the batch's
  const int64_t R = per_token_ ? rows() : B;
  const bool unpack = per_token_ && last_packed();  // logits laid out padded for the callers
  const float p = (training && dropout_) ? cfg_.head_dropout() : 0.0f;
  const float* src = input(B, T, p, rng, prec);
  uint64_t drop_base = 0;
  const float* hin = src;
  if (p > 0) {
    float* hd = scratch(in_, R * C, false);
    drop_base = rng.reserve((per_token_ ? B * T : B) * C);  // (the padded rows' numbers)
    dropout(hd, src, B, T, R, p, rng, drop_base, /*back=*/false);
    hin = hd;
  }
  const ParamRef wn = out_.w, bn = out_.b;
  float* logits =
      be.on_host() && !unpack ? (head_logits_.resize(R * K), head_logits_.data()) : scratch(logits_dev_, R * K, false);
  be.linear_forward(logits, hin, w(wn), w(bn), R, K, C, prec, w16(wn, prec));
  if (unpack) {  // the padding holds the bias: the logits of a zero hidden state
    const float* bias = w(bn);
    if (!be.on_host()) {
      bias_.resize(static_cast<size_t>(K));
      be.download(bias_.data(), bias, sizeof(float) * static_cast<size_t>(K));
      bias = bias_.data();
    }
    unpack_rows(to_host(logits_dev_, logits, R * K).data(), K, bias, head_logits_);
  } else {
    to_host(head_logits_, logits, R * K);
  }
  if (!have_labels) return out;

  loss(batch, backward, loss_scale, count, out, dlogits_);  // d(loss)/d(logits) in dlogits_ (host)
  if (!backward) return out;

  // ---- backward: head linear -> dropout -> input ----
  if (unpack) pack_rows(dlogits_, K, dlogits_rows_);  // the real tokens' gradients (the padding's reach nothing)
  const float* dl = to_backend(unpack ? dlogits_rows_ : dlogits_);
  float* din = scratch(din_, R * C, true);
  be.linear_backward(din, dgrad(wn), dgrad(bn), dl, hin, w(wn), R, K, C, prec, w16(wn, prec));
  const float* dsrc = din;
  if (p > 0) {
    float* dd = scratch(dseq_, R * C, true);
    dropout(dd, din, B, T, R, p, rng, drop_base, /*back=*/true);
    dsrc = dd;
  }
  input_backward(dsrc, B, T, p, rng, prec);
  return out;
}

void LinearHead::xent_loss(const BertBatch& batch, bool backward, float loss_scale, int64_t count, FinetuneLoss& out,
                           std::vector<float>& dlogits) {
  const int64_t R = per_token_ ? batch.B * batch.T : batch.B, K = width();
  dlogits = head_logits_;
  std::vector<float> ls(R);
  const float gs = backward && count > 0 ? loss_scale / static_cast<float>(count) : 0.0f;
  kernels::softmax_xent_forward_backward(dlogits.data(), ls.data(), batch.labels.data(), R, K, -100, gs, &out.correct);
  double s = 0;
  for (int64_t r = 0; r < R; ++r) s += ls[r];
  out.loss = count > 0 ? s / static_cast<double>(count) : 0.0;
}

}  // namespace bertcc
