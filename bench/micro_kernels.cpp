// Kernel micro-benchmarks (Google Benchmark): bertcc_microbench --benchmark_filter=...
// Shapes are bert-base at batch 8, sequence 128 (N = 1024 rows, C = 768, I = 3072, NH = 12).
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "bertcc/rng.h"
#include "kernels/gemm.h"
#include "kernels/gemm_int8.h"
#include "kernels/kernels.h"

using namespace bertcc;

namespace {
constexpr int64_t B = 8, T = 128, C = 768, I = 3072, NH = 12, N = B * T;

std::vector<float> filled(size_t n, float v) { return std::vector<float>(n, v); }

void BM_Linear(benchmark::State& st) {
  const Precision p = st.range(0) ? Precision::BF16 : Precision::F32;
  auto x = filled(N * C, 0.01f), W = filled(I * C, 0.02f), b = filled(I, 0.0f), y = filled(N * I, 0.0f);
  for (auto _ : st) kernels::linear_forward(y.data(), x.data(), W.data(), b.data(), N, I, C, p);
  st.counters["TFLOP/s"] = benchmark::Counter(2.0 * N * I * C * st.iterations() / 1e12, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Linear)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

// fp32 linear layers of bert-base on oneDNN (arg 0) and on the row-invariant kernel (arg 1, what an
// AVX2 CPU runs), shapes QKV, attention output, FFN in, FFN out (arg 2 = 0..3). With
// ONEDNN_MAX_CPU_ISA=AVX2, arg 0 is oneDNN's AVX2 sgemm: the two AVX2 kernels side by side.
void BM_LinearF32(benchmark::State& st) {
  const int64_t shapes[4][2] = {{3 * C, C}, {C, C}, {I, C}, {C, I}};
  const int64_t Nout = shapes[st.range(1)][0], K = shapes[st.range(1)][1];
  auto x = filled(N * K, 0.01f), W = filled(Nout * K, 0.02f), b = filled(Nout, 0.0f), y = filled(N * Nout, 0.0f);
  kernels::set_row_gemm(st.range(0) ? kernels::RowGemm::Always : kernels::RowGemm::Never);
  for (auto _ : st) kernels::linear_forward(y.data(), x.data(), W.data(), b.data(), N, Nout, K, Precision::F32);
  kernels::set_row_gemm(kernels::RowGemm::Auto);
  st.counters["TFLOP/s"] = benchmark::Counter(2.0 * N * Nout * K * st.iterations() / 1e12, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_LinearF32)->ArgsProduct({{0, 1}, {0, 1, 2, 3}})->Unit(benchmark::kMillisecond)->UseRealTime();

// The same layers with W packed once, as inference holds them (pack_linear_weight: oneDNN's
// blocked layout for arg 0 where its brgemm runs fp32, else its plain path; the row kernel's panels
// for arg 1). Arg 2 (0..3) as above, arg 3 the rows (1,024: batch 8 x 128; 32: one short request).
void BM_LinearF32Packed(benchmark::State& st) {
  const int64_t shapes[4][2] = {{3 * C, C}, {C, C}, {I, C}, {C, I}};
  const int64_t Nout = shapes[st.range(1)][0], K = shapes[st.range(1)][1], M = st.range(2);
  auto x = filled(M * K, 0.01f), W = filled(Nout * K, 0.02f), b = filled(Nout, 0.0f), y = filled(M * Nout, 0.0f);
  kernels::set_row_gemm(st.range(0) ? kernels::RowGemm::Always : kernels::RowGemm::Never);
  const auto packed = kernels::pack_linear_weight(W.data(), Nout, K);
  for (auto _ : st) {
    if (packed)
      kernels::linear_forward_packed(y.data(), x.data(), *packed, b.data(), M);
    else
      kernels::linear_forward(y.data(), x.data(), W.data(), b.data(), M, Nout, K, Precision::F32);
  }
  kernels::set_row_gemm(kernels::RowGemm::Auto);
  st.counters["TFLOP/s"] = benchmark::Counter(2.0 * M * Nout * K * st.iterations() / 1e12, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_LinearF32Packed)
    ->ArgsProduct({{0, 1}, {0, 1, 2, 3}, {N, 32}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// bert-base's feed-forward block on the row kernel (what AVX2 CPUs run for fp32 inference), weights
// in panels: arg 0 = 0 its three steps (linear_forward_rows_packed, gelu_forward,
// linear_forward_rows_packed: the inner rows written, read and written, then packed again), 1 in
// one kernel (ffn_rows_packed: the GELU'd inner rows written once, straight into the second
// layer's layout; the same bits); arg 1 the rows. Compare the two with
// --benchmark_repetitions=N --benchmark_enable_random_interleaving=true (a shared machine's drift
// then touches both).
void BM_FeedForwardRows(benchmark::State& st) {
  const int64_t M = st.range(1);
  auto x = filled(M * C, 0.01f), W1 = filled(I * C, 0.02f), b1 = filled(I, 0.0f), W2 = filled(C * I, 0.02f),
       b2 = filled(C, 0.0f), h = filled(M * I, 0.0f), g = filled(M * I, 0.0f), y = filled(M * C, 0.0f);
  std::vector<float> p1(kernels::row_panels_size(I, C)), p2(kernels::row_panels_size(C, I)),
      room(kernels::ffn_rows_scratch_floats(M, I));
  kernels::pack_row_panels(W1.data(), I, C, p1.data());
  kernels::pack_row_panels(W2.data(), C, I, p2.data());
  for (auto _ : st) {
    if (st.range(0)) {
      kernels::ffn_rows_packed(y.data(), x.data(), p1.data(), b1.data(), p2.data(), b2.data(), M, C, I,
                               Activation::GeluErf, room.data());
    } else {
      kernels::linear_forward_rows_packed(h.data(), x.data(), p1.data(), b1.data(), M, I, C);
      kernels::gelu_forward(g.data(), h.data(), M * I, Activation::GeluErf);
      kernels::linear_forward_rows_packed(y.data(), g.data(), p2.data(), b2.data(), M, C, I);
    }
  }
  st.counters["TFLOP/s"] = benchmark::Counter(4.0 * M * I * C * st.iterations() / 1e12, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_FeedForwardRows)->ArgsProduct({{0, 1}, {N, 32}})->Unit(benchmark::kMillisecond)->UseRealTime();

// The same layers in int8 on rows already quantized (linear_forward_int8_q: the int32 products
// and their rescale to fp32), weights held as inference holds them: arg 0 = 0 oneDNN (its blocked
// layout where it has a VNNI/AMX kernel, then a rescale pass; else its gemm, which repacks W every
// call), 1 bertcc's own kernel (gemm_int8_rows.cpp: AVX512-VNNI with the rescale in registers, or
// AVX2; what CPUs without AMX run); arg 1 the layer as above, arg 2 the rows (1,024 and 256: the
// own kernel's row blocks and split columns; 32); arg 3 the activations' bits (8, or 7: the AVX2
// kernel then multiplies two k-quads a step). With ONEDNN_MAX_CPU_ISA=AVX2, arg 0 is oneDNN's
// AVX2 int8 gemm and arg 1 the AVX2 kernel. TOP/s: 2 M N K a second.
void BM_LinearInt8(benchmark::State& st) {
  const int64_t shapes[4][2] = {{3 * C, C}, {C, C}, {I, C}, {C, I}};
  const int64_t Nout = shapes[st.range(1)][0], K = shapes[st.range(1)][1], M = st.range(2);
  std::vector<int8_t> xq(static_cast<size_t>(M * K), -3);
  std::vector<int32_t> acc(static_cast<size_t>(M * Nout));
  std::vector<float> sx(static_cast<size_t>(M), 0.01f);
  auto W = filled(Nout * K, 0.02f), y = filled(M * Nout, 0.0f);
  kernels::set_row_gemm(st.range(0) ? kernels::RowGemm::Always : kernels::RowGemm::Never);
  kernels::Int8Weight w = kernels::quantize_weight_int8(W.data(), Nout, K);
  w.act_max = st.range(3) == 7 ? kernels::kInt8ActivationMax7 : kernels::kInt8ActivationMax;
  kernels::pack_int8_weight(w);
  kernels::set_row_gemm(kernels::RowGemm::Auto);
  for (auto _ : st) kernels::linear_forward_int8_q(y.data(), xq.data(), sx.data(), w, nullptr, M);
  st.counters["TOP/s"] = benchmark::Counter(2.0 * M * Nout * K * st.iterations() / 1e12, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_LinearInt8)
    ->ArgsProduct({{0, 1}, {0, 1, 2, 3}, {N, 256, 32}, {8, 7}})  // own kernel, shape, rows, activation bits
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

#if defined(__x86_64__)
// Which int8 product step this core runs fastest: not a kernel of bertcc's, but the instruction mix
// of each one, with its operands in registers (no loads), 2 rows x 2 column vectors x 2 k-quads =
// 256 products per loop trip, in int32 sums. It answers, on the CPU at hand, whether a remedy
// for AVX2's vpmaddubsw would pay (docs/performance.md, "int8 on a double-pumped AVX-512 core"):
//   0  AVX2 as bertcc and MLAS run it: vpmaddubsw, vpmaddwd (by ones), vpaddd per 32 products
//   1  16-bit pair sums added first, which 7-bit activations would allow (2 x 127 x 63 x 2 < 2^15):
//      2 vpmaddubsw, vpaddw, vpmaddwd, vpaddd per 64 products (3 multiplies instead of 4)
//   2  the exact sign trick (|x| times w with x's sign: vpabsb, vpsignb, then as 1)
//   3  vpdpbusd on ymm (EVEX; AVX512-VNNI + VL), 4  vpdpbusd on zmm (AVX512-VNNI)
// products/ns: 256 a trip for 0-2, 16 vpdpbusd's (512 on ymm, 1,024 on zmm) for 3-4; only the ratio
// between the rows of one CPU means anything.
#define BERTCC_OPAQUE(...) \
  asm volatile("" : "+v"(x0), "+v"(x1), "+v"(y0), "+v"(y1), "+v"(w0), "+v"(w1), "+v"(w2), "+v"(w3))
// The steps as functions of their own with their targets (a lambda does not take its enclosing
// function's target: built for a CPU without AVX2 or AVX-512, its intrinsics would not compile).
#define BERTCC_AVX2_INLINE __attribute__((target("avx2"), always_inline)) inline
#define BERTCC_VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
BERTCC_AVX2_INLINE __m256i step_dot(__m256i x, __m256i w) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(x, w), _mm256_set1_epi16(1));
}
BERTCC_AVX2_INLINE __m256i step_pair(__m256i x, __m256i w, __m256i y, __m256i v) {
  return _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(x, w), _mm256_maddubs_epi16(y, v)),
                           _mm256_set1_epi16(1));
}
BERTCC_AVX2_INLINE __m256i step_sign(__m256i x, __m256i w, __m256i y, __m256i v) {
  return step_pair(_mm256_abs_epi8(x), _mm256_sign_epi8(w, x), _mm256_abs_epi8(y), _mm256_sign_epi8(v, y));
}
template <int Variant>
__attribute__((target("avx2"), noinline)) int64_t int8_step_avx2(int64_t trips) {
  __m256i x0 = _mm256_set1_epi32(0x01020304), x1 = _mm256_set1_epi32(0x05060708), y0 = _mm256_set1_epi32(0x090a0b0c),
          y1 = _mm256_set1_epi32(0x0d0e0f10), w0 = _mm256_set1_epi8(3), w1 = _mm256_set1_epi8(-5),
          w2 = _mm256_set1_epi8(7), w3 = _mm256_set1_epi8(-9);
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t t = 0; t < trips; ++t) {
    BERTCC_OPAQUE();
    if constexpr (Variant == 0) {
      a0 = _mm256_add_epi32(_mm256_add_epi32(a0, step_dot(x0, w0)), step_dot(y0, w2));
      a1 = _mm256_add_epi32(_mm256_add_epi32(a1, step_dot(x0, w1)), step_dot(y0, w3));
      a2 = _mm256_add_epi32(_mm256_add_epi32(a2, step_dot(x1, w0)), step_dot(y1, w2));
      a3 = _mm256_add_epi32(_mm256_add_epi32(a3, step_dot(x1, w1)), step_dot(y1, w3));
    } else if constexpr (Variant == 1) {
      a0 = _mm256_add_epi32(a0, step_pair(x0, w0, y0, w2));
      a1 = _mm256_add_epi32(a1, step_pair(x0, w1, y0, w3));
      a2 = _mm256_add_epi32(a2, step_pair(x1, w0, y1, w2));
      a3 = _mm256_add_epi32(a3, step_pair(x1, w1, y1, w3));
    } else {
      a0 = _mm256_add_epi32(a0, step_sign(x0, w0, y0, w2));
      a1 = _mm256_add_epi32(a1, step_sign(x0, w1, y0, w3));
      a2 = _mm256_add_epi32(a2, step_sign(x1, w0, y1, w2));
      a3 = _mm256_add_epi32(a3, step_sign(x1, w1, y1, w3));
    }
  }
  alignas(32) int32_t out[8];
  _mm256_store_si256(reinterpret_cast<__m256i*>(out),
                     _mm256_add_epi32(_mm256_add_epi32(a0, a1), _mm256_add_epi32(a2, a3)));
  return out[0];
}

// vpdpbusd in place (as assembly, as the kernels write it), on ymm or zmm
struct StepVnni {
  BERTCC_VNNI_TARGET __attribute__((always_inline)) static inline __m256i dot(__m256i c, __m256i x, __m256i w) {
    asm("vpdpbusd %2, %1, %0" : "+v"(c) : "v"(x), "v"(w));
    return c;
  }
  BERTCC_VNNI_TARGET __attribute__((always_inline)) static inline __m512i dot(__m512i c, __m512i x, __m512i w) {
    asm("vpdpbusd %2, %1, %0" : "+v"(c) : "v"(x), "v"(w));
    return c;
  }
};
// 16 sums (of the 32 vector registers AVX-512 has), one vpdpbusd each a trip: enough for its latency
// times its rate, so that the rate is what is measured; the 8 products above twice over. Named one
// by one: held in an array, GCC 12 copies them between registers and memory on every trip.
#define BERTCC_EIGHT(p, q, r, s, t, u, v, w) \
  p = StepVnni::dot(p, x0, w0);              \
  q = StepVnni::dot(q, x0, w1);              \
  r = StepVnni::dot(r, x1, w0);              \
  s = StepVnni::dot(s, x1, w1);              \
  t = StepVnni::dot(t, y0, w2);              \
  u = StepVnni::dot(u, y0, w3);              \
  v = StepVnni::dot(v, y1, w2);              \
  w = StepVnni::dot(w, y1, w3)
template <class V>
BERTCC_VNNI_TARGET __attribute__((always_inline)) inline int64_t int8_step_vnni(int64_t trips, V x0, V x1, V y0, V y1,
                                                                                V w0, V w1, V w2, V w3) {
  V a0 = StepVnni::dot(x0, y1, w0), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
  V b0 = StepVnni::dot(x1, y0, w1), b1 = b0, b2 = b0, b3 = b0, b4 = b0, b5 = b0, b6 = b0, b7 = b0;
  for (int64_t t = 0; t < trips; ++t) {
    BERTCC_OPAQUE();
    BERTCC_EIGHT(a0, a1, a2, a3, a4, a5, a6, a7);
    BERTCC_EIGHT(b0, b1, b2, b3, b4, b5, b6, b7);
  }
  const V sum = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + b0 + b1 + b2 + b3 + b4 + b5 + b6 + b7;  // lanes as int64
  int64_t s;
  std::memcpy(&s, &sum, sizeof s);
  return s;
}
#undef BERTCC_EIGHT
BERTCC_VNNI_TARGET __attribute__((noinline)) int64_t int8_step_vnni256(int64_t trips) {
  return int8_step_vnni(trips, _mm256_set1_epi32(0x01020304), _mm256_set1_epi32(0x05060708),
                        _mm256_set1_epi32(0x090a0b0c), _mm256_set1_epi32(0x0d0e0f10), _mm256_set1_epi8(3),
                        _mm256_set1_epi8(-5), _mm256_set1_epi8(7), _mm256_set1_epi8(-9));
}
BERTCC_VNNI_TARGET __attribute__((noinline)) int64_t int8_step_vnni512(int64_t trips) {
  return int8_step_vnni(trips, _mm512_set1_epi32(0x01020304), _mm512_set1_epi32(0x05060708),
                        _mm512_set1_epi32(0x090a0b0c), _mm512_set1_epi32(0x0d0e0f10), _mm512_set1_epi8(3),
                        _mm512_set1_epi8(-5), _mm512_set1_epi8(7), _mm512_set1_epi8(-9));
}
#undef BERTCC_AVX2_INLINE
#undef BERTCC_VNNI_TARGET
#undef BERTCC_OPAQUE

void BM_Int8Step(benchmark::State& st) {
  const int variant = static_cast<int>(st.range(0));
  const bool vnni = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                    __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
  if (!__builtin_cpu_supports("avx2") || (variant >= 3 && !vnni)) {
    st.SkipWithError("this CPU lacks the instructions of this variant");
    return;
  }
  constexpr int64_t trips = 1 << 16;
  int64_t sink = 0;
  for (auto _ : st) {
    sink += variant == 0   ? int8_step_avx2<0>(trips)
            : variant == 1 ? int8_step_avx2<1>(trips)
            : variant == 2 ? int8_step_avx2<2>(trips)
            : variant == 3 ? int8_step_vnni256(trips)
                           : int8_step_vnni512(trips);
    benchmark::DoNotOptimize(sink);
  }
  const double products = (variant == 4   ? 1024.0
                           : variant == 3 ? 512.0
                                          : 256.0) *
                          trips * static_cast<double>(st.iterations());
  st.counters["products/ns"] = benchmark::Counter(products / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_Int8Step)->DenseRange(0, 4)->Unit(benchmark::kMicrosecond)->UseRealTime();

// One core's AVX2 FMA rate, the bound of every fp32 engine on an AVX2 CPU (docs/performance.md,
// "The fp32 bound on AVX2"): arg 0, 12 independent fmas a trip with their operands in registers
// (the FMA units' peak); arg 1, the fp32 row kernel's micro-tile (gemm_rows.cpp: 6 rows x 16
// columns, 2 weight loads and 6 broadcasts for 12 fmas a k step) over 256 k steps of operands in
// L1, its sums carried across the trips of a call: what the kernel's instruction mix allows, before any
// cache miss. GFLOP/s: 2 x 8 lanes per fma.
#define BERTCC_FMA12(op) op(0) op(1) op(2) op(3) op(4) op(5) op(6) op(7) op(8) op(9) op(10) op(11)
__attribute__((target("avx2,fma"), noinline)) float f32_step_registers(int64_t trips) {
#define BERTCC_DECL(i) __m256 a##i = _mm256_set1_ps(0.001f * i);
#define BERTCC_FMA(i) a##i = _mm256_fmadd_ps(a##i, w, x);
#define BERTCC_KEEP(i) asm("" : "+x"(a##i));
  BERTCC_FMA12(BERTCC_DECL)
  const __m256 w = _mm256_set1_ps(0.999f), x = _mm256_set1_ps(1e-4f);
  for (int64_t t = 0; t < trips; ++t) {
    BERTCC_FMA12(BERTCC_FMA)
    BERTCC_FMA12(BERTCC_KEEP)
  }
#define BERTCC_SUM(i) +_mm256_cvtss_f32(a##i)
  return 0.0f BERTCC_FMA12(BERTCC_SUM);
#undef BERTCC_DECL
#undef BERTCC_FMA
#undef BERTCC_KEEP
#undef BERTCC_SUM
}
__attribute__((target("avx2,fma"), noinline)) float f32_step_micro_tile(int64_t trips, const float* a,
                                                                        const float* panel) {
#define BERTCC_DECL(r) __m256 lo##r = _mm256_setzero_ps(), hi##r = lo##r;
#define BERTCC_ROW(r)                              \
  {                                                \
    const __m256 xv = _mm256_broadcast_ss(ak + r); \
    lo##r = _mm256_fmadd_ps(xv, w0, lo##r);        \
    hi##r = _mm256_fmadd_ps(xv, w1, hi##r);        \
  }
#define BERTCC_SIX(op) op(0) op(1) op(2) op(3) op(4) op(5)
  BERTCC_SIX(BERTCC_DECL)
  for (int64_t t = 0; t < trips; ++t) {
    const float *ak = a, *pk = panel;
#pragma GCC unroll 4
    for (int k = 0; k < 256; ++k, ak += 6, pk += 16) {
      const __m256 w0 = _mm256_loadu_ps(pk), w1 = _mm256_loadu_ps(pk + 8);
      BERTCC_SIX(BERTCC_ROW)
    }
  }
#define BERTCC_SUM(r) +_mm256_cvtss_f32(lo##r) + _mm256_cvtss_f32(hi##r)
  return 0.0f BERTCC_SIX(BERTCC_SUM);
#undef BERTCC_DECL
#undef BERTCC_ROW
#undef BERTCC_SIX
#undef BERTCC_SUM
}
#undef BERTCC_FMA12

void BM_F32FmaStep(benchmark::State& st) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    st.SkipWithError("this CPU lacks AVX2 or FMA");
    return;
  }
  const bool tile = st.range(0) == 1;
  const std::vector<float> a = filled(256 * 6, 1e-3f), panel = filled(256 * 16, 1e-3f);
  const int64_t trips = tile ? 256 : 1 << 16;
  float sink = 0.0f;
  for (auto _ : st) {
    int64_t n = trips;
    benchmark::DoNotOptimize(n);  // (else GCC, finding the function pure, calls it once)
    sink += tile ? f32_step_micro_tile(n, a.data(), panel.data()) : f32_step_registers(n);
    benchmark::DoNotOptimize(sink);
  }
  const double fmas = (tile ? 256.0 * 12 : 12.0) * trips * static_cast<double>(st.iterations());
  st.counters["GFLOP/s"] = benchmark::Counter(fmas * 16 / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_F32FmaStep)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();
#endif

void BM_LayerNorm(benchmark::State& st) {
  auto x = filled(N * C, 0.5f), w = filled(C, 1.0f), b = filled(C, 0.0f), y = filled(N * C, 0), m = filled(N, 0),
       r = filled(N, 0);
  for (auto _ : st)
    kernels::layernorm_forward(y.data(), m.data(), r.data(), x.data(), w.data(), b.data(), N, C, 1e-12f);
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * N * C * 8);
}
BENCHMARK(BM_LayerNorm)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_Gelu(benchmark::State& st) {
  auto x = filled(N * I, 0.5f), y = filled(N * I, 0);
  for (auto _ : st) kernels::gelu_forward(y.data(), x.data(), N * I, Activation::GeluErf);
  st.SetBytesProcessed(static_cast<int64_t>(st.iterations()) * N * I * 8);
}
BENCHMARK(BM_Gelu)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_Dropout(benchmark::State& st) {
  auto x = filled(N * C, 1.0f), y = filled(N * C, 0);
  Rng rng{1, 0};
  for (auto _ : st) kernels::dropout_forward(y.data(), x.data(), N * C, 0.1f, rng, rng.reserve(N * C));
  st.SetItemsProcessed(static_cast<int64_t>(st.iterations()) * N * C);
}
BENCHMARK(BM_Dropout)->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_Attention(benchmark::State& st) {
  const Precision p = st.range(0) ? Precision::BF16 : Precision::F32;
  auto qkv = filled(N * 3 * C, 0.01f), out = filled(N * C, 0),
       probs = filled(kernels::attention_saved_size(B, T, C, NH, true, p), 0),
       work = filled(kernels::attention_work_size(B, T, C, NH), 0), mask = filled(N, 0);
  Rng rng{1, 0};
  for (auto _ : st)
    kernels::attention_forward(out.data(), probs.data(), work.data(), qkv.data(), mask.data(), B, T, C, NH, 0.1f, rng,
                               rng.reserve(attention_drop_numbers(B * NH, T)), p);
}
BENCHMARK(BM_Attention)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

// The unpadded attention inference runs, no dropout: fp32 (arg 0: what fp32 inference calls) and
// int8 (arg 1: --precision int8's, both products in int8), with the products' rate counted the
// standard way (4 B NH T^2 HS). qkv: a fixed pseudo-random fill in [-2, 2).
void BM_AttentionVarlen(benchmark::State& st) {
  std::vector<int64_t> cu(B + 1);
  for (int64_t b = 0; b <= B; ++b) cu[static_cast<size_t>(b)] = b * T;
  auto qkv = filled(N * 3 * C, 0), out = filled(N * C, 0),
       saved = filled(kernels::attention_varlen_saved_size(cu.data(), B, C, NH, false, Precision::F32, false), 0);
  uint32_t x = 1;
  for (float& v : qkv) {
    x = x * 1664525u + 1013904223u;
    v = static_cast<float>(x >> 8) / static_cast<float>(1 << 24) * 4.0f - 2.0f;
  }
  Rng rng{1, 0};
  for (auto _ : st) {
    if (st.range(0) == 1)
      kernels::attention_int8_forward(out.data(), qkv.data(), cu.data(), nullptr, B, 0, C, NH);
    else
      kernels::attention_varlen_forward(out.data(), saved.data(), qkv.data(), cu.data(), B, C, NH, 0.0f, rng, 0,
                                        Precision::F32, nullptr, nullptr);
  }
  st.counters["TFLOP/s"] =
      benchmark::Counter(4.0 * B * NH * T * T * (C / NH) * st.iterations() / 1e12, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_AttentionVarlen)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();
}  // namespace

BENCHMARK_MAIN();
