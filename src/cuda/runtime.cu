// Device selection, memory and copies for the CUDA kernels.
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "cuda/common.cuh"
#include "cuda/cuda_kernels.h"
#include "cuda/op_timer.h"

namespace bertcc::cuda {

int device_count(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why) {
      *why = std::string("no usable CUDA device: ") + cudaGetErrorString(e);
      // cudart reports a missing driver (no libcuda.so.1 loaded) as an insufficient one
      if (e == cudaErrorInsufficientDriver || e == cudaErrorNoDevice)
        *why += " (is the NVIDIA driver installed and a GPU visible? nvidia-smi should list it)";
    }
    (void)cudaGetLastError();
    return 0;
  }
  if (n == 0 && why) *why = "no CUDA device found";
  return n;
}

bool usable_device_or_skip() {
  std::string why;
  if (device_count(&why) > 0) return true;
  std::printf("SKIPPED: %s\n", why.c_str());
  return false;
}

DeviceInfo device_info(int device) {
  cudaDeviceProp p{};
  BERTCC_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  DeviceInfo d;
  d.name = p.name;
  d.cc_major = p.major;
  d.cc_minor = p.minor;
  d.sm_count = p.multiProcessorCount;
  d.total_mem = p.totalGlobalMem;
  return d;
}

void set_device(int device) { BERTCC_CUDA_CHECK(cudaSetDevice(device)); }

namespace {
// bertcc's own device buffers (every cudaMalloc goes through alloc below): the bytes live now and
// their high-water mark, as PyTorch's memory_allocated / max_memory_allocated count its tensors
// (neither counts the CUDA context, the libraries' modules or other processes).
std::mutex g_mem_mu;
std::unordered_map<void*, size_t> g_live;
size_t g_live_bytes = 0, g_peak_bytes = 0;
std::atomic<uint64_t> g_epoch{0};  // memory_epoch: frees so far
std::atomic<uint64_t> g_launches{0};

// This thread's stream (null: the legacy default stream) and whether it is recording a graph.
thread_local cudaStream_t t_stream = nullptr;
thread_local cudaStream_t t_capture_stream = nullptr;  // made on this thread's first capture, kept
thread_local bool t_capturing = false;

void not_capturing(const char* what) {
  BERTCC_CHECK(!t_capturing, "CUDA graph capture: ", what,
               " inside the recorded forward (a graph holds device work only; it would not be replayed)");
}
}  // namespace

cudaStream_t stream() { return t_stream; }
bool capturing() { return t_capturing; }
uint64_t memory_epoch() { return g_epoch.load(); }
uint64_t graph_launches() { return g_launches.load(); }

void graph_capture_begin() {
  BERTCC_CHECK(!t_capturing, "CUDA graph capture: already recording");
  BERTCC_CHECK(!op_profiling(),
               "--cuda-graphs with BERTCC_CUDA_PROFILE=1: the profile times each operation from "
               "the host, a graph replays them as one; profile without --cuda-graphs");
  if (!t_capture_stream) BERTCC_CUDA_CHECK(cudaStreamCreateWithFlags(&t_capture_stream, cudaStreamNonBlocking));
  // thread-local mode: this thread's unsafe calls (synchronous copies, cudaMalloc) are errors
  // while it records, not silently run outside the record; other threads are not affected
  BERTCC_CUDA_CHECK(cudaStreamBeginCapture(t_capture_stream, cudaStreamCaptureModeThreadLocal));
  t_stream = t_capture_stream;
  t_capturing = true;
}

void* graph_capture_end() {
  BERTCC_CHECK(t_capturing, "CUDA graph capture: not recording");
  cudaGraph_t g = nullptr;
  const cudaError_t e = cudaStreamEndCapture(t_capture_stream, &g);
  t_stream = nullptr;
  t_capturing = false;
  BERTCC_CUDA_CHECK(e);
  cudaGraphExec_t exec = nullptr;
  const cudaError_t ie = cudaGraphInstantiate(&exec, g, 0);
  cudaGraphDestroy(g);
  BERTCC_CUDA_CHECK(ie);
  return exec;
}

void graph_capture_abort() {
  if (!t_capturing) return;
  cudaGraph_t g = nullptr;
  (void)cudaStreamEndCapture(t_capture_stream, &g);  // an invalidated capture ends with an error and no graph
  if (g) cudaGraphDestroy(g);
  (void)cudaGetLastError();
  t_stream = nullptr;
  t_capturing = false;
}

void graph_launch(void* exec) {
  not_capturing("a graph launch");
  BERTCC_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec), t_stream));
  ++g_launches;
}

void graph_destroy(void* exec) {  // no throwing: called from destructors
  if (exec) (void)cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec));
}

