// The Tensor Core attention kernels (src/cuda/attention/tensor_core_kernels.cuh) and the fp32 kernels'
// unpadded instances (attention/fp32_kernels.cuh: run_varlen_f32), compiled for the CPU and
// run by tests/cuda/sim/sim_runtime.h, against a float64 reference of attention forward and
// backward (dropout from the same Philox counters) and against the CPU engine's attention in the
// same precision (what test_cuda_kernels checks on a GPU). Shared memory is poisoned with NaN
// before each block and the outputs before each run, so an unwritten element or a read of an
// unwritten tile fails. Relative errors: ||x - ref|| / ||ref|| per tensor (out, lse, dq, dk, dv).
// Exit 0 all passed, 1 a failure.
#define BERTCC_CUDA_SIM 1
#include "sim_runtime.h"
// the kernels' source, as nvcc compiles it for the GPU
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>

#include "cuda/attention/fp32_kernels.cuh"
#include "cuda/attention/tensor_core_kernels.cuh"
#include "kernels/kernels.h"

using namespace bertcc;
namespace A = bertcc::cuda::attn;

namespace {

double rel_l2(const std::vector<float>& x, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i])) return INFINITY;
    num += (x[i] - ref[i]) * (x[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}
double rel_max(const std::vector<float>& x, const std::vector<float>& ref) {
  double mx = 0, err = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i])) return INFINITY;
    mx = std::max(mx, std::fabs(static_cast<double>(ref[i])));
    err = std::max(err, std::fabs(static_cast<double>(x[i]) - ref[i]));
  }
  return err / std::max(mx, 1e-30);
}

int g_fail = 0;
void expect(const std::string& what, double err, double tol) {
  const bool ok = err <= tol;
  std::printf("  %-34s %.2e (tol %.0e)%s\n", what.c_str(), err, tol, ok ? "" : "  FAIL");
  if (!ok) ++g_fail;
}

