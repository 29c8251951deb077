// What the simulated-kernel tests (tests/cuda/sim/test_*_sim.cpp) share: one line per check, the
// count of failures, and 16-byte aligned buffers with an optional misalignment.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace sim_check {

inline int g_fail = 0;

// "what  bad of n how", FAIL marked and counted when bad > 0
inline void report(const std::string& what, size_t bad, size_t n, const char* how) {
  std::printf("%-70s %zu of %zu %s%s\n", what.c_str(), bad, n, how, bad ? "  FAIL" : "");
  if (bad) ++g_fail;
}
template <class T>
void expect_bits(const std::string& what, const T* want, const T* got, size_t n) {
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) bad += std::memcmp(&want[i], &got[i], sizeof(T)) != 0;
  report(what, bad, n, "differ");
}
template <class T>
void expect_bits(const std::string& what, const std::vector<T>& want, const std::vector<T>& got) {
  if (want.size() != got.size()) return report(what + ": sizes differ", 1, 1, "");
  expect_bits(what, want.data(), got.data(), want.size());
}
// |want - got| <= tol * max(1, |want|) elementwise
inline void expect_close(const std::string& what, const float* want, const float* got, size_t n, float tol) {
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) bad += !(std::fabs(want[i] - got[i]) <= tol * std::max(1.0f, std::fabs(want[i])));
  char t[32];
  std::snprintf(t, sizeof t, " (tol %.0e)", static_cast<double>(tol));
  report(what + t, bad, n, "outside");
}
inline void expect_close(const std::string& what, const std::vector<float>& want, const std::vector<float>& got,
                         float tol) {
  if (want.size() != got.size()) return report(what + ": sizes differ", 1, 1, "");
  expect_close(what, want.data(), got.data(), want.size(), tol);
}

// n elements at a 16-byte aligned address plus `shift` elements (shift 1: no vector access allowed)
template <class T>
struct AlignedBuf {
  std::vector<T> v;
  T* p;
  AlignedBuf(int64_t n, int shift) : v(static_cast<size_t>(n) + 16 / sizeof(T) + 8) {
    const auto a = (reinterpret_cast<uintptr_t>(v.data()) + 15) & ~uintptr_t{15};
    p = reinterpret_cast<T*>(a) + shift;
  }
};

}  // namespace sim_check
