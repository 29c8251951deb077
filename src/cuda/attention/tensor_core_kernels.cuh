// The Tensor Core attention kernels (host code: attention/tensor_core.cu). A header so that
// tests/cuda/sim can compile the same source for the CPU (BERTCC_CUDA_SIM: one thread per CUDA
// thread, mma.sync computed from the PTX ISA's fragment layout) and check it where no GPU is.
#pragma once
#ifndef BERTCC_CUDA_SIM
#include <cuda_fp16.h>
#define BERTCC_DYNAMIC_SMEM(name) extern __shared__ __align__(16) unsigned char name[]
#endif

#include <vector>

#include "cuda/attention/common.cuh"

namespace bertcc::cuda::attn::tc {

constexpr int kThreads = 128;   // 4 warps
constexpr int kBlockRows = 64;  // 16 per warp (tc_padded_T rounds to it)
static_assert(kBlockRows == 64, "attention/common.cuh's tc_padded_T assumes 64-row blocks");

template <int HS>
constexpr int tile_n() {
  return HS == 128 ? 32 : 64;
}

template <bool BF16>
__device__ inline uint16_t to16(float x) {
  return BF16 ? f32_to_bf16_bits(x) : __half_as_ushort(__float2half_rn(x));
}
// Two values rounded (to nearest, even) into one register, lo in the lower 16 bits: one cvt on
// sm_80 and later (the same bits as to16 for every number; NaNs become the canonical NaN).
template <bool BF16>
__device__ inline uint32_t pack16(float lo, float hi) {
#if !defined(BERTCC_CUDA_SIM) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  uint32_t r;
  if constexpr (BF16)
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  else
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
#else
  return static_cast<uint32_t>(to16<BF16>(lo)) | (static_cast<uint32_t>(to16<BF16>(hi)) << 16);
#endif
}
// The softmax runs in base 2: scores and masks times log2 e, and 2^x by exp2_ftz.
constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;
// 2^x by one MUFU.EX2: ex2.approx.ftz, the approximation exp2f also computes, without the scaling
// (a compare, two multiplies) by which exp2f returns results below 2^-126 unflushed: such a
// probability is nil beside its row's largest (1), and ftz makes it 0. Per score element that
// scaling was 3 of the softmax's few instructions, in kernels whose issue slots the softmax
// fills. (The simulator computes the C library's exp2f, the SFU's approximation in neither form.)
__device__ inline float exp2_ftz(float x) {
#if !defined(BERTCC_CUDA_SIM) && defined(__CUDA_ARCH__)
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
#else
  return exp2f(x);
#endif
}

// d += a * b (16x8 += 16x16 * 16x8)
template <bool BF16>
__device__ inline void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(BERTCC_CUDA_SIM)
  sim_mma<BF16>(d, a, b0, b1);  // tests/cuda/sim: the PTX ISA's fragment layout, computed on the CPU
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (BF16)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  (void)d, (void)a, (void)b0, (void)b1;
  __trap();  // the host refuses devices below compute capability 8.0 before launching
#endif
}

// ldmatrix.x4: four 8 x 8 tiles of 16-bit elements from shared memory, one register each (sm_75
// and later). Lane L gives the address of row L % 8 of tile L / 8 (8 contiguous elements, 16-byte
// aligned). Register i of lane L then holds, without Trans, tile i's row L / 4, columns 2 (L % 4)
// and + 1; with Trans, column L / 4 of rows 2 (L % 4) and + 1 (the lower index in the lower 16
// bits). One instruction where 32-bit loads took four, and with Trans a B operand comes from a tile
// stored k-major, so no operand needs a channel-major copy.
template <bool Trans>
__device__ inline void ldsm_x4(uint32_t (&r)[4], const uint16_t* p) {
#if defined(BERTCC_CUDA_SIM)
  sim_ldmatrix_x4<Trans>(r, p);  // tests/cuda/sim: the PTX ISA's description, computed on the CPU
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  if constexpr (Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
#else
  (void)r, (void)p;
  __trap();
#endif
}

// A operand: rows r0..r0+15, columns k0..k0+15 of a row-major tile with row stride ld (tiles:
// rows 0-7 and 8-15 of columns k0.., then of columns k0+8..: registers a0..a3 in order).
__device__ inline void frag_a(uint32_t (&a)[4], const uint16_t* t, int ld, int r0, int k0) {
  const int lane = threadIdx.x & 31, i = lane >> 3;
  ldsm_x4<false>(a, t + (r0 + (i & 1) * 8 + (lane & 7)) * ld + k0 + (i >> 1) * 8);
}
// B operands (k x n = 16 x 8) of two adjacent n tiles, n0.. (b[0], b[1]) and n0+8.. (b[2], b[3]),
// from a tile stored n-major: element (k, n) at t[(n0 + n) * ld + k0 + k] (K for Q K^T).
__device__ inline void frag_b2(uint32_t (&b)[4], const uint16_t* t, int ld, int n0, int k0) {
  const int lane = threadIdx.x & 31, i = lane >> 3;
  ldsm_x4<false>(b, t + (n0 + (i >> 1) * 8 + (lane & 7)) * ld + k0 + (i & 1) * 8);
}
// The same from a tile stored k-major: element (k, n) at t[(k0 + k) * ld + n0 + n] (V for P V).
__device__ inline void frag_b2_kmajor(uint32_t (&b)[4], const uint16_t* t, int ld, int k0, int n0) {
  const int lane = threadIdx.x & 31, i = lane >> 3;
  ldsm_x4<true>(b, t + (k0 + (i & 1) * 8 + (lane & 7)) * ld + n0 + (i >> 1) * 8);
}
// Two adjacent fp32 C tiles (columns 0-7, 8-15), rounded: the 16 x 16 A operand.
template <bool BF16>
__device__ inline void c_to_a(uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
  a[0] = pack16<BF16>(lo[0], lo[1]);
  a[1] = pack16<BF16>(lo[2], lo[3]);
  a[2] = pack16<BF16>(hi[0], hi[1]);
  a[3] = pack16<BF16>(hi[2], hi[3]);
}

// The dropout decisions of a thread's eight C-fragment elements of two adjacent key tiles when its
// rows are queries: rows row[0] (g) and row[1] (g+8) of a 16-row group (qg: its index), keys
// key16 + 8c + 2t and + 1 (c = 0, 1; key16 a multiple of 16). rng.h's layout gives them one Philox
// block, block `lane` of the 16 x 16 tile (qg, key16 / 16): word 2r + c, the low half for the
// even key. kp[c][r][e] for n tile c, row r, key + e. No lane needs another's numbers.
__device__ inline void keep_query_tile(const Shape& s, int64_t bh, int64_t qg, int64_t key16, bool (&kp)[2][2][2]) {
  const int64_t nt = (s.T + 15) / 16;
  uint32_t w[4];
  philox4(s.seed, (s.base >> 2) + static_cast<uint64_t>(((bh * nt + qg) * nt + key16 / 16) * 32 + (threadIdx.x & 31)),
          w);
#pragma unroll
  for (int c = 0; c < 2; ++c)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      kp[c][r][0] = (w[2 * r + c] & 0xFFFFu) >= s.thr;
      kp[c][r][1] = (w[2 * r + c] >> 16) >= s.thr;
    }
}

