// Hugging Face model directories: config.json (or Google's bert_config.json),
// model.safetensors with HF names, vocab.txt.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "bertcc/bert.h"
#include "bertcc/tokenizer.h"

namespace bertcc {

// Loads config and weights. Accepts: names with or without the "bert." prefix, legacy
// LayerNorm gamma/beta, a missing tied cls.predictions.decoder.weight, an optional
// cls.predictions.decoder.bias. Unknown or missing tensors and shape mismatches throw,
// naming the tensor. Pre-training head tensors are skipped (with a note) when heads == None.
// Tensors of other heads (cls.*, the pooler, qa_outputs, classifier) are skipped with a note.
// `fresh` starts a fine-tuning run: the config gets these labels, every tensor is first initialised
// from `seed`, and head tensors the checkpoint lacks (or has with another shape) stay initialised.
struct NewHeads {
  std::vector<std::string> id2label;
  std::string task;
  uint64_t seed = 0;
};
std::unique_ptr<Bert> load_model_dir(const std::string& dir, Heads heads, const NewHeads* fresh = nullptr);
// A model for inference alone on the CPU in `prec`: load_model_dir, then keep_int8_weights_only
// (int8) or keep_packed_weights_only (fp32, bf16), with each encoder linear layer quantized or
// packed as soon as it is read and its fp32 pages given back then (int8, fp32: Bert's
// prepare_inference_load), so the load's peak memory is about the model it keeps, not the fp32
// model beside it. The same weights, bit for bit, as loading first and keeping after.
std::unique_ptr<Bert> load_model_dir_for_inference(const std::string& dir, Heads heads, Precision prec);
BertConfig load_model_config(const std::string& dir);
// The fine-tuning head config.json's "architectures" names: BertForQuestionAnswering,
// BertForSequenceClassification, BertForTokenClassification; anything else (BertModel,
// BertForPreTraining, BertForMaskedLM, none) is Heads::None, the encoder alone.
Heads architecture_heads(const std::string& dir);
// config.json's first "architectures" entry ("" when there is none).
std::string architecture_of(const std::string& dir);
// Refuses, saying what to do, a model directory `command` ("qa", "classify", "finetune squad --mode
// eval", ...) cannot use: one that does not exist ("model directory 'X' does not exist"), that is not
// a directory, or whose config.json names an architecture with another head than `want` (e.g. qa on
// a BertForSequenceClassification: the message names the command that makes a question-answering
// model). Heads::None (any encoder) and a config.json without "architectures" pass.
void check_model_dir_for(const std::string& dir, Heads want, const std::string& command);
// `path`: model.safetensors, or a PyTorch checkpoint (pytorch_model.bin, NVIDIA's {'model': ...}),
// read without running its pickle. NVIDIA's names (module., dense_act) and its vocabulary padded
// to a multiple of 8 are accepted. A directory without model.safetensors is read from
// pytorch_model.bin.
void load_weights(Bert& model, const std::string& path, bool new_heads = false);

// Writes config.json, model.safetensors (F32, HF names) and, if given, a copy of vocab.txt with the
// tokenizer files AutoTokenizer reads (write_tokenizer_files). `lower_case` unset: guessed from the
// vocabulary (Vocab::looks_uncased), as the inference commands do.
void save_model_dir(const Bert& model, const std::string& dir, const std::string& vocab_path = "",
                    std::optional<bool> lower_case = std::nullopt);

// tokenizer_config.json, special_tokens_map.json and tokenizer.json (the fast tokenizer) for `vocab`,
// so that AutoTokenizer.from_pretrained(dir) gives bertcc's ids.
void write_tokenizer_files(const std::string& dir, const Vocab& vocab, bool lower_case, int model_max_length);
// A model directory's lower-casing: tokenizer_config.json's do_lower_case when present, else guessed
// from the vocabulary.
bool model_dir_lower_case(const std::string& dir, const Vocab& vocab);

// Canonical HF name for a stored name ("" if it is a buffer we ignore, e.g. position_ids).
std::string canonical_param_name(const std::string& stored);

}  // namespace bertcc
