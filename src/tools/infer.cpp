// Inference commands: bertcc qa | classify | tag --model DIR. One input from flags, or JSON lines
// on stdin (one object per line, one JSON answer per line, in order), processed in batches.
#include <cmath>
#include <iostream>

#include "bertcc/error.h"
#include "bertcc/fileio.h"
#include "bertcc/model_dir.h"
#include "bertcc/token_classification.h"
#include "bertcc/runtime.h"
#include "bertcc/squad.h"
#include "bertcc/utf8.h"
#include "tools/finetune_common.h"

namespace bertcc::tools {
namespace {

struct InferCli {
  std::string model, vocab, precision = "bf16", text, text_pair, question, context;
  int max_seq_length = 0, threads = 0, doc_stride = 128, max_answer_length = 30;
  int64_t batch_size = 32;
};

struct Loaded {
  std::unique_ptr<Vocab> vocab;
  std::unique_ptr<BertTokenizer> tok;
  std::unique_ptr<Bert> model;
  Precision prec = Precision::BF16;
};

Loaded load(const InferCli& o, Heads heads) {
  set_threads(o.threads);
  Loaded l;
  l.prec = parse_precision(o.precision);
  const std::string vp = o.vocab.empty() ? join_path(o.model, "vocab.txt") : o.vocab;
  BERTCC_CHECK(file_exists(vp), vp, ": no vocabulary (pass --vocab)");
  l.vocab = std::make_unique<Vocab>(Vocab::load(vp));
  l.tok = std::make_unique<BertTokenizer>(*l.vocab, model_dir_lower_case(o.vocab.empty() ? o.model : "", *l.vocab));
  l.model = load_model_dir(o.model, heads);
  BERTCC_CHECK(heads == Heads::QuestionAnswering || l.model->config().num_labels() > 0, o.model,
               ": config.json has no labels (id2label)");
  const BertConfig& c = l.model->config();
  // A larger vocabulary would produce ids past the embedding table (NVIDIA's padded one may be larger).
  BERTCC_CHECK(static_cast<int64_t>(l.vocab->size()) <= c.vocab_size, vp, ": ", l.vocab->size(),
               " entries, more than the model's vocab_size ", c.vocab_size, " (", join_path(o.model, "config.json"), ")");
  BERTCC_CHECK(o.max_seq_length <= c.max_position_embeddings, "--max-seq-length ", o.max_seq_length,
               " exceeds the model's max_position_embeddings ", c.max_position_embeddings, " (",
               join_path(o.model, "config.json"), ")");
  return l;
}

// Inputs: from the flags if `single` holds a value, else JSON lines from stdin.
std::vector<nlohmann::json> inputs(const nlohmann::json& single) {
  std::vector<nlohmann::json> v;
  if (!single.is_null()) {
    v.push_back(single);
    return v;
  }
  std::string line;
  int64_t n = 0;
  while (std::getline(std::cin, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      v.push_back(nlohmann::json::parse(line));
    } catch (const nlohmann::json::exception& e) {
      fail("stdin:", n, ": invalid JSON: ", e.what());
    }
    BERTCC_CHECK(v.back().is_object(), "stdin:", n, ": expected a JSON object");
  }
  return v;
}

std::string field(const nlohmann::json& j, const char* k, size_t line, bool required = true) {
  if (!j.contains(k) || j[k].is_null()) {
    BERTCC_CHECK(!required, "input ", line, ": missing field \"", k, "\"");
    return "";
  }
  BERTCC_CHECK(j[k].is_string(), "input ", line, ": field \"", k, "\" must be a string");
  return j[k].get<std::string>();
}

void run_qa(const InferCli& o) {
  nlohmann::json single;
  if (!o.question.empty() || !o.context.empty()) {
    BERTCC_CHECK(!o.question.empty() && !o.context.empty(), "--question and --context go together");
    single = {{"question", o.question}, {"context", o.context}};
  }
  const auto in = inputs(single);
  Loaded l = load(o, Heads::QuestionAnswering);
  std::vector<SquadExample> ex;
  for (size_t i = 0; i < in.size(); ++i)
    // Internal ids are the input positions (user ids may repeat); the user's id is echoed back.
    ex.push_back(make_squad_example(std::to_string(i), field(in[i], "question", i + 1), field(in[i], "context", i + 1)));
  SquadFeatureOptions fo;
  fo.max_seq_length = o.max_seq_length > 0 ? o.max_seq_length : std::min(384, l.model->config().max_position_embeddings);
  fo.doc_stride = o.doc_stride;
  const SquadFeatures feats = squad_features(*l.tok, ex, fo, false);
  SquadDecodeOptions d;
  d.max_answer_length = o.max_answer_length;
  const auto out = squad_decode(*l.tok, ex, feats, predict_logits(*l.model, feats.inputs, o.batch_size, l.prec), d);
  for (size_t i = 0; i < ex.size(); ++i) {
    const std::string ans = out.predictions[ex[i].id].get<std::string>();
    const auto& best = out.nbest[ex[i].id][0];
    nlohmann::ordered_json r;
    if (in[i].contains("id")) r["id"] = in[i]["id"];
    r["answer"] = ans;
    r["score"] = best["probability"];
    const int64_t b = out.answer_byte_begin[i];
    r["start"] = b < 0 ? -1 : static_cast<int64_t>(utf8_length(ex[i].context, static_cast<size_t>(b)));
    r["end"] = b < 0 ? -1 : static_cast<int64_t>(utf8_length(ex[i].context, static_cast<size_t>(b) + ans.size()));
    std::cout << r.dump() << "\n";
  }
}

void run_classify_infer(const InferCli& o) {
  nlohmann::json single;
  if (!o.text.empty()) single = {{"text", o.text}, {"text_pair", o.text_pair}};
  const auto in = inputs(single);
  Loaded l = load(o, Heads::SequenceClassification);
  const int max_len = o.max_seq_length > 0 ? o.max_seq_length : std::min(512, l.model->config().max_position_embeddings);
  std::vector<FtFeature> f;
  for (size_t i = 0; i < in.size(); ++i)
    f.push_back(encode_pair(*l.tok, field(in[i], "text", i + 1), field(in[i], "text_pair", i + 1, false), max_len));
  const auto logits = predict_logits(*l.model, f, o.batch_size, l.prec);
  const auto& labels = l.model->config().id2label;
  for (size_t i = 0; i < in.size(); ++i) {
    nlohmann::ordered_json r;
    if (in[i].contains("id")) r["id"] = in[i]["id"];
    const auto& lg = logits[i];
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
    std::cout << r.dump() << "\n";
  }
}

// Words for tagging: runs of letters/digits, and each ASCII punctuation mark alone (as CoNLL
// tokenizes), with byte offsets.
void split_words(const std::string& s, std::vector<std::string>& words, std::vector<size_t>& begin) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      ++i;
      continue;
    }
    const bool punct = c < 0x80 && std::ispunct(c);
    const size_t b = i;
    if (punct) {
      ++i;
    } else {
      while (i < s.size()) {
        const unsigned char d = static_cast<unsigned char>(s[i]);
        if (d == ' ' || d == '\t' || d == '\n' || d == '\r' || (d < 0x80 && std::ispunct(d))) break;
        ++i;
      }
    }
    words.push_back(s.substr(b, i - b));
    begin.push_back(b);
  }
}

