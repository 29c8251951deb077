// bertcc serve's models: each --model directory loaded with its tokenizer, the tasks its head
// serves and a batcher per task, and the KServe view of its head's outputs.
#pragma once
#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "bertcc/head_spec.h"
#include "bertcc/inference.h"
#include "bertcc/tasks.h"
#include "serve/batcher.h"
#include "serve/metrics.h"
#include "serve/server.h"

namespace bertcc::serve {

struct Model {
  std::string name, dir;
  std::vector<std::string> tasks;  // qa | classify | tag | embed | fill-mask
  Heads heads = Heads::None;
  std::unique_ptr<Vocab> vocab;
  std::unique_ptr<BertTokenizer> tok;
  std::unique_ptr<Bert> bert;
  TaskOptions topt;
  std::map<std::string, std::unique_ptr<Batcher>> batchers;  // per task (their forward passes differ)
  bool does(const std::string& t) const { return std::find(tasks.begin(), tasks.end(), t) != tasks.end(); }
  Batcher& batcher(const std::string& t) { return *batchers.at(t); }
  const HeadSpec& head() const { return head_spec(heads); }
  bool has_head() const { return head().task != nullptr; }  // its logits answer its task
  bool has_pooler() const { return bert->table().find("bert.pooler.dense.weight") != nullptr; }
};

// Loads `spec` (DIR or NAME=DIR) with a batcher per task, all computing on `be` under `device`.
std::unique_ptr<Model> load(const std::string& spec, const ServeOptions& o, Precision prec, Metrics& m,
                            std::mutex& device, Backend& be);

struct OutTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;
  std::vector<int64_t> idata{};  // INT64 outputs (the joint head's beam indices) instead of data
};

// The model's KServe metadata (GET /v2/models/NAME): its inputs and its head's outputs.
nlohmann::ordered_json model_metadata(const Model& m);

// A task head's outputs (HeadSpec::outputs) from its logits rows, as an ONNX BERT under Triton
// names them: each row of predict_logits is the outputs' values one after another, per token
// (every token's values of each output in turn: QA's start and end, a tagger's K) when the outputs
// have a sequence dimension (padded positions hold 0), else per row (a classifier's K, the joint
// head's beams); INT64 outputs carry indices as floats.
std::vector<OutTensor> head_outputs(const std::vector<HeadOutput>& spec, const std::vector<std::vector<float>>& logits,
                                    const std::vector<int64_t>& len, int64_t B, int64_t S);

}  // namespace bertcc::serve
