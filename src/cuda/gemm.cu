// GEMMs through cuBLASLt. Row-major C[M,N] = alpha op(A) op(B) (+ bias) (+ C) is computed as the
// column-major product C^T = op(B)^T op(A)^T, so no operand is copied or transposed. fp32 runs
// CUBLAS_COMPUTE_32F (exact fp32 products; TF32 only with set_allow_tf32); bf16 rounds A and B to
// bf16 in scratch buffers (or takes the caller's A16/B16) and accumulates and writes fp32; fp16
// (NVIDIA's --fp16 recipe; the CPU's emulation rounds the same way) rounds A and B to fp16, round to
// nearest even, and accumulates and writes fp32 (A16/B16, bf16 copies, are not used). The bias
// rides on cuBLASLt's epilogue; if no algorithm offers it for a shape it is added by a kernel.
// The algorithm is cuBLASLt's heuristic's first answer, or with BERTCC_GEMM_TUNING the tuned one
// (gemm_tuning.h: loaded from the file, or timed here among 16 answers with BERTCC_GEMM_TUNE=1).
#include <cublasLt.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/settings.h"
#include "cuda/common.cuh"
#include "cuda/cuda_kernels.h"
#include "cuda/gemm_tuning.h"
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
  // while tuning or with a file: the GEMM's description, where the algorithm came from and its entry
  gemm_tuning::Shape shape;
  const char* source = "heuristic";
  const gemm_tuning::Choice* choice = nullptr;
};

struct Context {
  cublasLtHandle_t lt = nullptr;
  Scratch workspace, a16, b16;
  bool tf32 = false;
  std::map<AlgoKey, Algo> algos;  // cuBLASLt's choice per distinct GEMM
  // NVIDIA's advice for Hopper (and enough elsewhere); part of a tuning file's key
  static constexpr size_t kWorkspace = 32u << 20;
  gemm_tuning::Plan tuning;  // read at the first GEMM (the device is set by then)
  bool tuning_read = false;
  int from_file = 0, tuned = 0, missing = 0;  // GEMMs (distinct) by where their algorithm came from
  const Algo* last = nullptr;
  Context() { check_lt(cublasLtCreate(&lt), "cublasLtCreate"); }
  ~Context() {  // host only: what the file did for this run
    if (!tuning.use) return;
    std::fprintf(stderr,
                 "GEMM tuning: %d GEMMs ran with %s's algorithms, %d newly tuned, %d not in it (the heuristic's)\n",
                 from_file, tuning.file.c_str(), tuned, missing);
  }
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
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
  Problem(const GemmArgs& g, cudaDataType ab, cublasComputeType_t compute, bool with_bias, cudaDataType cd = CUDA_R_32F)
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
    const cublasStatus_t hs =
        cublasLtMatmulAlgoGetHeuristic(ctx().lt, desc.d, la.d, lb.d, lc.d, lc.d, pref, n, out, &found);
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

// ---- tuning (gemm_tuning.h) ----

gemm_tuning::Device this_device() {
  int dev = 0;
  BERTCC_CUDA_CHECK(cudaGetDevice(&dev));
  const DeviceInfo i = device_info(dev);
  gemm_tuning::Device d;
  d.name = i.name;
  d.cc_major = i.cc_major;
  d.cc_minor = i.cc_minor;
  d.sm_count = i.sm_count;
  d.cublaslt_version = static_cast<int64_t>(cublasLtGetVersion());
  d.workspace_bytes = static_cast<int64_t>(Context::kWorkspace);
  return d;
}

void say_plan(const gemm_tuning::Plan& p) {
  if (!p.message.empty()) std::fprintf(stderr, "%s\n", p.message.c_str());
}

// BERTCC_GEMM_TUNING / BERTCC_GEMM_TUNE, once. Neither set: nothing is asked of the device.
void read_tuning(Context& c) {
  if (c.tuning_read) return;
  const RuntimeSettings& s = settings();
  if (!s.gemm_tuning.empty() || s.gemm_tune) {
    c.tuning = gemm_tuning::plan(s.gemm_tuning.c_str(), s.gemm_tune ? "1" : "0", this_device());
    say_plan(c.tuning);
  }
  c.tuning_read = true;
}

const char* type_name(cudaDataType t) {
  switch (t) {
    case CUDA_R_32F:
      return "f32";
    case CUDA_R_16BF:
      return "bf16";
    case CUDA_R_16F:
      return "f16";
    default:
      fail("GEMM tuning: data type ", static_cast<int>(t), " has no name");
  }
}

gemm_tuning::Shape shape_of(const GemmArgs& g, const AlgoKey& key, cudaDataType ab, cublasComputeType_t compute,
                            bool with_bias, cudaDataType cd) {
  gemm_tuning::Shape s;
  s.m = g.M, s.n = g.N, s.k = g.K, s.lda = g.lda, s.ldb = g.ldb, s.ldc = g.ldc;
  s.batch = g.batch, s.stride_a = g.stride_a, s.stride_b = g.stride_b, s.stride_c = g.stride_c;
  s.trans_a = g.trans_a, s.trans_b = g.trans_b, s.accumulate = g.accumulate;
  s.ab = type_name(ab);
  BERTCC_CHECK(compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_FAST_TF32, "GEMM tuning: compute type ",
               static_cast<int>(compute), " has no name");
  s.compute = compute == CUBLAS_COMPUTE_32F ? "32F" : "32F_FAST_TF32";
  s.out = type_name(cd);
  s.epilogue = with_bias ? "bias" : "none";
  s.bias = with_bias ? "f32" : "none";
  s.align_a = key.align[1], s.align_b = key.align[0], s.align_c = key.align[2];
  return s;
}

// For readers of the file: the algorithm's id and configuration.
std::string algo_info(const cublasLtMatmulAlgo_t& a) {
  int32_t id = 0, splitk = 1;
  uint32_t tile = 0, stages = 0, reduction = 0, swizzle = 0;
  size_t w = 0;
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &w);
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &w);
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, &w);
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof splitk, &w);
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &reduction, sizeof reduction, &w);
  cublasLtMatmulAlgoConfigGetAttribute(&a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swizzle, sizeof swizzle, &w);
  return "algo " + std::to_string(id) + ", tile " + std::to_string(tile) + ", stages " + std::to_string(stages) +
         ", split-K " + std::to_string(splitk) + ", reduction " + std::to_string(reduction) + ", swizzle " +
         std::to_string(swizzle);
}

