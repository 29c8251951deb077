#include "kernels/reference.h"

#include <algorithm>
#include <cmath>

namespace bertcc::ref {

vec gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const vec& A, const vec& B, double alpha, const vec* bias,
         const vec* C0) {
  vec C(static_cast<size_t>(M * N));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += (ta ? A[k * M + m] : A[m * K + k]) * (tb ? B[n * K + k] : B[k * N + n]);
      s *= alpha;
      if (bias) s += (*bias)[n];
      if (C0) s += (*C0)[m * N + n];
      C[m * N + n] = s;
    }
  return C;
}

vec layernorm(const vec& x, const vec& w, const vec& b, int64_t N, int64_t C, double eps) {
  vec y(x.size());
  for (int64_t n = 0; n < N; ++n) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < C; ++c) m += x[n * C + c];
    m /= C;
    for (int64_t c = 0; c < C; ++c) v += (x[n * C + c] - m) * (x[n * C + c] - m);
    v /= C;
    for (int64_t c = 0; c < C; ++c) y[n * C + c] = (x[n * C + c] - m) / std::sqrt(v + eps) * w[c] + b[c];
  }
  return y;
}

vec gelu(const vec& x, Activation act) {
  vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    y[i] = act == Activation::GeluErf ? 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)))
                                      : 0.5 * v * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
  }
  return y;
}

vec embeddings(const std::vector<int32_t>& ids, const std::vector<int32_t>& seg, const vec& wte, const vec& wpe,
               const vec& wtt, int64_t B, int64_t T, int64_t C) {
  vec y(static_cast<size_t>(B * T * C));
  for (int64_t n = 0; n < B * T; ++n)
    for (int64_t c = 0; c < C; ++c) y[n * C + c] = wte[ids[n] * C + c] + wpe[(n % T) * C + c] + wtt[seg[n] * C + c];
  return y;
}

vec attention(const vec& qkv, const vec& mask_add, const std::vector<uint8_t>* keep, double p, int64_t B, int64_t T,
              int64_t C, int64_t NH) {
  const int64_t HS = C / NH;
  vec out(static_cast<size_t>(B * T * C));
  std::vector<double> s(static_cast<size_t>(T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t i = 0; i < T; ++i) {
        const double* q = &qkv[(b * T + i) * 3 * C + h * HS];
        double mx = -1e300;
        for (int64_t j = 0; j < T; ++j) {
          const double* k = &qkv[(b * T + j) * 3 * C + C + h * HS];
          double d = 0;
          for (int64_t e = 0; e < HS; ++e) d += q[e] * k[e];
          s[j] = d / std::sqrt(static_cast<double>(HS)) + mask_add[b * T + j];
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (int64_t j = 0; j < T; ++j) sum += (s[j] = std::exp(s[j] - mx));
        for (int64_t j = 0; j < T; ++j) {
          s[j] /= sum;
          if (keep) s[j] = (*keep)[((b * NH + h) * T + i) * T + j] ? s[j] / (1 - p) : 0.0;
        }
        for (int64_t e = 0; e < HS; ++e) {
          double a = 0;
          for (int64_t j = 0; j < T; ++j) a += s[j] * qkv[(b * T + j) * 3 * C + 2 * C + h * HS + e];
          out[(b * T + i) * C + h * HS + e] = a;
        }
      }
  return out;
}

double xent(const vec& logits, const std::vector<int32_t>& labels, int64_t N, int64_t V, int32_t ignore) {
  double total = 0;
  int64_t count = 0;
  for (int64_t n = 0; n < N; ++n) {
    if (labels[n] == ignore) continue;
    double mx = -1e300, s = 0;
    for (int64_t v = 0; v < V; ++v) mx = std::max(mx, logits[n * V + v]);
    for (int64_t v = 0; v < V; ++v) s += std::exp(logits[n * V + v] - mx);
    total += mx + std::log(s) - logits[n * V + labels[n]];
    ++count;
  }
  return count ? total / count : 0.0;
}

}  // namespace bertcc::ref
