// Start-up checks of the trainers' numeric hyper-parameters (pretrain and finetune, CLI and
// library callers alike): a value that is not finite or out of its range is an error naming the
// flag and the value, before anything is read or written. Nothing is clamped.
#pragma once
#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>

#include "bertcc/error.h"

namespace bertcc {

// The most optimizer steps a run may ask for (30,000 years at one step a second).
inline constexpr int64_t kMaxTrainSteps = 1'000'000'000'000;  // 1e12

// Fails unless lo <(=) v <(=) hi and v is finite; `range` says it in words ("> 0", "in [0, 1]").
// The value is written as its shortest round-trip form (a float flag's 5e-5 as 5e-05).
template <class T>
void check_hparam(const char* flag, T v, double lo, bool lo_inclusive, double hi, bool hi_inclusive,
                  const char* range) {
  const double d = static_cast<double>(v);
  const bool ok = std::isfinite(d) && (lo_inclusive ? d >= lo : d > lo) && (hi_inclusive ? d <= hi : d < hi);
  if (!ok) {
    char text[64];
    const auto r = std::to_chars(text, text + sizeof text, v);
    fail(flag, " ", std::string(text, r.ptr), ": must be a finite number ", range);
  }
}
template <class T>
void check_positive(const char* flag, T v) {
  check_hparam(flag, v, 0, false, HUGE_VAL, false, "> 0");
}
template <class T>
void check_nonnegative(const char* flag, T v) {
  check_hparam(flag, v, 0, true, HUGE_VAL, false, ">= 0");
}
template <class T>
void check_fraction(const char* flag, T v) {
  check_hparam(flag, v, 0, true, 1, true, "in [0, 1]");
}
// Integers: within [lo, hi].
inline void check_int(const char* flag, int64_t v, int64_t lo, int64_t hi) {
  BERTCC_CHECK(v >= lo && v <= hi, flag, " ", v, ": must be an integer in [", lo, ", ", hi, "]");
}

}  // namespace bertcc
