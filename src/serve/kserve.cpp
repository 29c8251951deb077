#include "serve/kserve.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string_view>

#include "bertcc/json_depth.h"
#include "serve/models.h"

namespace bertcc::serve {

namespace {

using json = nlohmann::json;

struct InTensor {
  std::vector<int64_t> shape;
  std::vector<int64_t> data;
};

void flatten(const json& v, std::vector<int64_t>& out, const std::string& name, int depth) {
  if (v.is_array()) {
    if (depth > 3) throw RequestError(400, "input '" + name + "': data nested too deeply");
    for (const auto& x : v) flatten(x, out, name, depth + 1);
    return;
  }
  if (v.is_number_integer()) {
    out.push_back(v.get<int64_t>());
    return;
  }
  if (v.is_number_float() && v.get<double>() == static_cast<double>(static_cast<int64_t>(v.get<double>()))) {
    out.push_back(static_cast<int64_t>(v.get<double>()));
    return;
  }
  throw RequestError(400, "input '" + name + "': data must be integers");
}

// Reads one input tensor (JSON data, or bytes of the binary extension starting at `bin`).
InTensor read_input(const json& t, const std::string& body, size_t& bin, size_t bin_end) {
  if (!t.is_object() || !t.contains("name") || !t["name"].is_string())
    throw RequestError(400, "every input needs a string \"name\"");
  const std::string name = t["name"].get<std::string>();
  if (!t.contains("datatype") || !t["datatype"].is_string())
    throw RequestError(400, "input '" + name + "': missing \"datatype\"");
  const std::string dt = t["datatype"].get<std::string>();
  if (dt != "INT32" && dt != "INT64")
    throw RequestError(400, "input '" + name + "': datatype " + dt + " not supported (INT32 or INT64)");
  if (!t.contains("shape") || !t["shape"].is_array() || t["shape"].size() != 2)
    throw RequestError(400, "input '" + name + "': \"shape\" must be [batch, sequence]");
  InTensor r;
  for (const auto& d : t["shape"]) {
    if (!d.is_number_integer() || d.get<int64_t>() < 1 || d.get<int64_t>() > (1 << 20))
      throw RequestError(400, "input '" + name + "': shape entries must be positive integers");
    r.shape.push_back(d.get<int64_t>());
  }
  const int64_t n = r.shape[0] * r.shape[1];
  const json* params = t.contains("parameters") && t["parameters"].is_object() ? &t["parameters"] : nullptr;
  if (params && params->contains("binary_data_size")) {
    const json& s = (*params)["binary_data_size"];
    const int64_t es = dt == "INT32" ? 4 : 8;
    if (!s.is_number_integer() || s.get<int64_t>() != n * es)
      throw RequestError(400, "input '" + name + "': binary_data_size must be " + std::to_string(n * es));
    if (bin + static_cast<size_t>(n * es) > bin_end)
      throw RequestError(400, "input '" + name + "': binary data runs past the end of the body");
    r.data.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      if (es == 4) {
        int32_t v;
        std::memcpy(&v, body.data() + bin + static_cast<size_t>(i) * 4, 4);
        r.data[static_cast<size_t>(i)] = v;
      } else {
        std::memcpy(&r.data[static_cast<size_t>(i)], body.data() + bin + static_cast<size_t>(i) * 8, 8);
      }
    }
    bin += static_cast<size_t>(n * es);
    return r;
  }
  if (!t.contains("data")) throw RequestError(400, "input '" + name + "': missing \"data\"");
  flatten(t["data"], r.data, name, 0);
  if (static_cast<int64_t>(r.data.size()) != n)
    throw RequestError(400, "input '" + name + "': " + std::to_string(r.data.size()) + " values for shape [" +
                                std::to_string(r.shape[0]) + "," + std::to_string(r.shape[1]) + "]");
  return r;
}

}  // namespace

