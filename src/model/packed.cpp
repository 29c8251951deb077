// fp32 and bf16 inference on the CPU with the encoder's linear layers packed once into the layout
// their kernel reads (kernels/gemm.h: pack_linear_weight, pack_linear_weight_bf16; oneDNN's blocked
// layout, or the row kernel's panels for fp32 on AVX2 CPUs): a call then skips copying the weight
// into that layout, which is a sixth of a bert-base feed-forward GEMM at 2 threads and most of a
// small batch's. The packed copy replaces the fp32 matrices (and, for bf16, their bf16 copies:
// their pages are given back, as for int8), so a model loaded this way computes in that one
// precision. Where the kernel reads plain weights (oneDNN's choice; bf16 emulated on AVX2) nothing
// is packed and the model is left as it is.
#include "model/packed.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/ops.h"
#include "bertcc/error.h"
#include "kernels/kernels.h"

namespace bertcc {

void ModelWeights::keep_packed_weights_only(const std::vector<Int8Linear>& linears, Precision prec) {
  BERTCC_CHECK(prec == Precision::F32 || prec == Precision::BF16, "keep_packed_weights_only: fp32 or bf16, not ",
               precision_name(prec));
  if (load_) {  // packed as they were loaded (prepare_inference_load)
    BERTCC_CHECK(load_->prec == prec, "keep_packed_weights_only: the model was loaded for ",
                 precision_name(load_->prec), " inference, not ", precision_name(prec));
    finish_inference_load();
    if (packed_ && packed_->by_weight.empty()) packed_.reset();  // this CPU's kernels read plain weights
    packed_valid_ = packed_ != nullptr;
    return;
  }
  BERTCC_CHECK(!fp32_linears_released_ && !q8_, "keep_packed_weights_only: the model already keeps int8 weights");
  if (!be_->on_host() || !dev_offset_.empty() || linears.empty()) return;  // the CPU's own matmuls only
  const bool bf = prec == Precision::BF16;
  // bf16: the copy made as it is packed, a layer at a time, and the rest after (see below), so that
  // loading never holds the whole bf16 copy beside the fp32 weights; unless it is made already
  const bool bf_by_layer = bf && !params16_valid_ && !dev_params16_;
  if (bf_by_layer)
    size_untouched_in_huge_pages(params16_, params_.size());
  else
    refresh_bf16(prec);
  auto packed = std::make_unique<PackedLinears>();
  packed->prec = prec;
  std::vector<std::pair<size_t, size_t>> done;  // [begin, end) of params16_ written
  for (const Int8Linear& l : linears) {
    const size_t at = static_cast<size_t>(table_[l.r.w].offset), n = static_cast<size_t>(l.N * l.K);
    if (bf_by_layer) {
      to_bf16(params_.data() + at, params16_.data() + at, n);
      done.emplace_back(at, at + n);
    }
    if (!pack_linear(l, prec, *packed)) continue;  // this CPU's matmul reads plain weights for this shape
    release_linear_pages({l});                     // one layer at a time: at most one layer held twice
  }
  if (bf_by_layer) {  // the rest of the bf16 copy: every parameter between the linears written above
    std::sort(done.begin(), done.end());
    size_t from = 0;
    for (const auto& [b, e] : done) {
      if (b > from) to_bf16(params_.data() + from, params16_.data() + from, b - from);
      from = std::max(from, e);
    }
    if (from < params_.size()) to_bf16(params_.data() + from, params16_.data() + from, params_.size() - from);
    params16_valid_ = true;
  }
  if (packed->by_weight.empty()) return;
  packed_ = std::move(packed);
  packed_valid_ = true;
}

bool ModelWeights::pack_linear(const Int8Linear& l, Precision prec, PackedLinears& into) const {
  std::shared_ptr<const kernels::PackedWeights> p = prec == Precision::BF16
                                                        ? kernels::pack_linear_weight_bf16(w16(l.r.w, prec), l.N, l.K)
                                                        : kernels::pack_linear_weight(w(l.r.w), l.N, l.K);
  if (!p) return false;  // nothing to gain
  into.by_weight[l.r.w.i] = PackedLinears::Layer{std::move(p), l.N, l.K};
  return true;
}

bool ModelWeights::ffn_held(float* y, const float* x, const LinearRef& r1, const LinearRef& r2, int64_t M,
                            Precision prec, Activation act, float* scratch) const {
  if (!packed_ || prec != Precision::F32 || packed_->prec != prec) return false;
  BERTCC_CHECK(packed_valid_, "the weights of a model loaded for fp32 inference alone changed");
  const auto l1 = packed_->by_weight.find(r1.w.i), l2 = packed_->by_weight.find(r2.w.i);
  if (l1 == packed_->by_weight.end() || l2 == packed_->by_weight.end()) return false;
  return kernels::ffn_forward_packed(y, x, *l1->second.w, w(r1.b), *l2->second.w, w(r2.b), M, act, scratch);
}

bool ModelWeights::linear_packed(float* y, const float* x, const LinearIo* io, const LinearRef& r, int64_t M,
                                 Precision prec) const {
  if (!packed_) return false;
  const char* kept = precision_name(packed_->prec);
  BERTCC_CHECK(packed_valid_, "the weights of a model loaded for ", kept, " inference alone changed");
  BERTCC_CHECK(prec == packed_->prec, "this model keeps its encoder's linear layers packed for ", kept,
               " inference alone: ", precision_name(prec), " needs their fp32 weights");
  const auto it = packed_->by_weight.find(r.w.i);
  if (it == packed_->by_weight.end()) return false;  // a layer not packed (the pooler, the heads)
  const PackedLinears::Layer& l = it->second;
  if (prec == Precision::F32) {
    kernels::linear_forward_packed(y, x, *l.w, w(r.b), M);
    return true;
  }
  // bf16, as the backend's linear_forward: x's rounding (kept by the kernel before, or made here),
  // fp32 sums and bias, and the output's rounding where the caller reads only that
  const bf16_t* x16 = io ? io->x16 : nullptr;
  if (!x16) {
    thread_local std::vector<bf16_t> rounded;
    bf16_t* to = io && io->keep_x16 ? io->keep_x16 : kernels::grow(rounded, M * l.K);
    to_bf16(x, to, static_cast<size_t>(M * l.K));
    x16 = to;
  }
  kernels::linear_forward_packed_bf16(y, x16, *l.w, w(r.b), M);
  if (io && io->y16) to_bf16(y, io->y16, static_cast<size_t>(M * l.N));
  return true;
}

}  // namespace bertcc
