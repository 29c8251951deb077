// GEMMs through cuBLASLt. Row-major C[M,N] = alpha op(A) op(B) (+ bias) (+ C) is computed as the
// column-major product C^T = op(B)^T op(A)^T, so no operand is copied or transposed. fp32 runs
// CUBLAS_COMPUTE_32F (exact fp32 products; TF32 only with set_allow_tf32); bf16 rounds A and B to
// bf16 in scratch buffers (or takes the caller's A16/B16) and accumulates and writes fp32; fp16
// (NVIDIA's --fp16 recipe; the CPU's emulation rounds the same way) rounds A and B to fp16, round to
// nearest even, and accumulates and writes fp32 (A16/B16, bf16 copies, are not used). The bias
// rides on cuBLASLt's epilogue; if no algorithm offers it for a shape it is added by a kernel.
#include <cublasLt.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <map>
#include <vector>

#include "cuda/common.cuh"
#include "cuda/cuda_kernels.h"
#include "cuda/op_timer.h"

namespace bertcc::cuda {
namespace {

inline void check_lt(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS) fail("cuBLASLt error in ", what, ": status ", static_cast<int>(st));
}

// The largest power of two up to 256 that divides p's address. cuBLASLt's heuristic assumes 256-byte
// operands unless told otherwise, and an algorithm it picks for those fails on a weight that starts
// inside the flat parameter buffer (after the 30522-float MLM bias, say): so it is told.
uint32_t alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t al = 256;
  while (al > 1 && a % al != 0) al >>= 1;
  return al;
}

// What the heuristic's answer depends on; one query per distinct GEMM, not one per call.
struct AlgoKey {
  int64_t v[14];
  uint32_t align[3];
  bool operator<(const AlgoKey& o) const {
    for (int i = 0; i < 14; ++i)
      if (v[i] != o.v[i]) return v[i] < o.v[i];
    for (int i = 0; i < 3; ++i)
      if (align[i] != o.align[i]) return align[i] < o.align[i];
    return false;
  }
};
struct Algo {
  bool found = false;
  cublasLtMatmulAlgo_t algo{};
};

struct Context {
  cublasLtHandle_t lt = nullptr;
  Scratch workspace, a16, b16;
  bool tf32 = false;
  std::map<AlgoKey, Algo> algos;  // cuBLASLt's choice per distinct GEMM
  static constexpr size_t kWorkspace = 32u << 20;
  Context() { check_lt(cublasLtCreate(&lt), "cublasLtCreate"); }
};
Context& ctx() {
  static Context c;  // one per process: bertcc drives one device per process
  return c;
}

__global__ void add_bias(float* C, const float* bias, int64_t M, int64_t N, int64_t ldc) {
  const int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (idx >= M * N) return;
  const int64_t r = idx / N, c = idx % N;
  C[r * ldc + c] += bias[c];
}

// Elements spanned by a (possibly batched) row-major operand of `rows` x `cols` with leading dim ld.
int64_t span(int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t stride) {
  return (batch - 1) * stride + (rows - 1) * ld + cols;
}

struct Layout {
  cublasLtMatrixLayout_t d = nullptr;
  Layout(cudaDataType t, int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t stride) {
    check_lt(cublasLtMatrixLayoutCreate(&d, t, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld),
             "cublasLtMatrixLayoutCreate");
    if (batch > 1) {
      const int32_t bc = static_cast<int32_t>(batch);
      check_lt(cublasLtMatrixLayoutSetAttribute(d, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof bc), "batch count");
      check_lt(cublasLtMatrixLayoutSetAttribute(d, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride),
               "batch stride");
    }
  }
  ~Layout() { cublasLtMatrixLayoutDestroy(d); }
  Layout(const Layout&) = delete;
  Layout& operator=(const Layout&) = delete;
};

