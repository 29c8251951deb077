// The encoder (private to src/model): embeddings, L transformer layers and BERT's pooler, forward
// and backward (encoder.cpp), on the padded rows or, unpadded, on the batch's real tokens packed;
// the tensors it reads, bound once; and its activation memory, the arena (arena.cpp, acts.h),
// where the heads' scratch lives too. Bert (bertcc/bert.h) owns one; it computes on the weights'
// backend.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "bertcc/batch.h"
#include "bertcc/config.h"
#include "bertcc/dtype.h"
#include "bertcc/rng.h"
#include "model/weights.h"

namespace bertcc {

class Backend;
class Head;
struct Acts;
namespace kernels {
struct Int8LayerNorm;
}

// Every tensor the encoder's forward and backward passes read, by reference (bound at construction;
// the head binds its own, src/model/head.h).
struct LayerRefs {
  LinearRef qkv;  // query, key and value: one [3C, C] block and one [3C] bias, checked adjacent
  LinearRef attn_out, ffn_in, ffn_out;
  NormRef attn_norm, ffn_norm;
};
struct EncoderRefs {
  ParamRef word, position, token_type;
  NormRef emb_norm;
  LinearRef project;  // ELECTRA's embeddings_project (embedding width != hidden)
  std::vector<LayerRefs> layers;
  LinearRef pooler;
};

class Encoder {
 public:
  // `pooler`: BERT's, for the heads that have one (never ELECTRA).
  Encoder(const BertConfig& cfg, ModelWeights& weights, bool pooler);
  ~Encoder();
  Encoder(const Encoder&) = delete;
  Encoder& operator=(const Encoder&) = delete;

  const EncoderRefs& refs() const { return refs_; }
  // The linear layers --precision int8 quantizes: every layer's four and ELECTRA's projection.
  const std::vector<Int8Linear>& int8_linears() const { return int8_linears_; }

  // bertcc/bert.h's encode; `head` says whether a batch's labels allow the packed layout
  // (Head::labels_within). cls_rows_only: the caller reads the pooled output and the [CLS] rows alone,
  // so that an inference on the CPU may run the last layer's output projection, feed-forward block
  // and LayerNorms on those B rows alone (a quarter of the layer's products kept; the same bits:
  // every one of those steps computes a row from that row alone); sequence_output then refuses.
  void encode(const BertBatch& batch, bool training, Precision prec, Rng& rng, bool backward, const Head& head,
              bool cls_rows_only = false);
  void encode_backward(const float* dseq, const float* dpooled, Precision prec);
  void set_grad_ready_hook(std::function<void(size_t)> hook) { grad_ready_ = std::move(hook); }

  // The outputs of the last encode (bertcc/bert.h). After a [CLS]-only encode (cls_rows_only taken)
  // sequence_rows() holds the last layer's outputs at the [CLS] rows alone, and stale values at the
  // others; sequence_output() refuses.
  const float* sequence_output() const;
  const float* pooled_output() const;
  const float* sequence_rows() const;
  int64_t sequence_row_count() const;
  bool last_packed() const;
  const float* sequence_output_on_host(std::vector<float>& buf) const;
  const float* pooled_output_on_host(std::vector<float>& buf) const;

  // The activation memory (bertcc/bert.h: reserve_activations, activation_bytes); released when
  // the model moves to another backend (the arena lives on the old one).
  void reserve_activations(int64_t B, int64_t T, Precision prec);
  static double activation_bytes(const BertConfig& cfg, int64_t B, int64_t T, bool attention_dropout, Precision prec);
  void release_activations();
  Acts& acts();  // after a forward pass

  // Head scratch where the backend computes: on the host the vector itself (resized; zero-filled
  // when `zeroed`), on a device a buffer of n floats kept for that vector. The vector must outlive
  // the activations (a member, not a local).
  float* scratch(std::vector<float>& v, int64_t n, bool zeroed);
  // The backend's copy of n floats at p in host vector v (a download on a device; on the host p is
  // v's own data), and the reverse: v's contents where the backend computes (an upload).
  const std::vector<float>& to_host(std::vector<float>& v, const float* p, int64_t n);
  float* to_backend(std::vector<float>& v);
  // Row indices where the backend computes (v itself on the host; an upload to a buffer kept for v).
  const int64_t* rows_on_backend(std::vector<int64_t>& v);

