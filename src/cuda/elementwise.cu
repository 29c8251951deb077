// Embeddings, LayerNorm, residual, GELU, tanh, dropout, row gather/scatter, bias gradient.
// Gradients of shared rows (embeddings, scatter, LayerNorm and bias parameters) are summed by one
// thread per column over the rows in order: the CPU kernels' order, so the bits are the same and
// do not depend on the launch. (Fast enough to be correct; the split-and-merge version is to come.)
#include <cmath>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>
#include <initializer_list>
#include <type_traits>

#include "cuda/common.cuh"
#include "cuda/cuda_kernels.h"
#include "cuda/layernorm_kernels.cuh"
#include "cuda/ordered_sums.cuh"
#include "cuda/pointwise_kernels.cuh"

namespace bertcc::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void embeddings_fwd(float* out, const int32_t* ids, const int32_t* seg, const float* wte, const float* wpe,
                               const float* wtt, int64_t T, int64_t C) {
  const int64_t n = blockIdx.x;
  const float* a = wte + static_cast<int64_t>(ids[n]) * C;
  const float* p = wpe + (n % T) * C;
  const float* s = wtt + static_cast<int64_t>(seg[n]) * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) out[n * C + c] = a[c] + p[c] + s[c];
}

// dst[keys[n]] += src[n] for n = 0..N-1, each row's additions in n order (the CPU kernel's, so the
// same bits): a stable radix sort of (key, n), then one block per run of equal keys. 0 <= keys <
// num_keys (0: any non-negative key).
template <class Key>
void grouped_rows_add(float* dst, const float* src, const Key* keys, int64_t N, int64_t C, int64_t num_keys,
                      const char* who) {
  if (N == 0 || C == 0) return;
  static Scratch scratch;  // one per key type
  BERTCC_CHECK(N < (int64_t{1} << 31), who, ": ", N, " rows exceed int32 positions");
  const int max_bits = static_cast<int>(8 * sizeof(Key)) - 1;
  int end_bit = max_bits;
  if (num_keys > 0) {
    end_bit = 1;
    while (end_bit < max_bits && (int64_t{1} << end_bit) < num_keys) ++end_bit;
  }
  const size_t n = static_cast<size_t>(N), arrays = n * sizeof(Key) + 2 * n * sizeof(int32_t);
  size_t temp = 0;
  BERTCC_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp, keys, static_cast<Key*>(nullptr),
                                                    static_cast<const int32_t*>(nullptr),
                                                    static_cast<int32_t*>(nullptr), N, 0, end_bit));
  const size_t at = (temp + 255) / 256 * 256;  // CUB's temporary storage first, at the allocation's alignment
  auto* base = static_cast<unsigned char*>(scratch.get(at + arrays));
  auto* sorted = reinterpret_cast<Key*>(base + at);
  auto* pos_in = reinterpret_cast<int32_t*>(sorted + n);
  int32_t* pos = pos_in + n;
  iota_k<<<grid_for(N, 256), 256, 0, stream()>>>(pos_in, N);
  BERTCC_CUDA_LAUNCHED(who);
  BERTCC_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(base, temp, keys, sorted, pos_in, pos, N, 0, end_bit, stream()));
  run_add<Key><<<dim3(static_cast<unsigned>(N), grid_for(C, 128)), 128, 0, stream()>>>(dst, src, sorted, pos,
                                                                                       static_cast<int32_t>(N), C);
  BERTCC_CUDA_LAUNCHED(who);
}

