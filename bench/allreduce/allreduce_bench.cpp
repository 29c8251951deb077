// bertcc's MPI gradient all-reduce (dist::Communicator::allreduce_sum: an Alltoallv
// reduce-scatter summed in rank order, then an all-gather; with two ranks MPI_Allreduce in 8 MB
// calls; fp32, bf16 or fp16 on the wire) and ZeRO-1's reduce-scatter (reduce_scatter_sum) against
// the MPI library's own MPI_Allreduce on the same buffer, in the same run.
//
//   mpirun -np W build/bertcc_allreduce_bench [--mb 1,25,418] [--iters 10]
//
// For each buffer size (MB of fp32 gradients: 25 is bertcc's default bucket, 418 bert-base's whole
// gradient) and each method, every timed call starts from the same buffer contents after a barrier;
// a call's time is the slowest rank's. Reported: the median time, the algorithm bandwidth (buffer
// bytes / time) and the bus bandwidth (algbw x 2 (W-1) / W for an all-reduce, x (W-1) / W for a
// reduce-scatter, as nccl-tests count it: what each rank's link carries in a ring), and
// MPI_Allreduce's time over the method's. Before timing, bertcc's
// fp32 sum is checked bit for bit against the rank-order sum and MPI_Allreduce's within 1e-6, and
// the 16-bit wires' and reduce_scatter_sum's results bit for bit against their definitions.
// --check does only that (make test runs it at 2 and 3 ranks: MPI's collectives and bertcc's own).
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
#include "bertcc/dtype.h"

