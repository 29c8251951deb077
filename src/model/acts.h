// The model's activation memory (private to src/model): the arena's slices for one batch, training
// (every layer's saved activations and the backward's scratch) or inference (one layer's memory),
// for the padded or the packed (unpadded) layout. The Encoder (encoder.h) owns it; planned and
// carved in arena.cpp.
#pragma once
#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "bertcc/dtype.h"

namespace bertcc {

// Floats a slice of n floats takes in the arena: slices start 64 bytes apart at least.
inline int64_t slot_floats(int64_t n) { return (n + 15) / 16 * 16; }
inline int64_t arena_floats(const std::vector<std::pair<float**, int64_t>>& plan) {
  int64_t total = 0;
  for (const auto& [p, n] : plan) total += slot_floats(n);
  return total;
}

// ---------------------------------------------------------------------------------------------
// Activation arena: every tensor the backward pass needs, sized from (config, B, T), plus
// scratch shared by all layers. Rebuilt only when (B, T) changes.
// ---------------------------------------------------------------------------------------------
struct Acts {
  int64_t B = 0, T = 0;
  // Unpadded execution (Encoder::Shape::packed): the encoder computes N rows, the batch's real tokens
  // packed sequence after sequence (FlashAttention's varlen layout): sequence b is rows cu[b] to
  // cu[b+1]; a layer's `probs` is the backend's varlen attention's saved buffer, its dropout
  // numbers drop_total after the layer's seed_att. The heads read the packed rows (x.back()).
  bool packed = false;
  int64_t N = 0, att_saved = 0, att_work_floats = 0;
  // sequence b's first packed row and its row count
  std::pair<int64_t, int64_t> seq(int64_t b) const {
    return {cu[static_cast<size_t>(b)], cu[static_cast<size_t>(b + 1)] - cu[static_cast<size_t>(b)]};
  }
  const int32_t *ids = nullptr, *seg = nullptr;  // the rows' ids and segment ids where the backend computes
  std::vector<int64_t> cu;
  std::vector<int64_t> cls_rows;  // sequence b's [CLS] row: cu[b] packed, b T padded (set with the batch)
  uint64_t drop_total = 0;        // the attention-dropout numbers of a layer (every sequence's)
  // padded: every row of the batch's input_mask is n >= 1 ones then zeros, so mask_add is lengths
  // (AttentionHints::right_padded)
  bool right_padded = false;
  // The sequence output restored to [B,T,C] (zeros at the padding) for a caller that reads the
  // padded layout (Encoder::sequence_output: embed, serve's last_hidden_state), made on demand after
  // the encode (seq_pad_ready): not on the step path, and its memory only then (a host vector, or a
  // buffer where the backend computes).
  float* seq_pad = nullptr;
  bool seq_pad_ready = false;
  std::vector<float> seq_pad_host;
  DeviceBuffer<float> dseq_pad;
  int64_t reserved = 0;            // floats reserve_activations asked for (the arena is at least that)
  bool attention_dropout = false;  // probs also hold the dropped-out probabilities
  // A forward that no backward follows: every layer's slices are layer 0's, the layer inputs
  // alternate between two buffers, and the backward's buffers are empty (a layer's activations,
  // not the model's, whatever the depth).
  bool inference = false;
  // The last encode ran its last layer past the attention on the B [CLS] rows alone (Encoder::encode):
  // x.back() holds them at their rows, and stale values at the others (sequence_output refuses).
  bool cls_only = false;
  Precision prec = Precision::F32;  // ... in bf16 for bf16 GEMMs (half the slot)
  std::vector<float> arena;
  std::vector<float> mask_add;        // [B,T]
  DeviceBuffer<float> darena, dmask;  // on a device: the arena and mask_add there
  DeviceBuffer<int32_t> dids, dseg;   // on a device: the batch's ids there
  const float* mask = nullptr;        // mask_add where the backend computes
  // --cuda-graphs: the inference forwards recorded (Encoder::encode), by shape and the arena's place,
  // oldest first; `seen`: shapes run unrecorded, recorded when they come again. Destroyed with the
  // arena they name.
  struct Graphs {
    struct Entry {
      int64_t B, T;
      Precision prec;
      const float* arena;
      bool right_padded;  // the batch's attention hint (cuDNN's path records only right-padded masks)
      uint64_t epoch;     // the backend's memory_epoch when recorded: valid while it stays
      void* exec;
    };
    static constexpr size_t kMax = 64;  // recorded shapes kept (a server's batches come in many shapes)
    Backend* be = nullptr;
    std::vector<Entry> recorded, seen;  // seen: exec null, epoch when last run unrecorded
    Graphs() = default;
    Graphs(const Graphs&) = delete;
    Graphs& operator=(const Graphs&) = delete;
    ~Graphs() {
      for (const Entry& e : recorded) be->graph_destroy(e.exec);
    }
  } graphs;
  float *emb_sum, *emb_mean, *emb_rstd;       // [N,E], [N], [N]
  float *emb_out, *demb_a, *demb_b, *demb_c;  // [N,E]: embeddings before the projection; their gradients
  std::vector<float*> x;                      // L+1 of [N,C]: layer inputs/outputs
  struct Layer {
    float *qkv, *probs, *ctx, *ln1_sum, *ln1_mean, *ln1_rstd, *h1, *inter, *gelu, *ln2_sum, *ln2_mean, *ln2_rstd;
    // bf16 only (empty slices otherwise): the bf16 roundings of the four GEMM inputs x, ctx, h1
    // and gelu, made once in the forward and taken again by the backward's dW products (gelu16:
    // one slot for all layers, which the GELU backward writes again before FFN2's dW reads it); and
    // FFN1's output inter as its rounding alone, written by the product (LinearIo::y16): the
    // GELU's input, forward and backward
    float *x16, *ctx16, *h1_16, *gelu16, *inter16;
    // bf16 only: the QKV product's output as its rounding alone (LinearIo::y16), which the attention
    // reads in place of qkv, forward and backward (its saved buffer then holds no q, k, v)
    float* qkv16;
    uint64_t seed_attn_out = 0, seed_ffn_out = 0;  // hidden dropout sites, regenerated in backward
    uint64_t seed_att = 0;                         // attention dropout (regenerated by CUDA's backward)
  };
  std::vector<Layer> layers;
  uint64_t seed_emb = 0;
  bool dropout = false;
  uint64_t rng_seed = 0;  // dropout masks are regenerated from (rng_seed, per-site base)
  // pooler: cls [B,C], pooled_pre [B,C], pooled [B,C]
  float *cls, *pooled;
  // inference: the region that buffers with disjoint lives share, and two places in it (floats);
  // lean: bf16 on a backend whose products write their roundings alone (no fp32 qkv or inter: the
  // region holds qkv16 and inter16 instead)
  float* region = nullptr;
  int64_t region_ctx = 0;
  bool lean = false;
  // scratch
  float *att_work, *tmp_c, *g, *d1, *d2, *dh, *dc, *dqkv, *di, *di2, *dcls, *dpool;
  float* di2_16;  // bf16 only: di2's rounding, written by gelu_backward for both FFN1 products
  float* d2_16;   // bf16 only: d2's rounding (the dropout backward's output), for the next products
  float* dqkv16;  // bf16 only: dqkv's rounding, written by the attention backward for the QKV products
  // a bf16 slice as such, or null outside bf16 (where the backend rounds nothing)
  bf16_t* as16(float* p) const { return prec == Precision::BF16 ? reinterpret_cast<bf16_t*>(p) : nullptr; }
  // pre-training heads: sized by the number of masked positions, reused across steps
  struct Head {
    std::vector<int64_t> rows;
    std::vector<int32_t> labels;
    std::vector<float> hm, t1, tg, tl, tmean, trstd, logits, losses, dtl, dtg, dt1, dhm, dseq, dpooled, nsp, nsp_losses;
    // On a device: each vector's buffer there, the rows and labels there.
    std::unordered_map<const std::vector<float>*, DeviceBuffer<float>> dev;
    std::unordered_map<const std::vector<int64_t>*, DeviceBuffer<int64_t>> devi;
    DeviceBuffer<int64_t> drows;
    DeviceBuffer<int32_t> dlabels, dnsp_labels;
  } head;
};

// p + off, or null for a null p (a buffer the precision does not keep)
template <class T>
T* at(T* p, int64_t off) {
  return p ? p + off : nullptr;
}

}  // namespace bertcc
