// The model's int8 weights (--precision int8): the encoder's linear layers, quantized per output
// channel (kernels/gemm_int8.h), by the table index of their weight.
#pragma once
#include <unordered_map>

#include "kernels/gemm_int8.h"
#include "model/weights.h"

namespace bertcc {

struct ModelWeights::Int8Weights {
  std::unordered_map<int64_t, kernels::Int8Weight> by_weight;
  int act_max = 0;  // the activations' bound they were made for (--int8-activation-bits)
  // The word embeddings per row (plain: the embeddings' lookup reads rows, never multiplies them);
  // empty with --int8-fp32-embeddings, where the fp32 table is read and kept.
  kernels::Int8Weight words;
};

}  // namespace bertcc
