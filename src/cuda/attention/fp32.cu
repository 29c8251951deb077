// Fused multi-head attention in fp32 on CUDA cores (--precision fp32: exact fp32, no TF32; the
// kernels: attention/fp32_kernels.cuh), and the entry points, which send bf16/fp16 to the Tensor
// Core kernels (attention/tensor_core.cu).
#include "cuda/attention/fp32_kernels.cuh"
#include "cuda/cuda_kernels.h"

namespace bertcc::cuda {
namespace {

using attn::Shape;
using attn::f32::kRows;

// The table of a varlen call (attn::varlen_table) on the device; as attention/tensor_core.cu's, the stream
// order keeps the next call's upload from overwriting it before this call's kernels have read it.
const int64_t* upload_table(const std::vector<int64_t>& t) {
  static Scratch buf;
  return buf.upload(t.data(), t.size());
}

}  // namespace

namespace attn {

// fp32 saves no decision bits: the table's slices are lse alone (varlen_table with drop false;
// the dropout numbers' bases still follow one another).
void forward_f32_varlen(float* out, float* saved, const float* qkv, const int64_t* cu, int64_t B, const Shape& s) {
  const std::vector<int64_t> t = varlen_table(cu, B, s.NH, false, s.base, kRows);
  const int64_t* seqs = upload_table(t);
  const dim3 grid(static_cast<unsigned>((t.size() - 4 * B) / 2), static_cast<unsigned>(s.NH));
  dispatch_hs(s.hs, [&](auto hs) {
    f32::fwd<decltype(hs)::value, true><<<grid, kRows, 0, stream()>>>(out, saved, qkv, nullptr, s, seqs, B);
  });
  BERTCC_CUDA_LAUNCHED("attention_varlen_forward (fp32)");
}

void backward_f32_varlen(float* dqkv, float* D, const float* dout, const float* out, const float* qkv,
                         const float* saved, const int64_t* cu, int64_t B, const Shape& s) {
  const std::vector<int64_t> t = varlen_table(cu, B, s.NH, false, s.base, kRows);
  const int64_t* seqs = upload_table(t);
  row_dots_varlen<<<grid_for(s.T * s.NH * 32, 256), 256, 0, stream()>>>(D, dout, out, seqs, B, s.T, s.C, s.NH);
  BERTCC_CUDA_LAUNCHED("attention_varlen_backward (row dots, fp32)");
  const dim3 grid(static_cast<unsigned>((t.size() - 4 * B) / 2), static_cast<unsigned>(s.NH));
  dispatch_hs(s.hs, [&](auto hs) {
    f32::bwd_dq<decltype(hs)::value, true>
        <<<grid, kRows, 0, stream()>>>(dqkv, dout, qkv, saved, D, nullptr, s, seqs, B);
    BERTCC_CUDA_LAUNCHED("attention_varlen_backward (dq, fp32)");
    f32::bwd_dkdv<decltype(hs)::value, true>
        <<<grid, kRows, 0, stream()>>>(dqkv, dout, qkv, saved, D, nullptr, s, seqs, B);
    BERTCC_CUDA_LAUNCHED("attention_varlen_backward (dk, dv, fp32)");
  });
}

}  // namespace attn

int64_t attention_saved_size(int64_t B, int64_t T, int64_t C, int64_t NH, bool dropout, Precision prec,
                             bool qkv16_kept) {
  const bool operands = prec == Precision::BF16 && !qkv16_kept;
  return attn::operands_offset(B, NH, T, dropout, prec) +
         (operands ? (attn::saved_operand_elems(B, T, C, NH, prec) + 1) / 2 : 0);
}

void attention_forward(float* out, float* lse, const float* qkv, const float* mask_add, int64_t B, int64_t T, int64_t C,
                       int64_t NH, float dropout_p, const Rng& rng, uint64_t base, Precision prec, bf16_t* out16,
                       const bf16_t* qkv16) {
  if (B * T == 0) return;
  BERTCC_CHECK(out16 == nullptr || prec == Precision::BF16, "attention_forward: a bf16 output copy outside bf16");
  BERTCC_CHECK(qkv16 == nullptr || prec == Precision::BF16, "attention_forward: a bf16 qkv outside bf16");
  BERTCC_CHECK(out || out16, "attention_forward: no output");
  BERTCC_CHECK(qkv || qkv16, "attention_forward: no qkv");
  const Shape s = attn::make_shape(B, T, C, NH, dropout_p, rng, base);
  if (prec != Precision::F32)
    return attn::forward_tc(out, reinterpret_cast<uint16_t*>(out16), lse, qkv, reinterpret_cast<const uint16_t*>(qkv16),
                            mask_add, s, prec);
  const dim3 grid(grid_for(T, kRows), static_cast<unsigned>(B * NH));
  attn::dispatch_hs(C / NH, [&](auto hs) {
    attn::f32::fwd<decltype(hs)::value, false><<<grid, kRows, 0, stream()>>>(out, lse, qkv, mask_add, s, nullptr, 0);
  });
  BERTCC_CUDA_LAUNCHED("attention_forward");
}

int64_t attention_backward_work_size(int64_t B, int64_t T, int64_t NH) { return B * NH * T; }

void attention_backward(float* dqkv, float* work, const float* dout, const float* qkv, const float* out,
                        const bf16_t* out16, const float* lse, const float* mask_add, int64_t B, int64_t T, int64_t C,
                        int64_t NH, float dropout_p, const Rng& rng, uint64_t base, Precision prec, bf16_t* dqkv16,
                        const bf16_t* qkv16) {
  if (B * T == 0) return;
  BERTCC_CHECK(qkv16 == nullptr || prec == Precision::BF16, "attention_backward: a bf16 qkv outside bf16");
  BERTCC_CHECK(dqkv16 == nullptr || prec == Precision::BF16, "attention_backward: a bf16 gradient copy outside bf16");
  BERTCC_CHECK(out || (out16 && prec == Precision::BF16),
               "attention_backward: no forward output (a null out needs its bf16 rounding, in bf16)");
  const Shape s = attn::make_shape(B, T, C, NH, dropout_p, rng, base);
  if (out)
    attn::f32::bwd_dot<<<grid_for(B * NH * T * 32, 256), 256, 0, stream()>>>(work, dout, out, s, C / NH);
  else
    attn::f32::bwd_dot<<<grid_for(B * NH * T * 32, 256), 256, 0, stream()>>>(
        work, dout, reinterpret_cast<const uint16_t*>(out16), s, C / NH);
  BERTCC_CUDA_LAUNCHED("attention_backward (row dots)");
  if (prec != Precision::F32)
    return attn::backward_tc(dqkv, reinterpret_cast<uint16_t*>(dqkv16), dout, qkv,
                             reinterpret_cast<const uint16_t*>(qkv16), lse, work, mask_add, s, prec);
  const dim3 grid(grid_for(T, kRows), static_cast<unsigned>(B * NH));
  attn::dispatch_hs(C / NH, [&](auto hs) {
    attn::f32::bwd_dq<decltype(hs)::value, false>
        <<<grid, kRows, 0, stream()>>>(dqkv, dout, qkv, lse, work, mask_add, s, nullptr, 0);
    BERTCC_CUDA_LAUNCHED("attention_backward (dq)");
    attn::f32::bwd_dkdv<decltype(hs)::value, false>
        <<<grid, kRows, 0, stream()>>>(dqkv, dout, qkv, lse, work, mask_add, s, nullptr, 0);
    BERTCC_CUDA_LAUNCHED("attention_backward (dk, dv)");
  });
}

}  // namespace bertcc::cuda
