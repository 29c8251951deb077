// int8 linear layers (dynamic quantization, --precision int8): weights quantized once per output
// channel, activations per row at run time, products accumulated exactly in int32 (bertcc's own
// kernels on AVX512-VNNI, AVX-VNNI, AVX-512 and AVX2; oneDNN's int8 matmul on AMX-INT8), then
// rescaled in fp32.
//
// Weights are 7-bit, in [-63, 63]. On CPUs without VNNI oneDNN multiplies u8 x s8 pairs with
// vpmaddubsw, whose 16-bit pair sums saturate (it shifts s8 activations to u8 internally): with
// activations in [-127, 127] shifted to [1, 255] and weights in [-63, 63] a pair sum is at most
// 2 * 255 * 63 = 32130 < 32767, so nothing saturates on any x86 CPU. The int32 sums are then exact
// integers whatever the kernel, and int8 results are bit-identical across ISAs and batches for
// the same activation bits (Int8Weight::act_max: 8, or 7 where AVX2 multiplies them faster).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <vector>

#include "bertcc/config.h"

namespace bertcc::kernels {

constexpr int kInt8WeightMax = 63;       // 7-bit weights (see above)
constexpr int kInt8ActivationMax = 127;  // symmetric s8 activations, per row
// 7-bit activations ([-63, 63]): what --int8-activation-bits 7 (auto's choice on a CPU without VNNI
// or AVX-512) quantizes the layers' inputs to. With 7-bit weights 4 products of them shifted to u8
// add in 16 bits without saturating, so bertcc's AVX2 kernel multiplies two k-quads with 3
// instructions instead of 4 (gemm_int8_rows.cpp). Twice the activations' rounding error.
constexpr int kInt8ActivationMax7 = 63;

// The symmetric rule every int8 quantization here follows (rows: quantize_rows_int8; the
// attention's v: per column). From the largest |x| of the set, as its bits with the sign cleared
// (int8_abs_bits: non-negative floats order as their bits, so the max is an integer reduction
// that vectorises, and a NaN or infinity shows as bits >= infinity's): scale = amax / qmax and the
// inverse qmax / amax, held at FLT_MAX where amax is so small (below about 4e-37) that it would
// overflow (no 0 x infinity then: such a set quantizes to fewer steps, and without NaN); an
// all-zero set has scale 0, a non-finite one NaN (its products become NaN), and both inverse 0. A
// value: nearbyint(x * inv) clamped to [-qmax, qmax] (NaN, which only a non-finite value times
// inverse 0 gives, clamps to qmax: its set's scale is NaN anyway).
struct Int8Scale {
  float scale, inv;
};
inline uint32_t int8_abs_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u & 0x7fffffffu;
}
inline Int8Scale int8_scale(uint32_t amax_bits, int qmax) {
  if (amax_bits == 0) return {0.0f, 0.0f};
  if (amax_bits >= 0x7f800000u) return {std::numeric_limits<float>::quiet_NaN(), 0.0f};
  float amax;
  std::memcpy(&amax, &amax_bits, 4);
  return {amax / static_cast<float>(qmax),
          std::min(static_cast<float>(qmax) / amax, std::numeric_limits<float>::max())};
}
// (Clamped first, then rounded by adding and subtracting 1.5 * 2^23, round-half-even as nearbyint
// in the default rounding mode for |v| <= 2^22: the same integers as nearbyint then the clamp, for
// NaN and infinities too, and no call to nearbyintf where the build's ISA has no rounding
// instruction (generic x86-64: SSE2), so the loops vectorise there. The clamp between the product
// and the addition leaves no x * inv + c for the compiler to contract into an FMA.)
inline int8_t int8_quantize(float x, float inv, float lim) {
  const float v = std::max(-lim, std::min(lim, x * inv));  // (NaN: lim)
  return static_cast<int8_t>((v + 12582912.0f) - 12582912.0f);
}

struct PackedWeights;  // q in the layout oneDNN's int8 matmul reads fastest (onednn_runtime.h)
struct Int8Panels;     // q in the panels of bertcc's own int8 kernel (gemm_int8_rows.cpp)

// A weight W[N, K] (HF layout: output channels as rows) quantized per output channel:
// W[n, k] ~ q[n * K + k] * scale[n], scale[n] = max_k |W[n, k]| / kInt8WeightMax.
// After pack_int8_weight, q may be empty and `packed` hold the same integers in oneDNN's blocked
// layout instead, or `panels` in bertcc's own kernel's.
struct Int8Weight {
  int64_t N = 0, K = 0;
  // The bound the layer's inputs are quantized to (kInt8ActivationMax or kInt8ActivationMax7):
  // linear_forward_int8 and the fused layers quantize x with it, and the own kernel's panels are
  // laid out for it. Rows already quantized (the _q forms) must be within it.
  int act_max = kInt8ActivationMax;
  std::vector<int8_t> q;
  std::vector<float> scale;
  std::shared_ptr<const PackedWeights> packed;
  std::shared_ptr<const Int8Panels> panels;
};

