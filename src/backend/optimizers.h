// The optimizers over the flat parameter and gradient buffers (bertcc/optim.h semantics), with
// their moments where the backend computes: one of the interfaces a Backend is made of (backend.h).
#pragma once
#include <cstddef>
#include <cstdint>

#include "backend/memory.h"
#include "bertcc/optim.h"
#include "bertcc/params.h"

namespace bertcc {

// Adam moments of one model on its backend (host vectors on the CPU and the staged backend, device
// buffers on CUDA).
struct OptimizerState {
  AdamState cpu;
  DeviceBuffer<float> m, v;  // [end - begin] (whole buffer: [n])
  int64_t step = 0;
  size_t begin = 0, end = 0;  // ZeRO-1: the shard these moments update (end = 0: the whole buffer)
};

// Throws unless `in` holds moments moments_from_host() takes for a table of n parameters: none,
// all n, or a shard [begin, end) of them.
void check_moments(const AdamState& in, size_t n);

class Optimizers {
 public:
  virtual ~Optimizers() = default;
  virtual double global_norm(const float* x, size_t n) = 0;
  virtual double lamb_step(const ParamTable& t, float* params, float* grads, OptimizerState& s, float lr,
                           const LambOptions& o, double grad_norm = -1) = 0;
  virtual double adamw_step(const ParamTable& t, float* params, float* grads, OptimizerState& s, float lr,
                            const AdamWOptions& o, double grad_norm = -1) = 0;
  // The moments of `s` to and from host form (checkpoints): an AdamState for a table of n
  // parameters (empty moments = a fresh optimizer), whole-buffer or (ZeRO-1, begin/end set) the
  // moments of one shard [begin, end) of whole tensors, which the steps then update alone (the
  // other parameters are left as they are; grad_norm must then be given: it is global).
  virtual void moments_to_host(const OptimizerState& s, AdamState& out) = 0;
  virtual void moments_from_host(const AdamState& in, size_t n, OptimizerState& s) = 0;
  // moments_from_host that takes the host moments over, leaving `in` empty: the CPU backend keeps
  // them without a copy (OptimizerState::cpu); elsewhere (staged included) they are uploaded.
  virtual void moments_take(AdamState&& in, size_t n, OptimizerState& s) {
    moments_from_host(in, n, s);
    in = AdamState{};
  }
  // The moments' host form for reading (checkpoints): the CPU backend's own, without a copy;
  // elsewhere moments_to_host into `scratch`, which is returned.
  virtual AdamState& moments_view(OptimizerState& s, AdamState& scratch) {
    moments_to_host(s, scratch);
    return scratch;
  }
};

}  // namespace bertcc
