// The NCCL device communicator (built into the CUDA module, backend/cuda_module.h, when CMake
// finds the CUDA toolkit's NCCL and MPI; dist/nccl_loaded.cpp forwards make_nccl here): one
// ncclComm per rank over the host communicator's ranks, on this rank's GPU. Rank 0 makes the
// NCCL id and the host communicator broadcasts it (NCCL's MPI bootstrap). Whole-buffer work goes
// on the default stream, where the CUDA backend queues its kernels, so a reduction starts after
// the backward pass that produced the gradients and the optimizer step waits for it. Buckets
// (start_*) go on a stream of their own, each after an event recorded on the default stream when
// its gradients' kernels had been queued, so they run while backward goes on with the layers
// below; join() makes the default stream wait for the last of them (PyTorch DDP's scheme).
#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda_module.h"
#include "bertcc/dist.h"
#include "bertcc/error.h"

namespace bertcc::dist {
namespace {

void check_nccl(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return;
  fail("NCCL: ", what, ": ", ncclGetErrorString(r),
       r == ncclInvalidUsage ? " (two ranks on one GPU? NCCL needs one GPU per rank: run one rank per GPU, "
                               "or --allreduce-backend host)"
       : r == ncclSystemError || r == ncclRemoteError ? " (NCCL_DEBUG=WARN says more; a peer may have died)"
                                                      : "");
}

void check_cuda(cudaError_t e, const char* what) {
  BERTCC_CHECK(e == cudaSuccess, "NCCL: ", what, ": ", cudaGetErrorString(e));
}

class Nccl final : public DeviceCommunicator {
 public:
  Nccl(Communicator& host, int device) : device_(device) {
    check_cuda(cudaSetDevice(device), "cudaSetDevice");
    ncclUniqueId id{};
    if (host.rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    host.broadcast(&id, sizeof id, 0);
    check_nccl(ncclCommInitRank(&comm_, host.world(), id, host.rank()), "ncclCommInitRank");
  }
  ~Nccl() override {
    if (comm_) ncclCommDestroy(comm_);
    if (queued_) cudaEventDestroy(queued_);
    if (done_) cudaEventDestroy(done_);
    if (stream_) cudaStreamDestroy(stream_);
  }
  Nccl(const Nccl&) = delete;
  Nccl& operator=(const Nccl&) = delete;
  const char* name() const override { return "nccl"; }
  std::string route() const override { return "GPU to GPU by nccl"; }
  void allreduce_sum(float* data, size_t n) override {
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    check_nccl(ncclAllReduce(data, data, n, ncclFloat32, ncclSum, comm_, /*stream=*/nullptr), "ncclAllReduce");
    check_cuda(cudaStreamSynchronize(nullptr), "after ncclAllReduce");
  }
  void allreduce_sum16(uint16_t* data, size_t n, WireDtype wire) override {
    BERTCC_CHECK(wire == WireDtype::BF16 || wire == WireDtype::F16, "NCCL: allreduce_sum16 needs a 16-bit wire dtype");
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    check_nccl(ncclAllReduce(data, data, n, wire == WireDtype::BF16 ? ncclBfloat16 : ncclFloat16, ncclSum, comm_,
                             /*stream=*/nullptr),
               "ncclAllReduce (16-bit)");
    check_cuda(cudaStreamSynchronize(nullptr), "after ncclAllReduce");
  }
  void start_allreduce_sum(float* data, size_t n) override { start(data, n, ncclFloat32); }
  void start_allreduce_sum16(uint16_t* data, size_t n, WireDtype wire) override {
    BERTCC_CHECK(wire == WireDtype::BF16 || wire == WireDtype::F16,
                 "NCCL: start_allreduce_sum16 needs a 16-bit wire dtype");
    start(data, n, wire == WireDtype::BF16 ? ncclBfloat16 : ncclFloat16);
  }
  void join() override {
    if (!started_) return;
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    check_cuda(cudaEventRecord(done_, stream_), "cudaEventRecord (buckets reduced)");
    check_cuda(cudaStreamWaitEvent(nullptr, done_, 0), "cudaStreamWaitEvent (buckets reduced)");
    started_ = false;
  }
  // NCCL's own ReduceScatter and AllGather take equal parts; ZeRO-1's are whole tensors, so
  // rank r's part goes by one ncclReduce (root r) or ncclBroadcast (from r), all in one group.
  void reduce_scatter_sum(float* data, const std::vector<size_t>& bounds) override {
    parts(bounds, "ncclReduce (ZeRO-1)", [&](size_t b, size_t n, int r) {
      return ncclReduce(data + b, data + b, n, ncclFloat32, ncclSum, r, comm_, nullptr);
    });
  }
  void reduce_scatter_sum16(uint16_t* data, const std::vector<size_t>& bounds, WireDtype wire) override {
    BERTCC_CHECK(wire == WireDtype::BF16 || wire == WireDtype::F16,
                 "NCCL: reduce_scatter_sum16 needs a 16-bit wire dtype");
    const ncclDataType_t t = wire == WireDtype::BF16 ? ncclBfloat16 : ncclFloat16;
    parts(bounds, "ncclReduce (ZeRO-1, 16-bit)",
          [&](size_t b, size_t n, int r) { return ncclReduce(data + b, data + b, n, t, ncclSum, r, comm_, nullptr); });
  }
  void allgather(float* data, const std::vector<size_t>& bounds) override {
    parts(bounds, "ncclBroadcast (ZeRO-1)", [&](size_t b, size_t n, int r) {
      return ncclBroadcast(data + b, data + b, n, ncclFloat32, r, comm_, nullptr);
    });
  }

 private:
  template <class F>
  void parts(const std::vector<size_t>& bounds, const char* what, F call) {
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    check_nccl(ncclGroupStart(), "ncclGroupStart");
    ncclResult_t first = ncclSuccess;  // the group is closed whatever fails inside it
    for (size_t r = 0; r + 1 < bounds.size() && first == ncclSuccess; ++r)
      if (bounds[r + 1] > bounds[r]) first = call(bounds[r], bounds[r + 1] - bounds[r], static_cast<int>(r));
    const ncclResult_t end = ncclGroupEnd();
    check_nccl(first, what);
    check_nccl(end, what);
    check_cuda(cudaStreamSynchronize(nullptr), what);
  }

  // One bucket on the bucket stream, after the default stream's work queued so far (one event is
  // enough: a wait takes the event's latest record at the time of the call).
  void start(void* data, size_t n, ncclDataType_t type) {
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    if (!stream_) {
      check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
      check_cuda(cudaEventCreateWithFlags(&queued_, cudaEventDisableTiming), "cudaEventCreateWithFlags");
      check_cuda(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    }
    check_cuda(cudaEventRecord(queued_, nullptr), "cudaEventRecord (bucket ready)");
    check_cuda(cudaStreamWaitEvent(stream_, queued_, 0), "cudaStreamWaitEvent (bucket ready)");
    check_nccl(ncclAllReduce(data, data, n, type, ncclSum, comm_, stream_), "ncclAllReduce (bucket)");
    started_ = true;
  }

  int device_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;  // the buckets' (made on first use)
  cudaEvent_t queued_ = nullptr, done_ = nullptr;
  bool started_ = false;
};

}  // namespace

namespace nccl {

std::string ranks_sharing_gpu(Communicator& host, int device) {
  char bus[32] = {0};
  check_cuda(cudaDeviceGetPCIBusId(bus, sizeof bus - 1, device), "cudaDeviceGetPCIBusId");
  char name[HOST_NAME_MAX + 1] = {0};
  if (gethostname(name, sizeof name - 1) != 0) name[0] = 0;
  // (host, bus id) as a 64-bit FNV-1a hash, sent as two exact doubles of 32 bits each
  uint64_t h = 1469598103934665603ull;
  for (const std::string& part : {std::string(name), std::string("/"), std::string(bus)})
    for (unsigned char c : part) h = (h ^ c) * 1099511628211ull;
  const double mine[2] = {static_cast<double>(h >> 32), static_cast<double>(h & 0xffffffffull)};
  std::vector<double> all(2 * static_cast<size_t>(host.world()));
  host.allgather(mine, 2, all.data());
  for (int a = 0; a < host.world(); ++a)
    for (int b = a + 1; b < host.world(); ++b)
      if (all[2 * a] == all[2 * b] && all[2 * a + 1] == all[2 * b + 1])
        return "rank " + std::to_string(a) + " and rank " + std::to_string(b) + " share one GPU" +
               (a == host.rank() || b == host.rank() ? std::string(" (") + bus + " on " + name + ")" : "");
  return "";
}

std::unique_ptr<DeviceCommunicator> make(Communicator& host, int device) {
  return std::make_unique<Nccl>(host, device);
}

}  // namespace nccl

}  // namespace bertcc::dist
