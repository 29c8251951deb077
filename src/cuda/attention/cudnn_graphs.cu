// cuDNN's fused attention through its backend API (attention/cudnn_graphs.h). The forward graph is the
// one cudnn-frontend's SDPA node lowers to, and that cuDNN's fused flash-attention engines match:
//   S = Q K^T (matmul, rows and columns overridden by the sequence lengths)
//   S *= scale;  S = (row < seq_len_q && col < seq_len_kv) ? S : -inf   (GEN_INDEX, CMP_LT, AND, SELECT)
//   softmax as max, sub, exp, sum, div (log-sum-exp "stats" virtual for inference)
//   O = P V (matmul, rows and inner dimension overridden)
// The training forward writes the stats and, with dropout, multiplies P by 1/(1-p) and by the
// caller's mask; the backward is the frontend's SDPA backward node (build_backward).
// The headers give types and enums only; every function comes from dlsym, so nothing links
// against libcudnn.
#include <dlfcn.h>

#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <utility>

#include "core/settings.h"
#include "cuda/attention/cudnn_graphs.h"
#include "cuda/common.cuh"

#if __has_include(<cudnn_graph.h>)
#include <cudnn_graph.h>
#define BERTCC_CUDNN_HEADERS 1
#endif

namespace bertcc::cuda::cudnn {

#ifndef BERTCC_CUDNN_HEADERS
// Built where the CUDA toolkit had no cuDNN headers: nothing to load.
const Library& library() {
  static const Library l = [] {
    Library r;
    r.why = "bertcc was built without cuDNN's headers (cudnn_graph.h)";
    return r;
  }();
  return l;
}
bool sdpa_forward_bf16(bf16_t*, const bf16_t*, const int32_t*, const int32_t*, int64_t, int64_t, int64_t, int64_t,
                       std::string* why) {
  if (why) *why = library().why;
  return false;
}
bool sdpa_ready(int64_t, int64_t, int64_t, int64_t, bool, bool, std::string* why) {
  if (why) *why = library().why;
  return false;
}
bool check_forward_graph(int64_t, int64_t, int64_t, int64_t, std::vector<std::string>*, std::string* why,
                         const std::string*) {
  if (why) *why = library().why;
  return false;
}
bool sdpa_train_forward_bf16(bf16_t*, float*, const bf16_t*, const int32_t*, const int32_t*, const bf16_t*, float,
                             int64_t, int64_t, int64_t, int64_t, std::string* why) {
  if (why) *why = library().why;
  return false;
}
bool sdpa_backward_bf16(bf16_t*, const bf16_t*, const bf16_t*, const bf16_t*, const float*, const int32_t*,
                        const int32_t*, const bf16_t*, float, int64_t, int64_t, int64_t, int64_t, std::string* why) {
  if (why) *why = library().why;
  return false;
}
bool check_train_forward_graph(int64_t, int64_t, int64_t, int64_t, bool, std::vector<std::string>*, std::string* why,
                               const std::string*) {
  if (why) *why = library().why;
  return false;
}
bool check_backward_graph(int64_t, int64_t, int64_t, int64_t, bool, std::vector<std::string>*, std::string* why,
                          const std::string*) {
  if (why) *why = library().why;
  return false;
}
bool device_properties_json(std::string*, std::string* why) {
  if (why) *why = library().why;
  return false;
}
std::string probe_handle() { return library().why; }
#else

namespace {

// The functions used, by their declarations' types.
struct Api {
  decltype(&::cudnnGetVersion) get_version = nullptr;
  decltype(&::cudnnGetErrorString) error_string = nullptr;
  decltype(&::cudnnGetLastErrorString) last_error = nullptr;  // optional
  decltype(&::cudnnCreate) create = nullptr;
  decltype(&::cudnnDestroy) destroy = nullptr;
  decltype(&::cudnnSetStream) set_stream = nullptr;
  decltype(&::cudnnBackendCreateDescriptor) create_desc = nullptr;
  decltype(&::cudnnBackendDestroyDescriptor) destroy_desc = nullptr;
  decltype(&::cudnnBackendSetAttribute) set_attr = nullptr;
  decltype(&::cudnnBackendGetAttribute) get_attr = nullptr;
  decltype(&::cudnnBackendFinalize) finalize = nullptr;
  decltype(&::cudnnBackendExecute) execute = nullptr;
};

struct Loaded {
  Library info;
  Api api;
};

Loaded load() {
  Loaded l;
  const std::string& named = settings().cudnn_lib;
  l.info.path = named.empty() ? "libcudnn.so.9" : named;
  void* h = dlopen(l.info.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    l.info.why = "dlopen " + l.info.path + ": " + (e ? e : "failed");
    return l;
  }
  std::string missing;
  auto sym = [&](auto& fn, const char* name, bool required = true) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)> >(dlsym(h, name));
    if (!fn && required) missing += (missing.empty() ? "" : ", ") + std::string(name);
  };
  Api& a = l.api;
  sym(a.get_version, "cudnnGetVersion");
  sym(a.error_string, "cudnnGetErrorString");
  sym(a.last_error, "cudnnGetLastErrorString", false);
  sym(a.create, "cudnnCreate");
  sym(a.destroy, "cudnnDestroy");
  sym(a.set_stream, "cudnnSetStream");
  sym(a.create_desc, "cudnnBackendCreateDescriptor");
  sym(a.destroy_desc, "cudnnBackendDestroyDescriptor");
  sym(a.set_attr, "cudnnBackendSetAttribute");
  sym(a.get_attr, "cudnnBackendGetAttribute");
  sym(a.finalize, "cudnnBackendFinalize");
  sym(a.execute, "cudnnBackendExecute");
  if (!missing.empty()) {
    l.info.why = l.info.path + " lacks " + missing;
    return l;
  }
  l.info.version = a.get_version();
  // The backend enums used here are cuDNN 9's (compiled against 9.x headers)
  if (l.info.version < 90000 || l.info.version >= 100000) {
    l.info.why = l.info.path + " is cuDNN " + std::to_string(l.info.version) + ", not 9.x";
    return l;
  }
  l.info.loaded = true;
  return l;  // the library stays open for the process
}

const Loaded& loaded() {
  static const Loaded l = load();
  return l;
}