// The forward's dropout decisions for the backward (drop_bit_words words after lse): for the
// warp of query rows qg*16 .. qg*16+15 and the 8 keys kt*8 .., four words, word e bit L the
// decision of lane L's C-fragment element e (rows g, g, g+8, g+8; keys 2t, 2t+1, 2t, 2t+1). The
// dq kernel reads them in the same lanes; the dk/dv kernel, whose rows are keys, picks its bits.
__device__ inline int64_t drop_word(int64_t bh, int64_t Tp, int64_t qg, int64_t kt) {
  return ((bh * (Tp / 16) + qg) * (Tp / 8) + kt) * 4;
}

// The backward's two products over the head's channels that share their loop: c1 += A1 B1^T and
// c2 += A2 B2^T for the warp's 16 rows (from row0) of A1, A2 (row-major, stride HS + 8) and the BN
// rows of B1, B2 (row-major, stride HS + 8): S = Q K^T with dPd = dO V^T, or their transposes.
template <bool BF16, int HS, int BN>
__device__ inline void two_products(float (&c1)[BN / 8][4], float (&c2)[BN / 8][4], const uint16_t* A1,
                                    const uint16_t* A2, const uint16_t* B1, const uint16_t* B2, int row0) {
  constexpr int LDH = HS + 8;
#pragma unroll
  for (int kt = 0; kt < HS / 16; ++kt) {
    uint32_t a1[4], a2[4];
    frag_a(a1, A1, LDH, row0, kt * 16);
    frag_a(a2, A2, LDH, row0, kt * 16);
#pragma unroll
    for (int nt = 0; nt < BN / 8; nt += 2) {
      uint32_t b[4];
      frag_b2(b, B1, LDH, nt * 8, kt * 16);
      mma<BF16>(c1[nt], a1, b[0], b[1]);
      mma<BF16>(c1[nt + 1], a1, b[2], b[3]);
      frag_b2(b, B2, LDH, nt * 8, kt * 16);
      mma<BF16>(c2[nt], a2, b[0], b[1]);
      mma<BF16>(c2[nt + 1], a2, b[2], b[3]);
    }
  }
}

// acc += round(c) * B for the warp's 16 rows: c holds BN columns of fp32 C fragments (probabilities
// or score gradients), rounded into A operands; B (BN x HS) row-major with stride HS + 8, as the
// tiles are stored: P.V, dS.K, Pd^T.dO, dS^T.Q.
template <bool BF16, int HS, int BN>
__device__ inline void rounded_product(float (&acc)[HS / 8][4], const float (&c)[BN / 8][4], const uint16_t* B) {
  constexpr int LDH = HS + 8;
#pragma unroll
  for (int kk = 0; kk < BN / 16; ++kk) {
    uint32_t a[4];
    c_to_a<BF16>(a, c[2 * kk], c[2 * kk + 1]);
#pragma unroll
    for (int nt = 0; nt < HS / 8; nt += 2) {
      uint32_t b[4];
      frag_b2_kmajor(b, B, LDH, kk * 16, nt * 8);
      mma<BF16>(acc[nt], a, b[0], b[1]);
      mma<BF16>(acc[nt + 1], a, b[2], b[3]);
    }
  }
}

// A stored value: as fp32, or as its bf16 rounding (the same product rounded).
__device__ inline void put(float* p, float v) { *p = v; }
__device__ inline void put(uint16_t* p, float v) { *p = f32_to_bf16_bits(v); }
// The warp's accumulator rows (r = 0: row g, 1: row g+8) times mul[r] into dst[r][0 .. hs), rows
// at or past T skipped; D is float, or uint16_t for the bf16 roundings of those values.
template <int HS, class D>
__device__ inline void store_rows(D* const (&dst)[2], const int64_t (&row)[2], const float (&acc)[HS / 8][4],
                                  const float (&mul)[2], const Shape& s) {
  const int t2 = (threadIdx.x & 3) * 2;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (row[r] >= s.T) continue;
#pragma unroll
    for (int nt = 0; nt < HS / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e)
        if (nt * 8 + t2 + e < s.hs) put(&dst[r][nt * 8 + t2 + e], acc[nt][2 * r + e] * mul[r]);
  }
}

