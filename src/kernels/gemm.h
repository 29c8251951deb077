// GEMM through oneDNN matmul. Row-major; op(X) = X or X^T chosen per operand.
//   C[M,N] = alpha * op(A)[M,K] @ op(B)[K,N] (+ bias[N]) (+ C if accumulate)
// fp32: exact fp32 GEMM. bf16: A and B rounded to bf16, products accumulated in fp32,
// C stays fp32 (on AMX or AVX512-BF16 where the CPU has them).
#pragma once
#include <cstdint>
#include <memory>

#include "bertcc/config.h"
#include "bertcc/dtype.h"
#include "bertcc/gemm_args.h"

namespace bertcc::kernels {

// The arguments (gemm_args.h), shared with the CUDA kernels.
using bertcc::GemmArgs;

void gemm(const GemmArgs& g, Precision p);

// Convenience for Linear layers with HF weights W[N,K]:
//   forward:   y[M,N] = x[M,K] W^T + b
//   backward:  dx[M,K] += dy W ;  dW[N,K] += dy^T x   (backward adds, so tied weights just work)
// W16: optional bf16 copy of W; x16, dy16: optional bf16 roundings of x and dy (bf16 precision only;
// the same bits as rounding x and dy here).
void linear_forward(float* y, const float* x, const float* W, const float* b, int64_t M, int64_t N, int64_t K,
                    Precision p, const bf16_t* W16 = nullptr, const bf16_t* x16 = nullptr);
void linear_backward(float* dx, float* dW, float* db, const float* dy, const float* x, const float* W, int64_t M,
                     int64_t N, int64_t K, Precision p, const bf16_t* W16 = nullptr, const bf16_t* dy16 = nullptr,
                     const bf16_t* x16 = nullptr);

// An fp32 weight W[N, K] reordered once into the layout the fp32 linear layer reads, so that a
// call does not copy W into it again: for inference, where the weights do not change. oneDNN's
// blocked layout where its brgemm kernels run fp32 (AVX-512, AMX); the row kernel's panels where
// that kernel runs fp32 (AVX2 CPUs; the weights stay in panels, and so on the row kernel, whatever
// set_row_gemm says later). Null where oneDNN prefers a plain layout.
struct PackedWeights;  // onednn_runtime.h
std::shared_ptr<const PackedWeights> pack_linear_weight(const float* W, int64_t N, int64_t K);
// linear_forward(y, x, W, b, M, N, K, fp32) on the packed W (as linear_forward ran when it was
// packed): the same kernels on the same values, so the same bits (tested), whatever M.
void linear_forward_packed(float* y, const float* x, const PackedWeights& W, const float* b, int64_t M);
// The feed-forward block y = act(x W1^T + b1) W2^T + b2 (x [M, C], W1 [I, C], W2 [C, I]) on both
// weights packed, for inference: false (nothing done) unless both are in the row kernel's panels.
// The same bits as linear_forward_packed, gelu_forward and linear_forward_packed in turn (tested):
// ffn_rows_packed below (scratch: as there).
bool ffn_forward_packed(float* y, const float* x, const PackedWeights& W1, const float* b1, const PackedWeights& W2,
                        const float* b2, int64_t M, Activation act, float* scratch);
// The same for bf16 inference where oneDNN's bf16 matmul is native (AVX512-BF16, AMX): W's bf16
// copy W16 packed once (null where bf16 is emulated); the layer on it takes x's rounding x16 and
// gives linear_forward(y, x, W, b, M, N, K, bf16, W16, x16)'s bits.
std::shared_ptr<const PackedWeights> pack_linear_weight_bf16(const bf16_t* W16, int64_t N, int64_t K);
void linear_forward_packed_bf16(float* y, const bf16_t* x16, const PackedWeights& W, const float* b, int64_t M);

// The fp32 linear layer whose output rows do not depend on the batch: y[M,N] = x[M,K] W^T + b with
// every element a fixed function of its own row of x and of W (fixed lanes and reduction order over
// K; gemm_rows.cpp), whatever M, the neighbouring rows or the thread count. linear_forward takes it
// for fp32 (and emulated bf16) where oneDNN's fp32 matmul does not keep that property: oneDNN's
// AVX2 sgemm picks its kernels and its K split by the row count, so a sequence's outputs changed
// with its batch there, while its avx512_core brgemm kernels do not (onednn_f32_rows_invariant).
void linear_forward_rows(float* y, const float* x, const float* W, const float* b, int64_t M, int64_t N, int64_t K);
// The row kernel on W[N, K] laid out once as its 16-column panels (pack_row_panels into
// row_panels_size(N, K) floats): the same arithmetic, so the same bits as linear_forward_rows.
int64_t row_panels_size(int64_t N, int64_t K);
void pack_row_panels(const float* W, int64_t N, int64_t K, float* out);
void linear_forward_rows_packed(float* y, const float* x, const float* panels, const float* b, int64_t M, int64_t N,
                                int64_t K);
// The feed-forward block on weights in panels (W1 [I, C], W2 [C, I]): the first layer's outputs
// activated (gelu_forward_serial) as its tiles finish and written straight into the layout the
// second layer reads its rows in, so that the inner rows (4 x the hidden size) go through memory
// once instead of four times (the first layer's output, the GELU's read and write, the second
// layer's copy of them). The same arithmetic as linear_forward_rows_packed, gelu_forward and
// linear_forward_rows_packed, so the same bits.
// scratch: ffn_rows_scratch_floats(M, I) floats for the inner rows (not y or x).
void ffn_rows_packed(float* y, const float* x, const float* panels1, const float* b1, const float* panels2,
                     const float* b2, int64_t M, int64_t C, int64_t I, Activation act, float* scratch);
int64_t ffn_rows_scratch_floats(int64_t M, int64_t I);
// The same arithmetic without SIMD (the reference the AVX2 kernel is tested against, bit for bit).
void linear_forward_rows_portable(float* y, const float* x, const float* W, const float* b, int64_t M, int64_t N,
                                  int64_t K);
// Automatic: the row kernel where oneDNN is not row-invariant; Always/Never for tests and benchmarks.
enum class RowGemm { Auto, Always, Never };
void set_row_gemm(RowGemm mode);
RowGemm row_gemm_mode();  // what set_row_gemm set (Auto unless a test forced a kernel)
bool row_gemm_active();
// Whether linear_forward (and the packed and int8 layers) give a row the same bits at every row
// count M on this CPU, M = 1 included: int8 always (exact int32 sums, per-row quantization); fp32
// always (the row kernel, or oneDNN's avx512_core brgemm); bf16 where it is emulated (the fp32 GEMM
// on the roundings: CPUs without AVX512-BF16 or AMX-BF16) or on oneDNN's avx512_core_bf16 brgemm.
// Not, unmeasured, bf16 on AMX (whose kernels may split K across threads at small M). What a
// computation on a subset of rows relies on (Encoder::encode's [CLS] rows).
bool linear_rows_invariant(Precision p);

// db[N] += sum over rows of dy[M,N]; deterministic for any thread count.
void bias_backward(float* db, const float* dy, int64_t M, int64_t N);

}  // namespace bertcc::kernels

namespace bertcc::kernels {
// Achieved TFLOP/s of a bare oneDNN matmul C[M,N] = A[M,K] B[K,N] in the given precision
// (operands already in that precision): the ceiling our GEMMs are measured against.
double gemm_probe_tflops(int64_t M, int64_t N, int64_t K, Precision p, int iters);
}  // namespace bertcc::kernels
