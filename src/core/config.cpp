#include "bertcc/config.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "bertcc/error.h"
#include "bertcc/fileio.h"

namespace bertcc {

Activation BertConfig::activation() const {
  if (hidden_act == "gelu") return Activation::GeluErf;
  if (hidden_act == "gelu_new" || hidden_act == "gelu_pytorch_tanh" || hidden_act == "gelu_fast")
    return Activation::GeluTanh;
  fail("config: hidden_act '", hidden_act, "' is not supported (gelu, gelu_new, gelu_pytorch_tanh)");
}

// Sizes no real model reaches (the largest BERTs have 48 layers, 4096 hidden units, vocabularies
// of 250,000), checked before anything is sized by them; the weights' memory is checked next
// (estimated_parameters), before the parameter table is built.
void BertConfig::validate(const std::string& where) const {
  auto pos = [&](const char* field, long v, long hi) {
    BERTCC_CHECK(v > 0, where, ": field '", field, "' must be positive, got ", v);
    BERTCC_CHECK(v <= hi, where, ": field '", field, "' = ", v, " is outside the range 1 to ", hi);
  };
  pos("vocab_size", vocab_size, 1L << 24);
  pos("hidden_size", hidden_size, 65536);
  pos("num_hidden_layers", num_hidden_layers, 1024);
  pos("num_attention_heads", num_attention_heads, 4096);
  pos("intermediate_size", intermediate_size, 262144);
  pos("max_position_embeddings", max_position_embeddings, 1L << 20);
  pos("type_vocab_size", type_vocab_size, 1024);
  BERTCC_CHECK(embedding_size >= 0 && embedding_size <= 65536, where, ": field 'embedding_size' = ", embedding_size,
               " is outside the range 0 (= hidden_size) to 65536");
  BERTCC_CHECK(model_type == "bert" || model_type == "electra", where, ": field 'model_type' '", model_type,
               "' is not supported (bert, electra)");
  BERTCC_CHECK(hidden_size % num_attention_heads == 0, where, ": field 'hidden_size' (", hidden_size,
               ") is not a multiple of 'num_attention_heads' (", num_attention_heads, ")");
  BERTCC_CHECK(hidden_dropout_prob >= 0 && hidden_dropout_prob < 1, where,
               ": field 'hidden_dropout_prob' must be in [0, 1)");
  BERTCC_CHECK(attention_probs_dropout_prob >= 0 && attention_probs_dropout_prob < 1, where,
               ": field 'attention_probs_dropout_prob' must be in [0, 1)");
  BERTCC_CHECK(classifier_dropout < 1, where, ": field 'classifier_dropout' must be below 1");
  BERTCC_CHECK(start_n_top >= 0 && start_n_top <= 64 && end_n_top >= 0 && end_n_top <= 64, where,
               ": fields 'start_n_top' and 'end_n_top' must be in [0, 64]");
  // (a float's inf, from 1e300 in the JSON, would pass "positive")
  BERTCC_CHECK(std::isfinite(layer_norm_eps) && layer_norm_eps > 0 && layer_norm_eps <= 1, where,
               ": field 'layer_norm_eps' must be in (0, 1], got ", layer_norm_eps);
  BERTCC_CHECK(std::isfinite(initializer_range) && initializer_range >= 0 && initializer_range <= 1, where,
               ": field 'initializer_range' must be in [0, 1], got ", initializer_range);
  try {
    (void)activation();
  } catch (const Error& e) {
    fail(where, ": ", e.what());
  }
}

double estimated_parameters(const BertConfig& c) {
  const double V = c.vocab_size, C = c.hidden_size, E = c.embedding_dim(), I = c.intermediate_size,
               L = c.num_hidden_layers, P = c.max_position_embeddings, T = c.type_vocab_size;
  const double embeddings = (V + P + T) * E + 2 * E + (E != C ? E * C + C : 0);
  const double layer = 4 * (C * C + C) + 2 * C * I + I + C + 4 * C;
  const double heads = C * C + C + C * E + E + V + 2 * E + C * 16;  // pooler, MLM transform and bias, a classifier
  return embeddings + L * layer + heads;
}

BertConfig load_config(const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_text_file(path, kMaxConfigBytes, "config file"));
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": invalid JSON: ", e.what());
  }
  BERTCC_CHECK(j.is_object(), path, ": expected a JSON object");
  BertConfig c;
  auto get_int = [&](const char* k, int& dst, bool required) {
    if (!j.contains(k)) {
      BERTCC_CHECK(!required, path, ": missing field '", k, "'");
      return;
    }
    BERTCC_CHECK(j[k].is_number_integer(), path, ": field '", k, "' must be an integer");
    // Read wide, then range-checked: a 64-bit value must not wrap into a plausible 32-bit one.
    const bool in_range = j[k].is_number_unsigned()
                              ? j[k].get<uint64_t>() <= (uint64_t{1} << 30)
                              : j[k].get<int64_t>() >= -(int64_t{1} << 30) && j[k].get<int64_t>() <= (int64_t{1} << 30);
    BERTCC_CHECK(in_range, path, ": field '", k, "' = ", j[k].dump(), " is out of range (at most 2^30)");
    dst = static_cast<int>(j[k].get<int64_t>());
  };
  auto get_float = [&](const char* k, float& dst) {
    if (!j.contains(k) || j[k].is_null()) return;
    BERTCC_CHECK(j[k].is_number(), path, ": field '", k, "' must be a number");
    dst = j[k].get<float>();
  };
  get_int("vocab_size", c.vocab_size, true);
  get_int("hidden_size", c.hidden_size, true);
  get_int("num_hidden_layers", c.num_hidden_layers, true);
  get_int("num_attention_heads", c.num_attention_heads, true);
  get_int("intermediate_size", c.intermediate_size, true);
  get_int("max_position_embeddings", c.max_position_embeddings, false);
  get_int("type_vocab_size", c.type_vocab_size, false);
  get_int("embedding_size", c.embedding_size, false);
  get_int("start_n_top", c.start_n_top, false);
  get_int("end_n_top", c.end_n_top, false);
  if (j.contains("model_type")) {
    BERTCC_CHECK(j["model_type"].is_string(), path, ": field 'model_type' must be a string");
    c.model_type = j["model_type"].get<std::string>();
  }
  get_float("hidden_dropout_prob", c.hidden_dropout_prob);
  get_float("attention_probs_dropout_prob", c.attention_probs_dropout_prob);
  get_float("initializer_range", c.initializer_range);
  get_float("layer_norm_eps", c.layer_norm_eps);
  if (j.contains("hidden_act")) {
    BERTCC_CHECK(j["hidden_act"].is_string(), path, ": field 'hidden_act' must be a string");
    c.hidden_act = j["hidden_act"].get<std::string>();
  }
  if (j.contains("id2label") && !j["id2label"].is_null()) {
    BERTCC_CHECK(j["id2label"].is_object(), path, ": field 'id2label' must be an object {\"0\": name, ...}");
    const size_t n = j["id2label"].size();
    c.id2label.assign(n, "");
    for (auto it = j["id2label"].begin(); it != j["id2label"].end(); ++it) {
      size_t k = 0;
      try {
        size_t used = 0;
        k = std::stoul(it.key(), &used);
        BERTCC_CHECK(used == it.key().size(), "");
      } catch (...) {
        fail(path, ": field 'id2label' has a non-integer key '", it.key(), "'");
      }
      BERTCC_CHECK(k < n && it.value().is_string(), path, ": field 'id2label' must map 0..", n - 1,
                   " to strings (key '", it.key(), "')");
      c.id2label[k] = it.value().get<std::string>();
    }
  }
  if (j.contains("num_labels") && j["num_labels"].is_number_integer() && c.id2label.empty()) {
    const int64_t n = j["num_labels"].get<int64_t>();
    BERTCC_CHECK(n > 0 && n <= 100000, path, ": field 'num_labels' must be in [1, 100000], got ", n);
    for (int i = 0; i < n; ++i) c.id2label.push_back("LABEL_" + std::to_string(i));
  }
  get_float("classifier_dropout", c.classifier_dropout);
  if (j.contains("finetuning_task") && j["finetuning_task"].is_string())
    c.finetuning_task = j["finetuning_task"].get<std::string>();
  if (j.contains("position_embedding_type") && j["position_embedding_type"].is_string()) {
    BERTCC_CHECK(j["position_embedding_type"] == "absolute", path,
                 ": field 'position_embedding_type' must be 'absolute' (relative positions are not supported)");
  }
  c.validate(path);
  return c;
}

