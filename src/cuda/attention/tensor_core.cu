// Fused multi-head attention on Tensor Cores, for --precision bf16 and fp16: FlashAttention-2's
// tiling with mma.sync.m16n8k16 (bf16 or fp16 operands, fp32 accumulation; sm_80 and later), its
// operands loaded from shared memory by ldmatrix. The
// kernels are in attention/tensor_core_kernels.cuh (also compiled for the CPU by tests/cuda/sim); this file
// launches them.
//
// The T x T scores never reach memory. Rounding to 16 bits: q, k, v and dout; in the forward, the
// unnormalised exp(S - running max) (times 1/(1-p) where dropout keeps it) before P.V, divided by
// the row sum at the end; in the backward, Pd and dS (already times 1/sqrt(hs)) before their
// products. The CPU's bf16 attention rounds the normalised Pd and dS before the scale, so the two
// agree to rounding (bit-equal only by chance); softmax statistics and every sum stay fp32.
//
// One block = 4 warps = 64 rows (16 per warp; with BERTCC_ATTENTION_FWD_ROWS=128 the forward 128,
// 32 per warp, for head sizes up to 64: fwd_mt below); its loop walks the other side in tiles of BN
// (64, or 32 for head size 128). The kernels read 16-bit rows: in bf16 models q, k and v in place
// from the QKV product's bf16 output qkv16 [B,T,3C] (row stride 3C; head size exactly 16, 32, 64 or
// 128); otherwise from a first pass (prep) that rounds q, k, v and dout from qkv[B,T,3C] (or
// qkv16) and dout[B,T,C] to 16 bits, per head and token-major ([row][channel]), zero-padded to
// whole 64-row tiles. The attention kernels copy rows into shared memory with cp.async (rows past T
// as zeros), the next tile while they compute on the current one (two buffers); the masks (and in
// dk/dv the queries' lse and D) of the whole sequence are loaded into shared memory once per block. ldmatrix reads a
// tile as an A operand, as the B operand of a product over channels (Q K^T) and, with .trans, as the B operand of a
// product over tokens (P V, dS K, Pd^T dO, dS^T Q). Shared-memory rows are padded by 8 elements (16 bytes) so that the
// eight 16-byte rows of each 8 x 8 matrix ldmatrix reads hit 32 different banks.
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
// saves lse and, with dropout, its keep/drop decisions as bits (each lane draws one Philox block
// per eight of its own decisions, 16 bits each; none are drawn in the backward). Backward, without atomics (the result
// does not depend on scheduling), as the fp32 kernels: one kernel per query block for dq, one per key block for dk and
// dv, each recomputing P = exp(S - lse) and reading the decisions.
//
// Padding: each kernel stops at its sequence's last key above BERT's padding mask (count_keys, one
// small launch per call): later key tiles add exactly nothing, so they are not visited, and dk/dv
// blocks wholly past that key write zeros. The same bits as visiting every key.
//
// Unpadded batches (forward_tc_varlen, backward_tc_varlen; bf16 from qkv16 in place): the same
// kernels' Varlen instances over every sequence of the batch in one launch, a block per
// (sequence, head, row tile) from a per-call table (attention/tensor_core_kernels.cuh: place, varlen_table).
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <optional>
#include <string>

#include "core/settings.h"
#include "cuda/attention/tensor_core_kernels.cuh"
#include "cuda/attention/varlen.h"
#include "cuda/op_timer.h"

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
  BERTCC_CHECK(prec == Precision::BF16 || prec == Precision::F16,
               "attention on Tensor Cores: fp32 has its own kernels");
  auto with_hs = [&](auto bf) { dispatch_hs(s.hs, [&](auto hs) { f(bf, hs); }); };
  if (prec == Precision::BF16) return with_hs(std::true_type{});
  with_hs(std::false_type{});
}

