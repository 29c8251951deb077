// Per-operation GPU time, for finding where a step's time goes on a machine without Nsight: with
// BERTCC_CUDA_PROFILE=1 in the environment, CUDA events around each CUDA backend call (and the
// parts of a GEMM) add up per name; op_profile_report() gives the table. Off (the default), an
// OpTimer costs one branch. The events serialise nothing, but reading them back synchronises, so
// profiled runs are a little slower than unprofiled ones. Each name also adds up the host's wall time
// inside its calls (launches, cuBLASLt's descriptors, synchronous copies): a step whose operations'
// host time approaches its GPU time is bound by the host, and then the GPU time of an operation
// includes the idle time while the host prepares it.
#pragma once
#include <string>

namespace bertcc::cuda {

bool op_profiling();

class OpTimer {
 public:
  explicit OpTimer(const char* name);  // name: a string literal (kept by pointer)
  ~OpTimer();
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  const char* name_;
  void* start_ = nullptr;
  long long host_start_ns_ = 0;
};

// One line per name, by total time: ms, calls, share of the top-level total (names without '/';
// "a/b" is a part of a). Empty when profiling is off.
std::string op_profile_report();

}  // namespace bertcc::cuda
