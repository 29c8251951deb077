#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "core/settings.h"
#include "cuda/common.cuh"
#include "cuda/op_timer.h"

namespace bertcc::cuda {
namespace {

struct Pending {
  const char* name;
  cudaEvent_t start, stop;
  long long host_ns;
};
struct Totals {
  double ms = 0, host_ms = 0;
  long calls = 0;
};
long long now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
struct State {
  std::vector<Pending> pending;
  std::vector<cudaEvent_t> pool;
  std::map<std::string, Totals> totals;
};
State& state() {
  static State s;
  return s;
}
cudaEvent_t event() {
  State& s = state();
  if (!s.pool.empty()) {
    cudaEvent_t e = s.pool.back();
    s.pool.pop_back();
    return e;
  }
  cudaEvent_t e;
  BERTCC_CUDA_CHECK(cudaEventCreate(&e));
  return e;
}
void fold() {
  State& s = state();
  for (const Pending& p : s.pending) {
    BERTCC_CUDA_CHECK(cudaEventSynchronize(p.stop));
    float ms = 0;
    BERTCC_CUDA_CHECK(cudaEventElapsedTime(&ms, p.start, p.stop));
    Totals& t = s.totals[p.name];
    t.ms += ms;
    t.host_ms += 1e-6 * static_cast<double>(p.host_ns);
    ++t.calls;
    s.pool.push_back(p.start);
    s.pool.push_back(p.stop);
  }
  s.pending.clear();
}

}  // namespace

bool op_profiling() {
  static const bool on = settings().cuda_profile;
  return on;
}

OpTimer::OpTimer(const char* name) : name_(name) {
  if (!op_profiling()) return;
  cudaEvent_t e = event();
  BERTCC_CUDA_CHECK(cudaEventRecord(e));
  start_ = e;
  host_start_ns_ = now_ns();
}

OpTimer::~OpTimer() {
  if (start_ == nullptr) return;
  const long long host_ns = now_ns() - host_start_ns_;
  cudaEvent_t e = event();
  if (cudaEventRecord(e) != cudaSuccess) return;  // no throwing from a destructor
  State& s = state();
  s.pending.push_back({name_, static_cast<cudaEvent_t>(start_), e, host_ns});
  if (s.pending.size() >= 4096) fold();
}

std::string op_profile_report() {
  if (!op_profiling()) return "";
  fold();
  const State& s = state();
  std::vector<std::pair<std::string, Totals>> rows(s.totals.begin(), s.totals.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  double top = 0, top_host = 0;
  for (const auto& [name, t] : rows)
    if (name.find('/') == std::string::npos) top += t.ms, top_host += t.host_ms;
  std::string out =
      "GPU time by backend operation (BERTCC_CUDA_PROFILE), all steps; host: the host's wall time in those calls\n";
  char line[256];
  for (const auto& [name, t] : rows) {
    std::snprintf(line, sizeof line, "  %-44s %10.3f ms %8ld calls %6.1f%%   host %9.3f ms\n", name.c_str(), t.ms,
                  t.calls, top > 0 ? 100.0 * t.ms / top : 0.0, t.host_ms);
    out += line;
  }
  std::snprintf(line, sizeof line, "  %-44s %10.3f ms %23s host %9.3f ms\n", "total (top-level operations)", top, "",
                top_host);
  return out + line;
}

}  // namespace bertcc::cuda
