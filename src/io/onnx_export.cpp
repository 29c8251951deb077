// ONNX export of a BERT model with its head: the encoder here, the head's part by its spec
// (HeadSpec::onnx, in the head's file), both written into one OnnxGraph (bertcc/onnx_graph.h:
// the protobuf, the weights' precision). Opset 17, IR version 8: embeddings as Gather,
// LayerNormalization, attention as MatMul/Softmax with an additive mask from attention_mask
// ((1 - mask) * -10000, as bertcc's CPU engine), GELU composed from Erf (or Tanh for gelu_new),
// dynamic batch and sequence axes. With int8 (--precision int8), the linear layers and the
// attention's two products as MatMulInteger, quantized as bertcc computes them.
#include "bertcc/onnx_export.h"

#include <cmath>

#include "bertcc/error.h"
#include "bertcc/fileio.h"
#include "bertcc/head_spec.h"
#include "bertcc/onnx_graph.h"
#include "core/settings.h"

namespace bertcc {

void export_onnx(const Bert& model, const std::string& path, DType weights, bool int8) {
  BERTCC_CHECK(weights == DType::F32 || weights == DType::F16 || weights == DType::BF16,
               "export-onnx: weights must be fp32, fp16 or bf16");
  const BertConfig& c = model.config();
  const Heads heads = model.heads();
  const HeadSpec& spec = head_spec(heads);
  BERTCC_CHECK(spec.onnx, "export-onnx: ", architecture_name(heads, c.electra()),
               " has no ONNX export (encoders, classifiers, QA "
               "heads and token classifiers, and ELECTRA's discriminator do)");
  const int64_t C = c.hidden_size, NH = c.num_attention_heads, HD = c.head_size();
  using Attr = OnnxGraph::Attr;
  constexpr int kFloat = OnnxGraph::kFloat, kInt64 = OnnxGraph::kInt64;
  OnnxGraph g(c, model.table(), model.params().data(), weights);
  // the encoder's linear layers: int8 as --precision int8 computes them (the same layers: model/int8.cpp)
  auto linear = [&](const std::string& x, const std::string& prefix) {
    return int8 ? g.linear_int8(x, prefix) : g.linear(x, prefix);
  };
  g.input("input_ids", kInt64, {"batch", "sequence"});
  g.input("attention_mask", kInt64, {"batch", "sequence"});
  g.input("token_type_ids", kInt64, {"batch", "sequence"});
  // Embeddings: word + position (0 .. S-1) + token type, then LayerNorm.
  const std::string e = "bert.embeddings.";
  const std::string seq = g.node("Gather", {g.node("Shape", {"input_ids"}), g.const_i64({1})});  // [1]
  const std::string positions =
      g.node("Range", {g.const_i64_scalar(0), g.node("Squeeze", {seq, g.const_i64({0})}), g.const_i64_scalar(1)});
  // (int8: the word embeddings int8 per row, as --precision int8 reads them)
  const std::string words = int8 && !settings().int8_fp32_embeddings
                                ? g.gather_int8(e + "word_embeddings.weight", "input_ids")
                                : g.node("Gather", {g.param(e + "word_embeddings.weight"), "input_ids"});
  std::string h = g.node("Add", {words, g.node("Gather", {g.param(e + "position_embeddings.weight"), positions})});
  h = g.node("Add", {h, g.node("Gather", {g.param(e + "token_type_embeddings.weight"), "token_type_ids"})});
  h = g.layer_norm(h, e + "LayerNorm");
  if (model.table().find("bert.embeddings_project.weight")) h = linear(h, "bert.embeddings_project");  // ELECTRA
  // Additive mask [B, 1, 1, S].
  const std::string m = g.node("Cast", {"attention_mask"}, {Attr::i("to", kFloat)});
  const std::string mask = g.node(
      "Mul",
      {g.node("Sub", {g.const_f32(1.0f), g.node("Unsqueeze", {m, g.const_i64({1, 2})})}), g.const_f32(-10000.0f)});
  // int8: the keys the mask leaves (attention_mask > 0), for the attention's quantization of v
  const std::string visible =
      int8 ? g.node("Cast", {g.node("Greater", {m, g.const_f32(0.0f)})}, {Attr::i("to", kFloat)}) : "";
  const std::string split_heads = g.const_i64({0, 0, NH, HD}), merge_heads = g.const_i64({0, 0, C});
  const std::string scale = int8 ? "" : g.const_f32(static_cast<float>(1.0 / std::sqrt(static_cast<double>(HD))));
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "bert.encoder.layer." + std::to_string(l) + ".";
    auto heads_of = [&](const char* n, std::vector<int64_t> perm) {
      return g.node("Transpose", {g.node("Reshape", {linear(h, p + "attention.self." + n), split_heads})},
                    {Attr::ints("perm", perm)});
    };
    const std::string q = heads_of("query", {0, 2, 1, 3});                           // [B, NH, S, HD]
    const std::string k = heads_of("key", int8 ? std::vector<int64_t>{0, 2, 1, 3}    // int8: [B, NH, S, HD]
                                               : std::vector<int64_t>{0, 2, 3, 1});  // [B, NH, HD, S]
    const std::string v = heads_of("value", {0, 2, 1, 3});
    std::string heads;  // [B, NH, S, HD]
    if (int8) {
      heads = g.attention_int8(q, k, v, mask, visible, 1.0f / std::sqrt(static_cast<float>(HD)));  // as the kernel
    } else {
      const std::string scores = g.node("Add", {g.node("Mul", {g.node("MatMul", {q, k}), scale}), mask});
      heads = g.node("MatMul", {g.node("Softmax", {scores}, {Attr::i("axis", -1)}), v});
    }
    const std::string ctx =
        g.node("Reshape", {g.node("Transpose", {heads}, {Attr::ints("perm", {0, 2, 1, 3})}), merge_heads});
    h = g.layer_norm(g.node("Add", {linear(ctx, p + "attention.output.dense"), h}), p + "attention.output.LayerNorm");
    const std::string inter = g.gelu(linear(h, p + "intermediate.dense"), c.activation());
    h = g.layer_norm(g.node("Add", {linear(inter, p + "output.dense"), h}), p + "output.LayerNorm");
  }
  spec.onnx(g, h, positions);  // the head's nodes and the graph's outputs
  write_file_atomic(path, g.model("bertcc export of " + architecture_name(heads, c.electra())));
}

}  // namespace bertcc
