// Pieces shared by pre-training and fine-tuning for gradient accumulation and data parallelism.
//
// A step's micro-batches are numbered k = 0 .. world x accumulation - 1 in the global order; rank r
// runs k = r*A .. r*A + A - 1. Everything that decides a micro-batch's result is a function of
// (seed, step, k) — its rows, its dropout masks, its loss normaliser — so a step computes the same
// micro-batch gradients whatever the world size; they are summed in order k.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "bertcc/bert.h"
#include "bertcc/dist.h"
#include "bertcc/optim.h"
#include "bertcc/params.h"
#include "bertcc/rng.h"

namespace bertcc {

// The dropout RNG of micro-batch k of optimizer step `step` (phase 1 or 2).
Rng micro_batch_rng(uint64_t seed, int phase, int64_t step, int64_t k);

// A step's gradients: the micro-batch gradients of this rank summed as separately computed
// tensors, ((g0 + g1) + g2) ..., as PyTorch accumulates .grad and as the all-reduce sums ranks
// (so 2 ranks x 1 micro-batch and 1 rank x 2 micro-batches give bit-identical gradients), then
// the sum over ranks (NVIDIA's allreduce_post_accumulation: once per optimizer step).
//
// The all-reduce runs in buckets: a fixed partition of the flat gradient buffer into chunks of
// `bucket_elems`, from its end (the heads, whose gradients backward finishes first) to its start
// (the embeddings). With overlap, a communication thread reduces each bucket as soon as the last
// micro-batch's backward has finished it (the model reports, through a hook, the offset from
// which on its gradients are final), while backward goes on with the layers below. The bucket
// partition is the same on every rank whatever each computes, so collectives always match, and
// a sum is element by element, so results do not depend on bucketing or overlap.
class GradSync {
 public:
  GradSync(dist::Communicator& comm, dist::WireDtype wire, size_t bucket_elems, bool overlap);
  // From the run's data-parallel options, reporting backward progress through `model`'s hook
  // (removed again by the destructor). `who` prefixes the start-up note when MPI cannot overlap.
  GradSync(dist::Communicator& comm, const dist::Options& o, Bert& model, const char* who);
  ~GradSync();
  GradSync(const GradSync&) = delete;
  GradSync& operator=(const GradSync&) = delete;
  // Before micro-batch a of this rank's `count` in the step (`grads` is zero for a = 0).
  void before(int64_t a, int64_t count, std::vector<float>& grads);
  // The model's backward hook: gradients at [offset, end) are final for the running micro-batch.
  void ready_from(size_t offset);
  // After micro-batch a's backward.
  void after(int64_t a, int64_t count, std::vector<float>& grads);
  // After this rank's last micro-batch (also with count 0): `grads` holds the global sum.
  void finish(int64_t count, std::vector<float>& grads);
  // ZeRO-1: reduce-scatter instead of all-reduce. Rank r's sums land in [bounds[r], bounds[r+1])
  // (OptimizerShards::bounds()), the rest of its gradient buffer is left unreduced; read the global
  // norm with sharded_global_norm().
  void scatter_to(std::vector<size_t> bounds) { scatter_bounds_ = std::move(bounds); }
  bool overlapping() const { return overlap_; }
  double last_wait_seconds() const { return wait_s_; }  // time finish() waited for communication

 private:
  struct Thread;
  void reduce_bucket(size_t i);
  dist::Communicator& comm_;
  dist::WireDtype wire_;
  size_t bucket_elems_;
  bool overlap_;
  std::vector<float> acc_;
  float* buf_ = nullptr;    // what the buckets reduce: the gradients or the accumulator
  float* grads_ = nullptr;  // the running micro-batch's gradients (last micro-batch, accumulation > 1)
  size_t n_ = 0;
  size_t watermark_ = 0;  // [watermark_, n_) final
  bool last_ = false;     // the running micro-batch is the last of the step
  double wait_s_ = 0;
  std::unique_ptr<Thread> th_;
  Bert* hooked_ = nullptr;
  std::vector<size_t> scatter_bounds_;  // ZeRO-1 (empty: all-reduce)
};

// The device communicator for gradients on `be`, or null for the host path: NCCL for --device cuda
// with several ranks, unless --allreduce-backend host or the ranks share a GPU; for --device
// cpu-staged with several ranks (unless --allreduce-backend host), the staged communicator: each
// bucket downloaded, summed by the host communicator, uploaded, so the NCCL path's bookkeeping runs
// (and gives the CPU's bits) without a GPU. Refuses what cannot work: nccl without a CUDA device.
// One per process, shared by its models.
std::unique_ptr<dist::DeviceCommunicator> make_device_comm(dist::Communicator& comm, const dist::Options& o,
                                                           Backend& be, const char* who);

// GradSync for a model on a device (Bert::use_backend): the micro-batch gradients are summed on
// the device in GradSync's order (acc = g0; acc += g1; ...: the host's bits). With several ranks
// and a device communicator (NCCL), the sum is then reduced GPU to GPU; without one, each
// micro-batch's gradients come down to the host, where a GradSync (without overlap) accumulates
// and reduces them, and the global sum goes back up (the host's bits). With NCCL and
// --allreduce-dtype bf16|fp16, the summed gradients are rounded to 16 bits on the device, NCCL
// sums them in that format, and the sums come back to fp32 (Horovod/NVIDIA fp16 compression). Call before(a) and
// after(a) around micro-batch a of this rank's `count`, then finish(count) (also with count 0);
// zero_grad() before the step's first micro-batch.
//
// With a device communicator and overlap (--allreduce-overlap, the default; not with ZeRO-1, and
// not where `hook` is false: ELECTRA's discriminator gets the generator's share of the embedding
// gradients after both backward passes), the reduction runs in GradSync's buckets: as the last
// micro-batch's backward reports (the model's hook) that a range of gradients is final, that
// range joins the accumulated sum on the device, and each bucket wholly inside the final part is
// started on the communicator (NCCL: its own stream, after the kernels queued so far) while
// backward goes on; finish() joins them. A rank without a micro-batch this step sends zeros in the
// same buckets, so every rank makes the same calls.
class DeviceGradSync {
 public:
  DeviceGradSync(dist::Communicator& comm, const dist::Options& o, Bert& model,
                 dist::DeviceCommunicator* dcomm = nullptr, bool hook = true);
  ~DeviceGradSync();
  DeviceGradSync(const DeviceGradSync&) = delete;
  DeviceGradSync& operator=(const DeviceGradSync&) = delete;
  void before(int64_t a, int64_t count);
  void after(int64_t a, int64_t count);
  void finish(int64_t count);
  // ZeRO-1: reduce-scatter instead of all-reduce (GradSync::scatter_to): after finish() rank r's
  // device gradients hold the global sums in [bounds[r], bounds[r+1]) (through the host, or NCCL's
  // grouped reduces), the rest unreduced; read the norm with sharded_global_norm(comm, model, ...).
  void scatter_to(std::vector<size_t> bounds);
  double last_wait_seconds() const { return host_ ? host_->last_wait_seconds() : wait_s_; }
  bool overlapping() const { return overlap_; }

