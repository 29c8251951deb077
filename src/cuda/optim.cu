// LAMB and AdamW over the flat device buffers (bertcc/optim.h semantics, apex FusedLAMB's trust
// ratio). The parameters are cut into chunks of whole tensors' pieces (8192 elements, as the CPU
// code's blocks); a chunk's squared norms are a fixed-tree block sum, a tensor's are its chunks'
// partials added in order, so every result is independent of scheduling. A table's chunk plan is
// built and uploaded once and kept on the device (the learning rate, which changes every step, is
// a kernel argument): a step launches its kernels without host work or copies in between.
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "cuda/common.cuh"
#include "cuda/cuda_kernels.h"
#include "cuda/ordered_sums.cuh"

namespace bertcc::cuda {
namespace {

constexpr int64_t kBlock = static_cast<int64_t>(kNormBlock);  // optim.h: the CPU norm's block
constexpr int kThreads = 256;

struct Chunk {
  int64_t begin, end;  // element range in the flat buffers
  int32_t entry;       // index into the per-tensor arrays
  float wd;            // weight decay of its tensor (0 for biases and LayerNorm)
  float lr_scale;      // its tensor's learning-rate factor (the step's lr x this, in float, as the CPU)
};

struct Plan {
  std::vector<Chunk> chunks;
  std::vector<int32_t> first, count;  // per tensor: its chunks
  std::vector<float> wd;
};

// The tensors starting in [begin, end) (end = 0: all of them; ZeRO-1 shards are whole tensors).
Plan make_plan(const ParamTable& t, float weight_decay, size_t begin, size_t end) {
  Plan p;
  if (end == 0) end = t.total();
  for (const ParamEntry& e : t.entries()) {
    if (!e.trainable || e.numel == 0) continue;
    if (e.offset < begin || e.offset >= end) continue;  // another rank's shard (ZeRO-1)
    const auto idx = static_cast<int32_t>(p.first.size());
    p.first.push_back(static_cast<int32_t>(p.chunks.size()));
    const float wd = e.weight_decay ? weight_decay : 0.0f;
    p.wd.push_back(wd);
    for (size_t i = 0; i < e.numel; i += kBlock) {
      const auto b = static_cast<int64_t>(e.offset + i);
      p.chunks.push_back({b, b + std::min<int64_t>(kBlock, static_cast<int64_t>(e.numel - i)), idx, wd, e.lr_scale});
    }
    p.count.push_back(static_cast<int32_t>(p.chunks.size()) - p.first.back());
  }
  return p;
}

// What a plan depends on, besides the table's address: a table rebuilt at the same address with
// other tensors, factors or flags gets a new plan.
uint64_t fingerprint(const ParamTable& t) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
  for (const ParamEntry& e : t.entries()) {
    uint32_t scale;
    std::memcpy(&scale, &e.lr_scale, sizeof scale);
    mix(e.offset);
    mix(e.numel);
    mix((e.trainable ? 1u : 0u) | (e.weight_decay ? 2u : 0u) | (static_cast<uint64_t>(scale) << 2));
  }
  return h;
}

// A plan on the device, made once per (table, weight decay, shard).
struct DevicePlan {
  const Chunk* chunks = nullptr;
  const int32_t* first = nullptr;
  const int32_t* count = nullptr;
  const float* wd = nullptr;
  size_t nchunks = 0, ntensors = 0;
  Scratch b_chunks, b_first, b_count, b_wd;
};

const DevicePlan& device_plan(const ParamTable& t, float weight_decay, size_t begin, size_t end) {
  using Key = std::tuple<const ParamTable*, uint64_t, size_t, size_t, size_t, size_t, uint32_t>;
  static std::map<Key, std::unique_ptr<DevicePlan>> plans;
  uint32_t wd_bits;
  std::memcpy(&wd_bits, &weight_decay, sizeof wd_bits);
  const Key key{&t, fingerprint(t), t.entries().size(), t.total(), begin, end, wd_bits};
  std::unique_ptr<DevicePlan>& d = plans[key];
  if (!d) {
    const Plan p = make_plan(t, weight_decay, begin, end);
    d = std::make_unique<DevicePlan>();
    d->nchunks = p.chunks.size();
    d->ntensors = p.first.size();
    if (d->nchunks > 0) {
      d->chunks = d->b_chunks.upload(p.chunks.data(), p.chunks.size());
      d->first = d->b_first.upload(p.first.data(), p.first.size());
      d->count = d->b_count.upload(p.count.data(), p.count.size());
      d->wd = d->b_wd.upload(p.wd.data(), p.wd.size());
    }
  }
  return *d;
}

struct AdamScalars {
  float b1, b2, eps, clip, bc1, bc2;
};

// The moments m, v hold elements [mbase, ...) of the flat buffers (a ZeRO-1 shard; 0 otherwise).
// The element loops: the buffers never overlap (__restrict__), so the compiler may issue an unrolled
// group's loads before the previous elements' stores (without it every iteration waited for its
// loads); each thread's elements and the order of its sums are unchanged, so are the bits.
__global__ void lamb_update(const float* __restrict__ w, float* __restrict__ g, float* __restrict__ m,
                            float* __restrict__ v, int64_t mbase, const Chunk* chunks, AdamScalars a, double* wsq,
                            double* usq) {
  const Chunk ch = chunks[blockIdx.x];
  float ws = 0.0f, us = 0.0f;
#pragma unroll 4
  for (int64_t i = ch.begin + threadIdx.x; i < ch.end; i += blockDim.x) {
    const float gi = g[i] * a.clip;
    const float mi = a.b1 * m[i - mbase] + (1.0f - a.b1) * gi;
    const float vi = a.b2 * v[i - mbase] + (1.0f - a.b2) * gi * gi;
    m[i - mbase] = mi;
    v[i - mbase] = vi;
    const float u = (mi / a.bc1) / (sqrtf(vi / a.bc2) + a.eps) + ch.wd * w[i];
    g[i] = u;
    ws += w[i] * w[i];
    us += u * u;
  }
  const double wsum = block_sum(static_cast<double>(ws));
  const double usum = block_sum(static_cast<double>(us));
  if (threadIdx.x == 0) {
    wsq[blockIdx.x] = wsum;
    usq[blockIdx.x] = usum;
  }
}

__global__ void lamb_ratio(float* ratio, const int32_t* first, const int32_t* count, const float* wd, const double* wsq,
                           const double* usq, int32_t ntensors, bool nvlamb) {
  const int32_t e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= ntensors) return;
  float r = 1.0f;
  if (wd[e] != 0.0f || nvlamb) {
    double wn = 0.0, un = 0.0;
    for (int32_t c = first[e]; c < first[e] + count[e]; ++c) {
      wn += wsq[c];
      un += usq[c];
    }
    if (wn > 0 && un > 0) r = static_cast<float>(sqrt(wn) / sqrt(un));
  }
  ratio[e] = r;
}