struct Failure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// "cuDNN <step>: <status> (<last error>)", thrown when s is not success.
void check(cudnnStatus_t s, const std::string& step) {
  if (s == CUDNN_STATUS_SUCCESS) return;
  const Api& a = loaded().api;
  std::string m = "cuDNN " + step + ": " + a.error_string(s);
  if (a.last_error) {
    char buf[1024] = {0};
    a.last_error(buf, sizeof buf);
    if (buf[0]) m += std::string(" (") + buf + ")";
  }
  throw Failure(m);
}

// A backend descriptor, destroyed with its owner; set() and finalize() name the step on failure.
class Desc {
 public:
  Desc(cudnnBackendDescriptorType_t type, std::string name) : name_(std::move(name)) {
    check(loaded().api.create_desc(type, &d_), name_ + ": create");
  }
  ~Desc() {
    if (d_) loaded().api.destroy_desc(d_);
  }
  Desc(Desc&& o) noexcept : d_(std::exchange(o.d_, nullptr)), name_(std::move(o.name_)) {}
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  Desc& operator=(Desc&&) = delete;
  Desc& set(cudnnBackendAttributeName_t attr, cudnnBackendAttributeType_t type, int64_t n, const void* v,
            const char* what) {
    check(loaded().api.set_attr(d_, attr, type, n, v), name_ + ": set " + what);
    return *this;
  }
  Desc& set(cudnnBackendAttributeName_t attr, cudnnBackendDescriptor_t v, const char* what) {
    return set(attr, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v, what);
  }
  void finalize() { check(loaded().api.finalize(d_), name_ + ": finalize"); }
  cudnnBackendDescriptor_t get() const { return d_; }
  const std::string& name() const { return name_; }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
  std::string name_;
};
#define BERTCC_SET(desc, attr, ...) (desc).set(attr, __VA_ARGS__, #attr)

// The handle attributes are deprecated in cuDNN 9 (a graph needs none from 9.8) but a plan still
// takes one; named by value so that the deprecation warning stays out of the build.
constexpr auto kGraphHandle = static_cast<cudnnBackendAttributeName_t>(800);  // CUDNN_ATTR_OPERATIONGRAPH_HANDLE
constexpr auto kPlanHandle = static_cast<cudnnBackendAttributeName_t>(400);   // CUDNN_ATTR_EXECUTION_PLAN_HANDLE

// The variant pack's tensors; virtual tensors are numbered from kFirstVirtual. In the backward,
// kK and kV are K^T and V^T, and kSoftmaxSum and kDQAccum lie in the plan's workspace.
enum : int64_t {
  kQ = 1,
  kK,
  kV,
  kO,
  kSeqQ,
  kSeqKV,
  kScale,
  kNegInf,
  kStats,
  kDropMask,
  kDropScale,
  kDropScaleInv,
  kDO,
  kDQ,
  kDK,
  kDV,
  kSoftmaxSum,
  kDQAccum,
  kFirstVirtual = 100
};

const char* type_name(cudnnDataType_t t) {
  switch (t) {
    case CUDNN_DATA_FLOAT:
      return "fp32";
    case CUDNN_DATA_BFLOAT16:
      return "bf16";
    case CUDNN_DATA_INT32:
      return "int32";
    case CUDNN_DATA_BOOLEAN:
      return "bool";
    default:
      return "?";
  }
}

using Dims = std::vector<int64_t>;

// Tensors and operations of one graph, built in order and kept alive with it.
class GraphBuilder {
 public:
  explicit GraphBuilder(std::vector<std::string>* steps) : steps_(steps) {}

