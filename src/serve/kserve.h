// The KServe v2 / Triton inference request of a BERT model: its JSON header (inputs with name,
// datatype, shape and data, or Triton's binary tensor extension) read and validated into unpadded
// sequences, and answered (kserve_infer). No HTTP here: the server and the fuzz target share it.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "bertcc/config.h"
#include "bertcc/features.h"

namespace bertcc::serve {

// A request the client got wrong (or one refused for capacity): an HTTP status and a message.
struct RequestError : std::runtime_error {
  int status;
  RequestError(int s, const std::string& m) : std::runtime_error(m), status(s) {}
};

struct KserveInput {
  nlohmann::json header;            // the JSON part (outputs, parameters, id are read by the caller)
  int64_t B = 0, S = 0;             // the request's shape
  std::vector<FtFeature> features;  // one unpadded sequence per row
  std::vector<int64_t> lengths;     // its length (ones of attention_mask)
};

// `body`: the request body; its first `json_len` bytes are JSON (Inference-Header-Content-Length),
// the rest the binary tensors in input order. Inputs: input_ids (required), attention_mask (right
// padding: ones then zeros), token_type_ids; INT32 or INT64; shape [batch, sequence] with batch <=
// max_inputs and sequence <= max_position_embeddings; ids inside the vocabulary and the token
// types. Every violation throws RequestError(400, message naming the input and position).
KserveInput parse_kserve_request(const std::string& body, size_t json_len, const BertConfig& c, int64_t max_inputs);

struct Model;
struct ServeOptions;

struct KserveAnswer {
  std::string body;
  std::string content_type;
  std::string header_length;  // Inference-Header-Content-Length when binary outputs follow, else ""
};

// POST /v2/models/NAME/infer on `m`: `body` with its Inference-Header-Content-Length value (null:
// none). The outputs are those of an ONNX BERT under Triton (the head's, or last_hidden_state and
// pooler_output), refused before the forward pass when they would be over --max-response-bytes.
KserveAnswer kserve_infer(Model& m, const ServeOptions& o, const std::string& body, const std::string* header_length);

}  // namespace bertcc::serve
