#include "bertcc/runtime.h"

#include <cpuid.h>
#include <omp.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>
#include <oneapi/dnnl/dnnl.hpp>
#include <sstream>

#include "bertcc/error.h"
#include "core/settings.h"

namespace bertcc {

void set_threads(int n) {
  if (n > 0) omp_set_num_threads(n);
}

int threads() { return omp_get_max_threads(); }

namespace {
// The number after `key` in a /proc file of "key: value kB" lines, in bytes (-1 if absent).
double proc_kb(const char* path, const std::string& key) {
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key, 0) == 0) {
      std::istringstream in(line.substr(key.size()));
      double kb = -1;
      in >> kb;
      return kb >= 0 ? kb * 1024.0 : -1;
    }
  return -1;
}

double file_number(const char* path) {  // a cgroup file holding a number, or "max" / absent: -1
  std::ifstream f(path);
  std::string s;
  if (!(f >> s) || s == "max") return -1;
  try {
    return std::stod(s);
  } catch (...) {
    return -1;
  }
}
}  // namespace

double available_memory_bytes() {
  double avail = std::numeric_limits<double>::infinity();
  const double m = proc_kb("/proc/meminfo", "MemAvailable:");
  if (m >= 0) avail = m;
  const double limit = file_number("/sys/fs/cgroup/memory.max"), used = file_number("/sys/fs/cgroup/memory.current");
  if (limit >= 0 && used >= 0) avail = std::min(avail, std::max(0.0, limit - used));
  struct rlimit rl;
  if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    const double vm = proc_kb("/proc/self/status", "VmSize:");
    avail = std::min(avail, std::max(0.0, static_cast<double>(rl.rlim_cur) - std::max(vm, 0.0)));
  }
  return avail;
}

void check_memory(double bytes, const std::string& what, const std::string& advice) {
  const double avail = available_memory_bytes();
  if (bytes <= avail) return;
  char buf[160];
  std::snprintf(buf, sizeof buf, "%.2f GiB, but %.2f GiB are available", bytes / 1073741824.0, avail / 1073741824.0);
  fail(what, " would take about ", buf, advice.empty() ? "" : "; ", advice);
}

CpuReport cpu_report() {
  CpuReport r;
  unsigned a, b, c, d;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    r.avx512f = (b >> 16) & 1;
    r.amx_bf16 = (d >> 22) & 1;
  }
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) {
    r.avx_vnni = (a >> 4) & 1;  // (clang 14's __builtin_cpu_supports does not know "avxvnni")
    r.avx512_bf16 = (a >> 5) & 1;
  }
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
    case dnnl::cpu_isa::avx2_vnni:
      r.onednn_isa = "avx2_vnni";
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

bool onednn_bf16_matmul() {
  // Only where the CPU multiplies bf16 natively: on AVX-512 without AVX512-BF16 oneDNN's bf16 matmul is
  // its gemm:jit, whose products for one row take another path than for many (a sequence's bf16
  // result then depended on its batch: bert-base's pooled output alone and in a batch differed),
  // while the emulation (operands rounded to bf16, fp32 products on the fp32 GEMM) keeps a row's bits
  static const bool native = native_bf16(cpu_report());
  if (!native) return false;
  static const bool ok = [] {
    try {
      const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
      using dt = dnnl::memory::data_type;
      const dnnl::memory::desc a({16, 16}, dt::bf16, dnnl::memory::dims{16, 1});
      const dnnl::memory::desc c({16, 16}, dt::f32, dnnl::memory::dims{16, 1});
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, a, c), eng);
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return ok;
}

bool onednn_f32_rows_invariant() {
  static const bool ok = cpu_report().onednn_isa.rfind("avx512_core", 0) == 0;
  return ok;
}

bool native_bf16(const CpuReport& r) {
  return (r.amx_bf16 || r.avx512_bf16) && (r.onednn_isa == "avx512_core_bf16" || r.onednn_isa == "avx512_core_amx");
}

PrecisionChoice choose_precision(const std::string& flag, const CpuReport& cpu, bool gpu) {
  if (flag != "auto") return {parse_precision(flag), ""};
  if (gpu) return {Precision::BF16, "precision auto: bf16 (the GPU default)"};
  if (native_bf16(cpu))
    return {Precision::BF16,
            std::string("precision auto: bf16 (this CPU has ") + (cpu.amx_bf16 ? "AMX-BF16" : "AVX512-BF16") + ")"};
  std::string why = "precision auto: fp32 (";
  if (cpu.amx_bf16 || cpu.avx512_bf16)
    why += "oneDNN is held to " + cpu.onednn_isa + " (ONEDNN_MAX_CPU_ISA), below this CPU's native bf16";
  else
    why += "this CPU has neither AVX512-BF16 nor AMX-BF16: bf16 would be emulated, slower than fp32";
  return {Precision::F32, why + ")"};
}

