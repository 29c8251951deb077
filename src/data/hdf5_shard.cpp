#include <hdf5.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <numeric>

#include "bertcc/error.h"
#include "bertcc/fileio.h"
#include "bertcc/pretrain_data.h"
#include "bertcc/runtime.h"

namespace bertcc {
namespace {

// Debian's HDF5 is the serial build (not thread-safe): every HDF5 call runs under this lock.
std::mutex& h5_mutex() {
  static std::mutex m;
  return m;
}

struct H5Quiet {  // our errors name file and dataset; silence HDF5's own stack dumps (per thread)
  H5Quiet() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }
};

// HDF5 1.10 closes what is still open at exit and crashes on a file whose close failed (a full
// disk): bertcc closes every file itself, so the library's exit handler is switched off, before
// any other HDF5 call.
const int kNoHdf5Atexit = (H5dont_atexit(), 0);

struct Handle {
  hid_t id;
  herr_t (*close)(hid_t);
  ~Handle() {
    if (id >= 0) close(id);
  }
};

uint64_t file_size_or_zero(const std::string& path) {
  std::error_code ec;
  const auto n = std::filesystem::file_size(path, ec);
  return ec ? 0 : static_cast<uint64_t>(n);
}

// Opens an existing HDF5 file read-only (the caller holds h5_mutex); errors name the file.
hid_t open_for_reading(const std::string& path) {
  thread_local H5Quiet quiet;
  BERTCC_CHECK(file_exists(path), path, ": no such file");
  BERTCC_CHECK(H5Fis_hdf5(path.c_str()) > 0, path, ": not an HDF5 file");
  const hid_t id = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  BERTCC_CHECK(id >= 0, path, ": cannot open HDF5 file");
  return id;
}

// rows (sorted, distinct): only those rows (first dimension) of the dataset, in that order; the
// dataset is read in slabs of kSlabRows rows, so no more than a slab of the rows not kept is in
// memory at once. nullptr: every row.
constexpr hsize_t kSlabRows = 4096;

// row_sums (with rows): each row's sum instead of its values (row_sums[k] for rows[k]; the
// returned vector is empty).
std::vector<int32_t> read_i32(hid_t file, const std::string& path, const char* name, int rank,
                              std::vector<hsize_t>& dims, const std::vector<int64_t>* rows = nullptr,
                              std::vector<int32_t>* row_sums = nullptr) {
  BERTCC_CHECK(H5Lexists(file, name, H5P_DEFAULT) > 0, path, ": missing dataset '", name, "'");
  Handle ds{H5Dopen2(file, name, H5P_DEFAULT), H5Dclose};
  BERTCC_CHECK(ds.id >= 0, path, ": cannot open dataset '", name, "'");
  Handle sp{H5Dget_space(ds.id), H5Sclose};
  const int r = H5Sget_simple_extent_ndims(sp.id);
  BERTCC_CHECK(r == rank, path, ": dataset '", name, "' has rank ", r, ", expected ", rank);
  dims.assign(static_cast<size_t>(rank), 0);
  H5Sget_simple_extent_dims(sp.id, dims.data(), nullptr);
  Handle ty{H5Dget_type(ds.id), H5Tclose};
  BERTCC_CHECK(H5Tget_class(ty.id) == H5T_INTEGER, path, ": dataset '", name, "' is not an integer dataset");
  // The shape comes from the file: an absurd one is refused before any allocation (an element
  // count that overflows, or more than this machine's memory).
  double n_elems = 1;
  std::string shape;
  for (hsize_t d : dims) {
    n_elems *= static_cast<double>(d);
    if (!shape.empty()) shape += ',';
    shape += std::to_string(d);
  }
  BERTCC_CHECK(n_elems < 9.0e15, path, ": dataset '", name, "' has an impossible shape [", shape, "]");
  const double row_elems = dims.empty() || dims[0] == 0 ? 0.0 : n_elems / static_cast<double>(dims[0]);
  // rows: the values kept (or one sum per row) and one slab
  const double partial_bytes =
      rows ? 4.0 * ((row_sums ? 1.0 : row_elems) * static_cast<double>(rows->size()) + row_elems * kSlabRows) : 0.0;
  check_memory(rows ? partial_bytes : 4.0 * n_elems, path + ": dataset '" + name + "' [" + shape + "]",
               "is the shard corrupt?");
  // The values come from the bytes the file stores for the dataset, which the file must hold:
  // deflate expands at most about 1032:1, and shards are written whole (no unallocated chunks).
  // A shape far beyond that is a corrupt header, refused before its memory is taken.
  const double stored = static_cast<double>(H5Dget_storage_size(ds.id));
  const double logical = n_elems * static_cast<double>(H5Tget_size(ty.id));
  const double file_bytes = static_cast<double>(file_size_or_zero(path));
  BERTCC_CHECK(logical <= 4096.0 + 1100.0 * std::min(stored, file_bytes), path, ": dataset '", name, "' declares [",
               shape, "] (", logical, " bytes) but the file stores ", stored, " bytes of it in a file of ", file_bytes,
               " bytes: truncated or corrupt shard");
  // Contiguous and compact storage hold every value as is (contiguous: inside the file).
  Handle dcpl{H5Dget_create_plist(ds.id), H5Pclose};
  const H5D_layout_t layout = dcpl.id >= 0 ? H5Pget_layout(dcpl.id) : H5D_LAYOUT_ERROR;
  BERTCC_CHECK(layout != H5D_COMPACT || stored == logical, path, ": dataset '", name, "' [", shape,
               "] has compact storage of ", stored, " bytes for ", logical, ": corrupt shard");
  if (layout == H5D_CONTIGUOUS) {
    const haddr_t at = H5Dget_offset(ds.id);
    BERTCC_CHECK(
        stored == logical && (n_elems == 0 || (at != HADDR_UNDEF && static_cast<double>(at) + stored <= file_bytes)),
        path, ": dataset '", name, "' [", shape, "] claims contiguous storage of ", stored, " bytes at offset ",
        at == HADDR_UNDEF ? -1.0 : static_cast<double>(at), " in a file of ", file_bytes,
        " bytes: truncated or corrupt shard");
  }
  if (rows) {
    const hsize_t N = dims[0];
    const auto cols = static_cast<size_t>(row_elems);
    // Slabs cut across chunks: the chunk cache holds the chunks one slab touches, so each chunk is
    // decompressed once (a shard written as one chunk per dataset is then decompressed once, and
    // held decompressed while its rows are picked). The cache is the dataset's from its first open.
    if (layout == H5D_CHUNKED) {
      std::vector<hsize_t> cd(static_cast<size_t>(rank), 0);
      if (H5Pget_chunk(dcpl.id, rank, cd.data()) == rank && cd[0] > 0) {
        double chunk_bytes = static_cast<double>(H5Tget_size(ty.id));
        for (hsize_t c : cd) chunk_bytes *= static_cast<double>(c);
        const double per_slab = std::ceil(static_cast<double>(kSlabRows) / static_cast<double>(cd[0])) + 1.0;
        // The cache's chunks are held besides the rows kept and the slab: a shard written as one
        // chunk per dataset is held whole, decompressed, while its rows are picked.
        check_memory(partial_bytes + std::min(chunk_bytes * per_slab, logical),
                     path + ": dataset '" + name + "' [" + shape + "] (its rows, a slab and the chunk cache)",
                     "is the shard corrupt?");
        Handle dapl{H5Pcreate(H5P_DATASET_ACCESS), H5Pclose};
        H5Dclose(ds.id);
        ds.id = -1;
        BERTCC_CHECK(dapl.id >= 0 &&
                         H5Pset_chunk_cache(dapl.id, 12421, static_cast<size_t>(chunk_bytes * per_slab) + 1, 1.0) >= 0,
                     path, ": dataset '", name, "': cannot set its chunk cache");
        ds.id = H5Dopen2(file, name, dapl.id);
        BERTCC_CHECK(ds.id >= 0, path, ": cannot open dataset '", name, "'");
      }
    }
    for (size_t k = 0; k < rows->size(); ++k)
      BERTCC_CHECK((*rows)[k] >= 0 && static_cast<hsize_t>((*rows)[k]) < N && (k == 0 || (*rows)[k] > (*rows)[k - 1]),
                   path, ": dataset '", name, "': row ", (*rows)[k], " requested of its ", N,
                   " rows (rows must be increasing)");
    std::vector<int32_t> out(row_sums ? 0 : rows->size() * cols), slab;
    if (row_sums) row_sums->assign(rows->size(), 0);
    for (size_t k = 0; k < rows->size();) {
      const hsize_t a = static_cast<hsize_t>((*rows)[k]) / kSlabRows * kSlabRows, b = std::min(a + kSlabRows, N);
      hsize_t start[2] = {a, 0}, count[2] = {b - a, rank == 2 ? dims[1] : 1};
      Handle fsp{H5Dget_space(ds.id), H5Sclose};
      Handle msp{H5Screate_simple(rank, count, nullptr), H5Sclose};
      slab.resize(static_cast<size_t>(b - a) * cols);
      BERTCC_CHECK(
          fsp.id >= 0 && msp.id >= 0 &&
              H5Sselect_hyperslab(fsp.id, H5S_SELECT_SET, start, nullptr, count, nullptr) >= 0 &&
              (slab.empty() || H5Dread(ds.id, H5T_NATIVE_INT32, msp.id, fsp.id, H5P_DEFAULT, slab.data()) >= 0),
          path, ": cannot read rows [", a, ",", b, ") of dataset '", name, "' (truncated or corrupt file?)");
      for (; k < rows->size() && static_cast<hsize_t>((*rows)[k]) < b; ++k) {
        const auto from = slab.begin() + static_cast<std::ptrdiff_t>((static_cast<hsize_t>((*rows)[k]) - a) * cols);
        if (row_sums)
          (*row_sums)[k] = std::accumulate(from, from + static_cast<std::ptrdiff_t>(cols), int32_t{0});
        else
          std::copy_n(from, cols, out.begin() + static_cast<std::ptrdiff_t>(k * cols));
      }
    }
    return out;
  }
  const auto n = static_cast<size_t>(n_elems);
  std::vector<int32_t> out(n);
  if (n > 0)
    BERTCC_CHECK(H5Dread(ds.id, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) >= 0, path,
                 ": cannot read dataset '", name, "' (truncated or corrupt file?)");
  return out;
}

}  // namespace

