// Inference commands: bertcc qa | classify | tag --model DIR. One input from flags, or JSON lines
// on stdin (one object per line, one JSON answer per line, in order), processed in batches.
#include <cmath>
#include <iostream>

#include "backend/backend.h"
#include "bertcc/error.h"
#include "bertcc/fileio.h"
#include "bertcc/inference.h"
#include "bertcc/json_depth.h"
#include "bertcc/model_dir.h"
#include "bertcc/token_classification.h"
#include "bertcc/runtime.h"
#include "bertcc/squad.h"
#include "bertcc/tasks.h"
#include "bertcc/utf8.h"
#include "tools/finetune_common.h"

namespace bertcc::tools {
namespace {

struct InferCli {
  std::string model, vocab, precision = "bf16", text, text_pair, question, context, device = "cpu";
  int max_seq_length = 0, threads = 0, doc_stride = 128, max_answer_length = 30;
  std::string pooling = "cls";
  int64_t top_k = 5;
  int64_t batch_size = 32;
  // Whether --text / --question / --context were given: an explicitly empty one is an error, not
  // a request to read stdin.
  bool text_given = false, question_given = false, context_given = false;
};

// --text "" (an empty shell variable, say) used to read stdin instead: refuse it.
void check_given_text(bool given, const std::string& value, const char* name) {
  BERTCC_CHECK(!given || !value.empty(), name, " is empty: give the text, or leave ", name,
               " out to read JSON lines from stdin");
}

struct Loaded {
  std::unique_ptr<Vocab> vocab;
  std::unique_ptr<BertTokenizer> tok;
  std::unique_ptr<Bert> model;
  Precision prec = Precision::BF16;
};

Loaded load(const InferCli& o, Heads heads, const char* command) {
  check_model_dir_for(o.model, heads, command);  // before the vocabulary: the missing directory, the wrong kind
  set_threads(o.threads);
  Loaded l;
  l.prec = parse_precision(o.precision);
  const std::string vp = o.vocab.empty() ? join_path(o.model, "vocab.txt") : o.vocab;
  BERTCC_CHECK(file_exists(vp), vp, ": no vocabulary (pass --vocab)");
  l.vocab = std::make_unique<Vocab>(Vocab::load(vp));
  l.tok = std::make_unique<BertTokenizer>(*l.vocab, model_dir_lower_case(o.vocab.empty() ? o.model : "", *l.vocab));
  l.model = load_model_dir(o.model, heads);
  BERTCC_CHECK((heads != Heads::SequenceClassification && heads != Heads::TokenClassification) ||
                   l.model->config().num_labels() > 0,
               o.model, ": config.json has no labels (id2label)");
  const BertConfig& c = l.model->config();
  // A larger vocabulary would produce ids past the embedding table (NVIDIA's padded one may be larger).
  BERTCC_CHECK(static_cast<int64_t>(l.vocab->size()) <= c.vocab_size, vp, ": ", l.vocab->size(),
               " entries, more than the model's vocab_size ", c.vocab_size, " (", join_path(o.model, "config.json"), ")");
  BERTCC_CHECK(o.max_seq_length <= c.max_position_embeddings, "--max-seq-length ", o.max_seq_length,
               " exceeds the model's max_position_embeddings ", c.max_position_embeddings, " (",
               join_path(o.model, "config.json"), ")");
  Backend& be = backend_for(o.device);
  if (!be.on_host()) {
    std::cerr << be.describe() << "\n";
    l.model->use_backend_for_inference(be, l.prec);
  }
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
  check_stdin_not_directory();
  while (std::getline(std::cin, line)) {
    ++n;
    if (n == 1) strip_text_bom(line, "<stdin>");
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const size_t deep = json_too_deep_at(line);
    BERTCC_CHECK(deep == std::string::npos, "stdin:", n, ": JSON nested deeper than ", kMaxJsonDepth,
                 " levels (at byte ", deep + 1, ")");
    try {
      v.push_back(nlohmann::json::parse(line));
    } catch (const nlohmann::json::exception& e) {
      fail("stdin:", n, ": invalid JSON: ", e.what());
    }
    BERTCC_CHECK(v.back().is_object(), "stdin:", n, ": expected a JSON object");
  }
  check_stdin_read(std::cin);
  return v;
}

TaskOptions task_options(const InferCli& o, const Bert& m) {
  TaskOptions t;
  t.max_seq_length = o.max_seq_length;
  t.doc_stride = o.doc_stride;
  t.max_answer_length = o.max_answer_length;
  t.max_position_embeddings = m.config().max_position_embeddings;
  if (m.heads() == Heads::JointQuestionAnswering) {  // beams as the model was fine-tuned with
    t.start_n_top = m.config().start_beam();
    t.end_n_top = m.config().end_beam();
  }
  return t;
}

void print(const std::vector<nlohmann::ordered_json>& results) {
  for (const auto& r : results) std::cout << r.dump() << "\n";
}

void run_qa(const InferCli& o) {
  nlohmann::json single;
  check_given_text(o.question_given, o.question, "--question");
  check_given_text(o.context_given, o.context, "--context");
  if (o.question_given || o.context_given) {
    BERTCC_CHECK(o.question_given && o.context_given, "--question and --context go together");
    single = {{"question", o.question}, {"context", o.context}};
  }
  const auto in = inputs(single);
  // BertForQuestionAnswering, or the joint head with beam search (finetune squad --joint-head)
  check_model_dir_for(o.model, Heads::QuestionAnswering, "qa");
  Loaded l = load(o, architecture_heads(o.model) == Heads::JointQuestionAnswering ? Heads::JointQuestionAnswering
                                                                                   : Heads::QuestionAnswering, "qa");
  print(answer_questions(*l.tok, in, task_options(o, *l.model),
                         [&](const std::vector<FtFeature>& f) { return predict_logits(*l.model, f, o.batch_size, l.prec); }));
}

void run_classify_infer(const InferCli& o) {
  nlohmann::json single;
  check_given_text(o.text_given, o.text, "--text");
  if (o.text_given) single = {{"text", o.text}, {"text_pair", o.text_pair}};
  const auto in = inputs(single);
  Loaded l = load(o, Heads::SequenceClassification, "classify");
  print(classify_texts(*l.tok, l.model->config().id2label, in, task_options(o, *l.model),
                       [&](const std::vector<FtFeature>& f) { return predict_logits(*l.model, f, o.batch_size, l.prec); }));
}

void run_tag(const InferCli& o) {
  nlohmann::json single;
  check_given_text(o.text_given, o.text, "--text");
  if (o.text_given) single = {{"text", o.text}};
  const auto in = inputs(single);
  Loaded l = load(o, Heads::TokenClassification, "tag");
  print(tag_texts(*l.tok, l.model->config().id2label, in, task_options(o, *l.model),
                  [&](const std::vector<FtFeature>& f) { return predict_logits(*l.model, f, o.batch_size, l.prec); }));
}

void run_embed(const InferCli& o) {
  nlohmann::json single;
  check_given_text(o.text_given, o.text, "--text");
  if (o.text_given) single = {{"text", o.text}, {"text_pair", o.text_pair}, {"pooling", o.pooling}};
  auto in = inputs(single);
  for (auto& j : in)
    if (j.is_object() && !j.contains("pooling")) j["pooling"] = o.pooling;
  // Any model directory: its encoder (a pre-training checkpoint's heads are not used).
  Loaded l = load(o, Heads::None, "embed");
  print(embed_texts(*l.tok, in, task_options(o, *l.model),
                    [&](const std::vector<FtFeature>& f) { return predict_embeddings(*l.model, f, o.batch_size, l.prec); }));
}

void run_fill_mask(const InferCli& o) {
  nlohmann::json single;
  check_given_text(o.text_given, o.text, "--text");
  if (o.text_given) single = {{"text", o.text}, {"top_k", o.top_k}};
  auto in = inputs(single);
  for (auto& j : in)
    if (j.is_object() && !j.contains("top_k")) j["top_k"] = o.top_k;
  Loaded l = load(o, Heads::PreTraining, "fill-mask");
  const int32_t mask = l.vocab->id("[MASK]");
  print(fill_masks(*l.tok, in, task_options(o, *l.model), [&](const std::vector<FtFeature>& f) {
    return predict_masked(*l.model, f, o.batch_size, l.prec, mask);
  }));
}

void common(CLI::App* c, InferCli& o) {
  c->add_option("--model", o.model, "fine-tuned Hugging Face model directory (config.json with id2label, vocab.txt)")
      ->required();
  c->add_option("--vocab", o.vocab, "vocab.txt (default: the model's)");
  c->add_option("--precision", o.precision, "bf16 (default) | fp32")->check(CLI::IsMember({"fp32", "bf16"}));
  c->add_option(flag("--max-seq-length"), o.max_seq_length, "tokens per sequence (default: 384 qa, 512 otherwise)")
      ->check(CLI::Range(0, 1 << 20));  // 0: the default (a negative length used to be taken as the default too)
  c->add_option(flag("--batch-size"), o.batch_size, "sequences per batch for stdin input")->check(CLI::PositiveNumber);
  c->add_option("--threads", o.threads, "threads (default: all cores)")->check(threads_check());
  add_device_flags(c, o.device);
  add_cuda_graphs_flag(c);
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
  qa->callback([q, qa]() {
    q->question_given = qa->count("--question") > 0;
    q->context_given = qa->count("--context") > 0;
    run_qa(*q);
  });
  auto c = std::make_shared<InferCli>();
  auto* cl = app.add_subcommand("classify", "classify a text or pair (or JSON lines {\"text\",\"text_pair\"} on stdin)");
  common(cl, *c);
  cl->add_option("--text", c->text, "the text");
  cl->add_option(flag("--text-pair"), c->text_pair, "second text for pair tasks");
  cl->callback([c, cl]() {
    c->text_given = cl->count("--text") > 0;
    run_classify_infer(*c);
  });
  auto t = std::make_shared<InferCli>();
  auto* tg = app.add_subcommand("tag", "tag the words of a text with entities (or JSON lines {\"text\"} on stdin)");
  common(tg, *t);
  tg->add_option("--text", t->text, "the text");
  tg->callback([t, tg]() {
    t->text_given = tg->count("--text") > 0;
    run_tag(*t);
  });
  auto e = std::make_shared<InferCli>();
  auto* em = app.add_subcommand("embed", "sentence embeddings of a text or pair (or JSON lines {\"text\"} on stdin)");
  common(em, *e);
  em->add_option("--text", e->text, "the text");
  em->add_option(flag("--text-pair"), e->text_pair, "second text");
  em->add_option("--pooling", e->pooling, "cls (default) | mean")->check(CLI::IsMember({"cls", "mean"}));
  em->callback([e, em]() {
    e->text_given = em->count("--text") > 0;
    run_embed(*e);
  });
  auto fm = std::make_shared<InferCli>();
  auto* fmc = app.add_subcommand("fill-mask",
                                 "predict the [MASK] tokens of a text with a pre-training checkpoint (or JSON lines on stdin)");
  common(fmc, *fm);
  fmc->add_option("--text", fm->text, "a text with one or more [MASK]");
  fmc->add_option(flag("--top-k"), fm->top_k, "candidates per [MASK]")->check(CLI::Range(int64_t{1}, int64_t{1000}));
  fmc->callback([fm, fmc]() {
    fm->text_given = fmc->count("--text") > 0;
    run_fill_mask(*fm);
  });
}

}  // namespace bertcc::tools