// lens (optional): sequence b's unmasked keys, the rest padding (-10000); 0: all padding. Without
// it, every sequence but the first ends in b * (T / 4) padding keys.
template <bool BF>
void run(int64_t B, int64_t T, int64_t NH, int64_t hs, float p, unsigned seed, std::vector<int64_t> lens = {}) {
  const int64_t C = NH * hs;
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> qkv(B * T * 3 * C), dout(B * T * C), mask(B * T, 0.0f);
  for (auto& x : qkv) x = 2.0f * u(gen);
  for (auto& x : dout) x = u(gen);
  for (int64_t b = 0; b < B; ++b)  // padding at the end of every sequence but the first
    for (int64_t t = lens.empty() ? T - b * (T / 4) : lens[b]; t < T; ++t) mask[b * T + t] = -10000.0f;
  const Rng rng(77 + seed, 0);
  const uint64_t base = 1000;
  const A::Shape s = A::make_shape(B, T, C, NH, p, rng, base);
  // lse as attention/tensor_core.cu's callers size it (with dropout: the decision bits after it, poisoned
  // with set bits: keep everything, which dropout-on cases fail unless the forward writes them)
  std::vector<float> out(B * T * C, NAN),
      lse(static_cast<size_t>(A::lse_floats(B, NH, T) + (p > 0 ? A::drop_bit_words(B, NH, T) : 0)), NAN),
      dqkv(B * T * 3 * C, NAN), D(B * NH * T);
  A::dispatch_hs(hs, [&](auto hsc) {
    constexpr int HS = decltype(hsc)::value;
    namespace K = A::tc;
    const sim_dim3 grid{bertcc::cuda::grid_for(T, K::kBlockRows), static_cast<unsigned>(B * NH), 1};
    // the 16-bit operands, as attention/tensor_core.cu makes them (poisoned first: prep must write them all)
    const int64_t n = K::operand_elems<HS>(s), Tp = K::padded_T(T);
    std::vector<uint16_t> ops(4 * n, 0xFFFF);
    uint16_t* q = ops.data();
    // both paths: 16-byte loads where attention/tensor_core.cu takes them, and element by element
    const bool vec = hs % 4 == 0 && seed % 2 == 0;
    auto prep = [&](uint16_t* rows, const float* src, int64_t ld, unsigned parts) {
      const sim_dim3 pgrid{static_cast<unsigned>(Tp / K::kBlockRows), static_cast<unsigned>(B * NH), parts};
      sim::launch(pgrid, K::kThreads, 0, [&] { K::prep<BF, HS>(rows, src, ld, s, Tp, vec); });
    };
    prep(q, qkv.data(), 3 * C, 3);  // q, k, v in one launch, as attention/tensor_core.cu
    prep(q + 3 * n, dout.data(), C, 1);
    K::Operands op;
    op.q = K::padded_rows<HS>(q, s, 0), op.k = K::padded_rows<HS>(q, s, 1), op.v = K::padded_rows<HS>(q, s, 2);
    op.dout = K::padded_rows<HS>(q, s, 3), op.Tp = Tp;
    if (s.drop) {
      op.drop_bits = reinterpret_cast<uint32_t*>(lse.data() + A::lse_floats(B, NH, T));
      std::fill(op.drop_bits, op.drop_bits + A::drop_bit_words(B, NH, T), 0xFFFFFFFFu);
    }
    sim::launch(grid, K::kThreads, K::fwd_smem<BF, HS, 1>(Tp),
                [&] { K::fwd<BF, HS, 1>(out.data(), nullptr, lse.data(), op, mask.data(), s); });
    if constexpr (BF) {
      // the output's bf16 rounding alone (out null), in the one- and two-m-tile forms: the roundings
      // of out, bit for bit
      std::vector<uint16_t> want(out.size()), o16(out.size(), 0xFFFFu), o16b(out.size(), 0xFFFFu);
      for (size_t i = 0; i < out.size(); ++i) want[i] = bertcc::f32_to_bf16(out[i]);
      std::vector<float> lse3(lse.size(), NAN);
      K::Operands op3 = op;
      if (s.drop) op3.drop_bits = reinterpret_cast<uint32_t*>(lse3.data() + A::lse_floats(B, NH, T));
      sim::launch(grid, K::kThreads, K::fwd_smem<BF, HS, 1>(Tp),
                  [&] { K::fwd<BF, HS, 1>(nullptr, o16.data(), lse3.data(), op3, mask.data(), s); });
      size_t diff = 0;
      for (size_t i = 0; i < out.size(); ++i) diff += o16[i] != want[i];
      if constexpr (K::fwd_max_mt<HS>() == 2) {
        const sim_dim3 grid2{bertcc::cuda::grid_for(T, 2 * K::kBlockRows), static_cast<unsigned>(B * NH), 1};
        sim::launch(grid2, K::kThreads, K::fwd_smem<BF, HS, 2>(Tp),
                    [&] { K::fwd<BF, HS, 2>(nullptr, o16b.data(), lse3.data(), op3, mask.data(), s); });
        for (size_t i = 0; i < out.size(); ++i) diff += o16b[i] != want[i];
      }
      expect("fwd, the output's bf16 rounding alone: differing from out's roundings", static_cast<double>(diff), 0.0);
    }
    if constexpr (K::fwd_max_mt<HS>() == 2) {
      // two m-tiles per warp (128-row blocks, as attention/tensor_core.cu launches it for these head sizes):
      // each row's arithmetic is the same, so the outputs, lse and decision bits are the same bits
      std::vector<float> out2(out.size(), NAN), lse2(lse.size(), NAN);
      K::Operands op2 = op;
      if (s.drop) {
        op2.drop_bits = reinterpret_cast<uint32_t*>(lse2.data() + A::lse_floats(B, NH, T));
        std::fill(op2.drop_bits, op2.drop_bits + A::drop_bit_words(B, NH, T), 0xFFFFFFFFu);
      }
      const sim_dim3 grid2{bertcc::cuda::grid_for(T, 2 * K::kBlockRows), static_cast<unsigned>(B * NH), 1};
      sim::launch(grid2, K::kThreads, K::fwd_smem<BF, HS, 2>(Tp),
                  [&] { K::fwd<BF, HS, 2>(out2.data(), nullptr, lse2.data(), op2, mask.data(), s); });
      size_t diff = 0;
      for (size_t i = 0; i < out.size(); ++i) diff += std::memcmp(&out[i], &out2[i], sizeof(float)) != 0;
      for (size_t i = 0; i < lse.size(); ++i) diff += std::memcmp(&lse[i], &lse2[i], sizeof(float)) != 0;
      expect("fwd, 2 m-tiles per warp: differing", static_cast<double>(diff), 0.0);
    }
    for (int64_t r = 0; r < B * NH * T; ++r) {  // as attention/fp32.cu's attn_bwd_dot
      const int64_t i = r % T, bh = r / T, b = bh / NH, h = bh % NH;
      float acc = 0.0f;
      for (int64_t c = 0; c < hs; ++c) acc += dout[(b * T + i) * C + h * hs + c] * out[(b * T + i) * C + h * hs + c];
      D[r] = acc;
    }
    // forward, dq and dk/dv from operands `o` into fresh NaN-poisoned buffers (with dropout the
    // decision bits poisoned with set bits: keep everything), for the runs compared with the first
    auto run3 = [&](K::Operands o, std::vector<float>& o_out, std::vector<float>& o_lse, std::vector<float>& o_d) {
      o_out.assign(out.size(), NAN);
      o_lse.assign(lse.size(), NAN);
      o_d.assign(dqkv.size(), NAN);
      if (s.drop) {
        o.drop_bits = reinterpret_cast<uint32_t*>(o_lse.data() + A::lse_floats(B, NH, T));
        std::fill(o.drop_bits, o.drop_bits + A::drop_bit_words(B, NH, T), 0xFFFFFFFFu);
      }
      sim::launch(grid, K::kThreads, K::fwd_smem<BF, HS, 1>(Tp),
                  [&] { K::fwd<BF, HS, 1>(o_out.data(), nullptr, o_lse.data(), o, mask.data(), s); });
      sim::launch(grid, K::kThreads, K::dq_smem<BF, HS>(Tp),
                  [&] { K::bwd_dq<BF, HS>(o_d.data(), nullptr, o, o_lse.data(), D.data(), mask.data(), s); });
      sim::launch(grid, K::kThreads, K::dkv_smem<BF, HS>(Tp),
                  [&] { K::bwd_dkdv<BF, HS>(o_d.data(), nullptr, o, o_lse.data(), D.data(), mask.data(), s); });
    };
    // elements [0, n) of a and b whose bits differ
    auto differing = [](const std::vector<float>& a, const std::vector<float>& b, size_t n) {
      size_t d = 0;
      for (size_t i = 0; i < n; ++i) d += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
      return d;
    };
    // bf16: with dqkv's rounding too (the model's QKV products read it), which must be the
    // roundings of dqkv bit for bit
    std::vector<uint16_t> dqkv16(dqkv.size(), 0xFFFFu);
    uint16_t* d16 = BF ? dqkv16.data() : nullptr;
    sim::launch(grid, K::kThreads, K::dq_smem<BF, HS>(Tp),
                [&] { K::bwd_dq<BF, HS>(dqkv.data(), d16, op, lse.data(), D.data(), mask.data(), s); });
    sim::launch(grid, K::kThreads, K::dkv_smem<BF, HS>(Tp),
                [&] { K::bwd_dkdv<BF, HS>(dqkv.data(), d16, op, lse.data(), D.data(), mask.data(), s); });
    if constexpr (BF) {
      size_t diff = 0;
      for (size_t i = 0; i < dqkv.size(); ++i) diff += dqkv16[i] != bertcc::f32_to_bf16(dqkv[i]);
      expect("bwd, dqkv's bf16 rounding: differing from dqkv's roundings", static_cast<double>(diff), 0.0);
    }
    {
      // the kernels stopping at each sequence's last unmasked key (count_keys, as attention/tensor_core.cu
      // launches it): out, lse and dqkv the same bits as visiting every key, in both forward forms
      std::vector<int32_t> nkeys(B, -7);
      sim::launch({static_cast<unsigned>(B), 1, 1}, K::kThreads, 0,
                  [&] { K::count_keys(nkeys.data(), mask.data(), T); });
      int64_t visited = 0, all = 0;
      for (int64_t b = 0; b < B; ++b) {
        int64_t want = T;
        for (int64_t j = T - 1; j >= 0; --j)
          if (mask[b * T + j] > -10000.0f) {
            want = j + 1;
            break;
          }
        if (nkeys[b] != want)
          ++g_fail, std::printf("  count_keys: sequence %ld: %d, want %ld  FAIL\n", long(b), nkeys[b], long(want));
        visited += (nkeys[b] + K::tile_n<HS>() - 1) / K::tile_n<HS>();
        all += (T + K::tile_n<HS>() - 1) / K::tile_n<HS>();
      }
      K::Operands sk = op;
      sk.nkeys = nkeys.data();
      std::vector<float> out4, lse4, dqkv4;
      run3(sk, out4, lse4, dqkv4);
      // lse alone: the decision bits of tiles past the last key are not written
      const size_t nl = static_cast<size_t>(B * NH * T);
      size_t diff = differing(out, out4, out.size()) + differing(lse, lse4, nl) + differing(dqkv, dqkv4, dqkv.size());
      if constexpr (K::fwd_max_mt<HS>() == 2) {
        std::vector<float> out5(out.size(), NAN), lse5(lse.size(), NAN);
        K::Operands sk2 = sk;
        if (s.drop) sk2.drop_bits = reinterpret_cast<uint32_t*>(lse5.data() + A::lse_floats(B, NH, T));
        const sim_dim3 grid2{bertcc::cuda::grid_for(T, 2 * K::kBlockRows), static_cast<unsigned>(B * NH), 1};
        sim::launch(grid2, K::kThreads, K::fwd_smem<BF, HS, 2>(Tp),
                    [&] { K::fwd<BF, HS, 2>(out5.data(), nullptr, lse5.data(), sk2, mask.data(), s); });
        diff += differing(out, out5, out.size()) + differing(lse, lse5, nl);
      }
      char what[96];
      std::snprintf(what, sizeof what, "stop at the last key (%ld of %ld tiles): differing", long(visited), long(all));
      expect(what, static_cast<double>(diff), 0.0);
    }
    if constexpr (BF) {
      // qkv as its bf16 rounding [B,T,3C] (the model's QKV product writes only that): prep from it
      // makes the same operands as from qkv, and where the kernels read it in place (head size
      // exactly HS, C a multiple of 8) forward and backward give the same bits as from the operands
      std::vector<uint16_t> q16(qkv.size());
      for (size_t i = 0; i < qkv.size(); ++i) q16[i] = bertcc::f32_to_bf16(qkv[i]);
      std::vector<uint16_t> ops16(3 * n, 0xFFFF);
      const sim_dim3 pgrid{static_cast<unsigned>(Tp / K::kBlockRows), static_cast<unsigned>(B * NH), 3};
      sim::launch(pgrid, K::kThreads, 0,
                  [&] { K::prep<BF, HS, uint16_t>(ops16.data(), q16.data(), 3 * C, s, Tp, vec); });
      expect("prep from a bf16 qkv: operands differing",
             static_cast<double>(!std::equal(ops16.begin(), ops16.end(), q)), 0.0);
      if (K::in_place_ok<HS>(q16.data(), s)) {
        K::Operands ip = op;
        ip.q = K::qkv_rows(q16.data(), s, 0), ip.k = K::qkv_rows(q16.data(), s, 1),
        ip.v = K::qkv_rows(q16.data(), s, 2);
        std::vector<float> out3, lse3, dqkv3;
        run3(ip, out3, lse3, dqkv3);
        const size_t diff =
            differing(out, out3, out.size()) + differing(lse, lse3, lse.size()) + differing(dqkv, dqkv3, dqkv.size());
        expect("qkv read in place: out, lse, dqkv differing", static_cast<double>(diff), 0.0);
      } else {
        std::printf("  (qkv not read in place for head size %ld: copied by prep)\n", long(hs));
      }
    }
  });

  // float64 reference on the same inputs rounded as the kernels round them (q, k, v, dout)
  auto r16 = [](float x) { return BF ? bf16_to_f32(f32_to_bf16(x)) : f16_to_f32(f32_to_f16(x)); };
  std::vector<double> rout(B * T * C, 0.0), rlse(B * NH * T), rd(B * T * 3 * C, 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs)), ks = p > 0 ? 1.0 / (1.0 - p) : 1.0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h) {
      const int64_t bh = b * NH + h;
      auto at = [&](int64_t t, int part, int64_t c) {
        return double(r16(qkv[(b * T + t) * 3 * C + part * C + h * hs + c]));
      };
      auto dO = [&](int64_t t, int64_t c) { return double(r16(dout[(b * T + t) * C + h * hs + c])); };
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> P(T), kp(T), dP(T);
        double mx = -INFINITY;
        for (int64_t j = 0; j < T; ++j) {
          double d = 0;
          for (int64_t c = 0; c < hs; ++c) d += at(i, 0, c) * at(j, 1, c);
          P[j] = d * scale + mask[b * T + j];
          mx = std::max(mx, P[j]);
        }
        double l = 0;
        for (int64_t j = 0; j < T; ++j) l += (P[j] = std::exp(P[j] - mx));
        rlse[bh * T + i] = mx + std::log(l);
        double Dd = 0;
        for (int64_t j = 0; j < T; ++j) {
          P[j] /= l;
          kp[j] = p > 0 ? (A::keep(s, bh, i, j) ? ks : 0.0) : 1.0;
          double d = 0;
          for (int64_t c = 0; c < hs; ++c) d += dO(i, c) * at(j, 2, c);
          dP[j] = d * kp[j];
          Dd += dP[j] * P[j];
        }
        for (int64_t c = 0; c < hs; ++c) {
          double a = 0;
          for (int64_t j = 0; j < T; ++j) a += P[j] * kp[j] * at(j, 2, c);
          rout[(b * T + i) * C + h * hs + c] = a;
        }
        for (int64_t j = 0; j < T; ++j) {
          const double ds = P[j] * (dP[j] - Dd) * scale;
          for (int64_t c = 0; c < hs; ++c) {
            rd[(b * T + i) * 3 * C + h * hs + c] += ds * at(j, 1, c);
            rd[(b * T + j) * 3 * C + C + h * hs + c] += ds * at(i, 0, c);
            rd[(b * T + j) * 3 * C + 2 * C + h * hs + c] += P[j] * kp[j] * dO(i, c);
          }
        }
      }
    }
  // the CPU engine's attention in the same precision
  const Precision prec = BF ? Precision::BF16 : Precision::F16;
  std::vector<float> cout(B * T * C), probs(kernels::attention_saved_size(B, T, C, NH, p > 0, prec)),
      work(kernels::attention_work_size(B, T, C, NH)), cd(B * T * 3 * C);
  kernels::attention_forward(cout.data(), probs.data(), work.data(), qkv.data(), mask.data(), B, T, C, NH, p, rng, base,
                             prec);
  kernels::attention_backward(cd.data(), work.data(), dout.data(), qkv.data(), probs.data(), B, T, C, NH, p, prec);

  std::printf("%s B%ld T%ld NH%ld hs%ld dropout %.1f\n", BF ? "bf16" : "fp16", long(B), long(T), long(NH), long(hs),
              double(p));
  const double tol = BF ? 1e-2 : 2e-3;  // 16-bit operands: bf16 ~2e-3 seen, fp16 ~3e-4
  expect("out vs float64", rel_l2(out, rout), tol);
  expect("lse vs float64", rel_l2(std::vector<float>(lse.begin(), lse.begin() + B * NH * T), rlse), 1e-5);
  const char* names[3] = {"dq", "dk", "dv"};
  for (int k = 0; k < 3; ++k) {
    std::vector<float> g;
    std::vector<double> r;
    for (int64_t n = 0; n < B * T; ++n)
      for (int64_t c = 0; c < C; ++c) {
        g.push_back(dqkv[n * 3 * C + k * C + c]);
        r.push_back(rd[n * 3 * C + k * C + c]);
      }
    expect(std::string(names[k]) + " vs float64", rel_l2(g, r), tol);
  }
  expect("out vs the CPU kernel (max)", rel_max(out, cout), 1e-2);
  expect("dqkv vs the CPU kernel (max)", rel_max(dqkv, cd), 1e-2);
  // the kernels' exact results, for telling a change that keeps every bit from one that does not
  // (run this test before and after it and compare these lines)
  uint64_t h = 1469598103934665603ull;
  for (const std::vector<float>* v : {&out, &lse, &dqkv})
    for (float x : *v) {
      uint32_t u;
      std::memcpy(&u, &x, sizeof u);
      h = (h ^ u) * 1099511628211ull;
    }
  std::printf("  bits of out, lse (and dropout decisions), dqkv: %016llx\n", static_cast<unsigned long long>(h));
}

