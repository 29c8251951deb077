// BERT: BertModel (encoder + pooler) and BertForPreTraining (MLM head tied to the word
// embeddings, run only on masked positions; NSP head). One flat fp32 buffer for parameters and
// one for gradients, laid out by the ParamTable with Hugging Face names.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "bertcc/batch.h"
#include "bertcc/config.h"
#include "bertcc/dtype.h"
#include "bertcc/heads.h"
#include "bertcc/params.h"
#include "bertcc/rng.h"

namespace bertcc {

class Backend;
class Head;
namespace kernels {
struct Int8Weight;
struct Int8LayerNorm;
}  // namespace kernels

const char* architecture_name(Heads h);
// The HF class name for a model type: BertFor... or, with `electra`, ElectraModel / ElectraFor...
std::string architecture_name(Heads h, bool electra);
bool has_pooler(Heads h);

// Floats per row of the joint QA head's beam-search output (start_n_top, end_n_top default 4).
int joint_qa_output_size(const BertConfig& c);

class Bert {
 public:
  Bert(const BertConfig& config, Heads heads);
  ~Bert();
  Bert(const Bert&) = delete;
  Bert& operator=(const Bert&) = delete;

  const BertConfig& config() const { return cfg_; }
  Heads heads() const { return heads_; }
  std::string architecture() const { return architecture_name(heads_, cfg_.electra()); }
  const ParamTable& table() const { return table_; }
  // Mutable access to the weights invalidates the bf16 copy used by bf16 GEMMs, so anything that
  // changes weights (optimizers, loaders) must go through these.
  std::vector<float>& params() {
    params16_valid_ = q8_valid_ = false;
    return params_;
  }
  const std::vector<float>& params() const { return params_; }
  // The gradients are allocated on first use (here, the accessors below, zero_grad, or a forward
  // that a backward follows), zeroed: a model that only infers (serve, qa, classify, tag, eval,
  // bench infer) never holds them, on the host or on a device.
  std::vector<float>& grads() {
    ensure_grads();
    return grads_;
  }
  float* param(const std::string& name) {
    params16_valid_ = q8_valid_ = false;
    return params_.data() + table_.at(name).offset;
  }
  float* grad(const std::string& name) {
    ensure_grads();
    return grads_.data() + table_.at(name).offset;
  }
  bool has_grads() const { return !grads_.empty(); }

  // The backend the model computes on: the CPU unless use_backend() moved it. On a device the
  // weights and gradients that compute are device copies; params()/grads() stay the host copies:
  // params_to_device() after changing the weights on the host, grads_to_host() before reading
  // gradients. Every head computes there except the joint SQuAD head's layers (host, see joint_qa.cpp).
  void use_backend(Backend& be);
  // use_backend for a model that will only infer (qa, classify, tag, embed, fill-mask, serve, bench
  // infer): on a device in bf16, the encoder layers' GEMM matrices are there only as their bf16
  // roundings, the only form bf16 products read (about 3.6 of BERT-large's 5.4 bytes per weight
  // less; the same bits). Such a model refuses backward, optimizer steps, fp32 forwards and
  // params_to_device/_to_host, naming why. Elsewhere (the CPU, fp32) it is use_backend.
  void use_backend_for_inference(Backend& be, Precision prec);
  bool inference_only() const { return !dev_offset_.empty(); }
  // For a model that will only infer in int8 on the CPU (qa, classify, tag, embed, fill-mask, serve,
  // bench infer): quantizes the encoder's linear layers now (at load) and hands the pages of their
  // fp32 weights back to the system (about 3/4 of BERT's weights; the int8 copies take a quarter of
  // that). The model then refuses any precision but int8, and any change of its weights.
  void keep_int8_weights_only();
  Backend& backend() const { return *be_; }
  void params_to_device();
  void params_to_host();  // after the weights changed on the device (optimizer steps), before saving
  void grads_to_host();
  void grads_to_device();  // after the gradients changed on the host (a host all-reduce)
  // The flat weights and gradients where the backend computes (for its optimizer steps);
  // the weights' bf16 copy is refreshed before the next step.
  float* params_on_backend() {
    check_not_inference_only("params_on_backend");
    params16_valid_ = q8_valid_ = false;
    return dev_params_ ? dev_params_ : params_.data();
  }
  float* grads_on_backend() {
    ensure_grads();
    return dev_grads_ ? dev_grads_ : grads_.data();
  }
  // One tensor of those, by name.
  float* param_on_backend(const std::string& name) { return params_on_backend() + table_.at(name).offset; }
  const float* param_on_backend(const std::string& name) const { return w(table_.ref(name)); }
  float* grad_on_backend(const std::string& name) { return grads_on_backend() + table_.at(name).offset; }
  float* grad_on_backend(ParamRef r) { return grads_on_backend() + table_[r].offset; }
  // The embedding tensors ELECTRA's generator and discriminator share (word, position, token type,
  // LayerNorm weight and bias), by reference.
  std::array<ParamRef, 5> embedding_refs() const {
    return {refs_.word, refs_.position, refs_.token_type, refs_.emb_norm.g, refs_.emb_norm.b};
  }

