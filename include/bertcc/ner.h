// Named-entity recognition data and metrics: CoNLL-2003 files (IOB1 or IOB2; one token per line,
// tag in the last column, blank lines between sentences, -DOCSTART- lines skipped) and
// entity-level precision/recall/F1 exactly as seqeval computes them by default (conlleval chunk
// rules: an I- after O or after another type starts an entity, so IOB1 and IOB2 both work).
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace bertcc {

struct NerSentence {
  std::vector<std::string> words, tags;  // tags empty when the file has a single column
  int64_t line = 0;                      // first line of the sentence
};

std::vector<NerSentence> read_conll(const std::string& path);

struct Entity {
  std::string type;
  int64_t begin = 0, end = 0;  // inclusive, in the flattened sequence
  bool operator==(const Entity&) const = default;
};
// seqeval's get_entities over sentences flattened with an "O" after each.
std::vector<Entity> get_entities(const std::vector<std::vector<std::string>>& tags);

// {"precision", "recall", "f1", "accuracy", "entities", per type {"precision","recall","f1","support"}}
// as seqeval (micro average; 0 when a denominator is 0) and its token accuracy.
nlohmann::ordered_json ner_metrics(const std::vector<std::vector<std::string>>& gold,
                                   const std::vector<std::vector<std::string>>& pred);

// seqeval's classification_report of ner_metrics' result, character for character: a row per
// entity type (precision, recall, f1-score, support), then micro, macro and weighted averages,
// `digits` decimals.
std::string ner_classification_report(const nlohmann::ordered_json& metrics, int digits = 2);

}  // namespace bertcc