// One warp per row: two-pass mean and variance, as the CPU kernel.
__device__ void ln_row(float* o, float* mean, float* rstd, const float* x, const float* w, const float* b, int64_t C,
                       float eps, uint16_t* o16 = nullptr) {
  const int lane = threadIdx.x & 31;
  float s = 0.0f;
  for (int64_t c = lane; c < C; c += 32) s += x[c];
  const float m = warp_sum(s) / static_cast<float>(C);
  float v = 0.0f;
  for (int64_t c = lane; c < C; c += 32) {
    const float d = x[c] - m;
    v += d * d;
  }
  const float r = 1.0f / sqrtf(warp_sum(v) / static_cast<float>(C) + eps);
  for (int64_t c = lane; c < C; c += 32) {
    const float y = (x[c] - m) * r * w[c] + b[c];
    o[c] = y;
    if (o16) o16[c] = f32_to_bf16_bits(y);
  }
  if (lane == 0) {
    *mean = m;
    *rstd = r;
  }
}

__global__ void layernorm_fwd(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                              int64_t N, int64_t C, float eps) {
  const int64_t n = blockIdx.x * static_cast<int64_t>(blockDim.x >> 5) + (threadIdx.x >> 5);
  if (n >= N) return;
  ln_row(out + n * C, mean + n, rstd + n, inp + n * C, w, b, C, eps);
}

__global__ void residual_layernorm_fwd(float* out, uint16_t* out16, float* sum, float* mean, float* rstd,
                                       const float* a, const float* r, const float* w, const float* b, int64_t N,
                                       int64_t C, float eps) {
  const int64_t n = blockIdx.x * static_cast<int64_t>(blockDim.x >> 5) + (threadIdx.x >> 5);
  if (n >= N) return;
  const int lane = threadIdx.x & 31;
  if (!sum) sum = out;  // no sum kept: out holds it until ln_row writes over it, element by element
  for (int64_t c = lane; c < C; c += 32) sum[n * C + c] = a[n * C + c] + r[n * C + c];
  __syncwarp();
  ln_row(out + n * C, mean + n, rstd + n, sum + n * C, w, b, C, eps, out16 ? out16 + n * C : nullptr);
}

__global__ void layernorm_bwd_input(float* dinp, const float* dout, const float* inp, const float* w, const float* mean,
                                    const float* rstd, int64_t N, int64_t C, bool overwrite) {
  const int64_t n = blockIdx.x * static_cast<int64_t>(blockDim.x >> 5) + (threadIdx.x >> 5);
  if (n >= N) return;
  const int lane = threadIdx.x & 31;
  const float* d = dout + n * C;
  const float* x = inp + n * C;
  const float m = mean[n], s = rstd[n];
  float a = 0.0f, bsum = 0.0f;
  for (int64_t c = lane; c < C; c += 32) {
    const float dn = w[c] * d[c];
    a += dn;
    bsum += dn * ((x[c] - m) * s);
  }
  const float dnorm_mean = warp_sum(a) / static_cast<float>(C);
  const float dnorm_norm_mean = warp_sum(bsum) / static_cast<float>(C);
  for (int64_t c = lane; c < C; c += 32) {
    const float xhat = (x[c] - m) * s;
    const float prev = overwrite ? 0.0f : dinp[n * C + c];  // +0: the bits of adding to a zeroed buffer
    dinp[n * C + c] = prev + (w[c] * d[c] - dnorm_mean - xhat * dnorm_norm_mean) * s;
  }
}

// Deterministic column sums of a row-major [M, N] gradient (bias and LayerNorm parameter
// gradients), in two passes whose partition depends only on M and N, so the bits are the same run
// after run on any GPU: pass 1 sums chunks of kColRows rows for 32 columns per block (8 row lanes
// striding by 8, then the lanes added in order), pass 2 adds the chunks' partials in order into the
// output (+=). Terms: 1 = sum dy (bias); 2 = also sum (x - mean) rstd dy (LayerNorm weight). The
// host sums rows in order instead (kernels/), so the two agree to rounding, not bit for bit.
constexpr int64_t kColRows = 256;