void* alloc(size_t bytes) {
  void* p = nullptr;
  if (bytes == 0) return nullptr;
  not_capturing("a device allocation");
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    (void)cudaMemGetInfo(&free_b, &total_b);
    fail("GPU memory: cannot allocate ", static_cast<double>(bytes) / (1 << 20), " MiB (", cudaGetErrorString(e), "; ",
         static_cast<double>(free_b) / (1 << 20), " MiB free of ", static_cast<double>(total_b) / (1 << 20),
         "; bertcc's own buffers: ", static_cast<double>(allocated_bytes()) / (1 << 20), " MiB)");
  }
  std::lock_guard<std::mutex> lk(g_mem_mu);
  g_live[p] = bytes;
  g_live_bytes += bytes;
  g_peak_bytes = std::max(g_peak_bytes, g_live_bytes);
  return p;
}

void free(void* p) {
  if (!p) return;
  not_capturing("freeing a device buffer");
  BERTCC_CUDA_CHECK(cudaFree(p));
  ++g_epoch;
  std::lock_guard<std::mutex> lk(g_mem_mu);
  auto it = g_live.find(p);
  if (it == g_live.end()) return;  // not ours: cudaFree has said what it had to
  g_live_bytes -= it->second;
  g_live.erase(it);
}

size_t allocated_bytes() {
  std::lock_guard<std::mutex> lk(g_mem_mu);
  return g_live_bytes;
}
size_t peak_allocated_bytes() {
  std::lock_guard<std::mutex> lk(g_mem_mu);
  return g_peak_bytes;
}
void reset_peak_allocated() {
  std::lock_guard<std::mutex> lk(g_mem_mu);
  g_peak_bytes = g_live_bytes;
}

namespace {
// Host-to-device copies through page-locked staging, as PyTorch's pin_memory=True with
// .to(device, non_blocking=True): the host copies the source into a ring of pinned memory and
// queues the DMA on the thread's stream, then returns without waiting for the device. (cudaMemcpy
// from pageable memory first waits for every queued kernel: each batch upload, and each label or
// row upload in the middle of a step, stopped the host until the GPU had drained, and the GPU then
// idled while the host queued the next kernels.) A region of the ring is written again only once
// the event recorded after its copy has completed. One ring per device (its events are that
// device's); copies above kStageMax (weights, optimizer moments: once per run) stay cudaMemcpy.
constexpr size_t kStageBytes = size_t{32} << 20, kStageMax = size_t{4} << 20, kStageAlign = 256;
struct Staging {
  unsigned char* host = nullptr;
  size_t head = 0;  // where the next region starts (or 0, if it does not fit before the end)
  struct Pending {
    size_t begin, end;
    cudaEvent_t done;
  };
  std::vector<Pending> pending;  // regions whose copies may not have run yet
  std::vector<cudaEvent_t> spare;
};
std::mutex g_stage_mu;
std::unordered_map<int, Staging> g_stage;  // by device; never freed (the process's lifetime)
std::atomic<uint64_t> g_staged_copies{0}, g_stage_waits{0};
}  // namespace

uint64_t staged_copies() { return g_staged_copies.load(); }
uint64_t stage_waits() { return g_stage_waits.load(); }

void copy_to_device(void* dst, const void* src, size_t bytes) {
  not_capturing("a copy from the host");
  if (!bytes) return;
  if (bytes > kStageMax) {
    BERTCC_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
    return;
  }
  int dev = 0;
  BERTCC_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lk(g_stage_mu);
  Staging& s = g_stage[dev];
  if (!s.host) {
    void* h = nullptr;
    const cudaError_t e = cudaHostAlloc(&h, kStageBytes, cudaHostAllocDefault);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      fail("CUDA: cannot allocate ", kStageBytes >> 20, " MiB of page-locked host memory for host-to-device copies (",
           cudaGetErrorString(e), ")");
    }
    s.host = static_cast<unsigned char*>(h);
  }
  const size_t n = (bytes + kStageAlign - 1) / kStageAlign * kStageAlign;
  const size_t at = s.head + n <= kStageBytes ? s.head : 0;
  // Retire the regions whose copies are done; wait for those the new one overlaps. (Copies queued
  // by other threads' streams may finish in any order, so every pending region is looked at.)
  size_t keep = 0;
  for (size_t i = 0; i < s.pending.size(); ++i) {
    Staging::Pending& p = s.pending[i];
    bool done = false;
    if (p.begin < at + n && at < p.end) {
      BERTCC_CUDA_CHECK(cudaEventSynchronize(p.done));
      ++g_stage_waits;
      done = true;
    } else {
      const cudaError_t q = cudaEventQuery(p.done);
      if (q != cudaErrorNotReady) BERTCC_CUDA_CHECK(q);
      done = q == cudaSuccess;
    }
    if (done)
      s.spare.push_back(p.done);
    else
      s.pending[keep++] = p;
  }
  s.pending.resize(keep);
  std::memcpy(s.host + at, src, bytes);
  BERTCC_CUDA_CHECK(cudaMemcpyAsync(dst, s.host + at, bytes, cudaMemcpyHostToDevice, t_stream));
  cudaEvent_t ev = nullptr;
  if (!s.spare.empty()) {
    ev = s.spare.back();
    s.spare.pop_back();
  } else {
    BERTCC_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  }
  BERTCC_CUDA_CHECK(cudaEventRecord(ev, t_stream));
  s.pending.push_back({at, at + n, ev});
  s.head = at + n;
  ++g_staged_copies;
}
void copy_to_host(void* dst, const void* src, size_t bytes) {
  not_capturing("a copy to the host");
  if (bytes) BERTCC_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}
