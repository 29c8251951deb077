#include "kernels/gemm.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "bertcc/error.h"
#include "bertcc/runtime.h"
#include "core/settings.h"
#include "kernels/onednn_runtime.h"

namespace bertcc::kernels {

OnednnRuntime& onednn_runtime() {
  if (omp_in_parallel()) {
    thread_local OnednnRuntime mine;
    return mine;
  }
  static OnednnRuntime r;
  return r;
}

// An empty PackedWeights with room for `bytes`, 64-byte aligned
static std::shared_ptr<PackedWeights> packed_weights_of(size_t bytes) {
  auto p = std::make_shared<PackedWeights>();
  bytes = (bytes + 63) / 64 * 64;
  p->data.reset(std::aligned_alloc(64, bytes));
  BERTCC_CHECK(p->data, "packing weights: out of memory for ", bytes, " bytes");
  return p;
}

std::shared_ptr<const PackedWeights> pack_weights(const dnnl::memory::desc& plain, const void* from,
                                                  const dnnl::memory::desc& chosen,
                                                  const std::function<bool(int64_t M)>& fast_at) {
  const dnnl_memory_desc_t& c = chosen.data;
  if (c.format_kind != dnnl_blocked || (c.format_desc.blocking.inner_nblks == 0 && c.extra.flags == 0)) return nullptr;
  if (!fast_at(1) || !fast_at(1024)) return nullptr;
  OnednnRuntime& R = onednn_runtime();
  auto p = packed_weights_of(chosen.get_size());
  p->md = chosen;
  dnnl::memory in(plain, R.engine, const_cast<void*>(from)), out(chosen, R.engine, p->data.get());
  dnnl::reorder(in, out).execute(R.stream, in, out);
  R.stream.wait();
  return p;
}

namespace {

using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;

// Copies a (batch of) row-major [rows, cols] blocks with leading dimension ld to a compact buffer,
// converting each element with `cvt` (fp32 -> bf16 for bf16 GEMMs, fp32 -> fp16 -> fp32 for the
// fp16 emulation, bf16 -> fp32 for the bf16 emulation).
template <typename S, typename T, typename Cvt>
void pack(const S* src, int64_t batch, int64_t stride, int64_t rows, int64_t cols, int64_t ld, std::vector<T>& dst,
          Cvt cvt) {
  dst.resize(static_cast<size_t>(batch * rows * cols));
  T* out = dst.data();
#pragma omp parallel for collapse(2) schedule(static) if (batch * rows * cols > 65536)
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t r = 0; r < rows; ++r) {
      const S* s = src + b * stride + r * ld;
      T* d = out + (b * rows + r) * cols;
      for (int64_t c = 0; c < cols; ++c) d[c] = cvt(s[c]);
    }
}
const auto to_bf16_elem = [](float x) { return f32_to_bf16(x); };
const auto round_f16_elem = [](float x) { return f16_to_f32(f32_to_f16(x)); };
const auto round_bf16_elem = [](float x) { return bf16_to_f32(f32_to_bf16(x)); };
const auto widen_bf16_elem = [](bf16_t x) { return bf16_to_f32(x); };

dnnl::memory::desc md(dt t, int64_t batch, int64_t rows, int64_t cols, int64_t bstride, int64_t rstride,
                      int64_t cstride) {
  if (batch == 1) return dnnl::memory::desc(dims{rows, cols}, t, dims{rstride, cstride});
  return dnnl::memory::desc(dims{batch, rows, cols}, t, dims{bstride, rstride, cstride});
}

}  // namespace

