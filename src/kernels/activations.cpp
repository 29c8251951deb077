#include <algorithm>
#include <cmath>

#include "kernels/kernels.h"
#include "kernels/vecmath.h"

namespace bertcc::kernels {

namespace {
constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;
constexpr float kSqrt2OverPi = 0.79788456080286535588f;
constexpr float kTanhCoef = 0.044715f;
}  // namespace

BERTCC_CLONES void gelu_forward_serial(float* out, const float* inp, int64_t n, Activation act) {
  if (act == Activation::GeluErf) {
    for (int64_t i = 0; i < n; ++i) {
      const float x = inp[i];
      out[i] = 0.5f * x * (1.0f + verf(x * kInvSqrt2));
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      const float x = inp[i];
      out[i] = 0.5f * x * (1.0f + vtanh(kSqrt2OverPi * (x + kTanhCoef * x * x * x)));
    }
  }
}

// Chunks of gelu_forward_serial: one function computes every element, on any thread.
void gelu_forward(float* out, const float* inp, int64_t n, Activation act) {
  constexpr int64_t kChunk = 4096;
#pragma omp parallel for schedule(static) if (n > 16384)
  for (int64_t c = 0; c < n; c += kChunk) gelu_forward_serial(out + c, inp + c, std::min(kChunk, n - c), act);
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n, Activation act) {
  if (act == Activation::GeluErf) {
#pragma omp parallel for schedule(static) if (n > 16384)
    for (int64_t i = 0; i < n; ++i) {
      const float x = inp[i];
      const float cdf = 0.5f * (1.0f + verf(x * kInvSqrt2));
      const float pdf = kInvSqrt2Pi * vexp(-0.5f * x * x);
      dinp[i] += dout[i] * (cdf + x * pdf);
    }
  } else {
#pragma omp parallel for schedule(static) if (n > 16384)
    for (int64_t i = 0; i < n; ++i) {
      const float x = inp[i];
      const float u = kSqrt2OverPi * (x + kTanhCoef * x * x * x);
      const float t = vtanh(u);
      const float du = kSqrt2OverPi * (1.0f + 3.0f * kTanhCoef * x * x);
      dinp[i] += dout[i] * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
    }
  }
}

void tanh_forward(float* out, const float* inp, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = std::tanh(inp[i]);
}

void tanh_backward(float* dinp, const float* out, const float* dout, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dinp[i] += dout[i] * (1.0f - out[i] * out[i]);
}

// Element i of a dropout site uses number (base + i) of the dropout stream; chunks of 1024
// elements are generated at once and processed in parallel. The keep test is an integer compare
// (dropout_threshold), so the inner loops vectorise.
template <class F>
static void for_each_chunk(int64_t n, const Rng& rng, uint64_t base, F f) {
  constexpr int64_t kChunk = 1024;
  const int64_t nc = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n > 16384)
  for (int64_t c = 0; c < nc; ++c) {
    alignas(64) uint32_t bits[kChunk];
    const int64_t i0 = c * kChunk, len = std::min(kChunk, n - i0);
    rng.fill_u32(base + static_cast<uint64_t>(i0), static_cast<size_t>(len), bits);
    f(i0, len, bits);
  }
}

void dropout_forward(float* out, const float* inp, int64_t n, float p, const Rng& rng, uint64_t base) {
  const float scale = 1.0f / (1.0f - p);
  const uint32_t thr = dropout_threshold(p);
  for_each_chunk(n, rng, base, [=](int64_t i0, int64_t len, const uint32_t* bits) {
    float* __restrict o = out + i0;
    const float* __restrict x = inp + i0;
#pragma omp simd
    for (int64_t k = 0; k < len; ++k) o[k] = (bits[k] >> 8) >= thr ? x[k] * scale : 0.0f;
  });
}

// One fused multiply-add per element, written out rather than left to the compiler's contraction
// (which gave these bits before), so that the CUDA kernel can promise the same.
void dropout_backward(float* dinp, const float* dout, int64_t n, float p, const Rng& rng, uint64_t base) {
  const float scale = 1.0f / (1.0f - p);
  const uint32_t thr = dropout_threshold(p);
  for_each_chunk(n, rng, base, [=](int64_t i0, int64_t len, const uint32_t* bits) {
    float* __restrict d = dinp + i0;
    const float* __restrict g = dout + i0;
#pragma omp simd
    for (int64_t k = 0; k < len; ++k) d[k] = std::fma((bits[k] >> 8) >= thr ? g[k] : 0.0f, scale, d[k]);
  });
}

}  // namespace bertcc::kernels