template <int kTerms>
__global__ void colsum_pass1(float* part, const float* dy, const float* inp, const float* mean, const float* rstd,
                             int64_t M, int64_t N) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(32) + threadIdx.x;
  const int64_t r0 = blockIdx.y * kColRows, r1 = min(M, r0 + kColRows);
  float a = 0.0f, b = 0.0f;
  if (c < N)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += 8) {
      const float d = dy[r * N + c];
      if (kTerms == 2) a += (inp[r * N + c] - mean[r]) * rstd[r] * d;
      b += d;
    }
  __shared__ float sa[8][33], sb[8][33];
  sa[threadIdx.y][threadIdx.x] = a;
  sb[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y != 0 || c >= N) return;
  float ta = 0.0f, tb = 0.0f;
  for (int y = 0; y < 8; ++y) {
    ta += sa[y][threadIdx.x];
    tb += sb[y][threadIdx.x];
  }
  part[blockIdx.y * N + c] = tb;
  if (kTerms == 2) part[(gridDim.y + blockIdx.y) * N + c] = ta;  // the weighted sums after the plain ones
}

__global__ void colsum_pass2(float* out_b, float* out_a, const float* part, int64_t chunks, int64_t N) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= N) return;
  float ta = 0.0f, tb = 0.0f;
  for (int64_t k = 0; k < chunks; ++k) {
    tb += part[k * N + c];
    if (out_a) ta += part[(chunks + k) * N + c];
  }
  out_b[c] += tb;
  if (out_a) out_a[c] += ta;
}

__global__ void residual_fwd(float* out, const float* a, const float* b, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

__global__ void tanh_fwd(float* out, const float* inp, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = tanhf(inp[i]);
}
__global__ void tanh_bwd(float* dinp, const float* out, const float* dout, int64_t n) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) dinp[i] += dout[i] * (1.0f - out[i] * out[i]);
}

__global__ void gather_rows_k(float* out, const float* inp, const int64_t* rows, int64_t C) {
  const int64_t m = blockIdx.x;
  const int64_t r = rows[m];
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) out[m * C + c] = inp[r * C + c];
}
__global__ void add_rows_k(float* dst, int64_t dst_ld, const float* src, int64_t src_ld, int64_t rows, int64_t cols) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * cols) return;
  const int64_t r = i / cols, c = i % cols;
  dst[r * dst_ld + c] += src[r * src_ld + c];
}

__global__ void scale_k(float* x, int64_t n, float s) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i < n) x[i] *= s;
}
unsigned rows_grid(int64_t N) { return grid_for(N, kThreads / 32); }

// out_b[c] += sum_r dy[r, c]; with out_a (LayerNorm): out_a[c] += sum_r (x[r, c] - mean[r]) rstd[r] dy[r, c]
void column_sums(float* out_b, float* out_a, const float* dy, const float* inp, const float* mean, const float* rstd,
                 int64_t M, int64_t N, const char* what) {
  if (M == 0 || N == 0) return;
  const int64_t chunks = (M + kColRows - 1) / kColRows;
  BERTCC_CHECK(chunks <= 65535, what, ": ", M, " rows is more than this kernel's grid takes");
  static Scratch buf;  // the partials, kept from call to call
  float* part = buf.take<float>(static_cast<size_t>((out_a ? 2 : 1) * chunks * N));
  const dim3 grid(static_cast<unsigned>((N + 31) / 32), static_cast<unsigned>(chunks)), block(32, 8);
  if (out_a)
    colsum_pass1<2><<<grid, block, 0, stream()>>>(part, dy, inp, mean, rstd, M, N);
  else
    colsum_pass1<1><<<grid, block, 0, stream()>>>(part, dy, nullptr, nullptr, nullptr, M, N);
  BERTCC_CUDA_LAUNCHED(what);
  colsum_pass2<<<grid_for(N, kThreads), kThreads, 0, stream()>>>(out_b, out_a, part, chunks, N);
  BERTCC_CUDA_LAUNCHED(what);
}

}  // namespace