// ---- the 16-bit operands ----
// The kernels read q, k, v and dout as 16-bit rows of HS elements, one head at a time, and copy
// them into shared memory with cp.async (the next tile while the block computes on the current one,
// two buffers). ldmatrix reads a tile as an A operand, as the B operand of a product over channels
// (Q K^T: n-major) and, transposing, as the B operand of a product over tokens (P V: k-major), so
// no channel-major copy is made. Two layouts give the rows (Rows):
// - prep's, made beforehand from fp32 activations: per head and token-major, [bh][Tp][HS], zeros
//   past T and past hs, Tp = T rounded up to kBlockRows;
// - in place: a 16-bit qkv [B, T, 3C] as the QKV product writes it (head size exactly HS, rows
//   16-byte aligned), read with row stride 3C. No pass, no copy.
// Rows at or past `n` are not read: the copy writes zeros in their place.
struct Rows {
  const uint16_t* p = nullptr;
  int64_t sb = 0, sh = 0, ld = 0, n = 0;  // row t of head h of sequence b: p + b sb + h sh + t ld
};
struct Operands {
  Rows q, k, v, dout;
  int64_t Tp = 0;                  // T rounded up to kBlockRows (the decision words' layout; masks in shared memory)
  uint32_t* drop_bits = nullptr;   // with dropout: written by fwd, read by bwd_dq and bwd_dkdv
  const int32_t* nkeys = nullptr;  // per sequence, the keys to visit (count_keys); null: all T
  // An unpadded batch (the kernels' Varlen instances: place below): varlen_table on the device
  const int64_t* seqs = nullptr;
  int64_t nseqs = 0;  // its sequences
};

// ---- padding keys ----
// A key whose additive mask is at most kPadMask (BERT's padding: -10000) gets a probability of
// exactly 0 in every row once the row has seen a key above it: exp(s - 10000 - max) is below
// float's smallest normal unless its score exceeds the row's largest unmasked score by more than
// about 9,900, and the kernels flush such values to zero (ex2.approx.ftz; the CPU's exp gives 0 as
// well). Such a key adds exactly nothing: in the forward, the running max does not move (the
// correction is exp2(0) = 1) and P V adds zero products; in the backward its dS and Pd are zeros.
// So the kernels stop at the last unmasked key of each sequence: forward and dq visit key tiles up
// to it, and dk/dv blocks wholly past it write zeros without computing. The same bits as visiting
// every key (the simulator and test_cuda_kernels compare both), in less time on padded batches
// (SQuAD, GLUE and serving pad sequences to max_seq_length).
constexpr float kPadMask = -10000.0f;
// nkeys[b] = one past sequence b's last key with mask above kPadMask (NaN counts as above), or T
// where it has none (every key is then visited, as without this). One block per sequence.
__global__ void __launch_bounds__(kThreads) count_keys(int32_t* nkeys, const float* mask_add, int64_t T) {
  __shared__ int32_t best[kThreads];
  const int64_t b = blockIdx.x;
  int32_t last = -1;
  for (int64_t j = threadIdx.x; j < T; j += kThreads)
    if (!(mask_add[b * T + j] <= kPadMask)) last = static_cast<int32_t>(j);
  best[threadIdx.x] = last;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w /= 2) {
    if (static_cast<int>(threadIdx.x) < w && best[threadIdx.x + w] > best[threadIdx.x])
      best[threadIdx.x] = best[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) nkeys[b] = best[0] < 0 ? static_cast<int32_t>(T) : best[0] + 1;
}
// The keys sequence b's kernels visit: [0, visited_keys).
__device__ inline int64_t visited_keys(const Operands& op, int64_t b, int64_t T) {
  return op.nkeys ? static_cast<int64_t>(op.nkeys[b]) : T;
}
__host__ __device__ inline int64_t padded_T(int64_t T) { return (T + kBlockRows - 1) / kBlockRows * kBlockRows; }
template <int HS>
int64_t operand_elems(const Shape& s) {
  return s.B * s.NH * padded_T(s.T) * HS;
}
// prep's layout: part z of the operands at `rows` (q, k, v: z 0, 1, 2 from one launch).
template <int HS>
Rows padded_rows(const uint16_t* rows, const Shape& s, int z) {
  const int64_t Tp = padded_T(s.T);
  return Rows{rows + z * operand_elems<HS>(s), s.NH * Tp * HS, Tp * HS, HS, Tp};
}
// In place: part z of a 16-bit qkv [B, T, 3C]. in_place_ok: whether the kernels of head size HS
// may read it so (every row of a head exactly HS elements, each 16-byte aligned).
template <int HS>
bool in_place_ok(const void* qkv16, const Shape& s) {
  return s.hs == HS && s.C % 8 == 0 && reinterpret_cast<uintptr_t>(qkv16) % 16 == 0;
}
inline Rows qkv_rows(const uint16_t* qkv16, const Shape& s, int z) {
  return Rows{qkv16 + z * s.C, s.T * 3 * s.C, s.hs, 3 * s.C, s.T};
}