// Symmetric per-row quantization of x[M, K] to q (M * K) with bound qmax:
// scale[m] = max_k |x[m, k]| / qmax, q = round-half-even(x * (qmax / max)) clamped to [-qmax, qmax];
// a row of zeros has scale 0 and q 0. Each row's result depends on that row alone.
void quantize_rows_int8(const float* x, int64_t M, int64_t K, int qmax, int8_t* q, float* scale);
Int8Weight quantize_weight_int8(const float* W, int64_t N, int64_t K);
// An embedding table E[V, C] per row, 8-bit (bound kInt8EmbeddingMax: no product of it goes through
// a 16-bit sum, so no saturation asks for 7), as --precision int8 reads the word embeddings; left
// plain (a lookup reads rows).
constexpr int kInt8EmbeddingMax = 127;
Int8Weight quantize_embeddings_int8(const float* E, int64_t V, int64_t C);

// Lays w.q out once for the kernel that will multiply it, and frees q. On AVX512-VNNI without
// AMX: bertcc's own kernel's panels (int8_own_kernel_preferred: its rescale and row epilogues
// fused). Elsewhere oneDNN's preferred blocked layout where it has one (AMX-INT8), with its s8
// compensation precomputed: the matmul then skips copying and summing the weights on every call
// (16 % of a bert-base feed-forward GEMM at 2 threads, half of a batch-of-one call's time). Where oneDNN's preferred
// layout is a plain one (its AVX2 gemm, which repacks the weights on every call), the own kernel's panels again.
// set_row_gemm Always/Never force the own kernel or oneDNN (tests). The products are exact integers either way, so the
// layers' outputs keep their bits. Returns whether it packed (either way).
bool pack_int8_weight(Int8Weight& w);

// bertcc's own int8 kernels (gemm_int8_rows.cpp): q [N, K] (7-bit values) laid out once as
// 16-column panels with their column sums; products in exact int32 from activations shifted to u8
// (a + 128) less 128 x the column sums. Avx512Vnni: vpdpbusd on zmm, 8 rows x 48 columns; AvxVnni:
// vpdpbusd on ymm (AVX-VNNI without AVX-512), 6 x 16; Avx512Bw: vpmaddubsw (7-bit weights: no
// saturation) then vpmaddwd on zmm (AVX-512 without VNNI), 8 x 48; Avx2: the same on ymm, 4 x 16;
// Portable: plain loops. All give the same integers as gemm_s8s8s32, and the same rescaled bits.
enum class Int8Kernel { Portable, Avx2, AvxVnni, Avx512Bw, Avx512Vnni };
bool int8_kernel_available(Int8Kernel k);  // whether this CPU (and oneDNN's ISA limit) runs k
Int8Kernel int8_own_kernel();              // the fastest of them here
// Whether the own kernel beats oneDNN's int8 matmul here: AVX512-VNNI without AMX, where its
// rescale and the layers' row epilogues are fused (pack_int8_weight then lays weights out for it).
bool int8_own_kernel_preferred();
// act_max: the activations' bound (kInt8ActivationMax, or kInt8ActivationMax7: activations shifted by
// 64, and on AVX2 two k-quads a step; activations beyond it would saturate there).
std::shared_ptr<const Int8Panels> pack_int8_panels(const int8_t* q, int64_t N, int64_t K,
                                                   int act_max = kInt8ActivationMax);
// acc[M, N] = a[M, K] q^T in exact int32.
void gemm_int8_panels(const int8_t* a, const Int8Panels& w, int32_t* acc, int64_t M, Int8Kernel k = int8_own_kernel());
// y[m, n] = fma(float(acc[m, n]), sm * sw[n], b[n]) (b null: 0) for one row: the rescale every int8
// path uses, so that each gives the same bits.
void rescale_int8_row(float* y, const int32_t* acc, float sm, const float* sw, const float* b, int64_t N);
// A row epilogue: called once for each output row m with the row (which it may overwrite), from
// any thread, while the row is in cache. It must not run an int8 layer itself (the row may be in
// that thread's scratch buffer, which the layer would reuse).
using Int8RowFn = std::function<void(int64_t m, float* row)>;
// The int8 layer on the own kernel: rows of xq [M, K] (scales sx) against w (scales sw, bias b or
// null), rescaled in the kernel (rescale_int8_row's bits) into y [M, N], then f (null: none) on
// each row. y null: the rows go to scratch buffers and f (then required) takes them from there.
void linear_int8_panels(float* y, const int8_t* xq, const float* sx, const Int8Panels& w, const float* sw,
                        const float* b, int64_t M, const Int8RowFn* f, Int8Kernel k = int8_own_kernel());

