// bertcc's MPI gradient all-reduce (dist::Communicator::allreduce_sum: an Alltoallv
// reduce-scatter summed in rank order, then an all-gather; fp32, bf16 or fp16 on the wire)
// against the MPI library's own MPI_Allreduce on the same buffer, in the same run.
//
//   mpirun -np W build/bertcc_allreduce_bench [--mb 1,25,418] [--iters 10]
//
// For each buffer size (MB of fp32 gradients: 25 is bertcc's default bucket, 418 bert-base's whole
// gradient) and each method, every timed call starts from the same buffer contents after a barrier;
// a call's time is the slowest rank's. Reported: the median time, the algorithm bandwidth (buffer
// bytes / time) and the bus bandwidth (algbw x 2 (W-1) / W, as nccl-tests count it: what each
// rank's link carries in a ring), and MPI_Allreduce's time over bertcc's. Before timing, bertcc's
// fp32 sum is checked bit for bit against the rank-order sum and MPI_Allreduce's within 1e-6.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bertcc/dist.h"

namespace {

using bertcc::dist::WireDtype;

float value(int rank, size_t i) {  // exactly representable, different per rank and position
  return static_cast<float>(static_cast<int>((i * 2654435761u + static_cast<size_t>(rank) * 40503u) % 2001) - 1000) / 64.0f;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<double> mbs{1, 25, 418};
  int iters = 10;
  for (int a = 1; a < argc; ++a) {
    const std::string s = argv[a];
    if (s == "--iters" && a + 1 < argc) {
      iters = std::atoi(argv[++a]);
    } else if (s == "--mb" && a + 1 < argc) {
      mbs.clear();
      for (char* p = std::strtok(argv[++a], ","); p; p = std::strtok(nullptr, ",")) mbs.push_back(std::atof(p));
    } else {
      std::fprintf(stderr, "usage: mpirun -np W %s [--mb 1,25,418] [--iters 10]\n", argv[0]);
      return 2;
    }
  }
  if (iters < 1 || mbs.empty()) {
    std::fprintf(stderr, "allreduce_bench: --iters must be positive and --mb non-empty\n");
    return 2;
  }
  bertcc::dist::Communicator& comm = bertcc::dist::world();  // initialises MPI (serialized threads)
  const int W = comm.world(), R = comm.rank();
  if (std::string(comm.name()) != "mpi" || W < 2) {
    if (R == 0) std::fprintf(stderr, "allreduce_bench: run it under mpirun with 2 or more ranks\n");
    return 2;
  }
  if (R == 0) {
    std::printf("all-reduce of fp32 gradients, %d ranks (%s), median of %d calls\n\n", W, comm.name(), iters);
    std::printf("| MB | method | time | algbw GB/s | busbw GB/s | MPI_Allreduce time / this |\n");
    std::printf("|---:|---|---:|---:|---:|---:|\n");
  }
  bool ok = true;
  for (double mb : mbs) {
    const size_t n = std::max<size_t>(1, static_cast<size_t>(mb * 1048576.0 / 4));
    std::vector<float> src(n), buf(n);
    for (size_t i = 0; i < n; ++i) src[i] = value(R, i);
    // correctness: bertcc's fp32 sum is the rank-order sum, bit for bit; MPI's within 1e-6
    buf = src;
    comm.allreduce_sum(buf.data(), n, WireDtype::F32);
    std::vector<float> mpi = src;
    MPI_Allreduce(MPI_IN_PLACE, mpi.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    size_t bad = 0;
    double worst = 0;
    for (size_t i = 0; i < n; ++i) {
      float s = value(0, i);
      for (int r = 1; r < W; ++r) s += value(r, i);
      if (std::memcmp(&s, &buf[i], 4) != 0) ++bad;
      worst = std::max(worst, std::fabs(static_cast<double>(mpi[i]) - s) / std::max(1.0, std::fabs(static_cast<double>(s))));
    }
    int local_ok = bad == 0 && worst <= 1e-6, all_ok = 0;
    MPI_Allreduce(&local_ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all_ok) {
      ok = false;
      std::fprintf(stderr, "rank %d, %g MB: bertcc's sum differs from the rank-order sum at %zu of %zu values; "
                   "MPI_Allreduce's worst relative difference %.2e\n", R, mb, bad, n, worst);
    }
    struct Method {
      const char* name;
      std::function<void()> run;
    };
    const std::vector<Method> methods{
        {"bertcc fp32", [&] { comm.allreduce_sum(buf.data(), n, WireDtype::F32); }},
        {"bertcc bf16 wire", [&] { comm.allreduce_sum(buf.data(), n, WireDtype::BF16); }},
        {"bertcc fp16 wire", [&] { comm.allreduce_sum(buf.data(), n, WireDtype::F16); }},
        {"MPI_Allreduce fp32", [&] {
           MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
         }}};
    std::vector<double> med(methods.size());
    for (size_t m = 0; m < methods.size(); ++m) {
      std::vector<double> t;
      for (int k = -2; k < iters; ++k) {  // two warm-up calls
        buf = src;
        MPI_Barrier(MPI_COMM_WORLD);
        const auto t0 = std::chrono::steady_clock::now();
        methods[m].run();
        double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), slowest = 0;
        MPI_Allreduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (k >= 0) t.push_back(slowest);
      }
      med[m] = median(t);
    }
    if (R == 0)
      for (size_t m = 0; m < methods.size(); ++m) {
        const double algbw = static_cast<double>(n) * 4 / med[m] / 1e9;
        std::printf("| %g | %s | %.3f ms | %.2f | %.2f | %.2fx |\n", mb, methods[m].name, med[m] * 1e3, algbw,
                    algbw * 2.0 * (W - 1) / W, med.back() / med[m]);
      }
  }
  if (R == 0) std::printf("\ncorrectness: %s\n", ok ? "bertcc fp32 = rank-order sum bit for bit; MPI_Allreduce within 1e-6"
                                                    : "FAILED (see above)");
  bertcc::dist::finalize();
  return ok ? 0 : 1;
}