// An output against a reference of the same layout: the largest |x - ref| and |ref| over pairs
// both finite, the pairs where one is finite and the other not, non-finite references, and the
// elements whose bits differ. One atomic per warp.
struct Diff {
  unsigned int max_diff, max_ref;  // bits of non-negative floats (ordered as integers)
  unsigned long long finite_mismatch, ref_nonfinite, bits_differ;
};

template <bool kBf16>
__global__ void compare_outputs(const void* x, const void* ref, int64_t M, int64_t N, int64_t ld, int64_t batch,
                                int64_t stride, Diff* d) {
  float md = 0, mr = 0;
  unsigned fm = 0, rn = 0, bd = 0;
  const int64_t total = batch * M * N;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = i / (M * N), r = i / N % M, col = i % N, off = b * stride + r * ld + col;
    float xv, rv;
    bool same;
    if constexpr (kBf16) {
      const uint16_t xb = static_cast<const uint16_t*>(x)[off], rb = static_cast<const uint16_t*>(ref)[off];
      xv = bf16_bits_to_f32(xb), rv = bf16_bits_to_f32(rb), same = xb == rb;
    } else {
      xv = static_cast<const float*>(x)[off], rv = static_cast<const float*>(ref)[off];
      same = __float_as_uint(xv) == __float_as_uint(rv);
    }
    bd += same ? 0u : 1u;
    const bool fx = isfinite(xv), fr = isfinite(rv);
    rn += fr ? 0u : 1u;
    if (fx != fr) {
      ++fm;
    } else if (fx) {
      md = fmaxf(md, fabsf(xv - rv));
      mr = fmaxf(mr, fabsf(rv));
    }
  }
  const unsigned full = 0xffffffffu;
  const unsigned wmd = __reduce_max_sync(full, __float_as_uint(md)), wmr = __reduce_max_sync(full, __float_as_uint(mr));
  const unsigned wfm = __reduce_add_sync(full, fm), wrn = __reduce_add_sync(full, rn),
                 wbd = __reduce_add_sync(full, bd);
  if ((threadIdx.x & 31) == 0) {
    atomicMax(&d->max_diff, wmd);
    atomicMax(&d->max_ref, wmr);
    atomicAdd(&d->finite_mismatch, static_cast<unsigned long long>(wfm));
    atomicAdd(&d->ref_nonfinite, static_cast<unsigned long long>(wrn));
    atomicAdd(&d->bits_differ, static_cast<unsigned long long>(wbd));
  }
}