// A float as the double its shortest decimal spells (0.1f -> 0.1, not 0.10000000149011612), so
// config.json reads as people and Hugging Face write it; parsing it back gives the same float.
static double shortest_decimal(float f) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf) - 1, f);
  *r.ptr = 0;
  return std::strtod(buf, nullptr);
}

void save_config(const BertConfig& c, const std::string& path, const std::string& architecture) {
  nlohmann::ordered_json j;
  j["architectures"] = {architecture};
  j["model_type"] = c.model_type;
  j["vocab_size"] = c.vocab_size;
  if (c.electra()) j["embedding_size"] = c.embedding_dim();
  j["hidden_size"] = c.hidden_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["intermediate_size"] = c.intermediate_size;
  j["hidden_act"] = c.hidden_act;
  j["hidden_dropout_prob"] = shortest_decimal(c.hidden_dropout_prob);
  j["attention_probs_dropout_prob"] = shortest_decimal(c.attention_probs_dropout_prob);
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["type_vocab_size"] = c.type_vocab_size;
  j["initializer_range"] = shortest_decimal(c.initializer_range);
  j["layer_norm_eps"] = shortest_decimal(c.layer_norm_eps);
  j["pad_token_id"] = 0;
  j["position_embedding_type"] = "absolute";
  j["torch_dtype"] = "float32";
  if (!c.id2label.empty()) {
    nlohmann::ordered_json id2, l2id;
    for (size_t i = 0; i < c.id2label.size(); ++i) {
      id2[std::to_string(i)] = c.id2label[i];
      l2id[c.id2label[i]] = i;
    }
    j["id2label"] = id2;
    j["label2id"] = l2id;
    j["num_labels"] = c.id2label.size();
    if (c.id2label.size() == 1) j["problem_type"] = "regression";
  }
  if (c.classifier_dropout >= 0) j["classifier_dropout"] = shortest_decimal(c.classifier_dropout);
  if (!c.finetuning_task.empty()) j["finetuning_task"] = c.finetuning_task;
  if (c.start_n_top > 0) j["start_n_top"] = c.start_n_top;
  if (c.end_n_top > 0) j["end_n_top"] = c.end_n_top;
  write_file_atomic(path, j.dump(2) + "\n");
}