// Opt-in profile (BERTCC_PROFILE_GEMM=1): time and FLOPs per shape/layout, printed at exit.
struct GemmProfile {
  bool on = settings().profile_gemm;
  std::map<std::string, std::pair<double, double>> t;  // key -> (seconds, flops)
  ~GemmProfile() {
    if (!on) return;
    std::vector<std::pair<std::string, std::pair<double, double>>> v(t.begin(), t.end());
    std::sort(v.begin(), v.end(), [](auto& a, auto& b) { return a.second.first > b.second.first; });
    double tot = 0;
    for (auto& e : v) tot += e.second.first;
    std::fprintf(stderr, "gemm profile: %.3f s total\n", tot);
    for (auto& e : v)
      std::fprintf(stderr, "  %-48s %8.3f s %7.3f TFLOP/s\n", e.first.c_str(), e.second.first,
                   e.second.second / e.second.first / 1e12);
  }
};
GemmProfile& profile() {
  static GemmProfile p;
  return p;
}

static void gemm_impl(const GemmArgs& g, Precision p);

void gemm(const GemmArgs& g, Precision p) {
  GemmProfile& prof = profile();
  if (!prof.on) return gemm_impl(g, p);
  const auto t0 = std::chrono::steady_clock::now();
  gemm_impl(g, p);
  const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  char key[128];
  std::snprintf(key, sizeof key, "%s b%ld %ldx%ldx%ld %c%c%s", precision_name(p), (long)g.batch, (long)g.M, (long)g.N,
                (long)g.K, g.trans_a ? 'T' : 'N', g.trans_b ? 'T' : 'N', g.accumulate ? " +=" : "");
  static std::mutex m;  // (the varlen attention's products come from several threads)
  std::lock_guard<std::mutex> lock(m);
  auto& e = prof.t[key];
  e.first += dt;
  e.second += 2.0 * g.batch * g.M * g.N * g.K;
}

// fp16 emulation: operands rounded to fp16 (|x| >= 65520 becomes inf, as on a GPU), then an fp32
// GEMM; the rounded copies are compact, so leading dimensions and strides are rewritten.
static void gemm_impl(const GemmArgs& g, Precision p);
static void gemm_f16(const GemmArgs& g) {
  thread_local std::vector<float> a16, b16;
  const int64_t a_rows = g.trans_a ? g.K : g.M, a_cols = g.trans_a ? g.M : g.K;
  const int64_t b_rows = g.trans_b ? g.N : g.K, b_cols = g.trans_b ? g.K : g.N;
  pack(g.A, g.batch, g.stride_a, a_rows, a_cols, g.lda, a16, round_f16_elem);
  pack(g.B, g.batch, g.stride_b, b_rows, b_cols, g.ldb, b16, round_f16_elem);
  GemmArgs h = g;
  h.A = a16.data();
  h.lda = a_cols;
  h.stride_a = a_rows * a_cols;
  h.B = b16.data();
  h.ldb = b_cols;
  h.stride_b = b_rows * b_cols;
  h.A16 = h.B16 = nullptr;
  gemm_impl(h, Precision::F32);
}

// bf16 emulation, where oneDNN has no bf16 matmul for this CPU (AVX2 only): operands rounded to
// bf16 and widened back (or widened from the caller's bf16 copies), then an exact fp32 GEMM — the
// same bf16 x bf16 products, accumulated in fp32. Announced at start-up (describe_backend).
static void gemm_bf16_emulated(const GemmArgs& g) {
  thread_local std::vector<float> a32, b32;
  const int64_t a_rows = g.trans_a ? g.K : g.M, a_cols = g.trans_a ? g.M : g.K;
  const int64_t b_rows = g.trans_b ? g.N : g.K, b_cols = g.trans_b ? g.K : g.N;
  if (g.A16)
    pack(g.A16, g.batch, g.stride_a, a_rows, a_cols, g.lda, a32, widen_bf16_elem);
  else
    pack(g.A, g.batch, g.stride_a, a_rows, a_cols, g.lda, a32, round_bf16_elem);
  if (g.B16)
    pack(g.B16, g.batch, g.stride_b, b_rows, b_cols, g.ldb, b32, widen_bf16_elem);
  else
    pack(g.B, g.batch, g.stride_b, b_rows, b_cols, g.ldb, b32, round_bf16_elem);
  GemmArgs h = g;
  h.A = a32.data();
  h.lda = a_cols;
  h.stride_a = a_rows * a_cols;
  h.B = b32.data();
  h.ldb = b_cols;
  h.stride_b = b_rows * b_cols;
  h.A16 = h.B16 = nullptr;
  gemm_impl(h, Precision::F32);
}

