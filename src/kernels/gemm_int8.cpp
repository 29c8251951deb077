#include "kernels/gemm_int8.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <unordered_map>

#include "bertcc/error.h"
#include "kernels/gemm.h"
#include "kernels/kernels.h"
#include "kernels/onednn_runtime.h"
#include "kernels/vecmath.h"

namespace bertcc::kernels {
namespace {

using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;

// One row by the rule of int8_scale and int8_quantize (gemm_int8.h).
BERTCC_CLONES void quantize_row(const float* x, int64_t K, int qmax, int8_t* q, float* scale) {
  uint32_t mx = 0;
  for (int64_t k = 0; k < K; ++k) mx = std::max(mx, int8_abs_bits(x[k]));
  const Int8Scale s = int8_scale(mx, qmax);
  *scale = s.scale;
  if (s.inv == 0.0f) {  // zeros, or a non-finite row
    if (K > 0) std::memset(q, 0, static_cast<size_t>(K));
    return;
  }
  const float lim = static_cast<float>(qmax);
  for (int64_t k = 0; k < K; ++k) q[k] = int8_quantize(x[k], s.inv, lim);
}

}  // namespace

void quantize_rows_int8(const float* x, int64_t M, int64_t K, int qmax, int8_t* q, float* scale) {
  BERTCC_CHECK(qmax >= 1 && qmax <= 127, "quantize_rows_int8: bound ", qmax, " outside [1, 127]");
  if (M * K <= 32768 || omp_in_parallel()) {  // (no region to open: its cost is a small call's)
    for (int64_t m = 0; m < M; ++m) quantize_row(x + m * K, K, qmax, q + m * K, scale + m);
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < M; ++m) quantize_row(x + m * K, K, qmax, q + m * K, scale + m);
}

namespace {
Int8Weight quantized_rows(const float* W, int64_t N, int64_t K, int qmax, const char* who) {
  BERTCC_CHECK(N > 0 && K > 0, who, ": empty matrix [", N, ", ", K, "]");
  Int8Weight w;
  w.N = N;
  w.K = K;
  w.q.resize(static_cast<size_t>(N * K));
  w.scale.resize(static_cast<size_t>(N));
  quantize_rows_int8(W, N, K, qmax, w.q.data(), w.scale.data());
  return w;
}
}  // namespace

Int8Weight quantize_weight_int8(const float* W, int64_t N, int64_t K) {
  return quantized_rows(W, N, K, kInt8WeightMax, "quantize_weight_int8");
}

Int8Weight quantize_embeddings_int8(const float* E, int64_t V, int64_t C) {
  return quantized_rows(E, V, C, kInt8EmbeddingMax, "quantize_embeddings_int8");
}

namespace {

// The int8 matmul acc[M, N] = a[M, K] w^T for weights w of description wei_md (logical [K, N]) at b.
void matmul_s8(const int8_t* a, const dnnl::memory::desc& wei_md, const void* b, bool packed, int32_t* acc, int64_t M,
               int64_t N, int64_t K) {
  OnednnRuntime& R = onednn_runtime();
  const dnnl::memory::desc src_md(dims{M, K}, dt::s8, dims{K, 1});
  const dnnl::memory::desc dst_md(dims{M, N}, dt::s32, dims{N, 1});
  const OnednnRuntime::Key key = {1, M, N, K, packed, omp_get_max_threads()};
  OnednnRuntime::Prepared& prim = R.prepare(
      key,
      [&] {
        dnnl::primitive_attr attr;
        attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
        return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src_md, wei_md, dst_md), attr, R.engine);
      },
      [&] {
        return std::vector<std::pair<int, dnnl::memory::desc>>{
            {DNNL_ARG_SRC, src_md}, {DNNL_ARG_WEIGHTS, wei_md}, {DNNL_ARG_DST, dst_md}};
      });
  R.run_prepared(prim, {a, b, acc});
}

dnnl::memory::desc plain_weight_md(int64_t N, int64_t K) {
  return dnnl::memory::desc(dims{K, N}, dt::s8, dims{1, K});  // b [N, K] read as [K, N]
}

}  // namespace

void gemm_s8s8s32(const int8_t* a, const int8_t* b, int32_t* acc, int64_t M, int64_t N, int64_t K) {
  BERTCC_CHECK(M > 0 && N > 0 && K > 0, "gemm_s8s8s32: empty shape");
  matmul_s8(a, plain_weight_md(N, K), b, false, acc, M, N, K);
}

