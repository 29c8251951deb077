// Device selection, memory and copies for the CUDA kernels.
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <unordered_map>

#include "cuda/common.cuh"
#include "cuda/cuda_kernels.h"

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
}  // namespace

void* alloc(size_t bytes) {
  void* p = nullptr;
  if (bytes == 0) return nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    (void)cudaMemGetInfo(&free_b, &total_b);
    fail("GPU memory: cannot allocate ", static_cast<double>(bytes) / (1 << 20), " MiB (", cudaGetErrorString(e),
         "; ", static_cast<double>(free_b) / (1 << 20), " MiB free of ", static_cast<double>(total_b) / (1 << 20),
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
  BERTCC_CUDA_CHECK(cudaFree(p));
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

void copy_to_device(void* dst, const void* src, size_t bytes) {
  if (bytes) BERTCC_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}
void copy_to_host(void* dst, const void* src, size_t bytes) {
  if (bytes) BERTCC_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}
void copy_device(void* dst, const void* src, size_t bytes) {
  if (bytes) BERTCC_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice));
}
void zero(void* p, size_t bytes) {
  if (bytes) BERTCC_CUDA_CHECK(cudaMemset(p, 0, bytes));
}
void synchronize() {
  BERTCC_CUDA_CHECK(cudaGetLastError());
  BERTCC_CUDA_CHECK(cudaDeviceSynchronize());
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
  for (int64_t k = i; k < n && k < i + 8; ++k)
    out[k] = static_cast<uint16_t>(narrow_pair<BF16>(in[k], 0.0f));
}
__global__ void widen16_kernel(float* out, const uint16_t* in, int64_t n, bool bf16) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = bf16 ? __uint_as_float(static_cast<uint32_t>(in[i]) << 16) : __half2float(__ushort_as_half(in[i]));
}
}  // namespace

void narrow16(uint16_t* out, const float* in, int64_t n, bool bf16) {
  if (n <= 0) return;
  const bool vec = reinterpret_cast<uintptr_t>(out) % 16 == 0 && reinterpret_cast<uintptr_t>(in) % 16 == 0;
  const unsigned grid = grid_for((n + 7) / 8, 256);
  if (bf16) narrow_kernel<true><<<grid, 256>>>(out, in, n, vec);
  else narrow_kernel<false><<<grid, 256>>>(out, in, n, vec);
  BERTCC_CUDA_LAUNCHED("narrow16");
}

void to_bf16(bf16_t* out, const float* in, int64_t n) { narrow16(reinterpret_cast<uint16_t*>(out), in, n, true); }

void widen16(float* out, const uint16_t* in, int64_t n, bool bf16) {
  if (n <= 0) return;
  widen16_kernel<<<grid_for(n, 256), 256>>>(out, in, n, bf16);
  BERTCC_CUDA_LAUNCHED("widen16");
}

}  // namespace bertcc::cuda
