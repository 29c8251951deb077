// Text in, answers out, for the fine-tuned heads: question answering, sequence classification and
// token classification (tagging). Shared by the command-line inference (`bertcc qa|classify|tag`)
// and the server's /v1 endpoints; the logits come from a callback, so the server can batch many
// requests into one forward pass.
#pragma once
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bertcc/config.h"
#include "bertcc/error.h"
#include "bertcc/features.h"
#include "bertcc/tokenizer.h"

namespace bertcc {

// Logits of each feature, in order (Bert::head_logits' rows).
using LogitsFn = std::function<std::vector<std::vector<float>>(const std::vector<FtFeature>&)>;

struct TaskOptions {
  int max_seq_length = 0;  // 0: 384 for QA, 512 otherwise, capped by the model's positions
  int doc_stride = 128;
  int max_answer_length = 30;
  int max_position_embeddings = 512;
  int start_n_top = 0, end_n_top = 0;  // qa with the joint head: its beam widths (SquadDecodeOptions)
  int64_t max_response_bytes = 0;      // > 0: answers estimated larger are refused before the forward pass
  // qa, SQuAD v2.0: "" when no span beats the null score by more than the threshold
  bool version_2_with_negative = false;
  double null_score_diff_threshold = 0.0;
};

// fill-mask's largest top_k (Hugging Face's pipeline has none; each candidate is ~60 bytes of JSON).
constexpr int64_t kMaxTopK = 100;

// Thrown before any logits are computed when the answer (or, for fill-mask, the vocabulary logits
// of its masks) is estimated over TaskOptions::max_response_bytes; the server answers 413.
struct ResponseTooLarge : Error {
  using Error::Error;
};

// qa's decoding as the model in `model_dir` was fine-tuned: the joint head's beams, and a v2.0
// model's null answers with its recorded threshold (read_squad_null_answers, squad.h).
void qa_options_from_model(const std::string& model_dir, const BertConfig& c, bool beam_search, TaskOptions& o);

// Each input is a JSON object; a missing or mistyped field throws an Error naming "input N" (1-based
// position) and the field. An "id" field is echoed back. One result per input, in order.
//   qa:       {"question", "context"} -> {"answer", "score", "start", "end"} (character offsets); a v2.0
//             "no answer" is {"answer": "", "score": the null answer's probability (joint head:
//             sigmoid of the answer-class logit), "start": -1, "end": -1}
//   classify: {"text"[, "text_pair"]} -> {"label", "score", "scores"} or {"score"} for regression
//   tag:      {"text"}                -> {"words": [{"word","tag"}], "entities": [{"type","text","start","end"}]}
std::vector<nlohmann::ordered_json> answer_questions(const BertTokenizer& tok, const std::vector<nlohmann::json>& in,
                                                     const TaskOptions& o, const LogitsFn& logits);
std::vector<nlohmann::ordered_json> classify_texts(const BertTokenizer& tok, const std::vector<std::string>& labels,
                                                   const std::vector<nlohmann::json>& in, const TaskOptions& o,
                                                   const LogitsFn& logits);
std::vector<nlohmann::ordered_json> tag_texts(const BertTokenizer& tok, const std::vector<std::string>& labels,
                                              const std::vector<nlohmann::json>& in, const TaskOptions& o,
                                              const LogitsFn& logits);

// Sentence embeddings: {"text"[, "text_pair"][, "pooling": "cls" | "mean"]} -> {"embedding": [...],
// "pooling"}: the last hidden state of [CLS], or the mean over the sequence's tokens (special
// tokens included, padding excluded, as sentence-transformers' mean pooling). The logits callback
// gives, per feature, the [CLS] vector followed by the mean vector (predict_embeddings, inference.h).
std::vector<nlohmann::ordered_json> embed_texts(const BertTokenizer& tok, const std::vector<nlohmann::json>& in,
                                                const TaskOptions& o, const LogitsFn& vectors);
// Masked-token prediction: {"text" with one or more [MASK][, "top_k" (5, at most kMaxTopK and the
// vocabulary's size)]} -> {"masks": [[{"token",
// "token_id", "score"}, ...] per [MASK] in order]}; the callback gives, per feature, the vocabulary
// logits of each [MASK] position concatenated (predict_masked, inference.h).
std::vector<nlohmann::ordered_json> fill_masks(const BertTokenizer& tok, const std::vector<nlohmann::json>& in,
                                               const TaskOptions& o, const LogitsFn& logits);

}  // namespace bertcc