// ---- the block's place: a padded batch, or one sequence of an unpadded (varlen) batch ----
// The kernels' Varlen instances take unpadded batches, the others padded ones. (A runtime choice
// kept the padded kernels' shape in registers: their one-m-tile forward for head size 64 went from
// 167 to 187 registers a thread, 3 blocks per SM to 2. The Varlen instances need a few more than
// the padded ones, nvcc 13 for sm_90: that forward 169 against 165, bwd_dq 195 against 168, both
// then 2 blocks per SM where the padded ones fit 3; bwd_dkdv 251 against 241, 2 either way. Not
// yet measured; BERTCC_ATTENTION_FWD_MIN_BLOCKS=4 caps the forward, the varlen one too.)
// A padded batch [B, T]: block (x, y) takes row tile x of head row y = b NH + h.
// An unpadded batch (FlashAttention's cu_seqlens layout: sequence b rows cu[b] .. cu[b+1] - 1 of
// [N, 3C], no mask): block (x, y) takes head y of the sequence and row tile that block entry x of
// varlen_table names, and the block then sees that sequence as a batch of it alone: b = 0, s.T its
// length, s.base its dropout numbers' (after the previous sequences', as rng.h's
// attention_varlen_drop_numbers counts them), op's rows from its first row (keys past its length
// are not read: copy_rows writes zeros), its slice of the saved buffer (lse, then the decision
// bits). The kernel moves its other pointers by row0 (rows of out, dqkv) and saved0 (floats of
// lse). Each row's arithmetic is then that of the padded kernels on the sequence alone, so are
// its bits.
struct Place {
  int64_t b, h, tile, row0, saved0;
};
template <class P>
__device__ inline P* shifted(P* p, int64_t n) {
  return p ? p + n : p;
}
__device__ inline void rebase(Rows& r, int64_t row0, int64_t n) {
  r.p = shifted(r.p, row0 * r.ld);
  r.n = n;
}
template <bool Varlen>
__device__ inline Place place(Operands& op, Shape& s) {
  if constexpr (!Varlen) {
    return {blockIdx.y / s.NH, blockIdx.y % s.NH, blockIdx.x, 0, 0};
  } else {
    const int64_t* blk = op.seqs + 4 * op.nseqs + 2 * static_cast<int64_t>(blockIdx.x);  // {sequence, tile}
    const int64_t* q = op.seqs + 4 * blk[0];  // {first row, length, saved offset, dropout base}
    s.B = 1, s.T = q[1], s.base = static_cast<uint64_t>(q[3]);
    op.Tp = padded_T(s.T);
    rebase(op.q, q[0], s.T), rebase(op.k, q[0], s.T), rebase(op.v, q[0], s.T), rebase(op.dout, q[0], s.T);
    op.drop_bits = shifted(op.drop_bits, q[2] + lse_floats(1, s.NH, s.T));
    op.nkeys = nullptr;  // no mask: every key of the sequence is visited
    return {0, blockIdx.y, blk[1], q[0], q[2]};
  }
}
// Four consecutive source values as floats: fp32, or bf16 (widened exactly) from a 16-bit qkv.
__device__ inline float widen(float x) { return x; }
__device__ inline float widen(uint16_t x) { return bf16_bits_to_f32(x); }
__device__ inline void load4(const float* p, float (&x)[4]) {
  const float4 v = *reinterpret_cast<const float4*>(p);
  x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
}
__device__ inline void load4(const uint16_t* p, float (&x)[4]) { load_bf16x4(p, x); }

// kBlockRows tokens (blockIdx.x) of one head (blockIdx.y) of part blockIdx.z of src (fp32, or bf16
// from a 16-bit qkv whose head size the kernels cannot read in place; token-major with row stride
// ld; part z at channel z * C, head h at channel h * hs), rounded into rows + z * operand_elems
// (q, k, v from qkv in one launch; bf16 from bf16 is a copy). vec: hs, ld and src's address allow
// loads of four channels at once (16 or 8 bytes; a group of four is then wholly inside or wholly
// past hs).
template <bool BF16, int HS, class Src = float>
__global__ void __launch_bounds__(kThreads)
    prep(uint16_t* rows, const Src* src, int64_t ld, Shape s, int64_t Tp, bool vec) {
  const int64_t bh = blockIdx.y, b = bh / s.NH, h = bh % s.NH, t0 = static_cast<int64_t>(blockIdx.x) * kBlockRows;
  rows += static_cast<int64_t>(blockIdx.z) * s.B * s.NH * Tp * HS;
  src += static_cast<int64_t>(blockIdx.z) * s.C;
  for (int idx = threadIdx.x; idx < kBlockRows * HS / 4; idx += kThreads) {
    const int r = idx / (HS / 4), c = (idx % (HS / 4)) * 4;
    const int64_t t = t0 + r;
    float x[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (t < s.T) {
      const Src* p = src + (b * s.T + t) * ld + h * s.hs + c;
      if (vec) {
        if (c < s.hs) load4(p, x);
      } else {
#pragma unroll
        for (int k = 0; k < 4; ++k)
          if (c + k < s.hs) x[k] = widen(p[k]);
      }
    }
    uint2 w;
    w.x = pack16<BF16>(x[0], x[1]);
    w.y = pack16<BF16>(x[2], x[3]);
    *reinterpret_cast<uint2*>(rows + (bh * Tp + t) * HS + c) = w;  // 8-byte aligned: HS, c multiples of 4
  }
}

// 16 bytes from global to shared memory without the registers (cp.async, sm_80 and later), and
// its group fences: wait_group<N> returns when at most N of this thread's groups are in flight.
__device__ inline void cp_async16(void* dst, const void* src) {
#if defined(BERTCC_CUDA_SIM)
  std::memcpy(dst, src, 16);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src) : "memory");
#else
  (void)dst, (void)src;
  __trap();
