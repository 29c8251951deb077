// BERT and ELECTRA models: the encoder (BertModel: embeddings, layers, BERT's pooler) with one head
// (bertcc/head_spec.h), its parameters in one flat fp32 buffer laid out by the ParamTable with
// Hugging Face names. A composition (src/model/): ModelWeights (weights.h), Encoder (encoder.h) and
// the Head (head.h, heads/); docs/architecture.md.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bertcc/batch.h"
#include "bertcc/config.h"
#include "bertcc/dtype.h"
#include "bertcc/heads.h"
#include "bertcc/params.h"
#include "bertcc/rng.h"

namespace bertcc {

class Backend;
class Encoder;
class Head;
class ModelWeights;

const char* architecture_name(Heads h);
// The HF class name for a model type: BertFor... or, with `electra`, ElectraModel / ElectraFor...
std::string architecture_name(Heads h, bool electra);
bool has_pooler(Heads h);
// Floats per row of the joint QA head's beam-search output (start_n_top, end_n_top default 4).
int joint_qa_output_size(const BertConfig& c);

// What a step does besides its forward pass. Dropout is applied when `training`, its randomness
// from the step's rng (advanced).
struct StepArgs {
  bool training = false;  // dropout on
  bool backward = false;  // the gradients added into the model's
  Precision precision = Precision::F32;
  float loss_scale = 1.0f;  // multiplies the loss gradient (fp16 loss scaling): gradients come out scaled
  // > 0: the loss's normalisers instead of this batch's own counts (a step of several micro-batches
  // or ranks normalises by its global counts); the returned means stay this batch's own.
  float mlm_denom = 0, nsp_denom = 0;  // pre-training: masked tokens, sequences
  float denom = 0;                     // fine-tuning, the heads that take one (the discriminator: tokens)
  // Pre-training, when given: the MLM logits [M, vocab] (fill-mask ranks them); ELECTRA's
  // replacements drawn from them where they are computed (Backend::gumbel_argmax), per masked
  // position in token order, with M x vocab numbers of the rng reserved after the forward's.
  std::vector<float>* mlm_logits = nullptr;
  std::vector<int32_t>* gumbel_picks = nullptr;
};

class Bert {
 public:
  Bert(const BertConfig& config, Heads heads);
  ~Bert();
  Bert(const Bert&) = delete;
  Bert& operator=(const Bert&) = delete;

  const BertConfig& config() const { return cfg_; }
  Heads heads() const { return heads_; }
  std::string architecture() const { return architecture_name(heads_, cfg_.electra()); }
  // The labels the head's fine-tuning batches carry (make_finetune_batch copies them).
  HeadLabels head_labels() const;
  // The joint head's beam widths (config start_n_top / end_n_top, saved with the model).
  void set_joint_beam(int start_n_top, int end_n_top);

  // ---- weights (ModelWeights) ----
  const ParamTable& table() const;
  // The host copies. Mutable access to the weights invalidates their bf16 and int8 copies. The
  // gradients are allocated zeroed on first use: a model that only infers never holds them.
  ParamVector& params();
  const ParamVector& params() const;
  std::vector<float>& grads();
  float* param(const std::string& name);
  float* grad(const std::string& name);
  bool has_grads() const;
  // HF/Google initialisation: N(0, initializer_range), zero biases, LayerNorm 1/0, padding row 0.
  void init_weights(uint64_t seed);
  void zero_grad();  // where the backend computes (on a device, the host copy is left as it is)
  // Only the top `layers` encoder layers (and the pooler and head) train; negative: all of them.
  void freeze_below_top_layers(int layers);
  // ELECTRA's layer-wise decay: a tensor's learning rate times decay^(L + 2 - its depth) (0: the
  // embeddings, l + 1: layer l, L + 2: above).
  void set_layerwise_lr_decay(float decay);

