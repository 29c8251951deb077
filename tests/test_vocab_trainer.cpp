#include <gtest/gtest.h>

#include <algorithm>

#include "bertcc/tokenizer.h"
#include "bertcc/vocab_trainer.h"

using namespace bertcc;

TEST(VocabTrainer, LayoutMergesAndCoverage) {
  WordCounts w{{"low", 5}, {"lower", 2}, {"newest", 6}, {"widest", 3}};
  VocabTrainerOptions o;
  o.vocab_size = 5 + 4 + 40;  // [PAD] + 4 unused + 4 specials + room
  o.num_unused = 4;
  o.min_frequency = 2;
  const auto v = train_wordpiece(w, o);
  ASSERT_GE(v.size(), 9u);
  EXPECT_EQ(v[0], "[PAD]");
  EXPECT_EQ(v[1], "[unused0]");
  EXPECT_EQ(v[5], "[UNK]");
  EXPECT_EQ(v[8], "[MASK]");
  auto has = [&](const std::string& s) { return std::find(v.begin(), v.end(), s) != v.end(); };
  // The most frequent pair is ("##e","##s") (6+3 = 9 times in newest/widest), then ("##es","##t").
  const auto first_learned = std::find_if(v.begin() + 9, v.end(), [](const std::string& s) {
    return s.size() > 3 && s.compare(0, 2, "##") == 0 && s.size() > 3;
  });
  ASSERT_NE(first_learned, v.end());
  EXPECT_EQ(*first_learned, "##es");
  EXPECT_TRUE(has("##est"));
  EXPECT_TRUE(has("low"));
  // Every training word tokenizes without [UNK] with the learned vocabulary.
  const Vocab vocab = Vocab::from_tokens(v, "trained");
  BertTokenizer t(vocab, true);
  for (const auto& [word, c] : w)
    for (int32_t id : t.encode(word)) EXPECT_NE(id, vocab.unk_id()) << word;
  // Deterministic.
  EXPECT_EQ(train_wordpiece(w, o), v);
}

TEST(VocabTrainer, StopsAtVocabSizeAndMinFrequency) {
  WordCounts w{{"abcabc", 1}, {"xyz", 1}};
  VocabTrainerOptions o;
  o.num_unused = 0;
  o.vocab_size = 1000;
  o.min_frequency = 2;  // every pair occurs once (abcabc has "##a","##b" ... once each except ##b##c twice)
  const auto v = train_wordpiece(w, o);
  o.vocab_size = 12;
  EXPECT_EQ(train_wordpiece(w, o).size(), 12u);
  EXPECT_LT(v.size(), 1000u);
}