#endif
}
__device__ inline void cp_async_commit() {
#if !defined(BERTCC_CUDA_SIM) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
template <int N>
__device__ inline void cp_async_wait() {
#if !defined(BERTCC_CUDA_SIM) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}
// 16 zero bytes into shared memory (a row past the operand's rows).
__device__ inline void zero16(void* dst) {
#if defined(BERTCC_CUDA_SIM)
  std::memset(dst, 0, 16);
#else
  *reinterpret_cast<uint4*>(dst) = make_uint4(0u, 0u, 0u, 0u);
#endif
}
// Rows r0 .. r0 + R - 1 of head h of sequence b of `src` (HS elements each, HS a multiple of 8) into
// dst (row stride ld), asynchronously; rows at or past src.n are zeros, written directly.
template <int R, int HS>
__device__ inline void copy_rows(uint16_t* dst, int ld, const Rows& src, int64_t b, int64_t h, int64_t r0) {
  constexpr int kChunks = HS / 8;
  const uint16_t* head = src.p + b * src.sb + h * src.sh;
  for (int idx = threadIdx.x; idx < R * kChunks; idx += kThreads) {
    const int r = idx / kChunks, c = (idx % kChunks) * 8;
    if (r0 + r < src.n)
      cp_async16(dst + r * ld + c, head + (r0 + r) * src.ld + c);
    else
      zero16(dst + r * ld + c);
  }
}

// The head of a double-buffered tile loop: starts copying tile t + 1 into the other buffer
// (issue(its first row, its buffer); that buffer was last read before the previous iteration's
// closing barrier) and waits until tile t is in shared memory for every thread.
template <class Issue>
__device__ inline void next_tile(int t, int ntiles, int64_t tile_rows, Issue&& issue) {
  if (t + 1 < ntiles) {
    issue(static_cast<int64_t>(t + 1) * tile_rows, (t + 1) & 1);
    cp_async_commit();
    cp_async_wait<1>();
  } else {
    cp_async_wait<0>();
  }
  __syncthreads();
}

// ---- forward ----
// MT m-tiles of 16 query rows per warp (1 or 2): a block takes 64 * MT rows, m-tile mt of warp w
// rows mt * 64 + w * 16 .. + 15 of them. With MT = 2 every K and V fragment a warp loads from
// shared memory feeds two products, and a warp has twice the independent products between its
// waits (FlashAttention-2's forward takes 32 rows per warp for head size 64). Each row's arithmetic
// is the same in either form, so are its bits.
template <int HS>
constexpr int fwd_max_mt() {
  return HS <= 64 ? 2 : 1;
}  // 128: the accumulators would spill

// Shared memory for T rounded up to Tp: the tiles, then the keys' masks (Tp floats, the whole row:
// loaded once, so no tile waits on a global load).
template <bool BF16, int HS, int MT>
constexpr size_t fwd_smem(int64_t Tp) {
  constexpr int BN = tile_n<HS>(), LDH = HS + 8;
  return sizeof(uint16_t) * (MT * kBlockRows * LDH + 2 * (2 * BN * LDH)) + sizeof(float) * Tp;
}

// acc[mt][nt] += a[mt] b[0..1] and acc[mt][nt + 1] += a[mt] b[2..3] for every m-tile: one B
// fragment pair (frag_b2, frag_b2_kmajor) into each m-tile's two adjacent C tiles.
template <bool BF16, int MT, int NT>
__device__ inline void mma_pair_each(float (&acc)[MT][NT][4], const uint32_t (&a)[MT][4], const uint32_t (&b)[4],
                                     int nt) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    mma<BF16>(acc[mt][nt], a[mt], b[0], b[1]);
    mma<BF16>(acc[mt][nt + 1], a[mt], b[2], b[3]);
  }
}

