// Communicators for data-parallel training: one process (the default) or MPI ranks launched by
// mpirun/srun. Train code talks to this interface only; the process-wide communicator is made on
// first use from the launcher's environment (OMPI_COMM_WORLD_*, PMI_*/PMIX_*, SLURM_*).
//
// Reductions are deterministic: element i of a sum is ((x_0 + x_1) + x_2) + ... in rank order on
// every rank, so the same inputs give bit-identical results run after run, and every rank ends
// with the same bits.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace bertcc::dist {

// What travels on the wire in a gradient all-reduce (Horovod/NVIDIA fp16 compression): values
// are rounded to it before sending and the sum is rounded to it again before the gather.
enum class WireDtype { F32, BF16, F16 };
WireDtype parse_wire_dtype(const std::string& s);  // "fp32" | "bf16" | "fp16"
const char* wire_dtype_name(WireDtype d);

// The data-parallel settings `pretrain` and `finetune` share (their flags: tools/cli_common.h).
struct Options {
  std::string allreduce_dtype = "fp32";    // gradients on the wire: fp32 | bf16 | fp16
  double watchdog_timeout = 600;           // seconds without progress before a rank ends the job (0 = off)
  double bucket_cap_mb = 25;               // gradient all-reduce bucket size (PyTorch DDP's default)
  bool allreduce_overlap = true;           // reduce buckets while backward goes on
  bool zero1 = false;                      // optimizer moments sharded across ranks (ZeRO stage 1)
  std::string allreduce_backend = "auto";  // gradients on a GPU: auto (nccl with several ranks) | nccl | host
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world() const = 0;
  virtual int local_rank() const = 0;  // rank among the processes of this host
  virtual int local_world() const = 0;
  virtual const char* name() const = 0;  // "single" | "mpi"
  // Whether another thread may make this rank's calls while the main thread makes none
  // (MPI_THREAD_SERIALIZED): the overlapped gradient all-reduce needs it.
  virtual bool other_thread_ok() const = 0;

  // In-place sum over ranks of n floats (n may exceed INT_MAX: sent in chunks). `wire` as above;
  // a single process returns the data untouched.
  virtual void allreduce_sum(float* data, size_t n, WireDtype wire = WireDtype::F32) = 0;
  // The sum over ranks, kept only where each rank needs it (ZeRO-1: half an all-reduce's traffic):
  // afterwards rank r's part data[displ_r, displ_r + counts[r]) (displ = prefix sums of counts,
  // which add up to the buffer's length, below 2^31) holds allreduce_sum's bits for it; the rest of
  // `data` is left as it was.
  virtual void reduce_scatter_sum(float* data, const std::vector<size_t>& counts, WireDtype wire = WireDtype::F32) = 0;
  // In-place sum of a few doubles (counts, loss sums), deterministic as above.
  virtual void allreduce_sum(double* data, size_t n) = 0;
  // Every rank's `n` doubles, rank-major, into out[world * n].
  virtual void allgather(const double* in, size_t n, double* out) = 0;
  // Every rank's floats (n may differ by rank), rank-major, into `out`; counts[r] = rank r's n.
  virtual void allgatherv(const float* in, size_t n, std::vector<float>& out, std::vector<size_t>& counts) = 0;
  // In place: rank r's part is data[displ_r, displ_r + counts[r]) (displ = prefix sums of
  // counts); afterwards every rank holds every part.
  virtual void allgatherv_inplace(float* data, const std::vector<size_t>& counts) = 0;
  // Rank r's `counts[r]` floats, rank-major, into `out` on `root` (out is ignored elsewhere).
  virtual void gatherv(const float* in, const std::vector<size_t>& counts, float* out, int root) = 0;
  // `bytes` bytes from `root` to every rank, in place.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  virtual void barrier() = 0;
  // Ends every rank of the job now (after this rank has printed its message).
  [[noreturn]] virtual void abort(int code) = 0;
};

