#include "bertcc/tasks.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <numeric>

#include "bertcc/error.h"
#include "bertcc/inference.h"
#include "bertcc/ner.h"
#include "bertcc/squad.h"
#include "bertcc/token_classification.h"
#include "bertcc/utf8.h"

namespace bertcc {

namespace {

std::string field(const nlohmann::json& j, const char* k, size_t n, bool required = true) {
  BERTCC_CHECK(j.is_object(), "input ", n, ": expected a JSON object");
  if (!j.contains(k) || j[k].is_null()) {
    BERTCC_CHECK(!required, "input ", n, ": missing field \"", k, "\"");
    return "";
  }
  BERTCC_CHECK(j[k].is_string(), "input ", n, ": field \"", k, "\" must be a string");
  return j[k].get<std::string>();
}

int seq_len(const TaskOptions& o, int fallback) {
  return o.max_seq_length > 0 ? o.max_seq_length : std::min(fallback, o.max_position_embeddings);
}

// Words for tagging: runs of letters/digits, and each ASCII punctuation mark alone (as CoNLL
// tokenizes), with byte offsets.
void split_words(const std::string& s, std::vector<std::string>& words, std::vector<size_t>& begin) {
  auto space = [](unsigned char d) { return d == ' ' || d == '\t' || d == '\n' || d == '\r'; };
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (space(c)) {
      ++i;
      continue;
    }
    const size_t b = i;
    if (c < 0x80 && std::ispunct(c)) {
      ++i;
    } else {
      while (i < s.size()) {
        const unsigned char d = static_cast<unsigned char>(s[i]);
        if (space(d) || (d < 0x80 && std::ispunct(d))) break;
        ++i;
      }
    }
    words.push_back(s.substr(b, i - b));
    begin.push_back(b);
  }
}

// Refuses an answer estimated over o.max_response_bytes before its forward pass.
void check_response_size(const TaskOptions& o, double bytes, const std::string& what) {
  if (o.max_response_bytes > 0 && bytes > static_cast<double>(o.max_response_bytes))
    throw ResponseTooLarge("the answer " + what + " would take up to " + std::to_string(static_cast<int64_t>(bytes)) +
                           " bytes, over --max-response-bytes " + std::to_string(o.max_response_bytes) +
                           ": send fewer inputs (or, for fill-mask, fewer [MASK]s or a smaller top_k)");
}

}  // namespace

void qa_options_from_model(const std::string& model_dir, const BertConfig& c, bool beam_search, TaskOptions& o) {
  if (beam_search) {
    o.start_n_top = c.start_beam();
    o.end_n_top = c.end_beam();
  }
  const SquadNullAnswers r = read_squad_null_answers(model_dir);
  o.version_2_with_negative = r.version_2_with_negative;
  o.null_score_diff_threshold = r.null_score_diff_threshold;
}