// Operands: q, k, v. out and out16 (its bf16 rounding): either may be null. MinBlocks: blocks per
// SM the registers must allow (4: at most 128 registers a thread, where the one-m-tile kernel for
// head size 64 needs 138 and spills 12 bytes under the cap; attention/tensor_core.cu: fwd_min_blocks).
template <bool BF16, int HS, int MT, int MinBlocks = 1, bool Varlen = false>
__global__ void __launch_bounds__(kThreads, MinBlocks)
    fwd(float* out, uint16_t* out16, float* lse, Operands op, const float* mask_add, Shape s) {
  static_assert(MT == 1 || MT == 2, "one or two m-tiles per warp");
  constexpr int BN = tile_n<HS>(), LDH = HS + 8;
  BERTCC_DYNAMIC_SMEM(smem);
  constexpr int kTile = 2 * BN * LDH;                // one buffer: Ks [BN][LDH], Vs [BN][LDH]
  uint16_t* Qs = reinterpret_cast<uint16_t*>(smem);  // [64 MT][LDH]
  uint16_t* tiles = Qs + MT * kBlockRows * LDH;      // two buffers of kTile (offsets, not pointer arrays: no stack)
  float* Ms = reinterpret_cast<float*>(tiles + 2 * kTile);  // [Tp]: the keys' masks times log2 e, -inf past T
  const Place pl = place<Varlen>(op, s);
  const int64_t b = pl.b, h = pl.h, bh = b * s.NH + h, q0 = pl.tile * MT * kBlockRows;
  out = shifted(out, pl.row0 * s.C), out16 = shifted(out16, pl.row0 * s.C), lse += pl.saved0;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t2 = (lane & 3) * 2;
  // tile j0 of keys into buffer `buf`
  auto issue = [&](int64_t j0, int buf) {
    copy_rows<BN, HS>(tiles + buf * kTile, LDH, op.k, b, h, j0);
    copy_rows<BN, HS>(tiles + buf * kTile + BN * LDH, LDH, op.v, b, h, j0);
  };
  // the block's query rows (past the operand's rows zeros, computed on and never stored)
  copy_rows<MT * kBlockRows, HS>(Qs, LDH, op.q, b, h, q0);
  issue(0, 0);
  cp_async_commit();
  // the masks while those copies are in flight (seen after the loop's first barrier)
  for (int64_t j = threadIdx.x; j < op.Tp; j += kThreads)
    Ms[j] = j >= s.T ? -INFINITY : mask_add ? mask_add[b * s.T + j] * kLog2e : 0.0f;
  const float scale2 = s.scale * kLog2e;
  const int64_t nk = visited_keys(op, b, s.T);  // the keys past it add exactly nothing (count_keys)
  // Q's A fragments: kept in registers with one m-tile; with two, loaded again from shared memory
  // for each key tile (2 x HS / 16 ldmatrix per tile), which leaves the registers to the two tiles'
  // scores and outputs (kept, they made the kernel spill at head size 64)
  constexpr bool kQInRegs = MT == 1;
  uint32_t qf[kQInRegs ? HS / 16 : 1][4];
  float o[MT][HS / 8][4] = {};
  float m[MT][2], l[MT][2];
  int64_t row[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
    m[mt][0] = m[mt][1] = -INFINITY;
    l[mt][0] = l[mt][1] = 0.0f;
    row[mt][0] = q0 + mt * kBlockRows + warp * 16 + g;
    row[mt][1] = row[mt][0] + 8;
  }
  const int ntiles = static_cast<int>((nk + BN - 1) / BN);
  for (int jt = 0; jt < ntiles; ++jt) {
    const int buf = jt & 1;
    const int64_t j0 = static_cast<int64_t>(jt) * BN;
    next_tile(jt, ntiles, BN, issue);
    if (kQInRegs && jt == 0) {
#pragma unroll
      for (int kt = 0; kt < HS / 16; ++kt) frag_a(qf[kQInRegs ? kt : 0], Qs, LDH, warp * 16, kt * 16);
    }
    const uint16_t* Ks = tiles + buf * kTile;
    const uint16_t* Vs = Ks + BN * LDH;
    const float* Mb = Ms + j0;
    float sc[MT][BN / 8][4] = {};
#pragma unroll
    for (int kt = 0; kt < HS / 16; ++kt) {
      uint32_t qa[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if constexpr (kQInRegs) {
#pragma unroll
          for (int i = 0; i < 4; ++i) qa[mt][i] = qf[kQInRegs ? kt : 0][i];
        } else {
          frag_a(qa[mt], Qs, LDH, mt * kBlockRows + warp * 16, kt * 16);
        }
      }
#pragma unroll
      for (int nt = 0; nt < BN / 8; nt += 2) {
        uint32_t bk[4];
        frag_b2(bk, Ks, LDH, nt * 8, kt * 16);
        mma_pair_each<BF16>(sc, qa, bk, nt);
      }
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          // base 2; a key past T (mask -inf) gives -inf, the finite score notwithstanding
          const float v = sc[mt][nt][e] * scale2 + Mb[nt * 8 + t2 + (e & 1)];
          sc[mt][nt][e] = v;
          mx[e >> 1] = fmaxf(mx[e >> 1], v);
        }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        const float mn = fmaxf(m[mt][r], mx[r]);
        const float corr = m[mt][r] == -INFINITY ? 0.0f : exp2_ftz(m[mt][r] - mn);
        l[mt][r] *= corr;
#pragma unroll
        for (int nt = 0; nt < HS / 8; ++nt) {
          o[mt][nt][2 * r] *= corr;
          o[mt][nt][2 * r + 1] *= corr;
        }
        m[mt][r] = mn;
      }
      // the 16-row group of this m-tile; its decision words exist for groups below Tp / 16
      const int64_t qg = (q0 + mt * kBlockRows) / 16 + warp;
      // exp2_ftz(-inf - m) = 0 for a key past T; a row whose keys so far are all past T (m still
      // -inf) subtracts 0 instead, so that its -inf scores give 0 rather than NaN
      const float msub[2] = {m[mt][0] == -INFINITY ? 0.0f : m[mt][0], m[mt][1] == -INFINITY ? 0.0f : m[mt][1]};
      bool kq[2][2][2] = {};  // the decisions of n tiles nt and nt + 1, drawn at even nt
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt) {
        bool kp[2][2] = {{true, true}, {true, true}};
        if (s.drop) {
          if (nt % 2 == 0) keep_query_tile(s, bh, qg, j0 + nt * 8, kq);
#pragma unroll
          for (int r = 0; r < 2; ++r)
#pragma unroll
            for (int e = 0; e < 2; ++e) kp[r][e] = kq[nt % 2][r][e];
          uint32_t w[4];
#pragma unroll
          for (int e = 0; e < 4; ++e) w[e] = __ballot_sync(0xffffffffu, kp[e >> 1][e & 1]);
          if (lane < 4 && qg < op.Tp / 16)
            op.drop_bits[drop_word(bh, op.Tp, qg, (j0 + nt * 8) / 8) + lane] = lane == 0   ? w[0]
                                                                               : lane == 1 ? w[1]
                                                                               : lane == 2 ? w[2]
                                                                                           : w[3];
        }
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = e >> 1;
          const float p = exp2_ftz(sc[mt][nt][e] - msub[r]);
          l[mt][r] += p;
          sc[mt][nt][e] = !s.drop ? p : kp[r][e & 1] ? p * s.keep_scale : 0.0f;
        }
      }
    }
    // o += round(P) V: each V fragment feeds every m-tile (rounded_product, MT at a time)
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      uint32_t pa[MT][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) c_to_a<BF16>(pa[mt], sc[mt][2 * kk], sc[mt][2 * kk + 1]);
#pragma unroll
      for (int nt = 0; nt < HS / 8; nt += 2) {
        uint32_t bv[4];
        frag_b2_kmajor(bv, Vs, LDH, kk * 16, nt * 8);
        mma_pair_each<BF16>(o, pa, bv, nt);
      }
    }
    __syncthreads();  // buffer buf is refilled by the next iteration's issue
  }
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l[mt][r] += __shfl_xor_sync(0xffffffffu, l[mt][r], 1);
      l[mt][r] += __shfl_xor_sync(0xffffffffu, l[mt][r], 2);
    }
    {
      const int64_t at[2] = {(b * s.T + row[mt][0]) * s.C + h * s.hs, (b * s.T + row[mt][1]) * s.C + h * s.hs};
      const float inv[2] = {1.0f / l[mt][0], 1.0f / l[mt][1]};
      if (out) {
        float* const dst[2] = {out + at[0], out + at[1]};
        store_rows<HS>(dst, row[mt], o[mt], inv, s);
      }
      if (out16) {
        uint16_t* const dst[2] = {out16 + at[0], out16 + at[1]};
        store_rows<HS>(dst, row[mt], o[mt], inv, s);
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r)
      if (row[mt][r] < s.T && (lane & 3) == 0) lse[bh * s.T + row[mt][r]] = m[mt][r] * kLn2 + logf(l[mt][r]);
  }
}

// ---- backward: dq, per query block ----
template <bool BF16, int HS>
constexpr size_t dq_smem(int64_t Tp) {  // as fwd_smem: the tiles, then the keys' masks
  constexpr int BN = tile_n<HS>(), LDH = HS + 8;
  return sizeof(uint16_t) * (2 * kBlockRows * LDH + 2 * (2 * BN * LDH)) + sizeof(float) * Tp;
}

