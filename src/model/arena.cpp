// Activation memory (encoder.h, acts.h): the arena planned from a Shape, carved into slices,
// the inference plan's shared region, the reservation for a run's largest batch, and the encoder's
// outputs read from it.
#include <algorithm>
#include <string>

#include "backend/backend.h"
#include "bertcc/error.h"
#include "bertcc/runtime.h"
#include "kernels/gemm.h"
#include "model/acts.h"
#include "model/encoder.h"

namespace bertcc {

// The activation arena's slices for (B, T): (where the slice pointer goes, floats). Returns the
// arena's size in floats (64-byte aligned slices). Training: every layer's saved activations and the
// backward's scratch; inference (no backward follows): plan_inference_acts.
int64_t Encoder::plan_acts(Acts& a, const BertConfig& cfg, const Shape& s, Precision prec, const Backend& be,
                           std::vector<std::pair<float**, int64_t>>& plan, bool inference) {
  const int64_t B = s.B, N = s.N, C = cfg.hidden_size, I = cfg.intermediate_size;
  const int64_t L = cfg.num_hidden_layers, E = cfg.embedding_dim();
  const int64_t h16 = prec == Precision::BF16 ? 1 : 0;  // bf16 copies (n bf16 in (n + 1) / 2 floats): bf16 only
  // In bf16 the backward reads the roundings of the layer inputs and of h1 (x16, h1_16), never
  // their fp32 values, which only the layer's own forward reads (the residual adds and the roundings
  // made there): the layer inputs alternate between two buffers, and one h1 serves
  // every layer (ensure_acts aliases them). The encoder's output x[L] is x[L % 2], read by the heads.
  // Likewise qkv and FFN1's output inter: in bf16 those products write their outputs as their
  // roundings alone (LinearIo::y16, as PyTorch's autocast Linear writes bf16), qkv16 and inter16,
  // which the attention and the GELU read, forward and backward; one fp32 qkv and one inter, space
  // a product may pass through (the CPU's), serve every layer, and each layer keeps 2 bytes per
  // element instead of 4. And the attention's output ctx: in bf16 the attention writes only its
  // rounding ctx16, which the attention-output product and the attention's backward read (no fp32
  // ctx at all: null_unkept).
  const bool transient = h16;
  a.x.assign(L + 1, nullptr);
  a.layers.assign(L, {});
  if (inference) return plan_inference_acts(a, cfg, s, prec, be, plan);
  plan.push_back({&a.emb_sum, N * E});
  plan.push_back({&a.emb_out, E != C ? N * E : 0});
  for (float** p : {&a.demb_a, &a.demb_b, &a.demb_c}) plan.push_back({p, E != C ? N * E : 0});
  plan.push_back({&a.emb_mean, N});
  plan.push_back({&a.emb_rstd, N});
  for (int64_t l = 0; l <= (transient ? std::min<int64_t>(L, 1) : L); ++l) plan.push_back({&a.x[l], N * C});
  for (auto& ly : a.layers) {
    // bf16: layer 0's qkv slot also holds h1 (after qkv) and, in the backward, di2 or dqkv
    const bool front = &ly == &a.layers.front();
    plan.push_back({&ly.qkv, !transient ? N * 3 * C : front ? std::max(slot_floats(N * 3 * C) + N * C, N * I) : 0});
    plan.push_back({&ly.probs, s.att_saved});
    plan.push_back({&ly.qkv16, h16 * (N * 3 * C + 1) / 2});
    plan.push_back({&ly.ctx, (1 - h16) * N * C});  // bf16: ctx16 alone (null_unkept)
    plan.push_back({&ly.ln1_sum, N * C});
    plan.push_back({&ly.ln1_mean, N});
    plan.push_back({&ly.ln1_rstd, N});
    plan.push_back({&ly.h1, transient ? 0 : N * C});  // bf16: inside layer 0's qkv slot
    plan.push_back({&ly.inter, transient && &ly != &a.layers.front() ? 0 : N * I});
    plan.push_back({&ly.gelu, (1 - h16) * N * I});  // bf16: FFN2 reads gelu16 alone (null_unkept)
    plan.push_back({&ly.ln2_sum, N * C});
    plan.push_back({&ly.ln2_mean, N});
    plan.push_back({&ly.ln2_rstd, N});
    for (float** p : {&ly.x16, &ly.ctx16, &ly.h1_16}) plan.push_back({p, h16 * (N * C + 1) / 2});
    plan.push_back({&ly.gelu16, front ? h16 * (N * I + 1) / 2 : 0});  // one for all layers: the backward remakes it
    plan.push_back({&ly.inter16, h16 * (N * I + 1) / 2});
  }
  plan.push_back({&a.cls, B * C});
  plan.push_back({&a.pooled, B * C});
  plan.push_back({&a.att_work, s.att_work});  // the CPU's forward uses it too
  plan.push_back({&a.tmp_c, N * C});
  for (float** p : {&a.g, &a.d1, &a.d2, &a.dh, &a.dc}) plan.push_back({p, N * C});
  // The backward's scratch for the FFN (di, di2, di2_16) and for the attention (dqkv, dqkv16) is
  // never live at once: a layer's FFN backward is done before its attention backward starts, and
  // the QKV products, dqkv's last readers, run before the next layer's FFN. So dqkv shares di2's
  // slot and dqkv16 di2_16's (ensure_acts: alias). In bf16 the forward's transient buffers
  // (layer 0's qkv, h1 and inter, which serve every layer and which no backward reads) are dead
  // once the backward starts: di takes inter's slot, and di2 / dqkv the slot of qkv and h1. (dqkv
  // and dqkv16 have no slot of their own: alias places them.)
  plan.push_back({&a.di, transient ? 0 : N * I});
  plan.push_back({&a.di2, transient ? 0 : std::max(N * I, N * 3 * C)});
  plan.push_back({&a.di2_16, h16 * std::max((N * I + 1) / 2, (N * 3 * C + 1) / 2)});
  plan.push_back({&a.d2_16, h16 * (N * C + 1) / 2});
  plan.push_back({&a.dcls, B * C});
  plan.push_back({&a.dpool, B * C});
  return arena_floats(plan);
}

// A forward that no backward follows, in one layer's memory and less: each buffer is live only
// between its writer and its last reader, so buffers whose lives do not overlap share one region R
// (per layer: qkv and ctx, then the attention output, then FFN1's output, then FFN2's output;
// before the layers, the embeddings' sum; the residual LayerNorms keep no sums),
// every layer uses layer 0's slices, and the layer input is written over by the layer's output
// (x[l] is last read by the first residual LayerNorm). The same kernels in the same order on the
// same values: the same bits as the training arena (Model.InferenceForwardInOneLayersMemory...).
int64_t Encoder::plan_inference_acts(Acts& a, const BertConfig& cfg, const Shape& s, Precision prec, const Backend& be,
                                     std::vector<std::pair<float**, int64_t>>& plan) {
  const int64_t B = s.B, N = s.N, C = cfg.hidden_size, I = cfg.intermediate_size;
  const int64_t E = cfg.embedding_dim();
  const int64_t h16 = prec == Precision::BF16 ? 1 : 0;
  // int8: the feed-forward block runs fused (ffn_layernorm_int8: no fp32 inter or gelu), the
  // attention's output layer too (no tmp_c), and its attention keeps nothing (saved and work 0)
  const int64_t f32_ffn = prec == Precision::I8 ? 0 : 1;
  a.lean = h16 && !be.y16_needs_y();
  a.region_ctx = a.lean ? 0 : slot_floats(N * 3 * C);  // 64-byte aligned places inside R
  // (tmp_c, N C floats, fits either way; the residual LayerNorms keep no sums: no backward reads them)
  const int64_t R = a.lean ? std::max({(N * 3 * C + 1) / 2, (N * I + 1) / 2, N * E})
                           : std::max({a.region_ctx + N * C, f32_ffn * N * I, N * E});
  const int64_t own16 = h16 && !a.lean ? 1 : 0;  // qkv16 and inter16 in slots of their own (else in R)
  Acts::Layer& ly = a.layers.front();
  plan.push_back({&a.region, R});
  plan.push_back({&a.emb_out, E != C ? N * E : 0});
  plan.push_back({&a.emb_mean, N});
  plan.push_back({&a.emb_rstd, N});
  plan.push_back({&a.x[0], N * C});
  plan.push_back({&ly.probs, s.att_saved});
  plan.push_back({&ly.qkv16, own16 * (N * 3 * C + 1) / 2});
  plan.push_back({&ly.inter16, own16 * (N * I + 1) / 2});
  plan.push_back({&ly.ln1_mean, N});
  plan.push_back({&ly.ln1_rstd, N});
  plan.push_back({&ly.h1, N * C});
  // fp32 only (bf16: FFN2 reads gelu16); room for the fused block's packed inner rows (ffn_held)
  plan.push_back({&ly.gelu, f32_ffn * (1 - h16) * std::max(N * I, kernels::ffn_rows_scratch_floats(N, I))});
  plan.push_back({&ly.ln2_mean, N});
  plan.push_back({&ly.ln2_rstd, N});
  for (float** p : {&ly.x16, &ly.ctx16, &ly.h1_16}) plan.push_back({p, h16 * (N * C + 1) / 2});
  plan.push_back({&ly.gelu16, h16 * (N * I + 1) / 2});
  plan.push_back({&a.cls, B * C});
  plan.push_back({&a.pooled, B * C});
  plan.push_back({&a.att_work, s.att_work});
  return arena_floats(plan);
}

void Encoder::place_inference_acts(Acts& a) {
  Acts::Layer& ly = a.layers.front();
  a.emb_sum = a.region;
  ly.qkv = a.region;
  ly.ctx = a.region + a.region_ctx;   // after qkv: attention reads one and writes the other
  a.tmp_c = a.region;                 // written after attention (qkv dead) and after GELU (inter dead)
  ly.ln1_sum = ly.ln2_sum = nullptr;  // not kept (the LayerNorms' backward reads them)
  ly.inter = a.region;                // written after the first residual LayerNorm (ctx, tmp_c dead)
  if (a.lean) {                       // the products' roundings alone, where their fp32 outputs would be
    ly.qkv16 = ly.inter16 = a.region;
    ly.qkv = ly.inter = ly.ctx = nullptr;
  }
  for (float*& x : a.x) x = a.x[0];  // the layer's output over its input
  for (size_t l = 1; l < a.layers.size(); ++l) a.layers[l] = ly;
  a.g = a.d1 = a.d2 = a.dh = a.dc = a.dqkv = a.di = a.di2 = a.di2_16 = a.d2_16 = a.dqkv16 = a.dcls = a.dpool = nullptr;
  a.demb_a = a.demb_b = a.demb_c = nullptr;
}

// (work: the second form's, which is the first's unless CUDA's cuDNN attention may take the call)
Encoder::Shape Encoder::padded_shape(const BertConfig& cfg, int64_t B, int64_t T, bool attention_dropout,
                                     Precision prec, const Backend& be, bool inference) {
  const int64_t C = cfg.hidden_size, NH = cfg.num_attention_heads;
  const bool h16 = prec == Precision::BF16;
  return Shape{B,
               T,
               B * T,
               be.attention_saved_size(B, T, C, NH, attention_dropout, prec, h16),
               be.attention_work_size(B, T, C, NH, attention_dropout, prec, inference),
               false};
}

double Encoder::activation_bytes(const BertConfig& cfg, int64_t B, int64_t T, bool attention_dropout, Precision prec) {
  Acts a;
  std::vector<std::pair<float**, int64_t>> plan;
  const Shape s = padded_shape(cfg, B, T, attention_dropout, prec, cpu_backend());
  return 4.0 * static_cast<double>(plan_acts(a, cfg, s, prec, cpu_backend(), plan)) + 4.0 * B * T;
}

void Encoder::ensure_acts(const Shape& s, bool attention_dropout, Precision prec, bool inference) {
  const int64_t B = s.B, T = s.T;
  if (acts_ && acts_->B == B && acts_->T == T && acts_->N == s.N && acts_->packed == s.packed &&
      acts_->att_saved == s.att_saved && acts_->att_work_floats == s.att_work &&
      acts_->attention_dropout == attention_dropout && acts_->prec == prec && acts_->inference == inference)
    return;
  // The arena only grows: batches of varying length (fine-tuning pads each batch to its longest
  // row) re-carve the same memory instead of reallocating and faulting in fresh pages.
  if (!acts_) acts_ = std::make_unique<Acts>();
  Acts& a = *acts_;
  a.B = B;
  a.T = T;
  a.N = s.N;
  a.packed = s.packed;
  a.att_saved = s.att_saved;
  a.att_work_floats = s.att_work;
  a.attention_dropout = attention_dropout;
  a.prec = prec;
  a.inference = inference;
  std::vector<std::pair<float**, int64_t>> plan;  // count first, then carve (one allocation)
  const int64_t total = std::max(plan_acts(a, cfg_, s, prec, backend(), plan, inference), a.reserved);
  // bf16: the fp32 GELU and attention outputs are not kept (their training slices are empty):
  // gelu_forward and attention_forward write the bf16 copies only, and the products read those
  // (linear_forward and _backward take x16 for x). After alias (inference places ctx in its region).
  auto null_unkept = [&a, prec] {
    if (prec == Precision::BF16)
      for (auto& ly : a.layers) ly.gelu = ly.ctx = nullptr;
  };
  // Inference: layer l's slices are layer 0's, and buffers share a region (place_inference_acts).
  // (Copying the whole Layer copies its dropout seeds too: each forward sets them before use, and
  // only a backward, refused after an inference forward, reads them afterwards.)
  // bf16 training: the layer inputs alternate and h1 is layer 0's (plan_acts).
  // Training: the backward's scratch shares slots (plan_acts).
  const int64_t NC = s.N * cfg_.hidden_size;
  auto alias = [&a, prec, NC] {
    if (a.inference) return place_inference_acts(a);
    a.dqkv = a.di2;
    a.dqkv16 = a.di2_16;
    if (prec != Precision::BF16) return;
    for (size_t l = 2; l < a.x.size(); ++l) a.x[l] = a.x[l % 2];
    Acts::Layer& front = a.layers.front();
    front.h1 = front.qkv + slot_floats(3 * NC);
    a.di = front.inter;
    a.di2 = a.dqkv = front.qkv;
    for (size_t l = 1; l < a.layers.size(); ++l) {
      a.layers[l].h1 = front.h1;
      a.layers[l].qkv = front.qkv;
      a.layers[l].inter = front.inter;
      a.layers[l].gelu16 = front.gelu16;
    }
  };
  if (!backend().on_host()) {  // device memory: the allocation itself says when it does not fit
    float* base = a.darena.ensure(backend(), static_cast<size_t>(total));
    int64_t off = 0;
    for (auto& [p, n] : plan) {
      *p = base + off;
      off += slot_floats(n);
    }
    alias();
    null_unkept();
    a.dmask.ensure(backend(), static_cast<size_t>(B * T));
    a.mask_add.assign(static_cast<size_t>(B * T), 0.0f);
    a.mask = a.dmask.get();
    return;
  }
  if (a.arena.size() < static_cast<size_t>(total)) {
    a.arena.clear();
    a.arena.shrink_to_fit();
    try {
      check_memory(4.0 * static_cast<double>(total),
                   "the activations of a batch of " + std::to_string(B) + " x " + std::to_string(T) + " tokens",
                   "use a smaller batch (or more gradient accumulation) or a shorter sequence");
    } catch (...) {
      a.B = a.T = 0;  // no arena: the next call carves again
      throw;
    }
    a.arena.assign(static_cast<size_t>(total), 0.0f);
  }
  int64_t off = 0;
  for (auto& [p, n] : plan) {
    *p = a.arena.data() + off;
    off += slot_floats(n);
  }
  alias();
  null_unkept();
  a.mask_add.assign(static_cast<size_t>(B * T), 0.0f);
  a.mask = a.mask_add.data();
}

void Encoder::reserve_activations(int64_t B, int64_t T, Precision prec) {
  // for the padded layout, and for the packed one at its largest (every row full, each sequence's
  // attention on its own)
  const bool drop = cfg_.attention_probs_dropout_prob > 0;
  const Shape pad = padded_shape(cfg_, B, T, drop, prec, backend());
  std::vector<int64_t> cu(static_cast<size_t>(B + 1));
  for (int64_t b = 0; b <= B; ++b) cu[static_cast<size_t>(b)] = b * T;
  const int64_t C = cfg_.hidden_size, NH = cfg_.num_attention_heads;
  const Shape packed{B,
                     T,
                     B * T,
                     backend().attention_varlen_saved_size(cu.data(), B, C, NH, drop, prec, prec == Precision::BF16),
                     backend().attention_varlen_work_size(cu.data(), B, C, NH),
                     true};
  Acts scratch_acts;
  std::vector<std::pair<float**, int64_t>> plan;
  int64_t most = plan_acts(scratch_acts, cfg_, pad, prec, backend(), plan);
  if (!padded_execution()) {
    plan.clear();
    most = std::max(most, plan_acts(scratch_acts, cfg_, packed, prec, backend(), plan));
  }
  if (!acts_) acts_ = std::make_unique<Acts>();
  acts_->reserved = std::max(acts_->reserved, most);
  ensure_acts(pad, drop, prec);
}

// The rows the last encode computed, sequence_row_count() of them, [rows, C]: the batch's real
// tokens packed (sequence b at rows cu[b] = its predecessors' lengths on) when last_packed(), else
// [B,T,C]. The heads read them; encode_backward takes its sequence gradient in this layout.
bool Encoder::last_packed() const { return acts_ && acts_->packed; }
const float* Encoder::sequence_rows() const { return acts_->x.back(); }
int64_t Encoder::sequence_row_count() const { return acts_ ? acts_->N : 0; }

// Packed: the rows restored to [B,T,C] (zeros at the padding) on the first call after an encode.
const float* Encoder::sequence_output() const {
  Acts& a = *acts_;
  BERTCC_CHECK(!a.cls_only,
               "sequence_output: the last forward was a classification head's, which computes the last layer for the "
               "[CLS] rows alone; run Bert::encode for the whole sequence output");
  if (!a.packed) return a.x.back();
  if (a.seq_pad_ready) return a.seq_pad;
  Backend& be = backend();
  const int64_t B = a.B, T = a.T, C = cfg_.hidden_size;
  const size_t n_pad = static_cast<size_t>(B * T * C);
  a.seq_pad = be.on_host() ? (a.seq_pad_host.resize(n_pad), a.seq_pad_host.data()) : a.dseq_pad.ensure(be, n_pad);
  for (int64_t b = 0; b < B; ++b) {
    const auto [r0, n] = a.seq(b);
    be.copy(a.seq_pad + b * T * C, a.x.back() + r0 * C, sizeof(float) * static_cast<size_t>(n * C));
    if (n < T) be.zero(a.seq_pad + (b * T + n) * C, sizeof(float) * static_cast<size_t>((T - n) * C));
  }
  a.seq_pad_ready = true;
  return a.seq_pad;
}
const float* Encoder::pooled_output() const { return pooler_ ? acts_->pooled : nullptr; }

const float* Encoder::pooled_output_on_host(std::vector<float>& buf) const {
  BERTCC_CHECK(acts_ && acts_->B > 0, "pooled_output: no forward pass yet");
  if (!pooler_ || backend().on_host()) return pooled_output();
  buf.resize(static_cast<size_t>(acts_->B * cfg_.hidden_size));
  backend().download(buf.data(), pooled_output(), sizeof(float) * buf.size());
  return buf.data();
}

const float* Encoder::sequence_output_on_host(std::vector<float>& buf) const {
  BERTCC_CHECK(acts_ && acts_->B > 0, "sequence_output: no forward pass yet");
  if (backend().on_host()) return sequence_output();
  buf.resize(static_cast<size_t>(acts_->B * acts_->T * cfg_.hidden_size));
  backend().download(buf.data(), sequence_output(), sizeof(float) * buf.size());
  return buf.data();
}

void Encoder::release_activations() { acts_.reset(); }

Acts& Encoder::acts() {
  BERTCC_CHECK(acts_, "head: no forward pass yet");
  return *acts_;
}

float* Encoder::scratch(std::vector<float>& v, int64_t n, bool zeroed) {
  Backend& be = backend();
  if (be.on_host()) {
    if (zeroed)
      v.assign(static_cast<size_t>(n), 0.0f);
    else
      v.resize(static_cast<size_t>(n));
    return v.data();
  }
  BERTCC_CHECK(acts_, "scratch: no forward pass yet");
  float* p = acts_->head.dev[&v].ensure(be, static_cast<size_t>(n));
  if (zeroed) be.zero(p, sizeof(float) * static_cast<size_t>(n));
  return p;
}

const std::vector<float>& Encoder::to_host(std::vector<float>& v, const float* p, int64_t n) {
  Backend& be = backend();
  if (be.on_host()) return v;
  v.resize(static_cast<size_t>(n));
  be.download(v.data(), p, sizeof(float) * static_cast<size_t>(n));
  return v;
}

float* Encoder::to_backend(std::vector<float>& v) {
  Backend& be = backend();
  if (be.on_host()) return v.data();
  float* p = scratch(v, static_cast<int64_t>(v.size()), false);
  be.upload(p, v.data(), sizeof(float) * v.size());
  return p;
}

const int64_t* Encoder::rows_on_backend(std::vector<int64_t>& v) {
  Backend& be = backend();
  if (be.on_host()) return v.data();
  BERTCC_CHECK(acts_, "rows_on_backend: no forward pass yet");
  int64_t* p = acts_->head.devi[&v].ensure(be, std::max<size_t>(1, v.size()));
  be.upload(p, v.data(), sizeof(int64_t) * v.size());
  return p;
}

}  // namespace bertcc