  // HF/Google initialisation: N(0, initializer_range) weights, zero biases, LayerNorm 1/0,
  // the padding row of the word embeddings zeroed.
  void init_weights(uint64_t seed);
  // Zeroes the gradients where the backend computes (on a device, the host copy is left as it is).
  void zero_grad();

  // Pre-training forward (and backward if `backward`): loss = mean MLM CE + mean NSP CE.
  // Dropout is applied when `training`; its randomness comes from `rng` (advanced).
  // `loss_scale` multiplies the loss gradient (fp16 loss scaling); gradients come out scaled by it.
  // `mlm_denom`/`nsp_denom` > 0 replace this batch's masked-token and sequence counts as the
  // gradient's normalisers (a step of several micro-batches or ranks normalises by its global
  // counts); the returned means stay this batch's own.
  // `mlm_logits_out`, if given, receives the MLM logits [M, vocab] before the loss overwrites them
  // (fill-mask ranks them). `sample`, if given, receives ELECTRA's replacements drawn from them
  // where they are computed (Backend::gumbel_argmax: nothing vocabulary-wide leaves a device), with
  // M x vocab numbers of `rng` reserved after the forward pass's (the order electra_step keeps).
  struct GumbelSample {
    std::vector<int32_t> picks;  // per masked position, in token order
  };
  PretrainLoss pretrain_step(const BertBatch& batch, bool training, bool backward, Precision prec, Rng& rng,
                             float loss_scale = 1.0f, float mlm_denom = 0.0f, float nsp_denom = 0.0f,
                             std::vector<float>* mlm_logits_out = nullptr, GumbelSample* sample = nullptr);