std::vector<nlohmann::ordered_json> answer_questions(const BertTokenizer& tok, const std::vector<nlohmann::json>& in,
                                                     const TaskOptions& o, const LogitsFn& logits) {
  BERTCC_CHECK(o.max_answer_length >= 1, "--max-answer-length ", o.max_answer_length, ": must be at least 1 token");
  std::vector<SquadExample> ex;
  for (size_t i = 0; i < in.size(); ++i) {
    // Internal ids are the input positions (user ids may repeat); the user's id is echoed back.
    const std::string question = field(in[i], "question", i + 1);
    ex.push_back(make_squad_example(std::to_string(i), question, field(in[i], "context", i + 1)));
    // Nothing to answer from, or nothing asked: an error, as Hugging Face's pipeline has it.
    BERTCC_CHECK(!ex.back().doc_tokens.empty(), "input ", i + 1, ": field \"context\" is empty");
    BERTCC_CHECK(question.find_first_not_of(" \t\r\n") != std::string::npos, "input ", i + 1,
                 ": field \"question\" is empty");
  }
  SquadFeatureOptions fo;
  fo.max_seq_length = seq_len(o, 384);
  fo.doc_stride = o.doc_stride;
  const SquadFeatures feats = squad_features(tok, ex, fo, false);
  SquadDecodeOptions d;
  d.max_answer_length = o.max_answer_length;
  d.start_n_top = o.start_n_top;
  d.end_n_top = o.end_n_top;
  d.v2 = o.version_2_with_negative;
  d.null_score_diff_threshold = o.null_score_diff_threshold;
  const auto out = squad_decode(tok, ex, feats, logits(feats.inputs), d);
  std::vector<nlohmann::ordered_json> res;
  for (size_t i = 0; i < ex.size(); ++i) {
    const std::string ans = out.predictions[ex[i].id].get<std::string>();
    nlohmann::ordered_json r;
    if (in[i].contains("id")) r["id"] = in[i]["id"];
    r["answer"] = ans;
    // the probability of the n-best entry answered (v2.0: the best span is not always first)
    r["score"] = out.nbest[ex[i].id][0]["probability"];
    bool found = false;
    for (const auto& n : out.nbest[ex[i].id])
      if (n["text"] == ans) {
        r["score"] = n["probability"];
        found = true;
        break;
      }
    if (!found && ans.empty() && d.start_n_top > 0)  // the joint head's answer class: P(no answer)
      r["score"] = 1.0 / (1.0 + std::exp(-out.null_odds[ex[i].id].get<double>()));
    const int64_t b = out.answer_byte_begin[i];
    r["start"] = b < 0 ? -1 : static_cast<int64_t>(utf8_length(ex[i].context, static_cast<size_t>(b)));
    r["end"] = b < 0 ? -1 : static_cast<int64_t>(utf8_length(ex[i].context, static_cast<size_t>(b) + ans.size()));
    res.push_back(std::move(r));
  }
  return res;
}

std::vector<nlohmann::ordered_json> classify_texts(const BertTokenizer& tok, const std::vector<std::string>& labels,
                                                   const std::vector<nlohmann::json>& in, const TaskOptions& o,
                                                   const LogitsFn& logits) {
  const int max_len = seq_len(o, 512);
  std::vector<FtFeature> f;
  for (size_t i = 0; i < in.size(); ++i)
    f.push_back(encode_pair(tok, field(in[i], "text", i + 1), field(in[i], "text_pair", i + 1, false), max_len));
  double per_input = 96;  // "label", "score" and each label's name (escaped at worst) with its score
  for (const std::string& l : labels) per_input += 12.0 * static_cast<double>(l.size()) + 32;
  check_response_size(o, per_input * static_cast<double>(in.size()), "of " + std::to_string(in.size()) + " inputs");
  const auto lgs = logits(f);
  std::vector<nlohmann::ordered_json> res;
  for (size_t i = 0; i < in.size(); ++i) {
    nlohmann::ordered_json r;
    if (in[i].contains("id")) r["id"] = in[i]["id"];
    const auto& lg = lgs[i];
    for (float v : lg) BERTCC_CHECK(std::isfinite(v), "input ", i + 1, ": the model produced a non-finite logit");
    if (labels.size() == 1) {
      r["score"] = lg[0];
    } else {
      const int k = argmax(lg);
      double z = 0;
      for (float v : lg) z += std::exp(static_cast<double>(v - lg[static_cast<size_t>(k)]));
      r["label"] = labels[static_cast<size_t>(k)];
      r["score"] = 1.0 / z;
      nlohmann::ordered_json all;
      for (size_t c = 0; c < labels.size(); ++c)
        all[labels[c]] = std::exp(static_cast<double>(lg[c] - lg[static_cast<size_t>(k)])) / z;
      r["scores"] = all;
    }
    res.push_back(std::move(r));
  }
  return res;
}

