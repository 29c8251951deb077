// --precision int8: dynamic quantization of the encoder's linear layers (kernels/gemm_int8.h).
// Quantized: every encoder layer's query/key/value, attention output, intermediate and output
// dense layers, and ELECTRA's embeddings projection (all but a sliver of the FLOPs); and the word
// embeddings, 8-bit per row (a fifth of bert-base's weights: 94 MB in fp32, 23 MB so; ONNX
// Runtime's quantize_dynamic quantizes them too, per tensor; the masked-LM decoder, tied to them,
// reads the same int8 rows, dequantized). Kept in fp32: the position and
// token-type embeddings, LayerNorms, GELU, residual adds, the pooler and every head (the
// classifier, QA, token-classification layers and the masked-LM transform): under 1 % of a forward's
// FLOPs at sequence 128 and their outputs are the logits themselves, so quantizing them would cost
// accuracy for no speed. (The attention's products: kernels/attention_int8.cpp.)
#include "model/int8.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "bertcc/error.h"
#include "bertcc/runtime.h"
#include "core/settings.h"
#include "kernels/kernels.h"
#include "model/encoder.h"
#include "model/packed.h"

namespace bertcc {

void ModelWeights::refresh_int8(Precision p, const std::vector<Int8Linear>& linears) {
  BERTCC_CHECK(!packed_ || p == packed_->prec, "this model keeps its encoder's linear layers packed for ",
               precision_name(packed_ ? packed_->prec : p), " inference alone: ", precision_name(p),
               " needs their fp32 weights");
  BERTCC_CHECK(!fp32_linears_released_ || packed_ || p == Precision::I8,
               "this model keeps its encoder's linear layers in int8 "
               "alone (loaded for --precision int8): ",
               precision_name(p), " needs their fp32 weights");
  if (p != Precision::I8) return;
  const int act_max = int8_activation_max(int8_activation_bits());  // --int8-activation-bits
  if (q8_ && q8_valid_ && q8_->act_max == act_max && q8_->words.q.empty() == settings().int8_fp32_embeddings) return;
  BERTCC_CHECK(!fp32_linears_released_,
               "the weights of a model loaded for int8 inference alone changed, or the "
               "int8 activations' bits (--int8-activation-bits), or --int8-fp32-embeddings");
  BERTCC_CHECK(be_->on_host(),
               "--precision int8 runs on the CPU only (pass --device cpu, or --precision bf16 on a GPU)");
  if (!q8_) q8_ = std::make_unique<Int8Weights>();
  q8_->by_weight.clear();
  q8_->act_max = act_max;
  for (const Int8Linear& l : linears) quantize_linear(l, act_max);
  q8_->words = {};
  if (!settings().int8_fp32_embeddings) quantize_word_embeddings();
  q8_valid_ = true;
}

Int8Linear ModelWeights::word_embeddings_entry() const {
  const ParamRef r = table_.ref("bert.embeddings.word_embeddings.weight");
  return Int8Linear{LinearRef{r, ParamRef{}}, table_[r].shape[0], table_[r].shape[1]};
}

void ModelWeights::quantize_word_embeddings() {
  const Int8Linear e = word_embeddings_entry();
  q8_->words = kernels::quantize_embeddings_int8(w(e.r.w), e.N, e.K);
}

const kernels::Int8Weight* ModelWeights::int8_word_embeddings(Precision prec) const {
  if (prec != Precision::I8) return nullptr;
  BERTCC_CHECK(q8_ && q8_valid_, "embeddings_int8: the int8 weights were not made");
  return q8_->words.q.empty() ? nullptr : &q8_->words;  // (none: --int8-fp32-embeddings)
}

void ModelWeights::quantize_linear(const Int8Linear& l, int act_max) {
  kernels::Int8Weight& q = q8_->by_weight[l.r.w.i] = kernels::quantize_weight_int8(w(l.r.w), l.N, l.K);
  q.act_max = act_max;
  kernels::pack_int8_weight(q);
}

void ModelWeights::keep_int8_weights_only(const std::vector<Int8Linear>& linears) {
  BERTCC_CHECK(be_->on_host() && dev_offset_.empty(),
               "--precision int8 runs on the CPU only (pass --device cpu, or "
               "--precision bf16 on a GPU)");
  if (load_) {  // quantized as they were loaded (prepare_inference_load)
    BERTCC_CHECK(load_->prec == Precision::I8, "keep_int8_weights_only: the model was loaded for ",
                 precision_name(load_->prec), " inference");
    finish_inference_load();
    q8_valid_ = true;  // (the loader's writes marked them stale)
  }
  refresh_int8(Precision::I8, linears);  // (nothing where made above for the same activation bits)
  release_linear_pages(linears);
  if (!q8_->words.q.empty()) release_linear_pages({word_embeddings_entry()});  // (the decoder reads them too)
}

void ModelWeights::prepare_inference_load(const std::vector<Int8Linear>& linears, Precision prec) {
  load_.reset();
  if (prec != Precision::I8 && prec != Precision::F32) return;  // bf16: keep_packed_weights_only after the load
  if (!be_->on_host() || !dev_offset_.empty() || q8_ || packed_ || fp32_linears_released_ || linears.empty()) return;
  load_ = std::make_unique<InferenceLoad>();
  load_->prec = prec;
  load_->act_max = int8_activation_max(int8_activation_bits());
  for (const Int8Linear& l : linears) load_->pending.push_back({l, l.N * l.K});
  if (prec == Precision::I8 && !settings().int8_fp32_embeddings) {  // the word embeddings, per row once written
    const Int8Linear e = word_embeddings_entry();
    load_->words = e.r.w.i;
    load_->pending.push_back({e, e.N * e.K});
  }
}

void ModelWeights::tensor_written(ParamRef r) {
  if (!load_) return;
  // the linear layer whose weight holds this tensor (a block may hold several: Q, K and V), made
  // once all of it is written
  const ParamEntry& e = table_[r];
  const size_t b = e.offset, end = e.offset + e.numel;
  for (size_t i = 0; i < load_->pending.size(); ++i) {
    InferenceLoad::Pending& p = load_->pending[i];
    const size_t pb = table_[p.l.r.w].offset, pe = pb + static_cast<size_t>(p.l.N * p.l.K);
    if (b < pb || end > pe) continue;
    p.unwritten -= static_cast<int64_t>(e.numel);
    if (p.unwritten > 0) return;
    const Int8Linear l = p.l;
    load_->pending.erase(load_->pending.begin() + static_cast<std::ptrdiff_t>(i));
    return make_loaded_linear(l);
  }
}

void ModelWeights::make_loaded_linear(const Int8Linear& l) {
  if (load_->prec == Precision::I8) {
    if (!q8_) {
      q8_ = std::make_unique<Int8Weights>();
      q8_->act_max = load_->act_max;
    }
    if (l.r.w.i == load_->words)
      quantize_word_embeddings();
    else
      quantize_linear(l, q8_->act_max);
  } else {
    if (!packed_) {
      packed_ = std::make_unique<PackedLinears>();
      packed_->prec = load_->prec;
    }
    if (!pack_linear(l, load_->prec, *packed_)) return;  // this CPU's kernel reads the plain weight
  }
  release_linear_pages({l});
}

void ModelWeights::finish_inference_load() {
  const std::vector<InferenceLoad::Pending> left = std::move(load_->pending);
  load_->pending.clear();
  for (const InferenceLoad::Pending& p : left) make_loaded_linear(p.l);
  load_.reset();
}

void ModelWeights::release_linear_pages(const std::vector<Int8Linear>& linears) {
  // Whole pages inside each matrix (and inside its bf16 copy, where the CPU holds one) back to the
  // system (madvise: they read as zeros if touched again, which the checks of keep_*_only's callers
  // prevent); the pages shared with kept tensors stay. And no huge pages there any more: the
  // buffer asked for them (ZeroPagesAllocator), and the kernel's khugepaged would otherwise, in
  // time, collapse a 2 MB region that holds a kept bias or LayerNorm into one resident huge page,
  // given-back pages and all.
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto release = [&](const void* from, size_t bytes) {
    const auto begin = reinterpret_cast<uintptr_t>(from), end = begin + bytes;
    const uintptr_t b = (begin + page - 1) / page * page, e = end / page * page;
    if (e > b) {
      madvise(reinterpret_cast<void*>(b), e - b, MADV_NOHUGEPAGE);
      madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
    }
  };
  for (const Int8Linear& l : linears) {
    const size_t n = static_cast<size_t>(l.N * l.K), at = static_cast<size_t>(table_[l.r.w].offset);
    release(params_.data() + at, n * sizeof(float));
    if (!params16_.empty()) release(params16_.data() + at, n * sizeof(bf16_t));
  }
  fp32_linears_released_ = true;
}

const kernels::Int8Weight* ModelWeights::int8_weight(const LinearRef& r, Precision prec) const {
  if (prec != Precision::I8) return nullptr;
  BERTCC_CHECK(q8_ && q8_valid_, "linear_int8: the int8 weights were not made (refresh_int8)");
  const auto it = q8_->by_weight.find(r.w.i);
  BERTCC_CHECK(it != q8_->by_weight.end(), "linear_int8: a linear layer without int8 weights");
  return &it->second;
}

bool ModelWeights::linear_held(float* y, const float* x, const LinearRef& r, int64_t M, Precision prec,
                               const LinearIo* io) const {
  const kernels::Int8Weight* q = int8_weight(r, prec);
  if (q) kernels::linear_forward_int8(y, x, *q, w(r.b), M);
  return q != nullptr || linear_packed(y, x, io, r, M, prec);
}

bool Encoder::output_int8(const kernels::Int8LayerNorm& ln, const float* x, const LinearRef& r, int64_t M,
                          const Pass& pass) const {
  const kernels::Int8Weight* q = weights_.int8_weight(r, pass.prec);
  if (!q) return false;
  kernels::linear_residual_layernorm_int8(ln, x, *q, w(r.b), M);
  return true;
}

bool Encoder::embeddings_int8(float* out, const int32_t* ids, const int32_t* seg, int64_t B, int64_t T,
                              const Pass& pass) const {
  const kernels::Int8Weight* q = weights_.int8_word_embeddings(pass.prec);
  if (!q) return false;
  kernels::embeddings_forward_int8(out, ids, seg, q->q.data(), q->scale.data(), w(refs_.position), w(refs_.token_type),
                                   B, T, cfg_.embedding_dim());
  return true;
}

bool Encoder::ffn_int8(const kernels::Int8LayerNorm& ln, const float* x, const LayerRefs& L, int64_t M,
                       const Pass& pass) const {
  const kernels::Int8Weight* q1 = weights_.int8_weight(L.ffn_in, pass.prec);
  if (!q1) return false;
  kernels::ffn_layernorm_int8(ln, x, *q1, w(L.ffn_in.b), *weights_.int8_weight(L.ffn_out, pass.prec), w(L.ffn_out.b), M,
                              cfg_.activation());
  return true;
}

}  // namespace bertcc