void run_tag(const InferCli& o) {
  nlohmann::json single;
  if (!o.text.empty()) single = {{"text", o.text}};
  const auto in = inputs(single);
  Loaded l = load(o, Heads::TokenClassification);
  const auto& labels = l.model->config().id2label;
  // Each text is one "sentence" of words, tagged as `finetune ner` tags CoNLL sentences: labels on
  // first sub-tokens, texts longer than the sequence length split between words.
  struct Item {
    std::string text;
    std::vector<size_t> begin;  // byte offset of each word
  };
  std::vector<Item> items(in.size());
  std::vector<NerSentence> sents(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    items[i].text = field(in[i], "text", i + 1);
    split_words(items[i].text, sents[i].words, items[i].begin);
  }
  const NerFeatures nf = ner_features(*l.tok, sents, {}, false,
                                      o.max_seq_length > 0 ? o.max_seq_length
                                                           : std::min(512, l.model->config().max_position_embeddings),
                                      "");
  const auto tagged = ner_predict(*l.model, nf, sents, labels, o.batch_size, l.prec);
  for (size_t i = 0; i < in.size(); ++i) {
    const Item& it = items[i];
    const std::vector<std::string>& words = sents[i].words;
    const std::vector<std::string>& tags = tagged[i];
    nlohmann::ordered_json r, ws = nlohmann::ordered_json::array(), ents = nlohmann::ordered_json::array();
    if (in[i].contains("id")) r["id"] = in[i]["id"];
    for (size_t w = 0; w < words.size(); ++w) ws.push_back({{"word", words[w]}, {"tag", tags[w]}});
    for (const auto& e : get_entities({tags})) {
      const size_t b = it.begin[static_cast<size_t>(e.begin)];
      const size_t en = it.begin[static_cast<size_t>(e.end)] + words[static_cast<size_t>(e.end)].size();
      ents.push_back({{"type", e.type},
                      {"text", it.text.substr(b, en - b)},
                      {"start", static_cast<int64_t>(utf8_length(it.text, b))},
                      {"end", static_cast<int64_t>(utf8_length(it.text, en))}});
    }
    r["words"] = ws;
    r["entities"] = ents;
    std::cout << r.dump() << "\n";
  }
}