// Operands: q, dout, k, v.
template <bool BF16, int HS, bool Varlen = false>
// dqkv16 (may be null): dq's bf16 rounding too, at dqkv's offsets (likewise bwd_dkdv for dk, dv).
__global__ void __launch_bounds__(kThreads) bwd_dq(float* dqkv, uint16_t* dqkv16, Operands op, const float* lse,
                                                   const float* D, const float* mask_add, Shape s) {
  constexpr int BN = tile_n<HS>(), LDH = HS + 8;
  constexpr int kTile = 2 * BN * LDH;  // one buffer: Ks [BN][LDH], Vs [BN][LDH]
  BERTCC_DYNAMIC_SMEM(smem);
  uint16_t* Qs = reinterpret_cast<uint16_t*>(smem);         // [64][LDH]
  uint16_t* dOs = Qs + kBlockRows * LDH;                    // [64][LDH]
  uint16_t* tiles = dOs + kBlockRows * LDH;                 // two buffers of kTile
  float* Ms = reinterpret_cast<float*>(tiles + 2 * kTile);  // [Tp]: as fwd's
  const Place pl = place<Varlen>(op, s);
  const int64_t b = pl.b, h = pl.h, bh = b * s.NH + h, q0 = pl.tile * kBlockRows;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t2 = (lane & 3) * 2;
  const int64_t ld3 = 3 * s.C;
  dqkv += pl.row0 * ld3, dqkv16 = shifted(dqkv16, pl.row0 * ld3), lse += pl.saved0, D += s.NH * pl.row0;
  auto issue = [&](int64_t j0, int buf) {
    uint16_t* t = tiles + buf * kTile;
    copy_rows<BN, HS>(t, LDH, op.k, b, h, j0);
    copy_rows<BN, HS>(t + BN * LDH, LDH, op.v, b, h, j0);
  };
  copy_rows<kBlockRows, HS>(Qs, LDH, op.q, b, h, q0);
  copy_rows<kBlockRows, HS>(dOs, LDH, op.dout, b, h, q0);
  issue(0, 0);
  cp_async_commit();
  for (int64_t j = threadIdx.x; j < op.Tp; j += kThreads)
    Ms[j] = j >= s.T ? -INFINITY : mask_add ? mask_add[b * s.T + j] * kLog2e : 0.0f;
  const int64_t row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  const float scale2 = s.scale * kLog2e;
  float L[2], Di[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    L[r] = row[r] < s.T ? lse[bh * s.T + row[r]] * kLog2e : 0.0f;  // base 2, as the scores below
    Di[r] = row[r] < s.T ? D[bh * s.T + row[r]] : 0.0f;
  }
  float dq[HS / 8][4] = {};
  // the forward's key tiles: those past them add exactly nothing (count_keys)
  const int ntiles = static_cast<int>((visited_keys(op, b, s.T) + BN - 1) / BN);
  for (int jt = 0; jt < ntiles; ++jt) {
    const int buf = jt & 1;
    const int64_t j0 = static_cast<int64_t>(jt) * BN;
    next_tile(jt, ntiles, BN, issue);
    const uint16_t* Ks = tiles + buf * kTile;
    const uint16_t* Vs = Ks + BN * LDH;
    float sc[BN / 8][4] = {}, dp[BN / 8][4] = {};
    two_products<BF16, HS, BN>(sc, dp, Qs, dOs, Ks, Vs, warp * 16);  // S = Q K^T, dPd = dO V^T
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt) {
      bool kp[2][2] = {{true, true}, {true, true}};
      if (s.drop) {  // the forward's decisions, in the same lanes
        const uint32_t* w = op.drop_bits + drop_word(bh, op.Tp, q0 / 16 + warp, (j0 + nt * 8) / 8);
#pragma unroll
        for (int e = 0; e < 4; ++e) kp[e >> 1][e & 1] = (w[e] >> lane) & 1u;
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1, jj = nt * 8 + t2 + (e & 1);
        const float p = exp2_ftz(sc[nt][e] * scale2 + Ms[j0 + jj] - L[r]);  // 0 past T (mask -inf), as bwd_dkdv
        const float d = !s.drop ? dp[nt][e] : kp[r][e & 1] ? dp[nt][e] * s.keep_scale : 0.0f;
        sc[nt][e] = p * (d - Di[r]);  // dS; the softmax scale is applied to dq, as the CPU does (fp16: less underflow)
      }
    }
    rounded_product<BF16, HS, BN>(dq, sc, Ks);  // dQ += dS K
    __syncthreads();
  }
  const int64_t at[2] = {(b * s.T + row[0]) * ld3 + h * s.hs, (b * s.T + row[1]) * ld3 + h * s.hs};
  float* const dst[2] = {dqkv + at[0], dqkv + at[1]};
  store_rows<HS>(dst, row, dq, {s.scale, s.scale}, s);
  if (dqkv16) {
    uint16_t* const dst16[2] = {dqkv16 + at[0], dqkv16 + at[1]};
    store_rows<HS>(dst16, row, dq, {s.scale, s.scale}, s);
  }
}

// ---- backward: dk and dv, per key block ----
template <bool BF16, int HS>
constexpr size_t dkv_smem(int64_t Tp) {  // the tiles, then the queries' lse and D (2 Tp floats)
  constexpr int BN = tile_n<HS>(), LDH = HS + 8;
  return sizeof(uint16_t) * (2 * kBlockRows * LDH + 2 * (2 * BN * LDH)) + sizeof(float) * 2 * Tp;
}