static void gemm_impl(const GemmArgs& g, Precision p) {
  BERTCC_CHECK(g.M > 0 && g.N > 0 && g.K > 0 && g.batch > 0, "gemm: empty shape");
  if (p == Precision::F16) return gemm_f16(g);
  if (p == Precision::BF16 && !onednn_bf16_matmul()) return gemm_bf16_emulated(g);
  OnednnRuntime& R = onednn_runtime();
  const bool bf = p == Precision::BF16;
  const dt in_t = bf ? dt::bf16 : dt::f32;

  // Operand layouts. A is stored [M,K] (or [K,M] if transposed), B [K,N] (or [N,K]).
  const int64_t a_rows = g.trans_a ? g.K : g.M, a_cols = g.trans_a ? g.M : g.K;
  const int64_t b_rows = g.trans_b ? g.N : g.K, b_cols = g.trans_b ? g.K : g.N;
  const void* a_ptr = g.A;
  const void* b_ptr = g.B;
  int64_t lda = g.lda, ldb = g.ldb, sa = g.stride_a, sb = g.stride_b;
  if (bf) {
    if (g.A16) {
      a_ptr = g.A16;
    } else {
      pack(g.A, g.batch, g.stride_a, a_rows, a_cols, g.lda, R.scratch_a, to_bf16_elem);
      a_ptr = R.scratch_a.data();
      lda = a_cols;
      sa = a_rows * a_cols;
    }
    if (g.B16) {
      b_ptr = g.B16;
    } else {
      pack(g.B, g.batch, g.stride_b, b_rows, b_cols, g.ldb, R.scratch_b, to_bf16_elem);
      b_ptr = R.scratch_b.data();
      ldb = b_cols;
      sb = b_rows * b_cols;
    }
  }
  // Bias is added after scaling by oneDNN only when alpha == 1; we never combine them.
  BERTCC_CHECK(!(g.bias && g.alpha != 1.0f), "gemm: bias with alpha != 1 is not supported");
  uint32_t alpha_bits;
  std::memcpy(&alpha_bits, &g.alpha, 4);
  const int64_t flags = int64_t{g.trans_a} | int64_t{g.trans_b} << 1 | int64_t{g.bias != nullptr} << 2 |
                        int64_t{g.accumulate} << 3 | int64_t{bf} << 4;
  const OnednnRuntime::Key key = {
      0, g.batch, g.M, g.N, g.K, sa, lda, sb, ldb, g.stride_c, g.ldc, flags, omp_get_max_threads(), alpha_bits};
  // Logical src [M,K] and weights [K,N] via strides.
  const auto src_md = [&] {
    return g.trans_a ? md(in_t, g.batch, g.M, g.K, sa, 1, lda) : md(in_t, g.batch, g.M, g.K, sa, lda, 1);
  };
  const auto wei_md = [&] {
    return g.trans_b ? md(in_t, g.batch, g.K, g.N, sb, 1, ldb) : md(in_t, g.batch, g.K, g.N, sb, ldb, 1);
  };
  const auto dst_md = [&] { return md(dt::f32, g.batch, g.M, g.N, g.stride_c, g.ldc, 1); };
  const auto bias_md = [&] {
    return g.batch == 1 ? dnnl::memory::desc(dims{1, g.N}, dt::f32, dims{g.N, 1})
                        : dnnl::memory::desc(dims{1, 1, g.N}, dt::f32, dims{g.N, g.N, 1});
  };
  OnednnRuntime::Prepared& prim = R.prepare(
      key,
      [&] {
        dnnl::primitive_attr attr;
        attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
        if (g.alpha != 1.0f) attr.set_output_scales(0, {g.alpha});
        if (g.accumulate) {
          dnnl::post_ops po;
          po.append_sum(1.0f);
          attr.set_post_ops(po);
        }
        dnnl::matmul::desc d = g.bias ? dnnl::matmul::desc(src_md(), wei_md(), bias_md(), dst_md())
                                      : dnnl::matmul::desc(src_md(), wei_md(), dst_md());
        return dnnl::matmul::primitive_desc(d, attr, R.engine);
      },
      [&] {
        std::vector<std::pair<int, dnnl::memory::desc>> m{
            {DNNL_ARG_SRC, src_md()}, {DNNL_ARG_WEIGHTS, wei_md()}, {DNNL_ARG_DST, dst_md()}};
        if (g.bias) m.emplace_back(DNNL_ARG_BIAS, bias_md());
        return m;
      });
  if (g.bias)
    R.run_prepared(prim, {a_ptr, b_ptr, g.C, g.bias});
  else
    R.run_prepared(prim, {a_ptr, b_ptr, g.C});
}