void common(CLI::App* c, InferCli& o) {
  c->add_option("--model", o.model, "fine-tuned Hugging Face model directory (config.json with id2label, vocab.txt)")
      ->required();
  c->add_option("--vocab", o.vocab, "vocab.txt (default: the model's)");
  c->add_option("--precision", o.precision, "bf16 (default) | fp32")->check(CLI::IsMember({"fp32", "bf16"}));
  c->add_option(flag("--max-seq-length"), o.max_seq_length, "tokens per sequence (default: 384 qa, 512 otherwise)");
  c->add_option(flag("--batch-size"), o.batch_size, "sequences per batch for stdin input")->check(CLI::PositiveNumber);
  c->add_option("--threads", o.threads, "threads (default: all cores)")->check(threads_check());
}

}  // namespace

void add_infer(CLI::App& app) {
  auto q = std::make_shared<InferCli>();
  auto* qa = app.add_subcommand("qa", "answer a question from a context (or JSON lines {\"question\",\"context\"} on stdin)");
  common(qa, *q);
  qa->add_option("--question", q->question, "the question");
  qa->add_option("--context", q->context, "the passage holding the answer");
  qa->add_option(flag("--doc-stride"), q->doc_stride, "stride between windows of long contexts");
  qa->add_option(flag("--max-answer-length"), q->max_answer_length, "longest answer in tokens");
  qa->callback([q]() { run_qa(*q); });
  auto c = std::make_shared<InferCli>();
  auto* cl = app.add_subcommand("classify", "classify a text or pair (or JSON lines {\"text\",\"text_pair\"} on stdin)");
  common(cl, *c);
  cl->add_option("--text", c->text, "the text");
  cl->add_option(flag("--text-pair"), c->text_pair, "second text for pair tasks");
  cl->callback([c]() { run_classify_infer(*c); });
  auto t = std::make_shared<InferCli>();
  auto* tg = app.add_subcommand("tag", "tag the words of a text with entities (or JSON lines {\"text\"} on stdin)");
  common(tg, *t);
  tg->add_option("--text", t->text, "the text");
  tg->callback([t]() { run_tag(*t); });
}

}  // namespace bertcc::tools