// The cuBLASLt description of g: the operation (its transposes, the bias epilogue) and the three
// layouts. cuBLAS's A is our B, its B our A; C and D are the output, of type cd (fp32, or bf16 where
// only the output's rounding is wanted: linear_forward's y16; the bias stays fp32 either way).
struct Problem {
  struct Desc {
    cublasLtMatmulDesc_t d = nullptr;
    explicit Desc(cublasComputeType_t compute) {
      check_lt(cublasLtMatmulDescCreate(&d, compute, CUDA_R_32F), "cublasLtMatmulDescCreate");
    }
    ~Desc() { cublasLtMatmulDescDestroy(d); }
    Desc(const Desc&) = delete;
    Desc& operator=(const Desc&) = delete;
  } desc;
  Layout la, lb, lc;
  Problem(const GemmArgs& g, cudaDataType ab, cublasComputeType_t compute, bool with_bias,
          cudaDataType cd = CUDA_R_32F)
      : desc(compute),
        la(ab, g.trans_b ? g.K : g.N, g.trans_b ? g.N : g.K, g.ldb, g.batch, g.stride_b),
        lb(ab, g.trans_a ? g.M : g.K, g.trans_a ? g.K : g.M, g.lda, g.batch, g.stride_a),
        lc(cd, g.N, g.M, g.ldc, g.batch, g.stride_c) {
    // cuBLAS operand 1 is our B (giving op(B)^T, N x K), operand 2 our A (op(A)^T, K x M).
    const cublasOperation_t ta = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t tb = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    check_lt(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "transa");
    check_lt(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "transb");
    if (with_bias) {
      const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
      const cudaDataType bt = CUDA_R_32F;
      check_lt(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi), "epilogue");
      check_lt(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof g.bias),
               "bias");
      check_lt(cublasLtMatmulDescSetAttribute(desc.d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt),
               "bias type");
    }
  }
  // cuBLASLt's first `n` heuristic answers for operands with these alignments (B, A, C in bytes:
  // cuBLAS's A, B, C and D), best first; how many it gave, 0 when none.
  int heuristics(const uint32_t (&align)[3], int n, cublasLtMatmulHeuristicResult_t* out) const {
    cublasLtMatmulPreference_t pref = nullptr;
    check_lt(cublasLtMatmulPreferenceCreate(&pref), "preference");
    const uint64_t ws = Context::kWorkspace;
    check_lt(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
             "workspace preference");
    const cublasLtMatmulPreferenceAttributes_t which[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; ++i)
      check_lt(cublasLtMatmulPreferenceSetAttribute(pref, which[i], &align[i < 3 ? i : 2], sizeof(uint32_t)),
               "alignment preference");
    int found = 0;
    const cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(ctx().lt, desc.d, la.d, lb.d, lc.d, lc.d, pref, n, out, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    return hs == CUBLAS_STATUS_SUCCESS ? found : 0;
  }
  cublasStatus_t matmul(const GemmArgs& g, const void* A, const void* B, void* C,
                        const cublasLtMatmulAlgo_t* algo) const {
    Context& c = ctx();
    const float alpha = g.alpha, beta = g.accumulate ? 1.0f : 0.0f;
    return cublasLtMatmul(c.lt, desc.d, &alpha, B, la.d, A, lb.d, &beta, C, lc.d, C, lc.d, algo,
                          c.workspace.get(Context::kWorkspace), Context::kWorkspace, stream());
  }
};

// The product into `out` (g.C where null) of type cd. False, with nothing computed, where no
// algorithm takes it with the bias in the epilogue (or with a bf16 output): the caller then
// computes it another way. Without either, no algorithm is an error.
bool run(const GemmArgs& g, const void* A, const void* B, cudaDataType ab, cublasComputeType_t compute,
         bool with_bias, cudaDataType cd = CUDA_R_32F, void* out = nullptr) {
  Context& c = ctx();
  if (!out) out = g.C;
  if (with_bias && alignment(g.bias) < 16) return false;  // the caller adds the bias with a kernel
  const Problem pr(g, ab, compute, with_bias, cd);
  const AlgoKey key{{g.M, g.N, g.K, g.lda, g.ldb, g.ldc, g.batch, g.stride_a, g.stride_b, g.stride_c,
                     (g.trans_a ? 1 : 0) + (g.trans_b ? 2 : 0) + (with_bias ? 4 : 0), static_cast<int64_t>(ab),
                     static_cast<int64_t>(compute), static_cast<int64_t>(cd)},
                    {alignment(B), alignment(A), alignment(out)}};
  auto it = c.algos.find(key);
  if (it == c.algos.end()) {
    cublasLtMatmulHeuristicResult_t heur{};
    Algo a;
    a.found = pr.heuristics(key.align, 1, &heur) > 0;
    a.algo = heur.algo;
    it = c.algos.emplace(key, a).first;
  }
  if (!it->second.found) {
    if (with_bias || cd != CUDA_R_32F) return false;
    fail("cuBLASLt: no algorithm for a ", g.M, "x", g.N, "x", g.K, " GEMM (batch ", g.batch, ")");
  }
  check_lt(pr.matmul(g, A, B, out, &it->second.algo), "cublasLtMatmul");
  return true;
}

}  // namespace