namespace {

// linear_forward's matmul (x [M, K] row-major, W read as [K, N], bias [1, N], y [M, N]) with the
// weights' description wei_md; the primitive cached under the same fields as gemm_impl's.
dnnl::matmul::primitive_desc linear_pd(OnednnRuntime& R, int64_t M, int64_t N, int64_t K,
                                       const dnnl::memory::desc& wei_md, bool bias) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  const dnnl::memory::desc src_md(dims{M, K}, wei_md.data_type(), dims{K, 1});
  const dnnl::memory::desc dst_md(dims{M, N}, dt::f32, dims{N, 1});
  if (!bias) return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src_md, wei_md, dst_md), attr, R.engine);
  const dnnl::memory::desc bias_md(dims{1, N}, dt::f32, dims{N, 1});
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src_md, wei_md, bias_md, dst_md), attr, R.engine);
}

// W [N, K] of type t (fp32 or bf16) reordered into the layout oneDNN's brgemm kernels read, where
// they run this layer (with and without a bias) at every row count; null otherwise.
std::shared_ptr<const PackedWeights> pack_for_brgemm(const void* W, dt t, int64_t N, int64_t K) {
  OnednnRuntime& R = onednn_runtime();
  const dnnl::memory::desc chosen =
      linear_pd(R, 1024, N, K, dnnl::memory::desc(dims{K, N}, t, dnnl::memory::format_tag::any), true).weights_desc();
  return pack_weights(dnnl::memory::desc(dims{K, N}, t, dims{1, K}), W, chosen, [&](int64_t M) {
    for (const bool bias : {false, true})
      if (std::string(linear_pd(R, M, N, K, chosen, bias).impl_info_str()).rfind("brg", 0) != 0) return false;
    return true;
  });
}

// y [M, N] = x [M, K] W^T + b on oneDNN's packed W; x of W's type (fp32 or bf16)
void run_packed(float* y, const void* x, const PackedWeights& W, const float* b, int64_t M) {
  OnednnRuntime& R = onednn_runtime();
  const int64_t K = W.md.dims()[0], N = W.md.dims()[1];  // W read as [K, N]
  const dt t = W.md.data_type();
  const OnednnRuntime::Key key = {2, M, N, K, b != nullptr, omp_get_max_threads(), static_cast<int64_t>(t)};
  OnednnRuntime::Prepared& prim = R.prepare(
      key, [&] { return linear_pd(R, M, N, K, W.md, b != nullptr); },
      [&] {
        std::vector<std::pair<int, dnnl::memory::desc>> m{
            {DNNL_ARG_SRC, dnnl::memory::desc(dims{M, K}, t, dims{K, 1})},
            {DNNL_ARG_WEIGHTS, W.md},
            {DNNL_ARG_DST, dnnl::memory::desc(dims{M, N}, dt::f32, dims{N, 1})}};
        if (b) m.emplace_back(DNNL_ARG_BIAS, dnnl::memory::desc(dims{1, N}, dt::f32, dims{N, 1}));
        return m;
      });
  if (b)
    R.run_prepared(prim, {x, W.data.get(), y, b});
  else
    R.run_prepared(prim, {x, W.data.get(), y});
}

}  // namespace