// Unpadded (varlen) batches: the sequences of `lens` packed as rows of qkv [N, 3C], read in place
// from its bf16 rounding as the model's QKV product writes it, no mask; the forward (MT m-tiles)
// and the backward each one launch over the whole batch (place: block x takes the tile of
// varlen_table's entry x). Each sequence must get the bits of the padded kernels on it alone (B 1,
// T its length, a zero mask, its dropout numbers after the previous sequences', its slice of the
// saved buffer): out, out16, lse and decision bits, dq, dk, dv, dqkv16; its decision bits must be
// rng.h's (what the CPU draws); and the whole must match the CPU's varlen kernel. Buffers poisoned
// as in run (NaN, set bits).
template <int HS>
void run_varlen(const std::vector<int64_t>& lens, int64_t NH, float p, unsigned seed, int MT = 1) {
  namespace K = A::tc;
  constexpr bool BF = true;
  const int64_t B = static_cast<int64_t>(lens.size()), hs = HS, C = NH * hs;
  std::vector<int64_t> cu(B + 1, 0);
  int64_t longest = 0;
  for (int64_t b = 0; b < B; ++b) cu[b + 1] = cu[b] + lens[b], longest = std::max(longest, lens[b]);
  const int64_t N = cu[B];
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> qkv(N * 3 * C), dout(N * C);
  for (auto& x : qkv) x = 2.0f * u(gen);
  for (auto& x : dout) x = u(gen);
  std::vector<uint16_t> q16(qkv.size());
  for (size_t i = 0; i < qkv.size(); ++i) q16[i] = bertcc::f32_to_bf16(qkv[i]);
  const Rng rng(77 + seed, 0);
  const uint64_t base = 1000;
  const A::Shape s = A::make_shape(1, N, C, NH, p, rng, base);
  const std::vector<int64_t> t64 = A::varlen_table(cu.data(), B, NH, s.drop, base, K::kBlockRows);
  const std::vector<int64_t> tf = A::varlen_table(cu.data(), B, NH, s.drop, base, MT * K::kBlockRows);
  // the saved buffer as Backend's default sizes it: the slices end where the last one does
  const int64_t nl = lens.back();
  const int64_t saved_floats =
      t64[4 * (B - 1) + 2] + (A::lse_floats(1, NH, nl) + (s.drop ? A::drop_bit_words(1, NH, nl) : 0) + 15) / 16 * 16;
  auto poisoned = [](size_t n) {
    std::vector<float> v(n);
    std::memset(v.data(), 0xFF, n * sizeof(float));  // NaN, and as decision words: keep everything
    return v;
  };
  std::vector<float> out(N * C, NAN), saved = poisoned(saved_floats), dqkv(N * 3 * C, NAN), D(N * NH, NAN);
  std::vector<uint16_t> out16(N * C, 0xFFFFu), dqkv16(N * 3 * C, 0xFFFFu);
  // the row dots of every sequence and head: sequence b's [NH][n] from NH cu[b] (as place reads them)
  auto row_dots = [&](float* Dst, const float* o, const float* d, int64_t n) {
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t i = 0; i < n; ++i) {
        float acc = 0.0f;
        for (int64_t c = 0; c < hs; ++c) acc += d[i * C + h * hs + c] * o[i * C + h * hs + c];
        Dst[h * n + i] = acc;
      }
  };
  {
    K::Operands op;
    op.q = K::qkv_rows(q16.data(), s, 0), op.k = K::qkv_rows(q16.data(), s, 1), op.v = K::qkv_rows(q16.data(), s, 2);
    if (s.drop) op.drop_bits = reinterpret_cast<uint32_t*>(saved.data());
    op.nseqs = B;
    op.seqs = tf.data();
    const int64_t Tp = K::padded_T(longest);
    const sim_dim3 gf{static_cast<unsigned>((tf.size() - 4 * B) / 2), static_cast<unsigned>(NH), 1};
    if (MT == 2) {
      if constexpr (K::fwd_max_mt<HS>() == 2)
        sim::launch(gf, K::kThreads, K::fwd_smem<BF, HS, 2>(Tp),
                    [&] { K::fwd<BF, HS, 2, 1, true>(out.data(), out16.data(), saved.data(), op, nullptr, s); });
    } else {
      sim::launch(gf, K::kThreads, K::fwd_smem<BF, HS, 1>(Tp),
                  [&] { K::fwd<BF, HS, 1, 1, true>(out.data(), out16.data(), saved.data(), op, nullptr, s); });
    }
    for (int64_t b = 0; b < B; ++b)
      row_dots(D.data() + NH * cu[b], out.data() + cu[b] * C, dout.data() + cu[b] * C, lens[b]);
    // the row dots kernel puts each where the host does (its sums in another order: within rounding)
    std::vector<float> Dk(D.size(), NAN);
    sim::launch({bertcc::cuda::grid_for(N * NH * 32, 256), 1, 1}, 256, 0,
                [&] { A::row_dots_varlen(Dk.data(), dout.data(), out.data(), t64.data(), B, N, C, NH); });
    expect("row dots kernel vs the host's", rel_l2(Dk, std::vector<double>(D.begin(), D.end())), 1e-6);
    // dout's operand: prep over the N rows as one sequence
    std::vector<uint16_t> dops(K::operand_elems<HS>(s), 0xFFFF);
    const sim_dim3 pgrid{static_cast<unsigned>(K::padded_T(N) / K::kBlockRows), static_cast<unsigned>(NH), 1};
    sim::launch(pgrid, K::kThreads, 0, [&] { K::prep<BF, HS>(dops.data(), dout.data(), C, s, K::padded_T(N), true); });
    op.dout = K::padded_rows<HS>(dops.data(), s, 0);
    op.seqs = t64.data();
    const sim_dim3 gb{static_cast<unsigned>((t64.size() - 4 * B) / 2), static_cast<unsigned>(NH), 1};
    sim::launch(gb, K::kThreads, K::dq_smem<BF, HS>(Tp),
                [&] { K::bwd_dq<BF, HS, true>(dqkv.data(), dqkv16.data(), op, saved.data(), D.data(), nullptr, s); });
    sim::launch(gb, K::kThreads, K::dkv_smem<BF, HS>(Tp),
                [&] { K::bwd_dkdv<BF, HS, true>(dqkv.data(), dqkv16.data(), op, saved.data(), D.data(), nullptr, s); });
  }
  std::printf("varlen bf16 lengths");
  for (int64_t n : lens) std::printf(" %ld", long(n));
  std::printf(" NH%ld hs%ld dropout %.1f, %d m-tile(s)\n", long(NH), long(hs), double(p), MT);
  // each sequence alone through the padded kernels, as the per-sequence default launches them
  size_t diff = 0, words = 0, bad_bits = 0;
  uint64_t sbase = base;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = lens[b], r0 = cu[b], Tp = K::padded_T(n);
    const A::Shape sb = A::make_shape(1, n, C, NH, p, rng, sbase);
    const std::vector<float> mask(n, 0.0f);
    const int64_t nsaved = A::lse_floats(1, NH, n) + (sb.drop ? A::drop_bit_words(1, NH, n) : 0);
    std::vector<float> o(n * C, NAN), sv = poisoned(nsaved), d(n * 3 * C, NAN), Db(n * NH);
    std::vector<uint16_t> o16(n * C, 0xFFFFu), d16(n * 3 * C, 0xFFFFu), dops(K::operand_elems<HS>(sb), 0xFFFF);
    K::Operands op;
    const uint16_t* q = q16.data() + r0 * 3 * C;
    op.q = K::qkv_rows(q, sb, 0), op.k = K::qkv_rows(q, sb, 1), op.v = K::qkv_rows(q, sb, 2), op.Tp = Tp;
    if (sb.drop) op.drop_bits = reinterpret_cast<uint32_t*>(sv.data() + A::lse_floats(1, NH, n));
    const sim_dim3 grid{bertcc::cuda::grid_for(n, K::kBlockRows), static_cast<unsigned>(NH), 1};
    sim::launch(grid, K::kThreads, K::fwd_smem<BF, HS, 1>(Tp),
                [&] { K::fwd<BF, HS, 1>(o.data(), o16.data(), sv.data(), op, mask.data(), sb); });
    row_dots(Db.data(), o.data(), dout.data() + r0 * C, n);
    const sim_dim3 pgrid{static_cast<unsigned>(Tp / K::kBlockRows), static_cast<unsigned>(NH), 1};
    sim::launch(pgrid, K::kThreads, 0, [&] { K::prep<BF, HS>(dops.data(), dout.data() + r0 * C, C, sb, Tp, true); });
    op.dout = K::padded_rows<HS>(dops.data(), sb, 0);
    sim::launch(grid, K::kThreads, K::dq_smem<BF, HS>(Tp),
                [&] { K::bwd_dq<BF, HS>(d.data(), d16.data(), op, sv.data(), Db.data(), mask.data(), sb); });
    sim::launch(grid, K::kThreads, K::dkv_smem<BF, HS>(Tp),
                [&] { K::bwd_dkdv<BF, HS>(d.data(), d16.data(), op, sv.data(), Db.data(), mask.data(), sb); });
    auto differ = [](const void* a, const void* b, size_t n, size_t size) {
      size_t k = 0;
      for (size_t i = 0; i < n; ++i)
        k += std::memcmp(static_cast<const char*>(a) + i * size, static_cast<const char*>(b) + i * size, size) != 0;
      return k;
    };
    diff +=
        differ(o.data(), out.data() + r0 * C, o.size(), 4) + differ(o16.data(), out16.data() + r0 * C, o16.size(), 2);
    diff += differ(sv.data(), saved.data() + t64[4 * b + 2], sv.size(), 4);  // lse, then every decision word
    diff += differ(d.data(), dqkv.data() + r0 * 3 * C, d.size(), 4) +
            differ(d16.data(), dqkv16.data() + r0 * 3 * C, d16.size(), 2);
    if (sb.drop) {
      // the decisions, read back from the words as bwd_dq reads them, against rng.h's numbering
      const uint32_t* w = reinterpret_cast<const uint32_t*>(saved.data() + t64[4 * b + 2] + A::lse_floats(1, NH, n));
      for (int64_t h = 0; h < NH; ++h)
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < n; ++j) {
            const int64_t e = 2 * ((i % 16) / 8) + (j % 2), lane = 4 * (i % 8) + (j % 8) / 2;
            const bool got = (w[K::drop_word(h, Tp, i / 16, j / 8) + e] >> lane) & 1u;
            bad_bits += got != A::keep(sb, h, i, j);
            ++words;
          }
    }
    sbase += attention_drop_numbers(static_cast<uint64_t>(NH), static_cast<uint64_t>(n));
  }
  expect("each sequence vs the padded kernels alone: differing", static_cast<double>(diff), 0.0);
  if (s.drop) {
    char what[96];
    std::snprintf(what, sizeof what, "decisions (%zu) vs rng.h's: differing", words);
    expect(what, static_cast<double>(bad_bits), 0.0);
  }
  // the CPU's varlen kernel in bf16 (from fp32 qkv, which it rounds as the model's product does)
  std::vector<float> cout(N * C),
      csaved(kernels::attention_varlen_saved_size(cu.data(), B, C, NH, p > 0, Precision::BF16)), cd(N * 3 * C);
  kernels::attention_varlen_forward(cout.data(), csaved.data(), qkv.data(), cu.data(), B, C, NH, p, rng, base,
                                    Precision::BF16);
  kernels::attention_varlen_backward(cd.data(), dout.data(), qkv.data(), csaved.data(), cu.data(), B, C, NH, p,
                                     Precision::BF16);
  expect("out vs the CPU varlen kernel (max)", rel_max(out, cout), 1e-2);
  expect("dqkv vs the CPU varlen kernel (max)", rel_max(dqkv, cd), 1e-2);
}

