// Inference commands: bertcc qa | classify | tag --model DIR. One input from flags, or JSON lines
// on stdin (one object per line, one JSON answer per line, in order), processed in batches.
#include <cmath>
#include <iostream>

#include "backend/backend.h"
#include "bertcc/error.h"
#include "bertcc/fileio.h"
#include "bertcc/head_spec.h"
#include "bertcc/inference.h"
#include "bertcc/json_depth.h"
#include "bertcc/model_dir.h"
#include "bertcc/runtime.h"
#include "bertcc/squad.h"
#include "bertcc/tasks.h"
#include "bertcc/token_classification.h"
#include "bertcc/utf8.h"
#include "tools/finetune_common.h"

namespace bertcc::tools {
namespace {

struct InferCli {
  std::string model, vocab, precision = "auto", question, context, device = "cpu";
  std::vector<std::string> texts, text_pairs;  // --text and --text-pair, each repeatable (a batch)
  bool do_lower_case = false, no_lower_case = false;
  int max_seq_length = 0, threads = 0, doc_stride = 128, max_answer_length = 30;
  // qa: SQuAD v2.0 null answers (default: as the model's config.json records them)
  bool version_2_with_negative = false, threshold_given = false;
  double null_score_diff_threshold = 0.0;
  std::string pooling = "cls";
  int64_t top_k = 5;
  int64_t batch_size = 32;
  // Whether --text / --question / --context were given: an explicitly empty one is an error, not
  // a request to read stdin.
  bool question_given = false, context_given = false;
};

// --text "" (an empty shell variable, say) would read stdin instead: refuse it.
void check_given_text(bool given, const std::string& value, const char* name) {
  BERTCC_CHECK(!given || !value.empty(), name, " is empty: give the text, or leave ", name,
               " out to read JSON lines from stdin");
}

// The inputs of repeated --text (and --text-pair, one per --text when given): one JSON object
// each, `extra` merged into every one.
std::vector<nlohmann::json> text_inputs(const InferCli& o, bool pairs, const nlohmann::json& extra) {
  for (const auto& t : o.texts) check_given_text(true, t, "--text");
  BERTCC_CHECK(!pairs || o.text_pairs.empty() || o.text_pairs.size() == o.texts.size(), "--text-pair is given ",
               o.text_pairs.size(), " time(s) and --text ", o.texts.size(),
               ": give one --text-pair per --text (the n-th pairs with the n-th), or none");
  BERTCC_CHECK(o.texts.size() > 0 || o.text_pairs.empty(), "--text-pair needs --text");
  std::vector<nlohmann::json> v;
  for (size_t i = 0; i < o.texts.size(); ++i) {
    nlohmann::json j{{"text", o.texts[i]}};
    if (pairs) j["text_pair"] = o.text_pairs.empty() ? std::string() : o.text_pairs[i];
    for (const auto& [k, val] : extra.items()) j[k] = val;
    v.push_back(std::move(j));
  }
  return v;
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
  const std::string vp = o.vocab.empty() ? join_path(o.model, "vocab.txt") : o.vocab;
  BERTCC_CHECK(file_exists(vp), vp, ": no vocabulary (pass --vocab)");
  l.vocab = std::make_unique<Vocab>(Vocab::load(vp));
  BERTCC_CHECK(!(o.do_lower_case && o.no_lower_case), "--do-lower-case and --no-lower-case contradict each other");
  // Default: the model directory's tokenizer_config.json, else guessed from the vocabulary.
  const bool lower = o.do_lower_case   ? true
                     : o.no_lower_case ? false
                                       : model_dir_lower_case(o.vocab.empty() ? o.model : "", *l.vocab);
  l.tok = std::make_unique<BertTokenizer>(*l.vocab, lower);
  Backend& be = backend_for(o.device);
  l.prec = resolve_precision(o.precision, be.on_host());
  BERTCC_CHECK(l.prec != Precision::I8 || be.on_host(),
               "--precision int8 runs on the CPU only (pass --device cpu, or --precision bf16 on a GPU)");
  if (l.prec == Precision::I8) std::cerr << describe_backend(l.prec) << "\n";
  // on the CPU: quantized (int8) or packed (fp32, bf16) as it loads, its fp32 linear layers given back
  l.model = be.on_host() ? load_model_dir_for_inference(o.model, heads, l.prec) : load_model_dir(o.model, heads);
  BERTCC_CHECK(!head_spec(heads).needs_labels || l.model->config().num_labels() > 0, o.model,
               ": config.json has no labels (id2label)");
  const BertConfig& c = l.model->config();
  // A larger vocabulary would produce ids past the embedding table (NVIDIA's padded one may be larger).
  BERTCC_CHECK(static_cast<int64_t>(l.vocab->size()) <= c.vocab_size, vp, ": ", l.vocab->size(),
               " entries, more than the model's vocab_size ", c.vocab_size, " (", join_path(o.model, "config.json"),
               ")");
  BERTCC_CHECK(o.max_seq_length <= c.max_position_embeddings, "--max-seq-length ", o.max_seq_length,
               " exceeds the model's max_position_embeddings ", c.max_position_embeddings, " (",
               join_path(o.model, "config.json"), ")");
  if (!be.on_host()) {
    std::cerr << be.describe() << "\n";
    l.model->use_backend_for_inference(be, l.prec);
  }
  return l;
}

// Inputs: from the flags if `given` holds any, else JSON lines from stdin.
std::vector<nlohmann::json> inputs(const std::vector<nlohmann::json>& given) {
  std::vector<nlohmann::json> v;
  if (!given.empty()) return given;
  std::string line;
  int64_t n = 0;
  check_stdin_not_directory();
  while (read_line(std::cin, line, "stdin", n + 1)) {
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
  if (head_spec(m.heads()).task && std::string(head_spec(m.heads()).task) == "qa")  // as the model was fine-tuned
    qa_options_from_model(o.model, m.config(), head_spec(m.heads()).beam_search, t);
  BERTCC_CHECK(std::isfinite(o.null_score_diff_threshold), "--null-score-diff-threshold must be finite");
  if (o.version_2_with_negative || o.threshold_given) t.version_2_with_negative = true;
  if (o.threshold_given) t.null_score_diff_threshold = o.null_score_diff_threshold;
  return t;
}

void print(const std::vector<nlohmann::ordered_json>& results) {
  for (const auto& r : results) std::cout << r.dump() << "\n";
}

void run_qa(const InferCli& o) {
  std::vector<nlohmann::json> single;
  check_given_text(o.question_given, o.question, "--question");
  check_given_text(o.context_given, o.context, "--context");
  if (o.question_given || o.context_given) {
    BERTCC_CHECK(o.question_given && o.context_given, "--question and --context go together");
    single.push_back({{"question", o.question}, {"context", o.context}});
  }
  const auto in = inputs(single);
  // BertForQuestionAnswering, or the joint head with beam search (finetune squad --joint-head)
  check_model_dir_for(o.model, Heads::QuestionAnswering, "qa");
  const HeadSpec& have = head_spec(architecture_heads(o.model));
  Loaded l = load(o, have.task && std::string(have.task) == "qa" ? have.id : Heads::QuestionAnswering, "qa");
  print(answer_questions(*l.tok, in, task_options(o, *l.model), [&](const std::vector<FtFeature>& f) {
    return predict_logits(*l.model, f, o.batch_size, l.prec);
  }));
}

// classify and tag: by default the length the model was fine-tuned at (record_fine_tuned_length)
TaskOptions text_task_options(const InferCli& o, const Bert& m) {
  TaskOptions t = task_options(o, m);
  if (t.max_seq_length == 0) t.max_seq_length = fine_tuned_length(o.model, m.config().max_position_embeddings);
  return t;
}

void run_classify_infer(const InferCli& o) {
  const auto in = inputs(text_inputs(o, true, nlohmann::json::object()));
  Loaded l = load(o, Heads::SequenceClassification, "classify");
  print(classify_texts(
      *l.tok, l.model->config().id2label, in, text_task_options(o, *l.model),
      [&](const std::vector<FtFeature>& f) { return predict_logits(*l.model, f, o.batch_size, l.prec); }));
}

void run_tag(const InferCli& o) {
  const auto in = inputs(text_inputs(o, false, nlohmann::json::object()));
  Loaded l = load(o, Heads::TokenClassification, "tag");
  print(tag_texts(*l.tok, l.model->config().id2label, in, text_task_options(o, *l.model),
                  [&](const std::vector<FtFeature>& f) { return predict_logits(*l.model, f, o.batch_size, l.prec); }));
}

void run_embed(const InferCli& o) {
  auto in = inputs(text_inputs(o, true, {{"pooling", o.pooling}}));
  for (auto& j : in)
    if (j.is_object() && !j.contains("pooling")) j["pooling"] = o.pooling;
  // Any model directory: its encoder (a pre-training checkpoint's heads are not used).
  Loaded l = load(o, Heads::None, "embed");
  print(embed_texts(*l.tok, in, task_options(o, *l.model), [&](const std::vector<FtFeature>& f) {
    return predict_embeddings(*l.model, f, o.batch_size, l.prec);
  }));
}

void run_fill_mask(const InferCli& o) {
  auto in = inputs(text_inputs(o, false, {{"top_k", o.top_k}}));
  for (auto& j : in)
    if (j.is_object() && !j.contains("top_k")) j["top_k"] = o.top_k;
  Loaded l = load(o, Heads::PreTraining, "fill-mask");
  const int32_t mask = l.vocab->id("[MASK]");
  print(fill_masks(*l.tok, in, task_options(o, *l.model), [&](const std::vector<FtFeature>& f) {
    return predict_masked(*l.model, f, o.batch_size, l.prec, mask);
  }));
}

// model_help: what --model must hold for this command
void common(CLI::App* c, InferCli& o, const std::string& model_help) {
  c->add_option("--model", o.model, model_help)->required();
  c->add_option("--vocab", o.vocab, "vocab.txt (default: the model's)");
  c->add_option("--precision", o.precision, kInferPrecisionHelp)
      ->check(CLI::IsMember({"auto", "fp32", "bf16", "int8"}));
  c->add_option(flag("--max-seq-length"), o.max_seq_length,
                "tokens per sequence (default: 384 qa; classify and tag: the length the model was fine-tuned at "
                "(tokenizer_config.json's model_max_length); 512 otherwise)")
      ->check(in_range(0, 1 << 20, "tokens per sequence; 0 = the default"));
  c->add_option(flag("--batch-size"), o.batch_size, "sequences per batch for stdin input")
      ->check(in_range(1, kMaxBatch, "sequences held in memory at once"));
  c->add_option("--threads", o.threads, "threads (default: all cores)")->check(threads_check());
  c->add_flag(
      flag("--do-lower-case"), o.do_lower_case,
      "lower-case and strip accents (default: the model's tokenizer_config.json, else guessed from the vocabulary)");
  c->add_flag(flag("--no-lower-case"), o.no_lower_case, "keep case and accents");
  add_device_flags(c, o.device);
  add_cuda_graphs_flag(c);
  add_int8_flags(c);
}

}  // namespace

void add_infer(CLI::App& app) {
  auto q = std::make_shared<InferCli>();
  auto* qa =
      app.add_subcommand("qa", "answer a question from a context (or JSON lines {\"question\",\"context\"} on stdin)");
  common(qa, *q, "a SQuAD fine-tuned Hugging Face model directory (config.json, model.safetensors, vocab.txt)");
  qa->add_option("--question", q->question, "the question");
  qa->add_option("--context", q->context, "the passage holding the answer");
  qa->add_option(flag("--doc-stride"), q->doc_stride, "stride between windows of long contexts")
      ->check(in_range(1, 1 << 20, "tokens between windows"));
  qa->add_option(flag("--max-answer-length"), q->max_answer_length, "longest answer in tokens")
      ->check(in_range(1, 1 << 16, "tokens"));
  qa->add_flag(flag("--version-2-with-negative"), q->version_2_with_negative,
               "SQuAD 2.0: answer \"\" when no span beats the null score (default: on for a model fine-tuned on "
               "v2.0, as its config.json records)");
  qa->add_option(flag("--null-score-diff-threshold"), q->null_score_diff_threshold,
                 "answer \"\" when null score - best span score > this (joint head: the answer-class logit); "
                 "implies --version-2-with-negative (default: the model's recorded threshold, else 0.0)")
      ->check(in_range(-1e30, 1e30, "a score difference"));
  qa->callback([q, qa]() {
    q->threshold_given = qa->count("--null-score-diff-threshold") > 0;
    q->question_given = qa->count("--question") > 0;
    q->context_given = qa->count("--context") > 0;
    run_qa(*q);
  });
  auto c = std::make_shared<InferCli>();
  auto* cl =
      app.add_subcommand("classify", "classify a text or pair (or JSON lines {\"text\",\"text_pair\"} on stdin)");
  common(cl, *c, "a fine-tuned classifier's Hugging Face model directory (config.json with id2label, vocab.txt)");
  cl->add_option("--text", c->texts, "the text; repeat for a batch (one JSON line out per --text)")
      ->allow_extra_args(false);
  cl->add_option(flag("--text-pair"), c->text_pairs, "second text for pair tasks (one per --text)")
      ->allow_extra_args(false);
  cl->callback([c]() { run_classify_infer(*c); });
  auto t = std::make_shared<InferCli>();
  auto* tg = app.add_subcommand("tag", "tag the words of a text with entities (or JSON lines {\"text\"} on stdin)");
  common(tg, *t,
         "a fine-tuned token classifier's (NER) Hugging Face model directory (config.json with id2label, vocab.txt)");
  tg->add_option("--text", t->texts, "the text; repeat for a batch (one JSON line out per --text)")
      ->allow_extra_args(false);
  tg->callback([t]() { run_tag(*t); });
  auto e = std::make_shared<InferCli>();
  auto* em = app.add_subcommand("embed", "sentence embeddings of a text or pair (or JSON lines {\"text\"} on stdin)");
  common(em, *e, "any BERT/ELECTRA Hugging Face model directory (config.json, model.safetensors, vocab.txt)");
  em->add_option("--text", e->texts, "the text; repeat for a batch (one JSON line out per --text)")
      ->allow_extra_args(false);
  em->add_option(flag("--text-pair"), e->text_pairs, "second text (one per --text)")->allow_extra_args(false);
  em->add_option("--pooling", e->pooling, "cls (default) | mean")->check(CLI::IsMember({"cls", "mean"}));
  em->callback([e]() { run_embed(*e); });
  auto fm = std::make_shared<InferCli>();
  auto* fmc = app.add_subcommand(
      "fill-mask", "predict the [MASK] tokens of a text with a pre-training checkpoint (or JSON lines on stdin)");
  common(fmc, *fm,
         "a masked-LM (pre-training) Hugging Face model directory (config.json, model.safetensors, vocab.txt)");
  fmc->add_option("--text", fm->texts,
                  "a text with one or more [MASK]; repeat for a batch (one JSON line out per --text)")
      ->allow_extra_args(false);
  fmc->add_option(flag("--top-k"), fm->top_k, "candidates per [MASK]")
      ->check(in_range(1, 1000, "candidates per [MASK], each a line of output"));
  fmc->callback([fm]() { run_fill_mask(*fm); });
}

}  // namespace bertcc::tools
