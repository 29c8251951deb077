// Each head's spec, defined in its file in this directory (the registry, head.cpp, lists them).
#pragma once
#include "bertcc/head_spec.h"

namespace bertcc {

const HeadSpec& none_head();                      // none.cpp: BertModel / ElectraModel
const HeadSpec& pretraining_head();               // pretraining.cpp: BertForPreTraining (MLM + NSP)
const HeadSpec& question_answering_head();        // question_answering.cpp: BertForQuestionAnswering
const HeadSpec& joint_question_answering_head();  // joint_qa.cpp: the joint SQuAD head (XLNet, NVIDIA's ELECTRA)
const HeadSpec& sequence_classification_head();   // sequence_classification.cpp
const HeadSpec& token_classification_head();      // token_classification.cpp
const HeadSpec& discriminator_head();             // discriminator.cpp: ElectraForPreTraining
const HeadSpec& generator_head();                 // generator.cpp: ElectraForMaskedLM

}  // namespace bertcc
