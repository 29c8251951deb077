// The oneDNN runtime the CPU GEMMs share (fp32/bf16 in gemm.cpp, int8 in gemm_int8.cpp): an engine,
// a stream, primitives by shape and one scratchpad.
#pragma once
#include <cstdlib>
#include <functional>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "bertcc/dtype.h"

namespace bertcc::kernels {

struct OnednnRuntime {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  struct Entry {
    dnnl::matmul prim;
    dnnl::memory::desc scratch;
  };
  // Bounded: unpadded batches (and a server's) bring a new row count with nearly every batch, so
  // the shapes seen over a long run are many; past the bound the primitives are made again.
  static constexpr size_t kMaxCached = 4096;
  std::unordered_map<std::string, Entry> cache;
  std::vector<bf16_t> scratch_a, scratch_b;  // a bf16 GEMM's operands rounded (gemm.cpp)
  // One scratchpad for every matmul, owned here: oneDNN's own (library mode) is allocated and
  // freed around each call, which for large shapes means fresh pages zeroed by the kernel each time.
  std::vector<uint8_t> scratchpad;

  // The matmul for `key` (its shape, types and attributes), made from make()'s primitive_desc (whose
  // attributes ask for the user scratchpad) the first time.
  template <typename Make>
  const Entry& matmul(const std::string& key, Make make) {
    auto it = cache.find(key);
    if (it == cache.end()) {
      if (cache.size() >= kMaxCached) cache.clear();
      const dnnl::matmul::primitive_desc pd = make();
      it = cache.emplace(key, Entry{dnnl::matmul(pd), pd.scratchpad_desc()}).first;
    }
    return it->second;
  }

  // Runs e on args with this runtime's scratchpad, and waits for it.
  void run(const Entry& e, std::unordered_map<int, dnnl::memory>& args) {
    const size_t pad = e.scratch.get_size();
    if (pad > 0) {
      if (scratchpad.size() < pad) scratchpad.resize(pad);
      args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(e.scratch, engine, scratchpad.data()));
    }
    e.prim.execute(stream, args);
    stream.wait();
  }
};

// The process's runtime; a GEMM called from inside a parallel region (the varlen attention's
// per-thread products, single-threaded there) uses its thread's own: its own primitives,
// scratchpads and stream, so that threads never share one.
OnednnRuntime& onednn_runtime();

// Weights reordered once into the layout a matmul chose for them (format_tag::any), so that its
// calls skip copying them into that layout (gemm.cpp's fp32 linear layers, gemm_int8.cpp's int8
// ones, for inference): the layout's description and the bytes, 64-byte aligned.
struct PackedWeights {
  dnnl::memory::desc md;
  std::unique_ptr<void, decltype(&std::free)> data{nullptr, &std::free};
  // Set instead of md for an fp32 W[N, K] in the row kernel's panels (gemm.h: pack_row_panels)
  int64_t panels_n = 0, panels_k = 0;
};

// The weights at `from` (described by `plain`) reordered into `chosen` where that is worth it: a
// blocked layout (inner blocks, or a compensation oneDNN appends) that fast kernels take at every
// row count (fast_at(M): the matmul of M rows on `chosen` is one, asked at 1 and 1,024 rows; a
// reference kernel would be correct, but slow). Null otherwise.
std::shared_ptr<const PackedWeights> pack_weights(const dnnl::memory::desc& plain, const void* from,
                                                  const dnnl::memory::desc& chosen,
                                                  const std::function<bool(int64_t M)>& fast_at);

}  // namespace bertcc::kernels