  // Fine-tuning forward (and backward): the head's loss as HF computes it (QA: mean of start and
  // end cross-entropy; classification: mean cross-entropy; regression: mean squared error; tokens:
  // mean cross-entropy over labels != -100). Logits are left in head_logits(): QA [B,T,2]
  // (start, end), sequence [B,num_labels], token [B,T,num_labels]. Unpadded (last_packed), the
  // per-token heads compute the real tokens' rows only and their logits are laid out padded, the
  // padding holding the Linear's bias (the logits of a zero hidden state, as a padded forward gives).
  FinetuneLoss finetune_step(const BertBatch& batch, bool training, bool backward, Precision prec, Rng& rng,
                             float loss_scale = 1.0f);
  const std::vector<float>& head_logits() const { return head_logits_; }
  // JointQuestionAnswering (finetune_step calls it). With start/end positions (in the window;
  // 0/0 = no answer: answer class 1): loss = (CE(start) + CE(end | true start)) / 2 +
  // 0.5 BCE(answer class), means over the rows; head_logits() = start [B*T], end [B*T], class [B].
  // Without positions: beam search; head_logits() per row (joint_qa_output_size floats): the
  // start_n_top start log-probabilities, their positions, start_n_top x end_n_top end
  // log-probabilities, their positions (start-major), then the answer-class logit.
  FinetuneLoss joint_qa_step(const BertBatch& batch, bool training, bool backward, Precision prec, Rng& rng,
                             float loss_scale = 1.0f);
  // The joint head's beam widths (config start_n_top / end_n_top, saved with the model).
  void set_joint_beam(int start_n_top, int end_n_top) {
    cfg_.start_n_top = start_n_top;
    cfg_.end_n_top = end_n_top;
  }
  // ELECTRA's discriminator (Heads::Discriminator): logits = dense_prediction(act(dense(h))) per
  // token, into head_logits() [B*T] (unpadded: 0 at the padding, which nothing reads); the loss is
  // HF's: binary cross-entropy with logits, mean over the tokens with input_mask 1 (batch.labels [B*T]: 1 = replaced, 0
  // = original, -100 = ignored). `denom` > 0 replaces the batch's own count of those tokens as the normaliser.
  FinetuneLoss discriminator_step(const BertBatch& batch, bool training, bool backward, Precision prec, Rng& rng,
                                  float loss_scale = 1.0f, float denom = 0.0f);

  // Fine-tune only the top `layers` encoder layers (and the pooler/head): the embeddings and the
  // layers below are frozen (no gradient computed, no update). Negative = everything trainable;
  // 0 = only the pooler and the head.
  void freeze_below_top_layers(int layers);
  // ELECTRA's layer-wise learning-rate decay: depth 0 for the embeddings (and embeddings_project),
  // l + 1 for encoder layer l, L + 2 for everything above (heads, pooler); each tensor's learning
  // rate is multiplied by decay^(L + 2 - depth). decay 1 = off.
  void set_layerwise_lr_decay(float decay);
  int first_trainable_layer() const { return first_trainable_layer_; }

  // BertModel: sequence output [B,T,C] and pooled output [B,C] (valid until the next call).
  // backward = false: no backward follows (inference), and the activations take one layer's
  // memory instead of every layer's (encode_backward then refuses).
  void encode(const BertBatch& batch, bool training, Precision prec, Rng& rng, bool backward = true);
  // The padded [B,T,C] sequence output. Unpadded (last_packed), made from the rows on the first
  // call after an encode (zeros at the padding; memory only then): the heads read the rows.
  const float* sequence_output() const;
  const float* pooled_output() const;
  // The rows the last encode computed, sequence_row_count() of them, [rows, C]: the batch's real
  // tokens packed (sequence b at rows cu[b] = its predecessors' lengths on) when last_packed(),
  // else [B,T,C]. encode_backward takes its sequence gradient in this layout.
  const float* sequence_rows() const;
  int64_t sequence_row_count() const;
  // Whether the last encode computed its batch unpadded (packed_lengths): then sequence_output()
  // is zero at the padding, and the QA head's loss takes the real positions only.
  bool last_packed() const;
  // sequence_output() readable on the host: the pointer itself on the CPU, else downloaded into buf.
  const float* sequence_output_on_host(std::vector<float>& buf) const;
  const float* pooled_output_on_host(std::vector<float>& buf) const;  // null without a pooler
  // Backward from gradients of the sequence output's rows (sequence_rows' layout; may be null) and
  // of the pooled output (may be null).
  void encode_backward(const float* dseq, const float* dpooled, Precision prec);

  // Backward reports, in descending order and ending with 0, offsets into the flat gradient
  // buffer from which on this backward's gradients are final (data parallelism reduces them
  // while backward goes on below). Empty = no reports.
  void set_grad_ready_hook(std::function<void(size_t)> hook) { grad_ready_ = std::move(hook); }

  // Size the activation memory for training batches of up to B rows of T tokens at once, so that
  // batches of varying length re-carve it instead of growing it (and faulting in fresh pages) step
  // by step. `prec` as the training steps will use (bf16 saves the dropped-out attention
  // probabilities at half size).
  void reserve_activations(int64_t B, int64_t T, Precision prec);

