#include <cmath>

#include "kernels/kernels.h"

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
      out[i] = 0.5f * x * (1.0f + std::erf(x * kInvSqrt2));
    }
  } else {
#pragma omp parallel for schedule(static) if (n > 16384)
    for (int64_t i = 0; i < n; ++i) {
      const float x = inp[i];
      out[i] = 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + kTanhCoef * x * x * x)));
    }
  }
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n, Activation act) {
  if (act == Activation::GeluErf) {
#pragma omp parallel for schedule(static) if (n > 16384)
    for (int64_t i = 0; i < n; ++i) {
      const float x = inp[i];
      const float cdf = 0.5f * (1.0f + std::erf(x * kInvSqrt2));
      const float pdf = kInvSqrt2Pi * std::exp(-0.5f * x * x);
      dinp[i] += dout[i] * (cdf + x * pdf);
    }
  } else {
#pragma omp parallel for schedule(static) if (n > 16384)
    for (int64_t i = 0; i < n; ++i) {
      const float x = inp[i];
      const float u = kSqrt2OverPi * (x + kTanhCoef * x * x * x);
      const float t = std::tanh(u);
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

// `base` is a multiple of 4 (Rng::reserve guarantees it): element i uses number (base + i).
template <class F>
static void for_each_keep(int64_t n, const Rng& rng, uint64_t base, F f) {
  const int64_t nb = (n + 3) / 4;
#pragma omp parallel for schedule(static) if (n > 16384)
  for (int64_t b = 0; b < nb; ++b) {
    const auto r = rng.block4((base >> 2) + static_cast<uint64_t>(b));
    const int64_t i0 = 4 * b;
    for (int64_t k = 0; k < 4 && i0 + k < n; ++k) f(i0 + k, r[k]);
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