namespace {

using bertcc::dist::WireDtype;

float value(int rank, size_t i) {  // exactly representable, different per rank and position
  return static_cast<float>(static_cast<int>((i * 2654435761u + static_cast<size_t>(rank) * 40503u) % 2001) - 1000) /
         64.0f;
}

// A 16-bit wire's value: rounded to bf16 or fp16 and widened back (dtype.h's scalar conversions,
// against the bulk ones the communicator uses).
float on_wire(WireDtype w, float x) {
  if (w == WireDtype::BF16) return bertcc::bf16_to_f32(bertcc::f32_to_bf16(x));
  if (w == WireDtype::F16) return bertcc::f16_to_f32(bertcc::f32_to_f16(x));
  return x;
}

// Values whose sums are inexact (24 random bits scaled by 2^0 .. 2^-23), so that the order of
// the additions shows in the bits, as with real gradients.
float messy(int rank, size_t i) {
  uint64_t z = (static_cast<uint64_t>(i) << 8 | static_cast<uint64_t>(rank)) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
  z ^= z >> 29;
  const float mant = static_cast<float>(z & 0xFFFFFFu), sign = (z >> 24 & 1) ? -1.0f : 1.0f;
  return sign * std::ldexp(mant, -23 - static_cast<int>((z >> 25) % 24));
}

// What allreduce_sum must give for element i (dist.h): the values as they travel, summed in fp32
// in rank order, the sum as it travels back.
float expected_sum(WireDtype w, int W, size_t i) {
  float s = on_wire(w, messy(0, i));
  for (int r = 1; r < W; ++r) s += on_wire(w, messy(r, i));
  return on_wire(w, s);
}

// allreduce_sum on every wire, and reduce_scatter_sum (unequal parts, one of them empty with 3 or
// more ranks) on fp32 and bf16, against expected_sum bit for bit. Returns the mismatches.
size_t check_exact(bertcc::dist::Communicator& comm, size_t n) {
  const int W = comm.world(), R = comm.rank();
  size_t bad = 0;
  std::vector<float> buf(n);
  for (WireDtype w : {WireDtype::F32, WireDtype::BF16, WireDtype::F16}) {
    for (size_t i = 0; i < n; ++i) buf[i] = messy(R, i);
    comm.allreduce_sum(buf.data(), n, w);
    for (size_t i = 0; i < n; ++i) {
      const float e = expected_sum(w, W, i);
      bad += std::memcmp(&e, &buf[i], 4) != 0;
    }
  }
  // parts: rank r gets about (r + 1) / (W (W + 1) / 2) of the buffer; with W >= 3 rank 1's is empty
  std::vector<size_t> counts(static_cast<size_t>(W));
  size_t given = 0;
  for (int r = 0; r < W; ++r) {
    counts[static_cast<size_t>(r)] =
        (W >= 3 && r == 1) ? 0 : n * static_cast<size_t>(r + 1) / static_cast<size_t>(W * (W + 1) / 2);
    given += counts[static_cast<size_t>(r)];
  }
  counts.back() += n - given;
  size_t my0 = 0;
  for (int r = 0; r < R; ++r) my0 += counts[static_cast<size_t>(r)];
  for (WireDtype w : {WireDtype::F32, WireDtype::BF16}) {
    for (size_t i = 0; i < n; ++i) buf[i] = messy(R, i);
    comm.reduce_scatter_sum(buf.data(), counts, w);
    for (size_t i = 0; i < n; ++i) {
      const bool mine = i >= my0 && i < my0 + counts[static_cast<size_t>(R)];
      const float e = mine ? expected_sum(w, W, i) : messy(R, i);  // the rest is left as it was
      bad += std::memcmp(&e, &buf[i], 4) != 0;
    }
  }
  return bad;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<double> mbs{1, 25, 418};
  int iters = 10;
  bool check_only = false;
  for (int a = 1; a < argc; ++a) {
    const std::string s = argv[a];
    if (s == "--check") {
      check_only = true;
    } else if (s == "--iters" && a + 1 < argc) {
      iters = std::atoi(argv[++a]);
    } else if (s == "--mb" && a + 1 < argc) {
      mbs.clear();
      for (char* p = std::strtok(argv[++a], ","); p; p = std::strtok(nullptr, ",")) mbs.push_back(std::atof(p));
    } else {
      std::fprintf(stderr, "usage: mpirun -np W %s [--mb 1,25,418] [--iters 10] [--check]\n", argv[0]);
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
  if (R == 0 && !check_only) {
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
      worst = std::max(worst,
                       std::fabs(static_cast<double>(mpi[i]) - s) / std::max(1.0, std::fabs(static_cast<double>(s))));
    }
    const size_t bad_exact = check_exact(comm, n);
    int local_ok = bad == 0 && bad_exact == 0 && worst <= 1e-6, all_ok = 0;
    MPI_Allreduce(&local_ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all_ok) {
      ok = false;
      std::fprintf(stderr,
                   "rank %d, %g MB: bertcc's sum differs from the rank-order sum at %zu of %zu values; "
                   "the wires' and reduce_scatter_sum's results from their definitions at %zu; "
                   "MPI_Allreduce's worst relative difference %.2e\n",
                   R, mb, bad, n, bad_exact, worst);
    }
    if (check_only) continue;
    std::vector<size_t> parts(static_cast<size_t>(W));  // equal parts, the remainder to the last rank
    for (int r = 0; r < W; ++r) parts[static_cast<size_t>(r)] = n / static_cast<size_t>(W);
    parts.back() += n % static_cast<size_t>(W);
    struct Method {
      const char* name;
      double bus;  // the ring's traffic per rank, in units of algbw x (W-1) / W
      std::function<void()> run;
    };
    const std::vector<Method> methods{
        {"bertcc fp32", 2, [&] { comm.allreduce_sum(buf.data(), n, WireDtype::F32); }},
        {"bertcc bf16 wire", 2, [&] { comm.allreduce_sum(buf.data(), n, WireDtype::BF16); }},
        {"bertcc fp16 wire", 2, [&] { comm.allreduce_sum(buf.data(), n, WireDtype::F16); }},
        {"bertcc reduce-scatter fp32 (ZeRO-1)", 1, [&] { comm.reduce_scatter_sum(buf.data(), parts, WireDtype::F32); }},
        {"MPI_Allreduce fp32", 2,
         [&] { MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); }}};
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
                    algbw * methods[m].bus * (W - 1) / W, med.back() / med[m]);
      }
  }
  if (R == 0)
    std::printf("%scorrectness, %d ranks: %s\n", check_only ? "" : "\n", W,
                ok ? "bertcc fp32 = rank-order sum bit for bit, the 16-bit wires and reduce_scatter_sum as defined; "
                     "MPI_Allreduce within 1e-6"
                   : "FAILED (see above)");
  bertcc::dist::finalize();
  return ok ? 0 : 1;
}
