// SQuAD v1.1/v2.0 for BertForQuestionAnswering, following Google's run_squad.py: whitespace
// tokens of the context with a character-to-word map, sub-token <-> word alignment, the answer
// span improved to match the tokenized answer, sliding windows of --doc-stride over long contexts
// with the "max context" rule, then n-best decoding with get_final_text (the answer recovered
// from the original context) and, for v2.0, the null answer with --null-score-diff-threshold.
// Python works in code points; so does this code where offsets matter.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bertcc/features.h"
#include "bertcc/tokenizer.h"

namespace bertcc {

struct SquadExample {
  std::string id, question, context;
  std::vector<std::string> doc_tokens;  // whitespace-separated words of the context
  std::vector<size_t> word_byte_begin;  // byte offset of each word in `context`
  bool impossible = false;
  int start_word = -1, end_word = -1;  // training: the first answer's words
  std::string answer_text;             // training: the first answer's text
};

// Google's whitespace split of a context (" ", \t, \r, \n, U+202F).
SquadExample make_squad_example(std::string id, std::string question, std::string context);

// Reads a SQuAD JSON file. `training`: the first answer gives the span, and examples whose answer
// text cannot be found in the context are skipped and counted in *skipped (Google's warning).
// *v2 is set when any question has is_impossible.
std::vector<SquadExample> read_squad(const std::string& path, bool training, bool* v2 = nullptr,
                                     int64_t* skipped = nullptr);

// What decoding needs to know about one window besides its tokens.
struct SquadWindow {
  size_t example = 0;
  int32_t doc_offset = 0;              // position of the first context token
  std::vector<int32_t> token_to_orig;  // per position in the span part: word index (others -1)
  std::vector<uint8_t> max_context;    // per position: this window is the word piece's best context
};

// Windows in two parallel lists: the model inputs ([CLS] query [SEP] doc-span [SEP], with
// start/end when training) go straight to the trainer and predictor; `windows[i]` describes
// `inputs[i]` for decoding.
struct SquadFeatures {
  std::vector<FtFeature> inputs;
  std::vector<SquadWindow> windows;
};

struct SquadFeatureOptions {
  int max_seq_length = 384, doc_stride = 128, max_query_length = 64;
};
SquadFeatures squad_features(const BertTokenizer& tok, const std::vector<SquadExample>& ex,
                             const SquadFeatureOptions& o, bool training);

struct SquadDecodeOptions {
  int n_best_size = 20, max_answer_length = 30;
  bool v2 = false;
  double null_score_diff_threshold = 0.0;
  // > 0: the results are the joint head's beams (Bert::finetune_step, start_n_top x end_n_top),
  // decoded as NVIDIA's ELECTRA get_answers with joint_head: candidates are the valid beam spans
  // scored by start + end log-probability; for v2.0 the null score is the smallest answer-class
  // logit over the question's windows, and null is predicted when it exceeds the threshold.
  int start_n_top = 0, end_n_top = 0;
};
struct SquadOutput {
  nlohmann::ordered_json predictions, nbest, null_odds;  // id -> text / n-best list / score diff
  std::vector<int64_t> answer_byte_begin;  // per example: byte offset of the answer in the context (-1 if none)
};
// `logits[i]` holds window i's [T,2] (start, end) logits for at least its tokens (joint head: its
// joint_qa_output_size beam floats).
SquadOutput squad_decode(const BertTokenizer& tok, const std::vector<SquadExample>& ex, const SquadFeatures& feats,
                         const std::vector<std::vector<float>>& logits, const SquadDecodeOptions& o);

// SQuAD 2.0's "no answer" as a fine-tuned model folder records it, in config.json under
// run_squad.py's flag names (Hugging Face keeps keys it does not know): a v2.0 model answers ""
// when no span beats the null score by more than the threshold.
struct SquadNullAnswers {
  bool version_2_with_negative = false;
  double null_score_diff_threshold = 0.0;
};
// What DIR/config.json records (nothing recorded: v1.1); errors name the file and the key.
SquadNullAnswers read_squad_null_answers(const std::string& model_dir);
// Adds the two keys to DIR/config.json (rewritten atomically, its other keys as they were).
void record_squad_null_answers(const std::string& model_dir, const SquadNullAnswers& r);

// Google's get_final_text: maps the de-tokenized prediction back onto the original words.
std::string get_final_text(const BertTokenizer& tok, const std::string& pred_text, const std::string& orig_text);

}  // namespace bertcc