std::string config_preset_names() {
  return "bert-tiny, bert-mini, bert-small, bert-medium, bert-base, bert-large, electra-small, electra-base, "
         "electra-large";
}

BertConfig config_from_name_or_path(const std::string& s) {
  struct Preset {
    const char* name;
    int L, H;
  };
  static const Preset presets[] = {{"bert-tiny", 2, 128},   {"bert-mini", 4, 256},  {"bert-small", 4, 512},
                                   {"bert-medium", 8, 512}, {"bert-base", 12, 768}, {"bert-large", 24, 1024}};
  // Google's ELECTRA discriminators: {layers, embedding, hidden, heads, intermediate}.
  struct Electra {
    const char* name;
    int L, E, H, NH, I;
  };
  static const Electra electras[] = {{"electra-small", 12, 128, 256, 4, 1024},
                                     {"electra-base", 12, 768, 768, 12, 3072},
                                     {"electra-large", 24, 1024, 1024, 16, 4096}};
  for (const auto& p : electras) {
    if (s == p.name) {
      BertConfig c;
      c.model_type = "electra";
      c.num_hidden_layers = p.L;
      c.embedding_size = p.E;
      c.hidden_size = p.H;
      c.num_attention_heads = p.NH;
      c.intermediate_size = p.I;
      return c;
    }
  }
  for (const auto& p : presets) {
    if (s == p.name) {
      BertConfig c;
      c.num_hidden_layers = p.L;
      c.hidden_size = p.H;
      c.num_attention_heads = p.H / 64;
      c.intermediate_size = 4 * p.H;
      return c;
    }
  }
  if (file_exists(s)) {
    std::string path = s;
    if (file_exists(join_path(s, "config.json")))
      path = join_path(s, "config.json");
    else if (file_exists(join_path(s, "bert_config.json")))
      path = join_path(s, "bert_config.json");
    return load_config(path);
  }
  fail("config '", s, "' is neither a preset (", config_preset_names(), ") nor an existing file or model directory");
}

}  // namespace bertcc
