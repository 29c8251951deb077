// The ONNX graph builder (include/bertcc/onnx_graph.h): protobuf's wire format by hand, each
// message appended to the graph in the order of the calls.
#include "bertcc/onnx_graph.h"

#include <cctype>
#include <cmath>
#include <cstring>
#include <string_view>

#include "bertcc/params.h"
#include "bertcc/runtime.h"
#include "kernels/gemm_int8.h"

namespace bertcc {

namespace {

// ---- protobuf wire format --------------------------------------------------------------------
struct Pb {
  std::string b;
  void varint(uint64_t v) {
    while (v >= 0x80) {
      b.push_back(static_cast<char>((v & 0x7f) | 0x80));
      v >>= 7;
    }
    b.push_back(static_cast<char>(v));
  }
  void tag(int field, int wire) { varint(static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire)); }
  Pb& i64(int f, int64_t v) {
    tag(f, 0);
    varint(static_cast<uint64_t>(v));
    return *this;
  }
  Pb& bytes(int f, std::string_view s) {
    tag(f, 2);
    varint(s.size());
    b.append(s.data(), s.size());
    return *this;
  }
  Pb& msg(int f, const Pb& m) { return bytes(f, m.b); }
  Pb& f32(int f, float v) {
    tag(f, 5);
    char c[4];
    std::memcpy(c, &v, 4);
    b.append(c, 4);
    return *this;
  }
};

// ONNX enums beyond the header's.
constexpr int kFloat16 = 10, kBFloat16 = 16;
constexpr int kAttrFloat = 1, kAttrInt = 2, kAttrInts = 7;

Pb value_info(const std::string& name, int elem, const std::vector<std::string>& dims) {
  Pb shape;
  for (const auto& d : dims) {
    Pb dim;
    if (!d.empty() && (std::isdigit(static_cast<unsigned char>(d[0])) != 0))
      dim.i64(1, std::stoll(d));
    else
      dim.bytes(2, d);
    shape.msg(1, dim);
  }
  Pb tensor;
  tensor.i64(1, elem).msg(2, shape);
  Pb type;
  type.msg(1, tensor);
  Pb vi;
  vi.bytes(1, name).msg(2, type);
  return vi;
}

}  // namespace

struct OnnxGraph::Proto {
  Pb pb;
};

OnnxGraph::Attr OnnxGraph::Attr::i(const char* name, int64_t v) {
  Pb p;
  p.bytes(1, name).i64(3, v).i64(20, kAttrInt);
  return Attr{std::move(p.b)};
}

OnnxGraph::Attr OnnxGraph::Attr::f(const char* name, float v) {
  Pb p;
  p.bytes(1, name).f32(2, v).i64(20, kAttrFloat);
  return Attr{std::move(p.b)};
}

OnnxGraph::Attr OnnxGraph::Attr::ints(const char* name, const std::vector<int64_t>& v) {
  Pb p;
  p.bytes(1, name);
  for (int64_t x : v) p.i64(8, x);
  p.i64(20, kAttrInts);
  return Attr{std::move(p.b)};
}

OnnxGraph::OnnxGraph(const BertConfig& config, const ParamTable& table, const float* params, DType weights)
    : config_(config), table_(table), params_(params), weights_(weights), graph_(std::make_unique<Proto>()) {}

OnnxGraph::~OnnxGraph() = default;

std::string OnnxGraph::node(const char* op, const std::vector<std::string>& in, const std::vector<Attr>& attrs,
                            const std::string& out_name) {
  const std::string out = out_name.empty() ? std::string(op) + "_" + std::to_string(n_++) : out_name;
  return nodes(op, in, attrs, {out})[0];
}

std::vector<std::string> OnnxGraph::nodes(const char* op, const std::vector<std::string>& in,
                                          const std::vector<Attr>& attrs, std::vector<std::string> outs) {
  if (outs.empty() || outs[0].empty()) {
    const std::string base = std::string(op) + "_" + std::to_string(n_++);
    for (size_t k = 0; k < outs.size(); ++k) outs[k] = base + "_" + std::to_string(k);
  }
  Pb nd;
  for (const auto& i : in) nd.bytes(1, i);
  for (const auto& o : outs) nd.bytes(2, o);
  nd.bytes(3, outs[0]).bytes(4, op);
  for (const auto& a : attrs) nd.bytes(5, a.proto);
  graph_->pb.msg(1, nd);
  return outs;
}

