// GLUE: TSV readers as GLUE ships the files (TAB-separated, quoting off, UTF-8 BOM tolerated,
// header or none, missing final newline) and the official metrics.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace bertcc {

struct GlueExample {
  std::string text_a, text_b, label;  // label empty for test files
};

// Labelled files (train, dev) or unlabelled test files, which GLUE lays out differently (other
// columns, always a header row).
enum class GlueSplit { Labelled, Test };

// task: cola, sst-2, mrpc, sts-b, qqp, mnli, mnli-mm, qnli, rte, wnli (case-insensitive).
// Errors name the file and line.
std::vector<GlueExample> read_glue(const std::string& task, const std::string& path,
                                   GlueSplit split = GlueSplit::Labelled);

// Canonical task name (cola, sst-2, mrpc, sts-b, qqp, mnli, qnli, rte, wnli).
std::string glue_task(const std::string& task);
// Label names in id order as the GLUE files spell them; empty for STS-B (regression).
std::vector<std::string> glue_labels(const std::string& task);
// The metric that ranks models: mcc (CoLA), corr (STS-B: mean of Pearson and Spearman),
// acc_and_f1 (MRPC, QQP), acc (the rest).
std::string glue_primary_metric(const std::string& task);
// Submission file stem: CoLA, SST-2, MRPC, STS-B, QQP, MNLI-m / MNLI-mm, QNLI, RTE, WNLI.
std::string glue_submission_name(const std::string& task, bool mismatched);

// Metrics over parallel vectors (labels as given in the files; STS-B as numbers).
double glue_accuracy(const std::vector<std::string>& pred, const std::vector<std::string>& gold);
double glue_f1(const std::vector<std::string>& pred, const std::vector<std::string>& gold, const std::string& positive);
double matthews_corrcoef(const std::vector<std::string>& pred, const std::vector<std::string>& gold,
                         const std::string& positive);
double pearson(const std::vector<double>& x, const std::vector<double>& y);
double spearman(const std::vector<double>& x, const std::vector<double>& y);  // average ranks for ties

// The task's official metrics: CoLA mcc; SST-2/QNLI/RTE/WNLI/MNLI acc; MRPC/QQP acc+f1; STS-B
// pearson+spearman.
nlohmann::ordered_json glue_metrics(const std::string& task, const std::vector<std::string>& pred,
                                    const std::vector<std::string>& gold);

}  // namespace bertcc