// Device buffers freed on every way out.
struct Buffers {
  std::vector<void*> p;
  void* add(size_t bytes) {
    p.push_back(nullptr);
    p.back() = alloc(bytes);
    return p.back();
  }
  ~Buffers() {
    for (void* q : p) try {
        cuda::free(q);
      } catch (const Error&) {  // unwinding already, or the next CUDA call says it
      }
  }
};

constexpr int kTuneCandidates = 16, kTuneMaxIters = 100;
constexpr double kTuneBudgetMs = 8;  // timed calls per answer: about this long, 5 to kTuneMaxIters calls

// What tune() runs cuBLASLt's answers for g with: scratch outputs (`out` is only read, where
// accumulating), a device-side comparison and timing events.
struct Trial {
  const Problem& pr;
  const GemmArgs& g;
  const void* A;
  const void* B;
  const void* out;
  const std::vector<cublasLtMatmulHeuristicResult_t>& h;
  const bool b16;
  const size_t bytes;
  Buffers buf;
  void* ref = buf.add(bytes);
  void* work = buf.add(bytes);
  void* again = buf.add(bytes);
  Diff* dd = static_cast<Diff*>(buf.add(sizeof(Diff)));
  std::vector<cudaEvent_t> ev;

  Trial(const Problem& pr_, const GemmArgs& g_, const void* A_, const void* B_, const void* out_,
        const std::vector<cublasLtMatmulHeuristicResult_t>& h_, cudaDataType cd)
      : pr(pr_),
        g(g_),
        A(A_),
        B(B_),
        out(out_),
        h(h_),
        b16(cd == CUDA_R_16BF),
        bytes(static_cast<size_t>(span(g.M, g.N, g.ldc, g.batch, g.stride_c)) * (b16 ? 2 : 4)) {
    ev.resize(kTuneMaxIters + 1);
    for (auto& e : ev) BERTCC_CUDA_CHECK(cudaEventCreate(&e));
  }
  ~Trial() {
    for (auto x : ev) cudaEventDestroy(x);
  }
  Trial(const Trial&) = delete;
  Trial& operator=(const Trial&) = delete;