  // Bytes of the activation arena a training batch of B x T tokens takes (the encoder's saved
  // activations and gradient scratch; heads add their own, smaller buffers).
  static double activation_bytes(const BertConfig& cfg, int64_t B, int64_t T, bool attention_dropout, Precision prec);

  // FLOPs of one forward pass for (B, T) with M masked positions (GEMMs only).
  static double forward_flops(const BertConfig& c, int64_t B, int64_t T, int64_t M, bool heads);

 private:
  struct Acts;
  // The rows an encoder pass computes: B x T padded, or (unpadded execution) the batch's N real
  // tokens packed, with the attention's saved and scratch floats for either layout.
  struct Shape {
    int64_t B = 0, T = 0, N = 0;
    int64_t att_saved = 0, att_work = 0;
    bool packed = false;
  };
  static Shape padded_shape(const BertConfig& cfg, int64_t B, int64_t T, bool attention_dropout, Precision prec,
                            const Backend& be, bool inference = false);
  void ensure_acts(const Shape& s, bool attention_dropout, Precision prec, bool inference = false);
  static int64_t plan_acts(Acts& a, const BertConfig& cfg, const Shape& s, Precision prec, const Backend& be,
                           std::vector<std::pair<float**, int64_t>>& plan, bool inference = false);
  static int64_t plan_inference_acts(Acts& a, const BertConfig& cfg, const Shape& s, Precision prec, const Backend& be,
                                     std::vector<std::pair<float**, int64_t>>& plan);
  // The encoder (encoder.cpp): the batch's rows, ids and mask set up, then the parts of the forward
  // and backward passes in order, each on the rows of acts_ (padded or packed).
  struct Pass;
  void prepare_batch(const BertBatch& batch, bool training, bool backward, Precision prec, Rng& rng);
  void embeddings_forward(const Pass& pass);
  void layer_forward(int l, const Pass& pass);
  void attention_forward(int l, const Pass& pass);
  void outputs_forward(const Pass& pass);
  void layer_backward(int l, const Pass& pass);
  void attention_backward(int l, const Pass& pass);
  void embeddings_backward(const Pass& pass);
  // Unpadded execution for this batch: the lengths of its rows (input_mask a run of ones then
  // zeros, none empty) when packing is on and the batch has padding; empty otherwise.
  std::vector<int64_t> packed_lengths(const BertBatch& batch) const;
  static void place_inference_acts(Acts& a);
  // Every tensor the encoder's forward and backward passes read, by reference (bind_refs, at
  // construction); the head binds its own (head_, src/model/head.h).
  struct LinearRef {
    ParamRef w, b;
  };
  struct NormRef {
    ParamRef g, b;
  };
  struct LayerRefs {
    LinearRef qkv;  // query, key and value: one [3C, C] block and one [3C] bias, checked adjacent
    LinearRef attn_out, ffn_in, ffn_out;
    NormRef attn_norm, ffn_norm;
  };
  struct Refs {
    ParamRef word, position, token_type;
    NormRef emb_norm;
    LinearRef project;  // ELECTRA's embeddings_project (embedding width != hidden)
    std::vector<LayerRefs> layers;
    LinearRef pooler;
  };
  void bind_refs();
  // Weights, gradients and bf16 weights where the backend computes (host vectors on the CPU).
  const float* w(ParamRef r) const {
    if (!dev_offset_.empty()) {  // inference only: null for the matrices kept in bf16 alone
      const int64_t off = dev_offset_[static_cast<size_t>(r.i)];
      return off < 0 ? nullptr : dev_params_ + off;
    }
    return (dev_params_ ? dev_params_ : params_.data()) + table_[r].offset;
  }
  void check_not_inference_only(const char* what) const;
  float* dgrad(ParamRef r) { return grads_on_backend() + table_[r].offset; }
  void ensure_grads();
  // bf16 copy of a weight (bf16 precision), or null in fp32.
  const bf16_t* w16(ParamRef r, Precision p) const {
    return p == Precision::BF16 ? (dev_params16_ ? dev_params16_ : params16_.data()) + table_[r].offset : nullptr;
  }
  void refresh_bf16(Precision p);
  // int8 precision: quantizes the encoder's linear layers where they are not (once per weights);
  // refuses int8 off the CPU. Other precisions: nothing.
  void refresh_int8(Precision p);
  // The encoder's linear layer r on x[M, K] into y[M, N] in int8 when prec is int8 (true), else
  // nothing (false: the caller runs the backend's linear_forward).
  bool linear_int8(float* y, const float* x, const LinearRef& r, int64_t M, Precision prec) const;
  // With int8, in one kernel each: an output layer of x and the LayerNorm after it, or the layer's
  // feed-forward block and its LayerNorm (kernels/gemm_int8.h)
  bool output_int8(const kernels::Int8LayerNorm& ln, const float* x, const LinearRef& r, int64_t M,
                   const Pass& pass) const;
  bool ffn_int8(const kernels::Int8LayerNorm& ln, const float* x, const LayerRefs& L, int64_t M,
                const Pass& pass) const;
  const kernels::Int8Weight& int8_weight(const LinearRef& r) const;
  // Head scratch where the backend computes: on the host the vector itself (resized; zero-filled
  // when `zeroed`), on a device a buffer of n floats kept for that vector. The vector must outlive
  // the model's activations (a member, not a local).
  float* scratch(std::vector<float>& v, int64_t n, bool zeroed);
  // The backend's copy of n floats at p in host vector v (a download on a device; on the host p is
  // v's own data), and the reverse: v's contents where the backend computes (an upload).
  const std::vector<float>& to_host(std::vector<float>& v, const float* p, int64_t n);
  float* to_backend(std::vector<float>& v);
  // Row indices where the backend computes (v itself on the host; an upload to a buffer kept for v).
  const int64_t* rows_on_backend(std::vector<int64_t>& v);

