// Which head a model carries: the head's serialized name. What the head is (its Hugging Face
// architecture, pooler, parameters, labels, outputs, tasks and step) is its HeadSpec
// (bertcc/head_spec.h; one file per head in src/model/heads/), found through head_spec(Heads).
#pragma once

namespace bertcc {

// None = BertModel; PreTraining = BertForPreTraining; the others are HF's BertForQuestionAnswering
// (qa_outputs on every token), BertForSequenceClassification (classifier on the dropped-out pooled
// output; regression when num_labels == 1) and BertForTokenClassification (classifier on every
// dropped-out token). QA and token classification have no pooler, as in HF (add_pooling_layer=False).
// Discriminator = HF's ElectraForPreTraining (replaced-token detection on every token; ELECTRA has
// no pooler).
// Generator = HF's ElectraForMaskedLM (pretrain_step without NSP).
// JointQuestionAnswering = the joint SQuAD head of XLNet and NVIDIA's ELECTRA (start_logits,
// end_logits conditioned on the start, answer_class for SQuAD 2.0) with beam search at inference.
enum class Heads {
  None,
  PreTraining,
  QuestionAnswering,
  JointQuestionAnswering,
  SequenceClassification,
  TokenClassification,
  Discriminator,
  Generator
};

// What a fine-tuning batch carries for a head (HeadSpec::labels; make_finetune_batch copies it
// from the features, told which by the caller, without asking the model).
enum class HeadLabels {
  None,      // the encoder alone
  Sequence,  // one label (or regression target) per row: labels [B] / targets [B]
  Token,     // one label per token, -100 ignored: labels [B*T]
  Span,      // start_positions [B], end_positions [B]
  MaskedLm,  // mlm_labels [B*T] (and nsp_labels [B] with NSP)
  Replaced   // replaced-token detection: labels [B*T] 0/1
};

}  // namespace bertcc