  // ---- where it computes: the CPU unless use_backend moved it ----
  // On a device params()/grads() stay the host copies: params_to_device() after changing the
  // weights on the host, grads_to_host() before reading gradients.
  void use_backend(Backend& be);
  // For a model that will only infer: on a device in bf16 the encoder's GEMM matrices are there
  // in bf16 alone, and the model refuses training and fp32. Elsewhere use_backend.
  void use_backend_for_inference(Backend& be, Precision prec);
  bool inference_only() const;
  // int8 inference on the CPU: the encoder's linears and the word embeddings quantized now, their
  // fp32 pages given back (params() then reads zeros there; every int8 path reads the int8 copies).
  void keep_int8_weights_only();
  // A load for inference alone on the CPU in `prec` (model_dir.h's load_model_dir_for_inference):
  // before the weights are written, prepare_inference_load; then a loader calls tensor_written
  // after writing each tensor, and an encoder linear layer's weight is quantized (int8) or packed
  // (fp32) there and its fp32 pages given back, so the load never holds the fp32 model beside its
  // int8 or packed copy. keep_int8_weights_only / keep_packed_weights_only(prec) ends it. bf16, a
  // device: nothing until keep_packed_weights_only.
  void prepare_inference_load(Precision prec);
  void tensor_written(ParamRef r);
  // fp32 or bf16 inference on the CPU: the encoder's linears packed now for the kernels that run
  // them (oneDNN's blocked layout, or the row kernel's panels for fp32 on AVX2), their fp32 pages
  // (and bf16 copies) given back; the model then computes in `prec` alone. Nothing where this
  // CPU's matmul reads plain weights (bf16 emulated on AVX2).
  void keep_packed_weights_only(Precision prec);
  Backend& backend() const;
  void params_to_device();
  void params_to_host();  // after the weights changed on the device (optimizer steps), before saving
  void grads_to_host();
  void grads_to_device();  // after the gradients changed on the host (a host all-reduce)
  // The flat weights and gradients where the backend computes (its optimizer steps).
  float* params_on_backend();
  float* grads_on_backend();

  // ---- steps (the Head) ----
  // Pre-training forward (and backward): loss = mean MLM CE (+ mean NSP CE) (the masked-LM heads).
  PretrainLoss pretrain_step(const BertBatch& batch, Rng& rng, const StepArgs& args);
  // Fine-tuning forward (and backward): the head's loss as HF computes it, its logits left in
  // head_logits() laid out padded (per head: docs/architecture.md, src/model/heads/). The joint
  // SQuAD head without start/end positions runs its beam search (joint_qa_output_size per row).
  FinetuneLoss finetune_step(const BertBatch& batch, Rng& rng, const StepArgs& args);
  const std::vector<float>& head_logits() const { return head_logits_; }

  // ---- the encoder (Encoder) ----
  // BertModel: the sequence output [B,T,C] and the pooled output [B,C] (valid until the next
  // call). backward = false: no backward follows, and the activations take one layer's memory.
  void encode(const BertBatch& batch, bool training, Precision prec, Rng& rng, bool backward = true);
  // The padded [B,T,C] sequence output (zeros at the padding when the batch ran unpadded).
  const float* sequence_output() const;
  const float* pooled_output() const;  // null without a pooler
  bool last_packed() const;            // whether the last encode computed the real tokens alone, packed
  // The outputs readable on the host: the pointer itself on the CPU, else downloaded into buf.
  const float* sequence_output_on_host(std::vector<float>& buf) const;
  const float* pooled_output_on_host(std::vector<float>& buf) const;
  // Backward from gradients of the sequence output's rows and of the pooled output (either null).
  void encode_backward(const float* dseq, const float* dpooled, Precision prec);
  // Backward reports offsets into the flat gradients from which on they are final (descending,
  // ending with 0): data parallelism reduces them while backward goes on.
  void set_grad_ready_hook(std::function<void(size_t)> hook);
  // Activation memory for training batches of up to B x T (varying lengths then re-carve it).
  void reserve_activations(int64_t B, int64_t T, Precision prec);
  // Bytes of the activation arena a training batch of B x T tokens takes (heads add a little).
  static double activation_bytes(const BertConfig& cfg, int64_t B, int64_t T, bool attention_dropout, Precision prec);
  // FLOPs of one forward pass for (B, T) with M masked positions (GEMMs only).
  static double forward_flops(const BertConfig& c, int64_t B, int64_t T, int64_t M, bool heads);

 private:
  friend struct ModelParts;  // src/model/parts.h: the parts, for the model's own files
  BertConfig cfg_;
  Heads heads_;
  std::unique_ptr<ModelWeights> weights_;
  std::unique_ptr<Encoder> encoder_;
  std::unique_ptr<Head> head_;
  std::vector<float> head_logits_;  // the head's output (and its gradient in backward)
};

}  // namespace bertcc
