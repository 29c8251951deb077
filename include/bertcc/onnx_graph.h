// The ONNX graph (opset 17, IR version 8) an export is built in, written as it is built with a
// small protobuf encoder (the ONNX schema's field numbers; no protobuf library needed): nodes,
// initializers and outputs go into the graph in the order they are added, so an export's bytes
// follow the order of the calls. export_onnx (src/io/onnx_export.cpp) writes the encoder with it
// and each head its own part (HeadSpec::onnx, in the head's file), so it sits below both.
// Weights come from a parameter table and its flat fp32 buffer; Linear weights are stored
// transposed ([in, out]) for MatMul; fp16/bf16 weights are stored at 16 bits and Cast to fp32.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bertcc/config.h"
#include "bertcc/dtype.h"

namespace bertcc {

class ParamTable;

class OnnxGraph {
 public:
  static constexpr int kFloat = 1, kUint8 = 2, kInt8 = 3, kInt32 = 6, kBool = 9,
                       kInt64 = 7;  // element types (TensorProto.DataType)

  // A node attribute (an AttributeProto, serialized).
  struct Attr {
    std::string proto;
    static Attr i(const char* name, int64_t v);
    static Attr f(const char* name, float v);
    static Attr ints(const char* name, const std::vector<int64_t>& v);
  };

  // `weights`: F32, F16 or BF16, the precision initializers are stored at.
  OnnxGraph(const BertConfig& config, const ParamTable& table, const float* params, DType weights);
  ~OnnxGraph();
  OnnxGraph(const OnnxGraph&) = delete;
  OnnxGraph& operator=(const OnnxGraph&) = delete;

  const BertConfig& config() const { return config_; }

  // A node with one output, named op_N unless `out_name` is given; returns the output's name.
  std::string node(const char* op, const std::vector<std::string>& in, const std::vector<Attr>& attrs = {},
                   const std::string& out_name = "");
  // A node with several outputs (TopK: values, indices), named op_N_0, op_N_1, ... when outs[0] is "".
  std::vector<std::string> nodes(const char* op, const std::vector<std::string>& in, const std::vector<Attr>& attrs,
                                 std::vector<std::string> outs);
  // An initializer at the export precision (Cast to fp32 when that is 16-bit); returns the fp32 value.
  std::string weight(const std::string& name, const std::vector<int64_t>& dims, const float* data);
  std::string const_f32(float v);
  std::string const_i64(const std::vector<int64_t>& v);
  std::string const_i64_scalar(int64_t v);
  void input(const std::string& name, int elem, const std::vector<std::string>& dims);
  // A graph output; a dimension is a symbol ("batch", "sequence") or a number.
  void output(const std::string& name, const std::vector<std::string>& dims, int elem = kFloat);

  // The model's tensors, by Hugging Face name: its fp32 values and shape.
  const float* data(const std::string& name) const;
  const std::vector<int64_t>& shape(const std::string& name) const;
  // The tensor as an initializer.
  std::string param(const std::string& name);
  // x @ W^T + b for prefix.weight [out, in] and prefix.bias.
  std::string linear(const std::string& x, const std::string& prefix);
  // The same for x [B, S, in] in int8 as bertcc's --precision int8 computes it (kernels/gemm_int8.h):
  // the weight quantized per output channel (7-bit, an int8 initializer and its fp32 scales), x
  // per row of [B*S, in] (quantize_sym), then MatMulInteger (s8 x s8 -> int32), Cast, times the
  // product of the row's and the column's scales, plus the bias.
  std::string linear_int8(const std::string& x, const std::string& prefix);
  // An embedding table's rows `ids` as --precision int8 reads the word embeddings: the table int8
  // per row (an int8 initializer [V, E] and fp32 scales [V, 1]), dequantized and gathered,
  // Gather(Cast(q) * scale, ids): the file holds the int8 table.
  std::string gather_int8(const std::string& table, const std::string& ids);
  // The attention as --precision int8 computes it (kernels/gemm_int8.h): q, k, v [B, NH, S, HD],
  // the additive mask [B, 1, 1, S], visible [B, S] (1 for a key the mask leaves, 0 for one it
  // hides; all count where it hides them all); q per row 8-bit, k per row and v per column 7-bit
  // (hidden keys' v as zeros), MatMulInteger; the scores of hidden keys -inf; P's 8 bits a Gather
  // of kernels::attention_int8_exp_table at Round(128 (max - s)) (uint8), MatMulInteger with v,
  // scaled by 1 / their sum. Returns ctx [B, NH, S, HD].
  std::string attention_int8(const std::string& q, const std::string& k, const std::string& v, const std::string& mask,
                             const std::string& visible, float scale);
  // LayerNorm over the last axis with prefix.weight and prefix.bias.
  std::string layer_norm(const std::string& x, const std::string& prefix);
  std::string gelu(const std::string& x, Activation act);
  // x under a graph output's name (an Identity node).
  std::string rename(const std::string& x, const std::string& name);
  // h[:, 0], the [CLS] rows [B, C] of a sequence output h [B, S, C].
  std::string first_token(const std::string& h);
  // BERT's pooler on them: tanh(bert.pooler.dense(h[:, 0])).
  std::string pooled_output(const std::string& h);

  // The ModelProto with this graph, `doc` its doc_string (once: it closes the graph).
  std::string model(const std::string& doc);

 private:
  // Symmetric quantization of x over `axis` with bound qmax, as kernels::quantize_rows_int8 does it:
  // round-half-even(x · (qmax / max|x|)) clamped (a product by the inverse, not QuantizeLinear's
  // division, whose last bits differ); returns (the int8 tensor, the scales max|x| / qmax, keepdims).
  std::pair<std::string, std::string> quantize_sym(const std::string& x, int64_t axis, float qmax);
  // An initializer of `bytes` raw bytes of element type elem, stored as given
  std::string raw(const std::string& name, const std::vector<int64_t>& dims, int elem, const void* data, size_t bytes);
  struct Proto;
  const BertConfig& config_;
  const ParamTable& table_;
  const float* params_;
  DType weights_;
  std::unique_ptr<Proto> graph_;  // the GraphProto written so far
  int n_ = 0;                     // names of unnamed nodes and constants
  std::string exp_table_;         // the int8 attention's table, once written (attention_int8)
};

}  // namespace bertcc
