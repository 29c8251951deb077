// WordPiece vocabulary training (as Hugging Face's WordPieceTrainer: BPE merges over words split
// into a first character and "##"-prefixed continuation characters). Deterministic: ties between
// equally frequent pairs go to the lexicographically smaller (left, right) pair.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace bertcc {

struct VocabTrainerOptions {
  int64_t vocab_size = 30522;
  int64_t min_frequency = 2;      // pairs seen fewer times are never merged
  int64_t limit_alphabet = 1000;  // most frequent characters kept (each as "c" and "##c")
  int64_t num_unused = 99;        // [unused*] slots after [PAD] (BERT: [PAD], [unused0..98], [UNK] = 100)
};

// word -> count, from basic tokenization of a corpus.
using WordCounts = std::unordered_map<std::string, int64_t>;

// Returns the vocabulary in BERT's layout: [PAD], [unused0..], [UNK], [CLS], [SEP], [MASK],
// alphabet (by frequency), then merged pieces in merge order.
std::vector<std::string> train_wordpiece(const WordCounts& words, const VocabTrainerOptions& o);

}  // namespace bertcc
