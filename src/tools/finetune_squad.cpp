// bertcc finetune squad: NVIDIA's run_squad.py as a native command (SQuAD v1.1 and v2.0).
#include <cmath>
#include <iomanip>
#include <iostream>

#include "bertcc/dist.h"
#include "bertcc/error.h"
#include "bertcc/fileio.h"
#include "bertcc/head_spec.h"
#include "bertcc/inference.h"
#include "bertcc/model_dir.h"
#include "bertcc/squad.h"
#include "bertcc/squad_eval.h"
#include "tools/finetune_common.h"

namespace bertcc::tools {
namespace {

struct SquadCli {
  int doc_stride = 128, max_query_length = 64, n_best_size = 20, max_answer_length = 30;
  bool version_2_with_negative = false;
  double null_score_diff_threshold = 0.0;
  bool threshold_given = false;  // --null-score-diff-threshold was passed: it is the one recorded
  bool joint_head = false, no_joint_head = false;
  int beam_size = 0;
};

// BertForQuestionAnswering's qa_outputs, or the joint head with beam search (NVIDIA's ELECTRA
// default): a fine-tuned checkpoint keeps its head; a backbone gets the joint head if it is an
// ELECTRA model, unless the flags say otherwise.
Heads squad_head(const FtCli& o, const SquadCli& q) {
  BERTCC_CHECK(!(q.joint_head && q.no_joint_head), "--joint-head and --no-joint-head contradict each other");
  const Heads arch = architecture_heads(o.init_checkpoint);
  const HeadSpec& have = head_spec(arch);
  if (have.task && std::string(have.task) == "qa") {
    const bool joint = have.beam_search;
    BERTCC_CHECK(
        !(joint ? q.no_joint_head : q.joint_head), o.init_checkpoint, ": the model already has ",
        joint ? "the joint SQuAD head (start_logits/end_logits/answer_class)" : "BertForQuestionAnswering's qa_outputs",
        "; fine-tune a backbone to get the other head");
    return arch;
  }
  if (q.joint_head || q.no_joint_head) return q.joint_head ? Heads::JointQuestionAnswering : Heads::QuestionAnswering;
  return load_model_config(o.init_checkpoint).electra() ? Heads::JointQuestionAnswering : Heads::QuestionAnswering;
}

// A v2.0 model's folders record how they answer "": with the threshold of --null-score-diff-threshold
// if given, else the best_f1_thresh of the evaluation that chose each (the final model: the last
// evaluation; OUTPUT/best: the best one), else `fallback` (the init checkpoint's, or 0).
void record_null_answers(const std::string& out, const SquadCli& q, double fallback, const FinetuneResult& trained) {
  auto threshold_of = [&](const nlohmann::ordered_json& m) {
    if (q.threshold_given) return q.null_score_diff_threshold;
    return m.is_object() && m.contains("best_f1_thresh") ? m["best_f1_thresh"].get<double>() : fallback;
  };
  const double t = threshold_of(trained.last_eval);
  record_squad_null_answers(out, {true, t});
  const std::string best = join_path(out, "best");
  if (trained.best_eval.is_object() && file_exists(join_path(best, "config.json")))
    record_squad_null_answers(best, {true, threshold_of(trained.best_eval)});
  std::cerr << "squad: v2.0 model: answers \"\" when the null score beats the best span by more than " << t
            << (q.threshold_given                              ? " (--null-score-diff-threshold)"
                : trained.last_eval.contains("best_f1_thresh") ? " (best_f1_thresh of the last evaluation)"
                                                               : "")
            << ", recorded in " << join_path(out, "config.json") << "\n";
}

void run_squad(const FtCli& o, const SquadCli& q) {
  FtSetup s = ft_setup(o);
  std::vector<std::string> labels;
  const Heads heads = squad_head(o, q);
  auto model = ft_load_model(o, s, heads, labels);
  const bool joint = head_spec(heads).beam_search;
  BERTCC_CHECK(q.beam_size >= 0 && q.beam_size <= 64, "--beam-size must be in [1, 64]");
  BERTCC_CHECK(joint || q.beam_size == 0, "--beam-size is for the joint head (--joint-head)");
  if (joint) {
    const BertConfig& c = model->config();
    const int k1 = q.beam_size > 0 ? q.beam_size : c.start_beam();
    const int k2 = q.beam_size > 0 ? q.beam_size : c.end_beam();
    model->set_joint_beam(k1, k2);
    std::cerr << "squad: joint head (start, end given the start, answer class), beam search " << k1 << " starts x "
              << k2 << " ends\n";
  }
  SquadFeatureOptions fo;
  fo.max_seq_length = o.max_seq_length;
  fo.doc_stride = q.doc_stride;
  fo.max_query_length = q.max_query_length;
  const bool predicting = s.has("eval") || s.has("prediction");
  std::vector<SquadExample> dev;
  SquadFeatures dev_f;
  // A fine-tuned v2.0 model answers "" by its recorded threshold unless the flags say otherwise.
  const SquadNullAnswers recorded = read_squad_null_answers(o.init_checkpoint);
  bool v2 = q.version_2_with_negative || recorded.version_2_with_negative;
  BERTCC_CHECK(std::isfinite(q.null_score_diff_threshold), "--null-score-diff-threshold must be finite");
  const double threshold = q.threshold_given                  ? q.null_score_diff_threshold
                           : recorded.version_2_with_negative ? recorded.null_score_diff_threshold
                                                              : 0.0;
  if (predicting) {
    BERTCC_CHECK(!o.predict_file.empty(), "--predict-file is required with --mode eval/prediction");
    BERTCC_CHECK(!o.output_dir.empty(), "--output-dir is required for predictions");
    bool file_v2 = false;
    dev = read_squad(o.predict_file, false, &file_v2);
    v2 = v2 || file_v2;
    dev_f = squad_features(*s.tok, dev, fo, false);
    std::cerr << "squad: " << dev.size() << " questions to answer (" << dev_f.windows.size() << " windows)"
              << (v2 ? ", v2.0 (null answers)" : "") << "\n";
  }
  SquadDecodeOptions dop;
  dop.n_best_size = q.n_best_size;
  dop.max_answer_length = q.max_answer_length;
  dop.v2 = v2;
  dop.null_score_diff_threshold = threshold;
  if (joint) {
    dop.start_n_top = model->config().start_n_top;
    dop.end_n_top = model->config().end_n_top;
  }
  auto predict = [&](Bert& m) {
    const auto logits = predict_logits(m, dev_f.inputs, o.eval_batch_size, s.prec);
    const SquadOutput out = squad_decode(*s.tok, dev, dev_f, logits, dop);
    if (is_lead()) {
      write_file_atomic(join_path(o.output_dir, "predictions.json"), out.predictions.dump(2) + "\n");
      write_file_atomic(join_path(o.output_dir, "nbest_predictions.json"), out.nbest.dump(2) + "\n");
      if (v2) write_file_atomic(join_path(o.output_dir, "null_odds.json"), out.null_odds.dump(2) + "\n");
    }
    dist::world().barrier();  // every rank scores the file rank 0 has just written
  };
  // v2.0: the official script's best thresholds too (best_f1_thresh is what a training run records)
  Evaluator eval = [&](Bert& m) {
    predict(m);
    EvalResult r;
    r.metrics = evaluate_squad(o.predict_file, join_path(o.output_dir, "predictions.json"),
                               v2 ? join_path(o.output_dir, "null_odds.json") : "");
    r.score = r.metrics["f1"].get<double>();
    return r;
  };
  FinetuneResult trained;
  if (s.has("train")) {
    BERTCC_CHECK(!o.train_file.empty(), "--train-file is required with --mode train");
    int64_t skipped = 0;
    bool tv2 = false;
    const auto ex = read_squad(o.train_file, true, &tv2, &skipped);
    const auto tf = squad_features(*s.tok, ex, fo, true);
    std::cerr << "squad: " << ex.size() << " training questions (" << skipped
              << " skipped: answer not found in the context), " << tf.inputs.size() << " windows\n";
    v2 = v2 || tv2;
    dop.v2 = v2;
    trained = finetune_or_find(*model, tf.inputs, s.has("eval") ? eval : Evaluator{}, o, s);
    if (trained.stopped) return;
    if (v2 && is_lead()) record_null_answers(o.output_dir, q, threshold, trained);
  }
  // One pass over --predict-file: the evaluation at the end of training gave the final model's
  // metrics and wrote its predictions
  if (s.has("eval"))
    print_eval_metrics(final_eval(trained, eval, *model), o.output_dir, trained.last_eval.is_object());
  else if (s.has("prediction"))
    predict(*model);
  if (predicting)
    std::cerr << "wrote " << join_path(o.output_dir, "predictions.json") << ", nbest_predictions.json"
              << (v2 ? ", null_odds.json" : "") << "\n";
}

}  // namespace

void add_finetune_squad(CLI::App* ft) {
  auto o = std::make_shared<FtCli>();
  auto q = std::make_shared<SquadCli>();
  o->max_seq_length = 384;
  o->learning_rate = 3e-5f;
  o->num_train_epochs = 2.0;
  o->train_batch_size = 32;
  o->eval_batch_size = 16;  // 384-token windows: keeps the activation arena near 1 GB for bert-base
  auto* c = ft->add_subcommand("squad", "SQuAD v1.1 / v2.0 question answering (run_squad.py)");
  add_ft_flags(c, *o);
  c->add_option(flag("--train-file"), o->train_file, "train-v1.1.json / train-v2.0.json");
  c->add_option(flag("--predict-file"), o->predict_file, "dev-v1.1.json / dev-v2.0.json (answered and evaluated)");
  c->add_option(flag("--doc-stride"), q->doc_stride, "stride between context windows (default 128)")
      ->check(in_range(1, 1 << 20, "tokens between windows"));
  c->add_option(flag("--max-query-length"), q->max_query_length, "question tokens kept (default 64)")
      ->check(in_range(1, 4096, "tokens, within --max-seq-length"));
  c->add_option(flag("--n-best-size"), q->n_best_size, "candidates per question (default 20)")
      ->check(in_range(1, 1000, "candidates held per question"));
  c->add_option(flag("--max-answer-length"), q->max_answer_length, "longest answer in tokens (default 30)")
      ->check(in_range(1, 1 << 16, "tokens"));
  c->add_flag(flag("--version-2-with-negative"), q->version_2_with_negative,
              "SQuAD 2.0: allow null answers (also detected from is_impossible in the data)");
  c->add_option(flag("--null-score-diff-threshold"), q->null_score_diff_threshold,
                "predict null when null score - best non-null score > this (joint head: when the answer-class "
                "logit > this) (default: the model's recorded one, else 0.0; training records the evaluation's "
                "best_f1_thresh)")
      ->check(in_range(-1e30, 1e30, "a score difference"));
  c->add_flag(flag("--joint-head"), q->joint_head,
              "the joint head of NVIDIA's ELECTRA / XLNet (start, end given the start, answer class) with beam "
              "search; default for ELECTRA backbones");
  c->add_flag(flag("--no-joint-head"), q->no_joint_head, "BertForQuestionAnswering's qa_outputs (default for BERT)");
  c->add_option(flag("--beam-size"), q->beam_size,
                "joint head: start positions kept and ends per start (NVIDIA's --beam_size; default 4)")
      ->check(in_range(0, 64, "start positions and ends per start, as the config's start_n_top; 0 = 4"));
  c->callback([o, q, c]() {
    const CLI::Option* t = c->get_option_no_throw("--null-score-diff-threshold");  // (not under lr-find)
    q->threshold_given = t && t->count() > 0;
    run_squad(*o, *q);
  });
}

}  // namespace bertcc::tools