std::shared_ptr<const PackedWeights> pack_linear_weight(const float* W, int64_t N, int64_t K) {
  BERTCC_CHECK(N > 0 && K > 0, "pack_linear_weight: empty weight [", N, ", ", K, "]");
  if (row_gemm_active()) {
    auto p = packed_weights_of(static_cast<size_t>(row_panels_size(N, K)) * sizeof(float));
    pack_row_panels(W, N, K, static_cast<float*>(p->data.get()));
    p->panels_n = N;
    p->panels_k = K;
    return p;
  }
  return pack_for_brgemm(W, dt::f32, N, K);
}

std::shared_ptr<const PackedWeights> pack_linear_weight_bf16(const bf16_t* W16, int64_t N, int64_t K) {
  BERTCC_CHECK(N > 0 && K > 0, "pack_linear_weight_bf16: empty weight [", N, ", ", K, "]");
  if (!onednn_bf16_matmul()) return nullptr;  // emulated bf16: fp32 products of the roundings
  return pack_for_brgemm(W16, dt::bf16, N, K);
}

void linear_forward_packed(float* y, const float* x, const PackedWeights& W, const float* b, int64_t M) {
  BERTCC_CHECK(M > 0, "linear_forward_packed: no rows");
  if (W.panels_n > 0)
    return linear_forward_rows_packed(y, x, static_cast<const float*>(W.data.get()), b, M, W.panels_n, W.panels_k);
  BERTCC_CHECK(W.md.data_type() == dt::f32, "linear_forward_packed: the weights are not fp32");
  run_packed(y, x, W, b, M);
}

bool ffn_forward_packed(float* y, const float* x, const PackedWeights& W1, const float* b1, const PackedWeights& W2,
                        const float* b2, int64_t M, Activation act, float* scratch) {
  if (W1.panels_n == 0 || W2.panels_n == 0) return false;
  BERTCC_CHECK(M > 0 && W2.panels_k == W1.panels_n && W2.panels_n == W1.panels_k, "ffn_forward_packed: layers [",
               W1.panels_n, ", ", W1.panels_k, "] and [", W2.panels_n, ", ", W2.panels_k, "] do not chain, or no rows");
  BERTCC_CHECK(scratch, "ffn_forward_packed: no room for the inner rows");
  ffn_rows_packed(y, x, static_cast<const float*>(W1.data.get()), b1, static_cast<const float*>(W2.data.get()), b2, M,
                  W1.panels_k, W1.panels_n, act, scratch);
  return true;
}

void linear_forward_packed_bf16(float* y, const bf16_t* x16, const PackedWeights& W, const float* b, int64_t M) {
  BERTCC_CHECK(M > 0, "linear_forward_packed_bf16: no rows");
  BERTCC_CHECK(W.panels_n == 0 && W.md.data_type() == dt::bf16, "linear_forward_packed_bf16: the weights are not bf16");
  run_packed(y, x16, W, b, M);
}

// bf16 emulated on the row kernel: x and W rounded to bf16 (or widened from their bf16 copies), as
// gemm_bf16_emulated does for oneDNN.
static void linear_forward_rows_bf16(float* y, const float* x, const float* W, const float* b, int64_t M, int64_t N,
                                     int64_t K, const bf16_t* W16, const bf16_t* x16) {
  thread_local std::vector<float> x32, w32;
  if (x16)
    pack(x16, 1, 0, M, K, K, x32, widen_bf16_elem);
  else
    pack(x, 1, 0, M, K, K, x32, round_bf16_elem);
  if (W16)
    pack(W16, 1, 0, N, K, K, w32, widen_bf16_elem);
  else
    pack(W, 1, 0, N, K, K, w32, round_bf16_elem);
  linear_forward_rows(y, x32.data(), w32.data(), b, M, N, K);
}

