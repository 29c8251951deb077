// Optimizers over the flat parameter/gradient buffers, one fused pass each; state in fp32.
// Weight decay comes from the ParamTable flag (false for biases and LayerNorm parameters).
#pragma once
#include <cstdint>
#include <vector>

#include "bertcc/params.h"

namespace bertcc {

struct AdamState {
  std::vector<float> m, v;  // first and second moments of parameters [begin, end), same layout
  int64_t step = 0;
  // The parameters this state updates (ZeRO-1: a shard of whole tensors; others are left as they
  // are). end = 0: the whole buffer.
  size_t begin = 0, end = 0;
};

struct LambOptions {
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-6f, weight_decay = 0.01f;
  float max_grad_norm = 1.0f;  // global pre-normalisation (NVIDIA / apex FusedLAMB); <= 0 disables
  bool nvlamb = false;         // apply the trust ratio to every tensor, not only decayed ones
};

struct AdamWOptions {
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-6f, weight_decay = 0.01f;
  float max_grad_norm = 1.0f;   // <= 0 disables clipping
  bool bias_correction = true;  // NVIDIA run_squad uses false
};

// Global L2 norm of a buffer; blocked, so the result does not depend on the thread count.
double global_norm(const float* x, size_t n);

// global_norm's arithmetic over a slice [b, e) of x[0, n), for a buffer whose slices live on
// different ranks (ZeRO-1's reduce-scattered gradients): the blocks' partial sums, when added in
// block order, give global_norm's bits exactly. A block cut by b or e is carried between slices:
// `carry` holds its 16 lane accumulators over the elements before b (zeros when b starts a block)
// and, on return, over [block start, e) when e cuts a block (zeros otherwise). The partial sums of
// the blocks that end in (b, e] are appended to `blocks`; `first_block` is set to the first one's
// index.
constexpr size_t kNormBlock = 8192;
void sumsq_slice(const float* x, size_t n, size_t b, size_t e, float carry[16], std::vector<double>& blocks,
                 size_t& first_block);

// One LAMB step (apex FusedLAMB semantics). `grads` is consumed (overwritten with the update).
// Returns the global gradient norm before clipping; pass it as `grad_norm` if already known.
double lamb_step(const ParamTable& t, float* params, float* grads, AdamState& s, float lr, const LambOptions& o,
                 double grad_norm = -1);
// One AdamW step (HF semantics; decoupled weight decay). Returns the gradient norm before clipping.
double adamw_step(const ParamTable& t, float* params, float* grads, AdamState& s, float lr, const AdamWOptions& o,
                  double grad_norm = -1);

// NVIDIA PolyWarmUpScheduler: linear warm-up, then base * (1 - progress)^0.5.
float poly_warmup_lr(float base, int64_t step, int64_t total_steps, double warmup_proportion, double degree = 0.5);
// Linear warm-up then linear decay to 0 (HF get_linear_schedule_with_warmup).
float linear_warmup_lr(float base, int64_t step, int64_t total_steps, double warmup_proportion);

}  // namespace bertcc
