// MPI communicator over MPI_COMM_WORLD. The float all-reduce is a reduce-scatter (MPI_Alltoallv:
// rank j receives every rank's slice j) summed locally in rank order, then an all-gather of the
// summed slices: bandwidth-optimal like a ring, and deterministic, unlike MPI_Allreduce whose
// summation order is the library's choice. The all-reduce of two ranks is the exception: each
// element's sum is then a single addition, which is commutative, so MPI_Allreduce gives the
// rank-order bits.
#include "dist/mpi_comm.h"

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bertcc/dtype.h"
#include "bertcc/error.h"

namespace bertcc::dist {

bool mpi_available() { return true; }

namespace {

void check(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    fail("MPI: ", what, " failed: ", std::string(msg, static_cast<size_t>(len)));
  }
}

// Elements per chunk: counts stay far below INT_MAX, and scratch stays bounded.
constexpr size_t kBucket = size_t{1} << 24;

// Serial conversions: this may run on the communication thread while backward computes.
void narrow(bool bf, const float* in, uint16_t* out, size_t n) {
  if (bf)
    to_bf16(in, out, n, false);
  else
    to_f16(in, out, n, false);
}
void widen(bool bf, const uint16_t* in, float* out, size_t n) {
  if (bf)
    from_bf16(in, out, n, false);
  else
    from_f16(in, out, n, false);
}

// The 16-bit wire's sum as an MPI operation on MPI_UINT16_T (used with two ranks only, where
// MPI applies it once per element): both values widened to fp32, added, the sum rounded back,
// as reduce16 computes it. In cache-sized blocks, with the bulk conversions.
template <bool BF>
void sum16(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  constexpr size_t kBlock = 2048;
  float x[kBlock], y[kBlock];
  const size_t n = static_cast<size_t>(*len);
  for (size_t off = 0; off < n; off += kBlock) {
    const size_t m = std::min(kBlock, n - off);
    widen(BF, b + off, x, m);
    widen(BF, a + off, y, m);
    for (size_t i = 0; i < m; ++i) x[i] += y[i];
    narrow(BF, x, b + off, m);
  }
}

class MpiComm final : public Communicator {
 public:
  MpiComm() {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided_), "MPI_Init_thread");
    } else {
      MPI_Query_thread(&provided_);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_);
    MPI_Comm local;
    check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local),
          "MPI_Comm_split_type");
    MPI_Comm_rank(local, &local_rank_);
    MPI_Comm_size(local, &local_world_);
    MPI_Comm_free(&local);
    check(MPI_Op_create(&sum16<true>, 1, &sum_bf16_), "MPI_Op_create");
    check(MPI_Op_create(&sum16<false>, 1, &sum_f16_), "MPI_Op_create");
  }
  ~MpiComm() override {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) {
      MPI_Op_free(&sum_bf16_);
      MPI_Op_free(&sum_f16_);
      MPI_Finalize();
    }
  }
  int rank() const override { return rank_; }
  int world() const override { return world_; }
  int local_rank() const override { return local_rank_; }
  int local_world() const override { return local_world_; }
  const char* name() const override { return "mpi"; }
  bool other_thread_ok() const override { return provided_ >= MPI_THREAD_SERIALIZED; }

  void allreduce_sum(float* data, size_t n, WireDtype wire) override {
    if (world_ == 2) {
      pair_allreduce(data, n, wire);  // in calls of its own size
      return;
    }
    for (size_t off = 0; off < n; off += kBucket) bucket(data + off, std::min(kBucket, n - off), wire);
  }

  void reduce_scatter_sum(float* data, const std::vector<size_t>& counts, WireDtype wire) override {
    std::vector<int> c, d;
    displacements(counts, c, d);
    // (at two ranks too: MPI_Reduce_scatter of 418 MB took 4x reduce_parts' time here)
    reduce_parts(data, static_cast<size_t>(d.back()) + static_cast<size_t>(c.back()), c, d, wire);
  }

  void allreduce_sum(double* data, size_t n) override {
    std::vector<double> all(n * static_cast<size_t>(world_));
    allgather(data, n, all.data());
    for (size_t i = 0; i < n; ++i) {
      double s = all[i];
      for (int r = 1; r < world_; ++r) s += all[static_cast<size_t>(r) * n + i];
      data[i] = s;
    }
  }

  void allgather(const double* in, size_t n, double* out) override {
    BERTCC_CHECK(n < (size_t{1} << 30), "MPI allgather: too many values");
    check(MPI_Allgather(in, static_cast<int>(n), MPI_DOUBLE, out, static_cast<int>(n), MPI_DOUBLE, MPI_COMM_WORLD),
          "MPI_Allgather");
  }

  void allgatherv(const float* in, size_t n, std::vector<float>& out, std::vector<size_t>& counts) override {
    const double mine = static_cast<double>(n);
    std::vector<double> all(static_cast<size_t>(world_));
    allgather(&mine, 1, all.data());
    counts.assign(all.begin(), all.end());
    std::vector<int> c, d;
    displacements(counts, c, d);
    out.resize(static_cast<size_t>(d.back()) + counts.back());
    check(MPI_Allgatherv(in, static_cast<int>(n), MPI_FLOAT, out.data(), c.data(), d.data(), MPI_FLOAT, MPI_COMM_WORLD),
          "MPI_Allgatherv");
  }

  void allgatherv_inplace(float* data, const std::vector<size_t>& counts) override {
    std::vector<int> c, d;
    displacements(counts, c, d);
    check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, c.data(), d.data(), MPI_FLOAT, MPI_COMM_WORLD),
          "MPI_Allgatherv");
  }

  void gatherv(const float* in, const std::vector<size_t>& counts, float* out, int root) override {
    std::vector<int> c, d;
    displacements(counts, c, d);
    check(MPI_Gatherv(in, c[static_cast<size_t>(rank_)], MPI_FLOAT, out, c.data(), d.data(), MPI_FLOAT, root,
                      MPI_COMM_WORLD),
          "MPI_Gatherv");
  }

  void broadcast(void* data, size_t bytes, int root) override {
    BERTCC_CHECK(bytes < (size_t{1} << 31), "MPI broadcast: more than 2^31 bytes");
    check(MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
  }

  void barrier() override { check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }

 private:
  void displacements(const std::vector<size_t>& counts, std::vector<int>& c, std::vector<int>& d) const {
    BERTCC_CHECK(counts.size() == static_cast<size_t>(world_), "MPI: ", counts.size(), " counts for ", world_,
                 " ranks");
    size_t total = 0;
    for (size_t r = 0; r < counts.size(); ++r) {
      BERTCC_CHECK(total + counts[r] < (size_t{1} << 31), "MPI: more than 2^31 values in one gather");
      c.push_back(static_cast<int>(counts[r]));
      d.push_back(static_cast<int>(total));
      total += counts[r];
    }
  }

  // The reduce-scatter half of an all-reduce: rank j receives every rank's part j (data[displs[j],
  // displs[j] + counts[j])) and sums it in rank order into its own data. On a 16-bit wire the
  // values travel in 16 bits, are summed in fp32, and the sums are rounded to 16 bits (as the
  // all-reduce sends them back), kept in send16_ for bucket()'s all-gather.
  void reduce_parts(float* data, size_t n, const std::vector<int>& counts, const std::vector<int>& displs,
                    WireDtype wire) {
    const size_t W = static_cast<size_t>(world_), r = static_cast<size_t>(rank_);
    const size_t mine = static_cast<size_t>(counts[r]), my0 = static_cast<size_t>(displs[r]);
    std::vector<int> rcounts(W, static_cast<int>(mine)), rdispls(W);
    for (size_t j = 0; j < W; ++j) rdispls[j] = static_cast<int>(j * mine);
    if (wire == WireDtype::F32) {
      recv_.resize(mine * W);
      check(MPI_Alltoallv(data, counts.data(), displs.data(), MPI_FLOAT, recv_.data(), rcounts.data(), rdispls.data(),
                          MPI_FLOAT, MPI_COMM_WORLD),
            "MPI_Alltoallv");
      for (size_t i = 0; i < mine; ++i) {
        float s = recv_[i];
        for (size_t j = 1; j < W; ++j) s += recv_[j * mine + i];
        data[my0 + i] = s;
      }
      return;
    }
    reduce16(data, n, counts, displs, rcounts, rdispls, wire == WireDtype::BF16);
  }
  // The 16-bit wire's reduce-scatter: bulk conversions (vectorised), the sums in fp32 in rank order.
  void reduce16(float* data, size_t n, const std::vector<int>& counts, const std::vector<int>& displs,
                const std::vector<int>& rcounts, const std::vector<int>& rdispls, bool bf) {
    const size_t W = static_cast<size_t>(world_), r = static_cast<size_t>(rank_);
    const size_t mine = static_cast<size_t>(counts[r]), my0 = static_cast<size_t>(displs[r]);
    send16_.resize(n);
    narrow(bf, data, send16_.data(), n);
    recv16_.resize(mine * W);
    check(MPI_Alltoallv(send16_.data(), counts.data(), displs.data(), MPI_UINT16_T, recv16_.data(), rcounts.data(),
                        rdispls.data(), MPI_UINT16_T, MPI_COMM_WORLD),
          "MPI_Alltoallv");
    // in blocks that stay in cache: acc = part of rank 0, += rank 1, ... (rank order, as fp32)
    constexpr size_t kBlock = 2048;
    float acc[kBlock], tmp[kBlock];
    const uint16_t* rcv = recv16_.data();
    for (size_t b = 0; b < mine; b += kBlock) {
      const size_t m = std::min(kBlock, mine - b);
      widen(bf, rcv + b, acc, m);
      for (size_t j = 1; j < W; ++j) {
        widen(bf, rcv + j * mine + b, tmp, m);
        for (size_t i = 0; i < m; ++i) acc[i] += tmp[i];
      }
      narrow(bf, acc, send16_.data() + my0 + b, m);  // the sums as they travel back
      widen(bf, send16_.data() + my0 + b, data + my0 + b, m);
    }
  }

  // Two ranks. Element i of the sum is one addition, x_0 + x_1 (on a 16-bit wire, of the two
  // widened values, then rounded), and IEEE 754 addition is commutative: whichever rank's value
  // MPI's algorithm adds to which, the sum has the rank-order sum's bits, on both ranks (a NaN's
  // payload aside: x86 keeps the first operand's). So two ranks take the library's own tuned
  // collective, where the general path makes two and sums a copy of its own part.
  // The calls take at most kPairChunk elements (8 MB of fp32): Open MPI 4.1's MPI_Allreduce of
  // 418 MB over shared memory took twice as long as 53 calls of 8 MB on the same buffer (AMD EPYC,
  // 2 cores; bertcc_allreduce_bench): 147-185 ms against 308-378.
  static constexpr size_t kPairChunk = size_t{1} << 21;
  MPI_Op sum_op(WireDtype wire) const { return wire == WireDtype::BF16 ? sum_bf16_ : sum_f16_; }
  void pair_allreduce(float* data, size_t n, WireDtype wire) {
    const bool bf = wire == WireDtype::BF16;
    if (wire != WireDtype::F32) send16_.resize(std::min(n, kPairChunk));
    for (size_t off = 0; off < n; off += kPairChunk) {
      const size_t len = std::min(kPairChunk, n - off);
      const int m = static_cast<int>(len);
      if (wire == WireDtype::F32) {
        check(MPI_Allreduce(MPI_IN_PLACE, data + off, m, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
        continue;
      }
      narrow(bf, data + off, send16_.data(), len);
      check(MPI_Allreduce(MPI_IN_PLACE, send16_.data(), m, MPI_UINT16_T, sum_op(wire), MPI_COMM_WORLD),
            "MPI_Allreduce");
      widen(bf, send16_.data(), data + off, len);
    }
  }

  // One chunk: slice j = [n j / W, n (j+1) / W) is summed by rank j, then every rank gets every sum.
  void bucket(float* data, size_t n, WireDtype wire) {
    const size_t W = static_cast<size_t>(world_);
    std::vector<int> counts(W), displs(W);
    for (size_t j = 0; j < W; ++j) {
      const size_t b = n * j / W, e = n * (j + 1) / W;
      displs[j] = static_cast<int>(b);
      counts[j] = static_cast<int>(e - b);
    }
    reduce_parts(data, n, counts, displs, wire);
    if (wire == WireDtype::F32) {
      check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, counts.data(), displs.data(), MPI_FLOAT,
                           MPI_COMM_WORLD),
            "MPI_Allgatherv");
      return;
    }
    // Compressed: the 16-bit sums travel back in 16 bits.
    check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, send16_.data(), counts.data(), displs.data(), MPI_UINT16_T,
                         MPI_COMM_WORLD),
          "MPI_Allgatherv");
    widen(wire == WireDtype::BF16, send16_.data(), data, n);
  }

  int rank_ = 0, world_ = 1, local_rank_ = 0, local_world_ = 1, provided_ = MPI_THREAD_SINGLE;
  MPI_Op sum_bf16_ = MPI_OP_NULL, sum_f16_ = MPI_OP_NULL;
  std::vector<float> recv_;
  std::vector<uint16_t> send16_, recv16_;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator() { return std::make_unique<MpiComm>(); }

}  // namespace bertcc::dist
