#include "bertcc/runtime.h"

#include <cpuid.h>
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>

namespace bertcc {

void set_threads(int n) {
  if (n > 0) omp_set_num_threads(n);
}

int threads() { return omp_get_max_threads(); }

CpuReport cpu_report() {
  CpuReport r;
  unsigned a, b, c, d;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    r.avx512f = (b >> 16) & 1;
    r.amx_bf16 = (d >> 22) & 1;
  }
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) r.avx512_bf16 = (a >> 5) & 1;
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::avx512_core_amx:
      r.onednn_isa = "avx512_core_amx";
      break;
    case dnnl::cpu_isa::avx512_core_bf16:
      r.onednn_isa = "avx512_core_bf16";
      break;
    case dnnl::cpu_isa::avx512_core_vnni:
      r.onednn_isa = "avx512_core_vnni";
      break;
    case dnnl::cpu_isa::avx512_core:
      r.onednn_isa = "avx512_core";
      break;
    case dnnl::cpu_isa::avx2:
      r.onednn_isa = "avx2";
      break;
    default:
      r.onednn_isa = "other";
      break;
  }
  return r;
}

std::string describe_backend(bool bf16) {
  const CpuReport r = cpu_report();
  std::string s = "backend: cpu, oneDNN ISA " + r.onednn_isa + ", " + std::to_string(threads()) + " threads";
  if (bf16) {
    if (r.amx_bf16)
      s += "; bf16 GEMMs on AMX-BF16";
    else if (r.avx512_bf16)
      s += "; bf16 GEMMs on AVX512-BF16 (this CPU has no AMX)";
    else
      s += "; WARNING: this CPU has neither AMX-BF16 nor AVX512-BF16, bf16 GEMMs are emulated and slow";
  }
  return s;
}

}  // namespace bertcc
