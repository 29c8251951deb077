// Tuned GEMMs: cuBLASLt's candidates for each GEMM the run meets timed once on the
// device, the fastest kept per device and library version in a file that a run loads
// (BERTCC_GEMM_TUNING=FILE) and a tuning run writes (and BERTCC_GEMM_TUNE=1). This header's first
// half is host code alone (the file, its key, the environment's rules: gemm_tuning.cpp, checked
// without a GPU by tests/test_gemm_tuning.cpp); gemm.cu times the candidates and uses the table.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <string>

namespace bertcc::cuda::gemm_tuning {

// What a file's algorithms are valid for: the device and the library that numbered them, and the
// workspace they were allowed.
struct Device {
  std::string name;
  int cc_major = 0, cc_minor = 0, sm_count = 0;
  int64_t cublaslt_version = 0;
  int64_t workspace_bytes = 0;
  bool operator==(const Device& o) const;
  bool operator!=(const Device& o) const { return !(*this == o); }
  // "NVIDIA H200 (sm_90, 132 SMs), cuBLASLt 130100, workspace 32 MiB"
  std::string describe() const;
};

// A GEMM as gemm.cu hands it to cuBLASLt, in bertcc's row-major terms (C[M,N] = op(A) op(B), with
// beta 1 where `accumulate`): every field the heuristic's answer or an algorithm's validity depends on.
struct Shape {
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0, batch = 1, stride_a = 0, stride_b = 0, stride_c = 0;
  bool trans_a = false, trans_b = false, accumulate = false;
  std::string ab = "bf16";                               // A and B: f32, bf16, f16
  std::string compute = "32F";                           // 32F, 32F_FAST_TF32
  std::string out = "f32";                               // C and D: f32, bf16
  std::string epilogue = "none";                         // none, bias
  std::string bias = "none";                             // the bias's type: none, f32
  uint32_t align_a = 256, align_b = 256, align_c = 256;  // bytes, the operands' addresses
  bool operator<(const Shape& o) const;
  bool operator==(const Shape& o) const;
  // "bf16 M 8192 N 3072 K 1024, B transposed, bias, f32 output"
  std::string describe() const;
  double flops() const {
    return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) * static_cast<double>(batch);
  }
};

// The winner for one Shape.
struct Choice {
  std::array<uint64_t, 8> algo{};  // cublasLtMatmulAlgo_t's bytes
  int rank = 0;                    // its place among the heuristic's answers (0: the first)
  int candidates = 0;              // answers the heuristic gave (and were tried)
  int rejected = 0;                // of those: failed to run, or disagreed with the first answer
  double ms = 0;                   // its median time
  double first_ms = 0;             // the first answer's median time (the mean of two timings)
  double spread = 0;               // those two timings' relative difference: the noise
  std::string info;                // for readers: cuBLASLt's algorithm id, tile, split-K
  bool operator==(const Choice& o) const;
};

struct Table {
  Device device;
  std::map<Shape, Choice> entries;
  std::string to_json() const;
  // `text`, read from `file` (named in every error, with the field at fault).
  static Table from_json(const std::string& text, const std::string& file);
  static Table load(const std::string& file);
  void save(const std::string& file) const;  // temporary file, fsync, rename
};

// What a run does, from BERTCC_GEMM_TUNING (file: null or empty for none) and BERTCC_GEMM_TUNE
// (null, "", "0" or "1") on the device `here`: refuses what cannot be meant (tuning without a file,
// a missing file to load, a bad file, tuning into another device's file).
struct Plan {
  bool use = false;   // look each GEMM up in `table`
  bool tune = false;  // time each GEMM not in it, add it, save `table` to `file`
  std::string file;
  Table table;
  std::string message;  // the start-up line (empty: nothing to say)
};
Plan plan(const char* file, const char* tune, const Device& here);

// Tolerance of a candidate against the first answer: max |x - ref| / max |ref| over the output.
// Candidates differ in summation order (split-K, tile depth); a 16-bit output is rounded after.
double tolerance(const std::string& out);

}  // namespace bertcc::cuda::gemm_tuning

// ---- gemm.cu's side (needs a GPU) ----
namespace bertcc::cuda {
// Instead of the environment (bertcc_cuda_gemm_bench --tune): before the first GEMM.
void configure_gemm_tuning(const std::string& file, bool tune);
// The last GEMM run: its description and where its algorithm came from ("heuristic", "file",
// "tuned"); `choice` is set for the last two. Only while tuning or a file is in use.
struct LastGemm {
  std::string source;
  gemm_tuning::Shape shape;
  const gemm_tuning::Choice* choice = nullptr;
};
LastGemm last_gemm();
}  // namespace bertcc::cuda
