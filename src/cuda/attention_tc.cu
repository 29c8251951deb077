// Fused multi-head attention on Tensor Cores, for --precision bf16 and fp16: FlashAttention-2's
// tiling with mma.sync.m16n8k16 (bf16 or fp16 operands, fp32 accumulation; sm_80 and later). The
// kernels are in attention_tc_kernels.cuh (also compiled for the CPU by tests/cuda/sim); this file
// launches them.
//
// The T x T scores never reach memory. Rounding to 16 bits: q, k, v and dout; in the forward, the
// unnormalised exp(S - running max) (times 1/(1-p) where dropout keeps it) before P.V, divided by
// the row sum at the end; in the backward, Pd and dS (already times 1/sqrt(hs)) before their
// products. The CPU's bf16 attention rounds the normalised Pd and dS before the scale, so the two
// agree to rounding (bit-equal only by chance); softmax statistics and every sum stay fp32.
//
// One block = 4 warps = 64 rows (16 per warp); its loop walks the other side in tiles of BN (64,
// or 32 for head size 128). Inputs are read in fp32 from qkv[B,T,3C] and dout[B,T,C], rounded and
// stored in shared memory, row-major ([row][channel], for A operands and the B operand of Q K^T)
// and, where a product needs it, transposed ([channel][row]). Rows are padded by 8 elements
// (16 bytes) so that a warp's 32-bit fragment loads hit 32 different banks.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"; CUTLASS's
// SM80_16x8x16 traits agree): lane = 4*g + t.
//   A (16x16, row-major): reg0 (g, 2t..2t+1), reg1 (g+8, 2t..), reg2 (g, 8+2t..), reg3 (g+8, 8+2t..)
//   B (16x8, k x n):      reg0 (k 2t..2t+1, n g), reg1 (k 8+2t.., n g)
//   C (16x8, fp32):       c0, c1 (g, 2t..2t+1), c2, c3 (g+8, 2t..2t+1)
// (the lower index in the lower 16 bits), so two adjacent C tiles (columns 0-7 and 8-15) are,
// rounded, the A operand of the next product.
//
// Forward: per query row an online softmax (row max and sum reduced over the 4 lanes of a group);
// saves lse. Backward, without atomics (the result does not depend on scheduling), as the fp32
// kernels: one kernel per query block for dq, one per key block for dk and dv, each recomputing
// P = exp(S - lse) and the dropout mask.
#include "cuda/attention_tc_kernels.cuh"

namespace bertcc::cuda::attn {
namespace {

using namespace tc;

// The kernel's dynamic shared-memory limit raised to `bytes` (needed above 48 KB; a driver call
// far cheaper than the kernel it precedes).
template <class Kernel>
void launch_smem(Kernel k, size_t bytes) {
  BERTCC_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

void require_tensor_cores(Precision prec) {
  static int checked_for = -1;
  int dev = 0, major = 0;
  BERTCC_CUDA_CHECK(cudaGetDevice(&dev));
  if (checked_for == dev) return;
  BERTCC_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  BERTCC_CHECK(major >= 8, "attention with --precision ", prec == Precision::BF16 ? "bf16" : "fp16",
               " on CUDA needs Tensor Cores with bf16/fp16 mma (compute capability 8.0 or later); device ", dev,
               " has ", major, ".x: use --precision fp32");
  checked_for = dev;
}

// f(bf16?, head size) for the kernels of `prec` and s.hs, after the device check.
template <class F>
void dispatch_tc(const Shape& s, Precision prec, F f) {
  require_tensor_cores(prec);
  BERTCC_CHECK(prec == Precision::BF16 || prec == Precision::F16, "attention on Tensor Cores: fp32 has its own kernels");
  auto with_hs = [&](auto bf) { dispatch_hs(s.hs, [&](auto hs) { f(bf, hs); }); };
  if (prec == Precision::BF16) return with_hs(std::true_type{});
  with_hs(std::false_type{});
}

}  // namespace

void forward_tc(float* out, float* lse, const float* qkv, const float* mask_add, const Shape& s, Precision prec) {
  const dim3 grid(grid_for(s.T, kBlockRows), static_cast<unsigned>(s.B * s.NH));
  dispatch_tc(s, prec, [&](auto bf, auto hs) {
    constexpr bool BF = decltype(bf)::value;
    constexpr int HS = decltype(hs)::value;
    launch_smem(fwd<BF, HS>, fwd_smem<BF, HS>());
    fwd<BF, HS><<<grid, kThreads, fwd_smem<BF, HS>()>>>(out, lse, qkv, mask_add, s);
    BERTCC_CUDA_LAUNCHED("attention_forward (Tensor Cores)");
  });
}

void backward_tc(float* dqkv, const float* dout, const float* qkv, const float* lse, const float* D,
                 const float* mask_add, const Shape& s, Precision prec) {
  const dim3 grid(grid_for(s.T, kBlockRows), static_cast<unsigned>(s.B * s.NH));
  dispatch_tc(s, prec, [&](auto bf, auto hs) {
    constexpr bool BF = decltype(bf)::value;
    constexpr int HS = decltype(hs)::value;
    launch_smem(bwd_dq<BF, HS>, dq_smem<BF, HS>());
    bwd_dq<BF, HS><<<grid, kThreads, dq_smem<BF, HS>()>>>(dqkv, dout, qkv, lse, D, mask_add, s);
    BERTCC_CUDA_LAUNCHED("attention_backward (dq, Tensor Cores)");
    launch_smem(bwd_dkdv<BF, HS>, dkv_smem<BF, HS>());
    bwd_dkdv<BF, HS><<<grid, kThreads, dkv_smem<BF, HS>()>>>(dqkv, dout, qkv, lse, D, mask_add, s);
    BERTCC_CUDA_LAUNCHED("attention_backward (dk, dv, Tensor Cores)");
  });
}

}  // namespace bertcc::cuda::attn