__global__ void lamb_apply(float* __restrict__ w, const float* __restrict__ u, const Chunk* chunks, const float* ratio,
                           float lr) {
  const Chunk ch = chunks[blockIdx.x];
  const float tensor_lr = lr * ch.lr_scale;
  const float step = tensor_lr * ratio[ch.entry];
#pragma unroll 4
  for (int64_t i = ch.begin + threadIdx.x; i < ch.end; i += blockDim.x) w[i] -= step * u[i];
}

__global__ void adamw_update(float* __restrict__ w, const float* __restrict__ g, float* __restrict__ m,
                             float* __restrict__ v, int64_t mbase, const Chunk* chunks, AdamScalars a,
                             float weight_decay, float lr) {
  const Chunk ch = chunks[blockIdx.x];
  const float tensor_lr = lr * ch.lr_scale;
  const float decay = ch.wd != 0.0f ? 1.0f - tensor_lr * weight_decay : 1.0f;
#pragma unroll 4
  for (int64_t i = ch.begin + threadIdx.x; i < ch.end; i += blockDim.x) {
    const float gi = g[i] * a.clip;
    const float mi = a.b1 * m[i - mbase] + (1.0f - a.b1) * gi;
    const float vi = a.b2 * v[i - mbase] + (1.0f - a.b2) * gi * gi;
    m[i - mbase] = mi;
    v[i - mbase] = vi;
    w[i] = w[i] * decay - tensor_lr * (mi / a.bc1) / (sqrtf(vi / a.bc2) + a.eps);
  }
}