std::string OnnxGraph::weight(const std::string& name, const std::vector<int64_t>& dims, const float* data) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  Pb t;
  for (int64_t d : dims) t.i64(1, d);
  std::string raw;
  if (weights_ == DType::F32) {
    t.i64(2, kFloat);
    raw.assign(reinterpret_cast<const char*>(data), static_cast<size_t>(n) * 4);
  } else {
    t.i64(2, weights_ == DType::F16 ? kFloat16 : kBFloat16);
    raw.resize(static_cast<size_t>(n) * 2);
    for (int64_t k = 0; k < n; ++k) {
      const uint16_t h = weights_ == DType::F16 ? f32_to_f16(data[k]) : f32_to_bf16(data[k]);
      std::memcpy(&raw[static_cast<size_t>(k) * 2], &h, 2);
    }
  }
  t.bytes(8, name).bytes(9, raw);
  graph_->pb.msg(5, t);
  if (weights_ == DType::F32) return name;
  return node("Cast", {name}, {Attr::i("to", kFloat)}, name + "_f32");
}

std::string OnnxGraph::const_f32(float v) {
  const std::string name = "c_f32_" + std::to_string(n_++);
  Pb t;
  t.i64(2, kFloat).bytes(8, name);
  t.bytes(9, std::string_view(reinterpret_cast<const char*>(&v), 4));
  graph_->pb.msg(5, t);
  return name;
}

std::string OnnxGraph::const_i64(const std::vector<int64_t>& v) {
  const std::string name = "c_i64_" + std::to_string(n_++);
  Pb t;
  t.i64(1, static_cast<int64_t>(v.size())).i64(2, kInt64).bytes(8, name);
  t.bytes(9, std::string_view(reinterpret_cast<const char*>(v.data()), v.size() * 8));
  graph_->pb.msg(5, t);
  return name;
}

std::string OnnxGraph::const_i64_scalar(int64_t v) {
  const std::string name = "c_i64_" + std::to_string(n_++);
  Pb t;
  t.i64(2, kInt64).bytes(8, name);
  t.bytes(9, std::string_view(reinterpret_cast<const char*>(&v), 8));
  graph_->pb.msg(5, t);
  return name;
}

void OnnxGraph::input(const std::string& name, int elem, const std::vector<std::string>& dims) {
  graph_->pb.msg(11, value_info(name, elem, dims));
}

void OnnxGraph::output(const std::string& name, const std::vector<std::string>& dims, int elem) {
  graph_->pb.msg(12, value_info(name, elem, dims));
}

const float* OnnxGraph::data(const std::string& name) const { return params_ + table_.at(name).offset; }

const std::vector<int64_t>& OnnxGraph::shape(const std::string& name) const { return table_.at(name).shape; }

std::string OnnxGraph::param(const std::string& name) { return weight(name, shape(name), data(name)); }

std::string OnnxGraph::linear(const std::string& x, const std::string& prefix) {
  const auto s = shape(prefix + ".weight");  // [out, in]
  std::vector<float> t(static_cast<size_t>(s[0] * s[1]));
  const float* w = data(prefix + ".weight");
  for (int64_t o = 0; o < s[0]; ++o)
    for (int64_t i = 0; i < s[1]; ++i) t[static_cast<size_t>(i * s[0] + o)] = w[o * s[1] + i];
  const std::string wt = weight(prefix + ".weight_t", {s[1], s[0]}, t.data());
  return node("Add", {node("MatMul", {x, wt}), param(prefix + ".bias")});
}

std::string OnnxGraph::raw(const std::string& name, const std::vector<int64_t>& dims, int elem, const void* data,
                           size_t bytes) {
  Pb t;
  for (int64_t d : dims) t.i64(1, d);
  t.i64(2, elem).bytes(8, name).bytes(9, std::string_view(static_cast<const char*>(data), bytes));
  graph_->pb.msg(5, t);
  return name;
}

