// Runtime: thread count, CPU feature report. The compute backend seam: kernels take a
// `Precision` and raw pointers; today the only backend is the CPU (oneDNN + OpenMP).
#pragma once
#include <string>

namespace bertcc {

void set_threads(int n);  // OpenMP and oneDNN; n <= 0 keeps the default
int threads();

struct CpuReport {
  bool avx512f = false, avx512_bf16 = false, amx_bf16 = false;
  std::string onednn_isa;  // what oneDNN will dispatch to
};
CpuReport cpu_report();
// Whether oneDNN has a bf16 matmul for this CPU (avx512_core and up). Without one (AVX2 only) bf16
// GEMMs are emulated: operands rounded to bf16, then fp32 GEMMs (the same products, fp32 sums).
bool onednn_bf16_matmul();
// Whether oneDNN's fp32 matmul on this CPU gives each output row independently of the row count
// (its brgemm kernels: avx512_core and up). On AVX2 its sgemm does not, and bertcc's fp32 linear
// layers use their own row-invariant kernel instead (kernels/gemm.h, linear_forward_rows).
bool onednn_f32_rows_invariant();
// One line for start-up logs; says plainly when bf16 runs without AMX or without native bf16.
std::string describe_backend(bool bf16_requested);

// Memory this process can still take: the smallest of /proc/meminfo's MemAvailable, the cgroup
// (v2) limit less its usage, and the address-space limit (ulimit -v) less this process's size.
double available_memory_bytes();
// Refuses, before allocating, `bytes` more than available_memory_bytes(): the message names
// `what`, both sizes in GiB and `advice`.
void check_memory(double bytes, const std::string& what, const std::string& advice = "");

}  // namespace bertcc