void embeddings_forward(float* out, const int32_t* ids, const int32_t* seg, const float* wte, const float* wpe,
                        const float* wtt, int64_t B, int64_t T, int64_t C) {
  if (B * T == 0) return;
  embeddings_fwd<<<static_cast<unsigned>(B * T), 128, 0, stream()>>>(out, ids, seg, wte, wpe, wtt, T, C);
  BERTCC_CUDA_LAUNCHED("embeddings_forward");
}
void embeddings_backward(float* dwte, float* dwpe, float* dwtt, const float* dout, const int32_t* ids,
                         const int32_t* seg, int64_t B, int64_t T, int64_t C, int64_t V, int64_t TT) {
  if (C == 0 || B * T == 0) return;
  grouped_rows_add(dwte, dout, ids, B * T, C, V, "embeddings_backward (word rows)");
  position_grad<<<dim3(static_cast<unsigned>(T), grid_for(C, 128)), 128, 0, stream()>>>(dwpe, dout, B, T, C);
  BERTCC_CUDA_LAUNCHED("embeddings_backward (positions)");
  grouped_rows_add(dwtt, dout, seg, B * T, C, TT, "embeddings_backward (token-type rows)");
}
namespace {
// 16-byte accesses to every fp32 pointer and 8-byte ones to every 16-bit pointer allowed (null
// pointers allow anything): the four-element and register-row kernels' condition.
bool vec_ok(std::initializer_list<const void*> f32, std::initializer_list<const void*> b16 = {}) {
  for (const void* p : f32)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  for (const void* p : b16)
    if (reinterpret_cast<uintptr_t>(p) % 8 != 0) return false;
  return true;
}
// The four-element kernels' grid: one thread per group of four.
unsigned groups_grid(int64_t n) { return grid_for((n + 3) / 4, kThreads); }
// The register-row kernels (layernorm_kernels.cuh) where C and the pointers allow: their V, else 0.
int row_groups(int64_t C, std::initializer_list<const void*> f32, const void* b16 = nullptr) {
  return vec_ok(f32, {b16}) ? lnr::groups_for(C) : 0;
}
}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* w, const float* b,
                       int64_t N, int64_t C, float eps) {
  if (N == 0) return;
  if (const int V = row_groups(C, {out, inp, w, b})) {
    lnr::dispatch_groups(V, [&](auto v) {
      lnr::fwd<decltype(v)::value, false><<<rows_grid(N), kThreads, 0, stream()>>>(
          out, nullptr, nullptr, mean, rstd, inp, nullptr, w, b, N, C, eps, lnr::RowDropout{});
    });
  } else {
    layernorm_fwd<<<rows_grid(N), kThreads, 0, stream()>>>(out, mean, rstd, inp, w, b, N, C, eps);
  }
  BERTCC_CUDA_LAUNCHED("layernorm_forward");
}
void residual_layernorm_forward(float* out, float* sum, float* mean, float* rstd, const float* a, const float* r,
                                const float* w, const float* b, int64_t N, int64_t C, float eps, bf16_t* out16) {
  if (N == 0) return;
  auto* o16 = reinterpret_cast<uint16_t*>(out16);
  if (const int V = row_groups(C, {out, sum, a, r, w, b}, o16)) {
    lnr::dispatch_groups(V, [&](auto v) {
      lnr::fwd<decltype(v)::value, true><<<rows_grid(N), kThreads, 0, stream()>>>(out, o16, sum, mean, rstd, a, r, w, b,
                                                                                  N, C, eps, lnr::RowDropout{});
    });
  } else {
    residual_layernorm_fwd<<<rows_grid(N), kThreads, 0, stream()>>>(out, o16, sum, mean, rstd, a, r, w, b, N, C, eps);
  }
  BERTCC_CUDA_LAUNCHED("residual_layernorm_forward");
}
void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                        const float* mean, const float* rstd, int64_t N, int64_t C, bool overwrite) {
  if (N == 0) return;
  if (const int V = row_groups(C, {dinp, dout, inp, w})) {
    lnr::dispatch_groups(V, [&](auto v) {
      lnr::bwd_input<decltype(v)::value>
          <<<rows_grid(N), kThreads, 0, stream()>>>(dinp, dout, inp, w, mean, rstd, N, C, overwrite);
    });
  } else {
    layernorm_bwd_input<<<rows_grid(N), kThreads, 0, stream()>>>(dinp, dout, inp, w, mean, rstd, N, C, overwrite);
  }
  BERTCC_CUDA_LAUNCHED("layernorm_backward (input)");
  column_sums(db, dw, dout, inp, mean, rstd, N, C, "layernorm_backward (parameters)");
}
namespace {
lnr::RowDropout row_dropout(float p, const Rng& rng, uint64_t base) {
  lnr::RowDropout d;
  d.on = p > 0;
  d.quad = base % 4 == 0;
  d.scale = 1.0f / (1.0f - p);
  d.thr = dropout_threshold(p);
  d.seed = rng.seed;
  d.base = base;
  return d;
}
}  // namespace

