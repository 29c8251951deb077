// The encoder (encoder.h): its tensors bound, then embeddings, L transformer layers and the pooler,
// forward and backward side by side, on the padded rows or, unpadded, on the batch's real tokens
// packed (docs/architecture.md). Activation memory: arena.cpp.
#include "model/encoder.h"

#include <algorithm>
#include <string>
#include <utility>

#include "backend/backend.h"
#include "bertcc/error.h"
#include "kernels/gemm.h"
#include "kernels/gemm_int8.h"
#include "kernels/kernels.h"
#include "model/acts.h"
#include "model/head.h"

namespace bertcc {

using namespace kernels;

namespace {
// --cuda-graphs: `forward` (an inference forward's device work on the arena at `arena`) run as a
// recorded graph. A shape's first run on an arena is run as it is: it sizes every scratch buffer and
// lets cuBLASLt choose its algorithms, so that recording queues device work alone. Its next run is
// recorded and launched, later ones launch the record. When one of the backend's buffers has been
// freed since (memory_epoch), a record may name a buffer that is gone: it is dropped, and its shape
// starts again with a run as it is. The kernels and their arguments are those of the unrecorded
// forward, so are the results.
template <class Graphs, class F>
// right_padded: the batch's AttentionHints (CUDA's cuDNN attention takes only right-padded masks
// and checks that on the device: a record of such a batch must not replay for one that is not)
void run_recorded(Graphs& gs, const float* arena, Backend& be, int64_t B, int64_t T, Precision prec, bool right_padded,
                  F&& forward) {
  gs.be = &be;
  const uint64_t epoch = be.memory_epoch();
  for (auto it = gs.recorded.begin(); it != gs.recorded.end();) {
    if (it->epoch == epoch) {
      ++it;
    } else {
      be.graph_destroy(it->exec);
      it = gs.recorded.erase(it);
    }
  }
  auto same = [&](const auto& e) {
    return e.B == B && e.T == T && e.prec == prec && e.arena == arena && e.right_padded == right_padded;
  };
  for (const auto& e : gs.recorded)
    if (same(e)) return be.graph_launch(e.exec);
  auto seen = std::find_if(gs.seen.begin(), gs.seen.end(), same);
  if (seen == gs.seen.end() || seen->epoch != epoch) {
    forward();
    if (seen != gs.seen.end()) gs.seen.erase(seen);
    if (gs.seen.size() >= 4 * Graphs::kMax) gs.seen.erase(gs.seen.begin());
    gs.seen.push_back({B, T, prec, arena, right_padded, be.memory_epoch(), nullptr});
    return;
  }
  be.graph_begin();
  try {
    forward();
  } catch (...) {
    be.graph_abort();
    throw;
  }
  void* exec = be.graph_end();  // (nothing was freed while recording: freeing is an error there)
  if (gs.recorded.size() >= Graphs::kMax) {
    be.graph_destroy(gs.recorded.front().exec);
    gs.recorded.erase(gs.recorded.begin());
  }
  gs.recorded.push_back({B, T, prec, arena, right_padded, epoch, exec});
  be.graph_launch(exec);
}
}  // namespace

Encoder::Encoder(const BertConfig& cfg, ModelWeights& weights, bool pooler)
    : cfg_(cfg), weights_(weights), pooler_(pooler) {
  bind_refs();
}

Encoder::~Encoder() = default;

// Every tensor the passes read, looked up once. The fused Q/K/V product reads query, key and value
// (weights, then biases) as one [3C, C] matrix and one [3C] vector: checked here.
void Encoder::bind_refs() {
  const ParamTable& t = weights_.table();
  auto lin = [&t](const std::string& n, bool bias = true) {
    return LinearRef{t.ref(n + ".weight"), bias ? t.ref(n + ".bias") : ParamRef{}};
  };
  auto opt_lin = [&t](const std::string& n) { return LinearRef{t.find_ref(n + ".weight"), t.find_ref(n + ".bias")}; };
  auto norm = [&t](const std::string& n) { return NormRef{t.ref(n + ".weight"), t.ref(n + ".bias")}; };
  const std::string e = "bert.embeddings.";
  refs_.word = t.ref(e + "word_embeddings.weight");
  refs_.position = t.ref(e + "position_embeddings.weight");
  refs_.token_type = t.ref(e + "token_type_embeddings.weight");
  refs_.emb_norm = norm(e + "LayerNorm");
  refs_.project = opt_lin("bert.embeddings_project");
  const size_t C = static_cast<size_t>(cfg_.hidden_size);
  refs_.layers.clear();
  for (int l = 0; l < cfg_.num_hidden_layers; ++l) {
    const std::string p = "bert.encoder.layer." + std::to_string(l) + ".";
    LayerRefs L;
    L.qkv = lin(p + "attention.self.query");
    for (const char* part : {"weight", "bias"}) {
      const std::string a = std::string(".") + part;
      const size_t q = t.at(p + "attention.self.query" + a).offset, n = t.at(p + "attention.self.query" + a).numel;
      BERTCC_CHECK(t.at(p + "attention.self.key" + a).offset == q + n &&
                       t.at(p + "attention.self.value" + a).offset == q + 2 * n && n == (a == ".weight" ? C * C : C),
                   "parameter table: layer ", l, "'s query, key and value ", part, "s are not one block");
    }
    L.attn_out = lin(p + "attention.output.dense");
    L.attn_norm = norm(p + "attention.output.LayerNorm");
    L.ffn_in = lin(p + "intermediate.dense");
    L.ffn_out = lin(p + "output.dense");
    L.ffn_norm = norm(p + "output.LayerNorm");
    refs_.layers.push_back(L);
  }
  refs_.pooler = opt_lin("bert.pooler.dense");
  // --precision int8's linear layers (int8.cpp)
  const int64_t I = cfg_.intermediate_size, E = cfg_.embedding_dim(), Ci = cfg_.hidden_size;
  int8_linears_.clear();
  if (E != Ci) int8_linears_.push_back({refs_.project, Ci, E});
  for (const LayerRefs& L : refs_.layers) {
    int8_linears_.push_back({L.qkv, 3 * Ci, Ci});
    int8_linears_.push_back({L.attn_out, Ci, Ci});
    int8_linears_.push_back({L.ffn_in, I, Ci});
    int8_linears_.push_back({L.ffn_out, Ci, I});
  }
}

std::vector<int64_t> Encoder::packed_lengths(const BertBatch& batch, const Head& head) const {
  if (padded_execution() || batch.input_mask.size() != static_cast<size_t>(batch.B * batch.T)) return {};
  // --cuda-graphs: a record replays one shape, and packed batches of one B x T differ in their token
  // count, so inference with graphs computes each batch padded (the shapes test_cuda_kernels' graphs
  // group records: with padding, every batch was packed and none recorded)
  if (cuda_graphs() && backend().graphs()) return {};
  std::vector<int64_t> len(static_cast<size_t>(batch.B));
  int64_t total = 0;
  for (int64_t b = 0; b < batch.B; ++b) {
    const int32_t* m = batch.input_mask.data() + b * batch.T;
    int64_t n = 0;
    while (n < batch.T && m[n] != 0) ++n;
    for (int64_t t = n; t < batch.T; ++t)
      if (m[t] != 0) return {};                       // not a run of ones then zeros: computed padded
    if (n == 0) return {};                            // an empty row has no [CLS] row to pool: computed padded
    if (!head.labels_within(batch, b, n)) return {};  // a label the head reads in the padding
    len[static_cast<size_t>(b)] = n;
    total += n;
  }
  // No padding: the packed layout is the padded one. A backend with a varlen attention kernel
  // computes it packed all the same, so that a sequence's bits do not depend on whether its batch
  // had padding; one without (its varlen attention is a call per sequence) keeps the padded call.
  if (total == batch.B * batch.T && !backend().varlen_attention()) return {};
  return len;
}

// Whether every row of the batch's input_mask is n >= 1 ones then zeros: its additive mask is then
// n zeros then -10000s, which the backend may take as lengths (AttentionHints::right_padded: CUDA's
// cuDNN attention). BERT's tokenizers pad on the right; a caller's mask with holes, other values or
// an empty row is not.
static bool right_padded(const BertBatch& batch) {
  if (batch.input_mask.size() != static_cast<size_t>(batch.B * batch.T)) return false;
  for (int64_t b = 0; b < batch.B; ++b) {
    const int32_t* m = batch.input_mask.data() + b * batch.T;
    int64_t n = 0;
    while (n < batch.T && m[n] == 1) ++n;
    if (n == 0) return false;
    for (int64_t t = n; t < batch.T; ++t)
      if (m[t] != 0) return false;
  }
  return true;
}

// Sets up the activations for `batch` (packed or padded), its ids and additive mask where the
// backend computes: everything a forward reads besides the weights.
void Encoder::prepare_batch(const BertBatch& batch, bool training, bool backward, Precision prec, Rng& rng,
                            const Head& head) {
  BERTCC_CHECK(!(prec == Precision::I8 && (backward || training)), "int8 precision is for inference only");
  const int64_t B = batch.B, T = batch.T;
  const int64_t C = cfg_.hidden_size, NH = cfg_.num_attention_heads;
  const float p_a = training ? cfg_.attention_probs_dropout_prob : 0.0f;
  const bool h16 = prec == Precision::BF16;
  Backend& be = backend();
  // Unpadded execution: the rows are the real tokens, sequence after sequence (cu: where each
  // starts), and the attention is the backend's variable-length one over them (no mask).
  const std::vector<int64_t> len = packed_lengths(batch, head);
  const bool packed = !len.empty();
  Shape shape = padded_shape(cfg_, B, T, p_a > 0, prec, be, /*inference=*/!backward);
  std::vector<int64_t> cu;
  uint64_t drop_total = 0;
  if (packed) {
    cu.assign(static_cast<size_t>(B + 1), 0);
    for (int64_t b = 0; b < B; ++b)
      cu[static_cast<size_t>(b + 1)] = cu[static_cast<size_t>(b)] + len[static_cast<size_t>(b)];
    drop_total = attention_varlen_drop_numbers(cu.data(), B, static_cast<uint64_t>(NH));
    shape = Shape{B,
                  T,
                  cu.back(),
                  be.attention_varlen_saved_size(cu.data(), B, C, NH, p_a > 0, prec, h16),
                  be.attention_varlen_work_size(cu.data(), B, C, NH),
                  true};
  }
  const int64_t N = shape.N;
  ensure_acts(shape, p_a > 0, prec, /*inference=*/!backward);
  if (backward) weights_.ensure_grads();  // before the backward's parallel regions take gradient pointers
  weights_.refresh_bf16(prec);
  weights_.refresh_int8(prec, int8_linears_);
  Acts& a = *acts_;
  if (packed) {
    a.cu = std::move(cu);
    a.drop_total = drop_total;
    a.cls_rows.assign(a.cu.begin(), a.cu.end() - 1);
    batch_ids_.resize(static_cast<size_t>(N));  // the packed rows' ids (kept for the embeddings' backward)
    batch_seg_.resize(static_cast<size_t>(N));
    for (int64_t b = 0; b < B; ++b) {
      const auto [r0, n] = a.seq(b);
      std::copy_n(batch.input_ids.data() + b * T, n, batch_ids_.data() + r0);
      std::copy_n(batch.segment_ids.data() + b * T, n, batch_seg_.data() + r0);
    }
  } else {
    batch_ids_ = batch.input_ids;
    batch_seg_ = batch.segment_ids;
    a.cls_rows.resize(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) a.cls_rows[static_cast<size_t>(b)] = b * T;
  }
  a.ids = batch_ids_.data();
  a.seg = batch_seg_.data();
  if (!be.on_host()) {  // the batch's ids on the device (kept for the embeddings' backward)
    a.ids = a.dids.ensure(be, static_cast<size_t>(N));
    a.seg = a.dseg.ensure(be, static_cast<size_t>(N));
    be.upload(a.dids.get(), batch_ids_.data(), sizeof(int32_t) * N);
    be.upload(a.dseg.get(), batch_seg_.data(), sizeof(int32_t) * N);
  }
  a.dropout = training;
  a.rng_seed = rng.seed;
  a.seq_pad_ready = false;  // (sequence_output makes it again for this batch when asked)
  if (packed) {             // no padding in a sequence's own rows: an additive mask of zeros
    std::fill(a.mask_add.begin(), a.mask_add.end(), 0.0f);
  } else {
    for (int64_t i = 0; i < N; ++i) a.mask_add[i] = (1.0f - static_cast<float>(batch.input_mask[i])) * -10000.0f;
  }
  a.right_padded = !packed && right_padded(batch);
  if (!be.on_host()) be.upload(a.dmask.get(), a.mask_add.data(), sizeof(float) * B * T);
}

void Encoder::encode(const BertBatch& batch, bool training, Precision prec, Rng& rng, bool backward, const Head& head,
                     bool cls_rows_only) {
  prepare_batch(batch, training, backward, prec, rng, head);
  Acts& a = *acts_;
  // The last layer on the [CLS] rows alone (cls_rows_last_layer): an inference whose head reads
  // nothing else, on the CPU where its linear layers give a row the same bits whatever rows are
  // computed beside it (kernels::linear_rows_invariant; LayerNorm and GELU always do)
  a.cls_only = cls_rows_only && !training && !backward && backend().on_host() && cls_rows_last_layer() &&
               kernels::linear_rows_invariant(prec);
  const Pass pass{prec, training ? cfg_.hidden_dropout_prob : 0.0f, training ? cfg_.attention_probs_dropout_prob : 0.0f,
                  &rng};
  // The forward from the embeddings on: device work alone (the batch is where the backend computes).
  auto forward = [&] {
    embeddings_forward(pass);
    for (int l = 0; l < cfg_.num_hidden_layers; ++l) layer_forward(l, pass);
    outputs_forward(pass);
  };
  // --cuda-graphs: an inference forward runs as one recorded graph from its shape's second time on
  Backend& be = backend();
  if (!training && !backward && be.graphs() && cuda_graphs() && !a.packed)
    run_recorded(a.graphs, a.darena.get(), be, a.B, a.T, prec, a.right_padded, forward);
  else
    forward();
}

// embeddings -> LayerNorm -> dropout [-> embeddings_project (ELECTRA, embedding_size != hidden)]
void Encoder::embeddings_forward(const Pass& pass) {
  Acts& a = *acts_;
  Backend& be = backend();
  const int64_t B = a.B, T = a.T, N = a.N, C = cfg_.hidden_size, E = cfg_.embedding_dim();
  const bool project = E != C;
  float* emb = project ? a.emb_out : a.x[0];
  if (a.packed) {  // positions count from 0 in each sequence
    for (int64_t b = 0; b < B; ++b) {
      const auto [r0, n] = a.seq(b);
      if (!embeddings_int8(a.emb_sum + r0 * E, a.ids + r0, a.seg + r0, 1, n, pass))
        be.embeddings_forward(a.emb_sum + r0 * E, a.ids + r0, a.seg + r0, w(refs_.word), w(refs_.position),
                              w(refs_.token_type), 1, n, E);
    }
  } else if (!embeddings_int8(a.emb_sum, a.ids, a.seg, B, T, pass)) {
    be.embeddings_forward(a.emb_sum, a.ids, a.seg, w(refs_.word), w(refs_.position), w(refs_.token_type), B, T, E);
  }
  be.layernorm_forward(emb, a.emb_mean, a.emb_rstd, a.emb_sum, w(refs_.emb_norm.g), w(refs_.emb_norm.b), N, E,
                       cfg_.layer_norm_eps);
  if (pass.p_h > 0) {
    a.seed_emb = pass.rng->reserve(N * E);
    be.dropout_forward(emb, emb, N * E, pass.p_h, *pass.rng, a.seed_emb);
  }
  if (project && !linear_held(a.x[0], a.emb_out, refs_.project, N, pass.prec))
    be.linear_forward(a.x[0], a.emb_out, w(refs_.project.w), w(refs_.project.b), N, C, E, pass.prec,
                      w16(refs_.project.w, pass.prec));
}

// Rows the last layer's attention output and input hold for the [CLS] tokens (Acts::cls_rows)
// moved to rows 0..B-1 (to_front), or the layer's output rows
// 0..B-1 moved back to the [CLS] rows (after the rest of the layer ran on those B rows alone).
// Row b's [CLS] row is at b or after it, so the moves in b order (back: reverse order) overwrite
// only rows already moved.
void Encoder::move_cls_rows(int l, bool to_front) {
  Acts& a = *acts_;
  Backend& be = backend();
  const int64_t B = a.B, C = cfg_.hidden_size;
  Acts::Layer& ly = a.layers[static_cast<size_t>(l)];
  const auto cls = [&](int64_t b) { return a.cls_rows[static_cast<size_t>(b)]; };
  const auto move = [&](void* base, int64_t row_bytes, int64_t from, int64_t to) {
    if (!base || from == to) return;
    char* p = static_cast<char*>(base);
    be.copy(p + to * row_bytes, p + from * row_bytes, static_cast<size_t>(row_bytes));
  };
  const int64_t f32 = C * static_cast<int64_t>(sizeof(float)), h16 = C * static_cast<int64_t>(sizeof(bf16_t));
  if (to_front) {
    for (int64_t b = 0; b < B; ++b) {
      move(ly.ctx, f32, cls(b), b);
      move(a.as16(ly.ctx16), h16, cls(b), b);
      move(a.x[static_cast<size_t>(l)], f32, cls(b), b);
    }
  } else {
    for (int64_t b = B - 1; b >= 0; --b) move(a.x[static_cast<size_t>(l) + 1], f32, b, cls(b));
  }
}

// Encoder layer l: x[l+1] = LN2(dropout(FFN(h1)) + h1), h1 = LN1(dropout(attention(x[l])) + x[l]).
// The last layer of a [CLS]-only pass (Acts::cls_only) runs its attention on every row (the keys
// and values are every row's) and the rest, row by row, on the B [CLS] rows alone (move_cls_rows).
void Encoder::layer_forward(int l, const Pass& pass) {
  Acts& a = *acts_;
  Backend& be = backend();
  const int64_t C = cfg_.hidden_size, I = cfg_.intermediate_size;
  const bool cls_only = a.cls_only && l + 1 == cfg_.num_hidden_layers;
  const Precision prec = pass.prec;
  const float p_h = pass.p_h, eps = cfg_.layer_norm_eps;
  Rng& rng = *pass.rng;
  Acts::Layer& ly = a.layers[l];
  const LayerRefs& L = refs_.layers[static_cast<size_t>(l)];
  const float* xin = a.x[l];
  // x[l]'s rounding: made here for layer 0 (after the embeddings' dropout), by the previous
  // layer's LayerNorm for the others (a GEMM input's bf16 rounding, made by its forward product
  // and kept for the backward's)
  // (bf16: the output as its rounding qkv16 alone, what the attention reads)
  LinearIo qkv_io = l == 0 ? LinearIo{nullptr, a.as16(ly.x16), nullptr} : LinearIo{a.as16(ly.x16), nullptr, nullptr};
  qkv_io.y16 = a.as16(ly.qkv16);
  if (!linear_held(ly.qkv, xin, L.qkv, a.N, prec, &qkv_io))
    be.linear_forward(ly.qkv, xin, w(L.qkv.w), w(L.qkv.b), a.N, 3 * C, C, prec, w16(L.qkv.w, prec), qkv_io);
  // (bf16: the output as its rounding ctx16 alone, what the product reads)
  attention_forward(l, pass);
  // the rows from here on: every row, or the [CLS] rows moved to the front
  const int64_t N = cls_only ? a.B : a.N;
  if (cls_only) move_cls_rows(l, /*to_front=*/true);
  // (int8: the output layer and the LayerNorm in one kernel, no fp32 intermediate)
  const kernels::Int8LayerNorm ln1{ly.h1, ly.ln1_sum,       ly.ln1_mean,      ly.ln1_rstd,
                                   xin,   w(L.attn_norm.g), w(L.attn_norm.b), eps};
  if (!output_int8(ln1, ly.ctx, L.attn_out, N, pass)) {
    const LinearIo out_io{a.as16(ly.ctx16), nullptr, nullptr};
    if (!linear_held(a.tmp_c, ly.ctx, L.attn_out, N, prec, &out_io))
      be.linear_forward(a.tmp_c, ly.ctx, w(L.attn_out.w), w(L.attn_out.b), N, C, C, prec, w16(L.attn_out.w, prec),
                        out_io);
    if (p_h > 0) ly.seed_attn_out = rng.reserve(N * C);
    be.residual_dropout_layernorm_forward(ly.h1, ly.ln1_sum, ly.ln1_mean, ly.ln1_rstd, a.tmp_c, xin, w(L.attn_norm.g),
                                          w(L.attn_norm.b), N, C, eps, a.as16(ly.h1_16), p_h, rng, ly.seed_attn_out);
  }
  // bf16: FFN1's output as its rounding inter16 alone (as PyTorch's autocast Linear writes bf16),
  // the GELU's input forward and backward
  LinearIo ffn1_io{a.as16(ly.h1_16), nullptr, nullptr};
  ffn1_io.y16 = a.as16(ly.inter16);
  // (int8: the block and the LayerNorm in one kernel, no fp32 intermediate)
  const kernels::Int8LayerNorm ln2{a.x[l + 1], ly.ln2_sum,      ly.ln2_mean,     ly.ln2_rstd,
                                   ly.h1,      w(L.ffn_norm.g), w(L.ffn_norm.b), eps};
  if (ffn_int8(ln2, ly.h1, L, N, pass)) {
    if (cls_only) move_cls_rows(l, /*to_front=*/false);
    return;
  }
  // (fp32 inference on the row kernel: the block in one kernel, its packed inner rows in gelu's slot,
  // sized for them: plan_inference_acts)
  if (!(a.inference && weights_.ffn_held(a.tmp_c, ly.h1, L.ffn_in, L.ffn_out, N, prec, cfg_.activation(), ly.gelu))) {
    if (!linear_held(ly.inter, ly.h1, L.ffn_in, N, prec, &ffn1_io))
      be.linear_forward(ly.inter, ly.h1, w(L.ffn_in.w), w(L.ffn_in.b), N, I, C, prec, w16(L.ffn_in.w, prec), ffn1_io);
    if (prec == Precision::BF16)
      be.gelu_forward16(a.as16(ly.gelu16), a.as16(ly.inter16), N * I, cfg_.activation());
    else
      be.gelu_forward(ly.gelu, ly.inter, N * I, cfg_.activation());
    const LinearIo ffn2_io{a.as16(ly.gelu16), nullptr, nullptr};
    if (!linear_held(a.tmp_c, ly.gelu, L.ffn_out, N, prec, &ffn2_io))
      be.linear_forward(a.tmp_c, ly.gelu, w(L.ffn_out.w), w(L.ffn_out.b), N, C, I, prec, w16(L.ffn_out.w, prec),
                        ffn2_io);
  }
  if (p_h > 0) ly.seed_ffn_out = rng.reserve(N * C);
  be.residual_dropout_layernorm_forward(
      a.x[l + 1], ly.ln2_sum, ly.ln2_mean, ly.ln2_rstd, a.tmp_c, ly.h1, w(L.ffn_norm.g), w(L.ffn_norm.b), N, C, eps,
      l + 1 < cfg_.num_hidden_layers ? a.as16(a.layers[l + 1].x16) : nullptr, p_h, rng, ly.seed_ffn_out);
  if (cls_only) move_cls_rows(l, /*to_front=*/false);
}

// The layer's attention: ctx = softmax(q k^T / sqrt(d) + mask) v over the batch (padded) or over
// each sequence's own rows (packed)
void Encoder::attention_forward(int l, const Pass& pass) {
  Acts& a = *acts_;
  Acts::Layer& ly = a.layers[static_cast<size_t>(l)];
  Backend& be = backend();
  const int64_t B = a.B, T = a.T, C = cfg_.hidden_size, NH = cfg_.num_attention_heads;
  const Precision prec = pass.prec;
  const float p_a = pass.p_a;
  Rng& rng = *pass.rng;
  const float* qkv = prec == Precision::BF16 ? nullptr : ly.qkv;
  if (!a.packed) {
    ly.seed_att =
        p_a > 0 ? rng.reserve(attention_drop_numbers(B * NH, T)) : 0;  // the CPU saves Pd; CUDA regenerates it
    be.attention_forward(ly.ctx, a.as16(ly.ctx16), ly.probs, a.att_work, qkv, a.as16(ly.qkv16), a.mask, B, T, C, NH,
                         p_a, rng, ly.seed_att, prec, AttentionHints{a.right_padded, a.inference});
    return;
  }
  ly.seed_att = p_a > 0 ? rng.reserve(a.drop_total) : 0;
  be.attention_varlen_forward(ly.ctx, a.as16(ly.ctx16), ly.probs, a.att_work, qkv, a.as16(ly.qkv16), a.cu.data(), B, C,
                              NH, p_a, rng, ly.seed_att, prec);
}

// pooler: tanh(dense(h[:, 0])) (packed: the [CLS] rows cu[b]). The heads read the packed rows; the
// padded sequence output is made only when a caller asks for it (sequence_output).
void Encoder::outputs_forward(const Pass& pass) {
  Acts& a = *acts_;
  Backend& be = backend();
  const int64_t B = a.B, T = a.T, C = cfg_.hidden_size;
  if (!pooler_) return;
  if (a.packed)
    be.gather_rows(a.cls, a.x.back(), rows_on_backend(a.cls_rows), B, C);
  else
    be.copy_rows(a.cls, C, a.x.back(), T * C, B, C);
  be.linear_forward(a.pooled, a.cls, w(refs_.pooler.w), w(refs_.pooler.b), B, C, C, pass.prec,
                    w16(refs_.pooler.w, pass.prec));
  be.tanh_forward(a.pooled, a.pooled, B * C);
}

void Encoder::encode_backward(const float* dseq, const float* dpooled, Precision prec) {
  BERTCC_CHECK(acts_ && !acts_->inference, "encode_backward: the forward was run without backward (inference)");
  Acts& a = *acts_;
  const int64_t B = a.B, T = a.T, N = a.N, C = cfg_.hidden_size;
  Rng rng{a.rng_seed, 0};  // (the backward draws nothing: the masks come again from the saved seeds)
  const Pass pass{prec, a.dropout ? cfg_.hidden_dropout_prob : 0.0f,
                  a.dropout ? cfg_.attention_probs_dropout_prob : 0.0f, &rng};
  Backend& be = backend();
  // g = d(sequence output), in the encoder's rows (packed: the N real tokens, as sequence_rows)
  if (dseq) {
    be.copy(a.g, dseq, sizeof(float) * N * C);
  } else {
    be.zero(a.g, sizeof(float) * static_cast<size_t>(N * C));
  }
  if (dpooled) {
    BERTCC_CHECK(pooler_, "encode_backward: this model has no pooler");
    // pooled = tanh(cls W^T + b); cls = h[:, 0]
    be.zero(a.dpool, sizeof(float) * static_cast<size_t>(B * C));
    be.tanh_backward(a.dpool, a.pooled, dpooled, B * C);
    be.zero(a.dcls, sizeof(float) * static_cast<size_t>(B * C));
    be.linear_backward(a.dcls, dgrad(refs_.pooler.w), dgrad(refs_.pooler.b), a.dpool, a.cls, w(refs_.pooler.w), B, C, C,
                       prec, w16(refs_.pooler.w, prec));
    if (a.packed)
      be.scatter_add_rows(a.g, a.dcls, rows_on_backend(a.cls_rows), B, C);
    else
      be.add_rows(a.g, T * C, a.dcls, C, B, C);
    if (grad_ready_) grad_ready_(weights_.table()[refs_.pooler.w].offset);
  }
  for (int l = cfg_.num_hidden_layers - 1; l >= weights_.first_trainable_layer(); --l) layer_backward(l, pass);
  if (weights_.embeddings_frozen()) {  // no gradient for frozen embeddings
    if (grad_ready_) grad_ready_(0);
    return;
  }
  embeddings_backward(pass);
}

// Layer l's backward: from g = d(x[l+1]) to g = d(x[l]), the layer's weight gradients added
void Encoder::layer_backward(int l, const Pass& pass) {
  Acts& a = *acts_;
  Backend& be = backend();
  const int64_t N = a.N, C = cfg_.hidden_size, I = cfg_.intermediate_size;
  const Precision prec = pass.prec;
  const float p_h = pass.p_h;
  const Rng& rng = *pass.rng;
  const Activation act = cfg_.activation();
  Acts::Layer& ly = a.layers[l];
  const LayerRefs& L = refs_.layers[static_cast<size_t>(l)];
  // x[l+1] = LN2(dropout(ffn_out) + h1)
  // (the layer's gradient buffers are written, not added to: no zeroing pass). The gradient
  // into h1 goes straight to dh, the residual branch's buffer, which FFN1's backward adds to
  // only after the FFN branch has read it (no copy)
  const float* dffn = a.dh;
  const bf16_t* dffn16 = nullptr;  // its rounding, where the dropout backward makes it
  if (p_h > 0) {
    be.layernorm_dropout_backward(a.dh, dgrad(L.ffn_norm.g), dgrad(L.ffn_norm.b), a.g, ly.ln2_sum, w(L.ffn_norm.g),
                                  ly.ln2_mean, ly.ln2_rstd, N, C, a.d2, a.as16(a.d2_16), p_h, rng, ly.seed_ffn_out);
    dffn = a.d2;
    dffn16 = a.as16(a.d2_16);
  } else {
    be.layernorm_backward(a.dh, dgrad(L.ffn_norm.g), dgrad(L.ffn_norm.b), a.g, ly.ln2_sum, w(L.ffn_norm.g), ly.ln2_mean,
                          ly.ln2_rstd, N, C,
                          /*overwrite=*/true);
  }
  // ffn_out = gelu W2^T + b2; inter = h1 W1^T + b1. In bf16 both FFN1 products read the
  // gradient's rounding only, so the GELU backward makes that and the bias gradient (fused on
  // CUDA: the fp32 gradient is not written). bf16 keeps no GELU output per layer (2 bytes per
  // FFN element, the largest activation of a layer): the GELU backward, which reads its input
  // anyway, writes it again (gelu_forward16's bits) into layer 0's slot, where the FFN2 weight
  // gradient, computed after the input gradient, reads it.
  if (prec == Precision::BF16) {
    be.linear_backward(a.di, nullptr, nullptr, dffn, nullptr, w(L.ffn_out.w), N, C, I, prec, w16(L.ffn_out.w, prec),
                       LinearIo{nullptr, nullptr, dffn16, /*overwrite_dx=*/true});
    be.gelu_bias_backward(a.as16(a.di2_16), dgrad(L.ffn_in.b), a.as16(ly.inter16), a.di, N, I, act, a.di2,
                          a.as16(ly.gelu16));
    be.linear_backward(nullptr, dgrad(L.ffn_out.w), dgrad(L.ffn_out.b), dffn,
                       /*x: gelu16 alone*/ nullptr, w(L.ffn_out.w), N, C, I, prec, w16(L.ffn_out.w, prec),
                       LinearIo{a.as16(ly.gelu16), nullptr, dffn16});
    be.linear_backward(a.dh, dgrad(L.ffn_in.w), nullptr, nullptr, /*x: h1_16 alone*/ nullptr, w(L.ffn_in.w), N, I, C,
                       prec, w16(L.ffn_in.w, prec), LinearIo{a.as16(ly.h1_16), nullptr, a.as16(a.di2_16)});
  } else {
    be.linear_backward(a.di, dgrad(L.ffn_out.w), dgrad(L.ffn_out.b), dffn, ly.gelu, w(L.ffn_out.w), N, C, I, prec,
                       w16(L.ffn_out.w, prec), LinearIo{nullptr, nullptr, dffn16, /*overwrite_dx=*/true});
    be.gelu_backward(a.di2, ly.inter, a.di, N * I, act, nullptr, /*overwrite=*/true);
    be.linear_backward(a.dh, dgrad(L.ffn_in.w), dgrad(L.ffn_in.b), a.di2, ly.h1, w(L.ffn_in.w), N, I, C, prec,
                       w16(L.ffn_in.w, prec), LinearIo{a.as16(ly.h1_16), nullptr, nullptr});
  }
  // h1 = LN1(dropout(attn_out) + x[l]); the gradient into x[l] goes straight to g (read by LN2's
  // backward above, added to by the QKV backward after the attention branch has read it)
  const float* dattn = a.g;
  const bf16_t* dattn16 = nullptr;
  if (p_h > 0) {
    be.layernorm_dropout_backward(a.g, dgrad(L.attn_norm.g), dgrad(L.attn_norm.b), a.dh, ly.ln1_sum, w(L.attn_norm.g),
                                  ly.ln1_mean, ly.ln1_rstd, N, C, a.d2, a.as16(a.d2_16), p_h, rng, ly.seed_attn_out);
    dattn = a.d2;
    dattn16 = a.as16(a.d2_16);
  } else {
    be.layernorm_backward(a.g, dgrad(L.attn_norm.g), dgrad(L.attn_norm.b), a.dh, ly.ln1_sum, w(L.attn_norm.g),
                          ly.ln1_mean, ly.ln1_rstd, N, C,
                          /*overwrite=*/true);
  }
  // (bf16: ctx16 alone; ctx is null)
  be.linear_backward(a.dc, dgrad(L.attn_out.w), dgrad(L.attn_out.b), dattn, ly.ctx, w(L.attn_out.w), N, C, C, prec,
                     w16(L.attn_out.w, prec), LinearIo{a.as16(ly.ctx16), nullptr, dattn16, /*overwrite_dx=*/true});
  // (bf16: null qkv, whose buffer holds the last layer's; the layer's qkv16 serves)
  // (bf16: dqkv's rounding too, the QKV products' operand)
  attention_backward(l, pass);
  // qkv = x[l] Wqkv^T + bqkv   (Q/K/V weights and biases are adjacent in the flat buffers)
  // (bf16: x16 alone; x[l]'s buffer holds a later layer's input by now)
  be.linear_backward(a.g, dgrad(L.qkv.w), dgrad(L.qkv.b), a.dqkv, prec == Precision::BF16 ? nullptr : a.x[l],
                     w(L.qkv.w), N, 3 * C, C, prec, w16(L.qkv.w, prec),
                     LinearIo{a.as16(ly.x16), nullptr, a.as16(a.dqkv16)});
  if (grad_ready_) grad_ready_(weights_.table()[L.qkv.w].offset);  // the layer's first tensor
}

// The attention's backward (the saved probabilities; dropout from the forward's seeds): over the
// batch (padded) or each sequence's own rows (packed)
void Encoder::attention_backward(int l, const Pass& pass) {
  Acts& a = *acts_;
  Acts::Layer& ly = a.layers[static_cast<size_t>(l)];
  Backend& be = backend();
  const int64_t B = a.B, T = a.T, C = cfg_.hidden_size, NH = cfg_.num_attention_heads;
  const Precision prec = pass.prec;
  const float* qkv =
      prec == Precision::BF16 ? nullptr : ly.qkv;  // (bf16: its buffer holds the last layer's; qkv16 serves)
  if (!a.packed) {
    // (bf16: dqkv's rounding too, the QKV products' operand)
    be.attention_backward(a.dqkv, a.as16(a.dqkv16), a.att_work, a.dc, qkv, a.as16(ly.qkv16), ly.ctx, a.as16(ly.ctx16),
                          ly.probs, a.mask, B, T, C, NH, pass.p_a, *pass.rng, ly.seed_att, prec,
                          AttentionHints{a.right_padded, false});
    return;
  }
  be.attention_varlen_backward(a.dqkv, a.as16(a.dqkv16), a.att_work, a.dc, qkv, a.as16(ly.qkv16), ly.ctx,
                               a.as16(ly.ctx16), ly.probs, a.cu.data(), B, C, NH, pass.p_a, *pass.rng, ly.seed_att,
                               prec);
}

// x[0] = [project(] dropout(LN(emb_sum)) [)]: from g = d(x[0]) to the embedding tables' gradients
void Encoder::embeddings_backward(const Pass& pass) {
  Acts& a = *acts_;
  Backend& be = backend();
  const int64_t B = a.B, T = a.T, N = a.N, C = cfg_.hidden_size, E = cfg_.embedding_dim();
  const Precision prec = pass.prec;
  const bool project = E != C;
  float* da = project ? a.demb_a : nullptr;  // scratch [N,E] (the encoder's [N,C] ones when E == C)
  float* db = project ? a.demb_b : a.d2;
  float* dc = project ? a.demb_c : a.d1;
  const float* dx0 = a.g;
  if (project) {
    be.linear_backward(da, dgrad(refs_.project.w), dgrad(refs_.project.b), a.g, a.emb_out, w(refs_.project.w), N, C, E,
                       prec, w16(refs_.project.w, prec), LinearIo{nullptr, nullptr, nullptr, /*overwrite_dx=*/true});
    dx0 = da;
  }
  if (pass.p_h > 0) {
    be.dropout_backward(db, dx0, N * E, pass.p_h, *pass.rng, a.seed_emb, nullptr, /*overwrite=*/true);
    dx0 = db;
  }
  be.layernorm_backward(dc, dgrad(refs_.emb_norm.g), dgrad(refs_.emb_norm.b), dx0, a.emb_sum, w(refs_.emb_norm.g),
                        a.emb_mean, a.emb_rstd, N, E, /*overwrite=*/true);
  // HF's nn.Embedding(padding_idx=pad) gives the padding row no gradient from the lookup.
  float* dwte = dgrad(refs_.word);
  // (kept where the backend computes: a download here would wait for the whole backward on a device)
  float* pad_row = scratch(pad_row_, E, false);
  be.copy_rows(pad_row, E, dwte, E, 1, E);
  if (a.packed) {
    for (int64_t b = 0; b < B; ++b) {
      const auto [r0, n] = a.seq(b);
      be.embeddings_backward(dwte, dgrad(refs_.position), dgrad(refs_.token_type), dc + r0 * E, a.ids + r0, a.seg + r0,
                             1, n, E, cfg_.vocab_size, cfg_.type_vocab_size);
    }
  } else {
    be.embeddings_backward(dwte, dgrad(refs_.position), dgrad(refs_.token_type), dc, a.ids, a.seg, B, T, E,
                           cfg_.vocab_size, cfg_.type_vocab_size);
  }
  be.copy_rows(dwte, E, pad_row, E, 1, E);
  if (grad_ready_) grad_ready_(0);
}

}  // namespace bertcc
