// Measurement, one of the interfaces a Backend is made of (backend.h): where the device time went
// and what a bare GEMM reaches (bench).
#pragma once
#include <cstdint>
#include <string>

#include "bertcc/dtype.h"

namespace bertcc {

class Measurement {
 public:
  virtual ~Measurement() = default;
  // Where the device time went, per operation, when the backend was asked to measure it
  // (CUDA: BERTCC_CUDA_PROFILE=1); empty otherwise.
  virtual std::string op_profile() const { return ""; }
  // TFLOP/s of a bare GEMM C[M,N] = A[M,K] B[K,N] in `p` (operands already in that precision).
  virtual double gemm_probe_tflops(int64_t M, int64_t N, int64_t K, Precision p, int iters) = 0;
};

}  // namespace bertcc
