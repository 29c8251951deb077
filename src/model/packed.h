// The model's packed weights (packed.cpp): the encoder's linear layers laid out once for the kernel
// that runs them in fp32 or bf16 inference (kernels/gemm.h), by the table index of their weight.
#pragma once
#include <memory>
#include <unordered_map>

#include "kernels/gemm.h"
#include "model/weights.h"

namespace bertcc {

struct ModelWeights::PackedLinears {
  struct Layer {
    std::shared_ptr<const kernels::PackedWeights> w;
    int64_t N = 0, K = 0;
  };
  Precision prec = Precision::F32;  // the one precision the model computes in
  std::unordered_map<int64_t, Layer> by_weight;
};

}  // namespace bertcc
