// ONNX export (opset 17) of a BERT model and its head, with Hugging Face's input and output names:
// input_ids, attention_mask, token_type_ids (INT64, dynamic batch and sequence axes) ->
//   logits (sequence or token classification), start_logits + end_logits (question answering), or
//   last_hidden_state + pooler_output (BertModel, and the encoder of BertForPreTraining), or the
//   joint SQuAD head's beam search (start_top_log_probs, start_top_index, end_top_log_probs,
//   end_top_index, cls_logits: XLNet's and NVIDIA's ELECTRA's names, as bertcc serve gives them).
#pragma once
#include <string>

#include "bertcc/bert.h"
#include "bertcc/dtype.h"

namespace bertcc {

// `weights`: F32, F16 or BF16 (16-bit weights are Cast to fp32 inside the graph); int8: the encoder's
// linear layers as --precision int8 computes them (OnnxGraph::linear_int8), with the activation bits
// of int8_export_activation_bits (runtime.h: 8 unless 7 is asked for). Written atomically.
void export_onnx(const Bert& model, const std::string& path, DType weights = DType::F32, bool int8 = false);

}  // namespace bertcc
