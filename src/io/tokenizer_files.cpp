// Hugging Face tokenizer files for a model directory, so AutoTokenizer.from_pretrained(DIR) (slow
// BertTokenizer or fast BertTokenizerFast) reproduces bertcc's tokenization:
//   tokenizer_config.json   tokenizer_class, do_lower_case, specials, model_max_length
//   special_tokens_map.json the specials present in vocab.txt
//   tokenizer.json          the fast tokenizer: BertNormalizer + BertPreTokenizer + WordPiece,
//                           specials as added tokens (matched before normalisation, never split),
//                           [CLS] A [SEP] (B [SEP]) post-processing, WordPiece decoder.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <unordered_set>
#include <utility>
#include <vector>

#include "bertcc/error.h"
#include "bertcc/fileio.h"
#include "bertcc/model_dir.h"
#include "bertcc/tokenizer.h"

namespace bertcc {

namespace {
struct Special {
  const char* key;
  const char* token;
};
constexpr Special kSpecials[] = {{"unk_token", "[UNK]"},
                                 {"sep_token", "[SEP]"},
                                 {"pad_token", "[PAD]"},
                                 {"cls_token", "[CLS]"},
                                 {"mask_token", "[MASK]"}};
}  // namespace

void write_tokenizer_files(const std::string& dir, const Vocab& vocab, bool lower_case, int model_max_length) {
  using json = nlohmann::ordered_json;
  json specials_map = json::object(), added = json::array(), decoder_map = json::object();
  std::vector<std::pair<int32_t, std::string>> present;
  for (const auto& s : kSpecials)
    if (vocab.id(s.token) >= 0) {
      specials_map[s.key] = s.token;
      present.emplace_back(vocab.id(s.token), s.token);
    }
  std::sort(present.begin(), present.end());
  for (const auto& [id, tok] : present) {
    json t{{"content", tok},  {"lstrip", false},      {"normalized", false},
           {"rstrip", false}, {"single_word", false}, {"special", true}};
    decoder_map[std::to_string(id)] = t;
    json a{{"id", id}};
    for (auto& [k, v] : t.items()) a[k] = v;
    added.push_back(a);
  }

  json cfg;
  cfg["added_tokens_decoder"] = decoder_map;
  cfg["clean_up_tokenization_spaces"] = true;
  for (const auto& s : kSpecials)
    if (specials_map.contains(s.key)) cfg[s.key] = s.token;
  cfg["do_basic_tokenize"] = true;
  cfg["do_lower_case"] = lower_case;
  cfg["model_max_length"] = model_max_length;
  cfg["never_split"] = nullptr;
  cfg["strip_accents"] = nullptr;  // follows do_lower_case, as BERT's
  cfg["tokenize_chinese_chars"] = true;
  cfg["tokenizer_class"] = "BertTokenizer";

  // first entry wins, as Vocab::id. ordered_json's object is a vector searched linearly on every
  // insert (quadratic: seconds for 30,522 tokens at every model save), so duplicates are found in a
  // hash set and the entries appended to the vector beneath it, in id order.
  json wp_vocab = json::object();
  {
    auto& entries = static_cast<std::vector<std::pair<const std::string, json>>&>(wp_vocab.get_ref<json::object_t&>());
    std::unordered_set<std::string> seen;
    entries.reserve(static_cast<size_t>(vocab.size()));
    for (int32_t i = 0; i < vocab.size(); ++i)
      if (seen.insert(vocab.token(i)).second) entries.emplace_back(vocab.token(i), i);
  }
  json tj;
  tj["version"] = "1.0";
  tj["truncation"] = nullptr;
  tj["padding"] = nullptr;
  tj["added_tokens"] = added;
  tj["normalizer"] = {{"type", "BertNormalizer"},
                      {"clean_text", true},
                      {"handle_chinese_chars", true},
                      {"strip_accents", nullptr},
                      {"lowercase", lower_case}};
  tj["pre_tokenizer"] = {{"type", "BertPreTokenizer"}};
  const int32_t cls = vocab.id("[CLS]"), sep = vocab.id("[SEP]");
  if (cls >= 0 && sep >= 0) {
    auto special = [](const char* t, int type) { return json{{"SpecialToken", {{"id", t}, {"type_id", type}}}}; };
    auto seq = [](const char* s, int type) { return json{{"Sequence", {{"id", s}, {"type_id", type}}}}; };
    tj["post_processor"] = {
        {"type", "TemplateProcessing"},
        {"single", {special("[CLS]", 0), seq("A", 0), special("[SEP]", 0)}},
        {"pair", {special("[CLS]", 0), seq("A", 0), special("[SEP]", 0), seq("B", 1), special("[SEP]", 1)}},
        {"special_tokens",
         {{"[CLS]", {{"id", "[CLS]"}, {"ids", {cls}}, {"tokens", {"[CLS]"}}}},
          {"[SEP]", {{"id", "[SEP]"}, {"ids", {sep}}, {"tokens", {"[SEP]"}}}}}}};
  } else {
    tj["post_processor"] = nullptr;
  }
  tj["decoder"] = {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}};
  tj["model"] = {{"type", "WordPiece"},
                 {"unk_token", "[UNK]"},
                 {"continuing_subword_prefix", "##"},
                 {"max_input_chars_per_word", 100},
                 {"vocab", wp_vocab}};

  write_file_atomic(join_path(dir, "tokenizer_config.json"), cfg.dump(2) + "\n");
  write_file_atomic(join_path(dir, "special_tokens_map.json"), specials_map.dump(2) + "\n");
  write_file_atomic(join_path(dir, "tokenizer.json"), tj.dump(2) + "\n");
}

bool model_dir_lower_case(const std::string& dir, const Vocab& vocab) {
  const std::string path = join_path(dir, "tokenizer_config.json");
  if (!dir.empty() && file_exists(path)) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(read_text_file(path, kMaxConfigBytes, "tokenizer config"));
    } catch (const nlohmann::json::exception& e) {
      fail(path, ": not valid JSON: ", e.what());
    }
    BERTCC_CHECK(j.is_object(), path, ": expected a JSON object");
    if (j.contains("do_lower_case")) {
      BERTCC_CHECK(j["do_lower_case"].is_boolean(), path, ": field 'do_lower_case' must be true or false");
      return j["do_lower_case"].get<bool>();
    }
  }
  return vocab.looks_uncased();
}

}  // namespace bertcc
