#include "train/data_parallel.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <mutex>
#include <sstream>
#include <thread>
#include <utility>

#include "bertcc/error.h"
#include "bertcc/runtime.h"

namespace bertcc {

Rng micro_batch_rng(uint64_t seed, int phase, int64_t step, int64_t k) {
  uint64_t s = splitmix64(seed ^ (static_cast<uint64_t>(phase) << 56));
  s = splitmix64(s ^ static_cast<uint64_t>(step));
  s = splitmix64(s ^ static_cast<uint64_t>(k));
  return Rng{s, 0};
}

struct GradSync::Thread {
  std::mutex mu;
  std::condition_variable cv;
  size_t ready = 0;  // buckets whose begin >= ready may be reduced
  size_t next = 0, nb = 0;
  bool active = false, quit = false;
  std::exception_ptr error;
  std::thread t;
};

namespace {
size_t bucket_count(size_t n, size_t s) { return (n + s - 1) / s; }
size_t bucket_begin(size_t n, size_t s, size_t i) { return n > (i + 1) * s ? n - (i + 1) * s : 0; }

// --device cpu-staged's device communicator: what NCCL does GPU to GPU, through the host. A bucket
// comes down, the host communicator sums it (rank order: the CPU's bits; a 16-bit wire as NCCL's,
// the values rounded before and the sum after) and it goes back up. Synchronous: the staged
// backend's work is done when it is queued, so start_* return with the sum made.
class StagedComm final : public dist::DeviceCommunicator {
 public:
  StagedComm(dist::Communicator& host, Backend& be) : host_(host), be_(be) {}
  const char* name() const override { return "staged"; }
  std::string route() const override {
    return std::string("on the device by the staged communicator (buckets through ") + host_.name() + ")";
  }
  void allreduce_sum(float* d, size_t n) override { sum(d, n); }
  void allreduce_sum16(uint16_t* d, size_t n, dist::WireDtype wire) override { sum16(d, n, wire); }
  void start_allreduce_sum(float* d, size_t n) override { sum(d, n); }
  void start_allreduce_sum16(uint16_t* d, size_t n, dist::WireDtype wire) override { sum16(d, n, wire); }
  void join() override {}
  void reduce_scatter_sum(float* d, const std::vector<size_t>& bounds) override {
    down(d, bounds.back());
    host_.reduce_scatter_sum(tmp_.data(), counts(bounds));
    up_own(d, bounds);
  }
  void reduce_scatter_sum16(uint16_t* d, const std::vector<size_t>& bounds, dist::WireDtype wire) override {
    down16(d, bounds.back(), wire);
    host_.reduce_scatter_sum(tmp_.data(), counts(bounds), wire);
    const auto [b, e] = own(bounds);
    up16(d + b, tmp_.data() + b, e - b, wire);
  }
  void allgather(float* d, const std::vector<size_t>& bounds) override {
    down(d, bounds.back());
    host_.allgatherv_inplace(tmp_.data(), counts(bounds));
    be_.upload(d, tmp_.data(), sizeof(float) * bounds.back());
  }

