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

void gelu_forward(float* out, const float* inp, int64_t n, Activation act) {
  if (act == Activation::GeluErf) {
#pragma omp parallel for schedule(static) if (n > 16384)
    for (int64_t i = 0; i < n; ++i) {
      const float x = inp[i];
      out[i] = 0.5f * x * (1.0f + verf(x * kInvSqrt2));
    }
  } else {
#pragma omp parallel for schedule(static) if (n > 16384)
    for (int64_t i = 0; i < n; ++i) {
      const float x = inp[i];
      out[i] = 0.5f * x * (1.0f + vtanh(kSqrt2OverPi * (x + kTanhCoef * x * x * x)));
    }
  }
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
// elements are generated at once and processed in parallel.
template <class F>
static void for_each_keep(int64_t n, const Rng& rng, uint64_t base, F f) {
  constexpr int64_t kChunk = 1024;
  const int64_t nc = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n > 16384)
  for (int64_t c = 0; c < nc; ++c) {
    uint32_t bits[kChunk];
    const int64_t i0 = c * kChunk, len = std::min(kChunk, n - i0);
    rng.fill_u32(base + static_cast<uint64_t>(i0), static_cast<size_t>(len), bits);
    for (int64_t k = 0; k < len; ++k) f(i0 + k, bits[k]);
  }
}

void dropout_forward(float* out, const float* inp, int64_t n, float p, const Rng& rng, uint64_t base) {
  const float scale = 1.0f / (1.0f - p);
  for_each_keep(n, rng, base, [&](int64_t i, uint32_t x) { out[i] = dropout_keep(x, p) ? inp[i] * scale : 0.0f; });
}

void dropout_backward(float* dinp, const float* dout, int64_t n, float p, const Rng& rng, uint64_t base) {
  const float scale = 1.0f / (1.0f - p);
  for_each_keep(n, rng, base, [&](int64_t i, uint32_t x) {
    if (dropout_keep(x, p)) dinp[i] += dout[i] * scale;
  });
}

}  // namespace bertcc::kernels