  // an output's starting contents: C's where accumulating, else NaN (every element must be written)
  void prepare(void* p) {
    if (g.accumulate)
      BERTCC_CUDA_CHECK(cudaMemcpyAsync(p, out, bytes, cudaMemcpyDeviceToDevice, stream()));
    else
      BERTCC_CUDA_CHECK(cudaMemsetAsync(p, 0xff, bytes, stream()));
  }
  cublasStatus_t launch(int i, void* p) { return pr.matmul(g, A, B, p, &h[static_cast<size_t>(i)].algo); }
  Diff compare(const void* x, const void* r) {
    BERTCC_CUDA_CHECK(cudaMemsetAsync(dd, 0, sizeof(Diff), stream()));
    if (b16)
      compare_outputs<true><<<1024, 256, 0, stream()>>>(x, r, g.M, g.N, g.ldc, g.batch, g.stride_c, dd);
    else
      compare_outputs<false><<<1024, 256, 0, stream()>>>(x, r, g.M, g.N, g.ldc, g.batch, g.stride_c, dd);
    BERTCC_CUDA_LAUNCHED("GEMM tuning: compare");
    Diff d{};
    BERTCC_CUDA_CHECK(cudaMemcpyAsync(&d, dd, sizeof d, cudaMemcpyDeviceToHost, stream()));
    BERTCC_CUDA_CHECK(cudaStreamSynchronize(stream()));
    return d;
  }
  double median_ms(int i, int iters) {
    for (int k = 0; k < iters; ++k) {
      BERTCC_CUDA_CHECK(cudaEventRecord(ev[static_cast<size_t>(k)], stream()));
      check_lt(launch(i, work), "cublasLtMatmul (tuning)");
    }
    BERTCC_CUDA_CHECK(cudaEventRecord(ev[static_cast<size_t>(iters)], stream()));
    BERTCC_CUDA_CHECK(cudaEventSynchronize(ev[static_cast<size_t>(iters)]));
    std::vector<float> t(static_cast<size_t>(iters));
    for (int k = 0; k < iters; ++k)
      BERTCC_CUDA_CHECK(
          cudaEventElapsedTime(&t[static_cast<size_t>(k)], ev[static_cast<size_t>(k)], ev[static_cast<size_t>(k + 1)]));
    std::nth_element(t.begin(), t.begin() + iters / 2, t.end());
    return static_cast<double>(t[static_cast<size_t>(iters / 2)]);
  }
  double time_answer(int i) {
    for (int k = 0; k < 2; ++k) check_lt(launch(i, work), "cublasLtMatmul (tuning warm-up)");
    const double est = std::max(median_ms(i, 3), 1e-3);
    return median_ms(i, std::clamp(static_cast<int>(kTuneBudgetMs / est), 5, kTuneMaxIters));
  }
};

// The timed answer `best` of n (ms: each answer's time, -1 where not timed) against the first
// answer's timing noise: a win inside it (at least 1 %) keeps the first. The choice is added to
// the table and the file saved.
Algo keep_choice(Trial& t, int n, int best, int rejected, const std::vector<double>& ms, const std::string& what,
                 Algo a) {
  Context& c = ctx();
  gemm_tuning::Choice ch;
  ch.candidates = n;
  ch.rejected = rejected;
  if (ms[0] > 0) {  // the first answer again: the timing noise
    const double t2 = t.time_answer(0);
    ch.first_ms = (ms[0] + t2) / 2;
    ch.spread = std::fabs(ms[0] - t2) / std::min(ms[0], t2);
    if (best != 0 && ms[static_cast<size_t>(best)] >= ch.first_ms * (1 - std::max(0.01, 2 * ch.spread))) best = 0;
  }
  ch.rank = best;
  ch.ms = best == 0 && ms[0] > 0 ? ch.first_ms : ms[static_cast<size_t>(best)];
  const cublasLtMatmulAlgo_t& win = t.h[static_cast<size_t>(best)].algo;
  static_assert(sizeof win == sizeof ch.algo, "cublasLtMatmulAlgo_t is 8 uint64");
  std::memcpy(ch.algo.data(), &win, sizeof win);
  ch.info = algo_info(win);
  std::fprintf(stderr,
               "GEMM tuning: %s: answer %d of %d (%s), %.4f ms against the first answer's %.4f (noise %.1f %%)%s\n",
               what.c_str(), best, n, ch.info.c_str(), ch.ms, ch.first_ms, 100 * ch.spread,
               rejected ? (", " + std::to_string(rejected) + " rejected").c_str() : "");
  auto& entries = c.tuning.table.entries;
  entries.erase(a.shape);
  const auto it = entries.emplace(a.shape, ch).first;
  c.tuning.table.save(c.tuning.file);
  ++c.tuned;
  a.found = true;
  a.algo = win;
  a.source = "tuned";
  a.choice = &it->second;
  return a;
}