 private:
  static std::vector<size_t> counts(const std::vector<size_t>& bounds) {
    std::vector<size_t> c;
    for (size_t r = 0; r + 1 < bounds.size(); ++r) c.push_back(bounds[r + 1] - bounds[r]);
    return c;
  }
  void down(const float* d, size_t n) {
    tmp_.resize(n);
    be_.download(tmp_.data(), d, sizeof(float) * n);
  }
  void down16(const uint16_t* d, size_t n, dist::WireDtype wire) {
    BERTCC_CHECK(wire != dist::WireDtype::F32, "staged communicator: a 16-bit sum needs a 16-bit wire dtype");
    std::vector<uint16_t> h(n);
    be_.download(h.data(), d, sizeof(uint16_t) * n);
    tmp_.resize(n);
    for (size_t i = 0; i < n; ++i) tmp_[i] = wire == dist::WireDtype::BF16 ? bf16_to_f32(h[i]) : f16_to_f32(h[i]);
  }
  void up16(uint16_t* d, const float* x, size_t n, dist::WireDtype wire) {
    std::vector<uint16_t> h(n);  // exact: the host rounded the sums to the wire's format
    for (size_t i = 0; i < n; ++i) h[i] = wire == dist::WireDtype::BF16 ? f32_to_bf16(x[i]) : f32_to_f16(x[i]);
    be_.upload(d, h.data(), sizeof(uint16_t) * n);
  }
  std::pair<size_t, size_t> own(const std::vector<size_t>& bounds) const {
    return {bounds[static_cast<size_t>(host_.rank())], bounds[static_cast<size_t>(host_.rank()) + 1]};
  }
  void up_own(float* d, const std::vector<size_t>& bounds) {
    const auto [b, e] = own(bounds);
    be_.upload(d + b, tmp_.data() + b, sizeof(float) * (e - b));
  }
  void sum(float* d, size_t n) {
    down(d, n);
    host_.allreduce_sum(tmp_.data(), n);
    be_.upload(d, tmp_.data(), sizeof(float) * n);
  }
  void sum16(uint16_t* d, size_t n, dist::WireDtype wire) {
    down16(d, n, wire);
    host_.allreduce_sum(tmp_.data(), n, wire);
    up16(d, tmp_.data(), n, wire);
  }
  dist::Communicator& host_;
  Backend& be_;
  std::vector<float> tmp_;
};

}  // namespace

GradSync::GradSync(dist::Communicator& comm, dist::WireDtype wire, size_t bucket_elems, bool overlap)
    : comm_(comm),
      wire_(wire),
      bucket_elems_(std::max<size_t>(bucket_elems, 1)),
      overlap_(overlap && comm.world() > 1) {
  if (!overlap_) return;
  th_ = std::make_unique<Thread>();
  th_->t = std::thread([this] {
    Thread& t = *th_;
    std::unique_lock<std::mutex> lk(t.mu);
    for (;;) {
      t.cv.wait(lk, [&] {
        return t.quit || (t.active && t.next < t.nb && t.ready <= bucket_begin(n_, bucket_elems_, t.next));
      });
      if (t.quit) return;
      const size_t i = t.next;
      lk.unlock();
      try {
        if (!t.error) reduce_bucket(i);
      } catch (...) {
        t.error = std::current_exception();
      }
      lk.lock();
      ++t.next;
      t.cv.notify_all();
    }
  });
}

GradSync::GradSync(dist::Communicator& comm, const dist::Options& o, Bert& model, const char* who)
    : GradSync(comm, dist::parse_wire_dtype(o.allreduce_dtype),
               static_cast<size_t>(std::max(1.0, o.bucket_cap_mb * 1048576.0 / sizeof(float))),
               o.allreduce_overlap && comm.other_thread_ok()) {
  if (comm.rank() == 0 && comm.world() > 1 && o.allreduce_overlap && !overlap_)
    std::cerr << who << ": the MPI library gives no MPI_THREAD_SERIALIZED: gradient all-reduce not overlapped with "
              << "backward\n";
  model.set_grad_ready_hook([this](size_t offset) { ready_from(offset); });
  hooked_ = &model;
}

GradSync::~GradSync() {
  if (hooked_) hooked_->set_grad_ready_hook(nullptr);
  if (!th_) return;
  {
    std::lock_guard<std::mutex> lk(th_->mu);
    th_->quit = true;
  }
  th_->cv.notify_all();
  th_->t.join();
}

void GradSync::reduce_bucket(size_t i) {
  const size_t b = bucket_begin(n_, bucket_elems_, i), e = n_ - i * bucket_elems_;
  if (scatter_bounds_.empty()) {
    comm_.allreduce_sum(buf_ + b, e - b, wire_);
    return;
  }
  // ZeRO-1: the bucket's elements go to the ranks whose parts they fall in
  BERTCC_CHECK(scatter_bounds_.size() == static_cast<size_t>(comm_.world()) + 1 && scatter_bounds_.back() == n_,
               "GradSync: ZeRO-1 bounds for ", scatter_bounds_.back(), " gradients, not ", n_);
  std::vector<size_t> counts(static_cast<size_t>(comm_.world()));
  for (size_t r = 0; r < counts.size(); ++r) {
    const size_t lo = std::max(b, scatter_bounds_[r]), hi = std::min(e, scatter_bounds_[r + 1]);
    counts[r] = hi > lo ? hi - lo : 0;
  }
  comm_.reduce_scatter_sum(buf_ + b, counts, wire_);
}

void GradSync::before(int64_t a, int64_t count, std::vector<float>& grads) {
  if (a == 1) {
    acc_.resize(grads.size());
    std::swap(acc_, grads);  // acc_ = g0; grads becomes scratch for g1
  }
  if (a >= 1) {
    float* g = grads.data();
    const int64_t n = static_cast<int64_t>(grads.size());
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) g[i] = 0.0f;
  }
  last_ = overlap_ && a == count - 1;
  if (!last_) return;
  // The last micro-batch: buckets go out as its backward finishes them.
  n_ = grads.size();
  buf_ = count > 1 ? acc_.data() : grads.data();
  grads_ = grads.data();
  watermark_ = n_;
  std::lock_guard<std::mutex> lk(th_->mu);
  th_->ready = n_;
  th_->next = 0;
  th_->nb = bucket_count(n_, bucket_elems_);
  th_->active = true;
  th_->error = nullptr;
}