namespace {

bool has_masks_in_process(const std::string& path) {
  std::lock_guard<std::mutex> lock(h5_mutex());
  Handle f{open_for_reading(path), H5Fclose};
  return H5Lexists(f.id, "masked_lm_positions", H5P_DEFAULT) > 0;
}

PretrainShard read_in_process(const std::string& path, std::vector<int32_t>* lengths,
                              const std::vector<int64_t>* rows = nullptr) {
  std::lock_guard<std::mutex> lock(h5_mutex());
  Handle f{open_for_reading(path), H5Fclose};
  PretrainShard s;
  std::vector<hsize_t> d;
  s.input_ids = read_i32(f.id, path, "input_ids", 2, d, rows);
  const auto N = static_cast<int64_t>(d[0]);  // the file's rows; s.N: those read
  s.N = rows ? static_cast<int64_t>(rows->size()) : N;
  s.S = static_cast<int64_t>(d[1]);
  auto same2 = [&](const char* name, std::vector<int32_t>& dst, int64_t cols) {
    std::vector<hsize_t> dd;
    dst = read_i32(f.id, path, name, 2, dd, rows);
    BERTCC_CHECK(static_cast<int64_t>(dd[0]) == N && (cols < 0 || static_cast<int64_t>(dd[1]) == cols), path,
                 ": dataset '", name, "' has shape [", dd[0], ",", dd[1], "], inconsistent with input_ids [", N, ",",
                 s.S, "]");
    return static_cast<int64_t>(dd[1]);
  };
  same2("input_mask", s.input_mask, s.S);
  same2("segment_ids", s.segment_ids, s.S);
  if (!lengths) {
    s.P = same2("masked_lm_positions", s.masked_lm_positions, -1);
    same2("masked_lm_ids", s.masked_lm_ids, s.P);
  } else {
    *lengths = read_i32(f.id, path, "lengths", 1, d, rows);
    BERTCC_CHECK(static_cast<int64_t>(d[0]) == N, path, ": dataset 'lengths' has ", d[0], " rows, input_ids has ", N);
  }
  s.next_sentence_labels = read_i32(f.id, path, "next_sentence_labels", 1, d, rows);
  BERTCC_CHECK(static_cast<int64_t>(d[0]) == N, path, ": dataset 'next_sentence_labels' has ", d[0],
               " rows, input_ids has ", N);
  return s;
}

// The shard's rows and, with `lengths`, each row's real tokens (the sum of its input_mask row), read
// a slab at a time.
int64_t probe_rows_in_process(const std::string& path, std::vector<int32_t>* lengths) {
  std::lock_guard<std::mutex> lock(h5_mutex());
  Handle f{open_for_reading(path), H5Fclose};
  std::vector<hsize_t> d(2, 0);
  {
    BERTCC_CHECK(H5Lexists(f.id, "input_ids", H5P_DEFAULT) > 0, path, ": missing dataset 'input_ids'");
    Handle ds{H5Dopen2(f.id, "input_ids", H5P_DEFAULT), H5Dclose};
    Handle sp{ds.id >= 0 ? H5Dget_space(ds.id) : -1, H5Sclose};
    BERTCC_CHECK(sp.id >= 0 && H5Sget_simple_extent_ndims(sp.id) == 2, path, ": dataset 'input_ids' is not [N, S]");
    H5Sget_simple_extent_dims(sp.id, d.data(), nullptr);
  }
  // the loader keeps a row order (8 bytes a row), and the lengths: an absurd row count from a
  // corrupt header is refused here, before either is allocated
  check_memory(
      8.0 * static_cast<double>(d[0]) + (lengths ? 4.0 * static_cast<double>(d[0]) : 0.0),
      path + ": dataset 'input_ids' [" + std::to_string(d[0]) + "," + std::to_string(d[1]) + "] (its row order)",
      "is the shard corrupt?");
  const auto N = static_cast<int64_t>(d[0]);
  if (!lengths) return N;
  std::vector<int64_t> rows(static_cast<size_t>(N));
  for (int64_t r = 0; r < N; ++r) rows[static_cast<size_t>(r)] = r;
  std::vector<hsize_t> dm;
  read_i32(f.id, path, "input_mask", 2, dm, &rows, lengths);
  BERTCC_CHECK(static_cast<int64_t>(dm[0]) == N, path, ": dataset 'input_mask' has ", dm[0], " rows, input_ids has ",
               N);
  return N;
}

// ---- the isolated reader ----------------------------------------------------------------------
// Debian's libhdf5 1.10 crashes inside itself on some malformed files (e.g. H5Lexists ->
// H5F__accum_read copying into a failed allocation), in calls bertcc cannot check before making.
// So a bertcc process reads shards through a child, `bertcc __hdf5-reader` (hdf5_reader_main),
// started on the first read and kept for the next ones: requests and replies go over a socket pair;
// a child killed by a signal becomes an error naming the file, and the next read starts a new child.
// Request: u8 kind (0 NVIDIA layout, 1 dynamic-masking layout, 2 has-masks probe, 3 row-count
// probe, 4 row-count and row-length probe), u32 length, path, u64 row count (kAllRows: every row),
// that many i64 rows.
// Reply: u32 magic, u8 status; status 1: u64 length, the error message; status 0: u8 has_masks and,
// for reads, i64 N, S, P, then 7 arrays (u64 count, int32 values): input_ids, input_mask,
// segment_ids, masked_lm_positions, masked_lm_ids, next_sentence_labels, lengths; for the row
// probes, i64 N and one array (the row lengths; empty for kind 3).
constexpr uint32_t kReplyMagic = 0x32485342;  // "BSH2"
constexpr uint8_t kReadMasked = 0, kReadLengths = 1, kProbeMasks = 2, kProbeRows = 3, kProbeRowLengths = 4;
constexpr uint64_t kAllRows = ~uint64_t{0};

bool write_all(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::send(fd, c, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool read_all(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = ::read(fd, c, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

template <typename T>
void put(std::string& out, const T& v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

class IsolatedReader {
 public:
  // Returns has_masks; fills `shard` (and `lengths`) for the read kinds.
  // Row probes: shard->N is the row count, *lengths the row lengths (kProbeRowLengths).
  bool request(const std::string& path, uint8_t kind, PretrainShard* shard, std::vector<int32_t>* lengths,
               const std::vector<int64_t>* rows = nullptr) {
    std::lock_guard<std::mutex> lock(mu_);
    std::string req;
    put(req, kind);
    put(req, static_cast<uint32_t>(path.size()));
    req += path;
    put(req, rows ? static_cast<uint64_t>(rows->size()) : kAllRows);
    if (rows) req.append(reinterpret_cast<const char*>(rows->data()), rows->size() * sizeof(int64_t));
    if (pid_ < 0) start(path);
    if (!write_all(fd_, req.data(), req.size())) {  // the child ended before this request: a new one
      reap();
      start(path);
      if (!write_all(fd_, req.data(), req.size())) died(path);
    }
    uint32_t magic = 0;
    uint8_t status = 0;
    if (!read_all(fd_, &magic, 4) || !read_all(fd_, &status, 1) || magic != kReplyMagic) died(path);
    if (status != 0) {
      uint64_t n = 0;
      if (!read_all(fd_, &n, 8) || n > (1u << 20)) died(path);
      std::string msg(static_cast<size_t>(n), '\0');
      if (!read_all(fd_, msg.data(), msg.size())) died(path);
      throw Error(msg);
    }
    uint8_t has_masks = 0;
    if (!read_all(fd_, &has_masks, 1)) died(path);
    if (kind == kProbeMasks) return has_masks != 0;
    if (kind == kProbeRows || kind == kProbeRowLengths) {
      int64_t n = 0;
      uint64_t count = 0;
      if (!read_all(fd_, &n, 8) || !read_all(fd_, &count, 8)) died(path);
      shard->N = n;
      check_memory(4.0 * static_cast<double>(count), path, "(the HDF5 reader's reply)");
      std::vector<int32_t> unused;
      std::vector<int32_t>& out = lengths ? *lengths : unused;
      out.resize(static_cast<size_t>(count));
      if (count > 0 && !read_all(fd_, out.data(), out.size() * 4)) died(path);
      return false;
    }
    int64_t nsp[3];
    if (!read_all(fd_, nsp, sizeof nsp)) died(path);
    shard->N = nsp[0];
    shard->S = nsp[1];
    shard->P = nsp[2];
    std::vector<int32_t> unused;
    for (std::vector<int32_t>* v :
         {&shard->input_ids, &shard->input_mask, &shard->segment_ids, &shard->masked_lm_positions,
          &shard->masked_lm_ids, &shard->next_sentence_labels, lengths ? lengths : &unused}) {
      uint64_t n = 0;
      if (!read_all(fd_, &n, 8)) died(path);
      check_memory(4.0 * static_cast<double>(n), path, "(the HDF5 reader's reply)");
      v->resize(static_cast<size_t>(n));
      if (n > 0 && !read_all(fd_, v->data(), v->size() * 4)) died(path);
    }
    return has_masks != 0;
  }

 private:
  void start(const std::string& path) {
    int sv[2];
    BERTCC_CHECK(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, path,
                 ": cannot start the HDF5 reader process (socketpair: ", std::strerror(errno), ")");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, sv[1], 0);
    posix_spawn_file_actions_adddup2(&fa, sv[1], 1);
    char arg0[] = "bertcc", arg1[] = "__hdf5-reader";
    char* argv[] = {arg0, arg1, nullptr};
    // The signal mask is this thread's (SIGINT/SIGTERM blocked, bertcc/signals.h): an interrupt to
    // the process group stops bertcc through its signal thread, not the reader under a read.
    const int rc = ::posix_spawn(&pid_, "/proc/self/exe", &fa, nullptr, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(sv[1]);
    if (rc != 0) {
      ::close(sv[0]);
      pid_ = -1;
      throw Error(path + ": cannot start the HDF5 reader process (/proc/self/exe __hdf5-reader): " + std::strerror(rc));
    }
    fd_ = sv[0];
  }
  int reap() {  // closes the socket and waits for the child; its wait status
    ::close(fd_);
    fd_ = -1;
    int st = 0;
    while (::waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    return st;
  }
  [[noreturn]] void died(const std::string& path) {
    const int st = reap();
    if (!WIFSIGNALED(st))
      throw Error(path + ": bertcc's HDF5 reader process ended (exit status " + std::to_string(WEXITSTATUS(st)) +
                  ") without a reply");
    const int sig = WTERMSIG(st);
    if (sig == SIGSEGV || sig == SIGBUS || sig == SIGABRT || sig == SIGFPE || sig == SIGILL)
      throw Error(path + ": libhdf5 crashed reading this file (" + strsignal(sig) +
                  " in bertcc's HDF5 reader process): a malformed HDF5 file");
    throw Error(path + ": bertcc's HDF5 reader process was killed (" + strsignal(sig) + ") while reading this file" +
                (sig == SIGKILL ? " (out of memory?)" : ""));
  }
  std::mutex mu_;
  pid_t pid_ = -1;
  int fd_ = -1;
};

std::atomic<bool> g_isolated{false};

IsolatedReader& isolated_reader() {
  static IsolatedReader r;
  return r;
}

}  // namespace

void isolate_hdf5_reads() { g_isolated = true; }

int hdf5_reader_main() {
  // It ends when bertcc closes its end of the socket (bertcc's exit, whatever the cause), after the
  // read at hand. (Not PR_SET_PDEATHSIG: that fires when the spawning *thread* ends, and shards are
  // read on short-lived prefetch threads.)
  for (;;) {
    uint8_t kind = 0;
    uint32_t n = 0;
    if (!read_all(0, &kind, 1)) return 0;  // bertcc closed its end
    if (!read_all(0, &n, 4) || n > 65536) return 1;
    std::string path(n, '\0');
    if (!read_all(0, path.data(), n)) return 1;
    uint64_t nrows = 0;
    if (!read_all(0, &nrows, 8)) return 1;
    std::vector<int64_t> rows;
    if (nrows != kAllRows) {
      if (nrows > (uint64_t{1} << 40)) return 1;
      rows.resize(static_cast<size_t>(nrows));
      if (nrows > 0 && !read_all(0, rows.data(), rows.size() * 8)) return 1;
    }
    const std::vector<int64_t>* sel = nrows == kAllRows ? nullptr : &rows;
    // The reply: the header, then each array straight from the shard (no second copy of it here).
    std::string head;
    put(head, kReplyMagic);
    PretrainShard s;
    std::vector<int32_t> lengths;
    const bool probe_rows = kind == kProbeRows || kind == kProbeRowLengths;
    try {
      // a read succeeds only in its layout, so only the probe opens the file to ask
      const bool masks = kind == kProbeMasks ? has_masks_in_process(path) : kind == kReadMasked;
      if (probe_rows)
        s.N = probe_rows_in_process(path, kind == kProbeRowLengths ? &lengths : nullptr);
      else if (kind != kProbeMasks)
        s = read_in_process(path, kind == kReadLengths ? &lengths : nullptr, sel);
      put(head, uint8_t{0});
      put(head, static_cast<uint8_t>(masks));
      if (probe_rows) {
        put(head, s.N);
      } else if (kind != kProbeMasks) {
        for (int64_t v : {s.N, s.S, s.P}) put(head, v);
      }
    } catch (const std::exception& e) {
      put(head, uint8_t{1});
      const std::string msg = e.what();
      put(head, static_cast<uint64_t>(msg.size()));
      head += msg;
      if (!write_all(1, head.data(), head.size())) return 1;
      continue;
    }
    if (!write_all(1, head.data(), head.size())) return 1;
    if (kind == kProbeMasks) continue;
    if (probe_rows) {
      const uint64_t count = lengths.size();
      if (!write_all(1, &count, 8) || !write_all(1, lengths.data(), lengths.size() * 4)) return 1;
      continue;
    }
    const std::vector<int32_t>* arrays[] = {
        &s.input_ids,     &s.input_mask,           &s.segment_ids, &s.masked_lm_positions,
        &s.masked_lm_ids, &s.next_sentence_labels, &lengths};
    for (const std::vector<int32_t>* v : arrays) {
      const uint64_t count = v->size();
      if (!write_all(1, &count, 8) || !write_all(1, v->data(), v->size() * 4)) return 1;
    }
  }
}

PretrainShard read_pretrain_shard(const std::string& path) { return read_pretrain_shard_layout(path, nullptr); }

PretrainShard read_pretrain_shard_layout(const std::string& path, std::vector<int32_t>* lengths,
                                         const std::vector<int64_t>* rows) {
  if (!g_isolated) return read_in_process(path, lengths, rows);
  PretrainShard s;
  isolated_reader().request(path, lengths ? kReadLengths : kReadMasked, &s, lengths, rows);
  return s;
}

int64_t probe_shard_rows(const std::string& path, std::vector<int32_t>* lengths) {
  if (!g_isolated) return probe_rows_in_process(path, lengths);
  PretrainShard s;
  isolated_reader().request(path, lengths ? kProbeRowLengths : kProbeRows, &s, lengths);
  return s.N;
}

bool pretrain_shard_has_masks(const std::string& path) {
  if (!g_isolated) return has_masks_in_process(path);
  return isolated_reader().request(path, kProbeMasks, nullptr, nullptr);
}

BertBatch make_pretrain_batch(const PretrainShard& s, int64_t first, int64_t count, const std::string& where) {
  BERTCC_CHECK(first >= 0 && count > 0 && first + count <= s.N, where, ": rows [", first, ",", first + count,
               ") outside the shard's ", s.N, " rows");
  std::vector<int64_t> rows(static_cast<size_t>(count));
  for (int64_t r = 0; r < count; ++r) rows[static_cast<size_t>(r)] = first + r;
  return make_pretrain_batch(s, rows, where);
}

BertBatch make_pretrain_batch(const PretrainShard& s, const std::vector<int64_t>& rows, const std::string& where) {
  BertBatch b;
  b.B = static_cast<int64_t>(rows.size());
  b.T = s.S;
  const size_t S = static_cast<size_t>(s.S);
  b.mlm_labels.assign(rows.size() * S, -1);
  for (size_t k = 0; k < rows.size(); ++k) {
    const int64_t row = rows[k];
    BERTCC_CHECK(row >= 0 && row < s.N, where, ": row ", row, " outside the shard's ", s.N, " rows");
    const size_t o = static_cast<size_t>(row) * S;
    b.input_ids.insert(b.input_ids.end(), s.input_ids.begin() + o, s.input_ids.begin() + o + S);
    b.input_mask.insert(b.input_mask.end(), s.input_mask.begin() + o, s.input_mask.begin() + o + S);
    b.segment_ids.insert(b.segment_ids.end(), s.segment_ids.begin() + o, s.segment_ids.begin() + o + S);
    const int32_t* pos = s.masked_lm_positions.data() + row * s.P;
    const int32_t* ids = s.masked_lm_ids.data() + row * s.P;
    for (int64_t j = 0; j < s.P; ++j) {
      if (pos[j] == 0) break;  // NVIDIA: the list ends at the first 0 position
      BERTCC_CHECK(pos[j] > 0 && pos[j] < s.S, where, ": masked_lm_positions[", row, "][", j, "] = ", pos[j],
                   " outside [1, ", s.S, ")");
      b.mlm_labels[k * S + static_cast<size_t>(pos[j])] = ids[j];
    }
    b.nsp_labels.push_back(s.next_sentence_labels[static_cast<size_t>(row)]);
  }
  return b;
}

void write_pretrain_shard(const std::string& path, const PretrainShard& s) {
  write_pretrain_shard_layout(path, s, nullptr);
}

void write_pretrain_shard_layout(const std::string& path, const PretrainShard& s, const std::vector<int32_t>* lengths) {
  std::lock_guard<std::mutex> lock(h5_mutex());
  thread_local H5Quiet quiet;
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  (void)kNoHdf5Atexit;
  try {
    Handle f{H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose};
    BERTCC_CHECK(f.id >= 0, path, ": cannot create HDF5 file: ", std::strerror(errno));
    auto put = [&](const char* name, const std::vector<int32_t>& v, hid_t type, std::vector<hsize_t> dims) {
      Handle sp{H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose};
      Handle pl{H5Pcreate(H5P_DATASET_CREATE), H5Pclose};
      if (dims[0] > 0) {
        // chunks of whole rows, about 1 MiB each (as h5py's), so that reading some rows
        // decompresses only the chunks that hold them
        std::vector<hsize_t> chunk = dims;
        const double row_bytes = std::max(4.0, 4.0 * static_cast<double>(dims.size() > 1 ? dims[1] : 1));
        chunk[0] = std::clamp<hsize_t>(static_cast<hsize_t>(1048576.0 / row_bytes), 1, dims[0]);
        for (size_t i = 1; i < chunk.size(); ++i) chunk[i] = std::max<hsize_t>(chunk[i], 1);
        H5Pset_chunk(pl.id, static_cast<int>(chunk.size()), chunk.data());
        H5Pset_deflate(pl.id, 4);
      }
      Handle ds{H5Dcreate2(f.id, name, type, sp.id, H5P_DEFAULT, pl.id, H5P_DEFAULT), H5Dclose};
      BERTCC_CHECK(ds.id >= 0, path, ": cannot create dataset '", name, "'");
      if (!v.empty())
        BERTCC_CHECK(H5Dwrite(ds.id, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) >= 0, path,
                     ": cannot write dataset '", name, "' (disk full or file-size limit?)");
      // Closing flushes the compressed chunks: a full disk shows here.
      const hid_t id = ds.id;
      ds.id = -1;
      BERTCC_CHECK(H5Dclose(id) >= 0, path, ": writing dataset '", name, "' failed (disk full or file-size limit?)");
    };
    const hsize_t N = static_cast<hsize_t>(s.N), S = static_cast<hsize_t>(s.S), P = static_cast<hsize_t>(s.P);
    put("input_ids", s.input_ids, H5T_STD_I32LE, {N, S});
    put("input_mask", s.input_mask, H5T_STD_I8LE, {N, S});
    put("segment_ids", s.segment_ids, H5T_STD_I8LE, {N, S});
    if (!lengths) {
      put("masked_lm_positions", s.masked_lm_positions, H5T_STD_I32LE, {N, P});
      put("masked_lm_ids", s.masked_lm_ids, H5T_STD_I32LE, {N, P});
    } else {
      put("lengths", *lengths, H5T_STD_I32LE, {N});
    }
    put("next_sentence_labels", s.next_sentence_labels, H5T_STD_I8LE, {N});
    BERTCC_CHECK(H5Fflush(f.id, H5F_SCOPE_GLOBAL) >= 0, path, ": flush failed (disk full or file-size limit?)");
    const hid_t id = f.id;
    f.id = -1;
    BERTCC_CHECK(H5Fclose(id) >= 0, path, ": closing the file failed (disk full or file-size limit?)");
    // fsync + rename through the atomic writer's guarantees
    FILE* fp = std::fopen(tmp.c_str(), "rb+");
    BERTCC_CHECK(fp, path, ": cannot reopen the written file: ", std::strerror(errno));
    const bool synced = ::fsync(fileno(fp)) == 0;
    const int e = errno;
    std::fclose(fp);
    BERTCC_CHECK(synced, path, ": fsync failed: ", std::strerror(e));
    BERTCC_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, path, ": rename failed: ", std::strerror(errno));
  } catch (...) {
    ::unlink(tmp.c_str());  // nothing half-written stays behind
    throw;
  }
}

}  // namespace bertcc