// Query rows per forward block: 64 (one m-tile of 16 rows per warp), or 128 (two m-tiles, head sizes up
// to 64) where BERTCC_ATTENTION_FWD_ROWS=128 asks for it. Timed on an H200, the
// one-m-tile form was faster in every shape of the attention bench (B 64, T 128: 0.185 against
// 0.247 ms; B 16, T 512: 0.551 against 0.624) and of `bench` (1-4 % per step), so it is the default.
// The variable exists for the attention bench, which times both forms (the same bits either way);
// anything but 64 or 128 is refused.
template <int HS>
int fwd_mt() {
  static const int rows = settings().attention_fwd_rows;
  return std::min(rows ? rows / kBlockRows : 1, fwd_max_mt<HS>());
}

// Blocks per SM the one-m-tile forward for head size 64 is compiled for: 1 (its registers, 138 a
// thread, allow 3 blocks of 4 warps), or 4 where BERTCC_ATTENTION_FWD_MIN_BLOCKS=4 asks for it (at
// most 128 registers, 12 bytes spilled, a third more warps to hide latency). Not measured yet: the
// attention bench times both (the same bits either way); anything but 1 or 4 is refused.
int fwd_min_blocks() {
  static const int blocks = settings().attention_fwd_min_blocks;
  return blocks ? blocks : 1;
}

// launch(m-tiles, blocks per SM) for the forward form the bench's variables ask for (fwd_mt,
// fwd_min_blocks), else launch(1, 1).
template <int HS, class Launch>
void fwd_form(Launch&& launch) {
  using One = std::integral_constant<int, 1>;
  if constexpr (fwd_max_mt<HS>() == 2) {
    if (fwd_mt<HS>() == 2) return launch(std::integral_constant<int, 2>{}, One{});
  }
  if constexpr (HS == 64) {
    if (fwd_min_blocks() == 4) return launch(One{}, std::integral_constant<int, 4>{});
  }
  launch(One{}, One{});
}

// Whether the kernels stop at each sequence's last unmasked key (attention/tensor_core_kernels.cuh:
// count_keys; the same bits either way). On unless set_attention_skip_padding(false) or
// BERTCC_ATTENTION_SKIP_PADDING=0 (for the attention bench and the tests that compare both).
std::atomic<int> g_skip_padding{-1};  // -1: as settings() say
bool skip_padding() {
  const int v = g_skip_padding.load();
  return v < 0 ? settings().attention_skip_padding : v == 1;
}

// Per sequence, the keys the kernels visit (count_keys), or null where every key is visited.
const int32_t* visited_keys(const float* mask_add, const Shape& s) {
  // T <= 32: one key tile and one dk/dv block hold every key (tiles of 32 or 64): nothing to skip
  if (!skip_padding() || !mask_add || s.T <= 32) return nullptr;
  static Scratch buf;  // grow-only; stream order keeps a later call from overwriting it early
  int32_t* n = buf.take<int32_t>(static_cast<size_t>(s.B));
  count_keys<<<static_cast<unsigned>(s.B), kThreads, 0, stream()>>>(n, mask_add, s.T);
  BERTCC_CUDA_LAUNCHED("attention (keys to visit)");
  return n;
}

// The 16-bit operands (attention/tensor_core_kernels.cuh: Operands) of one call, in one grow-only buffer
// (stream order keeps a later call from overwriting them before the kernels that read them ran).
uint16_t* operand_buffer(size_t elems) {
  static Scratch buf;
  return buf.take<uint16_t>(elems);
}

// `parts` consecutive operands (q, k, v from qkv: parts 3) from src (fp32, or a 16-bit qkv), one launch.
template <bool BF, int HS, class Src>
void launch_prep(uint16_t* rows, const Src* src, int64_t ld, const Shape& s, unsigned parts) {
  const int64_t Tp = padded_T(s.T);
  const bool vec = s.hs % 4 == 0 && ld % 4 == 0 && reinterpret_cast<uintptr_t>(src) % (4 * sizeof(Src)) == 0;
  prep<BF, HS, Src><<<dim3(static_cast<unsigned>(Tp / kBlockRows), static_cast<unsigned>(s.B * s.NH), parts), kThreads,
                      0, stream()>>>(rows, src, ld, s, Tp, vec);
  BERTCC_CUDA_LAUNCHED("attention (16-bit operands)");
}