void GradSync::ready_from(size_t offset) {
  if (!last_ || offset >= watermark_) return;
  if (buf_ != grads_) {  // accumulation: this range of the last micro-batch joins the sum now
    float* acc = buf_;
    const float* g = grads_;
    const int64_t b = static_cast<int64_t>(offset), e = static_cast<int64_t>(watermark_);
#pragma omp parallel for schedule(static)
    for (int64_t i = b; i < e; ++i) acc[i] += g[i];
  }
  watermark_ = offset;
  {
    std::lock_guard<std::mutex> lk(th_->mu);
    th_->ready = offset;
  }
  th_->cv.notify_all();
}

void GradSync::after(int64_t a, int64_t count, std::vector<float>& grads) {
  (void)count;
  if (last_) {
    ready_from(0);  // whatever the hook has not reported is final now
    return;
  }
  if (a == 0) return;
  float* acc = acc_.data();
  const float* g = grads.data();
  const int64_t n = static_cast<int64_t>(grads.size());
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) acc[i] += g[i];
}

void GradSync::finish(int64_t count, std::vector<float>& grads) {
  if (count > 1) std::swap(acc_, grads);  // the buffers, not their addresses, change hands
  wait_s_ = 0;
  if (comm_.world() == 1) return;
  const auto t0 = std::chrono::steady_clock::now();
  if (last_) {  // wait for the communication thread's buckets
    std::unique_lock<std::mutex> lk(th_->mu);
    th_->cv.wait(lk, [&] { return th_->next == th_->nb; });
    th_->active = false;
    last_ = false;
    if (th_->error) std::rethrow_exception(th_->error);
  } else {  // no overlap (or no micro-batch on this rank this step): the same buckets, here
    n_ = grads.size();
    buf_ = grads.data();
    for (size_t i = 0; i < bucket_count(n_, bucket_elems_); ++i) reduce_bucket(i);
  }
  wait_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::unique_ptr<dist::DeviceCommunicator> make_device_comm(dist::Communicator& comm, const dist::Options& o,
                                                           Backend& be, const char* who) {
  const std::string& b = o.allreduce_backend;
  BERTCC_CHECK(b == "auto" || b == "nccl" || b == "host", who, ": --allreduce-backend ", b,
               " is not auto, nccl or host");
  const bool cuda = be.kind() == DeviceKind::CUDA;
  BERTCC_CHECK(b != "nccl" || cuda, who, ": --allreduce-backend nccl reduces GPU buffers: it needs --device cuda");
  if (comm.world() == 1 && b != "nccl") return nullptr;
  if (be.kind() == DeviceKind::Staged && b == "auto") return std::make_unique<StagedComm>(comm, be);
  if (!cuda || b == "host") return nullptr;
  dist::parse_wire_dtype(o.allreduce_dtype);  // a bad name is refused before NCCL starts
  // NCCL runs one rank per GPU; ranks that share one (--device cuda:0 on every rank) sum their
  // gradients through the host communicator instead, said once at start-up (the same verdict on
  // every rank, so all of them take the same path)
  const std::string shared = comm.world() > 1 ? dist::ranks_sharing_gpu(comm, be.device_ordinal()) : "";
  if (!shared.empty()) {
    BERTCC_CHECK(b != "nccl", who, ": --allreduce-backend nccl: ", shared,
                 ", and NCCL needs one GPU per rank: run one rank per GPU, or --allreduce-backend host");
    if (comm.rank() == 0)
      std::cerr << who << ": " << shared << ": NCCL needs one GPU per rank, so the gradients are summed through the "
                << comm.name() << " communicator on the host (as --allreduce-backend host)\n";
    return nullptr;
  }
  return dist::make_nccl(comm, be.device_ordinal());
}

DeviceGradSync::DeviceGradSync(dist::Communicator& comm, const dist::Options& o, Bert& model,
                               dist::DeviceCommunicator* dcomm, bool hook)
    : model_(model),
      dcomm_(dcomm),
      wire_(dist::parse_wire_dtype(o.allreduce_dtype)),
      rank_(comm.rank()),
      bucket_elems_(static_cast<size_t>(std::max(1.0, o.bucket_cap_mb * 1048576.0 / sizeof(float)))),
      overlap_(dcomm != nullptr && o.allreduce_overlap && hook) {
  if (comm.world() > 1 && !dcomm_) host_ = std::make_unique<GradSync>(comm, wire_, bucket_elems_, false);
  if (overlap_) {
    model_.set_grad_ready_hook([this](size_t offset) { ready_from(offset); });
    hooked_ = true;
  }
}

DeviceGradSync::~DeviceGradSync() { unhook(); }

void DeviceGradSync::unhook() {
  if (hooked_) model_.set_grad_ready_hook(nullptr);
  hooked_ = false;
}

void DeviceGradSync::scatter_to(std::vector<size_t> bounds) {
  BERTCC_CHECK(bounds.size() >= 2 && bounds.back() == model_.table().total(), "ZeRO-1: shards of ",
               bounds.empty() ? 0 : bounds.back(), " values for a model of ", model_.table().total());
  if (host_) host_->scatter_to(bounds);
  scatter_bounds_ = std::move(bounds);
  overlap_ = false;  // ZeRO-1's parts go by grouped reduces after backward
  unhook();
}

void DeviceGradSync::before(int64_t a, int64_t count) {
  if (host_) host_->before(a, count, model_.grads());
  if (a > 0) model_.zero_grad();
  last_ = overlap_ && a == count - 1;
  if (last_) arm_buckets(count);
}

// A step's buckets, none started yet, over the sum of `count` micro-batches.
void DeviceGradSync::arm_buckets(int64_t count) {
  const size_t n = model_.table().total();
  count_ = count;
  watermark_ = n;
  next_ = 0;
  if (wire_ != dist::WireDtype::F32) wire16_.ensure(model_.backend(), n);
}

void DeviceGradSync::ready_from(size_t offset) {
  if (!last_ || offset >= watermark_) return;
  if (count_ > 1)  // accumulation: this range of the last micro-batch joins the sum now
    model_.backend().add_rows(acc_.get() + offset, 0, model_.grads_on_backend() + offset, 0, 1,
                              static_cast<int64_t>(watermark_ - offset));
  watermark_ = offset;
  start_buckets(offset);
}

// Every bucket not yet started that lies wholly in [offset, n).
void DeviceGradSync::start_buckets(size_t offset) {
  Backend& be = model_.backend();
  const size_t n = model_.table().total(), nb = bucket_count(n, bucket_elems_);
  float* buf = count_ > 1 ? acc_.get() : model_.grads_on_backend();
  for (; next_ < nb && bucket_begin(n, bucket_elems_, next_) >= offset; ++next_) {
    const size_t b = bucket_begin(n, bucket_elems_, next_), e = n - next_ * bucket_elems_;
    if (wire_ == dist::WireDtype::F32) {
      dcomm_->start_allreduce_sum(buf + b, e - b);
    } else {
      be.narrow16(wire16_.get() + b, buf + b, static_cast<int64_t>(e - b), wire_ == dist::WireDtype::BF16);
      dcomm_->start_allreduce_sum16(wire16_.get() + b, e - b, wire_);
    }
  }
}

void DeviceGradSync::after(int64_t a, int64_t count) {
  Backend& be = model_.backend();
  const size_t n = model_.table().total();
  if (host_) {
    model_.grads_to_host();
    host_->after(a, count, model_.grads());
    return;
  }
  if (last_) {
    ready_from(0);  // whatever the hook has not reported is final now
    return;
  }
  if (count <= 1) return;
  if (a == 0) {
    acc_.ensure(be, n);
    be.copy(acc_.get(), model_.grads_on_backend(), sizeof(float) * n);
  } else {
    be.add_rows(acc_.get(), 0, model_.grads_on_backend(), 0, 1, static_cast<int64_t>(n));
  }
}

void DeviceGradSync::finish(int64_t count) {
  if (host_) {
    if (count == 0) std::fill(model_.grads().begin(), model_.grads().end(), 0.0f);  // nothing run here
    host_->finish(count, model_.grads());
    model_.grads_to_device();
    return;
  }
  Backend& be = model_.backend();
  const size_t n = model_.table().total();
  if (overlap_) {
    const auto t0 = std::chrono::steady_clock::now();
    if (!last_) {  // no micro-batch here this step: zeros, in the same buckets as the other ranks
      be.zero(model_.grads_on_backend(), sizeof(float) * n);
      arm_buckets(0);
      start_buckets(0);
    }
    last_ = false;
    dcomm_->join();
    if (wire_ != dist::WireDtype::F32)
      be.widen16(model_.grads_on_backend(), wire16_.get(), static_cast<int64_t>(n), wire_ == dist::WireDtype::BF16);
    else if (count_ > 1)
      be.copy(model_.grads_on_backend(), acc_.get(), sizeof(float) * n);
    wait_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return;
  }
  if (count == 0) be.zero(model_.grads_on_backend(), sizeof(float) * n);  // nothing run here
  if (count > 1) be.copy(model_.grads_on_backend(), acc_.get(), sizeof(float) * n);
  if (dcomm_) {
    const auto t0 = std::chrono::steady_clock::now();
    const bool scatter = !scatter_bounds_.empty();
    if (wire_ != dist::WireDtype::F32) {  // 16 bits on the wire: round, sum in 16 bits, widen
      const bool bf = wire_ == dist::WireDtype::BF16;
      wire16_.ensure(be, n);
      be.narrow16(wire16_.get(), model_.grads_on_backend(), static_cast<int64_t>(n), bf);
      if (scatter) {  // only this rank's part is summed: widen that
        dcomm_->reduce_scatter_sum16(wire16_.get(), scatter_bounds_, wire_);
        const size_t b = scatter_bounds_[static_cast<size_t>(rank_)],
                     e = scatter_bounds_[static_cast<size_t>(rank_) + 1];
        be.widen16(model_.grads_on_backend() + b, wire16_.get() + b, static_cast<int64_t>(e - b), bf);
      } else {
        dcomm_->allreduce_sum16(wire16_.get(), n, wire_);
        be.widen16(model_.grads_on_backend(), wire16_.get(), static_cast<int64_t>(n), bf);
      }
    } else if (scatter) {
      dcomm_->reduce_scatter_sum(model_.grads_on_backend(), scatter_bounds_);
    } else {
      dcomm_->allreduce_sum(model_.grads_on_backend(), n);
    }
    wait_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
}

OptimizerShards::OptimizerShards(const ParamTable& t, int world) {
  const size_t P = t.total(), W = static_cast<size_t>(world);
  bounds_.assign(W + 1, P);
  bounds_[0] = 0;
  for (size_t r = 1; r < W; ++r) {
    const size_t target = P * r / W;
    for (const ParamEntry& e : t.entries())
      if (e.offset >= target) {
        bounds_[r] = e.offset;
        break;
      }
  }
  for (size_t r = 0; r < W; ++r) counts_.push_back(bounds_[r + 1] - bounds_[r]);
}

void OptimizerShards::keep_own(AdamState& s, int rank) const {
  const size_t b = begin(rank), e = end(rank);
  if (!s.m.empty()) {
    BERTCC_CHECK(s.begin == 0 && s.m.size() == bounds_.back(), "ZeRO-1: moments of ", s.m.size(),
                 " values, expected the full ", bounds_.back());
    s.m =
        std::vector<float>(s.m.begin() + static_cast<std::ptrdiff_t>(b), s.m.begin() + static_cast<std::ptrdiff_t>(e));
    s.v =
        std::vector<float>(s.v.begin() + static_cast<std::ptrdiff_t>(b), s.v.begin() + static_cast<std::ptrdiff_t>(e));
  } else {
    s.m.assign(e - b, 0.0f);
    s.v.assign(e - b, 0.0f);
  }
  s.begin = b;
  s.end = e;
}

AdamState OptimizerShards::gather_full(dist::Communicator& comm, const AdamState& own) const {
  AdamState full;
  full.step = own.step;
  const bool root = comm.rank() == 0;
  if (root) {
    full.m.resize(bounds_.back());
    full.v.resize(bounds_.back());
  }
  comm.gatherv(own.m.data(), counts_, root ? full.m.data() : nullptr, 0);
  comm.gatherv(own.v.data(), counts_, root ? full.v.data() : nullptr, 0);
  return root ? full : AdamState{};
}

void OptimizerShards::allgather_params(dist::Communicator& comm, float* params) const {
  comm.allgatherv_inplace(params, counts_);
}

void OptimizerShards::allgather_params(dist::Communicator& comm, dist::DeviceCommunicator* dcomm, Bert& m) const {
  BERTCC_CHECK(bounds_.back() == m.table().total(), "ZeRO-1: shards of ", bounds_.back(), " values for a model of ",
               m.table().total());
  Backend& be = m.backend();
  if (be.on_host()) return allgather_params(comm, m.params().data());
  if (dcomm) return dcomm->allgather(m.params_on_backend(), bounds_);
  const int r = comm.rank();
  float* host = m.params().data();
  be.download(host + begin(r), m.params_on_backend() + begin(r), sizeof(float) * (end(r) - begin(r)));
  comm.allgatherv_inplace(host, counts_);
  m.params_to_device();
}

double sharded_global_norm(dist::Communicator& comm, Bert& m, const OptimizerShards& shards) {
  Backend& be = m.backend();
  const int r = comm.rank();
  float* host = m.grads().data();
  if (!be.on_host())
    be.download(host + shards.begin(r), m.grads_on_backend() + shards.begin(r),
                sizeof(float) * (shards.end(r) - shards.begin(r)));
  return sharded_global_norm(comm, host, m.grads().size(), shards);
}

double sharded_global_norm(dist::Communicator& comm, const float* x, size_t n, const OptimizerShards& shards) {
  const int W = comm.world(), r = comm.rank();
  const size_t b = shards.begin(r), e = shards.end(r);
  BERTCC_CHECK(shards.bounds().back() == n, "sharded_global_norm: shards of ", shards.bounds().back(), " values, not ",
               n);
  // [b, h): the piece of the block that b cuts (needs the lanes of the ranks before); [h, e): the
  // rest, summed now without waiting for anyone.
  const size_t h = std::min(e, b % kNormBlock ? (b / kNormBlock + 1) * kNormBlock : b);
  std::vector<double> head, tail;
  size_t head_first = 0, tail_first = 0;
  float carry[16] = {0}, tail_carry[16] = {0}, out[16] = {0};
  sumsq_slice(x, n, h, e, tail_carry, tail, tail_first);
  for (int i = 0; i < W; ++i) {
    if (i == r) {
      sumsq_slice(x, n, b, h, carry, head, head_first);
      std::copy(h < e ? tail_carry : carry, (h < e ? tail_carry : carry) + 16, out);
    }
    if (i == W - 1) break;
    comm.broadcast(out, sizeof out, i);  // rank i's open lanes, for rank i + 1
    if (r == i + 1) std::copy(out, out + 16, carry);
  }
  std::vector<double> blocks((n + kNormBlock - 1) / kNormBlock, 0.0);
  for (size_t k = 0; k < head.size(); ++k) blocks[head_first + k] = head[k];
  for (size_t k = 0; k < tail.size(); ++k) blocks[tail_first + k] = tail[k];
  comm.allreduce_sum(blocks.data(), blocks.size());  // each block from one rank: x + 0 is exact
  double s = 0;
  for (double v : blocks) s += v;
  return std::sqrt(s);
}

void check_same_on_all_ranks(dist::Communicator& comm, double value, const std::string& what) {
  std::vector<double> all(static_cast<size_t>(comm.world()));
  comm.allgather(&value, 1, all.data());
  if (std::all_of(all.begin(), all.end(), [&](double v) { return v == all[0]; })) return;
  std::ostringstream os;
  for (size_t r = 0; r < all.size(); ++r) os << (r ? ", " : "") << "rank " << r << ": " << all[r];
  fail("ranks disagree on ", what, " (", os.str(), ")");
}

}  // namespace bertcc
