// What the trainers print while they run and when they end: a bar with the
// rate and the time left on a terminal, plain lines otherwise, and a closing block of metrics in
// Hugging Face Trainer's layout ("***** train metrics *****", one "  key = value" per line).
#pragma once
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

namespace bertcc {

// Whether `fd` is a terminal someone watches, for a bar redrawn in place: not under a launcher
// (mpirun, mpiexec, srun; the variables dist::world() reads), whose ranks may write to a
// pseudo-terminal (Open MPI gives each rank's stdout one) while the job's output goes to a file.
// There every rank writes plain lines.
inline bool interactive_terminal(int fd) {
  if (!::isatty(fd)) return false;
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS", "SLURM_STEP_ID"}) {
    const char* s = std::getenv(v);
    if (s && *s) return false;
  }
  return true;
}

// 83 s -> "1:23", 4000 s -> "1:06:40"; hundredths with `fraction` ("0:01:23.45", as the Trainer's
// train_runtime).
inline std::string clock_time(double seconds, bool fraction = false) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = static_cast<int64_t>(seconds);
  char b[48];
  if (fraction)
    std::snprintf(b, sizeof b, "%lld:%02lld:%05.2f", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), seconds - static_cast<double>(s / 60 * 60));
  else if (s >= 3600)
    std::snprintf(b, sizeof b, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  else
    std::snprintf(b, sizeof b, "%lld:%02lld", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  return b;
}

// The time left after `done` of `total` steps took `seconds` (the wall time of this process).
inline std::string eta(double seconds, int64_t done, int64_t total) {
  if (done <= 0) return "?";
  return clock_time(seconds / static_cast<double>(done) * static_cast<double>(total - done));
}

// "[#########.....................]" for `done` of `total`.
inline std::string progress_bar(int64_t done, int64_t total, int width = 30) {
  const int filled = total > 0 ? std::clamp(static_cast<int>(static_cast<double>(width) * static_cast<double>(done) /
                                                             static_cast<double>(total)),
                                            0, width)
                               : 0;
  std::string out(static_cast<size_t>(width) + 2, ' ');
  out.front() = '[';
  out.back() = ']';
  for (int i = 0; i < filled; ++i) out[static_cast<size_t>(i) + 1] = '#';
  return out;
}

// The closing block: the keys padded to one width, as the Trainer's log_metrics prints them.
inline std::string metrics_block(const std::string& title,
                                 const std::vector<std::pair<std::string, std::string>>& rows) {
  size_t w = 0;
  for (const auto& [k, v] : rows) w = std::max(w, k.size());
  std::string out = "***** " + title + " *****\n";
  for (const auto& [k, v] : rows) out += "  " + k + std::string(w - k.size(), ' ') + " = " + v + "\n";
  return out;
}

inline std::string fixed(double v, int digits = 4) {
  char b[48];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}

}  // namespace bertcc
