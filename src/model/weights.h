// The model's parameters (private to src/model): the table of tensors with Hugging Face names, the
// host weights and gradients, their copies where the backend computes (fp32, bf16 and, for
// --precision int8, the encoder's linear layers quantized), and how each tensor trains (frozen,
// learning-rate scale). Bert (bertcc/bert.h) owns one; the encoder and the head read and write it.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "bertcc/config.h"
#include "bertcc/dtype.h"
#include "bertcc/params.h"
#include "core/huge_pages.h"

namespace bertcc {

class Backend;
struct HeadSpec;
struct LinearIo;
namespace kernels {
struct Int8Weight;
struct PackedWeights;
}  // namespace kernels

// A Linear's weight and bias, a LayerNorm's weight and bias, by reference into the table.
struct LinearRef {
  ParamRef w, b;
};
struct NormRef {
  ParamRef g, b;
};

// A linear layer that --precision int8 quantizes: its tensors and its [N, K] weight's shape.
struct Int8Linear {
  LinearRef r;
  int64_t N, K;
};

class ModelWeights {
 public:
  // The encoder's tensors (and BERT's pooler's when the head has one), then the head's
  // (HeadSpec::declare), allocated zeroed on the host.
  ModelWeights(const BertConfig& cfg, const HeadSpec& head);
  ~ModelWeights();
  ModelWeights(const ModelWeights&) = delete;
  ModelWeights& operator=(const ModelWeights&) = delete;

  const ParamTable& table() const { return table_; }
  // Mutable access to the weights invalidates their bf16 and int8 copies, so anything that changes
  // weights (optimizers, loaders) goes through these.
  ParamVector& params() {
    invalidate_copies();
    return params_;
  }
  const ParamVector& params() const { return params_; }
  // The gradients, allocated zeroed on first use: a model that only infers never holds them.
  std::vector<float>& grads() {
    ensure_grads();
    return grads_;
  }
  bool has_grads() const { return !grads_.empty(); }
  void ensure_grads();

  // Where the weights compute (bertcc/bert.h: use_backend, use_backend_for_inference).
  Backend& backend() const { return *be_; }
  void use_backend(Backend& be);
  void use_backend_for_inference(Backend& be, Precision prec);
  bool inference_only() const { return !dev_offset_.empty(); }
  void check_not_inference_only(const char* what) const;
  void params_to_device();
  void params_to_host();
  void grads_to_host();
  void grads_to_device();
  float* params_on_backend() {
    check_not_inference_only("params_on_backend");
    invalidate_copies();
    return dev_params_ ? dev_params_ : params_.data();
  }
  float* grads_on_backend() {
    ensure_grads();
    return dev_grads_ ? dev_grads_ : grads_.data();
  }

  // Weights, gradients and bf16 weights where the backend computes (host vectors on the CPU).
  const float* w(ParamRef r) const {
    if (!dev_offset_.empty()) {  // inference only: null for the matrices kept in bf16 alone
      const int64_t off = dev_offset_[static_cast<size_t>(r.i)];
      return off < 0 ? nullptr : dev_params_ + off;
    }
    return (dev_params_ ? dev_params_ : params_.data()) + table_[r].offset;
  }
  float* dgrad(ParamRef r) { return grads_on_backend() + table_[r].offset; }
  // bf16 copy of a weight (bf16 precision), or null in fp32.
  const bf16_t* w16(ParamRef r, Precision p) const {
    return p == Precision::BF16 ? (dev_params16_ ? dev_params16_ : params16_.data()) + table_[r].offset : nullptr;
  }
  // The bf16 copy made again after a change of the weights (bf16 precision; else nothing).
  void refresh_bf16(Precision p);
  // int8 precision: quantizes `linears` and the word embeddings (per row) where they are not (once
  // per weights); refuses int8 off the CPU. Other precisions: nothing.
  void refresh_int8(Precision p, const std::vector<Int8Linear>& linears);
  // A load for inference alone on the CPU (bert.h's prepare_inference_load): from now on each of
  // `linears`' weights is quantized (int8) or packed (fp32) as soon as a loader has written it
  // (tensor_written), and its fp32 pages given back then, so the load never holds the fp32 linear
  // layers beside their copies. keep_int8_weights_only or keep_packed_weights_only in the same
  // precision ends it (and makes the layers no loader wrote). Other precisions, a device, a model
  // already quantized or packed: nothing (keep_packed_weights_only does it all after the load).
  // (int8: the word embeddings too, once written.)
  void prepare_inference_load(const std::vector<Int8Linear>& linears, Precision prec);
  void tensor_written(ParamRef r);
  // bertcc/bert.h's keep_int8_weights_only, for the encoder's `linears` and the word embeddings.
  void keep_int8_weights_only(const std::vector<Int8Linear>& linears);
  // bertcc/bert.h's keep_packed_weights_only (packed.cpp), for the encoder's `linears`.
  void keep_packed_weights_only(const std::vector<Int8Linear>& linears, Precision prec);
  // Linear layer r on x[M, K] into y[M, N] from the weights held here for inference: in int8 when
  // prec is int8, from the packed weight once keep_packed_weights_only made them (true; io: the
  // bf16 roundings, as the backend's linear_forward takes them); else nothing (false: the caller
  // runs the backend's linear_forward).
  bool linear_held(float* y, const float* x, const LinearRef& r, int64_t M, Precision prec,
                   const LinearIo* io = nullptr) const;
  // The feed-forward block y = act(x W1^T + b1) W2^T + b2 (layers r1, r2) from weights held packed
  // for fp32 inference, in one kernel where both are in the row kernel's panels (true: the same
  // bits as linear_held, the GELU and linear_held in turn; scratch: kernels::ffn_rows_scratch_floats
  // floats); else nothing (false).
  bool ffn_held(float* y, const float* x, const LinearRef& r1, const LinearRef& r2, int64_t M, Precision prec,
                Activation act, float* scratch) const;
  // The int8 weight of linear layer r when prec is int8; null for other precisions.
  const kernels::Int8Weight* int8_weight(const LinearRef& r, Precision prec) const;
  // The word embeddings in int8 per row ([vocab, E]: q and scale) when prec is int8 (the lookup and
  // the tied masked-LM decoder read them); else null.
  const kernels::Int8Weight* int8_word_embeddings(Precision prec) const;