// q, k, v (and dout's part, when dout is given) from a 16-bit qkv (bf16): read in place where the
// kernels can, else rounded (copied) into scratch with dout's operand after them.
template <bool BF, int HS>
void qkv16_operands(Operands& op, const uint16_t* qkv16, const float* dout, const Shape& s) {
  const int64_t n = operand_elems<HS>(s);
  uint16_t* d = nullptr;
  if (in_place_ok<HS>(qkv16, s)) {
    op.q = qkv_rows(qkv16, s, 0), op.k = qkv_rows(qkv16, s, 1), op.v = qkv_rows(qkv16, s, 2);
    if (dout) d = operand_buffer(static_cast<size_t>(n));
  } else {
    uint16_t* q = operand_buffer(static_cast<size_t>((dout ? 4 : 3) * n));
    launch_prep<BF, HS>(q, qkv16, 3 * s.C, s, 3);
    op.q = padded_rows<HS>(q, s, 0), op.k = padded_rows<HS>(q, s, 1), op.v = padded_rows<HS>(q, s, 2);
    if (dout) d = q + 3 * n;
  }
  if (dout) {
    launch_prep<BF, HS>(d, dout, s.C, s, 1);
    op.dout = padded_rows<HS>(d, s, 0);
  }
}

// ---- unpadded batches (varlen) ----
// The table of a call (varlen_table) on the device; stream order keeps the next call's upload from
// overwriting it before this call's kernels have read it (Scratch).
const int64_t* upload_table(const std::vector<int64_t>& t) {
  static Scratch buf;
  return buf.upload(t.data(), t.size());
}
int64_t longest(const int64_t* cu, int64_t B) {
  int64_t m = 0;
  for (int64_t b = 0; b < B; ++b) m = std::max(m, cu[b + 1] - cu[b]);
  return m;
}
}  // namespace

void forward_tc_varlen(float* out, uint16_t* out16, float* saved, const uint16_t* qkv16, const int64_t* cu, int64_t B,
                       const Shape& s) {
  require_tensor_cores(Precision::BF16);
  dispatch_hs(s.hs, [&](auto hs) {
    constexpr int HS = decltype(hs)::value;
    BERTCC_CHECK(in_place_ok<HS>(qkv16, s), "attention_varlen_forward: qkv16 not readable in place");
    Operands op;
    op.q = qkv_rows(qkv16, s, 0), op.k = qkv_rows(qkv16, s, 1), op.v = qkv_rows(qkv16, s, 2);
    if (s.drop) op.drop_bits = reinterpret_cast<uint32_t*>(saved);  // place moves it to each sequence's slice
    op.nseqs = B;
    const int64_t Tp = padded_T(longest(cu, B));
    fwd_form<HS>([&](auto mtc, auto blocks) {
      constexpr int MT = decltype(mtc)::value, MB = decltype(blocks)::value;
      const std::vector<int64_t> t = varlen_table(cu, B, s.NH, s.drop, s.base, MT * kBlockRows);
      op.seqs = upload_table(t);
      const dim3 grid(static_cast<unsigned>((t.size() - 4 * B) / 2), static_cast<unsigned>(s.NH));
      const size_t smem = fwd_smem<true, HS, MT>(Tp);
      launch_smem(fwd<true, HS, MT, MB, true>, smem);
      fwd<true, HS, MT, MB, true><<<grid, kThreads, smem, stream()>>>(out, out16, saved, op, nullptr, s);
    });
    BERTCC_CUDA_LAUNCHED("attention_varlen_forward (Tensor Cores)");
  });
}