void set_allow_tf32(bool on) { ctx().tf32 = on; }
bool allow_tf32() { return ctx().tf32; }

// g in precision p; with C16 (bf16 only, no accumulation) the output as its bf16 rounding alone,
// written by cuBLASLt (fp32 accumulation and bias, one rounding at the end), or where no algorithm
// writes bf16 with an fp32 bias, computed into fp32 (g.C, or scratch where null) and rounded: the
// rounding of the same sum either way, summation order apart.
static void gemm_out(const GemmArgs& g, Precision p, bf16_t* C16) {
  BERTCC_CHECK(g.bias == nullptr || g.batch == 1, "GEMM on CUDA: a bias with a batched GEMM");
  BERTCC_CHECK(!C16 || (p == Precision::BF16 && !g.accumulate && g.batch == 1),
               "GEMM on CUDA: a bf16 output needs bf16, no accumulation, no batch");
  if (g.M == 0 || g.N == 0) return;
  BERTCC_CHECK(g.K > 0, "GEMM on CUDA: inner dimension 0");
  Context& c = ctx();
  const void *A = g.A, *B = g.B;
  std::optional<OpTimer> cast_timer;
  if (p != Precision::F32) cast_timer.emplace("gemm/cast to 16 bits");
  cudaDataType ab = CUDA_R_32F;
  cublasComputeType_t compute = c.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  if (p == Precision::F16) {
    BERTCC_CHECK(g.A && g.B, "GEMM on CUDA: fp16 needs the fp32 operands (it rounds them itself)");
    ab = CUDA_R_16F;
    compute = CUBLAS_COMPUTE_32F;
    const int64_t na = span(g.trans_a ? g.K : g.M, g.trans_a ? g.M : g.K, g.lda, g.batch, g.stride_a);
    const int64_t nb = span(g.trans_b ? g.N : g.K, g.trans_b ? g.K : g.N, g.ldb, g.batch, g.stride_b);
    auto* a16 = static_cast<uint16_t*>(c.a16.get(static_cast<size_t>(na) * sizeof(uint16_t)));
    auto* b16 = static_cast<uint16_t*>(c.b16.get(static_cast<size_t>(nb) * sizeof(uint16_t)));
    narrow16(a16, g.A, na, /*bf16=*/false);
    narrow16(b16, g.B, nb, /*bf16=*/false);
    A = a16;
    B = b16;
  } else if (p == Precision::BF16) {
    ab = CUDA_R_16BF;
    compute = CUBLAS_COMPUTE_32F;
    // A bf16 weight copy is used in place when 16-byte aligned. Weights start anywhere in the flat
    // buffer (after the joint SQuAD head's 1-element bias, say), and cuBLASLt's kernels for 2- or
    // 4-byte-aligned 16-bit operands are slow where they exist at all: such a weight is rounded
    // again from its fp32 copy into the aligned scratch (the same bf16 values).
    if (g.A16 && (g.A == nullptr || alignment(g.A16) >= 16)) {
      A = g.A16;
    } else {
      const int64_t n = span(g.trans_a ? g.K : g.M, g.trans_a ? g.M : g.K, g.lda, g.batch, g.stride_a);
      auto* a16 = static_cast<bf16_t*>(c.a16.get(static_cast<size_t>(n) * sizeof(bf16_t)));
      to_bf16(a16, g.A, n);
      A = a16;
    }
    if (g.B16 && (g.B == nullptr || alignment(g.B16) >= 16)) {
      B = g.B16;
    } else {
      const int64_t n = span(g.trans_b ? g.N : g.K, g.trans_b ? g.K : g.N, g.ldb, g.batch, g.stride_b);
      auto* b16 = static_cast<bf16_t*>(c.b16.get(static_cast<size_t>(n) * sizeof(bf16_t)));
      to_bf16(b16, g.B, n);
      B = b16;
    }
  }
  cast_timer.reset();
  const bool bias = g.bias != nullptr;
  if (C16) {
    {
      const OpTimer timer("gemm/cuBLASLt bf16 output");
      if (run(g, A, B, ab, compute, bias, CUDA_R_16BF, C16)) return;
    }
    const OpTimer timer("gemm/bf16 output through fp32");
    GemmArgs f = g;
    if (!f.C) {
      static Scratch buf;
      f.C = buf.take<float>(static_cast<size_t>(g.M * g.ldc));
    }
    gemm_out(f, p, nullptr);
    narrow16(reinterpret_cast<uint16_t*>(C16), f.C, g.M * g.ldc, /*bf16=*/true);
    return;
  }
  const OpTimer timer("gemm/cuBLASLt");
  if (!run(g, A, B, ab, compute, bias)) {  // no algorithm with the bias epilogue: add it afterwards
    GemmArgs h = g;
    h.bias = nullptr;
    run(h, A, B, ab, compute, false);
    add_bias<<<grid_for(g.M * g.N, 256), 256, 0, stream()>>>(g.C, g.bias, g.M, g.N, g.ldc);
    BERTCC_CUDA_LAUNCHED("gemm bias");
  }
}

