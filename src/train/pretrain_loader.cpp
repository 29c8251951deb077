#include "bertcc/pretrain_loader.h"

#include <algorithm>
#include <filesystem>

#include "bertcc/error.h"
#include "bertcc/pretrain_data.h"
#include "bertcc/rng.h"

namespace bertcc {

struct PretrainLoader::Loaded {
  int64_t epoch = -1, pos = -1;
  int64_t slice[3] = {1, 0, 1};  // the step slice (per_step, first, count) the held rows serve
  std::string path;
  bool dynamic = false;
  int64_t N = 0;              // the file's rows
  bool all = true;            // every row read; else only `held`
  std::vector<int64_t> held;  // the rows read (sorted), when not all of them: this rank's
  PretrainShard masked;       // the rows read, in `held` order
  UnmaskedShard unmasked;
  std::vector<int64_t> order;  // row order for this epoch (the file's row numbers)
  int64_t rows() const { return N; }
};

namespace {
void shuffle(std::vector<int64_t>& v, uint64_t seed) {
  Rng r{splitmix64(seed), 0};
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[r.next_u32() % i]);
}
}  // namespace

std::vector<std::string> list_shards(const std::string& dir) {
  namespace fs = std::filesystem;
  BERTCC_CHECK(fs::is_directory(dir), dir, ": not a folder of pre-training shards");
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string ext = e.path().extension().string();
    if (e.is_regular_file() && (ext == ".h5" || ext == ".hdf5")) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  BERTCC_CHECK(!out.empty(), dir, ": no .h5/.hdf5 shards");
  return out;
}

PretrainLoader::PretrainLoader(std::vector<std::string> shards, int64_t micro_batch, uint64_t seed,
                               const MaskingOptions& masking, int rank, int world, int64_t bin_batches)
    : B_(micro_batch), seed_(seed), bin_batches_(bin_batches), masking_(masking) {
  BERTCC_CHECK(world >= 1 && rank >= 0 && rank < world, "loader: bad rank ", rank, " of ", world);
  for (size_t i = 0; i < shards.size(); ++i)
    if (static_cast<int>(i % static_cast<size_t>(world)) == rank) shards_.push_back(shards[i]);
  BERTCC_CHECK(!shards_.empty(), "loader: no shards for rank ", rank);
  BERTCC_CHECK(B_ > 0, "loader: batch size must be positive");
}

PretrainLoader::~PretrainLoader() {
  if (has_step_ahead_) step_ahead_.wait();
}

