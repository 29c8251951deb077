// SQuAD reading and feature creation (Google's run_squad.py read_squad_examples and
// convert_examples_to_features).
#include "bertcc/squad.h"

#include <algorithm>
#include <cmath>
#include <iterator>

#include "bertcc/error.h"
#include "bertcc/fileio.h"
#include "bertcc/parallel.h"
#include "bertcc/pyrandom.h"
#include "bertcc/utf8.h"

namespace bertcc {
namespace {

bool squad_space(uint32_t c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == 0x202F; }

std::string join_words(const std::vector<std::string>& w, size_t b, size_t e) {
  std::string s;
  for (size_t i = b; i < e; ++i) {
    if (i > b) s += ' ';
    s += w[i];
  }
  return s;
}

}  // namespace

// Google's read_squad_examples split of the context into words, with the word of each code point.
static SquadExample split_context(std::string id, std::string question, std::string context,
                                  std::vector<int>* char_to_word) {
  SquadExample ex;
  ex.id = std::move(id);
  ex.question = std::move(question);
  ex.context = std::move(context);
  const auto* s = reinterpret_cast<const unsigned char*>(ex.context.data());
  bool prev_ws = true;
  for (size_t i = 0; i < ex.context.size();) {
    const size_t at = i;
    bool bad = false;
    const uint32_t c = decode_utf8(s, ex.context.size(), i, bad);
    if (squad_space(c)) {
      prev_ws = true;
    } else {
      if (prev_ws) {
        ex.doc_tokens.emplace_back();
        ex.word_byte_begin.push_back(at);
      }
      ex.doc_tokens.back().append(ex.context, at, i - at);
      prev_ws = false;
    }
    if (char_to_word) char_to_word->push_back(static_cast<int>(ex.doc_tokens.size()) - 1);
  }
  return ex;
}

SquadExample make_squad_example(std::string id, std::string question, std::string context) {
  return split_context(std::move(id), std::move(question), std::move(context), nullptr);
}

std::vector<SquadExample> read_squad(const std::string& path, bool training, bool* v2, int64_t* skipped) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_text_file(path));
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": invalid JSON: ", e.what());
  }
  BERTCC_CHECK(j.is_object() && j.contains("data") && j["data"].is_array(), path,
               ": not a SQuAD file (no \"data\" array)");
  std::vector<SquadExample> out;
  int64_t skip = 0;
  bool any_impossible = false;
  size_t n_article = 0, n_para = 0, n_question = 0;  // where a wrongly typed field is reported
  try {
    for (const auto& article : j["data"]) {
      ++n_article;
      n_para = n_question = 0;
      BERTCC_CHECK(article.contains("paragraphs"), path, ": an article has no \"paragraphs\"");
      for (const auto& para : article["paragraphs"]) {
        ++n_para;
        n_question = 0;
        BERTCC_CHECK(para.contains("context") && para["context"].is_string() && para.contains("qas"), path,
                     ": a paragraph lacks \"context\" or \"qas\"");
        const std::string context = para["context"].get<std::string>();
        std::vector<int> char_to_word;  // code point -> word index
        const SquadExample base = split_context("", "", context, &char_to_word);
        for (const auto& qa : para["qas"]) {
          ++n_question;
          BERTCC_CHECK(qa.contains("id") && qa.contains("question"), path, ": a question lacks \"id\" or \"question\"");
          SquadExample ex = base;
          ex.id = qa["id"].get<std::string>();
          ex.question = qa["question"].get<std::string>();
          ex.impossible = qa.value("is_impossible", false);
          any_impossible |= ex.impossible;
          if (training && !ex.impossible) {
            BERTCC_CHECK(qa.contains("answers") && qa["answers"].is_array() && !qa["answers"].empty(), path,
                         ": question ", ex.id, " has no answers");
            const auto& a = qa["answers"][0];
            ex.answer_text = a.at("text").get<std::string>();
            const int64_t start = a.at("answer_start").get<int64_t>();
            const int64_t len = static_cast<int64_t>(utf8_length(ex.answer_text));
            if (start < 0 || len == 0 || start + len - 1 >= static_cast<int64_t>(char_to_word.size())) {
              ++skip;
              continue;
            }
            ex.start_word = char_to_word[static_cast<size_t>(start)];
            ex.end_word = char_to_word[static_cast<size_t>(start + len - 1)];
            // Skip answers that the whitespace words cannot reproduce (Google's "Could not find answer").
            const std::string actual = join_words(ex.doc_tokens, static_cast<size_t>(std::max(ex.start_word, 0)),
                                                  static_cast<size_t>(ex.end_word) + 1);
            const std::string cleaned = py_join_split(ex.answer_text);
            if (ex.start_word < 0 || actual.find(cleaned) == std::string::npos) {
              ++skip;
              continue;
            }
          }
          out.push_back(std::move(ex));
        }
      }
    }
  } catch (const nlohmann::json::exception& e) {  // a field of the wrong type or shape
    fail(path, ": article ", n_article, ", paragraph ", n_para, ", question ", n_question, ": ", e.what());
  }
  if (v2) *v2 = any_impossible;
  if (skipped) *skipped = skip;
  return out;
}