std::vector<nlohmann::ordered_json> tag_texts(const BertTokenizer& tok, const std::vector<std::string>& labels,
                                              const std::vector<nlohmann::json>& in, const TaskOptions& o,
                                              const LogitsFn& logits) {
  // Each text is one "sentence" of words, tagged as `finetune ner` tags CoNLL sentences: labels on
  // first sub-tokens, texts longer than the sequence length split between words.
  std::vector<std::string> texts(in.size());
  std::vector<std::vector<size_t>> begin(in.size());
  std::vector<NerSentence> sents(in.size());
  size_t longest_tag = 0;
  for (const std::string& l : labels) longest_tag = std::max(longest_tag, l.size());
  double bytes = 0;  // each word with its tag, and at most one entity per word with its text
  for (size_t i = 0; i < in.size(); ++i) {
    texts[i] = field(in[i], "text", i + 1);
    split_words(texts[i], sents[i].words, begin[i]);
    for (const std::string& w : sents[i].words)
      bytes += 96 + 12.0 * static_cast<double>(w.size()) + 12.0 * static_cast<double>(longest_tag);
  }
  check_response_size(o, bytes, "of " + std::to_string(in.size()) + " texts");
  const NerFeatures nf = ner_features(tok, sents, {}, false, seq_len(o, 512), "");
  const auto tagged = ner_decode(nf, sents, labels, logits(nf.f));
  std::vector<nlohmann::ordered_json> res;
  for (size_t i = 0; i < in.size(); ++i) {
    const std::vector<std::string>& words = sents[i].words;
    const std::vector<std::string>& tags = tagged[i];
    nlohmann::ordered_json r, ws = nlohmann::ordered_json::array(), ents = nlohmann::ordered_json::array();
    if (in[i].contains("id")) r["id"] = in[i]["id"];
    for (size_t w = 0; w < words.size(); ++w) ws.push_back({{"word", words[w]}, {"tag", tags[w]}});
    for (const auto& e : get_entities({tags})) {
      const size_t b = begin[i][static_cast<size_t>(e.begin)];
      const size_t en = begin[i][static_cast<size_t>(e.end)] + words[static_cast<size_t>(e.end)].size();
      ents.push_back({{"type", e.type},
                      {"text", texts[i].substr(b, en - b)},
                      {"start", static_cast<int64_t>(utf8_length(texts[i], b))},
                      {"end", static_cast<int64_t>(utf8_length(texts[i], en))}});
    }
    r["words"] = ws;
    r["entities"] = ents;
    res.push_back(std::move(r));
  }
  return res;
}

std::vector<nlohmann::ordered_json> embed_texts(const BertTokenizer& tok, const std::vector<nlohmann::json>& in,
                                                const TaskOptions& o, const LogitsFn& vectors) {
  const int max_len = seq_len(o, 512);
  std::vector<FtFeature> f;
  std::vector<bool> mean;
  for (size_t i = 0; i < in.size(); ++i) {
    f.push_back(encode_pair(tok, field(in[i], "text", i + 1), field(in[i], "text_pair", i + 1, false), max_len));
    const std::string pooling = field(in[i], "pooling", i + 1, false);
    BERTCC_CHECK(pooling.empty() || pooling == "cls" || pooling == "mean", "input ", i + 1,
                 ": field \"pooling\" must be \"cls\" or \"mean\"");
    mean.push_back(pooling == "mean");
  }
  const auto v = vectors(f);
  std::vector<nlohmann::ordered_json> res;
  for (size_t i = 0; i < in.size(); ++i) {
    const size_t C = v[i].size() / 2;
    nlohmann::ordered_json r;
    if (in[i].contains("id")) r["id"] = in[i]["id"];
    r["pooling"] = mean[i] ? "mean" : "cls";
    r["embedding"] = std::vector<float>(v[i].begin() + static_cast<ptrdiff_t>(mean[i] ? C : 0),
                                        v[i].begin() + static_cast<ptrdiff_t>(mean[i] ? 2 * C : C));
    for (float x : v[i]) BERTCC_CHECK(std::isfinite(x), "input ", i + 1, ": the model produced a non-finite value");
    res.push_back(std::move(r));
  }
  return res;
}

