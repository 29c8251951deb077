// SQuAD evaluation exactly as the official evaluate-v1.1.py and evaluate-v2.0.py compute it.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

namespace bertcc {

// The official normalisation: lower-case, drop ASCII punctuation, drop the words a/an/the,
// collapse whitespace (Python's str.split semantics).
std::string squad_normalize(const std::string& s);

// v1.1: {"exact_match", "f1"}. v2.0 (a dataset with is_impossible): exact, f1, total, HasAns_*,
// NoAns_*, and with na_probs also best_exact(_thresh), best_f1(_thresh). `na_prob_thresh` as the
// official --na-prob-thresh (default 1.0). Errors name the file.
nlohmann::ordered_json evaluate_squad(const std::string& data_path, const std::string& predictions_path,
                                      const std::string& na_prob_path = "", double na_prob_thresh = 1.0);

}  // namespace bertcc