// The fp32 kernels on unpadded (varlen) batches: the sequences of `lens` packed as rows of fp32 qkv
// [N, 3C], no mask, forward and backward each one launch over the whole batch (seq_place: block x
// takes the tile of varlen_table's entry x, the table without decision bits: fp32 saves none).
// Each sequence must get the bits of the padded fp32 kernels on it alone (B 1, T its length, a zero
// mask, its dropout numbers after the previous sequences', its lse in its slice of the saved
// buffer): out, lse, dq, dk, dv; and the whole must match the CPU's fp32 varlen kernel. Buffers
// poisoned with NaN.
void run_varlen_f32(const std::vector<int64_t>& lens, int64_t NH, int64_t hs, float p, unsigned seed) {
  namespace F = A::f32;
  const int64_t B = static_cast<int64_t>(lens.size()), C = NH * hs;
  std::vector<int64_t> cu(B + 1, 0);
  for (int64_t b = 0; b < B; ++b) cu[b + 1] = cu[b] + lens[b];
  const int64_t N = cu[B];
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> qkv(N * 3 * C), dout(N * C);
  for (auto& x : qkv) x = 2.0f * u(gen);
  for (auto& x : dout) x = u(gen);
  const Rng rng(77 + seed, 0);
  const uint64_t base = 1000;
  const A::Shape s = A::make_shape(1, N, C, NH, p, rng, base);
  const std::vector<int64_t> t = A::varlen_table(cu.data(), B, NH, false, base, F::kRows);
  const int64_t saved_floats = t[4 * (B - 1) + 2] + (A::lse_floats(1, NH, lens.back()) + 15) / 16 * 16;
  std::vector<float> out(N * C, NAN), saved(saved_floats, NAN), dqkv(N * 3 * C, NAN), D(N * NH, NAN);
  const sim_dim3 grid{static_cast<unsigned>((t.size() - 4 * B) / 2), static_cast<unsigned>(NH), 1};
  A::dispatch_hs(hs, [&](auto hsc) {
    constexpr int HS = decltype(hsc)::value;
    sim::launch(grid, F::kRows, 0,
                [&] { F::fwd<HS, true>(out.data(), saved.data(), qkv.data(), nullptr, s, t.data(), B); });
    sim::launch({bertcc::cuda::grid_for(N * NH * 32, 256), 1, 1}, 256, 0,
                [&] { A::row_dots_varlen(D.data(), dout.data(), out.data(), t.data(), B, N, C, NH); });
    sim::launch(grid, F::kRows, 0, [&] {
      F::bwd_dq<HS, true>(dqkv.data(), dout.data(), qkv.data(), saved.data(), D.data(), nullptr, s, t.data(), B);
    });
    sim::launch(grid, F::kRows, 0, [&] {
      F::bwd_dkdv<HS, true>(dqkv.data(), dout.data(), qkv.data(), saved.data(), D.data(), nullptr, s, t.data(), B);
    });
  });
  std::printf("varlen fp32 lengths");
  for (int64_t n : lens) std::printf(" %ld", long(n));
  std::printf(" NH%ld hs%ld dropout %.1f\n", long(NH), long(hs), double(p));
  // each sequence alone through the padded fp32 kernels, as the per-sequence default launches them
  size_t diff = 0;
  uint64_t sbase = base;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = lens[b], r0 = cu[b];
    const A::Shape sb = A::make_shape(1, n, C, NH, p, rng, sbase);
    const std::vector<float> mask(n, 0.0f);
    std::vector<float> o(n * C, NAN), lse(A::lse_floats(1, NH, n), NAN), d(n * 3 * C, NAN), Db(n * NH, NAN);
    const float* q = qkv.data() + r0 * 3 * C;
    const float* dO = dout.data() + r0 * C;
    const sim_dim3 g{bertcc::cuda::grid_for(n, F::kRows), static_cast<unsigned>(NH), 1};
    A::dispatch_hs(hs, [&](auto hsc) {
      constexpr int HS = decltype(hsc)::value;
      sim::launch(g, F::kRows, 0, [&] { F::fwd<HS, false>(o.data(), lse.data(), q, mask.data(), sb, nullptr, 0); });
      sim::launch({bertcc::cuda::grid_for(NH * n * 32, 256), 1, 1}, 256, 0,
                  [&] { F::bwd_dot(Db.data(), dO, o.data(), sb, hs); });
      sim::launch(g, F::kRows, 0,
                  [&] { F::bwd_dq<HS, false>(d.data(), dO, q, lse.data(), Db.data(), mask.data(), sb, nullptr, 0); });
      sim::launch(g, F::kRows, 0,
                  [&] { F::bwd_dkdv<HS, false>(d.data(), dO, q, lse.data(), Db.data(), mask.data(), sb, nullptr, 0); });
    });
    for (size_t i = 0; i < o.size(); ++i) diff += std::memcmp(&o[i], &out[r0 * C + i], 4) != 0;
    for (size_t i = 0; i < lse.size(); ++i) diff += std::memcmp(&lse[i], &saved[t[4 * b + 2] + i], 4) != 0;
    for (size_t i = 0; i < d.size(); ++i) diff += std::memcmp(&d[i], &dqkv[r0 * 3 * C + i], 4) != 0;
    sbase += attention_drop_numbers(static_cast<uint64_t>(NH), static_cast<uint64_t>(n));
  }
  expect("each sequence vs the padded kernels alone: differing", static_cast<double>(diff), 0.0);
  std::vector<float> cout(N * C),
      csaved(kernels::attention_varlen_saved_size(cu.data(), B, C, NH, p > 0, Precision::F32)), cd(N * 3 * C);
  kernels::attention_varlen_forward(cout.data(), csaved.data(), qkv.data(), cu.data(), B, C, NH, p, rng, base,
                                    Precision::F32);
  kernels::attention_varlen_backward(cd.data(), dout.data(), qkv.data(), csaved.data(), cu.data(), B, C, NH, p,
                                     Precision::F32);
  expect("out vs the CPU varlen kernel (max)", rel_max(out, cout), 1e-5);
  expect("dqkv vs the CPU varlen kernel (max)", rel_max(dqkv, cd), 1e-5);
}
}  // namespace