SquadFeatures squad_features(const BertTokenizer& tok, const std::vector<SquadExample>& ex,
                             const SquadFeatureOptions& o, bool training) {
  const int32_t cls = tok.vocab().id("[CLS]"), sep = tok.vocab().id("[SEP]");
  BERTCC_CHECK(cls >= 0 && sep >= 0, tok.vocab().source(), ": vocabulary has no [CLS] or [SEP]");
  BERTCC_CHECK(o.doc_stride > 0, "--doc-stride must be positive");
  std::vector<SquadFeatures> per(ex.size());
  ParallelErrors errors;  // a question too long for --max-seq-length throws inside the loop
#pragma omp parallel for schedule(dynamic, 8)
  for (size_t ei = 0; ei < ex.size(); ++ei)
    errors.run(ei, [&, ei] {
      const SquadExample& e = ex[ei];
      std::vector<int32_t> query = tok.encode(e.question);
      if (query.size() > static_cast<size_t>(o.max_query_length)) query.resize(static_cast<size_t>(o.max_query_length));
      std::vector<int32_t> tok_to_orig, orig_to_tok, all;
      for (size_t w = 0; w < e.doc_tokens.size(); ++w) {
        orig_to_tok.push_back(static_cast<int32_t>(all.size()));
        const std::vector<int32_t> sub = tok.encode(e.doc_tokens[w]);
        for (int32_t id : sub) {
          tok_to_orig.push_back(static_cast<int32_t>(w));
          all.push_back(id);
        }
      }
      int64_t tok_start = -1, tok_end = -1;
      if (training && !e.impossible) {
        tok_start = orig_to_tok[static_cast<size_t>(e.start_word)];
        tok_end = static_cast<size_t>(e.end_word) + 1 < e.doc_tokens.size()
                      ? orig_to_tok[static_cast<size_t>(e.end_word) + 1] - 1
                      : static_cast<int64_t>(all.size()) - 1;
        // _improve_answer_span: the tightest sub-token span equal to the tokenized answer.
        const std::vector<int32_t> ans = tok.encode(e.answer_text);
        bool found = false;
        for (int64_t s = tok_start; s <= tok_end && !found; ++s)
          for (int64_t t = tok_end; t >= s && !found; --t)
            if (static_cast<size_t>(t - s + 1) == ans.size() && std::equal(ans.begin(), ans.end(), all.begin() + s)) {
              tok_start = s;
              tok_end = t;
              found = true;
            }
      }
      const int64_t max_doc = o.max_seq_length - static_cast<int64_t>(query.size()) - 3;
      BERTCC_CHECK(max_doc > 0, "--max-seq-length ", o.max_seq_length, " leaves no room for the context after a ",
                   query.size(), "-token question");
      std::vector<std::pair<int64_t, int64_t>> spans;  // (start, length)
      const int64_t n = static_cast<int64_t>(all.size());
      for (int64_t start = 0; start < n || (n == 0 && spans.empty());) {
        const int64_t len = std::min(n - start, max_doc);
        spans.push_back({start, len});
        if (start + len >= n) break;
        start += std::min(len, static_cast<int64_t>(o.doc_stride));
      }
      for (size_t si = 0; si < spans.size(); ++si) {
        SquadWindow f;
        f.example = ei;
        FtFeature x;
        x.input_ids.push_back(cls);
        x.input_ids.insert(x.input_ids.end(), query.begin(), query.end());
        x.input_ids.push_back(sep);
        x.segment_ids.assign(x.input_ids.size(), 0);
        f.doc_offset = static_cast<int32_t>(x.input_ids.size());
        f.token_to_orig.assign(x.input_ids.size(), -1);
        f.max_context.assign(x.input_ids.size(), 0);
        const auto [s0, len] = spans[si];
        for (int64_t i = 0; i < len; ++i) {
          const int64_t p = s0 + i;
          f.token_to_orig.push_back(tok_to_orig[static_cast<size_t>(p)]);
          // _check_is_max_context: the window where the token has the most context on both sides
          double best = -1;
          size_t best_span = 0;
          for (size_t k = 0; k < spans.size(); ++k) {
            const auto [ks, kl] = spans[k];
            if (p < ks || p > ks + kl - 1) continue;
            const double score =
                static_cast<double>(std::min(p - ks, ks + kl - 1 - p)) + 0.01 * static_cast<double>(kl);
            if (score > best) {
              best = score;
              best_span = k;
            }
          }
          f.max_context.push_back(best_span == si);
          x.input_ids.push_back(all[static_cast<size_t>(p)]);
          x.segment_ids.push_back(1);
        }
        x.input_ids.push_back(sep);
        x.segment_ids.push_back(1);
        f.token_to_orig.push_back(-1);
        f.max_context.push_back(0);
        if (training) {
          x.start = x.end = 0;
          if (!e.impossible && tok_start >= s0 && tok_end <= s0 + len - 1) {
            x.start = static_cast<int32_t>(tok_start - s0 + f.doc_offset);
            x.end = static_cast<int32_t>(tok_end - s0 + f.doc_offset);
          }
        }
        per[ei].inputs.push_back(std::move(x));
        per[ei].windows.push_back(std::move(f));
      }
    });
  errors.rethrow();
  SquadFeatures out;
  for (auto& v : per) {
    std::move(v.inputs.begin(), v.inputs.end(), std::back_inserter(out.inputs));
    std::move(v.windows.begin(), v.windows.end(), std::back_inserter(out.windows));
  }
  return out;
}

