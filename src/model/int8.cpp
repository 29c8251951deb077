// --precision int8: dynamic quantization of the encoder's linear layers (kernels/gemm_int8.h).
// Quantized: every encoder layer's query/key/value, attention output, intermediate and output
// dense layers, and ELECTRA's embeddings projection (all but a sliver of the FLOPs). Kept in fp32:
// the embeddings, LayerNorms, attention (its two matmuls and softmax), GELU, residual adds, the
// pooler and every head (the classifier, QA, token-classification and masked-LM layers): they are
// under 1 % of a forward's FLOPs at sequence 128 and their outputs are the logits themselves, so
// quantizing them would cost accuracy for no speed.
#include "model/int8.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

#include "backend/backend.h"
#include "bertcc/error.h"
#include "bertcc/runtime.h"
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
  if (q8_ && q8_valid_ && q8_->act_max == act_max) return;
  BERTCC_CHECK(!fp32_linears_released_,
               "the weights of a model loaded for int8 inference alone changed, or the "
               "int8 activations' bits (--int8-activation-bits)");
  BERTCC_CHECK(be_->on_host(),
               "--precision int8 runs on the CPU only (pass --device cpu, or --precision bf16 on a GPU)");
  if (!q8_) q8_ = std::make_unique<Int8Weights>();
  q8_->by_weight.clear();
  q8_->act_max = act_max;
  for (const Int8Linear& l : linears) {
    kernels::Int8Weight& q = q8_->by_weight[l.r.w.i] = kernels::quantize_weight_int8(w(l.r.w), l.N, l.K);
    q.act_max = act_max;
    kernels::pack_int8_weight(q);
  }
  q8_valid_ = true;
}

void ModelWeights::keep_int8_weights_only(const std::vector<Int8Linear>& linears) {
  BERTCC_CHECK(be_->on_host() && dev_offset_.empty(),
               "--precision int8 runs on the CPU only (pass --device cpu, or "
               "--precision bf16 on a GPU)");
  refresh_int8(Precision::I8, linears);
  release_linear_pages(linears);
}

void ModelWeights::release_linear_pages(const std::vector<Int8Linear>& linears) {
  // Whole pages inside each matrix (and inside its bf16 copy, where the CPU holds one) back to the
  // system (madvise: they read as zeros if touched again, which the checks of keep_*_only's callers
  // prevent); the pages shared with kept tensors stay.
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto release = [&](const void* from, size_t bytes) {
    const auto begin = reinterpret_cast<uintptr_t>(from), end = begin + bytes;
    const uintptr_t b = (begin + page - 1) / page * page, e = end / page * page;
    if (e > b) madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
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

bool Encoder::ffn_int8(const kernels::Int8LayerNorm& ln, const float* x, const LayerRefs& L, int64_t M,
                       const Pass& pass) const {
  const kernels::Int8Weight* q1 = weights_.int8_weight(L.ffn_in, pass.prec);
  if (!q1) return false;
  kernels::ffn_layernorm_int8(ln, x, *q1, w(L.ffn_in.b), *weights_.int8_weight(L.ffn_out, pass.prec), w(L.ffn_out.b), M,
                              cfg_.activation());
  return true;
}

}  // namespace bertcc