std::string OnnxGraph::linear_int8(const std::string& x, const std::string& prefix) {
  const auto s = shape(prefix + ".weight");  // [out, in]
  const int64_t N = s[0], K = s[1];
  const kernels::Int8Weight q = kernels::quantize_weight_int8(data(prefix + ".weight"), N, K);
  std::vector<int8_t> t(static_cast<size_t>(N * K));  // [in, out] for MatMulInteger
  for (int64_t o = 0; o < N; ++o)
    for (int64_t i = 0; i < K; ++i) t[static_cast<size_t>(i * N + o)] = q.q[static_cast<size_t>(o * K + i)];
  const std::string wq = raw(prefix + ".weight_int8", {K, N}, kInt8, t.data(), t.size());
  const std::string ws = raw(prefix + ".weight_scale", {N}, kFloat, q.scale.data(), q.scale.size() * 4);
  const std::string x2 = node("Reshape", {x, const_i64({-1, K})});  // [M, K]
  // activations per row to the bits --int8-activation-bits names (8 for auto: the file runs elsewhere)
  const float act_max = static_cast<float>(int8_activation_max(int8_export_activation_bits()));
  const auto [xq, sx] = quantize_sym(x2, 1, act_max);  // sx [M, 1]
  const std::string acc = node("Cast", {node("MatMulInteger", {xq, wq})}, {Attr::i("to", kFloat)});
  // bertcc's rescale is fma(float(acc), s_x · s_w, b) (kernels::rescale_int8_row); ONNX has no
  // fma: a Mul, then an Add, the same product of the scales first. The last bits may differ (the
  // export test's tolerance; the same in double, tried, moved no fewer of its sequences).
  const std::string y = node("Add", {node("Mul", {acc, node("Mul", {sx, ws})}), param(prefix + ".bias")});
  // back to [B, S, out]
  const std::string lead = node("Slice", {node("Shape", {x}), const_i64({0}), const_i64({-1})});
  return node("Reshape", {y, node("Concat", {lead, const_i64({N})}, {Attr::i("axis", 0)})});
}

std::string OnnxGraph::gather_int8(const std::string& table, const std::string& ids) {
  const auto s = shape(table);  // [V, E]
  const kernels::Int8Weight q = kernels::quantize_embeddings_int8(data(table), s[0], s[1]);
  const std::string wq = raw(table + "_int8", {s[0], s[1]}, kInt8, q.q.data(), q.q.size());
  const std::string ws = raw(table + "_scale", {s[0], 1}, kFloat, q.scale.data(), q.scale.size() * 4);
  // the table dequantized whole, then gathered (ONNX Runtime folds it once; rows gathered first and
  // dequantized after gave other values there with its graph optimisations on)
  return node("Gather", {node("Mul", {node("Cast", {wq}, {Attr::i("to", kFloat)}), ws}), ids});
}

std::pair<std::string, std::string> OnnxGraph::quantize_sym(const std::string& x, int64_t axis, float qmax) {
  // (a slice of zeros: scale 0, and 0 · (qmax / 1e-30) = 0)
  const std::string amax = node("ReduceMax", {node("Abs", {x})}, {Attr::ints("axes", {axis}), Attr::i("keepdims", 1)});
  const std::string inv = node("Div", {const_f32(qmax), node("Max", {amax, const_f32(1e-30f)})});
  const std::string r = node("Clip", {node("Round", {node("Mul", {x, inv})}), const_f32(-qmax), const_f32(qmax)});
  return {node("Cast", {r}, {Attr::i("to", kInt8)}), node("Div", {amax, const_f32(qmax)})};
}

std::string OnnxGraph::attention_int8(const std::string& q, const std::string& k, const std::string& v,
                                      const std::string& mask, const std::string& visible, float scale) {
  const float act = static_cast<float>(kernels::kInt8ActivationMax), wmax = static_cast<float>(kernels::kInt8WeightMax);
  // the keys seen (all of them where the mask hides every one, as bertcc)
  const std::string none =
      node("Cast",
           {node("Equal", {node("ReduceSum", {visible, const_i64({1})}, {Attr::i("keepdims", 1)}), const_f32(0.0f)})},
           {Attr::i("to", kFloat)});
  const std::string seen = node("Max", {visible, none});  // [B, S]
  const std::string key_seen = node("Cast", {node("Unsqueeze", {seen, const_i64({1, 2})})}, {Attr::i("to", kBool)});
  const std::string row_seen = node("Cast", {node("Unsqueeze", {seen, const_i64({1, 3})})}, {Attr::i("to", kBool)});
  const auto [q8, sq] = quantize_sym(q, 3, act);
  const auto [k8, sk] = quantize_sym(k, 3, wmax);
  const std::vector<int64_t> swap{0, 1, 3, 2};
  const std::string acc =
      node("Cast", {node("MatMulInteger", {q8, node("Transpose", {k8}, {Attr::ints("perm", swap)})})},
           {Attr::i("to", kFloat)});
  const std::string ss =
      node("Mul", {node("Mul", {sq, const_f32(scale)}), node("Transpose", {sk}, {Attr::ints("perm", swap)})});
  const std::string S = node("Where", {key_seen, node("Add", {node("Mul", {acc, ss}), mask}), const_f32(-INFINITY)});
  const std::string mx = node("ReduceMax", {S}, {Attr::ints("axes", {3}), Attr::i("keepdims", 1)});
  // P's 8 bits: the table at the nearest step of max - s (kernels::attention_int8_exp_table), 0 for
  // a hidden key (its -inf score clipped to the table's last entry); P = u / sum u, the sum exact
  // (whole numbers in fp32)
  const float top = static_cast<float>(kernels::kAttentionExpTable - 1);
  const std::string t = node(
      "Clip",
      {node("Round", {node("Mul", {node("Sub", {mx, S}), const_f32(static_cast<float>(kernels::kAttentionExpSteps))})}),
       const_f32(0.0f), const_f32(top)});
  if (exp_table_.empty()) {  // one initializer for every layer
    std::vector<float> table(static_cast<size_t>(kernels::kAttentionExpTable));
    for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<float>(kernels::attention_int8_exp_table()[i]);
    exp_table_ = raw("attention_int8_exp_table", {kernels::kAttentionExpTable}, kFloat, table.data(), table.size() * 4);
  }
  const std::string& lut = exp_table_;
  const std::string u = node("Gather", {lut, node("Cast", {t}, {Attr::i("to", kInt64)})});
  const std::string sp =
      node("Div", {const_f32(1.0f), node("ReduceSum", {u, const_i64({3})}, {Attr::i("keepdims", 1)})});
  const std::string pu8 = node("Cast", {u}, {Attr::i("to", kUint8)});
  const std::string v_seen = node("Where", {row_seen, v, const_f32(0.0f)});  // hidden: zeros (NaN too)
  const auto [v8, sv] = quantize_sym(v_seen, 2, wmax);
  const std::string acc2 = node("Cast", {node("MatMulInteger", {pu8, v8})}, {Attr::i("to", kFloat)});
  return node("Mul", {acc2, node("Mul", {sp, sv})});
}