// Operands: k, v, q, dout.
template <bool BF16, int HS, bool Varlen = false>
__global__ void __launch_bounds__(kThreads) bwd_dkdv(float* dqkv, uint16_t* dqkv16, Operands op, const float* lse,
                                                     const float* D, const float* mask_add, Shape s) {
  constexpr int BN = tile_n<HS>(), LDH = HS + 8;
  constexpr int kTile = 2 * BN * LDH;  // one buffer: Qs, dOs [BN][LDH]
  BERTCC_DYNAMIC_SMEM(smem);
  uint16_t* Kb = reinterpret_cast<uint16_t*>(smem);         // [64][LDH]: this block's keys
  uint16_t* Vb = Kb + kBlockRows * LDH;                     // [64][LDH]
  uint16_t* tiles = Vb + kBlockRows * LDH;                  // two buffers of kTile
  float* LD = reinterpret_cast<float*>(tiles + 2 * kTile);  // Ls [Tp] (+inf past T: P = 0), then Ds [Tp]
  const Place pl = place<Varlen>(op, s);
  const int64_t b = pl.b, h = pl.h, bh = b * s.NH + h, k0 = pl.tile * kBlockRows;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t2 = (lane & 3) * 2;
  const int64_t ld3 = 3 * s.C;
  dqkv += pl.row0 * ld3, dqkv16 = shifted(dqkv16, pl.row0 * ld3), lse += pl.saved0, D += s.NH * pl.row0;
  auto issue = [&](int64_t i0, int buf) {
    uint16_t* t = tiles + buf * kTile;
    copy_rows<BN, HS>(t, LDH, op.q, b, h, i0);
    copy_rows<BN, HS>(t + BN * LDH, LDH, op.dout, b, h, i0);
  };
  const int64_t key[2] = {k0 + warp * 16 + g, k0 + warp * 16 + g + 8};
  // dk (times the softmax scale) and dv into dqkv, and their roundings into dqkv16 where given
  auto store = [&](const float(&dk)[HS / 8][4], const float(&dv)[HS / 8][4]) {
    const int64_t at[2] = {(b * s.T + key[0]) * ld3 + s.C + h * s.hs, (b * s.T + key[1]) * ld3 + s.C + h * s.hs};
    float* const dk_dst[2] = {dqkv + at[0], dqkv + at[1]};
    float* const dv_dst[2] = {dk_dst[0] + s.C, dk_dst[1] + s.C};
    store_rows<HS>(dk_dst, key, dk, {s.scale, s.scale}, s);
    store_rows<HS>(dv_dst, key, dv, {1.0f, 1.0f}, s);
    if (dqkv16) {
      uint16_t* const dk16[2] = {dqkv16 + at[0], dqkv16 + at[1]};
      uint16_t* const dv16[2] = {dk16[0] + s.C, dk16[1] + s.C};
      store_rows<HS>(dk16, key, dk, {s.scale, s.scale}, s);
      store_rows<HS>(dv16, key, dv, {1.0f, 1.0f}, s);
    }
  };
  // Keys at or past nk have P = 0 in every row (count_keys): a block of them only writes zeros, the
  // bits of the sums it would compute (the forward left their decision bits unwritten).
  const int64_t nk = visited_keys(op, b, s.T);
  if (k0 >= nk) {
    const float zero[HS / 8][4] = {};
    store(zero, zero);
    return;
  }
  copy_rows<kBlockRows, HS>(Kb, LDH, op.k, b, h, k0);
  copy_rows<kBlockRows, HS>(Vb, LDH, op.v, b, h, k0);
  issue(0, 0);
  cp_async_commit();
  // every query's lse (base 2) and D while those copies are in flight (seen after the first barrier)
  for (int64_t i = threadIdx.x; i < op.Tp; i += kThreads) {
    const bool in = i < s.T;
    LD[i] = in ? lse[bh * s.T + i] * kLog2e : INFINITY;
    LD[op.Tp + i] = in ? D[bh * s.T + i] : 0.0f;
  }
  float mj[2];
#pragma unroll
  for (int r = 0; r < 2; ++r)  // P = 0 past T
    mj[r] = key[r] >= s.T ? -INFINITY : mask_add ? mask_add[b * s.T + key[r]] * kLog2e : 0.0f;
  const float scale2 = s.scale * kLog2e;
  float dk[HS / 8][4] = {}, dv[HS / 8][4] = {};
  const int ntiles = static_cast<int>((s.T + BN - 1) / BN);
  for (int it = 0; it < ntiles; ++it) {
    const int buf = it & 1;
    const int64_t i0 = static_cast<int64_t>(it) * BN;
    next_tile(it, ntiles, BN, issue);
    const uint16_t* Qs = tiles + buf * kTile;
    const uint16_t* dOs = Qs + BN * LDH;
    const float* Ls = LD + i0;
    const float* Ds = LD + op.Tp + i0;
    float st[BN / 8][4] = {}, dpt[BN / 8][4] = {};                    // S^T and dPd^T: rows are keys, columns queries
    two_products<BF16, HS, BN>(st, dpt, Kb, Vb, Qs, dOs, warp * 16);  // S^T = K Q^T, dPd^T = V dO^T
#pragma unroll
    for (int nt = 0; nt < BN / 8; ++nt) {
      bool kp[2][2] = {{true, true}, {true, true}};
      if (s.drop) {
        // the forward's lane for (query i0 + nt*8 + t2 + e, key g mod 8): g' = t2 + e (the query
        // mod 8), t' = g / 2, its element 2 (query row >= 8: nt odd) + g % 2, in the word group
        // of the query's 16-row group and the key's 8-key tile. Keys at or past nk (past T, or
        // padding past the forward's last key tile: never written) are not read: P = 0 there, so
        // a decision changes only the sign of a zero dS, which adds nothing.
        const int64_t qg = (i0 + nt * 8) / 16;
        const int wi = 2 * (nt & 1) + (g & 1);
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const uint32_t w = key[r] < nk ? op.drop_bits[drop_word(bh, op.Tp, qg, key[r] / 8) + wi] : 0u;
#pragma unroll
          for (int e = 0; e < 2; ++e) kp[r][e] = (w >> ((t2 + e) * 4 + (g >> 1))) & 1u;
        }
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int r = e >> 1, ii = nt * 8 + t2 + (e & 1);
        const float p = exp2_ftz(st[nt][e] * scale2 + mj[r] - Ls[ii]);
        const bool kept = kp[r][e & 1];
        const float pd = !s.drop ? p : kept ? p * s.keep_scale : 0.0f;
        const float d = !s.drop ? dpt[nt][e] : kept ? dpt[nt][e] * s.keep_scale : 0.0f;
        st[nt][e] = pd;
        dpt[nt][e] = p * (d - Ds[ii]);  // dS^T (unscaled, as in bwd_dq)
      }
    }
    rounded_product<BF16, HS, BN>(dv, st, dOs);  // dV += Pd^T dO
    rounded_product<BF16, HS, BN>(dk, dpt, Qs);  // dK += dS^T Q
    __syncthreads();
  }
  store(dk, dv);
}

}  // namespace bertcc::cuda::attn::tc
