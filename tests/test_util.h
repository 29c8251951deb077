// Helpers for kernel tests: random data, fp32 <-> double, error measures, finite differences.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

namespace bertcc::testing {

inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}
inline std::vector<double> to_d(const std::vector<float>& v) { return {v.begin(), v.end()}; }
inline std::vector<double> to_d(const float* p, size_t n) { return {p, p + n}; }

// max |a - b| / max(max |b|, floor)
inline double max_rel(const std::vector<double>& a, const std::vector<double>& b, double floor = 1e-30) {
  EXPECT_EQ(a.size(), b.size());
  double num = 0, den = floor;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    num = std::max(num, std::fabs(a[i] - b[i]));
    den = std::max(den, std::fabs(b[i]));
  }
  return num / den;
}

// Central-difference gradient of a double-precision scalar function at x.
inline std::vector<double> fd_grad(const std::function<double(const std::vector<double>&)>& f, std::vector<double> x,
                                   double h = 1e-6) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double fp = f(x);
    x[i] = x0 - h;
    const double fm = f(x);
    x[i] = x0;
    g[i] = (fp - fm) / (2 * h);
  }
  return g;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace bertcc::testing