std::shared_ptr<PretrainLoader::Loaded> PretrainLoader::shard(int64_t epoch, int64_t pos, const Slice& sl) {
  if (cache_ && cache_->epoch == epoch && cache_->pos == pos && cache_->slice[0] == sl.per_step &&
      cache_->slice[1] == sl.first && cache_->slice[2] == sl.count)
    return cache_;
  BERTCC_CHECK(pos >= 0 && pos < static_cast<int64_t>(shards_.size()), "the data position (shard ", pos, " of epoch ",
               epoch, ") is past the ", shards_.size(), " shard(s) of the input folder: resuming with other data?");
  std::vector<int64_t> order(shards_.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  shuffle(order, seed_ ^ splitmix64(static_cast<uint64_t>(epoch)));
  const std::string& path = shards_[static_cast<size_t>(order[static_cast<size_t>(pos)])];
  auto l = std::make_shared<Loaded>();
  l->epoch = epoch;
  l->pos = pos;
  l->slice[0] = sl.per_step;
  l->slice[1] = sl.first;
  l->slice[2] = sl.count;
  l->path = path;
  l->dynamic = is_unmasked_shard(path);
  // The row order needs only the row count (and, for length binning, each row's length): probed
  // first, so that a rank then reads only the rows of its own micro-batches.
  std::vector<int32_t> lengths;
  l->N = probe_shard_rows(path, bin_batches_ > 0 ? &lengths : nullptr);
  BERTCC_CHECK(l->N >= B_, path, ": ", l->N, " rows, fewer than one batch of ", B_);
  l->order.resize(static_cast<size_t>(l->N));
  for (int64_t i = 0; i < l->N; ++i) l->order[static_cast<size_t>(i)] = i;
  shuffle(l->order, seed_ ^ splitmix64(static_cast<uint64_t>(epoch) * 1000003u + static_cast<uint64_t>(pos) + 1));
  if (bin_batches_ > 0) {
    const size_t group = static_cast<size_t>(bin_batches_ * B_);
    for (size_t g0 = 0; g0 < l->order.size(); g0 += group) {
      const auto e = l->order.begin() + static_cast<std::ptrdiff_t>(std::min(l->order.size(), g0 + group));
      std::stable_sort(l->order.begin() + static_cast<std::ptrdiff_t>(g0), e, [&](int64_t a, int64_t b) {
        return lengths[static_cast<size_t>(a)] < lengths[static_cast<size_t>(b)];
      });
    }
  }
  // This rank's rows: those of the shard's micro-batches, from the one at sl.row on, whose place in
  // their step falls in [first, first + count); the micro-batch at sl.row has place sl.k.
  l->all = sl.count == sl.per_step && sl.row == 0;
  const std::vector<int64_t>* rows = nullptr;
  if (!l->all) {
    for (int64_t m = sl.row / B_; (m + 1) * B_ <= l->N; ++m) {
      const int64_t place = (sl.k + m - sl.row / B_) % sl.per_step;
      if (place >= sl.first && place < sl.first + sl.count)
        l->held.insert(l->held.end(), l->order.begin() + m * B_, l->order.begin() + (m + 1) * B_);
    }
    std::sort(l->held.begin(), l->held.end());
    rows = &l->held;
  }
  if (l->dynamic)
    l->unmasked = read_unmasked_shard(path, rows);
  else
    l->masked = read_pretrain_shard_layout(path, nullptr, rows);
  held_rows_ = l->all ? l->N : static_cast<int64_t>(l->held.size());
  cache_ = l;
  return l;
}

BertBatch PretrainLoader::load(DataCursor& c, bool build, const Slice& step) {
  Slice sl = step;
  sl.row = c.row;
  auto l = shard(c.epoch, c.shard_pos, sl);
  if (c.row + B_ > l->rows()) {  // the incomplete tail of a shard is skipped (drop_last)
    c.row = 0;
    if (++c.shard_pos >= static_cast<int64_t>(shards_.size())) {
      c.shard_pos = 0;
      ++c.epoch;
    }
    sl.row = 0;
    l = shard(c.epoch, c.shard_pos, sl);
  }
  std::vector<int64_t> rows(l->order.begin() + c.row, l->order.begin() + c.row + B_);
  c.row += B_;
  if (!build) return {};
  std::vector<int64_t> local = rows;  // the rows' places among those read
  if (!l->all)
    for (int64_t& r : local) {
      const auto it = std::lower_bound(l->held.begin(), l->held.end(), r);
      BERTCC_CHECK(it != l->held.end() && *it == r, l->path, ": row ", r, " was not read for this rank (loader bug)");
      r = it - l->held.begin();
    }
  BertBatch b =
      l->dynamic ? DynamicMasker(masking_, seed_).make_batch(l->unmasked, local, static_cast<uint64_t>(c.epoch), &rows)
                 : make_pretrain_batch(l->masked, local, l->path);
  b.source = l->path;
  return b;
}

BertBatch PretrainLoader::next(DataCursor& c) { return std::move(next_step(c, 1, 0, 1).front()); }

std::vector<BertBatch> PretrainLoader::load_step(DataCursor& c, int64_t per_step, int64_t first, int64_t count) {
  std::vector<BertBatch> out;
  for (int64_t k = 0; k < per_step; ++k) {
    const bool mine = k >= first && k < first + count;
    BertBatch b = load(c, mine, Slice{per_step, first, count, k, 0});
    if (mine) out.push_back(std::move(b));
  }
  return out;
}

std::vector<BertBatch> PretrainLoader::next_step(DataCursor& c, int64_t per_step, int64_t first, int64_t count) {
  BERTCC_CHECK(per_step >= 1 && first >= 0 && count >= 1 && first + count <= per_step, "loader: bad step slice ", first,
               "+", count, " of ", per_step);
  std::vector<BertBatch> out;
  // The step the background thread prepared, if it is this one; then prepare the following step
  // while the caller trains on this one.
  const bool same = step_key_[0] == per_step && step_key_[1] == first && step_key_[2] == count;
  if (has_step_ahead_ && same && step_from_.epoch == c.epoch && step_from_.shard_pos == c.shard_pos &&
      step_from_.row == c.row) {
    has_step_ahead_ = false;  // get() leaves the future empty, also when it rethrows the loader's error
    out = step_ahead_.get();
    c = step_to_;
  } else {
    if (has_step_ahead_) step_ahead_.wait();
    has_step_ahead_ = false;
    out = load_step(c, per_step, first, count);
  }
  step_from_ = c;
  step_to_ = c;
  step_key_[0] = per_step;
  step_key_[1] = first;
  step_key_[2] = count;
  step_ahead_ = std::async(std::launch::async,
                           [this, per_step, first, count]() { return load_step(step_to_, per_step, first, count); });
  has_step_ahead_ = true;
  return out;
}

}  // namespace bertcc
