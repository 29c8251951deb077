// Runtime: thread count, CPU feature report. The compute backend seam: kernels take a
// `Precision` and raw pointers; today the only backend is the CPU (oneDNN + OpenMP).
#pragma once
#include <string>

#include "bertcc/dtype.h"

namespace bertcc {

void set_threads(int n);  // OpenMP and oneDNN; n <= 0 keeps the default
int threads();

struct CpuReport {
  bool avx512f = false, avx512_bf16 = false, amx_bf16 = false, avx_vnni = false;
  std::string onednn_isa;  // what oneDNN will dispatch to
};
CpuReport cpu_report();
// Whether bf16 GEMMs run on oneDNN's bf16 matmul: where the CPU multiplies bf16 natively
// (native_bf16: AVX512-BF16 or AMX-BF16). Elsewhere bf16 GEMMs are emulated: operands rounded to
// bf16, then fp32 GEMMs (the same products, fp32 sums), which keep a row's bits whatever the batch
// (oneDNN's bf16 gemm:jit on AVX-512 without AVX512-BF16 did not).
bool onednn_bf16_matmul();
// Whether oneDNN's fp32 matmul on this CPU gives each output row independently of the row count
// (its brgemm kernels: avx512_core and up). On AVX2 its sgemm does not, and bertcc's fp32 linear
// layers use their own row-invariant kernel instead (kernels/gemm.h, linear_forward_rows).
bool onednn_f32_rows_invariant();
// One line for start-up logs; says plainly when bf16 runs without AMX or without native bf16.
std::string describe_backend(bool bf16_requested);
// The same for a run in precision p (int8: what is quantized, on which instructions).
std::string describe_backend(Precision p);

// Whether this CPU multiplies bf16 natively where oneDNN computes (AMX-BF16 or AVX512-BF16, and
// oneDNN dispatching to them: ONEDNN_MAX_CPU_ISA may hold it below).
bool native_bf16(const CpuReport& cpu);
// What runs int8 linear layers on this CPU, for the start-up line: oneDNN's blocked kernels on
// AMX-INT8, bertcc's own AVX512-VNNI kernel (its rescale and row epilogues fused), and where
// oneDNN 2.6 has only a gemm that repacks its weights every call bertcc's own AVX-VNNI kernel
// (AVX2-VNNI), AVX-512 kernel (AVX-512 without VNNI) or AVX2 kernel. A pure function of the report.
std::string int8_kernel_name(const CpuReport& cpu);
// The bits int8's linear layers quantize their inputs to (--int8-activation-bits): `requested` 7 or
// 8 as given; 0 (auto) 7 where bertcc's int8 kernel is its AVX2 one (oneDNN ISA avx2: no VNNI, no
// AVX-512), whose 16-bit sums then take two k-quads at a time (about 1.2x its products), 8
// elsewhere, where 7 would buy nothing. A pure function of the report.
int int8_activation_bits(int requested, const CpuReport& cpu);
// This process's: the flag's (settings) or auto's on this CPU.
int int8_activation_bits();
// An ONNX export's (export_onnx): the flag's, and 8 for auto whatever this CPU (the file runs
// elsewhere; ONNX Runtime's quantize_dynamic default).
int int8_export_activation_bits();
// The bound of those bits' symmetric values: 127 for 8, 63 for 7 (kernels/gemm_int8.h).
inline int int8_activation_max(int bits) { return bits == 7 ? 63 : 127; }
// --precision's value for a run: "auto" (every command's default) is bf16 on a GPU (its default)
// and on a CPU with native bf16, fp32 on other CPUs, where bf16 is emulated and slower than fp32;
// anything else is parse_precision's. `why`: the choice for the start-up line ("precision auto:
// fp32 (...)"), empty when the flag named a precision. A pure function of the report (tested with
// made-up ones).
struct PrecisionChoice {
  Precision prec = Precision::F32;
  std::string why;
};
PrecisionChoice choose_precision(const std::string& flag, const CpuReport& cpu, bool gpu);
// choose_precision on this CPU, its start-up line on stderr when auto chose (on_host: the CPU
// computes; else a GPU)
Precision resolve_precision(const std::string& flag, bool on_host);

// Memory this process can still take: the smallest of /proc/meminfo's MemAvailable, the cgroup
// (v2) limit less its usage, and the address-space limit (ulimit -v) less this process's size.
double available_memory_bytes();
// Refuses, before allocating, `bytes` more than available_memory_bytes(): the message names
// `what`, both sizes in GiB and `advice`.
void check_memory(double bytes, const std::string& what, const std::string& advice = "");

}  // namespace bertcc