KserveInput parse_kserve_request(const std::string& body, size_t json_len, const BertConfig& c, int64_t max_inputs) {
  KserveInput r;
  if (json_len > body.size()) throw RequestError(400, "the JSON header is longer than the body");
  if (const size_t deep = json_too_deep_at(std::string_view(body).substr(0, json_len)); deep != std::string::npos)
    throw RequestError(400, "request body: JSON nested deeper than " + std::to_string(kMaxJsonDepth) +
                                " levels (at byte " + std::to_string(deep + 1) + ")");
  try {
    r.header = json::parse(body.begin(), body.begin() + static_cast<ptrdiff_t>(json_len));
  } catch (const json::exception& e) {
    throw RequestError(400, std::string("request body is not valid JSON: ") + e.what());
  }
  const json& j = r.header;
  if (!j.is_object() || !j.contains("inputs") || !j["inputs"].is_array())
    throw RequestError(400, "request must be an object with an \"inputs\" array");
  size_t bin = json_len;
  std::map<std::string, InTensor> in;
  for (const auto& t : j["inputs"]) {
    InTensor x = read_input(t, body, bin, body.size());
    const std::string name = t["name"].get<std::string>();
    if (name != "input_ids" && name != "attention_mask" && name != "token_type_ids")
      throw RequestError(400, "unknown input '" + name + "' (input_ids, attention_mask, token_type_ids)");
    if (in.count(name)) throw RequestError(400, "input '" + name + "' given twice");
    in[name] = std::move(x);
  }
  if (!in.count("input_ids")) throw RequestError(400, "missing input 'input_ids'");
  const auto shape = in["input_ids"].shape;
  for (const auto& [name, t] : in)
    if (t.shape != shape) throw RequestError(400, "input '" + name + "' has another shape than input_ids");
  const int64_t B = shape[0], S = shape[1];
  if (B > max_inputs)
    throw RequestError(400,
                       "batch of " + std::to_string(B) + " rows exceeds --max-inputs " + std::to_string(max_inputs));
  if (S > c.max_position_embeddings)
    throw RequestError(400, "sequence length " + std::to_string(S) + " exceeds the model's max_position_embeddings " +
                                std::to_string(c.max_position_embeddings));
  r.B = B;
  r.S = S;
  r.features.resize(static_cast<size_t>(B));
  r.lengths.resize(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    int64_t L = S;
    if (in.count("attention_mask")) {  // right padding: ones then zeros
      const auto& mk = in["attention_mask"].data;
      L = 0;
      while (L < S && mk[static_cast<size_t>(b * S + L)] == 1) ++L;
      for (int64_t t = L; t < S; ++t)
        if (mk[static_cast<size_t>(b * S + t)] != 0)
          throw RequestError(
              400, "attention_mask row " + std::to_string(b) + " must be ones followed by zeros (right padding)");
      if (L == 0) throw RequestError(400, "attention_mask row " + std::to_string(b) + " masks every token");
    }
    r.lengths[static_cast<size_t>(b)] = L;
    FtFeature& ft = r.features[static_cast<size_t>(b)];
    for (int64_t t = 0; t < L; ++t) {
      const int64_t id = in["input_ids"].data[static_cast<size_t>(b * S + t)];
      const int64_t ty = in.count("token_type_ids") ? in["token_type_ids"].data[static_cast<size_t>(b * S + t)] : 0;
      if (id < 0 || id >= c.vocab_size)
        throw RequestError(400, "input_ids[" + std::to_string(b) + "][" + std::to_string(t) +
                                    "] = " + std::to_string(id) + " outside the vocabulary [0, " +
                                    std::to_string(c.vocab_size) + ")");
      if (ty < 0 || ty >= c.type_vocab_size)
        throw RequestError(400, "token_type_ids[" + std::to_string(b) + "][" + std::to_string(t) + "] = " +
                                    std::to_string(ty) + " outside [0, " + std::to_string(c.type_vocab_size) + ")");
      ft.input_ids.push_back(static_cast<int32_t>(id));
      ft.segment_ids.push_back(static_cast<int32_t>(ty));
    }
  }
  return r;
}