std::string OnnxGraph::layer_norm(const std::string& x, const std::string& prefix) {
  const float eps = config_.layer_norm_eps;
  if (shape(prefix + ".weight")[0] > 1)
    return node("LayerNormalization", {x, param(prefix + ".weight"), param(prefix + ".bias")},
                {Attr::i("axis", -1), Attr::f("epsilon", eps)});
  // Over one value (hidden_size 1): ONNX Runtime's LayerNormalization kernel refuses a
  // normalized size of 1 ("Size of X.shape[axis:] must be larger than 1") though ONNX allows it,
  // so the same maths from primitives: (x - mean) / sqrt(var + eps) * weight + bias.
  const std::vector<Attr> last{Attr::ints("axes", {-1}), Attr::i("keepdims", 1)};
  const std::string d = node("Sub", {x, node("ReduceMean", {x}, last)});
  const std::string var = node("ReduceMean", {node("Mul", {d, d})}, last);
  const std::string n = node("Div", {d, node("Sqrt", {node("Add", {var, const_f32(eps)})})});
  return node("Add", {node("Mul", {n, param(prefix + ".weight")}), param(prefix + ".bias")});
}

std::string OnnxGraph::gelu(const std::string& x, Activation act) {
  if (act == Activation::GeluErf) {  // 0.5 x (1 + erf(x / sqrt 2))
    const std::string e = node("Erf", {node("Div", {x, const_f32(static_cast<float>(std::sqrt(2.0)))})});
    return node("Mul", {node("Mul", {x, const_f32(0.5f)}), node("Add", {e, const_f32(1.0f)})});
  }
  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  const std::string x3 = node("Mul", {node("Mul", {x, x}), x});
  const std::string in = node("Add", {x, node("Mul", {x3, const_f32(0.044715f)})});
  const std::string t = node("Tanh", {node("Mul", {in, const_f32(static_cast<float>(std::sqrt(2.0 / M_PI)))})});
  return node("Mul", {node("Mul", {x, const_f32(0.5f)}), node("Add", {t, const_f32(1.0f)})});
}

std::string OnnxGraph::rename(const std::string& x, const std::string& name) { return node("Identity", {x}, {}, name); }

std::string OnnxGraph::first_token(const std::string& h) {
  return node("Gather", {h, const_i64_scalar(0)}, {Attr::i("axis", 1)});
}

std::string OnnxGraph::pooled_output(const std::string& h) {
  return node("Tanh", {linear(first_token(h), "bert.pooler.dense")});
}

std::string OnnxGraph::model(const std::string& doc) {
  Pb& graph = graph_->pb;
  graph.bytes(2, "bertcc");
  Pb opset;
  opset.bytes(1, "").i64(2, 17);
  Pb m;
  m.i64(1, 8).bytes(2, "bertcc").bytes(3, "0.1.0").msg(8, opset).bytes(6, doc).msg(7, graph);
  return std::move(m.b);
}

}  // namespace bertcc
