// Device memory: where a backend's buffers live (host memory for the CPU, device memory for CUDA,
// the staged backend's own allocations), the copies in and out of it, and how much it holds. One
// of the interfaces a Backend is made of (backend.h); the operations on the buffers are ops.h's.
#pragma once
#include <cstddef>
#include <cstdint>

namespace bertcc {

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  // bytes
  virtual void* alloc(size_t bytes) = 0;  // zero-filled; throws naming the size when it does not fit
  virtual void free(void* p) = 0;
  virtual void upload(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void download(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  virtual void zero(void* p, size_t bytes) = 0;
  virtual void synchronize() = 0;
  // Makes this backend's device the calling thread's (CUDA: the current device is per thread); a
  // thread other than the one that chose the backend calls it before computing (serve's batchers).
  virtual void bind_thread() {}
  // The CUDA device number (-1 elsewhere).
  virtual int device_ordinal() const { return -1; }

  // Device memory in use on the device, by every process (total - free; 0 on the CPU: see peak RSS):
  // with the CUDA context, the libraries' modules and the allocator's slack.
  virtual double device_memory_used_mb() const = 0;
  // The bytes of this process's own device buffers (CUDA, and the staged backend's allocations; 0 on
  // the CPU), as PyTorch's memory_allocated counts its tensors, and their high-water mark since the
  // start or reset_peak_buffer_mb (max_memory_allocated, reset_peak_memory_stats).
  virtual double buffer_mb() const { return 0.0; }
  virtual double peak_buffer_mb() const { return 0.0; }
  virtual void reset_peak_buffer_mb() {}
  // Whether p lies in one of this memory's allocations, for the staged backend's checks of every
  // operation's buffers (the others keep no list of them: true).
  virtual bool holds(const void* p) const {
    (void)p;
    return true;
  }
};

// A buffer of T in a backend's memory, freed with it (moves, never copies).
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceMemory& be, size_t n) : be_(&be), n_(n), p_(static_cast<T*>(be.alloc(n * sizeof(T)))) {}
  ~DeviceBuffer() { reset(); }
  DeviceBuffer(DeviceBuffer&& o) noexcept : be_(o.be_), n_(o.n_), p_(o.p_) { o.p_ = nullptr, o.n_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      reset();
      be_ = o.be_, n_ = o.n_, p_ = o.p_;
      o.p_ = nullptr, o.n_ = 0;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  // At least n elements (grow only; contents are not kept when it grows).
  T* ensure(DeviceMemory& be, size_t n) {
    if (be_ != &be || n > n_) *this = DeviceBuffer(be, n);
    return p_;
  }
  void reset() {
    if (p_) be_->free(p_);
    p_ = nullptr;
    n_ = 0;
  }
  T* get() const { return p_; }
  size_t size() const { return n_; }

 private:
  DeviceMemory* be_ = nullptr;
  size_t n_ = 0;
  T* p_ = nullptr;
};

}  // namespace bertcc