void gemm(const GemmArgs& g, Precision p) { gemm_out(g, p, nullptr); }

double gemm_probe_tflops(int64_t M, int64_t N, int64_t K, Precision p, int iters) {
  // A bare cuBLASLt GEMM on operands already in p's format (no rounding pass timed).
  const bool half = p != Precision::F32;
  const size_t es = half ? 2 : 4;
  const cudaDataType ab = p == Precision::BF16 ? CUDA_R_16BF : p == Precision::F16 ? CUDA_R_16F : CUDA_R_32F;
  const cublasComputeType_t compute = !half && ctx().tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  void* a = alloc(static_cast<size_t>(M * K) * es);
  void* b = alloc(static_cast<size_t>(K * N) * es);
  auto* c = static_cast<float*>(alloc(static_cast<size_t>(M * N) * sizeof(float)));
  BERTCC_CUDA_CHECK(cudaMemset(a, 0x3c, static_cast<size_t>(M * K) * es));  // small finite values
  BERTCC_CUDA_CHECK(cudaMemset(b, 0x3c, static_cast<size_t>(K * N) * es));
  GemmArgs g;
  g.M = M;
  g.N = N;
  g.K = K;
  g.lda = K;
  g.ldb = N;
  g.ldc = N;
  g.C = c;
  cudaEvent_t e0, e1;
  BERTCC_CUDA_CHECK(cudaEventCreate(&e0));
  BERTCC_CUDA_CHECK(cudaEventCreate(&e1));
  run(g, a, b, ab, compute, false);  // warm-up (algorithm choice, workspace)
  float best = 1e30f;
  for (int i = 0; i < iters; ++i) {
    BERTCC_CUDA_CHECK(cudaEventRecord(e0));
    run(g, a, b, ab, compute, false);
    BERTCC_CUDA_CHECK(cudaEventRecord(e1));
    BERTCC_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    BERTCC_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    best = std::min(best, ms);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  free(a);
  free(b);
  free(c);
  return 2.0 * static_cast<double>(M) * N * K / (best * 1e-3) / 1e12;
}

std::vector<double> gemm_algo_ms(const GemmArgs& g, bool bf16_out, int max_algos, int iters) {
  BERTCC_CHECK(g.A16 && g.B16 && g.C && max_algos > 0 && iters > 0, "gemm_algo_ms: bf16 operands and an output");
  const Problem pr(g, CUDA_R_16BF, CUBLAS_COMPUTE_32F, g.bias != nullptr, bf16_out ? CUDA_R_16BF : CUDA_R_32F);
  const uint32_t align[3] = {alignment(g.B16), alignment(g.A16), alignment(g.C)};
  std::vector<cublasLtMatmulHeuristicResult_t> h(static_cast<size_t>(max_algos));
  const int n = pr.heuristics(align, max_algos, h.data());
  cudaEvent_t e0, e1;
  BERTCC_CUDA_CHECK(cudaEventCreate(&e0));
  BERTCC_CUDA_CHECK(cudaEventCreate(&e1));
  std::vector<double> ms;
  for (int i = 0; i < n; ++i) {
    if (pr.matmul(g, g.A16, g.B16, g.C, &h[static_cast<size_t>(i)].algo) != CUBLAS_STATUS_SUCCESS) {  // warm-up
      ms.push_back(-1.0);
      continue;
    }
    BERTCC_CUDA_CHECK(cudaEventRecord(e0));
    for (int k = 0; k < iters; ++k) check_lt(pr.matmul(g, g.A16, g.B16, g.C, &h[static_cast<size_t>(i)].algo), "cublasLtMatmul");
    BERTCC_CUDA_CHECK(cudaEventRecord(e1));
    BERTCC_CUDA_CHECK(cudaEventSynchronize(e1));
    float t = 0;
    BERTCC_CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
    ms.push_back(static_cast<double>(t) / iters);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return ms;
}

void linear_forward(float* y, const float* x, const float* W, const float* b, int64_t M, int64_t N, int64_t K,
                    Precision p, const bf16_t* W16, const bf16_t* x16, bf16_t* keep_x16, bf16_t* y16) {
  GemmArgs g;
  g.B16 = W16;
  if (p == Precision::BF16) {
    if (!x16 && keep_x16 && M * K > 0) {  // the rounding the product needs, into the caller's buffer
      const OpTimer timer("gemm/cast to 16 bits");
      to_bf16(keep_x16, x, M * K);
      x16 = keep_x16;
    }
    g.A16 = x16;
  }
  g.M = M;
  g.N = N;
  g.K = K;
  g.A = x;
  g.lda = K;
  g.B = W;
  g.ldb = K;
  g.trans_b = true;
  g.C = y;
  g.ldc = N;
  g.bias = b;
  gemm_out(g, p, p == Precision::BF16 ? y16 : nullptr);
}

void linear_backward(float* dx, float* dW, float* db, const float* dy, const float* x, const float* W, int64_t M,
                     int64_t N, int64_t K, Precision p, const bf16_t* W16, const bf16_t* dy16, const bf16_t* x16,
                     bool overwrite_dx) {
  if (p != Precision::BF16) dy16 = x16 = nullptr;
  // bf16: dy rounded once for both products (each would otherwise round it itself)
  if (p == Precision::BF16 && !dy16 && dx && dW && M * N > 0) {
    static Scratch buf;
    auto* d = buf.take<bf16_t>(static_cast<size_t>(M * N));
    const OpTimer timer("gemm/cast to 16 bits");
    to_bf16(d, dy, M * N);
    dy16 = d;
  }
  if (dx) {  // dx[M,K] += dy[M,N] @ W[N,K]
    GemmArgs g;
    g.A16 = dy16;
    g.B16 = W16;
    g.M = M;
    g.N = K;
    g.K = N;
    g.A = dy;
    g.lda = N;
    g.B = W;
    g.ldb = K;
    g.C = dx;
    g.ldc = K;
    g.accumulate = !overwrite_dx;  // beta 0: an exact +0 sum written, the bits of adding to zeros
    cuda::gemm(g, p);
  }
  if (dW) {  // dW[N,K] += dy^T[N,M] @ x[M,K]
    GemmArgs g;
    g.M = N;
    g.N = K;
    g.K = M;
    g.A = dy;
    g.A16 = dy16;
    g.lda = N;
    g.trans_a = true;
    g.B = x;
    g.B16 = x16;
    g.ldb = K;
    g.C = dW;
    g.ldc = K;
    g.accumulate = true;
    cuda::gemm(g, p);
  }
  if (db) bias_backward(db, dy, M, N);
}

}  // namespace bertcc::cuda
