// Pre-training data for the trainer: a list of shards (NVIDIA's masked HDF5 layout or
// dynamic-masking shards), visited in a seeded per-epoch order; rows of each shard in a seeded
// per-(epoch, shard) order; each example once per epoch. The position is a small cursor that
// checkpoints store. Data parallelism: next_step() walks the same global order on every rank and
// hands each rank its slice of each global step, so the order never depends on the world size.
// (Rank/world in the constructor split shards between independent readers; training uses 0 of 1.)
#pragma once
#include <cstdint>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "bertcc/bert.h"
#include "bertcc/dynamic_masking.h"

namespace bertcc {

struct DataCursor {
  int64_t epoch = 0, shard_pos = 0, row = 0;
};

class PretrainLoader {
 public:
  // `masking` is used for dynamic-masking shards (ignored for masked ones).
  // bin_batches > 0: length binning — after the seeded shuffle, rows are sorted by length within
  // consecutive groups of bin_batches batches (similar lengths per batch, random group order).
  PretrainLoader(std::vector<std::string> shards, int64_t micro_batch, uint64_t seed, const MaskingOptions& masking,
                 int rank = 0, int world = 1, int64_t bin_batches = 0);
  ~PretrainLoader();
  // The batch at `c`, advancing `c` (a step of one micro-batch). The next batch is prepared on a
  // background thread.
  BertBatch next(DataCursor& c);
  // One global optimizer step: `per_step` consecutive micro-batches of the global order starting
  // at `c`; returns micro-batches [first, first + count) of them (this rank's slice; the others
  // are skipped, not built) and advances `c` past the whole step. The next step is prepared on a
  // background thread.
  std::vector<BertBatch> next_step(DataCursor& c, int64_t per_step, int64_t first, int64_t count);
  size_t num_shards() const { return shards_.size(); }
  // Rows of the shard opened last that this loader read from it: all of them for a whole step
  // (count == per_step), else only those of this rank's micro-batches.
  int64_t held_rows() const { return held_rows_; }

 private:
  struct Loaded;
  // A step's slice (per_step, first, count), and the place k in its step of the micro-batch that
  // starts at shard row `row`.
  struct Slice {
    int64_t per_step, first, count, k, row;
  };
  BertBatch load(DataCursor& c, bool build, const Slice& step);
  std::vector<BertBatch> load_step(DataCursor& c, int64_t per_step, int64_t first, int64_t count);
  std::shared_ptr<Loaded> shard(int64_t epoch, int64_t pos, const Slice& sl);
  int64_t held_rows_ = 0;
  std::vector<std::string> shards_;
  int64_t B_;
  uint64_t seed_;
  int64_t bin_batches_ = 0;
  MaskingOptions masking_;
  std::shared_ptr<Loaded> cache_;
  std::future<std::vector<BertBatch>> step_ahead_;
  DataCursor step_from_, step_to_;
  int64_t step_key_[3] = {0, 0, 0};
  bool has_step_ahead_ = false;
};

// Every file under `dir` ending in .h5/.hdf5, sorted.
std::vector<std::string> list_shards(const std::string& dir);

}  // namespace bertcc
