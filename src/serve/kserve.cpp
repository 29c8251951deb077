#include "serve/kserve.h"

#include <cstring>
#include <map>
#include <string_view>

#include "bertcc/json_depth.h"

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
    throw RequestError(400, "batch of " + std::to_string(B) + " rows exceeds --max-inputs " + std::to_string(max_inputs));
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
          throw RequestError(400, "attention_mask row " + std::to_string(b) +
                                      " must be ones followed by zeros (right padding)");
      if (L == 0) throw RequestError(400, "attention_mask row " + std::to_string(b) + " masks every token");
    }
    r.lengths[static_cast<size_t>(b)] = L;
    FtFeature& ft = r.features[static_cast<size_t>(b)];
    for (int64_t t = 0; t < L; ++t) {
      const int64_t id = in["input_ids"].data[static_cast<size_t>(b * S + t)];
      const int64_t ty = in.count("token_type_ids") ? in["token_type_ids"].data[static_cast<size_t>(b * S + t)] : 0;
      if (id < 0 || id >= c.vocab_size)
        throw RequestError(400, "input_ids[" + std::to_string(b) + "][" + std::to_string(t) + "] = " +
                                    std::to_string(id) + " outside the vocabulary [0, " + std::to_string(c.vocab_size) + ")");
      if (ty < 0 || ty >= c.type_vocab_size)
        throw RequestError(400, "token_type_ids[" + std::to_string(b) + "][" + std::to_string(t) + "] = " +
                                    std::to_string(ty) + " outside [0, " + std::to_string(c.type_vocab_size) + ")");
      ft.input_ids.push_back(static_cast<int32_t>(id));
      ft.segment_ids.push_back(static_cast<int32_t>(ty));
    }
  }
  return r;
}

}  // namespace bertcc::serve
