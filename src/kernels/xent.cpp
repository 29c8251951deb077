#include <algorithm>
#include <cmath>

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

}  // namespace bertcc::kernels
