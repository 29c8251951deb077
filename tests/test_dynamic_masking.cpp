#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>

#include "bertcc/dynamic_masking.h"

using namespace bertcc;

namespace {
UnmaskedShard shard(int64_t N, int64_t S) {
  UnmaskedShard s;
  s.N = N;
  s.S = S;
  for (int64_t r = 0; r < N; ++r) {
    const int64_t len = 8 + (r * 7) % (S - 8);
    for (int64_t t = 0; t < S; ++t) {
      const bool in = t < len;
      const int32_t id = !in ? 0
                             : (t == 0                           ? 101
                                : (t == len / 2 || t == len - 1) ? 102
                                                                 : 1000 + int32_t((r * 31 + t) % 500));
      s.input_ids.push_back(id);
      s.input_mask.push_back(in);
      s.segment_ids.push_back(in && t > len / 2);
    }
    s.next_sentence_labels.push_back(int32_t(r % 2));
    s.lengths.push_back(int32_t(len));
  }
  return s;
}
MaskingOptions opts() {
  MaskingOptions o;
  o.vocab_size = 30522;
  o.cls_id = 101;
  o.sep_id = 102;
  o.mask_id = 103;
  return o;
}
}  // namespace

TEST(DynamicMasking, GoogleRatesNeverSpecialsDeterministicPerEpoch) {
  const UnmaskedShard s = shard(400, 64);
  DynamicMasker m(opts(), 7);
  std::vector<int64_t> rows(s.N);
  std::iota(rows.begin(), rows.end(), 0);
  const BertBatch b0 = m.make_batch(s, rows, 0), b0again = m.make_batch(s, rows, 0), b1 = m.make_batch(s, rows, 1);
  EXPECT_EQ(b0.input_ids, b0again.input_ids);
  EXPECT_EQ(b0.mlm_labels, b0again.mlm_labels);
  EXPECT_NE(b0.mlm_labels, b1.mlm_labels);  // new masks each epoch
  int64_t masked = 0, as_mask = 0, kept = 0;
  for (int64_t r = 0; r < s.N; ++r) {
    int64_t n = 0;
    const int64_t len = s.lengths[r];
    for (int64_t t = 0; t < s.S; ++t) {
      const size_t k = size_t(r * s.S + t);
      if (b0.mlm_labels[k] < 0) {
        EXPECT_EQ(b0.input_ids[k], s.input_ids[k]);
        continue;
      }
      ++n;
      EXPECT_LT(t, len);
      EXPECT_NE(s.input_ids[k], 101);
      EXPECT_NE(s.input_ids[k], 102);
      EXPECT_EQ(b0.mlm_labels[k], s.input_ids[k]);
      as_mask += b0.input_ids[k] == 103;
      kept += b0.input_ids[k] == s.input_ids[k];
    }
    const double want = std::nearbyint(len * 0.15);  // round half even (default rounding mode)
    EXPECT_EQ(n, std::min<int64_t>(20, std::max<int64_t>(1, int64_t(want))));
    masked += n;
  }
  EXPECT_NEAR(double(as_mask) / masked, 0.8, 0.03);
  EXPECT_NEAR(double(kept) / masked, 0.1, 0.03);
  EXPECT_NO_THROW(b0.validate(BertConfig{}, "batch"));
}

TEST(DynamicMasking, EpochOrderIsAPermutationWithLengthBins) {
  const UnmaskedShard s = shard(103, 64);
  auto o1 = epoch_order(s, 3, 0, 0), o2 = epoch_order(s, 3, 1, 0), binned = epoch_order(s, 3, 0, 10);
  auto sorted = o1;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < s.N; ++i) ASSERT_EQ(sorted[size_t(i)], i);
  EXPECT_NE(o1, o2);
  EXPECT_EQ(o1, epoch_order(s, 3, 0, 0));
  for (size_t b = 0; b < binned.size(); b += 10)
    for (size_t i = b + 1; i < std::min(binned.size(), b + 10); ++i)
      EXPECT_LE(s.lengths[binned[i - 1]], s.lengths[binned[i]]);
}

TEST(DynamicMasking, ShardRoundTrip) {
  const UnmaskedShard s = shard(9, 32);
  const auto path =
      (std::filesystem::temp_directory_path() / ("bertcc_unmasked_" + std::to_string(getpid()) + ".h5")).string();
  write_unmasked_shard(path, s);
  EXPECT_TRUE(is_unmasked_shard(path));
  const UnmaskedShard r = read_unmasked_shard(path);
  EXPECT_EQ(r.input_ids, s.input_ids);
  EXPECT_EQ(r.lengths, s.lengths);
  EXPECT_EQ(r.next_sentence_labels, s.next_sentence_labels);
  std::filesystem::remove(path);
}
