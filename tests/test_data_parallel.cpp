// Data-parallel building blocks (the loader's step slices, ordered gradient accumulation, the
// per-micro-batch RNG, the single-process communicator) and checkpoint directory replacement.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "bertcc/dist.h"
#include "bertcc/pretrain_data.h"
#include "bertcc/pretrain_loader.h"
#include "test_shards.h"
#include "train/checkpoint.h"
#include "train/data_parallel.h"

using namespace bertcc;

using bertcc::testing::make_shard;

// Every (world, accumulation) with the same micro-batches per step walks the same global order:
// concatenating each step's rank slices gives next()'s sequence, across shard tails and epochs.
TEST(DataParallel, StepSlicesOfAnyWorldSizeFormTheGlobalOrder) {
  const auto dir = std::filesystem::temp_directory_path() / ("bertcc_dp_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  // 42 rows per shard, micro-batch 4: each shard drops a 2-row tail.
  std::vector<std::string> shards{make_shard(dir.string(), 0, 42, 8), make_shard(dir.string(), 1, 42, 8),
                                  make_shard(dir.string(), 2, 42, 8)};
  MaskingOptions m;
  const int64_t per_step = 4, steps = 9;  // 36 micro-batches: more than one epoch (30)
  std::vector<std::vector<int32_t>> reference;
  PretrainLoader seq(shards, 4, 5, m);
  DataCursor cs;
  std::vector<DataCursor> step_cursors;
  for (int64_t k = 0; k < per_step * steps; ++k) {
    reference.push_back(seq.next(cs).input_ids);
    if ((k + 1) % per_step == 0) step_cursors.push_back(cs);
  }
  for (int64_t world : {1, 2, 4}) {
    const int64_t A = per_step / world;
    std::vector<std::unique_ptr<PretrainLoader>> loaders;
    std::vector<DataCursor> cur(static_cast<size_t>(world));
    for (int64_t r = 0; r < world; ++r) loaders.push_back(std::make_unique<PretrainLoader>(shards, 4, 5, m));
    size_t k = 0;
    for (int64_t s = 0; s < steps; ++s)
      for (int64_t r = 0; r < world; ++r) {
        const auto got = loaders[size_t(r)]->next_step(cur[size_t(r)], per_step, r * A, A);
        ASSERT_EQ(got.size(), size_t(A));
        for (const BertBatch& b : got) ASSERT_EQ(b.input_ids, reference[k++]) << "world " << world << " step " << s;
        const DataCursor& want = step_cursors[size_t(s)];
        EXPECT_EQ(cur[size_t(r)].epoch, want.epoch);
        EXPECT_EQ(cur[size_t(r)].shard_pos, want.shard_pos);
        EXPECT_EQ(cur[size_t(r)].row, want.row);
      }
  }
  std::filesystem::remove_all(dir);
}

TEST(DataParallel, GradSyncSumsSeparateGradientsInOrder) {
  const std::vector<std::vector<float>> micro{{1e8f, 1.0f, -0.0f}, {1.0f, 1e-8f, 0.0f}, {-1e8f, 3.0f, 0.0f}};
  for (size_t A = 1; A <= micro.size(); ++A) {
    GradSync sync(dist::world(), dist::WireDtype::F32, 2, true);
    std::vector<float> grads(3, 0.0f);
    for (int rep = 0; rep < 2; ++rep) {  // the scratch buffer is reused step after step
      std::fill(grads.begin(), grads.end(), 0.0f);
      for (size_t a = 0; a < A; ++a) {
        sync.before(int64_t(a), int64_t(A), grads);
        for (float g : grads) ASSERT_EQ(g, 0.0f);               // each backward starts from zero
        for (size_t i = 0; i < 3; ++i) grads[i] += micro[a][i];  // "backward adds into grads"
        sync.ready_from(1);
        sync.after(int64_t(a), int64_t(A), grads);
      }
      sync.finish(int64_t(A), grads);
      for (size_t i = 0; i < 3; ++i) {
        float want = micro[0][i];
        for (size_t a = 1; a < A; ++a) want += micro[a][i];  // ((g0 + g1) + g2), float by float
        EXPECT_EQ(grads[i], want) << "A=" << A << " i=" << i;
      }
    }
  }
}

TEST(DataParallel, MicroBatchRngDependsOnSeedPhaseStepAndIndexOnly) {
  const Rng a = micro_batch_rng(7, 1, 10, 3), b = micro_batch_rng(7, 1, 10, 3);
  EXPECT_EQ(a.seed, b.seed);
  EXPECT_EQ(a.offset, 0u);
  for (const Rng& other : {micro_batch_rng(8, 1, 10, 3), micro_batch_rng(7, 2, 10, 3), micro_batch_rng(7, 1, 11, 3),
                           micro_batch_rng(7, 1, 10, 4)})
    EXPECT_NE(other.seed, a.seed);
}

TEST(DataParallel, SingleProcessCommunicator) {
  dist::Communicator& c = dist::world();  // not started by a launcher in the unit tests
  EXPECT_EQ(c.world(), 1);
  EXPECT_EQ(c.rank(), 0);
  std::vector<float> g{1.5f, -2.0f};
  c.allreduce_sum(g.data(), g.size(), dist::WireDtype::BF16);
  EXPECT_EQ(g, (std::vector<float>{1.5f, -2.0f}));
  double d[2] = {3, 4}, out[2];
  c.allgather(d, 2, out);
  EXPECT_EQ(out[1], 4.0);
  EXPECT_EQ(threads_per_rank(3, c), 3);
  EXPECT_EQ(dist::parse_wire_dtype("fp16"), dist::WireDtype::F16);
  EXPECT_THROW(dist::parse_wire_dtype("int8"), std::exception);
}

// Re-saving a checkpoint step: the new directory replaces the old one without a moment where
// neither is complete; an interrupted fallback re-save (`step_N.old` left, no `step_N`) is put back.
TEST(Checkpoint, ReplaceDirKeepsACompleteDirectoryAtEveryMoment) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("bertcc_replace_" + std::to_string(getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "step_4");
  fs::create_directories(root / ".step_4.tmp");
  std::ofstream(root / "step_4" / "a") << "old";
  std::ofstream(root / ".step_4.tmp" / "a") << "new";
  replace_dir(root / ".step_4.tmp", root / "step_4");
  EXPECT_FALSE(fs::exists(root / ".step_4.tmp"));
  std::string got;
  std::ifstream(root / "step_4" / "a") >> got;
  EXPECT_EQ(got, "new");
  replace_dir(root / "step_4", root / "step_6");  // no target yet: a plain rename
  EXPECT_TRUE(fs::exists(root / "step_6" / "a"));
  // A kill between the fallback's two renames leaves only step_6.old: resuming restores it.
  fs::rename(root / "step_6", root / "step_6.old");
  fs::create_directories(root / "step_2.old");
  fs::create_directories(root / "step_2");  // both present: the .old one is stale
  restore_replaced_dirs(root);
  EXPECT_TRUE(fs::exists(root / "step_6" / "a"));
  EXPECT_FALSE(fs::exists(root / "step_6.old"));
  EXPECT_FALSE(fs::exists(root / "step_2.old"));
  EXPECT_TRUE(fs::exists(root / "step_2"));
  fs::remove_all(root);
}
