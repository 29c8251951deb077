// The single-process communicator, the launcher-environment detection that picks MPI, and the
// progress watchdog.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include "bertcc/dist.h"
#include "bertcc/error.h"
#include "dist/mpi_comm.h"

namespace bertcc::dist {

WireDtype parse_wire_dtype(const std::string& s) {
  if (s == "fp32") return WireDtype::F32;
  if (s == "bf16") return WireDtype::BF16;
  if (s == "fp16") return WireDtype::F16;
  fail("--allreduce-dtype must be fp32, bf16 or fp16 (got '", s, "')");
}

const char* wire_dtype_name(WireDtype d) {
  switch (d) {
    case WireDtype::F32:
      return "fp32";
    case WireDtype::BF16:
      return "bf16";
    case WireDtype::F16:
      return "fp16";
  }
  return "?";
}

namespace {

class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world() const override { return 1; }
  int local_rank() const override { return 0; }
  int local_world() const override { return 1; }
  const char* name() const override { return "single"; }
  bool other_thread_ok() const override { return true; }
  void allreduce_sum(float*, size_t, WireDtype) override {}
  void allreduce_sum(double*, size_t) override {}
  void reduce_scatter_sum(float*, const std::vector<size_t>&, WireDtype) override {}
  void allgather(const double* in, size_t n, double* out) override { std::memcpy(out, in, n * sizeof(double)); }
  void allgatherv(const float* in, size_t n, std::vector<float>& out, std::vector<size_t>& counts) override {
    out.assign(in, in + n);
    counts.assign(1, n);
  }
  void allgatherv_inplace(float*, const std::vector<size_t>&) override {}
  void gatherv(const float* in, const std::vector<size_t>& counts, float* out, int) override {
    std::memcpy(out, in, counts.at(0) * sizeof(float));
  }
  void broadcast(void*, size_t, int) override {}
  void barrier() override {}
  [[noreturn]] void abort(int code) override { std::_Exit(code); }
};

// The launcher's view: the world size it started, or 0 when not started by a launcher.
int launcher_world(const char** who) {
  struct Var {
    const char *name, *launcher;
  };
  for (const Var v : {Var{"OMPI_COMM_WORLD_SIZE", "mpirun (Open MPI)"}, Var{"PMI_SIZE", "an MPI launcher (PMI)"},
                      Var{"PMIX_SIZE", "an MPI launcher (PMIx)"}, Var{"MPI_LOCALNRANKS", "mpiexec (Hydra)"},
                      Var{"SLURM_NTASKS", "srun (Slurm)"}}) {
    const char* s = std::getenv(v.name);
    if (s && *s) {
      // SLURM_NTASKS is also set inside a batch script (sbatch) for the whole allocation; it
      // describes this process only under srun, which sets SLURM_STEP_ID as well.
      if (std::strcmp(v.name, "SLURM_NTASKS") == 0 && !std::getenv("SLURM_STEP_ID")) continue;
      *who = v.launcher;
      return std::atoi(s);
    }
  }
  return 0;
}

std::mutex g_mu;
std::unique_ptr<Communicator> g_comm;

}  // namespace

std::string device_for_rank(const std::string& device, const Communicator& comm) {
  if (device == "cuda" && comm.local_world() > 1) return "cuda:" + std::to_string(comm.local_rank());
  return device;
}

const char* available() {
  return mpi_available() ? (nccl_available() ? "single, mpi, nccl" : "single, mpi") : "single";
}

Communicator& world() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_comm) {
    const char* who = "";
    const int n = launcher_world(&who);
    if (n > 1) {
      BERTCC_CHECK(mpi_available(), "started as one of ", n, " ranks by ", who,
                   ", but this bertcc was built without MPI (communicators: ", available(),
                   "); install libopenmpi-dev and rebuild (cmake -DBERTCC_MPI=ON)");
      g_comm = make_mpi_communicator();
      BERTCC_CHECK(g_comm->world() == n, who, " announced ", n, " ranks but MPI sees ", g_comm->world());
    } else {
      g_comm = std::make_unique<SingleProcess>();
    }
  }
  return *g_comm;
}

bool is_distributed() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_comm && g_comm->world() > 1;
}

void finalize() {
  std::lock_guard<std::mutex> lock(g_mu);
  g_comm.reset();  // the MPI communicator finalizes in its destructor
}

// ---- watchdog ----

struct Watchdog::Impl {
  Communicator& comm;
  double seconds;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::chrono::steady_clock::time_point last = std::chrono::steady_clock::now();
  const char* where = "start-up";
  int64_t step = 0;
  bool paused = false;
  std::thread th;

  Impl(Communicator& c, double s) : comm(c), seconds(s) {
    th = std::thread([this] { run(); });
  }
  void run() {
    std::unique_lock<std::mutex> lock(mu);
    while (!done) {
      cv.wait_for(lock, std::chrono::milliseconds(200));
      if (done) break;
      const double idle = std::chrono::duration<double>(std::chrono::steady_clock::now() - last).count();
      if (idle > seconds && !paused) {
        std::fprintf(stderr,
                     "bertcc: error: rank %d of %d made no progress for %.0f s (in %s at step %lld); "
                     "another rank has probably died or hung; ending the job (--watchdog-timeout)\n",
                     comm.rank(), comm.world(), idle, where, static_cast<long long>(step));
        std::fflush(stderr);
        comm.abort(3);
      }
    }
  }
};

Watchdog::Watchdog(Communicator& comm, double seconds) {
  if (seconds > 0) impl_ = std::make_unique<Impl>(comm, seconds);
}

Watchdog::~Watchdog() {
  if (!impl_) return;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->done = true;
  }
  impl_->cv.notify_all();
  impl_->th.join();
}

void Watchdog::beat(const char* where, int64_t step, bool paused) {
  if (!impl_) return;
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->last = std::chrono::steady_clock::now();
  impl_->where = where;
  impl_->step = step;
  impl_->paused = paused;
}

}  // namespace bertcc::dist
