// BERT configuration: Hugging Face config.json keys (Google's bert_config.json accepted).
#pragma once
#include <string>
#include <vector>

namespace bertcc {

enum class Activation { GeluErf, GeluTanh };

struct BertConfig {
  int vocab_size = 30522;
  int hidden_size = 768;
  int num_hidden_layers = 12;
  int num_attention_heads = 12;
  int intermediate_size = 3072;
  std::string hidden_act = "gelu";
  float hidden_dropout_prob = 0.1f;
  float attention_probs_dropout_prob = 0.1f;
  int max_position_embeddings = 512;
  int type_vocab_size = 2;
  float initializer_range = 0.02f;
  float layer_norm_eps = 1e-12f;  // BERT's value; never 1e-5
  // ELECTRA (HF ElectraConfig): model_type "electra" names tensors electra.*, has no pooler, and
  // its embeddings may be narrower than the encoder (embedding_size, projected by
  // electra.embeddings_project). 0 = hidden_size (BERT).
  std::string model_type = "bert";
  int embedding_size = 0;
  // Fine-tuning heads (HF keys): id2label gives the label names in id order (num_labels = its size;
  // 1 = regression); classifier_dropout < 0 means "use hidden_dropout_prob", as HF's null.
  std::vector<std::string> id2label;
  float classifier_dropout = -1.0f;
  std::string finetuning_task;
  // The joint SQuAD head (XLNet's / NVIDIA ELECTRA's beam search): start positions kept, ends kept
  // per start (config keys as XLNet's; 0 = not set, 4 used).
  int start_n_top = 0, end_n_top = 0;

  int start_beam() const { return start_n_top > 0 ? start_n_top : 4; }
  int end_beam() const { return end_n_top > 0 ? end_n_top : 4; }
  int num_labels() const { return static_cast<int>(id2label.size()); }
  float head_dropout() const { return classifier_dropout >= 0 ? classifier_dropout : hidden_dropout_prob; }

  Activation activation() const;
  int head_size() const { return hidden_size / num_attention_heads; }
  int embedding_dim() const { return embedding_size > 0 ? embedding_size : hidden_size; }
  bool electra() const { return model_type == "electra"; }
  void validate(const std::string& where) const;  // throws naming the field
};

// About how many weights a model of this config holds (an upper estimate: embeddings, layers and
// the largest heads), for the memory check made before its parameter table is built.
double estimated_parameters(const BertConfig& c);
// Reads config.json (or bert_config.json); errors name the file and the field.
BertConfig load_config(const std::string& path);
// Writes HF-layout config.json (model_type bert, architectures) atomically.
void save_config(const BertConfig& c, const std::string& path, const std::string& architecture);
// Presets: bert-tiny, bert-mini, bert-small, bert-medium, bert-base, bert-large; ELECTRA
// discriminators electra-small, electra-base, electra-large (Google's sizes). Or a path.
BertConfig config_from_name_or_path(const std::string& name_or_path);
// The presets' names, comma-separated, for messages ("bert-tiny, bert-mini, ..., electra-large").
std::string config_preset_names();

}  // namespace bertcc