std::vector<nlohmann::ordered_json> fill_masks(const BertTokenizer& tok, const std::vector<nlohmann::json>& in,
                                               const TaskOptions& o, const LogitsFn& logits) {
  const int max_len = seq_len(o, 512);
  const int32_t mask_id = tok.vocab().id("[MASK]");
  BERTCC_CHECK(mask_id >= 0, tok.vocab().source(), ": the vocabulary has no [MASK] token");
  std::vector<FtFeature> f;
  std::vector<int64_t> top_k;
  for (size_t i = 0; i < in.size(); ++i) {
    f.push_back(encode_pair(tok, field(in[i], "text", i + 1), "", max_len));
    BERTCC_CHECK(std::count(f.back().input_ids.begin(), f.back().input_ids.end(), mask_id) > 0, "input ", i + 1,
                 ": no [MASK] token in \"text\" (within --max-seq-length)");
    int64_t k = 5;
    if (in[i].contains("top_k")) {
      const int64_t cap = std::min<int64_t>(kMaxTopK, tok.vocab().size());
      BERTCC_CHECK(in[i]["top_k"].is_number_integer() && in[i]["top_k"].get<int64_t>() >= 1 &&
                       in[i]["top_k"].get<int64_t>() <= cap,
                   "input ", i + 1, ": field \"top_k\" must be an integer from 1 to ", cap);
      k = in[i]["top_k"].get<int64_t>();
    }
    top_k.push_back(k);
  }
  const size_t V = static_cast<size_t>(tok.vocab().size());
  // Before the forward pass: the answer's size (masks x top_k candidates, each token escaped at
  // worst) and the vocabulary logits the masks need (4 bytes a token each; at most 4 x the answer
  // limit, so that a request the answer limit would refuse cannot first take that memory).
  size_t longest = 0;
  for (size_t v = 0; v < V; ++v) longest = std::max(longest, tok.vocab().token(static_cast<int32_t>(v)).size());
  double bytes = 0, n_masks = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const double m = static_cast<double>(std::count(f[i].input_ids.begin(), f[i].input_ids.end(), mask_id));
    n_masks += m;
    bytes += 64 + m * (4 + static_cast<double>(top_k[i]) * (72 + 6.0 * static_cast<double>(longest)));
  }
  const std::string what = std::to_string(static_cast<int64_t>(n_masks)) + " [MASK]s";
  check_response_size(o, bytes, "for " + what + " with their top_k");
  const double logit_bytes = n_masks * static_cast<double>(V) * 4;
  if (o.max_response_bytes > 0 && logit_bytes > 4.0 * static_cast<double>(o.max_response_bytes))
    throw ResponseTooLarge(what + " need " + std::to_string(static_cast<int64_t>(logit_bytes)) +
                           " bytes of vocabulary logits, over 4 x --max-response-bytes " +
                           std::to_string(o.max_response_bytes) + ": send fewer [MASK]s");
  const auto lg = logits(f);
  std::vector<nlohmann::ordered_json> res;
  for (size_t i = 0; i < in.size(); ++i) {
    nlohmann::ordered_json r, masks = nlohmann::ordered_json::array();
    if (in[i].contains("id")) r["id"] = in[i]["id"];
    const size_t Vm =
        lg[i].size() / static_cast<size_t>(std::count(f[i].input_ids.begin(), f[i].input_ids.end(), mask_id));
    for (size_t m = 0; m * Vm < lg[i].size(); ++m) {
      // Softmax over the model's vocabulary; candidates among the tokens vocab.txt names.
      const float* x = lg[i].data() + m * Vm;
      const float mx = *std::max_element(x, x + Vm);
      double z = 0;
      for (size_t v = 0; v < Vm; ++v) z += std::exp(static_cast<double>(x[v] - mx));
      BERTCC_CHECK(std::isfinite(z), "input ", i + 1, ": the model produced non-finite logits");
      std::vector<int32_t> ids(std::min(V, Vm));
      std::iota(ids.begin(), ids.end(), 0);
      const size_t k = std::min(ids.size(), static_cast<size_t>(top_k[i]));
      std::partial_sort(ids.begin(), ids.begin() + static_cast<ptrdiff_t>(k), ids.end(),
                        [&](int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
      nlohmann::ordered_json cands = nlohmann::ordered_json::array();
      for (size_t c = 0; c < k; ++c)
        cands.push_back({{"token", tok.vocab().token(ids[c])},
                         {"token_id", ids[c]},
                         {"score", std::exp(static_cast<double>(x[ids[c]] - mx)) / z}});
      masks.push_back(cands);
    }
    r["masks"] = masks;
    res.push_back(std::move(r));
  }
  return res;
}

}  // namespace bertcc