// This rank's --device: "cuda" with several ranks on this host is one GPU per rank
// (cuda:<local rank>); "cuda:N" and the others as given.
std::string device_for_rank(const std::string& device, const Communicator& comm);

// Sums over ranks of buffers in GPU memory: NCCL, one rank per GPU, set up through a host
// communicator (rank 0's NCCL id broadcast). Every rank makes the same calls in the same order.
// The sum of a given world size and GPU set is the same run after run (NCCL's fixed ring), but
// it is not the host's rank-order sum, so it does not give the bits of one rank with accumulation.
class DeviceCommunicator {
 public:
  virtual ~DeviceCommunicator() = default;
  virtual const char* name() const = 0;  // "nccl"
  // In-place sum over ranks of n floats in the memory of this rank's GPU, ordered after the work
  // already queued on the device and finished on return.
  virtual void allreduce_sum(float* device_data, size_t n) = 0;
  // The same for 16-bit values (wire BF16 or F16; NCCL sums them in that format), in place.
  virtual void allreduce_sum16(uint16_t* device_data, size_t n, WireDtype wire) = 0;
  // ZeRO-1 (uneven parts of whole tensors): rank r's part is [bounds[r], bounds[r + 1]) of a buffer
  // of bounds.back() values. reduce_scatter_sum leaves the sum over ranks of its own part in place
  // (other parts: unspecified), in fp32 or 16 bits; allgather sends each rank's part to every rank.
  virtual void reduce_scatter_sum(float* device_data, const std::vector<size_t>& bounds) = 0;
  virtual void reduce_scatter_sum16(uint16_t* device_data, const std::vector<size_t>& bounds, WireDtype wire) = 0;
  virtual void allgather(float* device_data, const std::vector<size_t>& bounds) = 0;
  // Buckets overlapped with backward: start_* begins the in-place sum of one bucket, ordered after
  // the work queued on the device so far, and returns without waiting for it (NCCL: on a stream of
  // its own); join() orders the device's later work after every sum started since the last join,
  // again without the host waiting. Every rank starts the same buckets in the same order.
  virtual void start_allreduce_sum(float* device_data, size_t n) = 0;
  virtual void start_allreduce_sum16(uint16_t* device_data, size_t n, WireDtype wire) = 0;
  virtual void join() = 0;
  // How the gradients travel, for the start-up line: "GPU to GPU by nccl".
  virtual std::string route() const = 0;
};
// NCCL over `host`'s ranks on CUDA device `device`. Throws, naming what is missing, in a build
// without NCCL, or when NCCL cannot start (e.g. two ranks on one GPU: NCCL refuses).
std::unique_ptr<DeviceCommunicator> make_nccl(Communicator& host, int device);
bool nccl_available();
// Collective (every rank calls it; every rank gets the same verdict, empty or not): the first two
// ranks found on one GPU (same host name, same PCI bus id of `device`), as "rank A and rank B
// share one GPU" (with the bus id and host on those two ranks), or "" when each rank has a GPU of
// its own. NCCL cannot run two ranks on one GPU. Without NCCL in the build: "".
std::string ranks_sharing_gpu(Communicator& host, int device);

// The process-wide communicator, created on first call. Launched by mpirun/srun with more than
// one rank and built without MPI: throws, naming what is missing.
Communicator& world();
// True once world() has been made with more than one rank.
bool is_distributed();
// Tears MPI down at a normal exit (no-op for a single process or when never made).
void finalize();
// Which communicators this build has ("single, mpi, nccl", "single, mpi" or "single").
const char* available();

// Progress watchdog: a rank that makes no progress (beat()) for `seconds` prints where it was
// and ends the whole job, so a hung or dead peer never leaves the others waiting forever.
// beat(..., paused = true) marks a phase of unbounded length (writing a checkpoint, evaluating a
// large dev set): not watched until the next beat.
class Watchdog {
 public:
  Watchdog(Communicator& comm, double seconds);
  ~Watchdog();
  void beat(const char* where, int64_t step, bool paused = false);
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace bertcc::dist
