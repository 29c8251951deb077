// Fine-tuning data order: Hugging Face's length-grouped sampling.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "bertcc/finetune.h"
#include "bertcc/rng.h"

using namespace bertcc;

// Worked by hand from transformers' get_length_grouped_indices: n = 10, batch 1 -> mega-batches of
// min(10 / 4, 50) = 2; each sorted by length, longest first, ties in shuffled order; the longest
// example (9, in the fourth mega-batch) is swapped to the front.
TEST(LengthGroupedOrder, MatchesHuggingFaceByHand) {
  std::vector<size_t> shuffled(10);
  std::iota(shuffled.begin(), shuffled.end(), size_t{0});
  const std::vector<size_t> lengths = {3, 8, 7, 7, 7, 1, 9, 4, 0, 5};
  const std::vector<size_t> expect = {6, 0, 2, 3, 4, 5, 1, 7, 9, 8};
  EXPECT_EQ(length_grouped_order(shuffled, lengths, 1), expect);
  // Fewer than 4 batches' worth of examples: mega-batches of one batch.
  // mega = max(1, min(10 / 12, 50)) * 3 = 3: [0 1 2] -> [1 2 0]; [3 4 5] -> [3 4 5]; [6 7 8] -> [6 7 8];
  // [9] -> [9]; the longest (9, index 6) heads the third mega-batch and is swapped to the front.
  EXPECT_EQ(length_grouped_order(shuffled, lengths, 3), (std::vector<size_t>{6, 2, 0, 3, 4, 5, 1, 7, 8, 9}));
}

TEST(LengthGroupedOrder, PermutationLongestFirstSortedMegaBatches) {
  const size_t n = 1001;
  const int64_t bs = 8;
  std::vector<size_t> lengths(n), shuffled(n);
  for (size_t i = 0; i < n; ++i) lengths[i] = 8 + splitmix64(i) % 377;
  std::iota(shuffled.begin(), shuffled.end(), size_t{0});
  for (size_t i = n; i > 1; --i) std::swap(shuffled[i - 1], shuffled[splitmix64(1000 + i) % i]);
  const auto out = length_grouped_order(shuffled, lengths, bs);
  auto sorted = out;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(sorted[i], i);
  EXPECT_EQ(lengths[out[0]], *std::max_element(lengths.begin(), lengths.end()));
  const size_t m = 31 * bs;  // min(1001 / 32, 50) = 31 batches per mega-batch
  for (size_t m0 = 0; m0 < n; m0 += m)
    for (size_t i = m0 + 2; i < std::min(n, m0 + m); ++i)  // position m0 may hold the swapped-in maximum
      ASSERT_GE(lengths[out[i - 1]], lengths[out[i]]) << "mega-batch at " << m0 << ", position " << i;
  // Grouping cuts padding: summed batch maxima well below those of the shuffled order.
  auto padded = [&](const std::vector<size_t>& order) {
    size_t t = 0;
    for (size_t b = 0; b < n; b += bs) {
      size_t mx = 0;
      for (size_t i = b; i < std::min(n, b + bs); ++i) mx = std::max(mx, lengths[order[i]]);
      t += mx;
    }
    return t;
  };
  EXPECT_LT(padded(out) * 10, padded(shuffled) * 7);
}