namespace {

using ojson = nlohmann::ordered_json;

// The JSON part's length: the whole body, or Inference-Header-Content-Length's bytes of it.
size_t json_length(const std::string& body, const std::string* header_length) {
  if (!header_length) return body.size();
  const std::string& h = *header_length;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(h.c_str(), &end, 10);
  if (h.empty() || *end || v > body.size())
    throw RequestError(400, "Inference-Header-Content-Length '" + h + "' is not a length within the body");
  return static_cast<size_t>(v);
}

// The outputs asked for (all when none are named), each with whether it goes binary, refused when
// the response would be over --max-response-bytes: its size is known before any work from the
// model's metadata (-1: the batch, then the sequence), 4 or 8 bytes an element in binary, at most
// 24 characters as a JSON number.
std::map<std::string, bool> wanted_outputs(const Model& m, const json& j, int64_t B, int64_t S, int64_t max_response) {
  std::map<std::string, std::pair<int64_t, bool>> size_of;  // name -> (elements, INT64)
  const ojson meta = model_metadata(m);
  for (const auto& out : meta["outputs"]) {
    int64_t n = 1, dyn = 0;
    for (const auto& d : out["shape"]) n *= d.get<int64_t>() >= 0 ? d.get<int64_t>() : (dyn++ == 0 ? B : S);
    size_of[out["name"].get<std::string>()] = {n, out["datatype"] == "INT64"};
  }
  bool all_binary = false;
  if (j.contains("parameters") && j["parameters"].is_object() && j["parameters"].contains("binary_data_output"))
    all_binary =
        j["parameters"]["binary_data_output"].is_boolean() && j["parameters"]["binary_data_output"].get<bool>();
  std::map<std::string, bool> want;  // name -> binary
  if (j.contains("outputs")) {
    if (!j["outputs"].is_array()) throw RequestError(400, "\"outputs\" must be an array");
    for (const auto& r : j["outputs"]) {
      if (!r.is_object() || !r.contains("name") || !r["name"].is_string())
        throw RequestError(400, "every requested output needs a string \"name\"");
      const std::string n = r["name"].get<std::string>();
      if (!size_of.count(n)) throw RequestError(400, "unknown output '" + n + "' for model '" + m.name + "'");
      bool binary = all_binary;
      if (r.contains("parameters") && r["parameters"].is_object() && r["parameters"].contains("binary_data"))
        binary = r["parameters"]["binary_data"].is_boolean() && r["parameters"]["binary_data"].get<bool>();
      want[n] = binary;
    }
  } else {
    for (const auto& [n, bytes] : size_of) want[n] = all_binary;
  }
  int64_t bound = 4096;
  for (const auto& [n, binary] : want) {
    const auto& [elements, i64] = size_of.at(n);
    bound += elements * (binary ? (i64 ? 8 : 4) : 24);
  }
  if (bound > max_response)
    throw RequestError(400, "the outputs asked for (" + std::to_string(B) + " rows of " + std::to_string(S) +
                                " tokens) would take up to " + std::to_string(bound) +
                                " bytes, over --max-response-bytes " + std::to_string(max_response) +
                                ": send fewer rows, name fewer \"outputs\", or ask for binary_data");
  return want;
}

// The response: the JSON header written once into the body (each output's data serialized in
// place, as ojson's dump writes it), then the binary outputs appended to it.
KserveAnswer write_outputs(const Model& m, const json& j, const std::vector<OutTensor>& outs,
                           const std::map<std::string, bool>& want) {
  ojson r;
  r["model_name"] = m.name;
  r["model_version"] = "1";
  if (j.contains("id")) r["id"] = j["id"];
  r["outputs"] = ojson::array();
  KserveAnswer a;
  std::string& body = a.body;
  body = r.dump();
  body.resize(body.size() - 2);  // "]}"
  nlohmann::detail::serializer<ojson> ser(nlohmann::detail::output_adapter<char>(body), ' ');
  std::vector<const OutTensor*> binary;
  bool first = true;
  for (const auto& t : outs) {
    auto it = want.find(t.name);
    if (it == want.end()) continue;
    const bool i64 = !t.idata.empty();
    ojson o_{{"name", t.name}, {"datatype", i64 ? "INT64" : "FP32"}, {"shape", t.shape}};
    if (!first) body += ',';
    first = false;
    if (it->second) {
      o_["parameters"] = {{"binary_data_size", i64 ? t.idata.size() * 8 : t.data.size() * 4}};
      body += o_.dump();
      binary.push_back(&t);
      continue;
    }
    std::string head = o_.dump();
    head.pop_back();  // "}"
    body += head;
    body += ",\"data\":[";
    const size_t n = i64 ? t.idata.size() : t.data.size();
    for (size_t i = 0; i < n; ++i) {
      if (i) body += ',';
      if (i64)
        ser.dump(ojson(t.idata[i]), false, false, 0);
      else
        ser.dump(ojson(static_cast<double>(t.data[i])), false, false, 0);
    }
    body += "]}";
  }
  body += "]}";
  if (binary.empty()) {
    a.content_type = "application/json";
    return a;
  }
  a.header_length = std::to_string(body.size());
  a.content_type = "application/octet-stream";
  for (const OutTensor* t : binary) {
    if (!t->idata.empty())
      body.append(reinterpret_cast<const char*>(t->idata.data()), t->idata.size() * 8);
    else
      body.append(reinterpret_cast<const char*>(t->data.data()), t->data.size() * 4);
  }
  return a;
}

}  // namespace