 private:
  void ready_from(size_t offset);  // the model's hook
  void arm_buckets(int64_t count);
  void start_buckets(size_t offset);
  void unhook();
  Bert& model_;
  std::unique_ptr<GradSync> host_;      // several ranks through the host
  dist::DeviceCommunicator* dcomm_;     // several ranks GPU to GPU (or null)
  dist::WireDtype wire_;                // gradients on the wire: fp32, bf16 or fp16
  DeviceBuffer<float> acc_;             // accumulation on the device
  DeviceBuffer<uint16_t> wire16_;       // the 16-bit gradients NCCL reduces
  std::vector<size_t> scatter_bounds_;  // ZeRO-1 (empty: all-reduce)
  int rank_ = 0;
  double wait_s_ = 0;
  size_t bucket_elems_ = 1;
  bool overlap_ = false, hooked_ = false;
  bool last_ = false;     // the running micro-batch's buckets go out during its backward
  int64_t count_ = 0;     // this rank's micro-batches in the step
  size_t watermark_ = 0;  // [watermark_, n) of the last micro-batch is final (and summed into acc_)
  size_t next_ = 0;       // the next bucket to start
};

// ZeRO-1 (--zero1): the optimizer moments are split across ranks by whole tensors (rank r owns the
// tensors starting in [r P/W, (r+1) P/W)); each rank updates its tensors with the all-reduced
// gradients and the global norm (the same arithmetic as unsharded, so the same bits), then the
// updated parameters are all-gathered. Checkpoints hold the full moments (gathered on rank 0).
// On a device (Bert::use_backend) the moments of the shard live there (Backend::moments_from_host
// with the shard's AdamState), the backend's optimizer step updates the shard alone, and the
// parameters are all-gathered GPU to GPU (NCCL) or through the host.
class OptimizerShards {
 public:
  OptimizerShards(const ParamTable& t, int world);
  size_t begin(int r) const { return bounds_[static_cast<size_t>(r)]; }
  size_t end(int r) const { return bounds_[static_cast<size_t>(r) + 1]; }
  // Full moments (a fresh state or one loaded from a checkpoint) -> this rank's shard.
  void keep_own(AdamState& s, int rank) const;
  // This rank's shard -> the full moments on rank 0 (others: the state is returned unchanged).
  AdamState gather_full(dist::Communicator& comm, const AdamState& own) const;
  void allgather_params(dist::Communicator& comm, float* params) const;
  // The same for `m`'s parameters where its backend computes: NCCL when `dcomm` is given, else
  // this rank's part comes down, the host all-gathers, and the whole buffer goes back up.
  void allgather_params(dist::Communicator& comm, dist::DeviceCommunicator* dcomm, Bert& m) const;
  const std::vector<size_t>& bounds() const { return bounds_; }

 private:
  std::vector<size_t> bounds_, counts_;
};

// global_norm() of a gradient that GradSync::scatter_to() reduce-scattered by `shards`, with the
// same bits: each rank sums its part's blocks, the lanes of a block cut by a part boundary pass
// from rank to rank (W - 1 broadcasts of 64 bytes), and the block sums are added in order.
double sharded_global_norm(dist::Communicator& comm, const float* x, size_t n, const OptimizerShards& shards);
// The same for `m`'s gradients where its backend computes: on a device this rank's part comes down
// to the host copy first (1/W of the gradients), so a device run gets the host's bits.
double sharded_global_norm(dist::Communicator& comm, Bert& m, const OptimizerShards& shards);

// Every rank must agree on a value (a resumed step, a data-set size): throws naming `what` and
// each rank's value when they differ.
void check_same_on_all_ranks(dist::Communicator& comm, double value, const std::string& what);

}  // namespace bertcc