void backward_tc_varlen(float* dqkv, uint16_t* dqkv16, float* D, const float* dout, const float* out,
                        const uint16_t* out16, const uint16_t* qkv16, const float* saved, const int64_t* cu, int64_t B,
                        const Shape& s) {
  require_tensor_cores(Precision::BF16);
  const std::vector<int64_t> t = varlen_table(cu, B, s.NH, s.drop, s.base, kBlockRows);
  const int64_t* seqs = upload_table(t);
  const unsigned dots = grid_for(s.T * s.NH * 32, 256);
  if (out)
    row_dots_varlen<<<dots, 256, 0, stream()>>>(D, dout, out, seqs, B, s.T, s.C, s.NH);
  else
    row_dots_varlen<<<dots, 256, 0, stream()>>>(D, dout, out16, seqs, B, s.T, s.C, s.NH);
  BERTCC_CUDA_LAUNCHED("attention_varlen_backward (row dots)");
  dispatch_hs(s.hs, [&](auto hs) {
    constexpr int HS = decltype(hs)::value;
    BERTCC_CHECK(in_place_ok<HS>(qkv16, s), "attention_varlen_backward: qkv16 not readable in place");
    Operands op;
    op.q = qkv_rows(qkv16, s, 0), op.k = qkv_rows(qkv16, s, 1), op.v = qkv_rows(qkv16, s, 2);
    // dout's operand: prep over the N rows as one sequence ([NH][N rounded up to 64][HS])
    uint16_t* d = operand_buffer(static_cast<size_t>(operand_elems<HS>(s)));
    launch_prep<true, HS>(d, dout, s.C, s, 1);
    op.dout = padded_rows<HS>(d, s, 0);
    if (s.drop) op.drop_bits = const_cast<uint32_t*>(reinterpret_cast<const uint32_t*>(saved));
    op.seqs = seqs, op.nseqs = B;
    const int64_t Tp = padded_T(longest(cu, B));
    const dim3 grid(static_cast<unsigned>((t.size() - 4 * B) / 2), static_cast<unsigned>(s.NH));
    launch_smem(bwd_dq<true, HS, true>, dq_smem<true, HS>(Tp));
    bwd_dq<true, HS, true><<<grid, kThreads, dq_smem<true, HS>(Tp), stream()>>>(dqkv, dqkv16, op, saved, D, nullptr, s);
    BERTCC_CUDA_LAUNCHED("attention_varlen_backward (dq, Tensor Cores)");
    launch_smem(bwd_dkdv<true, HS, true>, dkv_smem<true, HS>(Tp));
    bwd_dkdv<true, HS, true>
        <<<grid, kThreads, dkv_smem<true, HS>(Tp), stream()>>>(dqkv, dqkv16, op, saved, D, nullptr, s);
    BERTCC_CUDA_LAUNCHED("attention_varlen_backward (dk, dv, Tensor Cores)");
  });
}

void forward_tc(float* out, uint16_t* out16, float* lse, const float* qkv, const uint16_t* qkv16, const float* mask_add,
                const Shape& s, Precision prec) {
  dispatch_tc(s, prec, [&](auto bf, auto hs) {
    constexpr bool BF = decltype(bf)::value;
    constexpr int HS = decltype(hs)::value;
    const int64_t n = operand_elems<HS>(s);
    std::optional<OpTimer> part(std::in_place, "attention_forward/16-bit operands");
    Operands op;
    if (BF && qkv16) {
      qkv16_operands<BF, HS>(op, qkv16, nullptr, s);
    } else {
      // bf16: into the saved buffer, for the backward (attention/common.cuh); fp16: scratch
      uint16_t* q = BF ? reinterpret_cast<uint16_t*>(lse + operands_offset(s.B, s.NH, s.T, s.drop, prec))
                       : operand_buffer(3 * static_cast<size_t>(n));
      launch_prep<BF, HS>(q, qkv, 3 * s.C, s, 3);
      op.q = padded_rows<HS>(q, s, 0), op.k = padded_rows<HS>(q, s, 1), op.v = padded_rows<HS>(q, s, 2);
    }
    op.Tp = padded_T(s.T);
    if (s.drop) op.drop_bits = reinterpret_cast<uint32_t*>(lse + lse_floats(s.B, s.NH, s.T));
    op.nkeys = visited_keys(mask_add, s);
    part.reset();
    const OpTimer kernel("attention_forward/kernel");
    fwd_form<HS>([&](auto mtc, auto blocks) {
      constexpr int MT = decltype(mtc)::value, MB = decltype(blocks)::value;
      const dim3 grid(grid_for(s.T, MT * kBlockRows), static_cast<unsigned>(s.B * s.NH));
      const size_t smem = fwd_smem<BF, HS, MT>(op.Tp);
      launch_smem(fwd<BF, HS, MT, MB>, smem);
      fwd<BF, HS, MT, MB><<<grid, kThreads, smem, stream()>>>(out, out16, lse, op, mask_add, s);
    });
    BERTCC_CUDA_LAUNCHED("attention_forward (Tensor Cores)");
  });
}