  BertConfig cfg_;
  Heads heads_;
  ParamTable table_;
  std::vector<float> params_, grads_;
  std::vector<bf16_t> params16_;  // bf16 rounding of params_, valid while params16_valid_
  bool params16_valid_ = false;
  // --precision int8 (int8.cpp): the encoder's linear layers quantized per output channel, valid
  // while q8_valid_ (made again after any weight change, as the bf16 copy)
  struct Int8Weights;
  std::unique_ptr<Int8Weights> q8_;
  bool q8_valid_ = false;
  bool fp32_linears_released_ = false;  // keep_int8_weights_only: those fp32 pages are gone
  Backend* be_;
  struct DeviceState;  // device copies of the weights, gradients and bf16 weights
  std::unique_ptr<DeviceState> dev_;
  float *dev_params_ = nullptr, *dev_grads_ = nullptr;
  bf16_t* dev_params16_ = nullptr;
  Refs refs_;
  // inference only (use_backend_for_inference): each tensor's offset in the device's fp32 buffer
  // (by table index), -1 for those kept in bf16 alone; empty otherwise
  std::vector<int64_t> dev_offset_;
  std::unique_ptr<Acts> acts_;
  std::vector<int32_t> batch_ids_, batch_seg_;  // ids of the last encoded batch (embedding backward)
  std::vector<float> head_logits_;              // fine-tuning head output (and its gradient in backward)
  // The head (src/model/heads/, made by its HeadSpec): its weights, scratch and step.
  friend class Head;
  std::unique_ptr<Head> head_;
  std::vector<float> pad_row_;     // the padding row's gradient, kept across the embedding backward
  int first_trainable_layer_ = 0;  // layers below are frozen
  bool pooler_ = false;            // BERT's heads that have one; never ELECTRA
  std::function<void(size_t)> grad_ready_;
  bool embeddings_frozen_ = false;
};

}  // namespace bertcc