  cudnnBackendDescriptor_t tensor(const std::string& name, int64_t uid, cudnnDataType_t type, const Dims& dims,
                                  const Dims& strides, bool is_virtual = false, bool by_value = false) {
    std::string label = "tensor " + name + " [";
    for (size_t i = 0; i < dims.size(); ++i) label += (i ? "," : "") + std::to_string(dims[i]);
    label += std::string("] ") + type_name(type) + (is_virtual ? " virtual" : "") + (by_value ? " by value" : "");
    Desc d(CUDNN_BACKEND_TENSOR_DESCRIPTOR, label);
    const int64_t n = static_cast<int64_t>(dims.size()), align = 16;
    BERTCC_SET(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
    BERTCC_SET(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, n, dims.data());
    BERTCC_SET(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, n, strides.data());
    BERTCC_SET(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    BERTCC_SET(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    if (is_virtual) BERTCC_SET(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
    if (by_value) BERTCC_SET(d, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
    return keep(std::move(d));
  }
  // An intermediate: virtual, row-major.
  cudnnBackendDescriptor_t virt(const std::string& name, cudnnDataType_t type, const Dims& dims) {
    Dims strides(dims.size(), 1);
    for (size_t i = dims.size() - 1; i-- > 0;) strides[i] = strides[i + 1] * dims[i + 1];
    return tensor(name, next_virtual_++, type, dims, strides, true);
  }
  // An intermediate with the given strides (a transposed view).
  cudnnBackendDescriptor_t virt(const std::string& name, cudnnDataType_t type, const Dims& dims, const Dims& strides) {
    return tensor(name, next_virtual_++, type, dims, strides, true);
  }

  // y = mode(x [, b [, t]]); axis for GEN_INDEX.
  void pointwise(const std::string& name, cudnnPointwiseMode_t mode, cudnnDataType_t prec, cudnnBackendDescriptor_t x,
                 cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y,
                 int64_t axis = -1) {
    Desc pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise " + name);
    BERTCC_SET(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    BERTCC_SET(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    if (mode == CUDNN_POINTWISE_GEN_INDEX) BERTCC_SET(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    const cudnnBackendDescriptor_t pwd = keep(std::move(pw));
    Desc op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "operation " + name);
    BERTCC_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pwd);
    BERTCC_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
    if (b) BERTCC_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b);
    if (t) BERTCC_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t);
    BERTCC_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
    ops_.push_back(keep(std::move(op)));
  }

  void reduction(const std::string& name, cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x,
                 cudnnBackendDescriptor_t y) {
    Desc r(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "reduction " + name);
    const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    BERTCC_SET(r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    BERTCC_SET(r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode);
    const cudnnBackendDescriptor_t rd = keep(std::move(r));
    Desc op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "operation " + name);
    BERTCC_SET(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, rd);
    BERTCC_SET(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x);
    BERTCC_SET(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y);
    ops_.push_back(keep(std::move(op)));
  }

  // c = a b over the last two dimensions, fp32 accumulation; m/n/k: the overrides (may be null).
  void matmul(const std::string& name, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
              cudnnBackendDescriptor_t c, cudnnBackendDescriptor_t m, cudnnBackendDescriptor_t n,
              cudnnBackendDescriptor_t k) {
    Desc mm(CUDNN_BACKEND_MATMUL_DESCRIPTOR, "matmul " + name);
    const cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    BERTCC_SET(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    const cudnnBackendDescriptor_t mmd = keep(std::move(mm));
    Desc op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "operation " + name);
    BERTCC_SET(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a);
    BERTCC_SET(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b);
    BERTCC_SET(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c);
    BERTCC_SET(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, mmd);
    if (m) BERTCC_SET(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, m);
    if (n) BERTCC_SET(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, n);
    if (k) BERTCC_SET(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, k);
    ops_.push_back(keep(std::move(op)));
  }

  // y = x with y's dimensions and strides (a transposed view here); no descriptor of its own.
  void reshape(const std::string& name, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    Desc op(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, "operation " + name);
    BERTCC_SET(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x);
    BERTCC_SET(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y);
    ops_.push_back(keep(std::move(op)));
  }

  // The operation graph of the operations built; handle null: none set (cuDNN 9.8+ takes that).
  cudnnBackendDescriptor_t graph(cudnnHandle_t handle) {
    Desc g(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph (" + std::to_string(ops_.size()) + " operations)");
    BERTCC_SET(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(ops_.size()),
               ops_.data());
    if (handle) g.set(kGraphHandle, CUDNN_TYPE_HANDLE, 1, &handle, "CUDNN_ATTR_OPERATIONGRAPH_HANDLE");
    return keep(std::move(g));
  }

  std::vector<Desc> take() { return std::move(descs_); }

 private:
  cudnnBackendDescriptor_t keep(Desc d) {
    d.finalize();
    if (steps_) steps_->push_back(d.name() + ": finalized");
    descs_.push_back(std::move(d));
    return descs_.back().get();
  }
  std::vector<std::string>* steps_;
  std::vector<Desc> descs_;
  std::vector<cudnnBackendDescriptor_t> ops_;
  int64_t next_virtual_ = kFirstVirtual;
};

// The graphs built here: the inference forward, and the training forward and backward, each
// with or without dropout (a caller-drawn mask).
enum class Graph : int { infer = 0, train_fwd, train_fwd_dropout, bwd, bwd_dropout };

bool has_dropout(Graph k) { return k == Graph::train_fwd_dropout || k == Graph::bwd_dropout; }
bool is_backward(Graph k) { return k == Graph::bwd || k == Graph::bwd_dropout; }

const char* graph_name(Graph k) {
  switch (k) {
    case Graph::infer:
      return "forward";
    case Graph::train_fwd:
      return "training forward";
    case Graph::train_fwd_dropout:
      return "training forward with dropout";
    case Graph::bwd:
      return "backward";
    case Graph::bwd_dropout:
      return "backward with dropout";
  }
  return "?";
}

// The padding mask on scores ss [B, NH, T, T]: row < seq_len_q[b] and col < seq_len_kv[b], else the
// mask value (the frontend's padding_mask score modifier). suffix tells a second application apart.
cudnnBackendDescriptor_t padding_mask(GraphBuilder& g, cudnnBackendDescriptor_t ss, cudnnBackendDescriptor_t seq_q,
                                      cudnnBackendDescriptor_t seq_kv, cudnnBackendDescriptor_t mask_value,
                                      const Dims& sd, const std::string& suffix = "") {
  const auto i32 = CUDNN_DATA_INT32, b8 = CUDNN_DATA_BOOLEAN, f32 = CUDNN_DATA_FLOAT;
  const auto row = g.virt("row index" + suffix, i32, sd), col = g.virt("col index" + suffix, i32, sd);
  g.pointwise("row index" + suffix, CUDNN_POINTWISE_GEN_INDEX, i32, ss, nullptr, nullptr, row, 2);
  g.pointwise("col index" + suffix, CUDNN_POINTWISE_GEN_INDEX, i32, ss, nullptr, nullptr, col, 3);
  const auto row_in = g.virt("row < seq_len_q" + suffix, b8, sd), col_in = g.virt("col < seq_len_kv" + suffix, b8, sd);
  g.pointwise("row < seq_len_q" + suffix, CUDNN_POINTWISE_CMP_LT, b8, row, seq_q, nullptr, row_in);
  g.pointwise("col < seq_len_kv" + suffix, CUDNN_POINTWISE_CMP_LT, b8, col, seq_kv, nullptr, col_in);
  const auto keep_mask = g.virt("padding mask" + suffix, b8, sd);
  g.pointwise("padding mask" + suffix, CUDNN_POINTWISE_LOGICAL_AND, b8, row_in, col_in, nullptr, keep_mask);
  const auto sm = g.virt("S masked" + suffix, f32, sd);
  g.pointwise("select" + suffix, CUDNN_POINTWISE_BINARY_SELECT, f32, ss, mask_value, keep_mask, sm);
  return sm;
}

// The forward's graph for (B, T, NH, D) on bertcc's layouts; returns the operation graph. Inference:
// the stats virtual, no dropout. Training: the stats written (kStats, float [B, NH, T, 1]); with
// dropout, P * (1/(1-p)) * mask before P V, as the frontend's dropout with a mask.
cudnnBackendDescriptor_t build_forward(GraphBuilder& g, Graph kind, int64_t B, int64_t T, int64_t NH, int64_t D,
                                       cudnnHandle_t handle) {
  const bool train = kind != Graph::infer, dropout = has_dropout(kind);
  const int64_t C = NH * D, ld = 3 * C;
  const auto bf16 = CUDNN_DATA_BFLOAT16, f32 = CUDNN_DATA_FLOAT, i32 = CUDNN_DATA_INT32;
  // [B, NH, T, D] views of qkv16 [B, T, 3C] (K as K^T [B, NH, D, T]) and of out16 [B, T, C]
  const auto q = g.tensor("Q", kQ, bf16, {B, NH, T, D}, {T * ld, D, ld, 1});
  const auto kt = g.tensor("K^T", kK, bf16, {B, NH, D, T}, {T * ld, D, 1, ld});
  const auto v = g.tensor("V", kV, bf16, {B, NH, T, D}, {T * ld, D, ld, 1});
  const auto o = g.tensor("O", kO, bf16, {B, NH, T, D}, {T * C, D, C, 1});
  const auto seq_q = g.tensor("seq_len_q", kSeqQ, i32, {B, 1, 1, 1}, {1, 1, 1, 1});
  const auto seq_kv = g.tensor("seq_len_kv", kSeqKV, i32, {B, 1, 1, 1}, {1, 1, 1, 1});
  const auto scale = g.tensor("scale", kScale, f32, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true);
  const auto neg_inf = g.tensor("mask value", kNegInf, f32, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true);
  const Dims sd{B, NH, T, T}, rd{B, NH, T, 1};
  cudnnBackendDescriptor_t drop_mask = nullptr, drop_scale = nullptr;
  if (dropout) {
    drop_mask = g.tensor("dropout mask", kDropMask, bf16, sd, {NH * T * T, T * T, T, 1});
    drop_scale = g.tensor("dropout scale", kDropScale, f32, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true);
  }

  const auto s = g.virt("S", f32, sd);
  g.matmul("Q K^T", q, kt, s, seq_q, seq_kv, nullptr);
  const auto ss = g.virt("S scaled", f32, sd);
  g.pointwise("scale", CUDNN_POINTWISE_MUL, f32, s, scale, nullptr, ss);
  const auto sm = padding_mask(g, ss, seq_q, seq_kv, neg_inf, sd);
  // softmax
  const auto mx = g.virt("row max", f32, rd);
  g.reduction("row max", CUDNN_REDUCE_TENSOR_MAX, sm, mx);
  const auto sub = g.virt("S - max", f32, sd);
  g.pointwise("S - max", CUDNN_POINTWISE_SUB, f32, sm, mx, nullptr, sub);
  const auto e = g.virt("exp", f32, sd);
  g.pointwise("exp", CUDNN_POINTWISE_EXP, f32, sub, nullptr, nullptr, e);
  const auto sum = g.virt("row sum", f32, rd);
  g.reduction("row sum", CUDNN_REDUCE_TENSOR_ADD, e, sum);
  const auto lg = g.virt("log sum", f32, rd);
  const auto stats = train ? g.tensor("stats", kStats, f32, rd, {NH * T, T, 1, 1}) : g.virt("stats", f32, rd);
  g.pointwise("log sum", CUDNN_POINTWISE_LOG, f32, sum, nullptr, nullptr, lg);
  g.pointwise("stats", CUDNN_POINTWISE_ADD, f32, mx, lg, nullptr, stats);
  cudnnBackendDescriptor_t p;
  if (!dropout) {
    p = g.virt("P", bf16, sd);  // the second product's operand in the I/O type
    g.pointwise("P", CUDNN_POINTWISE_DIV, f32, e, sum, nullptr, p);
  } else {
    const auto p32 = g.virt("P", f32, sd);
    g.pointwise("P", CUDNN_POINTWISE_DIV, f32, e, sum, nullptr, p32);
    const auto ps = g.virt("P * dropout scale", f32, sd);
    g.pointwise("P * dropout scale", CUDNN_POINTWISE_MUL, f32, p32, drop_scale, nullptr, ps);
    p = g.virt("P dropped", bf16, sd);  // in the I/O type, as above
    g.pointwise("P dropped", CUDNN_POINTWISE_MUL, f32, ps, drop_mask, nullptr, p);
  }
  g.matmul("P V", p, v, o, seq_q, nullptr, seq_kv);
  return g.graph(handle);
}

// The backward's graph (the frontend's SDPA backward node with a padding mask and, with dropout, a
// mask): the row dots Dr = sum(dO * O) * (1-p) written to kSoftmaxSum; S = scale Q K^T, masked;
// P = exp(S - stats); Pd = P * mask * 1/(1-p); dV = Pd^T dO; dP = (dO V^T) * mask;
// dS = (dP - Dr) * P * 1/(1-p) * scale; dK = dS^T Q; dQ = dS K through the float accumulator
// kDQAccum. Without dropout the mask products go and (1-p) is 1.
cudnnBackendDescriptor_t build_backward(GraphBuilder& g, Graph kind, int64_t B, int64_t T, int64_t NH, int64_t D,
                                        cudnnHandle_t handle) {
  const bool dropout = has_dropout(kind);
  const int64_t C = NH * D, ld = 3 * C;
  const auto bf16 = CUDNN_DATA_BFLOAT16, f32 = CUDNN_DATA_FLOAT, i32 = CUDNN_DATA_INT32;
  const Dims hd{B, NH, T, D}, sd{B, NH, T, T}, rd{B, NH, T, 1};
  const Dims qkv_strides{T * ld, D, ld, 1}, qkv_t_strides{T * ld, D, 1, ld}, out_strides{T * C, D, C, 1};
  const auto q = g.tensor("Q", kQ, bf16, hd, qkv_strides);
  const auto kt = g.tensor("K^T", kK, bf16, {B, NH, D, T}, qkv_t_strides);
  const auto vt = g.tensor("V^T", kV, bf16, {B, NH, D, T}, qkv_t_strides);
  const auto o = g.tensor("O", kO, bf16, hd, out_strides);
  const auto dout = g.tensor("dO", kDO, bf16, hd, out_strides);
  const auto stats = g.tensor("stats", kStats, f32, rd, {NH * T, T, 1, 1});
  const auto dq = g.tensor("dQ", kDQ, bf16, hd, qkv_strides);
  const auto dk = g.tensor("dK", kDK, bf16, hd, qkv_strides);
  const auto dv = g.tensor("dV", kDV, bf16, hd, qkv_strides);
  const auto seq_q = g.tensor("seq_len_q", kSeqQ, i32, {B, 1, 1, 1}, {1, 1, 1, 1});
  const auto seq_kv = g.tensor("seq_len_kv", kSeqKV, i32, {B, 1, 1, 1}, {1, 1, 1, 1});
  const auto scale = g.tensor("scale", kScale, f32, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true);
  const auto neg_inf = g.tensor("mask value", kNegInf, f32, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true);
  // 1-p (1 without dropout: the frontend's one_tensor)
  const auto scale_inv =
      g.tensor("dropout keep probability", kDropScaleInv, f32, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true);
  cudnnBackendDescriptor_t drop_mask = nullptr, drop_scale = nullptr;
  if (dropout) {
    drop_mask = g.tensor("dropout mask", kDropMask, bf16, sd, {NH * T * T, T * T, T, 1});
    drop_scale = g.tensor("dropout scale", kDropScale, f32, {1, 1, 1, 1}, {1, 1, 1, 1}, false, true);
  }
  const auto softmax_sum = g.tensor("softmax sum (workspace)", kSoftmaxSum, f32, rd, {NH * T, T, 1, 1});
  const auto dq_accum = g.tensor("dQ accumulator (workspace)", kDQAccum, f32, hd, {NH * T * D, T * D, D, 1});

  // Dr = sum(dO * O) * (1-p)
  const auto doo = g.virt("dO * O", f32, hd);
  g.pointwise("dO * O", CUDNN_POINTWISE_MUL, f32, dout, o, nullptr, doo);
  const auto dsum = g.virt("row sum dO * O", f32, rd);
  g.reduction("row sum dO * O", CUDNN_REDUCE_TENSOR_ADD, doo, dsum);
  g.pointwise("softmax sum", CUDNN_POINTWISE_MUL, f32, dsum, scale_inv, nullptr, softmax_sum);
  // P = exp(scale Q K^T (masked) - stats)
  const auto s = g.virt("S", f32, sd);
  g.matmul("Q K^T", q, kt, s, seq_q, seq_kv, nullptr);
  const auto ss = g.virt("S scaled", f32, sd);
  g.pointwise("scale", CUDNN_POINTWISE_MUL, f32, s, scale, nullptr, ss);
  const auto sm = padding_mask(g, ss, seq_q, seq_kv, neg_inf, sd);
  auto sub = g.virt("S - stats", f32, sd);
  g.pointwise("S - stats", CUDNN_POINTWISE_SUB, f32, sm, stats, nullptr, sub);
  // the frontend masks again after the stats for cuDNN 9.0 to 9.9
  const size_t version = loaded().info.version;
  if (version >= 90000 && version < 91000) sub = padding_mask(g, sub, seq_q, seq_kv, neg_inf, sd, " (again)");
  const auto p = g.virt("P", f32, sd);
  g.pointwise("P", CUDNN_POINTWISE_EXP, f32, sub, nullptr, nullptr, p);
  cudnnBackendDescriptor_t pd = p;
  if (dropout) {
    const auto pm = g.virt("P * dropout mask", f32, sd);
    g.pointwise("P * dropout mask", CUDNN_POINTWISE_MUL, f32, p, drop_mask, nullptr, pm);
    pd = g.virt("P dropped", f32, sd);
    g.pointwise("P dropped", CUDNN_POINTWISE_MUL, f32, pm, drop_scale, nullptr, pd);
  }
  // dV = Pd^T dO (Pd^T a transposed view in the I/O type)
  const auto pdt = g.virt("Pd^T", bf16, sd, {NH * T * T, T * T, 1, T});
  g.reshape("Pd^T", pd, pdt);
  g.matmul("Pd^T dO", pdt, dout, dv, seq_kv, nullptr, seq_q);
  // dS = (dO V^T * mask - Dr) * P * 1/(1-p) * scale
  const auto dp = g.virt("dP", f32, sd);
  g.matmul("dO V^T", dout, vt, dp, seq_q, seq_kv, nullptr);
  cudnnBackendDescriptor_t dpd = dp;
  if (dropout) {
    dpd = g.virt("dP * dropout mask", f32, sd);
    g.pointwise("dP * dropout mask", CUDNN_POINTWISE_MUL, f32, dp, drop_mask, nullptr, dpd);
  }
  const auto dpr = g.virt("dP - softmax sum", f32, sd);
  g.pointwise("dP - softmax sum", CUDNN_POINTWISE_SUB, f32, dpd, softmax_sum, nullptr, dpr);
  cudnnBackendDescriptor_t ds = g.virt("(dP - softmax sum) * P", f32, sd);
  g.pointwise("(dP - softmax sum) * P", CUDNN_POINTWISE_MUL, f32, dpr, p, nullptr, ds);
  if (dropout) {
    const auto dsd = g.virt("dS * dropout scale", f32, sd);
    g.pointwise("dS * dropout scale", CUDNN_POINTWISE_MUL, f32, ds, drop_scale, nullptr, dsd);
    ds = dsd;
  }
  const auto dss = g.virt("dS", f32, sd);
  g.pointwise("dS", CUDNN_POINTWISE_MUL, f32, ds, scale, nullptr, dss);
  // dK = dS^T Q
  const auto dst = g.virt("dS^T", bf16, sd, {NH * T * T, T * T, 1, T});
  g.reshape("dS^T", dss, dst);
  g.matmul("dS^T Q", dst, q, dk, seq_kv, nullptr, seq_q);
  // dQ = dS K, accumulated in float, then converted into dqkv16
  const auto k = g.virt("K", bf16, hd, qkv_strides);
  g.reshape("K", kt, k);
  g.matmul("dS K", dss, k, dq_accum, seq_q, nullptr, seq_kv);
  g.pointwise("dQ", CUDNN_POINTWISE_IDENTITY, f32, dq_accum, nullptr, nullptr, dq);
  return g.graph(handle);
}

cudnnBackendDescriptor_t build(GraphBuilder& g, Graph kind, int64_t B, int64_t T, int64_t NH, int64_t D,
                               cudnnHandle_t handle) {
  return is_backward(kind) ? build_backward(g, kind, B, T, NH, D, handle) : build_forward(g, kind, B, T, NH, D, handle);
}

// A plan for one shape on one device, with its workspace; kept for the process.
struct Plan {
  std::vector<Desc> descs;  // the graph's descriptors and the plan, last
  cudnnBackendDescriptor_t plan = nullptr;
  void* workspace = nullptr;
  int64_t workspace_bytes = 0;  // cuDNN's, at the start of workspace
  // the backward's float tensors after it: the softmax sum [B, NH, T] and the dQ accumulator
  // [B, NH, T, D] (offsets in bytes; 0: none)
  int64_t softmax_sum_at = 0, dq_accum_at = 0, dq_accum_bytes = 0, total_bytes = 0;
  float scale = 0, mask_value = 0;
  std::string why;  // not empty: this shape failed
};

std::string shape_name(int64_t B, int64_t T, int64_t NH, int64_t D) {
  return "B=" + std::to_string(B) + " T=" + std::to_string(T) + " NH=" + std::to_string(NH) + " D=" + std::to_string(D);
}

// What is wrong with a shape before cuDNN sees it (a zero dimension makes cuDNN 9.19 divide by
// zero in finalize), or "".
std::string shape_error(int64_t B, int64_t T, int64_t NH, int64_t D) {
  if (B < 1 || T < 1 || NH < 1) return "empty shape " + shape_name(B, T, NH, D);
  if (D != 64 && D != 128) return "head size " + std::to_string(D) + " (cuDNN attention is built for 64 and 128)";
  return "";
}

// Why no call of this shape can run whatever its buffers (no library, a shape cuDNN must not
// see), or "".
std::string call_error(int64_t B, int64_t T, int64_t NH, int64_t D) {
  const Loaded& l = loaded();
  return l.info.loaded ? shape_error(B, T, NH, D) : l.info.why;
}

// The graph, heuristics mode A, then the first of its engine configs that makes a plan; for the
// device of `handle`, or without one for the device `deviceprop` describes (cuDNN 9.8+: plans
// built ahead of time). The workspace is the caller's. steps (may be null): what was done.
void make_plan(Plan& pl, Graph kind, cudnnHandle_t handle, cudnnBackendDescriptor_t deviceprop, int64_t B, int64_t T,
               int64_t NH, int64_t D, std::vector<std::string>* steps) {
  GraphBuilder g(steps);
  const cudnnBackendDescriptor_t graph = build(g, kind, B, T, NH, D, handle);
  pl.descs = g.take();
  Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristics mode A");
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  BERTCC_SET(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
  BERTCC_SET(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  if (deviceprop) BERTCC_SET(heur, CUDNN_ATTR_ENGINEHEUR_DEVICEPROP, deviceprop);
  heur.finalize();
  const Api& a = loaded().api;
  int64_t count = 0;
  check(a.get_attr(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr),
        "heuristics: get CUDNN_ATTR_ENGINEHEUR_RESULTS count");
  if (steps) steps->push_back("heuristics mode A: " + std::to_string(count) + " engine configs");
  if (count <= 0) throw Failure("cuDNN heuristics (mode A): no engine for the attention graph");
  std::vector<Desc> cfgs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    cfgs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config " + std::to_string(i));
    raw.push_back(cfgs.back().get());
  }
  int64_t got = 0;
  check(a.get_attr(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, raw.data()),
        "heuristics: get CUDNN_ATTR_ENGINEHEUR_RESULTS");
  std::string first_failure;
  for (int64_t i = 0; i < got; ++i) {
    try {
      Desc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "execution plan (engine config " + std::to_string(i) + ")");
      if (handle) plan.set(kPlanHandle, CUDNN_TYPE_HANDLE, 1, &handle, "CUDNN_ATTR_EXECUTION_PLAN_HANDLE");
      if (deviceprop) BERTCC_SET(plan, CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP, deviceprop);
      BERTCC_SET(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, raw[i]);
      plan.finalize();
      check(a.get_attr(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, nullptr,
                       &pl.workspace_bytes),
            "execution plan: get CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE");
      if (steps)
        steps->push_back(plan.name() + ": finalized, workspace " + std::to_string(pl.workspace_bytes) + " bytes");
      pl.descs.push_back(std::move(cfgs[i]));  // the plan's engine config, kept with it
      pl.descs.push_back(std::move(plan));
      pl.plan = pl.descs.back().get();
      break;
    } catch (const Failure& f) {
      if (first_failure.empty()) first_failure = f.what();
      if (steps) steps->push_back(std::string("not taken: ") + f.what());
    }
  }
  if (!pl.plan)
    throw Failure("no plan from the " + std::to_string(got) +
                  " engine configs of heuristics mode A; the first: " + first_failure);
  auto up = [](int64_t n) { return (n + 255) / 256 * 256; };
  pl.total_bytes = pl.workspace_bytes;
  if (is_backward(kind)) {
    pl.softmax_sum_at = up(pl.workspace_bytes);
    pl.dq_accum_at = pl.softmax_sum_at + up(B * NH * T * static_cast<int64_t>(sizeof(float)));
    pl.dq_accum_bytes = B * NH * T * D * static_cast<int64_t>(sizeof(float));
    pl.total_bytes = pl.dq_accum_at + pl.dq_accum_bytes;
    if (steps)
      steps->push_back("workspace with the softmax sum and the dQ accumulator: " + std::to_string(pl.total_bytes) +
                       " bytes");
  }
  pl.scale = 1.0f / std::sqrt(static_cast<float>(D));
  // the frontend's choice: cuDNN before 9.10 wants the lowest float for a masked score, later -inf
  pl.mask_value =
      loaded().info.version < 91000 ? std::numeric_limits<float>::lowest() : -std::numeric_limits<float>::infinity();
}

struct State {
  std::mutex mu;
  std::map<int, cudnnHandle_t> handles;                                              // per device
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, int, Graph>, Plan> plans;  // (B, T, NH, D, device, graph)
};
// Never destroyed: plans hold device memory and cuDNN state, which outlive static destruction badly.
State& state() {
  static State* s = new State;
  return *s;
}

}  // namespace

const Library& library() { return loaded().info; }

namespace {

// A tensor of the variant pack: its uid and address (a device pointer, or a host float by value).
struct Bound {
  int64_t uid;
  const void* ptr;
};

// Plans `kind` for the shape on the current device once (a failed shape is not retried) and queues
// it on this thread's stream with the tensors given, the plan's scale and mask value and, in the
// backward, its workspace tensors (the dQ accumulator cleared first before cuDNN 9.6, which does
// not clear it itself). False with the reason in *why.
// The handle of the current device (made on first use) and the plan of `kind` for the shape on it
// (made once: a failed shape is not retried, its reason kept). st.mu held. Throws Failure.
std::pair<cudnnHandle_t, Plan*> plan_for(State& st, Graph kind, int64_t B, int64_t T, int64_t NH, int64_t D) {
  const Loaded& l = loaded();
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) throw Failure("no current CUDA device");
  cudnnHandle_t& handle = st.handles[device];
  if (!handle) check(l.api.create(&handle), "cudnnCreate on device " + std::to_string(device));
  auto [it, fresh] = st.plans.try_emplace({B, T, NH, D, device, kind});
  Plan& pl = it->second;
  if (fresh) {
    try {
      make_plan(pl, kind, handle, nullptr, B, T, NH, D, nullptr);
      if (pl.total_bytes > 0) pl.workspace = alloc(static_cast<size_t>(pl.total_bytes));
    } catch (const std::exception& e) {
      pl = Plan();
      pl.why = std::string(graph_name(kind)) + " " + shape_name(B, T, NH, D) + ": " + e.what();
    }
  }
  return {handle, &pl};
}

bool run(Graph kind, int64_t B, int64_t T, int64_t NH, int64_t D, std::vector<Bound> tensors, std::string* why) {
  auto no = [&](const std::string& w) {
    if (why) *why = w;
    return false;
  };
  const Loaded& l = loaded();
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  try {
    auto [handle, plp] = plan_for(st, kind, B, T, NH, D);
    Plan& pl = *plp;
    if (!pl.why.empty()) return no(pl.why);
    check(l.api.set_stream(handle, stream()), "cudnnSetStream");
    tensors.push_back({kScale, &pl.scale});
    tensors.push_back({kNegInf, &pl.mask_value});
    char* ws = static_cast<char*>(pl.workspace);
    if (is_backward(kind)) {
      tensors.push_back({kSoftmaxSum, ws + pl.softmax_sum_at});
      tensors.push_back({kDQAccum, ws + pl.dq_accum_at});
      if (l.info.version < 90600) {
        const cudaError_t e = cudaMemsetAsync(ws + pl.dq_accum_at, 0, static_cast<size_t>(pl.dq_accum_bytes), stream());
        if (e != cudaSuccess) return no(std::string("clearing the dQ accumulator: ") + cudaGetErrorString(e));
      }
    }
    std::vector<int64_t> uids;
    std::vector<void*> ptrs;
    for (const Bound& b : tensors) {
      uids.push_back(b.uid);
      ptrs.push_back(const_cast<void*>(b.ptr));
    }
    const auto n = static_cast<int64_t>(uids.size());
    Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "variant pack");
    BERTCC_SET(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids.data());
    BERTCC_SET(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs.data());
    BERTCC_SET(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &pl.workspace);
    pack.finalize();
    check(l.api.execute(handle, pl.plan, pack.get()),
          "execute (" + std::string(graph_name(kind)) + ", " + shape_name(B, T, NH, D) + ")");
  } catch (const std::exception& e) {  // Failure, or bertcc::Error from the workspace's allocation
    return no(e.what());
  }
  return true;
}

bool misaligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 != 0; }

// What is wrong with p and the mask, or "".
std::string dropout_error(float p, const bf16_t* drop_mask) {
  if (!(p >= 0.0f && p < 1.0f)) return "dropout probability " + std::to_string(p) + " not in [0, 1)";
  if (p > 0.0f && !drop_mask) return "dropout probability " + std::to_string(p) + " without a dropout mask";
  if (p == 0.0f && drop_mask) return "a dropout mask with dropout probability 0";
  if (drop_mask && misaligned(drop_mask)) return "the dropout mask is not 16-byte aligned";
  return "";
}

}  // namespace

bool sdpa_ready(int64_t B, int64_t T, int64_t NH, int64_t D, bool training, bool dropout, std::string* why) {
  auto no = [&](const std::string& w) {
    if (why) *why = w;
    return false;
  };
  if (const std::string e = call_error(B, T, NH, D); !e.empty()) return no(e);
  const Loaded& l = loaded();
  // cudnn-frontend refuses the SDPA backward on cuDNN 9.10.0 and 9.10.1 (known wrong results there)
  if (training && (l.info.version == 91000 || l.info.version == 91001))
    return no("cuDNN " + std::to_string(l.info.version) +
              " has known bugs in the SDPA backward (cudnn-frontend refuses it too): use 9.10.2 or later");
  std::vector<Graph> kinds{Graph::infer};
  if (training)
    kinds = {dropout ? Graph::train_fwd_dropout : Graph::train_fwd, dropout ? Graph::bwd_dropout : Graph::bwd};
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  try {
    for (Graph k : kinds)
      if (const Plan* pl = plan_for(st, k, B, T, NH, D).second; !pl->why.empty()) return no(pl->why);
  } catch (const std::exception& e) {
    return no(e.what());
  }
  return true;
}

bool sdpa_forward_bf16(bf16_t* out16, const bf16_t* qkv16, const int32_t* q_len, const int32_t* kv_len, int64_t B,
                       int64_t T, int64_t NH, int64_t D, std::string* why) {
  auto no = [&](const std::string& w) {
    if (why) *why = w;
    return false;
  };
  if (const std::string e = call_error(B, T, NH, D); !e.empty()) return no(e);
  if (misaligned(qkv16) || misaligned(out16)) return no("qkv16 or out16 not 16-byte aligned");
  const int64_t C = NH * D;
  return run(Graph::infer, B, T, NH, D,
             {{kQ, qkv16}, {kK, qkv16 + C}, {kV, qkv16 + 2 * C}, {kO, out16}, {kSeqQ, q_len}, {kSeqKV, kv_len}}, why);
}

bool sdpa_train_forward_bf16(bf16_t* out16, float* stats, const bf16_t* qkv16, const int32_t* q_len,
                             const int32_t* kv_len, const bf16_t* drop_mask, float p, int64_t B, int64_t T, int64_t NH,
                             int64_t D, std::string* why) {
  auto no = [&](const std::string& w) {
    if (why) *why = w;
    return false;
  };
  if (const std::string e = call_error(B, T, NH, D); !e.empty()) return no(e);
  if (const std::string e = dropout_error(p, drop_mask); !e.empty()) return no(e);
  if (misaligned(qkv16) || misaligned(out16) || misaligned(stats))
    return no("qkv16, out16 or stats not 16-byte aligned");
  const int64_t C = NH * D;
  const float drop_scale = p > 0.0f ? 1.0f / (1.0f - p) : 1.0f;  // read by cudnnBackendExecute, in run
  std::vector<Bound> t{{kQ, qkv16},     {kK, qkv16 + C}, {kV, qkv16 + 2 * C}, {kO, out16},
                       {kStats, stats}, {kSeqQ, q_len},  {kSeqKV, kv_len}};
  if (p > 0.0f) {
    t.push_back({kDropMask, drop_mask});
    t.push_back({kDropScale, &drop_scale});
  }
  return run(p > 0.0f ? Graph::train_fwd_dropout : Graph::train_fwd, B, T, NH, D, std::move(t), why);
}

bool sdpa_backward_bf16(bf16_t* dqkv16, const bf16_t* qkv16, const bf16_t* out16, const bf16_t* dout16,
                        const float* stats, const int32_t* q_len, const int32_t* kv_len, const bf16_t* drop_mask,
                        float p, int64_t B, int64_t T, int64_t NH, int64_t D, std::string* why) {
  auto no = [&](const std::string& w) {
    if (why) *why = w;
    return false;
  };
  if (const std::string e = call_error(B, T, NH, D); !e.empty()) return no(e);
  if (const std::string e = dropout_error(p, drop_mask); !e.empty()) return no(e);
  if (misaligned(dqkv16) || misaligned(qkv16) || misaligned(out16) || misaligned(dout16) || misaligned(stats))
    return no("dqkv16, qkv16, out16, dout16 or stats not 16-byte aligned");
  const int64_t C = NH * D;
  // read by cudnnBackendExecute, in run
  const float drop_scale = p > 0.0f ? 1.0f / (1.0f - p) : 1.0f, keep_prob = 1.0f - p;
  std::vector<Bound> t{{kQ, qkv16},           {kK, qkv16 + C}, {kV, qkv16 + 2 * C}, {kO, out16},
                       {kDO, dout16},         {kStats, stats}, {kDQ, dqkv16},       {kDK, dqkv16 + C},
                       {kDV, dqkv16 + 2 * C}, {kSeqQ, q_len},  {kSeqKV, kv_len},    {kDropScaleInv, &keep_prob}};
  if (p > 0.0f) {
    t.push_back({kDropMask, drop_mask});
    t.push_back({kDropScale, &drop_scale});
  }
  return run(p > 0.0f ? Graph::bwd_dropout : Graph::bwd, B, T, NH, D, std::move(t), why);
}

namespace {

// check_forward_graph and its training siblings: every descriptor of `kind`'s graph, then with a
// device description the heuristics and a plan.
bool check_graph(Graph kind, int64_t B, int64_t T, int64_t NH, int64_t D, std::vector<std::string>* steps,
                 std::string* why, const std::string* deviceprop_json) {
  const Loaded& l = loaded();
  const std::string e = call_error(B, T, NH, D);
  if (!e.empty()) {
    if (why) *why = e;
    return false;
  }
  try {
    if (deviceprop_json) {  // the whole plan, for the device the JSON describes
      Desc dp(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR,
              "device properties (" + std::to_string(deviceprop_json->size()) + " bytes of JSON)");
      BERTCC_SET(dp, CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR,
                 static_cast<int64_t>(deviceprop_json->size()), deviceprop_json->data());
      dp.finalize();
      if (steps) steps->push_back(dp.name() + ": finalized");
      Plan pl;
      make_plan(pl, kind, nullptr, dp.get(), B, T, NH, D, steps);
      return true;
    }
    GraphBuilder g(steps);
    const cudnnBackendDescriptor_t graph = build(g, kind, B, T, NH, D, nullptr);
    // what the heuristics say without a device or its description: reported, not checked
    if (steps) {
      try {
        Desc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristics mode A");
        const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
        BERTCC_SET(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
        BERTCC_SET(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
        heur.finalize();
        int64_t count = 0;
        check(l.api.get_attr(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                             nullptr),
              "heuristics mode A: get CUDNN_ATTR_ENGINEHEUR_RESULTS count");
        steps->push_back("heuristics mode A without a device: " + std::to_string(count) + " engine configs");
      } catch (const Failure& f) {
        steps->push_back(std::string("not checked: ") + f.what());
      }
    }
  } catch (const Failure& f) {
    if (why) *why = f.what();
    return false;
  }
  return true;
}

}  // namespace

bool check_forward_graph(int64_t B, int64_t T, int64_t NH, int64_t D, std::vector<std::string>* steps, std::string* why,
                         const std::string* deviceprop_json) {
  return check_graph(Graph::infer, B, T, NH, D, steps, why, deviceprop_json);
}

bool check_train_forward_graph(int64_t B, int64_t T, int64_t NH, int64_t D, bool dropout,
                               std::vector<std::string>* steps, std::string* why, const std::string* deviceprop_json) {
  return check_graph(dropout ? Graph::train_fwd_dropout : Graph::train_fwd, B, T, NH, D, steps, why, deviceprop_json);
}

bool check_backward_graph(int64_t B, int64_t T, int64_t NH, int64_t D, bool dropout, std::vector<std::string>* steps,
                          std::string* why, const std::string* deviceprop_json) {
  return check_graph(dropout ? Graph::bwd_dropout : Graph::bwd, B, T, NH, D, steps, why, deviceprop_json);
}

bool device_properties_json(std::string* json, std::string* why) {
  const Loaded& l = loaded();
  int device = 0;
  if (!l.info.loaded || cudaGetDevice(&device) != cudaSuccess) {
    if (why) *why = l.info.loaded ? "no current CUDA device" : l.info.why;
    return false;
  }
  try {
    Desc dp(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR, "device properties of device " + std::to_string(device));
    const int32_t id = device;
    BERTCC_SET(dp, CUDNN_ATTR_DEVICEPROP_DEVICE_ID, CUDNN_TYPE_INT32, 1, &id);
    dp.finalize();
    int64_t n = 0;
    check(l.api.get_attr(dp.get(), CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, 0, &n, nullptr),
          dp.name() + ": get CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION size");
    std::string buf(static_cast<size_t>(n), '\0');
    check(l.api.get_attr(dp.get(), CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, n, &n, buf.data()),
          dp.name() + ": get CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION");
    buf.resize(static_cast<size_t>(n));
    *json = std::move(buf);
  } catch (const Failure& f) {
    if (why) *why = f.what();
    return false;
  }
  return true;
}

std::string probe_handle() {
  const Loaded& l = loaded();
  if (!l.info.loaded) return l.info.why;
  cudnnHandle_t h = nullptr;
  try {
    check(l.api.create(&h), "cudnnCreate");
  } catch (const Failure& f) {
    return f.what();
  }
  l.api.destroy(h);
  return "ok";
}

#endif  // BERTCC_CUDNN_HEADERS

}  // namespace bertcc::cuda::cudnn
