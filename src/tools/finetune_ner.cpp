// bertcc finetune ner: CoNLL-2003 token classification (BertForTokenClassification). Each word's
// label sits on its first sub-token (the others are ignored, -100), as HF's run_ner; sentences
// longer than --max-seq-length are split between words, so every word gets a prediction.
#include <algorithm>
#include <iomanip>
#include <iostream>
#include <map>

#include "bertcc/error.h"
#include "bertcc/fileio.h"
#include "bertcc/inference.h"
#include "bertcc/ner.h"
#include "bertcc/token_classification.h"
#include "tools/finetune_common.h"

namespace bertcc::tools {
namespace {

void write_conll(const std::string& path, const std::vector<NerSentence>& sents,
                 const std::vector<std::vector<std::string>>& pred) {
  std::string out;
  for (size_t i = 0; i < sents.size(); ++i) {
    for (size_t j = 0; j < sents[i].words.size(); ++j) {
      out += sents[i].words[j];
      if (!sents[i].tags.empty()) out += " " + sents[i].tags[j];
      out += " " + pred[i][j] + "\n";
    }
    out += "\n";
  }
  if (is_lead()) write_file_atomic(path, out);
}

void run_ner(const FtCli& o) {
  FtSetup s = ft_setup(o);
  std::vector<NerSentence> train, dev;
  std::vector<std::string> labels;
  if (s.has("train")) {
    BERTCC_CHECK(!o.train_file.empty(), "--train-file is required with --mode train");
    train = read_conll(o.train_file);
    BERTCC_CHECK(!train[0].tags.empty(), o.train_file, ": no tag column");
    for (const auto& x : train) labels.insert(labels.end(), x.tags.begin(), x.tags.end());
    std::sort(labels.begin(), labels.end(), [](const std::string& a, const std::string& b) {
      return (a == "O") != (b == "O") ? a == "O" : a < b;  // "O" first, then sorted
    });
    labels.erase(std::unique(labels.begin(), labels.end()), labels.end());
  }
  auto model = ft_load_model(o, s, Heads::TokenClassification, labels);
  std::map<std::string, int32_t> index;
  for (size_t i = 0; i < labels.size(); ++i) index[labels[i]] = static_cast<int32_t>(i);
  NerFeatures dev_f;
  std::vector<std::vector<std::string>> gold;
  if (s.has("eval") || s.has("prediction")) {
    BERTCC_CHECK(!o.predict_file.empty(), "--predict-file is required with --mode eval/prediction");
    dev = read_conll(o.predict_file);
    for (const auto& x : dev) gold.push_back(x.tags);
    dev_f = ner_features(*s.tok, dev, index, false, o.max_seq_length, o.predict_file);
  }
  std::vector<std::vector<std::string>> dev_pred;  // the last evaluation's tags
  Evaluator eval = [&](Bert& m) {
    EvalResult r;
    BERTCC_CHECK(!dev.empty() && !dev[0].tags.empty(), o.predict_file, ": no tag column to evaluate against");
    dev_pred = ner_predict(m, dev_f, dev, labels, o.eval_batch_size, s.prec);
    r.metrics = ner_metrics(gold, dev_pred);
    r.score = r.metrics["f1"].get<double>();
    return r;
  };
  FinetuneResult trained;
  if (s.has("train")) {
    const NerFeatures tf = ner_features(*s.tok, train, index, true, o.max_seq_length, o.train_file);
    std::cerr << "ner: " << train.size() << " training sentences (" << tf.f.size() << " sequences), " << labels.size()
              << " tags\n";
    trained = finetune_or_find(*model, tf.f, s.has("eval") ? eval : Evaluator{}, o, s);
    if (trained.stopped) return;
  }
  // One pass over --predict-file: with eval, the final model's evaluation tagged it
  if (s.has("eval")) print_eval_metrics(final_eval(trained, eval, *model), o.output_dir, trained.last_eval.is_object());
  if (s.has("prediction")) {
    BERTCC_CHECK(!o.output_dir.empty(), "--output-dir is required with --mode prediction");
    const std::string path = join_path(o.output_dir, "predictions.txt");
    if (!s.has("eval")) dev_pred = ner_predict(*model, dev_f, dev, labels, o.eval_batch_size, s.prec);
    write_conll(path, dev, dev_pred);
    std::cerr << "wrote " << dev.size() << " sentences (word [gold] prediction) to " << path << "\n";
  }
}

}  // namespace

void add_finetune_ner(CLI::App* ft) {
  auto o = std::make_shared<FtCli>();
  auto* n = ft->add_subcommand("ner", "named-entity recognition on CoNLL-2003 files (IOB1 or IOB2), seqeval metrics");
  add_ft_flags(n, *o);
  n->add_option(flag("--train-file"), o->train_file, "CoNLL training file (e.g. iob2/train.txt or eng.train)");
  n->add_option(flag("--predict-file"), o->predict_file, "CoNLL file to evaluate (eval) or tag (prediction)");
  n->callback([o]() { run_ner(*o); });
}

}  // namespace bertcc::tools