void backward_tc(float* dqkv, uint16_t* dqkv16, const float* dout, const float* qkv, const uint16_t* qkv16,
                 const float* lse, const float* D, const float* mask_add, const Shape& s, Precision prec) {
  const dim3 grid(grid_for(s.T, kBlockRows), static_cast<unsigned>(s.B * s.NH));
  dispatch_tc(s, prec, [&](auto bf, auto hs) {
    constexpr bool BF = decltype(bf)::value;
    constexpr int HS = decltype(hs)::value;
    const int64_t n = operand_elems<HS>(s);
    std::optional<OpTimer> part(std::in_place, "attention_backward/16-bit operands");
    Operands op;
    if (BF && qkv16) {  // q, k, v from the 16-bit qkv the forward read
      qkv16_operands<BF, HS>(op, qkv16, dout, s);
    } else if constexpr (BF) {  // q, k, v as the forward saved them; qkv is not read
      const auto* saved = reinterpret_cast<const uint16_t*>(lse + operands_offset(s.B, s.NH, s.T, s.drop, prec));
      uint16_t* d = operand_buffer(static_cast<size_t>(n));
      launch_prep<BF, HS>(d, dout, s.C, s, 1);
      op.q = padded_rows<HS>(saved, s, 0), op.k = padded_rows<HS>(saved, s, 1), op.v = padded_rows<HS>(saved, s, 2);
      op.dout = padded_rows<HS>(d, s, 0);
    } else {
      uint16_t* q = operand_buffer(4 * static_cast<size_t>(n));
      launch_prep<BF, HS>(q, qkv, 3 * s.C, s, 3);
      launch_prep<BF, HS>(q + 3 * n, dout, s.C, s, 1);
      op.q = padded_rows<HS>(q, s, 0), op.k = padded_rows<HS>(q, s, 1), op.v = padded_rows<HS>(q, s, 2);
      op.dout = padded_rows<HS>(q, s, 3);
    }
    op.Tp = padded_T(s.T);
    // the forward's dropout decisions (attention/common.cuh: after lse in the saved buffer)
    if (s.drop)
      op.drop_bits = const_cast<uint32_t*>(reinterpret_cast<const uint32_t*>(lse + lse_floats(s.B, s.NH, s.T)));
    op.nkeys = visited_keys(mask_add, s);  // the forward's, computed again from the same mask
    part.emplace("attention_backward/dq");
    launch_smem(bwd_dq<BF, HS>, dq_smem<BF, HS>(op.Tp));
    bwd_dq<BF, HS><<<grid, kThreads, dq_smem<BF, HS>(op.Tp), stream()>>>(dqkv, dqkv16, op, lse, D, mask_add, s);
    BERTCC_CUDA_LAUNCHED("attention_backward (dq, Tensor Cores)");
    part.emplace("attention_backward/dk dv");
    launch_smem(bwd_dkdv<BF, HS>, dkv_smem<BF, HS>(op.Tp));
    bwd_dkdv<BF, HS><<<grid, kThreads, dkv_smem<BF, HS>(op.Tp), stream()>>>(dqkv, dqkv16, op, lse, D, mask_add, s);
    BERTCC_CUDA_LAUNCHED("attention_backward (dk, dv, Tensor Cores)");
  });
}

}  // namespace bertcc::cuda::attn

