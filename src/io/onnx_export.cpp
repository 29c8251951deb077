// ONNX export of a BERT model with its head, written with a small protobuf encoder (the ONNX
// schema's field numbers; no protobuf library needed). Opset 17, IR version 8: embeddings as Gather,
// LayerNormalization, attention as MatMul/Softmax with an additive mask from attention_mask
// ((1 - mask) * -10000, as bertcc's CPU engine), GELU composed from Erf (or Tanh for gelu_new),
// dynamic batch and sequence axes. Linear weights are stored transposed ([in, out]) for MatMul.
// fp16/bf16 weights are stored at 16 bits and Cast to fp32 in the graph (half the file; fp32 math).
#include "bertcc/onnx_export.h"

#include <cmath>
#include <cstring>

#include "bertcc/error.h"
#include "bertcc/fileio.h"
#include "bertcc/head_spec.h"

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

// ONNX enums.
constexpr int kFloat = 1, kInt64 = 7, kFloat16 = 10, kBFloat16 = 16;
constexpr int kAttrFloat = 1, kAttrInt = 2, kAttrInts = 7;

struct Attr {
  Pb p;
  static Attr i(const char* name, int64_t v) {
    Attr a;
    a.p.bytes(1, name).i64(3, v).i64(20, kAttrInt);
    return a;
  }
  static Attr f(const char* name, float v) {
    Attr a;
    a.p.bytes(1, name).f32(2, v).i64(20, kAttrFloat);
    return a;
  }
  static Attr ints(const char* name, const std::vector<int64_t>& v) {
    Attr a;
    a.p.bytes(1, name);
    for (int64_t x : v) a.p.i64(8, x);
    a.p.i64(20, kAttrInts);
    return a;
  }
};