// Times cuBLASLt's first 16 answers for g on its real operands (outputs into scratch: `out` is
// only read, where accumulating) and keeps the fastest that agrees with the first answer (within
// gemm_tuning::tolerance) and gives the same bits twice (keep_choice: unless inside the first
// answer's timing noise).
Algo tune(const Problem& pr, const GemmArgs& g, const void* A, const void* B, void* out, cudaDataType cd,
          const AlgoKey& key, Algo a) {
  std::vector<cublasLtMatmulHeuristicResult_t> h(kTuneCandidates);
  const int n = pr.heuristics(key.align, kTuneCandidates, h.data());
  if (n == 0) return a;  // none: as without tuning
  Trial t(pr, g, A, B, out, h, cd);
  const std::string what = a.shape.describe();
  const double tol = gemm_tuning::tolerance(a.shape.out);
  int ref_i = -1, best = -1, rejected = 0;
  std::vector<double> ms(static_cast<size_t>(n), -1.0);
  for (int i = 0; i < n; ++i) {
    t.prepare(t.work);
    cublasStatus_t st = t.launch(i, t.work);
    if (st == CUBLAS_STATUS_SUCCESS) {
      t.prepare(t.again);
      st = t.launch(i, t.again);
    }
    if (st != CUBLAS_STATUS_SUCCESS) {
      ++rejected;
      std::fprintf(stderr, "GEMM tuning: %s: answer %d did not run (status %d)\n", what.c_str(), i,
                   static_cast<int>(st));
      continue;
    }
    if (ref_i < 0) {
      ref_i = i;
      BERTCC_CUDA_CHECK(cudaMemcpyAsync(t.ref, t.work, t.bytes, cudaMemcpyDeviceToDevice, stream()));
    }
    const Diff rep = t.compare(t.again, t.work);
    const Diff d = t.compare(t.work, t.ref);
    if (i == ref_i && d.ref_nonfinite > 0) {  // nothing to check the others against
      std::fprintf(stderr,
                   "GEMM tuning: %s: the first answer's output has %llu non-finite elements (inputs, or unwritten): "
                   "not tuned, the heuristic's first answer\n",
                   what.c_str(), d.ref_nonfinite);
      a.found = true;
      a.algo = h[static_cast<size_t>(i)].algo;
      return a;
    }
    const double err =
        d.max_ref ? static_cast<double>(__builtin_bit_cast(float, d.max_diff)) / __builtin_bit_cast(float, d.max_ref)
                  : (d.max_diff ? INFINITY : 0.0);
    if (rep.bits_differ > 0 || d.finite_mismatch > 0 || !(err <= tol)) {
      ++rejected;
      std::fprintf(stderr,
                   "GEMM tuning: %s: answer %d rejected (%llu elements differ between two runs; against the first "
                   "answer: %llu finite/non-finite mismatches, max |x - ref| / max |ref| %.3g, tolerance %.3g)\n",
                   what.c_str(), i, rep.bits_differ, d.finite_mismatch, err, tol);
      continue;
    }
    ms[static_cast<size_t>(i)] = t.time_answer(i);
    if (best < 0 || ms[static_cast<size_t>(i)] < ms[static_cast<size_t>(best)]) best = i;
  }
  if (best < 0) {  // nothing ran: the error today's path gives, or its fallback
    a.found = false;
    return a;
  }
  return keep_choice(t, n, best, rejected, ms, what, a);
}

// The file's algorithm for pr, if cuBLASLt accepts it here (and within the workspace).
bool file_algo_ok(const Problem& pr, const cublasLtMatmulAlgo_t& algo, const std::string& what) {
  cublasLtMatmulHeuristicResult_t r{};
  const cublasStatus_t st = cublasLtMatmulAlgoCheck(ctx().lt, pr.desc.d, pr.la.d, pr.lb.d, pr.lc.d, pr.lc.d, &algo, &r);
  if (st == CUBLAS_STATUS_SUCCESS && r.workspaceSize <= Context::kWorkspace) return true;
  std::fprintf(stderr,
               "GEMM tuning: %s's algorithm for %s is refused by cuBLASLt here (status %d, workspace %zu): "
               "the heuristic's first answer instead\n",
               ctx().tuning.file.c_str(), what.c_str(), static_cast<int>(st), r.workspaceSize);
  return false;
}

