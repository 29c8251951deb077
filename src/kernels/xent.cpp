#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/kernels.h"

namespace bertcc::kernels {

int64_t softmax_xent_forward_backward(float* logits, float* losses, const int32_t* labels, int64_t N, int64_t V,
                                      int32_t ignore_index, float grad_scale, int64_t* num_correct) {
  int64_t valid = 0, correct = 0;
  for (int64_t n = 0; n < N; ++n) valid += labels[n] != ignore_index;
#pragma omp parallel for schedule(static) reduction(+ : correct)
  for (int64_t n = 0; n < N; ++n) {
    float* x = logits + n * V;
    const int32_t y = labels[n];
    if (y == ignore_index) {
      losses[n] = 0.0f;
      if (grad_scale != 0.0f) std::fill(x, x + V, 0.0f);
      continue;
    }
    float mx = -INFINITY;
    int64_t arg = 0;  // the first maximum, as std::max_element
    for (int64_t v = 0; v < V; ++v)
      if (x[v] > mx) {
        mx = x[v];
        arg = v;
      }
    correct += arg == y;
    double sum = 0.0;
    for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(x[v] - mx));
    const float lse = mx + static_cast<float>(std::log(sum));
    losses[n] = lse - x[y];
    if (grad_scale != 0.0f) {
      for (int64_t v = 0; v < V; ++v) x[v] = std::exp(x[v] - lse) * grad_scale;
      x[y] -= grad_scale;
    }
  }
  if (num_correct) *num_correct += correct;
  return valid;
}

void gumbel_argmax(int32_t* picks, const float* logits, int64_t M, int64_t V, const Rng& rng, uint64_t base) {
#pragma omp parallel
  {
    std::vector<uint32_t> raw(static_cast<size_t>(V));
#pragma omp for schedule(static)
    for (int64_t m = 0; m < M; ++m) {
      rng.fill_u32(base + static_cast<uint64_t>(m * V), raw.size(), raw.data());
      const float* x = logits + m * V;
      int32_t best = 0;
      double best_v = -INFINITY;
      for (int64_t v = 0; v < V; ++v) {
        const double u = (static_cast<double>(raw[v] >> 8) + 0.5) / 16777216.0;  // in (0, 1)
        const double s = static_cast<double>(x[v]) - std::log(-std::log(u));
        if (s > best_v) {
          best_v = s;
          best = static_cast<int32_t>(v);
        }
      }
      picks[m] = best;
    }
  }
}

void weighted_row_sums(float* out, int64_t out_ld, const float* x, const double* w, int64_t B, int64_t T, int64_t C) {
#pragma omp parallel
  {
    std::vector<double> acc(static_cast<size_t>(C));
#pragma omp for schedule(static)
    for (int64_t b = 0; b < B; ++b) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t t = 0; t < T; ++t) {
        const double pt = w[b * T + t];
        const float* r = x + (b * T + t) * C;
        for (int64_t c = 0; c < C; ++c) acc[c] += pt * r[c];
      }
      for (int64_t c = 0; c < C; ++c) out[b * out_ld + c] = static_cast<float>(acc[c]);
    }
  }
}

}  // namespace bertcc::kernels