bool pack_int8_weight(Int8Weight& w) {
  BERTCC_CHECK(w.N > 0 && w.K > 0 && w.q.size() == static_cast<size_t>(w.N * w.K), "pack_int8_weight: bad shape");
  const RowGemm mode = row_gemm_mode();
  const bool own = mode == RowGemm::Always || (mode == RowGemm::Auto && int8_own_kernel_preferred());
  std::shared_ptr<const PackedWeights> p;
  if (!own) {  // oneDNN's preferred layout, where it has a kernel that reads one
    OnednnRuntime& R = onednn_runtime();
    const auto pd_for = [&](int64_t M, const dnnl::memory::desc& wei) {
      return dnnl::matmul::primitive_desc(
          dnnl::matmul::desc(dnnl::memory::desc(dims{M, w.K}, dt::s8, dims{w.K, 1}), wei,
                             dnnl::memory::desc(dims{M, w.N}, dt::s32, dims{w.N, 1})),
          R.engine);
    };
    const dnnl::memory::desc chosen =
        pd_for(1024, dnnl::memory::desc(dims{w.K, w.N}, dt::s8, dnnl::memory::format_tag::any)).weights_desc();
    p = pack_weights(plain_weight_md(w.N, w.K), w.q.data(), chosen,
                     [&](int64_t M) { return std::string(pd_for(M, chosen).impl_info_str()).rfind("ref", 0) != 0; });
  }
  if (p) {
    w.packed = std::move(p);
  } else if (own || (mode == RowGemm::Auto && int8_own_kernel() != Int8Kernel::Portable)) {
    w.panels = pack_int8_panels(w.q.data(), w.N, w.K, w.act_max);  // oneDNN would repack plain weights every call
  } else {
    return false;
  }
  std::vector<int8_t>().swap(w.q);
  return true;
}

namespace {

// acc = a W^T for a weight plain or packed.
void products_of(const int8_t* a, const Int8Weight& W, int32_t* acc, int64_t M) {
  if (W.panels)
    gemm_int8_panels(a, *W.panels, acc, M);
  else if (W.packed)
    matmul_s8(a, W.packed->md, W.packed->data.get(), true, acc, M, W.N, W.K);
  else
    matmul_s8(a, plain_weight_md(W.N, W.K), W.q.data(), false, acc, M, W.N, W.K);
}

// The int32 products of rows already quantized, in a buffer of this thread's.
const int32_t* products(const int8_t* xq, const Int8Weight& W, int64_t M) {
  thread_local std::vector<int32_t> acc;
  int32_t* out = grow(acc, M * W.N);
  products_of(xq, W, out, M);
  return out;
}

void check_shape(const Int8Weight& W, int64_t M, const char* who) {
  BERTCC_CHECK(M > 0 && W.N > 0 && W.K > 0 && (W.packed || W.panels || W.q.size() == static_cast<size_t>(W.N * W.K)),
               who, ": bad shape");
}

// The int8 layer's outputs of rows already quantized, each rescaled into a row buffer of the thread
// that then hands it to f(m, row) (the fused epilogues).
template <typename F>
void each_output_row(const int8_t* xq, const float* sx, const Int8Weight& W, const float* b, int64_t M, F f) {
  if (W.panels) {  // the own kernel: rescaled in its registers, f on each block of rows in cache
    const Int8RowFn fn = f;
    return linear_int8_panels(nullptr, xq, sx, *W.panels, W.scale.data(), b, M, &fn);
  }
  const int64_t N = W.N;
  const int32_t* acc = products(xq, W, M);
#pragma omp parallel
  {
    thread_local std::vector<float> row;
    float* r = grow(row, N);
#pragma omp for schedule(static)
    for (int64_t m = 0; m < M; ++m) {
      rescale_int8_row(r, acc + m * N, sx[m], W.scale.data(), b, N);
      f(m, r);
    }
  }
}

// x[M, K] quantized per row (bound qmax) into buffers of this thread's.
struct QuantizedRows {
  const int8_t* q;
  const float* scale;
};
QuantizedRows quantized(const float* x, int64_t M, int64_t K, int qmax) {
  thread_local std::vector<int8_t> q;
  thread_local std::vector<float> scale;
  int8_t* qp = grow(q, M * K);
  float* sp = grow(scale, M);
  quantize_rows_int8(x, M, K, qmax, qp, sp);
  return {qp, sp};
}

}  // namespace