  void init_weights(uint64_t seed);
  void zero_grad();
  void freeze_below_top_layers(int layers);
  void set_layerwise_lr_decay(float decay);
  int first_trainable_layer() const { return first_trainable_layer_; }
  bool embeddings_frozen() const { return embeddings_frozen_; }

 private:
  struct PackedLinears;  // packed.h
  void invalidate_copies() { params16_valid_ = q8_valid_ = packed_valid_ = false; }
  bool linear_packed(float* y, const float* x, const LinearIo* io, const LinearRef& r, int64_t M, Precision prec) const;
  // Whole pages inside each of `linears`' fp32 matrices back to the system (keep_*_only).
  void release_linear_pages(const std::vector<Int8Linear>& linears);
  // One linear layer's int8 weight into q8_ (made already), for activations bounded by act_max.
  void quantize_linear(const Int8Linear& l, int act_max);
  // The word embeddings per row into q8_ (made already); their table entry as a pseudo-linear layer
  // ([vocab, E], no bias: what release_linear_pages takes).
  void quantize_word_embeddings();
  Int8Linear word_embeddings_entry() const;
  // One linear layer's packed fp32 or bf16 weight into `into` (false where this CPU's kernel reads
  // plain weights for its shape: nothing made).
  bool pack_linear(const Int8Linear& l, Precision prec, PackedLinears& into) const;
  // The linear layers prepare_inference_load left for the loader that were not written (a layer
  // made from weights already there) made now; the load's state dropped.
  void finish_inference_load();
  // A linear layer of a load for inference whose weight is all written: quantized or packed, and
  // its fp32 pages given back (int8: the word embeddings too).
  void make_loaded_linear(const Int8Linear& l);

  const BertConfig& cfg_;
  ParamTable table_;
  ParamVector params_;  // zeros not resident until written (bertcc/params.h)
  std::vector<float> grads_;
  // bf16 rounding of params_, valid while params16_valid_ (sized without writing: bf16 inference
  // with packed weights writes only what it keeps, keep_packed_weights_only)
  std::vector<bf16_t, UntouchedAllocator<bf16_t>> params16_;
  bool params16_valid_ = false;
  // --precision int8 (int8.cpp): the encoder's linear layers quantized per output channel, valid
  // while q8_valid_ (made again after any weight change, as the bf16 copy)
  struct Int8Weights;
  std::unique_ptr<Int8Weights> q8_;
  bool q8_valid_ = false;
  bool fp32_linears_released_ = false;  // keep_*_only: those fp32 pages are gone
  // keep_packed_weights_only (packed.cpp): the encoder's linear layers in their kernel's layout
  std::unique_ptr<PackedLinears> packed_;
  bool packed_valid_ = false;  // no mutable access to the weights since they were packed
  struct InferenceLoad {       // prepare_inference_load until keep_*_only
    struct Pending {
      Int8Linear l;
      int64_t unwritten;  // elements of its [N, K] weight no loader wrote yet (Q, K and V: one block)
    };
    Precision prec;
    int act_max;                   // int8: the activations' bound
    int32_t words = -1;            // int8: the word embeddings' index in the table
    std::vector<Pending> pending;  // in the table's order
  };
  std::unique_ptr<InferenceLoad> load_;
  Backend* be_;
  struct DeviceState;  // device copies of the weights, gradients and bf16 weights
  std::unique_ptr<DeviceState> dev_;
  float *dev_params_ = nullptr, *dev_grads_ = nullptr;
  bf16_t* dev_params16_ = nullptr;
  // inference only (use_backend_for_inference): each tensor's offset in the device's fp32 buffer
  // (by table index), -1 for those kept in bf16 alone; empty otherwise
  std::vector<int64_t> dev_offset_;
  int first_trainable_layer_ = 0;  // layers below are frozen
  bool embeddings_frozen_ = false;
};

}  // namespace bertcc