Pb value_info(const std::string& name, int elem, const std::vector<std::string>& dims) {
  Pb shape;
  for (const auto& d : dims) {
    Pb dim;
    if (!d.empty() && (std::isdigit(static_cast<unsigned char>(d[0])) != 0)) dim.i64(1, std::stoll(d));
    else dim.bytes(2, d);
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

class Graph {
 public:
  explicit Graph(DType weights) : weights_(weights) {}

  std::string node(const char* op, const std::vector<std::string>& in, const std::vector<Attr>& attrs = {},
                   const std::string& out_name = "") {
    const std::string out = out_name.empty() ? std::string(op) + "_" + std::to_string(n_++) : out_name;
    return nodes(op, in, attrs, {out})[0];
  }
  // A node with several outputs (TopK: values, indices), named op_N_0, op_N_1, ...
  std::vector<std::string> nodes(const char* op, const std::vector<std::string>& in, const std::vector<Attr>& attrs,
                                 std::vector<std::string> outs) {
    if (outs.empty() || outs[0].empty()) {
      const std::string base = std::string(op) + "_" + std::to_string(n_++);
      for (size_t k = 0; k < outs.size(); ++k) outs[k] = base + "_" + std::to_string(k);
    }
    Pb nd;
    for (const auto& i : in) nd.bytes(1, i);
    for (const auto& o : outs) nd.bytes(2, o);
    nd.bytes(3, outs[0]).bytes(4, op);
    for (const auto& a : attrs) nd.msg(5, a.p);
    graph_.msg(1, nd);
    return outs;
  }
  // A weight: stored at the export precision, Cast to fp32 when that is 16-bit.
  std::string weight(const std::string& name, const std::vector<int64_t>& dims, const float* data) {
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
    graph_.msg(5, t);
    if (weights_ == DType::F32) return name;
    return node("Cast", {name}, {Attr::i("to", kFloat)}, name + "_f32");
  }
  std::string const_f32(float v) {
    const std::string name = "c_f32_" + std::to_string(n_++);
    Pb t;
    t.i64(2, kFloat).bytes(8, name);
    t.bytes(9, std::string_view(reinterpret_cast<const char*>(&v), 4));
    graph_.msg(5, t);
    return name;
  }
  std::string const_i64(const std::vector<int64_t>& v) {
    const std::string name = "c_i64_" + std::to_string(n_++);
    Pb t;
    t.i64(1, static_cast<int64_t>(v.size())).i64(2, kInt64).bytes(8, name);
    t.bytes(9, std::string_view(reinterpret_cast<const char*>(v.data()), v.size() * 8));
    graph_.msg(5, t);
    return name;
  }
  std::string const_i64_scalar(int64_t v) {
    const std::string name = "c_i64_" + std::to_string(n_++);
    Pb t;
    t.i64(2, kInt64).bytes(8, name);
    t.bytes(9, std::string_view(reinterpret_cast<const char*>(&v), 8));
    graph_.msg(5, t);
    return name;
  }
  void input(const std::string& name, int elem, const std::vector<std::string>& dims) {
    graph_.msg(11, value_info(name, elem, dims));
  }
  void output(const std::string& name, const std::vector<std::string>& dims, int elem = kFloat) {
    graph_.msg(12, value_info(name, elem, dims));
  }
  std::string model(const std::string& doc) {
    graph_.bytes(2, "bertcc");
    Pb opset;
    opset.bytes(1, "").i64(2, 17);
    Pb m;
    m.i64(1, 8).bytes(2, "bertcc").bytes(3, "0.1.0").msg(8, opset).bytes(6, doc).msg(7, graph_);
    return std::move(m.b);
  }

 private:
  DType weights_;
  Pb graph_;
  int n_ = 0;
};

}  // namespace

void export_onnx(const Bert& model, const std::string& path, DType weights) {
  BERTCC_CHECK(weights == DType::F32 || weights == DType::F16 || weights == DType::BF16,
               "export-onnx: weights must be fp32, fp16 or bf16");
  const BertConfig& c = model.config();
  const Heads heads = model.heads();
  const HeadSpec& spec = head_spec(heads);
  BERTCC_CHECK(spec.onnx, "export-onnx: ", architecture_name(heads, c.electra()), " has no ONNX export (encoders, classifiers, QA "
               "heads and token classifiers, and ELECTRA's discriminator do)");
  const int64_t C = c.hidden_size, NH = c.num_attention_heads, HD = c.head_size();
  Graph g(weights);
  auto W = [&](const std::string& n) { return model.params().data() + model.table().at(n).offset; };
  auto shape_of = [&](const std::string& n) { return model.table().at(n).shape; };
  auto param = [&](const std::string& n) { return g.weight(n, shape_of(n), W(n)); };
  // Linear: x @ W^T + b, with W stored transposed.
  auto linear = [&](const std::string& x, const std::string& prefix) {
    const auto s = shape_of(prefix + ".weight");  // [out, in]
    std::vector<float> t(static_cast<size_t>(s[0] * s[1]));
    const float* w = W(prefix + ".weight");
    for (int64_t o = 0; o < s[0]; ++o)
      for (int64_t i = 0; i < s[1]; ++i) t[static_cast<size_t>(i * s[0] + o)] = w[o * s[1] + i];
    const std::string wt = g.weight(prefix + ".weight_t", {s[1], s[0]}, t.data());
    return g.node("Add", {g.node("MatMul", {x, wt}), param(prefix + ".bias")});
  };
  auto layer_norm = [&](const std::string& x, const std::string& prefix) {
    if (shape_of(prefix + ".weight")[0] > 1)
      return g.node("LayerNormalization", {x, param(prefix + ".weight"), param(prefix + ".bias")},
                    {Attr::i("axis", -1), Attr::f("epsilon", c.layer_norm_eps)});
    // Over one value (hidden_size 1): ONNX Runtime's LayerNormalization kernel refuses a
    // normalized size of 1 ("Size of X.shape[axis:] must be larger than 1") though ONNX allows it,
    // so the same maths from primitives: (x - mean) / sqrt(var + eps) * weight + bias.
    const std::vector<Attr> last{Attr::ints("axes", {-1}), Attr::i("keepdims", 1)};
    const std::string d = g.node("Sub", {x, g.node("ReduceMean", {x}, last)});
    const std::string var = g.node("ReduceMean", {g.node("Mul", {d, d})}, last);
    const std::string n = g.node("Div", {d, g.node("Sqrt", {g.node("Add", {var, g.const_f32(c.layer_norm_eps)})})});
    return g.node("Add", {g.node("Mul", {n, param(prefix + ".weight")}), param(prefix + ".bias")});
  };
  auto gelu = [&](const std::string& x, Activation act) {
    if (act == Activation::GeluErf) {  // 0.5 x (1 + erf(x / sqrt 2))
      const std::string e = g.node("Erf", {g.node("Div", {x, g.const_f32(static_cast<float>(std::sqrt(2.0)))})});
      return g.node("Mul", {g.node("Mul", {x, g.const_f32(0.5f)}), g.node("Add", {e, g.const_f32(1.0f)})});
    }
    // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    const std::string x3 = g.node("Mul", {g.node("Mul", {x, x}), x});
    const std::string in = g.node("Add", {x, g.node("Mul", {x3, g.const_f32(0.044715f)})});
    const std::string t = g.node("Tanh", {g.node("Mul", {in, g.const_f32(static_cast<float>(std::sqrt(2.0 / M_PI)))})});
    return g.node("Mul", {g.node("Mul", {x, g.const_f32(0.5f)}), g.node("Add", {t, g.const_f32(1.0f)})});
  };

  g.input("input_ids", kInt64, {"batch", "sequence"});
  g.input("attention_mask", kInt64, {"batch", "sequence"});
  g.input("token_type_ids", kInt64, {"batch", "sequence"});
  // Embeddings: word + position (0 .. S-1) + token type, then LayerNorm.
  const std::string e = "bert.embeddings.";
  const std::string seq = g.node("Gather", {g.node("Shape", {"input_ids"}), g.const_i64({1})});  // [1]
  const std::string positions =
      g.node("Range", {g.const_i64_scalar(0), g.node("Squeeze", {seq, g.const_i64({0})}), g.const_i64_scalar(1)});
  std::string h = g.node("Add", {g.node("Gather", {param(e + "word_embeddings.weight"), "input_ids"}),
                                 g.node("Gather", {param(e + "position_embeddings.weight"), positions})});
  h = g.node("Add", {h, g.node("Gather", {param(e + "token_type_embeddings.weight"), "token_type_ids"})});
  h = layer_norm(h, e + "LayerNorm");
  if (model.table().find("bert.embeddings_project.weight")) h = linear(h, "bert.embeddings_project");  // ELECTRA
  // Additive mask [B, 1, 1, S].
  const std::string m = g.node("Cast", {"attention_mask"}, {Attr::i("to", kFloat)});
  const std::string mask = g.node(
      "Mul", {g.node("Sub", {g.const_f32(1.0f), g.node("Unsqueeze", {m, g.const_i64({1, 2})})}), g.const_f32(-10000.0f)});
  const std::string split_heads = g.const_i64({0, 0, NH, HD}), merge_heads = g.const_i64({0, 0, C});
  const std::string scale = g.const_f32(static_cast<float>(1.0 / std::sqrt(static_cast<double>(HD))));
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "bert.encoder.layer." + std::to_string(l) + ".";
    auto heads_of = [&](const char* n, std::vector<int64_t> perm) {
      return g.node("Transpose", {g.node("Reshape", {linear(h, p + "attention.self." + n), split_heads})},
                    {Attr::ints("perm", perm)});
    };
    const std::string q = heads_of("query", {0, 2, 1, 3});  // [B, NH, S, HD]
    const std::string k = heads_of("key", {0, 2, 3, 1});    // [B, NH, HD, S]
    const std::string v = heads_of("value", {0, 2, 1, 3});
    const std::string scores = g.node("Add", {g.node("Mul", {g.node("MatMul", {q, k}), scale}), mask});
    const std::string probs = g.node("Softmax", {scores}, {Attr::i("axis", -1)});
    const std::string ctx = g.node(
        "Reshape",
        {g.node("Transpose", {g.node("MatMul", {probs, v})}, {Attr::ints("perm", {0, 2, 1, 3})}), merge_heads});
    h = layer_norm(g.node("Add", {linear(ctx, p + "attention.output.dense"), h}), p + "attention.output.LayerNorm");
    const std::string inter = gelu(linear(h, p + "intermediate.dense"), c.activation());
    h = layer_norm(g.node("Add", {linear(inter, p + "output.dense"), h}), p + "output.LayerNorm");
  }
  const std::vector<std::string> bs{"batch", "sequence"};
  auto rename = [&](const std::string& x, const std::string& name) { return g.node("Identity", {x}, {}, name); };
  // ELECTRA's (and XLNet's) joint SQuAD head at inference, as bertcc's beam search
  // (src/model/joint_qa.cpp) and NVIDIA's TFElectraForQuestionAnswering with joint_head: outputs
  // start_top_log_probs / start_top_index [B, K1], end_top_log_probs / end_top_index [B, K1*K2]
  // (start-major: i * K2 + j), cls_logits [B]. dense_0 of the end and answer-class layers takes
  // [x ; y] (2C inputs); it is applied as x @ Wx + y @ Wy, so the [B, K1, S, 2C] concatenation is
  // never formed.
  auto joint_qa_head = [&](const std::string& h, const std::string& positions) {
    const int64_t K1 = c.start_beam(), K2 = c.end_beam();
    // columns [c0, c0 + C) of a [C, 2C] weight, transposed for MatMul
    auto half = [&](const std::string& n, int64_t c0) {
      const float* w = W(n);
      std::vector<float> t(static_cast<size_t>(C * C));
      for (int64_t o = 0; o < C; ++o)
        for (int64_t i = 0; i < C; ++i) t[static_cast<size_t>(i * C + o)] = w[o * 2 * C + c0 + i];
      return g.weight(n + (c0 == 0 ? "_t_first" : "_t_second"), {C, C}, t.data());
    };
    auto row = [&](const std::string& n) { return g.weight(n + "_t", {C, 1}, W(n)); };  // [1, C] -> [C, 1]
    // p_mask as bertcc's: open are [CLS] (position 0) and segment-1 real tokens but the last one
    const std::string len = g.node("ReduceSum", {"attention_mask", g.const_i64({1})}, {Attr::i("keepdims", 1)});
    const std::string last = g.node("Sub", {len, g.const_i64_scalar(1)});  // [B, 1]
    const std::string one = g.const_i64_scalar(1);
    const std::string in_context = g.node(
        "And", {g.node("And", {g.node("Equal", {"token_type_ids", one}), g.node("Equal", {"attention_mask", one})}),
                g.node("Not", {g.node("Equal", {positions, last})})});
    const std::string open = g.node("Or", {g.node("Equal", {positions, g.const_i64_scalar(0)}), in_context});  // [B, S]
    const std::string closed = g.const_f32(-1e30f);
    // start: log-softmax of the masked logits, the K1 best
    const std::string s = g.node("Where", {open, g.node("Squeeze", {linear(h, "start_logits.dense"), g.const_i64({2})}),
                                           closed});
    // the k largest along the last axis, sorted: [values, indices]
    auto top_k = [&](const std::string& x, int64_t k) {
      return g.nodes("TopK", {x, g.const_i64({k})}, {Attr::i("axis", -1), Attr::i("largest", 1), Attr::i("sorted", 1)},
                     {"", ""});
    };
    const std::vector<std::string> st = top_k(g.node("LogSoftmax", {s}, {Attr::i("axis", -1)}), K1);
    rename(st[0], "start_top_log_probs");
    rename(st[1], "start_top_index");
    // the hidden states at those starts [B, K1, C]
    const std::string gidx = g.node(
        "Expand", {g.node("Unsqueeze", {st[1], g.const_i64({2})}),
                   g.node("Concat", {g.node("Shape", {st[1]}), g.const_i64({C})}, {Attr::i("axis", 0)})});
    const std::string hs = g.node("GatherElements", {h, gidx}, {Attr::i("axis", 1)});
    // end logits for every (start i, position t): dense_1(LN(tanh(dense_0([h_t ; h_start_i]))))
    const std::string a_t = g.node("MatMul", {h, half("end_logits.dense_0.weight", 0)});  // [B, S, C]
    const std::string a_s = g.node("Add", {g.node("MatMul", {hs, half("end_logits.dense_0.weight", C)}),
                                           param("end_logits.dense_0.bias")});  // [B, K1, C]
    const std::string a = g.node("Tanh", {g.node("Add", {g.node("Unsqueeze", {a_t, g.const_i64({1})}),
                                                         g.node("Unsqueeze", {a_s, g.const_i64({2})})})});
    const std::string e0 = g.node("Add", {g.node("MatMul", {layer_norm(a, "end_logits.LayerNorm"), row("end_logits.dense_1.weight")}),
                                          param("end_logits.dense_1.bias")});  // [B, K1, S, 1]
    const std::string e = g.node("Where", {g.node("Unsqueeze", {open, g.const_i64({1})}),
                                           g.node("Squeeze", {e0, g.const_i64({3})}), closed});
    const std::vector<std::string> en = top_k(g.node("LogSoftmax", {e}, {Attr::i("axis", -1)}), K2);
    const std::string flat = g.const_i64({0, K1 * K2});
    rename(g.node("Reshape", {en[0], flat}), "end_top_log_probs");
    rename(g.node("Reshape", {en[1], flat}), "end_top_index");
    // answer class from the expected start state sum_t softmax(s)_t h_t and h_[CLS]
    const std::string hexp = g.node(
        "Squeeze", {g.node("MatMul", {g.node("Unsqueeze", {g.node("Softmax", {s}, {Attr::i("axis", -1)}), g.const_i64({1})}), h}),
                    g.const_i64({1})});  // [B, C]
    const std::string hcls = g.node("Gather", {h, g.const_i64_scalar(0)}, {Attr::i("axis", 1)});  // [B, C]
    const std::string z = g.node(
        "Tanh", {g.node("Add", {g.node("Add", {g.node("MatMul", {hexp, half("answer_class.dense_0.weight", 0)}),
                                               g.node("MatMul", {hcls, half("answer_class.dense_0.weight", C)})}),
                                param("answer_class.dense_0.bias")})});
    rename(g.node("Squeeze", {g.node("MatMul", {z, row("answer_class.dense_1.weight")}), g.const_i64({1})}), "cls_logits");
    const std::string k1 = std::to_string(K1), k12 = std::to_string(K1 * K2);
    g.output("start_top_log_probs", {"batch", k1});
    g.output("start_top_index", {"batch", k1}, kInt64);
    g.output("end_top_log_probs", {"batch", k12});
    g.output("end_top_index", {"batch", k12}, kInt64);
    g.output("cls_logits", {"batch"});
  };
  if (heads == Heads::JointQuestionAnswering) {
    joint_qa_head(h, positions);
  } else if (heads == Heads::QuestionAnswering) {
    const std::string lg = linear(h, "qa_outputs");  // [B, S, 2]
    for (int k = 0; k < 2; ++k) {
      const std::string one = g.node("Squeeze", {g.node("Slice", {lg, g.const_i64({k}), g.const_i64({k + 1}), g.const_i64({2})}),
                                                 g.const_i64({2})});
      rename(one, k == 0 ? "start_logits" : "end_logits");
      g.output(k == 0 ? "start_logits" : "end_logits", bs);
    }
  } else if (heads == Heads::TokenClassification) {
    rename(linear(h, "classifier"), "logits");
    g.output("logits", {"batch", "sequence", std::to_string(c.num_labels())});
  } else if (heads == Heads::Discriminator) {  // ElectraForPreTraining: one replaced-token logit per token
    const std::string d = gelu(linear(h, "discriminator_predictions.dense"), c.activation());
    const std::string lg = linear(d, "discriminator_predictions.dense_prediction");  // [B, S, 1]
    rename(g.node("Squeeze", {lg, g.const_i64({2})}), "logits");
    g.output("logits", bs);
  } else if (c.electra()) {  // no pooler: ElectraModel, or ElectraClassificationHead on [CLS]
    if (heads == Heads::SequenceClassification) {
      const std::string cls = g.node("Gather", {h, g.const_i64_scalar(0)}, {Attr::i("axis", 1)});  // [B, C]
      const std::string d = gelu(linear(cls, "classifier.dense"), Activation::GeluErf);  // HF: gelu always
      rename(linear(d, "classifier.out_proj"), "logits");
      g.output("logits", {"batch", std::to_string(c.num_labels())});
    } else {
      rename(h, "last_hidden_state");
      g.output("last_hidden_state", {"batch", "sequence", std::to_string(C)});
    }
  } else {
    const std::string cls = g.node("Gather", {h, g.const_i64_scalar(0)}, {Attr::i("axis", 1)});  // [B, C]
    const std::string pooled = g.node("Tanh", {linear(cls, "bert.pooler.dense")});
    if (heads == Heads::SequenceClassification) {
      rename(linear(pooled, "classifier"), "logits");
      g.output("logits", {"batch", std::to_string(c.num_labels())});
    } else {
      rename(h, "last_hidden_state");
      rename(pooled, "pooler_output");
      g.output("last_hidden_state", {"batch", "sequence", std::to_string(C)});
      g.output("pooler_output", {"batch", std::to_string(C)});
    }
  }
  write_file_atomic(path, g.model("bertcc export of " + architecture_name(heads, c.electra())));
}

}  // namespace bertcc