void linear_forward_int8_q(float* y, const int8_t* xq, const float* sx, const Int8Weight& W, const float* b,
                           int64_t M) {
  check_shape(W, M, "linear_forward_int8");
  if (W.panels) return linear_int8_panels(y, xq, sx, *W.panels, W.scale.data(), b, M, nullptr);
  const int64_t N = W.N;
  const int32_t* acc = products(xq, W, M);
#pragma omp parallel for schedule(static) if (M * N > 32768)
  for (int64_t m = 0; m < M; ++m) rescale_int8_row(y + m * N, acc + m * N, sx[m], W.scale.data(), b, N);
}

void linear_forward_int8(float* y, const float* x, const Int8Weight& W, const float* b, int64_t M) {
  check_shape(W, M, "linear_forward_int8");
  const QuantizedRows xq = quantized(x, M, W.K, W.act_max);
  linear_forward_int8_q(y, xq.q, xq.scale, W, b, M);
}

void linear_gelu_quantize_int8(int8_t* q, float* scale, const int8_t* xq, const float* sx, const Int8Weight& W,
                               const float* b, int64_t M, Activation act, int qmax) {
  check_shape(W, M, "linear_gelu_quantize_int8");
  BERTCC_CHECK(qmax >= 1 && qmax <= 127, "linear_gelu_quantize_int8: bound ", qmax, " outside [1, 127]");
  const int64_t N = W.N;
  each_output_row(xq, sx, W, b, M, [&](int64_t m, float* row) {
    gelu_forward_serial(row, row, N, act);
    quantize_row(row, N, qmax, q + m * N, scale + m);
  });
}

void linear_residual_layernorm_int8_q(const Int8LayerNorm& ln, const int8_t* xq, const float* sx, const Int8Weight& W,
                                      const float* b, int64_t M) {
  check_shape(W, M, "linear_residual_layernorm_int8");
  const int64_t N = W.N;
  each_output_row(xq, sx, W, b, M, [&](int64_t m, const float* row) {
    residual_layernorm_row(ln.out + m * N, ln.sum ? ln.sum + m * N : nullptr, ln.mean + m, ln.rstd + m, row,
                           ln.residual + m * N, ln.w, ln.b, N, ln.eps);
  });
}

void linear_residual_layernorm_int8(const Int8LayerNorm& ln, const float* x, const Int8Weight& W, const float* b,
                                    int64_t M) {
  check_shape(W, M, "linear_residual_layernorm_int8");
  const QuantizedRows xq = quantized(x, M, W.K, W.act_max);
  linear_residual_layernorm_int8_q(ln, xq.q, xq.scale, W, b, M);
}

void ffn_layernorm_int8(const Int8LayerNorm& ln, const float* x, const Int8Weight& W1, const float* b1,
                        const Int8Weight& W2, const float* b2, int64_t M, Activation act) {
  check_shape(W1, M, "ffn_layernorm_int8");
  check_shape(W2, M, "ffn_layernorm_int8");
  BERTCC_CHECK(W2.K == W1.N, "ffn_layernorm_int8: the second layer takes ", W2.K, " inputs, the first gives ", W1.N);
  const QuantizedRows xq = quantized(x, M, W1.K, W1.act_max);
  thread_local std::vector<int8_t> hq;
  thread_local std::vector<float> sh;
  int8_t* h = grow(hq, M * W1.N);
  float* s = grow(sh, M);
  linear_gelu_quantize_int8(h, s, xq.q, xq.scale, W1, b1, M, act, W2.act_max);
  linear_residual_layernorm_int8_q(ln, h, s, W2, b2, M);
}

double gemm_int8_probe_tops(int64_t M, int64_t N, int64_t K, int iters, int act_max) {
  // weights as the model holds them (packed where the CPU prefers it)
  const std::vector<int8_t> a(static_cast<size_t>(M * K), 3);
  Int8Weight w;
  w.N = N;
  w.K = K;
  w.act_max = act_max;
  w.q.assign(static_cast<size_t>(N * K), -5);
  pack_int8_weight(w);
  std::vector<int32_t> c(static_cast<size_t>(M * N));
  products_of(a.data(), w, c.data(), M);  // primitive made and pages touched
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) products_of(a.data(), w, c.data(), M);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return 2.0 * static_cast<double>(M * N * K) * iters / s / 1e12;
}

}  // namespace bertcc::kernels