// acc[M, N] = a[M, K] b[N, K]^T in exact int32 (oneDNN's s8 x s8 -> s32 matmul).
void gemm_s8s8s32(const int8_t* a, const int8_t* b, int32_t* acc, int64_t M, int64_t N, int64_t K);

// y[M, N] = x[M, K] W^T + b, int8: x quantized per row (bound W.act_max), then
// y[m, n] = fma(float(acc[m, n]), sx[m] * sw[n], b[n]) (b null: 0). A row's output depends on that
// row alone (no batch dependence), and on no ISA detail.
void linear_forward_int8(float* y, const float* x, const Int8Weight& W, const float* b, int64_t M);

// linear_forward_int8 on rows already quantized (xq[M, K], scales sx[M]).
void linear_forward_int8_q(float* y, const int8_t* xq, const float* sx, const Int8Weight& W, const float* b, int64_t M);

// An int8 linear layer, its GELU and the next layer's quantization in one pass over each row:
// (q, scale) = quantize_rows_int8(gelu(linear_forward_int8_q(xq, sx, W, b)), qmax) (qmax: the next
// layer's act_max), the same bits, without the fp32 intermediate in memory.
void linear_gelu_quantize_int8(int8_t* q, float* scale, const int8_t* xq, const float* sx, const Int8Weight& W,
                               const float* b, int64_t M, Activation act, int qmax = kInt8ActivationMax);

// The LayerNorm after a linear layer: out = LN(y + residual) as residual_layernorm_forward writes
// it (out, sum (may be null), mean, rstd; weights w, b; epsilon eps), for y the layer's output.
struct Int8LayerNorm {
  float *out, *sum, *mean, *rstd;
  const float *residual, *w, *b;
  float eps;
};

// An int8 linear layer and the residual LayerNorm after it, in one pass over each row: the same bits
// as linear_forward_int8 then residual_layernorm_forward, without the layer's output in memory.
void linear_residual_layernorm_int8(const Int8LayerNorm& ln, const float* x, const Int8Weight& W, const float* b,
                                    int64_t M);
void linear_residual_layernorm_int8_q(const Int8LayerNorm& ln, const int8_t* xq, const float* sx, const Int8Weight& W,
                                      const float* b, int64_t M);

// An encoder layer's feed-forward block and its LayerNorm in int8: LN(gelu(x W1^T + b1) W2^T + b2 +
// residual), the same bits as linear_forward_int8, gelu_forward, linear_forward_int8 and
// residual_layernorm_forward in turn (the encoder's residual is x itself: ln.residual = x).
void ffn_layernorm_int8(const Int8LayerNorm& ln, const float* x, const Int8Weight& W1, const float* b1,
                        const Int8Weight& W2, const float* b2, int64_t M, Activation act);

// Self-attention for int8 inference (attention_int8.cpp): ctx = softmax(q k^T / sqrt(d) + mask) v
// with both products in exact int32 (q per row 8-bit, k per row and v per column 7-bit, P as the
// 8-bit table below at the nearest 128th of max - s, normalized by its exact integer sum), no
// dropout. qkv [rows, 3C] (q | k | v) into out [rows, C]. Either packed rows, sequence b being rows
// cu[b] to cu[b+1] (mask_add null), or padded ones (cu null): sequence b rows b T to (b+1) T with
// the additive mask mask_add[b T + j] on key j (keys at <= -10000 are hidden: they add nothing).
// A sequence's result depends on its own rows alone, on every ISA the same bits.
void attention_int8_forward(float* out, const float* qkv, const int64_t* cu, const float* mask_add, int64_t B,
                            int64_t T, int64_t C, int64_t NH);
// P's 8 bits: table[t] = round(254 exp(-t / kAttentionExpSteps)) (in double) for t <
// kAttentionExpTable (254 at t = 0, 0 from t = 798 on), t = the nearest step of max - s.
constexpr int kAttentionExpSteps = 128, kAttentionExpTable = 800;
const int32_t* attention_int8_exp_table();
// Whether the kernel computes the table's entries in its loop (where they round to it, checked for
// every entry once) rather than reading it; force_table (tests): read it, for the same bits.
bool attention_int8_exp_computed();
void attention_int8_force_table(bool on);

// Achieved tera-ops/s of the int8 products on [M, K] x [K, N] (operands already int8, weights held
// as the model holds them for activations bounded by act_max): bench infer's ceiling for int8 runs.
double gemm_int8_probe_tops(int64_t M, int64_t N, int64_t K, int iters, int act_max = kInt8ActivationMax);

}  // namespace bertcc::kernels