AdamScalars start(const ParamTable& t, const float* g, DeviceAdamState& s, double& gnorm, float max_grad_norm, float b1,
                  float b2, float eps, bool bias_correction) {
  // A ZeRO-1 shard may be empty (a tensor longer than the parts spans a boundary): no moments then.
  BERTCC_CHECK((s.m && s.v) || (s.end != 0 && s.end == s.begin), "optimizer on CUDA: moments not allocated");
  BERTCC_CHECK(s.end == 0 || gnorm >= 0, "optimizer on CUDA: a ZeRO-1 shard's step needs the global gradient norm");
  s.step += 1;
  if (gnorm < 0) gnorm = global_norm(g, t.total());
  AdamScalars a{b1, b2, eps, 1.0f, 1.0f, 1.0f};
  a.clip = (max_grad_norm > 0 && gnorm > max_grad_norm) ? static_cast<float>(max_grad_norm / gnorm) : 1.0f;
  if (bias_correction) {
    a.bc1 = 1.0f - std::pow(b1, static_cast<float>(s.step));
    a.bc2 = 1.0f - std::pow(b2, static_cast<float>(s.step));
  }
  return a;
}

}  // namespace

double global_norm(const float* x, size_t n) {
  if (n == 0) return 0.0;
  const int64_t nb = (static_cast<int64_t>(n) + kBlock - 1) / kBlock;
  static Scratch buf;
  double* part = buf.take<double>(static_cast<size_t>(nb));
  sumsq_blocks<<<grid_for(nb, kSumsqBlocksPerCta), kSumsqThreads, 0, stream()>>>(part, x, static_cast<int64_t>(n));
  BERTCC_CUDA_LAUNCHED("global_norm");
  std::vector<double> h(static_cast<size_t>(nb));
  copy_to_host(h.data(), part, h.size() * sizeof(double));
  double s = 0.0;
  for (double v : h) s += v;
  return std::sqrt(s);
}

double lamb_step(const ParamTable& t, float* params, float* grads, DeviceAdamState& s, float lr, const LambOptions& o,
                 double grad_norm) {
  const AdamScalars a = start(t, grads, s, grad_norm, o.max_grad_norm, o.beta1, o.beta2, o.eps, true);
  const DevicePlan& p = device_plan(t, o.weight_decay, s.begin, s.end);
  if (p.nchunks == 0) return grad_norm;
  static Scratch b_wsq, b_usq, b_ratio;  // kept from step to step
  double* wsq = b_wsq.take<double>(p.nchunks);
  double* usq = b_usq.take<double>(p.nchunks);
  float* ratio = b_ratio.take<float>(p.ntensors);
  const auto nc = static_cast<unsigned>(p.nchunks);
  const auto nt = static_cast<int32_t>(p.ntensors);
  lamb_update<<<nc, kThreads, 0, stream()>>>(params, grads, s.m, s.v, static_cast<int64_t>(s.begin), p.chunks, a, wsq,
                                             usq);
  BERTCC_CUDA_LAUNCHED("lamb_step (update)");
  lamb_ratio<<<grid_for(nt, 128), 128, 0, stream()>>>(ratio, p.first, p.count, p.wd, wsq, usq, nt, o.nvlamb);
  BERTCC_CUDA_LAUNCHED("lamb_step (trust ratios)");
  lamb_apply<<<nc, kThreads, 0, stream()>>>(params, grads, p.chunks, ratio, lr);
  BERTCC_CUDA_LAUNCHED("lamb_step (apply)");
  return grad_norm;
}

double adamw_step(const ParamTable& t, float* params, float* grads, DeviceAdamState& s, float lr, const AdamWOptions& o,
                  double grad_norm) {
  const AdamScalars a = start(t, grads, s, grad_norm, o.max_grad_norm, o.beta1, o.beta2, o.eps, o.bias_correction);
  const DevicePlan& p = device_plan(t, o.weight_decay, s.begin, s.end);
  if (p.nchunks == 0) return grad_norm;
  adamw_update<<<static_cast<unsigned>(p.nchunks), kThreads, 0, stream()>>>(
      params, grads, s.m, s.v, static_cast<int64_t>(s.begin), p.chunks, a, o.weight_decay, lr);
  BERTCC_CUDA_LAUNCHED("adamw_step");
  return grad_norm;
}

}  // namespace bertcc::cuda
