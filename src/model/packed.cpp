// fp32 inference on the CPU with the encoder's linear layers packed once into the layout the fp32
// kernel reads (kernels/gemm.h: pack_linear_weight; oneDNN's blocked layout, or the row kernel's
// panels on AVX2 CPUs): a call then skips copying the weight into that layout, which is a sixth of
// a bert-base feed-forward GEMM at 2 threads and most of a small batch's. The packed copy replaces
// the fp32 matrices (their pages are given back, as for int8), so a model loaded this way computes
// in fp32 alone. Where oneDNN prefers a plain layout nothing is packed and the model is left as is.
#include "model/packed.h"

#include "backend/backend.h"
#include "bertcc/error.h"

namespace bertcc {

void ModelWeights::keep_packed_fp32_weights_only(const std::vector<Int8Linear>& linears) {
  BERTCC_CHECK(!fp32_linears_released_ && !q8_, "keep_packed_fp32_weights_only: the model already keeps int8 weights");
  if (!be_->on_host() || !dev_offset_.empty() || linears.empty()) return;  // the CPU's own matmuls only
  auto packed = std::make_unique<PackedF32Weights>();
  for (const Int8Linear& l : linears) {
    std::shared_ptr<const kernels::PackedWeights> p = kernels::pack_linear_weight(w(l.r.w), l.N, l.K);
    if (!p) return;  // this CPU's fp32 matmul reads plain weights: nothing to gain
    packed->by_weight[l.r.w.i] = std::move(p);
  }
  f32p_ = std::move(packed);
  f32p_valid_ = true;
  release_linear_pages(linears);
}

bool ModelWeights::linear_packed_f32(float* y, const float* x, const LinearRef& r, int64_t M, Precision prec) const {
  if (!f32p_) return false;
  BERTCC_CHECK(f32p_valid_, "the weights of a model loaded for fp32 inference alone changed");
  BERTCC_CHECK(prec == Precision::F32,
               "this model keeps its encoder's linear layers packed for fp32 inference alone: ", precision_name(prec),
               " needs their fp32 weights");
  const auto it = f32p_->by_weight.find(r.w.i);
  if (it == f32p_->by_weight.end()) return false;  // a layer not packed (the pooler, the heads)
  kernels::linear_forward_packed(y, x, *it->second, w(r.b), M);
  return true;
}

}  // namespace bertcc