namespace bertcc::cuda {
void set_attention_skip_padding(bool on) { attn::g_skip_padding.store(on ? 1 : 0); }

bool attention_varlen_on() { return settings().cuda_varlen; }

bool attention_varlen_fits(int64_t C, int64_t NH, Precision prec, const float* qkv, const bf16_t* qkv16) {
  if (NH <= 0 || C % NH != 0) return false;
  if (prec == Precision::F32) return qkv && attn::kernel_hs(C / NH) != 0;
  return prec == Precision::BF16 && qkv16 && attn::kernel_hs(C / NH) == C / NH && C % 8 == 0 &&
         reinterpret_cast<uintptr_t>(qkv16) % 16 == 0;
}

void attention_varlen_forward(float* out, bf16_t* out16, float* saved, const float* qkv, const bf16_t* qkv16,
                              const int64_t* cu, int64_t B, int64_t C, int64_t NH, float dropout_p, const Rng& rng,
                              uint64_t base, Precision prec) {
  if (B == 0) return;
  BERTCC_CHECK(attention_varlen_fits(C, NH, prec, qkv, qkv16),
               "attention_varlen_forward: needs fp32 qkv of head size at most 128, or a bf16 qkv16 of head size 16, "
               "32, 64 or 128, 16-byte aligned");
  const attn::Shape s = attn::make_shape(1, cu[B], C, NH, dropout_p, rng, base);
  if (prec == Precision::F32) {
    BERTCC_CHECK(out && !out16, "attention_varlen_forward: fp32 writes out (and no bf16 copy)");
    return attn::forward_f32_varlen(out, saved, qkv, cu, B, s);
  }
  BERTCC_CHECK(out || out16, "attention_varlen_forward: no output");
  attn::forward_tc_varlen(out, reinterpret_cast<uint16_t*>(out16), saved, reinterpret_cast<const uint16_t*>(qkv16), cu,
                          B, s);
}

int64_t attention_varlen_backward_work_size(int64_t N, int64_t NH) { return N * NH; }

void attention_varlen_backward(float* dqkv, bf16_t* dqkv16, float* work, const float* dout, const float* out,
                               const bf16_t* out16, const float* qkv, const bf16_t* qkv16, const float* saved,
                               const int64_t* cu, int64_t B, int64_t C, int64_t NH, float dropout_p, const Rng& rng,
                               uint64_t base, Precision prec) {
  if (B == 0) return;
  BERTCC_CHECK(attention_varlen_fits(C, NH, prec, qkv, qkv16),
               "attention_varlen_backward: needs fp32 qkv of head size at most 128, or a bf16 qkv16 of head size "
               "16, 32, 64 or 128, 16-byte aligned");
  const attn::Shape s = attn::make_shape(1, cu[B], C, NH, dropout_p, rng, base);
  if (prec == Precision::F32) {
    BERTCC_CHECK(out && !dqkv16, "attention_varlen_backward: fp32 reads the forward's out (and writes no bf16 copy)");
    return attn::backward_f32_varlen(dqkv, work, dout, out, qkv, saved, cu, B, s);
  }
  BERTCC_CHECK(out || out16, "attention_varlen_backward: no forward output");
  attn::backward_tc_varlen(dqkv, reinterpret_cast<uint16_t*>(dqkv16), work, dout, out,
                           reinterpret_cast<const uint16_t*>(out16), reinterpret_cast<const uint16_t*>(qkv16), saved,
                           cu, B, s);
}
}  // namespace bertcc::cuda