bool linear_rows_invariant(Precision p) {
  if (p != Precision::BF16) return true;
  if (!onednn_bf16_matmul()) return true;                                    // emulated: the fp32 GEMM on the roundings
  static const bool brgemm = cpu_report().onednn_isa == "avx512_core_bf16";  // (cpuid once, not every encode)
  return brgemm;
}

void linear_forward(float* y, const float* x, const float* W, const float* b, int64_t M, int64_t N, int64_t K,
                    Precision p, const bf16_t* W16, const bf16_t* x16) {
  if (p == Precision::I8) p = Precision::F32;  // what int8 inference keeps in fp32 (the pooler, the heads)
  if (row_gemm_active()) {
    if (p == Precision::F32) return linear_forward_rows(y, x, W, b, M, N, K);
    if (p == Precision::BF16 && !onednn_bf16_matmul()) return linear_forward_rows_bf16(y, x, W, b, M, N, K, W16, x16);
  }
  GemmArgs g;
  g.B16 = W16;
  g.A16 = x16;
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
  gemm(g, p);
}

void linear_backward(float* dx, float* dW, float* db, const float* dy, const float* x, const float* W, int64_t M,
                     int64_t N, int64_t K, Precision p, const bf16_t* W16, const bf16_t* dy16, const bf16_t* x16) {
  if (dx) {  // dx[M,K] += dy[M,N] @ W[N,K]
    GemmArgs g;
    g.B16 = W16;
    g.A16 = dy16;
    g.M = M;
    g.N = K;
    g.K = N;
    g.A = dy;
    g.lda = N;
    g.B = W;
    g.ldb = K;
    g.C = dx;
    g.ldc = K;
    g.accumulate = true;
    gemm(g, p);
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
    gemm(g, p);
  }
  if (db) bias_backward(db, dy, M, N);
}

void bias_backward(float* db, const float* dy, int64_t M, int64_t N) {
  // Parallel over column blocks; each column summed over rows in a fixed order.
  const int64_t block = 64;
  const int64_t nblocks = (N + block - 1) / block;
#pragma omp parallel for schedule(static)
  for (int64_t cb = 0; cb < nblocks; ++cb) {
    const int64_t c0 = cb * block, c1 = std::min(N, c0 + block);
    float acc[64] = {0};
    for (int64_t r = 0; r < M; ++r) {
      const float* row = dy + r * N;
      for (int64_t c = c0; c < c1; ++c) acc[c - c0] += row[c];
    }
    for (int64_t c = c0; c < c1; ++c) db[c] += acc[c - c0];
  }
}

}  // namespace bertcc::kernels

#include <chrono>

namespace bertcc::kernels {

double gemm_probe_tflops(int64_t M, int64_t N, int64_t K, Precision p, int iters) {
  OnednnRuntime& R = onednn_runtime();
  if (p == Precision::BF16 && !onednn_bf16_matmul()) p = Precision::F32;  // emulated: the fp32 GEMM is the ceiling
  const dt t = p == Precision::BF16 ? dt::bf16 : dt::f32;
  auto a_md = dnnl::memory::desc(dims{M, K}, t, dims{K, 1});
  auto b_md = dnnl::memory::desc(dims{K, N}, t, dims{N, 1});
  auto c_md = dnnl::memory::desc(dims{M, N}, dt::f32, dims{N, 1});
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), R.engine);
  dnnl::matmul mm(pd);
  dnnl::memory a(a_md, R.engine), b(b_md, R.engine), c(c_md, R.engine);
  const size_t es = p == Precision::BF16 ? 2 : 4;
  std::memset(a.get_data_handle(), 0x3c, static_cast<size_t>(M * K) * es);  // small finite values
  std::memset(b.get_data_handle(), 0x3c, static_cast<size_t>(K * N) * es);
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}};
  mm.execute(R.stream, args);
  R.stream.wait();
  double best = 1e30;
  for (int i = 0; i < iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    mm.execute(R.stream, args);
    R.stream.wait();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * static_cast<double>(M) * N * K / best / 1e12;
}

}  // namespace bertcc::kernels