// The algorithm for a GEMM met for the first time: the file's, a tuned one, or (as without tuning)
// the heuristic's first answer.
Algo choose(const Problem& pr, const GemmArgs& g, const void* A, const void* B, void* out, cudaDataType ab,
            cublasComputeType_t compute, bool with_bias, cudaDataType cd, const AlgoKey& key) {
  Context& c = ctx();
  Algo a;
  gemm_tuning::Plan& t = c.tuning;  // read_tuning has run (run())
  if (t.use) {
    a.shape = shape_of(g, key, ab, compute, with_bias, cd);
    const auto e = t.table.entries.find(a.shape);
    if (e != t.table.entries.end()) {
      cublasLtMatmulAlgo_t algo;
      std::memcpy(&algo, e->second.algo.data(), sizeof algo);
      if (file_algo_ok(pr, algo, a.shape.describe())) {
        ++c.from_file;
        a.found = true;
        a.algo = algo;
        a.source = "file";
        a.choice = &e->second;
        return a;
      }
    }
    if (t.tune && !capturing()) return tune(pr, g, A, B, out, cd, key, std::move(a));
    if (e == t.table.entries.end() && ++c.missing <= 3)
      std::fprintf(stderr, "GEMM tuning: %s is not in %s: the heuristic's first answer%s\n", a.shape.describe().c_str(),
                   t.file.c_str(), c.missing == 3 ? " (further ones counted at exit)" : "");
  }
  cublasLtMatmulHeuristicResult_t heur{};
  a.found = pr.heuristics(key.align, 1, &heur) > 0;
  a.algo = heur.algo;
  return a;
}

// The product into `out` (g.C where null) of type cd. False, with nothing computed, where no
// algorithm takes it with the bias in the epilogue (or with a bf16 output): the caller then
// computes it another way. Without either, no algorithm is an error.
bool run(const GemmArgs& g, const void* A, const void* B, cudaDataType ab, cublasComputeType_t compute, bool with_bias,
         cudaDataType cd = CUDA_R_32F, void* out = nullptr) {
  Context& c = ctx();
  if (!out) out = g.C;
  if (with_bias && alignment(g.bias) < 16) return false;  // the caller adds the bias with a kernel
  const Problem pr(g, ab, compute, with_bias, cd);
  // (beta 1 or 0 does not change the heuristic's answer, but may the tuned one's: in the key only
  // while tuning or with a file, so that without them the queries are today's)
  read_tuning(c);
  const bool beta_in_key = c.tuning.use && g.accumulate;
  const AlgoKey key{{g.M, g.N, g.K, g.lda, g.ldb, g.ldc, g.batch, g.stride_a, g.stride_b, g.stride_c,
                     (g.trans_a ? 1 : 0) + (g.trans_b ? 2 : 0) + (with_bias ? 4 : 0) + (beta_in_key ? 8 : 0),
                     static_cast<int64_t>(ab), static_cast<int64_t>(compute), static_cast<int64_t>(cd)},
                    {alignment(B), alignment(A), alignment(out)}};
  auto it = c.algos.find(key);
  if (it == c.algos.end()) it = c.algos.emplace(key, choose(pr, g, A, B, out, ab, compute, with_bias, cd, key)).first;
  c.last = &it->second;
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

void configure_gemm_tuning(const std::string& file, bool tune) {
  Context& c = ctx();
  BERTCC_CHECK(c.algos.empty(), "GEMM tuning: configured after the first GEMM");
  c.tuning = gemm_tuning::plan(file.c_str(), tune ? "1" : "0", this_device());
  c.tuning_read = true;
  say_plan(c.tuning);
}

LastGemm last_gemm() {
  const Algo* a = ctx().last;
  if (!a) return {};
  return {a->source, a->shape, a->choice};
}

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
    for (int k = 0; k < iters; ++k)
      check_lt(pr.matmul(g, g.A16, g.B16, g.C, &h[static_cast<size_t>(i)].algo), "cublasLtMatmul");
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
