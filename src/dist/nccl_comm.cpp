// The NCCL device communicator (built when CMake finds the CUDA toolkit's NCCL and MPI): one
// ncclComm per rank over the host communicator's ranks, on this rank's GPU. Rank 0 makes the
// NCCL id and the host communicator broadcasts it (NCCL's MPI bootstrap). Work goes on the
// legacy default stream, where the CUDA backend queues its kernels, so a reduction starts after
// the backward pass that produced the gradients and the optimizer step waits for it.
#include <cuda_runtime.h>
#include <nccl.h>

#include "bertcc/dist.h"
#include "bertcc/error.h"

namespace bertcc::dist {
namespace {

void check_nccl(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return;
  fail("NCCL: ", what, ": ", ncclGetErrorString(r),
       r == ncclInvalidUsage ? " (two ranks on one GPU? NCCL needs one GPU per rank: run one rank per GPU, "
                               "or --allreduce-backend host)"
       : r == ncclSystemError || r == ncclRemoteError
           ? " (NCCL_DEBUG=WARN says more; a peer may have died)"
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
  }
  Nccl(const Nccl&) = delete;
  Nccl& operator=(const Nccl&) = delete;
  const char* name() const override { return "nccl"; }
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
  // NCCL's own ReduceScatter and AllGather take equal parts; ZeRO-1's are whole tensors, so
  // rank r's part goes by one ncclReduce (root r) or ncclBroadcast (from r), all in one group.
  void reduce_scatter_sum(float* data, const std::vector<size_t>& bounds) override {
    parts(bounds, "ncclReduce (ZeRO-1)", [&](size_t b, size_t n, int r) {
      return ncclReduce(data + b, data + b, n, ncclFloat32, ncclSum, r, comm_, nullptr);
    });
  }
  void reduce_scatter_sum16(uint16_t* data, const std::vector<size_t>& bounds, WireDtype wire) override {
    BERTCC_CHECK(wire == WireDtype::BF16 || wire == WireDtype::F16, "NCCL: reduce_scatter_sum16 needs a 16-bit wire dtype");
    const ncclDataType_t t = wire == WireDtype::BF16 ? ncclBfloat16 : ncclFloat16;
    parts(bounds, "ncclReduce (ZeRO-1, 16-bit)", [&](size_t b, size_t n, int r) {
      return ncclReduce(data + b, data + b, n, t, ncclSum, r, comm_, nullptr);
    });
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

  int device_;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

bool nccl_available() { return true; }

std::unique_ptr<DeviceCommunicator> make_nccl(Communicator& host, int device) {
  return std::make_unique<Nccl>(host, device);
}

}  // namespace bertcc::dist
