#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <set>

#include "bertcc/pretrain_data.h"
#include "bertcc/pretrain_loader.h"
#include "test_shards.h"

using namespace bertcc;
using bertcc::testing::make_shard;

TEST(Loader, EachExampleOncePerEpochDeterministicAndBinned) {
  const auto dir = std::filesystem::temp_directory_path() / ("bertcc_loader_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::vector<std::string> shards{make_shard(dir.string(), 0, 40, 16), make_shard(dir.string(), 1, 40, 16)};
  MaskingOptions m;
  for (int64_t bins : {0, 3}) {
    PretrainLoader a(shards, 4, 9, m, 0, 1, bins), b(shards, 4, 9, m, 0, 1, bins);
    DataCursor ca, cb;
    std::multiset<int32_t> seen;
    for (int k = 0; k < 20; ++k) {  // one epoch: 2 shards x 40 rows / 4
      const BertBatch x = a.next(ca), y = b.next(cb);
      ASSERT_EQ(x.input_ids, y.input_ids);
      for (int64_t r = 0; r < x.B; ++r) seen.insert(x.input_ids[size_t(r * x.T)]);
    }
    EXPECT_EQ(seen.size(), 80u);
    EXPECT_EQ(std::set<int32_t>(seen.begin(), seen.end()).size(), 80u);  // every example exactly once
    EXPECT_EQ(ca.epoch, 0);
    const BertBatch next = a.next(ca);  // wraps into epoch 1
    EXPECT_EQ(ca.epoch, 1);
    (void)next;
  }
  // With binning, lengths within a group of 3 batches are sorted.
  PretrainLoader binned(shards, 4, 9, m, 0, 1, 3);
  DataCursor c;
  std::vector<int64_t> lens;
  for (int k = 0; k < 3; ++k) {
    const BertBatch x = binned.next(c);
    for (int64_t r = 0; r < x.B; ++r) {
      int64_t n = 0;
      for (int64_t t = 0; t < x.T; ++t) n += x.input_mask[size_t(r * x.T + t)];
      lens.push_back(n);
    }
  }
  EXPECT_TRUE(std::is_sorted(lens.begin(), lens.end()));
  std::filesystem::remove_all(dir);
}
