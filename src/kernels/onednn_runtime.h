// The oneDNN runtime the CPU GEMMs share (fp32/bf16 in gemm.cpp, int8 in gemm_int8.cpp): an engine,
// a stream, primitives by shape and one scratchpad.
#pragma once
#include <array>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <unordered_map>
#include <utility>
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
  std::vector<bf16_t> scratch_a, scratch_b;  // a bf16 GEMM's operands rounded (gemm.cpp)
  // One scratchpad for every matmul, owned here: oneDNN's own (library mode) is allocated and
  // freed around each call, which for large shapes means fresh pages zeroed by the kernel each time.
  std::vector<uint8_t> scratchpad;

  // The matmuls by a fixed key of integers (shape, strides, types, attributes), each with its
  // memory objects made once: a call sets the data handles and runs it (run_prepared). The many
  // small products (the attention's, per sequence and head) spent a good part of their time making
  // a string key and memory objects on every call.
  struct Prepared {
    Entry e;
    std::vector<dnnl::memory> given;  // the args a call gives data for, in that order (the same objects)
    std::unordered_map<int, dnnl::memory> args;
  };
  using Key = std::array<int64_t, 14>;  // [0]: which caller (gemm.cpp, gemm_int8.cpp), then its fields
  struct KeyHash {
    size_t operator()(const Key& k) const {
      uint64_t h = 1469598103934665603ull;  // FNV-1a over the values
      for (const int64_t v : k) h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
      return static_cast<size_t>(h);
    }
  };
  std::unordered_map<Key, Prepared, KeyHash> prepared;

  // The prepared matmul for `key`, made the first time from make() (the primitive_desc) and
  // memory descriptions of its arguments (mds(): argument -> description; handles set per call).
  template <typename Make, typename Mds>
  Prepared& prepare(const Key& key, Make make, Mds mds) {
    auto it = prepared.find(key);
    if (it != prepared.end()) return it->second;
    if (prepared.size() >= kMaxCached) prepared.clear();
    const dnnl::matmul::primitive_desc pd = make();
    Prepared p{Entry{dnnl::matmul(pd), pd.scratchpad_desc()}, {}, {}};
    for (const auto& [arg, md] : mds()) {
      p.given.emplace_back(md, engine, nullptr);
      p.args.emplace(arg, p.given.back());
    }
    if (p.e.scratch.get_size() > 0) p.args.emplace(DNNL_ARG_SCRATCHPAD, dnnl::memory(p.e.scratch, engine, nullptr));
    return prepared.emplace(key, std::move(p)).first->second;
  }

  // Runs p with the arguments' data at `data` (in the order of p.given) and this runtime's
  // scratchpad, and waits for it.
  void run_prepared(Prepared& p, std::initializer_list<const void*> data) {
    size_t i = 0;
    for (const void* d : data) p.given[i++].set_data_handle(const_cast<void*>(d));
    const size_t pad = p.e.scratch.get_size();
    if (pad > 0) {
      if (scratchpad.size() < pad) scratchpad.resize(pad);
      p.args.at(DNNL_ARG_SCRATCHPAD).set_data_handle(scratchpad.data());
    }
    p.e.prim.execute(stream, p.args);
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
