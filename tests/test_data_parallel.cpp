// Data-parallel building blocks (the loader's step slices, ordered gradient accumulation, the
// per-micro-batch RNG, the single-process communicator) and checkpoint directory replacement.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "bertcc/dist.h"
#include "bertcc/dynamic_masking.h"
#include "bertcc/error.h"
#include "bertcc/pretrain_data.h"
#include "bertcc/pretrain_loader.h"
#include "test_shards.h"
#include "train/checkpoint.h"
#include "train/data_parallel.h"
#include "train/run.h"

using namespace bertcc;

using bertcc::testing::make_shard;

namespace {
// The same rows in the dynamic-masking layout (no masks stored; lengths from input_mask).
std::string make_dynamic_shard(const std::string& dir, int idx, int64_t N, int64_t S) {
  const std::string masked = make_shard(dir, idx, N, S);
  PretrainShard p = read_pretrain_shard(masked);
  std::vector<int32_t> lengths;
  for (int64_t r = 0; r < N; ++r) {
    int32_t n = 0;
    for (int64_t t = 0; t < S; ++t) n += p.input_mask[size_t(r * S + t)];
    lengths.push_back(n);
  }
  std::filesystem::remove(masked);
  const std::string path = dir + "/d" + std::to_string(idx) + ".h5";
  write_unmasked_shard(path, unmasked_from(std::move(p), lengths));
  return path;
}
}  // namespace

// Every (world, accumulation) with the same micro-batches per step walks the same global order:
// concatenating each step's rank slices gives next()'s sequence, across shard tails and epochs,
// in both shard layouts (dynamic masking: the same masks, seeded by the row's number in its file),
// with and without length binning. A rank of several reads only its micro-batches' rows.
TEST(DataParallel, StepSlicesOfAnyWorldSizeFormTheGlobalOrder) {
  for (bool dynamic : {false, true})
    for (int64_t bins : {0, 2}) {
      const auto dir = std::filesystem::temp_directory_path() / ("bertcc_dp_" + std::to_string(getpid()));
      std::filesystem::create_directories(dir);
      // 42 rows per shard, micro-batch 4: each shard drops a 2-row tail.
      std::vector<std::string> shards;
      for (int i = 0; i < 3; ++i)
        shards.push_back(dynamic ? make_dynamic_shard(dir.string(), i, 42, 8) : make_shard(dir.string(), i, 42, 8));
      MaskingOptions m;
      m.vocab_size = 30000, m.cls_id = 101, m.sep_id = 102, m.mask_id = 103;
      const int64_t per_step = 4, steps = 9;  // 36 micro-batches: more than one epoch (30)
      std::vector<BertBatch> reference;
      PretrainLoader seq(shards, 4, 5, m, 0, 1, bins);
      DataCursor cs;
      std::vector<DataCursor> step_cursors;
      for (int64_t k = 0; k < per_step * steps; ++k) {
        reference.push_back(seq.next(cs));
        if ((k + 1) % per_step == 0) step_cursors.push_back(cs);
      }
      EXPECT_EQ(seq.held_rows(), 42);
      for (int64_t world : {1, 2, 4}) {
        const int64_t A = per_step / world;
        std::vector<std::unique_ptr<PretrainLoader>> loaders;
        std::vector<DataCursor> cur(static_cast<size_t>(world));
        for (int64_t r = 0; r < world; ++r)
          loaders.push_back(std::make_unique<PretrainLoader>(shards, 4, 5, m, 0, 1, bins));
        size_t k = 0;
        for (int64_t s = 0; s < steps; ++s)
          for (int64_t r = 0; r < world; ++r) {
            const auto got = loaders[size_t(r)]->next_step(cur[size_t(r)], per_step, r * A, A);
            ASSERT_EQ(got.size(), size_t(A));
            for (const BertBatch& b : got) {
              const BertBatch& want = reference[k++];
              ASSERT_EQ(b.input_ids, want.input_ids) << "world " << world << " step " << s << " dynamic " << dynamic;
              ASSERT_EQ(b.mlm_labels, want.mlm_labels) << "world " << world << " step " << s << " dynamic " << dynamic;
              ASSERT_EQ(b.input_mask, want.input_mask);
            }
            const DataCursor& want = step_cursors[size_t(s)];
            EXPECT_EQ(cur[size_t(r)].epoch, want.epoch);
            EXPECT_EQ(cur[size_t(r)].shard_pos, want.shard_pos);
            EXPECT_EQ(cur[size_t(r)].row, want.row);
            // 10 micro-batches per shard, this rank's share of them (its place in the step
            // shifts from shard to shard: one more at most)
            const int64_t held = loaders[size_t(r)]->held_rows();
            if (world == 1) {
              EXPECT_EQ(held, 42);
            } else {
              EXPECT_GT(held, 0);
              EXPECT_LE(held, (10 / world + 1) * 4) << "world " << world << " rank " << r;
            }
          }
        // Resumed at each step boundary by fresh loaders (a shard then opens mid-way, at the
        // cursor's row): the same batches from there on.
        for (int64_t s0 = 1; s0 < steps; ++s0) {
          std::vector<std::unique_ptr<PretrainLoader>> fresh;
          std::vector<DataCursor> rc(static_cast<size_t>(world), step_cursors[size_t(s0 - 1)]);
          for (int64_t r = 0; r < world; ++r)
            fresh.push_back(std::make_unique<PretrainLoader>(shards, 4, 5, m, 0, 1, bins));
          size_t kk = size_t(s0 * per_step);
          for (int64_t s = s0; s < steps; ++s)
            for (int64_t r = 0; r < world; ++r)
              for (const BertBatch& b : fresh[size_t(r)]->next_step(rc[size_t(r)], per_step, r * A, A)) {
                ASSERT_EQ(b.input_ids, reference[kk].input_ids) << "resumed at step " << s0 << ", world " << world;
                ASSERT_EQ(b.mlm_labels, reference[kk++].mlm_labels);
              }
        }
      }
      std::filesystem::remove_all(dir);
    }
}