 private:
  // The rows an encoder pass computes: B x T padded, or (unpadded execution) the batch's N real
  // tokens packed, with the attention's saved and scratch floats for either layout.
  struct Shape {
    int64_t B = 0, T = 0, N = 0;
    int64_t att_saved = 0, att_work = 0;
    bool packed = false;
  };
  // One pass's settings, shared by its layer functions: precision, the hidden and attention dropout
  // rates (0 outside training) and the random stream (the forward advances it; the backward
  // regenerates the masks from the seeds the forward saved).
  struct Pass {
    Precision prec;
    float p_h, p_a;
    Rng* rng;
  };
  static Shape padded_shape(const BertConfig& cfg, int64_t B, int64_t T, bool attention_dropout, Precision prec,
                            const Backend& be, bool inference = false);
  void ensure_acts(const Shape& s, bool attention_dropout, Precision prec, bool inference = false);
  static int64_t plan_acts(Acts& a, const BertConfig& cfg, const Shape& s, Precision prec, const Backend& be,
                           std::vector<std::pair<float**, int64_t>>& plan, bool inference = false);
  static int64_t plan_inference_acts(Acts& a, const BertConfig& cfg, const Shape& s, Precision prec, const Backend& be,
                                     std::vector<std::pair<float**, int64_t>>& plan);
  static void place_inference_acts(Acts& a);
  void bind_refs();
  // The batch's rows, ids and mask set up, then the parts of the forward and backward passes in
  // order, each on the rows of acts_ (padded or packed).
  void prepare_batch(const BertBatch& batch, bool training, bool backward, Precision prec, Rng& rng, const Head& head);
  void embeddings_forward(const Pass& pass);
  void layer_forward(int l, const Pass& pass);
  void move_cls_rows(int l, bool to_front);
  void attention_forward(int l, const Pass& pass);
  void outputs_forward(const Pass& pass);
  void layer_backward(int l, const Pass& pass);
  void attention_backward(int l, const Pass& pass);
  void embeddings_backward(const Pass& pass);
  // Unpadded execution for this batch: the lengths of its rows (input_mask a run of ones then
  // zeros, none empty, the head's labels within them) when packing is on and the batch has
  // padding; empty otherwise.
  std::vector<int64_t> packed_lengths(const BertBatch& batch, const Head& head) const;
  Backend& backend() const { return weights_.backend(); }
  const float* w(ParamRef r) const { return weights_.w(r); }
  const bf16_t* w16(ParamRef r, Precision p) const { return weights_.w16(r, p); }
  float* dgrad(ParamRef r) { return weights_.dgrad(r); }
  // A linear layer from the weights held for inference (int8, or packed; weights.h), or false.
  bool linear_held(float* y, const float* x, const LinearRef& r, int64_t M, Precision prec,
                   const LinearIo* io = nullptr) const {
    return weights_.linear_held(y, x, r, M, prec, io);
  }
  // With int8, in one kernel each (int8.cpp): an output layer of x and the LayerNorm after it, or a
  // layer's feed-forward block and its LayerNorm (kernels/gemm_int8.h); false for other precisions.
  bool output_int8(const kernels::Int8LayerNorm& ln, const float* x, const LinearRef& r, int64_t M,
                   const Pass& pass) const;
  bool ffn_int8(const kernels::Int8LayerNorm& ln, const float* x, const LayerRefs& L, int64_t M,
                const Pass& pass) const;
  // With int8, the embeddings' sums from the word embeddings' int8 rows (kernels/kernels.h,
  // embeddings_forward's arguments); false for other precisions.
  bool embeddings_int8(float* out, const int32_t* ids, const int32_t* seg, int64_t B, int64_t T,
                       const Pass& pass) const;

  const BertConfig& cfg_;
  ModelWeights& weights_;
  bool pooler_;
  EncoderRefs refs_;
  std::vector<Int8Linear> int8_linears_;
  std::unique_ptr<Acts> acts_;
  std::vector<int32_t> batch_ids_, batch_seg_;  // ids of the last encoded batch (embedding backward)
  std::vector<float> pad_row_;                  // the padding row's gradient, kept across the embedding backward
  std::function<void(size_t)> grad_ready_;
};

}  // namespace bertcc