bool residual_dropout_layernorm_forward(float* out, float* sum, float* mean, float* rstd, const float* a,
                                        const float* r, const float* w, const float* b, int64_t N, int64_t C, float eps,
                                        bf16_t* out16, float p, const Rng& rng, uint64_t base) {
  auto* o16 = reinterpret_cast<uint16_t*>(out16);
  const int V = row_groups(C, {out, sum, a, r, w, b}, o16);
  if (V == 0) return false;
  if (N == 0) return true;
  const lnr::RowDropout d = row_dropout(p, rng, base);
  lnr::dispatch_groups(V, [&](auto v) {
    lnr::fwd<decltype(v)::value, true>
        <<<rows_grid(N), kThreads, 0, stream()>>>(out, o16, sum, mean, rstd, a, r, w, b, N, C, eps, d);
  });
  BERTCC_CUDA_LAUNCHED("residual_dropout_layernorm_forward");
  return true;
}
bool layernorm_dropout_backward(float* dinp, float* dw, float* db, const float* dout, const float* inp, const float* w,
                                const float* mean, const float* rstd, int64_t N, int64_t C, float* dbranch,
                                bf16_t* dbranch16, float p, const Rng& rng, uint64_t base) {
  auto* d16 = reinterpret_cast<uint16_t*>(dbranch16);
  const int V = row_groups(C, {dinp, dout, inp, w, dbranch}, d16);
  if (V == 0 || !(p > 0)) return false;
  if (N == 0) return true;
  const lnr::RowDropout d = row_dropout(p, rng, base);
  lnr::dispatch_groups(V, [&](auto v) {
    lnr::bwd_input<decltype(v)::value><<<rows_grid(N), kThreads, 0, stream()>>>(dinp, dout, inp, w, mean, rstd, N, C,
                                                                                /*overwrite=*/true, d, dbranch, d16);
  });
  BERTCC_CUDA_LAUNCHED("layernorm_dropout_backward (input)");
  column_sums(db, dw, dout, inp, mean, rstd, N, C, "layernorm_dropout_backward (parameters)");
  return true;
}

void residual_forward(float* out, const float* a, const float* b, int64_t n) {
  if (n == 0) return;
  residual_fwd<<<grid_for(n, kThreads), kThreads, 0, stream()>>>(out, a, b, n);
  BERTCC_CUDA_LAUNCHED("residual_forward");
}