namespace {
nlohmann::ordered_json model_config_json(const std::string& path) {
  BERTCC_CHECK(file_exists(path), path, ": no such file (a fine-tuned model folder holds config.json)");
  try {
    auto j = nlohmann::ordered_json::parse(read_file(path));
    BERTCC_CHECK(j.is_object(), path, ": expected a JSON object");
    return j;
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": invalid JSON: ", e.what());
  }
}
}  // namespace

SquadNullAnswers read_squad_null_answers(const std::string& model_dir) {
  const std::string path = join_path(model_dir, "config.json");
  const auto j = model_config_json(path);
  SquadNullAnswers r;
  if (j.contains("version_2_with_negative") && !j["version_2_with_negative"].is_null()) {
    BERTCC_CHECK(j["version_2_with_negative"].is_boolean(), path,
                 ": field 'version_2_with_negative' must be true or false");
    r.version_2_with_negative = j["version_2_with_negative"].get<bool>();
  }
  if (j.contains("null_score_diff_threshold") && !j["null_score_diff_threshold"].is_null()) {
    const auto& t = j["null_score_diff_threshold"];
    BERTCC_CHECK(t.is_number() && std::isfinite(t.get<double>()), path,
                 ": field 'null_score_diff_threshold' must be a finite number");
    r.null_score_diff_threshold = t.get<double>();
  }
  return r;
}

void record_squad_null_answers(const std::string& model_dir, const SquadNullAnswers& r) {
  BERTCC_CHECK(std::isfinite(r.null_score_diff_threshold), "null_score_diff_threshold ", r.null_score_diff_threshold,
               " is not finite");
  const std::string path = join_path(model_dir, "config.json");
  auto j = model_config_json(path);
  j["version_2_with_negative"] = r.version_2_with_negative;
  j["null_score_diff_threshold"] = r.null_score_diff_threshold;
  write_file_atomic(path, j.dump(2) + "\n");
}

}  // namespace bertcc
