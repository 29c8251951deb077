// Kernel micro-benchmarks (Google Benchmark): bertcc_microbench --benchmark_filter=...
// Shapes are bert-base at batch 8, sequence 128 (N = 1024 rows, C = 768, I = 3072, NH = 12).
#include <benchmark/benchmark.h>

#include <vector>

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

// The same layers in int8 on rows already quantized (linear_forward_int8_q: the int32 products
// and their rescale to fp32), weights held as inference holds them: arg 0 = 0 oneDNN (its blocked
// layout where it has a VNNI/AMX kernel, then a rescale pass; else its gemm, which repacks W every
// call), 1 bertcc's own kernel (gemm_int8_rows.cpp: AVX512-VNNI with the rescale in registers, or
// AVX2; what CPUs without AMX run); arg 1 the layer as above, arg 2 the rows (1,024 and 256: the
// own kernel's row blocks and split columns; 32). With ONEDNN_MAX_CPU_ISA=AVX2, arg 0 is oneDNN's
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
  kernels::pack_int8_weight(w);
  kernels::set_row_gemm(kernels::RowGemm::Auto);
  for (auto _ : st) kernels::linear_forward_int8_q(y.data(), xq.data(), sx.data(), w, nullptr, M);
  st.counters["TOP/s"] = benchmark::Counter(2.0 * M * Nout * K * st.iterations() / 1e12, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_LinearInt8)
    ->ArgsProduct({{0, 1}, {0, 1, 2, 3}, {N, 256, 32}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

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

// The unpadded attention inference runs (fp32, no dropout: what int8 and fp32 inference call), with
// its products' rate counted the standard way (4 B NH T^2 HS).
void BM_AttentionVarlen(benchmark::State& st) {
  std::vector<int64_t> cu(B + 1);
  for (int64_t b = 0; b <= B; ++b) cu[static_cast<size_t>(b)] = b * T;
  auto qkv = filled(N * 3 * C, 0.01f), out = filled(N * C, 0),
       saved = filled(kernels::attention_varlen_saved_size(cu.data(), B, C, NH, false, Precision::F32, false), 0);
  Rng rng{1, 0};
  for (auto _ : st)
    kernels::attention_varlen_forward(out.data(), saved.data(), qkv.data(), cu.data(), B, C, NH, 0.0f, rng, 0,
                                      Precision::F32, nullptr, nullptr);
  st.counters["TFLOP/s"] =
      benchmark::Counter(4.0 * B * NH * T * T * (C / NH) * st.iterations() / 1e12, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_AttentionVarlen)->Unit(benchmark::kMicrosecond)->UseRealTime();
}  // namespace

BENCHMARK_MAIN();