// Rows read by number, across the reader's 4096-row slabs and the writer's 2048-row chunks, equal
// those rows of the whole shard.
TEST(DataParallel, ShardRowsReadBySlabEqualTheWholeShard) {
  const auto dir = std::filesystem::temp_directory_path() / ("bertcc_rows_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const int64_t S = 128;  // chunks of 2048 rows: slabs cut across chunks
  const std::string path = make_shard(dir.string(), 3, 9000, S);
  const PretrainShard all = read_pretrain_shard(path);
  const std::vector<int64_t> rows{0, 1, 4095, 4096, 4097, 6000, 8191, 8192, 8999};
  const PretrainShard some = read_pretrain_shard_layout(path, nullptr, &rows);
  ASSERT_EQ(some.N, int64_t(rows.size()));
  ASSERT_EQ(some.S, all.S);
  ASSERT_EQ(some.P, all.P);
  for (size_t k = 0; k < rows.size(); ++k) {
    const auto r = size_t(rows[k]);
    for (int64_t t = 0; t < all.S; ++t) {
      EXPECT_EQ(some.input_ids[k * S + size_t(t)], all.input_ids[r * S + size_t(t)]) << "row " << r;
      EXPECT_EQ(some.input_mask[k * S + size_t(t)], all.input_mask[r * S + size_t(t)]);
    }
    EXPECT_EQ(some.masked_lm_positions[k * 2], all.masked_lm_positions[r * 2]);
    EXPECT_EQ(some.next_sentence_labels[k], all.next_sentence_labels[r]);
  }
  std::vector<int32_t> lengths;
  EXPECT_EQ(probe_shard_rows(path, &lengths), 9000);
  ASSERT_EQ(lengths.size(), size_t(9000));
  for (int64_t r : rows) {
    int32_t n = 0;
    for (int64_t t = 0; t < S; ++t) n += all.input_mask[size_t(r * S + t)];
    EXPECT_EQ(lengths[size_t(r)], n);
  }
  const std::vector<int64_t> bad{5, 3};
  EXPECT_THROW(read_pretrain_shard_layout(path, nullptr, &bad), Error);
  const std::vector<int64_t> past{9000};
  EXPECT_THROW(read_pretrain_shard_layout(path, nullptr, &past), Error);
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
        for (float g : grads) ASSERT_EQ(g, 0.0f);                // each backward starts from zero
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

// A checkpoint of non-finite weights is refused, naming the tensor, and nothing is written (a
// diverged run kept writing NaN checkpoints and a NaN final model under exit 0).
TEST(Checkpoint, RefusesNonFiniteWeights) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("bertcc_nan_ckpt_" + std::to_string(getpid()));
  fs::remove_all(root);
  BertConfig c;
  c.vocab_size = 29;
  c.hidden_size = 12;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 3;
  c.intermediate_size = 17;
  c.max_position_embeddings = 16;
  Bert model(c, Heads::PreTraining);
  model.init_weights(1);
  AdamState opt;
  opt.m.assign(model.params().size(), 0.0f);
  opt.v.assign(model.params().size(), 0.0f);
  TrainerState st;
  st.step = 3;
  save_checkpoint(root.string(), model, opt, st, "", 1);  // finite: written
  EXPECT_TRUE(fs::exists(root / "checkpoints" / "step_3" / "model.safetensors"));
  const ParamEntry& e = model.table().at("bert.encoder.layer.0.output.dense.weight");
  model.params()[e.offset + 5] = std::nanf("");
  st.step = 4;
  try {
    save_checkpoint(root.string(), model, opt, st, "", 1);
    ADD_FAILURE() << "a checkpoint of NaN weights was written";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("not writing checkpoint step_4"), std::string::npos) << err.what();
    EXPECT_NE(std::string(err.what()).find("'bert.encoder.layer.0.output.dense.weight' holds nan"), std::string::npos)
        << err.what();
  }
  EXPECT_FALSE(fs::exists(root / "checkpoints" / "step_4"));
  EXPECT_TRUE(fs::exists(root / "checkpoints" / "step_3"));  // the last good one is kept
  model.params()[e.offset + 5] = -INFINITY;
  EXPECT_THROW(check_weights_finite(model, "x"), Error);
  fs::remove_all(root);
}