// Device to device and memset: queued on the stream (cudaMemcpy and cudaMemset between device
// buffers do not wait for the host either), so that a capture records them.
void copy_device(void* dst, const void* src, size_t bytes) {
  if (bytes) BERTCC_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, t_stream));
}
void zero(void* p, size_t bytes) {
  if (bytes) BERTCC_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, t_stream));
}
void synchronize() {
  not_capturing("a synchronisation");
  BERTCC_CUDA_CHECK(cudaGetLastError());
  BERTCC_CUDA_CHECK(cudaDeviceSynchronize());
}

bool stream_idle() {
  const cudaError_t q = cudaStreamQuery(t_stream);
  if (q == cudaErrorNotReady) return false;
  BERTCC_CUDA_CHECK(q);
  return true;
}

double memory_used_mb() {
  size_t free_b = 0, total_b = 0;
  BERTCC_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  return static_cast<double>(total_b - free_b) / (1 << 20);
}

namespace {
template <bool BF16>
__device__ inline uint32_t narrow_pair(float lo, float hi) {
  const uint32_t a = BF16 ? f32_to_bf16_bits(lo) : __half_as_ushort(__float2half_rn(lo));
  const uint32_t b = BF16 ? f32_to_bf16_bits(hi) : __half_as_ushort(__float2half_rn(hi));
  return a | (b << 16);
}
// Eight elements per thread: two 16-byte loads and one 16-byte store where both pointers are
// 16-byte aligned (the same bits as one element at a time).
template <bool BF16>
__global__ void narrow_kernel(uint16_t* out, const float* in, int64_t n, bool vec) {
  const int64_t i = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) * 8;
  if (i >= n) return;
  if (vec && i + 8 <= n) {
    const float4 a = reinterpret_cast<const float4*>(in + i)[0], b = reinterpret_cast<const float4*>(in + i)[1];
    uint4 r;
    r.x = narrow_pair<BF16>(a.x, a.y);
    r.y = narrow_pair<BF16>(a.z, a.w);
    r.z = narrow_pair<BF16>(b.x, b.y);
    r.w = narrow_pair<BF16>(b.z, b.w);
    *reinterpret_cast<uint4*>(out + i) = r;
    return;
  }
  for (int64_t k = i; k < n && k < i + 8; ++k) out[k] = static_cast<uint16_t>(narrow_pair<BF16>(in[k], 0.0f));
}
__global__ void widen16_kernel(float* out, const uint16_t* in, int64_t n, bool bf16) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n)
    out[i] = bf16 ? __uint_as_float(static_cast<uint32_t>(in[i]) << 16) : __half2float(__ushort_as_half(in[i]));
}
}  // namespace

void narrow16(uint16_t* out, const float* in, int64_t n, bool bf16) {
  if (n <= 0) return;
  const bool vec = reinterpret_cast<uintptr_t>(out) % 16 == 0 && reinterpret_cast<uintptr_t>(in) % 16 == 0;
  const unsigned grid = grid_for((n + 7) / 8, 256);
  if (bf16)
    narrow_kernel<true><<<grid, 256, 0, stream()>>>(out, in, n, vec);
  else
    narrow_kernel<false><<<grid, 256, 0, stream()>>>(out, in, n, vec);
  BERTCC_CUDA_LAUNCHED("narrow16");
}

void to_bf16(bf16_t* out, const float* in, int64_t n) { narrow16(reinterpret_cast<uint16_t*>(out), in, n, true); }

void widen16(float* out, const uint16_t* in, int64_t n, bool bf16) {
  if (n <= 0) return;
  widen16_kernel<<<grid_for(n, 256), 256, 0, stream()>>>(out, in, n, bf16);
  BERTCC_CUDA_LAUNCHED("widen16");
}

}  // namespace bertcc::cuda