Precision resolve_precision(const std::string& flag, bool on_host) {
  const PrecisionChoice c = choose_precision(flag, on_host ? cpu_report() : CpuReport{}, !on_host);
  if (!c.why.empty()) std::cerr << c.why << "\n";
  return c.prec;
}

std::string describe_backend(bool bf16) {
  const CpuReport r = cpu_report();
  std::string s = "backend: cpu, oneDNN ISA " + r.onednn_isa + ", " + std::to_string(threads()) + " threads";
  if (bf16) {
    if (native_bf16(r))
      s += r.onednn_isa == "avx512_core_amx" ? "; bf16 GEMMs on AMX-BF16" : "; bf16 GEMMs on AVX512-BF16 (no AMX)";
    else
      s += "; WARNING: this CPU (oneDNN ISA " + r.onednn_isa +
           ") has neither AMX-BF16 nor AVX512-BF16: bf16 is emulated (operands rounded to bf16, fp32 GEMMs), "
           "slower than fp32: pass --precision fp32 (or leave --precision out: auto picks fp32 here)";
  }
  const std::string changed = describe_settings(settings());
  if (!changed.empty()) s += "; settings: " + changed;
  return s;
}

std::string int8_kernel_name(const CpuReport& r) {
  const bool vnni = r.onednn_isa == "avx512_core_vnni" || r.onednn_isa == "avx512_core_bf16";
  // oneDNN 2.6's int8 matmul writes every int32 sum out for a separate rescale pass (VNNI), or is
  // a gemm that repacks its weights every call (no VNNI): bertcc's own kernels take the layers there
  // (kernels/gemm_int8_rows.cpp, pack_int8_weight)
  return r.onednn_isa == "avx512_core_amx" ? "oneDNN on AMX-INT8"
         : vnni                            ? "bertcc's AVX512-VNNI int8 kernel"
         : r.onednn_isa == "avx2_vnni"     ? "bertcc's AVX-VNNI int8 kernel"
         : r.onednn_isa == "avx512_core"   ? "no VNNI: bertcc's AVX-512 int8 kernel"
         : r.onednn_isa == "avx2"          ? "no VNNI: bertcc's AVX2 int8 kernel"
                                           : "no VNNI nor AVX2: oneDNN's gemm";
}

int int8_activation_bits(int requested, const CpuReport& cpu) {
  BERTCC_CHECK(int8_activation_bits_valid(requested), "int8 activation bits: ", requested, " is not 7, 8 or 0 (auto)");
  if (requested != 0) return requested;
  return cpu.onednn_isa == "avx2" ? 7 : 8;
}

int int8_export_activation_bits() {
  const int requested = settings().int8_activation_bits;
  return requested != 0 ? requested : 8;
}

int int8_activation_bits() {
  static const int automatic = int8_activation_bits(0, cpu_report());  // (cpuid once: every forward asks)
  const int requested = settings().int8_activation_bits;
  return requested != 0 ? requested : automatic;
}

std::string describe_backend(Precision p) {
  std::string s = describe_backend(p == Precision::BF16);
  if (p != Precision::I8) return s;
  const int bits = int8_activation_bits();
  const std::string why = settings().int8_activation_bits != 0 ? ""
                          : bits == 7 ? " [auto: no VNNI nor AVX-512, where 7 bits multiply faster; "
                                        "--int8-activation-bits 8 for 8]"
                                      : "";
  const std::string words = settings().int8_fp32_embeddings ? "the word embeddings in fp32 (--int8-fp32-embeddings), "
                                                            : "the word embeddings (8-bit rows); ";
  return s + "; int8: the encoder's linear layers (7-bit weights per output channel, " + std::to_string(bits) +
         "-bit activations per row" + why + ", " + int8_kernel_name(cpu_report()) +
         "); the attention's two products (8-bit q and probabilities, 7-bit k and v, bertcc's own int8 kernel); " +
         words +
         "the position and token-type embeddings, the softmax's scores, LayerNorm, GELU, pooler and task heads in "
         "fp32";
}

}  // namespace bertcc
