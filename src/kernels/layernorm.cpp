#include <algorithm>
#include <cmath>

#include "kernels/kernels.h"
#include "kernels/vecmath.h"

namespace bertcc::kernels {

static inline void ln_row(float* o, float* mean, float* rstd, const float* x, const float* w, const float* b, int64_t C,
                          float eps) {
  const float m = lane_sum(C, [&](int64_t c) { return x[c]; }) / static_cast<float>(C);
  const float v = lane_sum(C,
                           [&](int64_t c) {
                             const float d = x[c] - m;
                             return d * d;
                           }) /
                  static_cast<float>(C);
  const float s = 1.0f / std::sqrt(v + eps);
  for (int64_t c = 0; c < C; ++c) o[c] = (x[c] - m) * s * w[c] + b[c];
  *mean = m;
  *rstd = s;
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                       int64_t N, int64_t C, float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) ln_row(out + n * C, mean + n, rstd + n, inp + n * C, w, b, C, eps);
}

BERTCC_CLONES void residual_layernorm_row(float* out, float* sum, float* mean, float* rstd, const float* a,
                                          const float* r, const float* w, const float* b, int64_t C, float eps) {
  // no sum kept: out holds it until ln_row writes over it, element by element (a, r not out)
  float* s = sum ? sum : out;
  for (int64_t c = 0; c < C; ++c) s[c] = a[c] + r[c];
  ln_row(out, mean, rstd, s, w, b, C, eps);
}

void residual_layernorm_forward(float* out, float* sum, float* mean, float* rstd, const float* a, const float* r,
                                const float* w, const float* b, int64_t N, int64_t C, float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n)
    residual_layernorm_row(out + n * C, sum ? sum + n * C : nullptr, mean + n, rstd + n, a + n * C, r + n * C, w, b, C,
                           eps);
}

void residual_forward(float* out, const float* a, const float* b, int64_t n) {
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                        const float* mean, const float* rstd, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* d = dout + n * C;
    const float* x = inp + n * C;
    const float m = mean[n], s = rstd[n];
    const float dnorm_mean = lane_sum(C, [&](int64_t c) { return w[c] * d[c]; }) / static_cast<float>(C);
    const float dnorm_norm_mean =
        lane_sum(C, [&](int64_t c) { return w[c] * d[c] * ((x[c] - m) * s); }) / static_cast<float>(C);
    float* di = dinp + n * C;
    for (int64_t c = 0; c < C; ++c) {
      const float xhat = (x[c] - m) * s;
      const float dn = w[c] * d[c];
      di[c] += (dn - dnorm_mean - xhat * dnorm_norm_mean) * s;
    }
  }
  // Parameter gradients: parallel over channel blocks, rows in order (deterministic).
  const int64_t block = 32;
  const int64_t nblocks = (C + block - 1) / block;
#pragma omp parallel for schedule(static)
  for (int64_t cb = 0; cb < nblocks; ++cb) {
    const int64_t c0 = cb * block, c1 = std::min(C, c0 + block);
    float aw[32] = {0}, ab[32] = {0};
    for (int64_t n = 0; n < N; ++n) {
      const float* d = dout + n * C;
      const float* x = inp + n * C;
      const float m = mean[n], s = rstd[n];
      for (int64_t c = c0; c < c1; ++c) {
        aw[c - c0] += (x[c] - m) * s * d[c];
        ab[c - c0] += d[c];
      }
    }
    for (int64_t c = c0; c < c1; ++c) {
      dw[c] += aw[c - c0];
      db[c] += ab[c - c0];
    }
  }
}

}  // namespace bertcc::kernels