KserveAnswer kserve_infer(Model& m, const ServeOptions& o, const std::string& body, const std::string* header_length) {
  const BertConfig& c = m.bert->config();
  const KserveInput kin = parse_kserve_request(body, json_length(body, header_length), c, o.max_inputs);
  const json& j = kin.header;
  const int64_t B = kin.B, S = kin.S;
  const std::vector<int64_t>& len = kin.lengths;
  const int64_t K1 = c.start_beam(), K2 = c.end_beam();
  if (m.head().beam_search)
    for (int64_t b = 0; b < B; ++b)
      if (len[static_cast<size_t>(b)] < std::max(K1, K2))
        throw RequestError(400, "row " + std::to_string(b) + ": " + std::to_string(len[static_cast<size_t>(b)]) +
                                    " tokens, fewer than the joint head's beam (start_n_top " + std::to_string(K1) +
                                    ", end_n_top " + std::to_string(K2) + ")");
  const std::map<std::string, bool> want = wanted_outputs(m, j, B, S, o.max_response_bytes);
  const auto logits = m.batcher(m.has_head() ? m.tasks[0] : "hidden").run(kin.features);
  // Outputs as an ONNX BERT under Triton names them; padded positions hold 0.
  std::vector<OutTensor> outs;
  if (!m.has_head()) {  // BertModel (a pre-training checkpoint's encoder)
    const int64_t C = c.hidden_size;
    OutTensor hs{"last_hidden_state", {B, S, C}, std::vector<float>(static_cast<size_t>(B * S * C), 0.0f)};
    OutTensor po{"pooler_output", {B, C}, {}};
    for (int64_t b = 0; b < B; ++b) {
      const std::vector<float>& v = logits[static_cast<size_t>(b)];
      const int64_t n = len[static_cast<size_t>(b)] * C;
      std::copy(v.begin(), v.begin() + n, hs.data.begin() + b * S * C);
      if (m.has_pooler()) po.data.insert(po.data.end(), v.begin() + n, v.begin() + n + C);
    }
    outs.push_back(std::move(hs));
    if (m.has_pooler()) outs.push_back(std::move(po));
  } else {
    outs = head_outputs(m.head().outputs(c), logits, len, B, S);
  }
  return write_outputs(m, j, outs, want);
}

}  // namespace bertcc::serve
