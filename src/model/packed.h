// The model's packed fp32 weights (packed.cpp): the encoder's linear layers in oneDNN's blocked
// layout (kernels/gemm.h), by the table index of their weight.
#pragma once
#include <memory>
#include <unordered_map>

#include "kernels/gemm.h"
#include "model/weights.h"

namespace bertcc {

struct ModelWeights::PackedF32Weights {
  std::unordered_map<int64_t, std::shared_ptr<const kernels::PackedWeights>> by_weight;
};

}  // namespace bertcc