int main() {
  // head sizes 12 and 48 are padded to 16 and 64; T not a multiple of the 64-row block or the
  // 64- (32-) key tile; dropout on and off; padding masks.
  // T a multiple of 16 or not (rng.h's 16 x 16 dropout tiles then end partway)
  run<true>(2, 72, 2, 64, 0.1f, 10);
  run<true>(1, 36, 2, 128, 0.1f, 11);
  run<true>(1, 100, 3, 16, 0.1f, 12);
  run<false>(1, 68, 2, 64, 0.1f, 13);
  run<true>(2, 70, 2, 64, 0.1f, 1);
  run<true>(1, 33, 2, 64, 0.0f, 2);
  run<true>(1, 70, 1, 128, 0.1f, 3);
  run<true>(2, 19, 2, 16, 0.1f, 4);
  run<true>(1, 45, 2, 48, 0.0f, 5);
  run<true>(1, 23, 3, 12, 0.1f, 6);
  run<true>(1, 130, 1, 32, 0.1f, 7);
  run<false>(1, 70, 2, 64, 0.1f, 8);
  run<false>(1, 33, 1, 128, 0.0f, 9);
  // heavy padding, as SQuAD and GLUE batches padded to max_seq_length: whole key tiles and dk/dv
  // blocks past a sequence's last key (skipped), a sequence of padding alone (every key visited),
  // one without padding, and at head size 128 (32-key tiles) a dk/dv block half past the forward's
  // last key tile, whose decision bits the forward did not write
  run<true>(4, 200, 2, 64, 0.1f, 14, {100, 0, 200, 30});
  run<true>(3, 150, 2, 128, 0.1f, 15, {113, 76, 20});
  run<false>(2, 130, 2, 64, 0.1f, 16, {40, 129});
  run<true>(2, 96, 2, 32, 0.0f, 17, {10, 65});
  // unpadded (varlen) batches: lengths below, across and at the 16-row dropout tiles, the 64-row
  // blocks and the 32- and 64-key tiles; a batch of one sequence; dropout on and off; the forward
  // with two m-tiles per warp where attention/tensor_core.cu may launch it so
  run_varlen<64>({7, 1, 37, 16, 3}, 2, 0.1f, 20);
  run_varlen<64>({7, 1, 37, 16, 3}, 2, 0.0f, 21);
  run_varlen<32>({70, 1, 129, 64}, 2, 0.1f, 22, 2);
  run_varlen<128>({33, 5, 96}, 1, 0.1f, 23);
  run_varlen<16>({19, 65, 2}, 3, 0.0f, 24);
  run_varlen<64>({100}, 2, 0.1f, 25);
  // fp32: lengths below, across and at the 32-key tiles and 64-row blocks; head sizes the kernels
  // pad (12 to 16, 48 to 64); dropout on and off; a batch of one sequence
  run_varlen_f32({7, 1, 37, 16, 3}, 2, 64, 0.1f, 30);
  run_varlen_f32({70, 1, 129, 64}, 2, 32, 0.0f, 31);
  run_varlen_f32({33, 5, 96}, 1, 128, 0.1f, 32);
  run_varlen_f32({19, 65, 2}, 3, 12, 0.1f, 33);
  run_varlen_f32({45, 66}, 2, 48, 0.0f, 34);
  run_varlen_f32({100}, 2, 16, 0.1f, 35);
  std::printf("%d failed\n", g_fail);
  return g_fail ? 1 : 0;
}
