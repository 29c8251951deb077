// One description per head (src/model/heads/, one file each), found through one registry: what
// the rest of bertcc asks about a head (its Hugging Face architecture, pooler, parameters, tasks,
// labels, outputs, ONNX graph and the tensors that mark it in a checkpoint) instead of switching on
// `Heads`, which remains the head's serialized name.
// The head's step (forward and backward) is made by `make` (src/model/head.h, private to the model).
#pragma once
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "bertcc/config.h"
#include "bertcc/heads.h"

namespace bertcc {

class Bert;
class Head;
class OnnxGraph;
class ParamTable;

// One output of the head's inference forward as ONNX export and serving (KServe/Triton) name it.
// Dimensions: kBatch, kSequence, or a fixed size.
struct HeadOutput {
  static constexpr int64_t kBatch = -1, kSequence = -2;
  std::string name;
  std::vector<int64_t> shape;
  bool int64 = false;  // INT64 (an index), else FP32
};

struct HeadSpec {
  Heads id;
  const char* name;                  // serialized name: dump-step --head, docs ("qa", "classify", ...)
  const char* architecture;          // the Hugging Face class of a BERT model with it
  const char* electra_architecture;  // ... of an ELECTRA model with it
  bool pooler;                       // BERT's pooler (bert.pooler.dense); ELECTRA never has one
  HeadLabels labels;                 // what its fine-tuning batches carry
  bool needs_labels;                 // the config needs num_labels / id2label
  // The task its logits answer (predict_logits: "qa", "classify", "tag"), or null: the encoder's
  // outputs are what it serves.
  const char* task;
  // What `bertcc serve` offers for a model directory with it (the first is the one its logits
  // answer when `task` is set), and the head it loads it with (ELECTRA's pre-training heads serve
  // their encoder).
  std::vector<std::string> serve_tasks;
  Heads serve_as;
  // config.json's architectures name it for architecture_heads (the fine-tuned heads and ELECTRA's
  // discriminator); the masked-LM heads read as the encoder there (fill-mask and pre-training
  // load them by name).
  bool by_architecture;
  // Inference without labels runs a beam search (the joint SQuAD head): its outputs are the beams'
  // (start_n_top, end_n_top from the config), and serving refuses rows shorter than the beams.
  bool beam_search;
  // The first parts of its tensors' names ("qa_outputs."): a checkpoint's tensor under one of them
  // is a head's, not the encoder's (not read as bert.*; left out when loading a model without it).
  std::vector<std::string> prefixes;
  // How convert recognises it in a checkpoint: the checkpoint holds every tensor of one of these
  // sets (Hugging Face names; the first head in registry order that matches, else the encoder). A
  // head that needs labels counts them as the rows of its first set's first tensor.
  std::vector<std::vector<std::string>> signature;
  // For check_model_dir_for: what a model with it is, the command that makes one, and what a
  // directory with it is when another head is wanted ("" : its architecture alone).
  const char* what;
  const char* make_command;
  const char* kind;
  // The head's parameters, added to the model's table after the encoder's (and the pooler's),
  // with Hugging Face names; refuses configs the head cannot have.
  void (*declare)(ParamTable& t, const BertConfig& c);
  // Its inference outputs, in order (empty: no ONNX export; the encoder's are served).
  std::vector<HeadOutput> (*outputs)(const BertConfig& c);
  // Its part of an ONNX export (bertcc/onnx_graph.h), `outputs` in that order included, from the
  // encoder's sequence output h [B, S, C] and the positions 0 .. S-1 [S]; null: no export.
  void (*onnx)(OnnxGraph& g, const std::string& h, const std::string& positions);
  // Its step: the weights bound once, forward and backward (src/model/head.h).
  std::unique_ptr<Head> (*make)(Bert& model);
};

// The head's spec; every Heads value has one.
const HeadSpec& head_spec(Heads h);
// Every head, in the order of `Heads`.
const std::vector<const HeadSpec*>& head_registry();
// By serialized name ("qa", "qa-joint", ...), or null.
const HeadSpec* head_by_name(const std::string& name);
// By Hugging Face architecture (BERT's names first, then ELECTRA's), or null.
const HeadSpec* head_by_architecture(const std::string& architecture);
// By a checkpoint's tensor names (HeadSpec::signature), or null: the encoder alone.
const HeadSpec* head_by_tensors(const std::set<std::string>& names);

}  // namespace bertcc