void gelu_forward(float* out, const float* inp, int64_t n, Activation act, bf16_t* out16, bf16_t* inp16) {
  if (n == 0) return;
  BERTCC_CHECK(out || out16, "gelu_forward: no output");
  auto* o16 = reinterpret_cast<uint16_t*>(out16);
  auto* i16 = reinterpret_cast<uint16_t*>(inp16);
  const bool erf_form = act == Activation::GeluErf;
  if (vec_ok({out, inp}, {o16, i16}))
    pw::gelu_fwd<true><<<groups_grid(n), kThreads, 0, stream()>>>(out, o16, i16, inp, n, erf_form);
  else
    pw::gelu_fwd<false><<<groups_grid(n), kThreads, 0, stream()>>>(out, o16, i16, inp, n, erf_form);
  BERTCC_CUDA_LAUNCHED("gelu_forward");
}
void gelu_forward16(bf16_t* out16, const bf16_t* inp16, int64_t n, Activation act) {
  if (n == 0) return;
  auto* o16 = reinterpret_cast<uint16_t*>(out16);
  const auto* i16 = reinterpret_cast<const uint16_t*>(inp16);
  const bool erf_form = act == Activation::GeluErf;
  if (vec_ok({}, {o16, i16}))
    pw::gelu_fwd<true, uint16_t><<<groups_grid(n), kThreads, 0, stream()>>>(nullptr, o16, nullptr, i16, n, erf_form);
  else
    pw::gelu_fwd<false, uint16_t><<<groups_grid(n), kThreads, 0, stream()>>>(nullptr, o16, nullptr, i16, n, erf_form);
  BERTCC_CUDA_LAUNCHED("gelu_forward16");
}
void gelu_backward(float* dinp, const float* inp, const float* dout, int64_t n, Activation act, bf16_t* dinp16,
                   bool overwrite) {
  if (n == 0) return;
  auto* d16 = reinterpret_cast<uint16_t*>(dinp16);
  const bool erf_form = act == Activation::GeluErf;
  if (vec_ok({dinp, inp, dout}, {d16}))
    pw::gelu_bwd<true><<<groups_grid(n), kThreads, 0, stream()>>>(dinp, d16, inp, dout, n, erf_form, overwrite);
  else
    pw::gelu_bwd<false><<<groups_grid(n), kThreads, 0, stream()>>>(dinp, d16, inp, dout, n, erf_form, overwrite);
  BERTCC_CUDA_LAUNCHED("gelu_backward");
}
void tanh_forward(float* out, const float* inp, int64_t n) {
  if (n == 0) return;
  tanh_fwd<<<grid_for(n, kThreads), kThreads, 0, stream()>>>(out, inp, n);
  BERTCC_CUDA_LAUNCHED("tanh_forward");
}
void tanh_backward(float* dinp, const float* out, const float* dout, int64_t n) {
  if (n == 0) return;
  tanh_bwd<<<grid_for(n, kThreads), kThreads, 0, stream()>>>(dinp, out, dout, n);
  BERTCC_CUDA_LAUNCHED("tanh_backward");
}
namespace {
// f(Vec, Quad) as template flags
template <class F>
void with_flags(bool vec, bool quad, F f) {
  if (vec) {
    if (quad)
      f(std::true_type{}, std::true_type{});
    else
      f(std::true_type{}, std::false_type{});
  } else {
    if (quad)
      f(std::false_type{}, std::true_type{});
    else
      f(std::false_type{}, std::false_type{});
  }
}
}  // namespace
void dropout_forward(float* out, const float* inp, int64_t n, float p, const Rng& rng, uint64_t base) {
  if (n == 0) return;
  with_flags(vec_ok({out, inp}), base % 4 == 0, [&](auto vec, auto quad) {
    pw::dropout_fwd<decltype(vec)::value, decltype(quad)::value><<<groups_grid(n), kThreads, 0, stream()>>>(
        out, inp, n, 1.0f / (1.0f - p), dropout_threshold(p), rng.seed, base);
  });
  BERTCC_CUDA_LAUNCHED("dropout_forward");
}
void dropout_backward(float* dinp, const float* dout, int64_t n, float p, const Rng& rng, uint64_t base, bf16_t* dinp16,
                      bool overwrite) {
  if (n == 0) return;
  auto* d16 = reinterpret_cast<uint16_t*>(dinp16);
  with_flags(vec_ok({dinp, dout}, {d16}), base % 4 == 0, [&](auto vec, auto quad) {
    pw::dropout_bwd<decltype(vec)::value, decltype(quad)::value><<<groups_grid(n), kThreads, 0, stream()>>>(
        dinp, d16, dout, n, 1.0f / (1.0f - p), dropout_threshold(p), rng.seed, base, overwrite);
  });
  BERTCC_CUDA_LAUNCHED("dropout_backward");
}
void gather_rows(float* out, const float* inp, const int64_t* rows, int64_t M, int64_t C) {
  if (M == 0) return;
  gather_rows_k<<<static_cast<unsigned>(M), 128, 0, stream()>>>(out, inp, rows, C);
  BERTCC_CUDA_LAUNCHED("gather_rows");
}
void scatter_add_rows(float* dinp, const float* dout, const int64_t* rows, int64_t M, int64_t C) {
  grouped_rows_add(dinp, dout, rows, M, C, 0, "scatter_add_rows");
}
void copy_rows(float* dst, int64_t dst_ld, const float* src, int64_t src_ld, int64_t rows, int64_t cols) {
  if (rows == 0 || cols == 0) return;
  if (rows == 1) {  // any leading dimension (cudaMemcpy2D refuses a pitch below the width)
    BERTCC_CUDA_CHECK(cudaMemcpyAsync(dst, src, sizeof(float) * cols, cudaMemcpyDeviceToDevice, stream()));
    return;
  }
  BERTCC_CHECK(dst_ld >= cols && src_ld >= cols, "copy_rows: leading dimensions ", dst_ld, ", ", src_ld, " below the ",
               cols, " columns");
  BERTCC_CUDA_CHECK(cudaMemcpy2DAsync(dst, sizeof(float) * dst_ld, src, sizeof(float) * src_ld, sizeof(float) * cols,
                                      rows, cudaMemcpyDeviceToDevice, stream()));
}
void add_rows(float* dst, int64_t dst_ld, const float* src, int64_t src_ld, int64_t rows, int64_t cols) {
  if (rows == 0 || cols == 0) return;
  add_rows_k<<<grid_for(rows * cols, kThreads), kThreads, 0, stream()>>>(dst, dst_ld, src, src_ld, rows, cols);
  BERTCC_CUDA_LAUNCHED("add_rows");
}
void scale(float* x, int64_t n, float s) {
  if (n <= 0) return;
  scale_k<<<grid_for(n, kThreads), kThreads, 0, stream()>>>(x, n, s);
  BERTCC_CUDA_LAUNCHED("scale");
}
void gelu_bias_backward(bf16_t* dinp16, float* db, const bf16_t* inp16, const float* dout, int64_t M, int64_t N,
                        Activation act, bf16_t* out16) {
  if (M == 0 || N == 0) return;
  const int64_t chunks = (M + kColRows - 1) / kColRows;
  BERTCC_CHECK(chunks <= 65535, "gelu_bias_backward: ", M, " rows is more than this kernel's grid takes");
  static Scratch buf;  // the partials, kept from call to call
  float* part = buf.take<float>(static_cast<size_t>(chunks * N));
  const dim3 grid(static_cast<unsigned>((N + 31) / 32), static_cast<unsigned>(chunks));
  pw::gelu_bwd_colsum<kColRows>
      <<<grid, 256, 0, stream()>>>(reinterpret_cast<uint16_t*>(dinp16), part, reinterpret_cast<const uint16_t*>(inp16),
                                   dout, M, N, act == Activation::GeluErf, reinterpret_cast<uint16_t*>(out16));
  BERTCC_CUDA_LAUNCHED("gelu_bias_backward");
  colsum_pass2<<<grid_for(N, kThreads), kThreads, 0, stream()>>>(db, nullptr, part, chunks, N);
  BERTCC_CUDA_LAUNCHED("gelu_bias_backward (bias)");
}

void bias_backward(float* db, const float* dy, int64_t M, int64_t N) {
  if (N == 0) return;
  column_sums(db, nullptr, dy, nullptr, nullptr, nullptr, M, N, "bias_backward");
}

}  // namespace bertcc::cuda
