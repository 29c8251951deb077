#include "bertcc/fileio.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "bertcc/error.h"

namespace bertcc {

namespace {
const char* file_kind(mode_t m) {
  if (S_ISDIR(m)) return "a folder";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISFIFO(m)) return "a FIFO (pipe)";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

void check_not_directory(const std::string& path) {
  struct stat st;
  BERTCC_CHECK(::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode), path, ": is a folder, not a file");
}

std::string gib(uint64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g GiB", static_cast<double>(b) / 1073741824.0);
  return buf;
}
}  // namespace

namespace {
// `-`: stdin, a pipe or a redirected file, whose size is not known before it is read: the cap is
// checked while reading, and a byte past it is an error (nothing beyond cap + 1 bytes is held).
std::string read_stdin(uint64_t cap, const char* kind) {
  struct stat st;
  BERTCC_CHECK(::fstat(0, &st) == 0, "<stdin>: cannot stat: ", std::strerror(errno));
  BERTCC_CHECK(!S_ISDIR(st.st_mode), "<stdin>: is a folder (input redirected from a folder?); give a file or a pipe");
  std::string out;
  size_t done = 0;
  for (;;) {
    if (done == out.size()) {
      BERTCC_CHECK(done <= cap, "<stdin>: more than ", cap, " bytes (", gib(cap), "), more than a ", kind,
                   " can be; refusing to read on");
      out.resize(static_cast<size_t>(std::min<uint64_t>(cap + 1, out.size() + 65536)));
    }
    const ssize_t r = ::read(0, out.data() + done, out.size() - done);
    if (r < 0 && errno == EINTR) continue;
    BERTCC_CHECK(r >= 0, "<stdin>: read error: ", std::strerror(errno));
    if (r == 0) break;
    done += static_cast<size_t>(r);
  }
  out.resize(done);
  return out;
}
}  // namespace

namespace {
// `path` opened for reading after the checks every whole-file read makes (a regular file, within
// the cap of its kind); its size.
struct OpenedFile {
  struct Fd {  // closed however the constructor ends
    int fd;
    ~Fd() {
      if (fd >= 0) ::close(fd);
    }
  } owned;
  const int fd;
  uint64_t size = 0;
  OpenedFile(const std::string& path, uint64_t cap, const char* kind)
      : owned{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK)},  // (a FIFO: refused below, not waited on)
        fd(owned.fd) {
    BERTCC_CHECK(fd >= 0, path, ": cannot open: ", std::strerror(errno));
    struct stat st;
    BERTCC_CHECK(::fstat(fd, &st) == 0, path, ": cannot stat: ", std::strerror(errno));
    if (S_ISDIR(st.st_mode)) fail(path, ": is a folder, not a file");
    BERTCC_CHECK(S_ISREG(st.st_mode), path, ": is ", file_kind(st.st_mode), ", not a regular file (expected a ", kind,
                 ")");
    size = static_cast<uint64_t>(st.st_size);
    BERTCC_CHECK(size <= cap, path, ": ", size, " bytes (", gib(size), "), more than a ", kind, " can be (", gib(cap),
                 "); refusing to read it");
  }
  OpenedFile(const OpenedFile&) = delete;
  OpenedFile& operator=(const OpenedFile&) = delete;
  // Reads into to[0, room) from where `done` left off; the bytes read in all
  size_t read_into(char* to, size_t room, size_t done, const std::string& path) const {
    while (done < room) {
      const ssize_t r = ::read(fd, to + done, room - done);
      if (r < 0 && errno == EINTR) continue;
      BERTCC_CHECK(r >= 0, path, ": read error: ", std::strerror(errno));
      if (r == 0) break;
      done += static_cast<size_t>(r);
    }
    return done;
  }
};
}  // namespace

std::string read_file(const std::string& path, uint64_t cap, const char* kind) {
  if (path == "-") return read_stdin(cap, kind);
  const OpenedFile f(path, cap, kind);
  std::string out;
  out.resize(static_cast<size_t>(f.size));
  size_t done = 0;
  for (;;) {  // (a file that grows while it is read is cut at the cap)
    done = f.read_into(out.data(), out.size(), done, path);
    if (done < out.size() || out.size() >= cap) break;
    out.resize(static_cast<size_t>(std::min<uint64_t>(cap, out.size() + 65536)));
  }
  out.resize(done);
  return out;
}

MappedFile MappedFile::map(const std::string& path, uint64_t cap, const char* kind) {
  const OpenedFile f(path, cap, kind);
  MappedFile b;
  if (f.size == 0) return b;
  void* m = ::mmap(nullptr, static_cast<size_t>(f.size), PROT_READ, MAP_PRIVATE, f.fd, 0);
  BERTCC_CHECK(m != MAP_FAILED, path, ": cannot map its ", f.size, " bytes (", gib(f.size),
               ") for reading: ", std::strerror(errno));
  b.data_ = static_cast<char*>(m);
  b.size_ = static_cast<size_t>(f.size);
  return b;
}

namespace {
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14
#endif
// [off, off + n) of a mapping of size bytes widened to whole pages: {start, length}
std::pair<char*, size_t> page_span(char* base, size_t size, size_t off, size_t n) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t b = off / page * page, e = std::min(size, (off + n + page - 1) / page * page);
  return {base + b, e > b ? e - b : 0};
}
}  // namespace

void MappedFile::will_read(size_t off, size_t n) const {
  if (!data_ || n == 0 || off >= size_) return;
  const auto [p, len] = page_span(data_, size_, off, n);
  // page tables filled in one call (no fault per 4 KB page); a kernel before 5.14: a read-ahead hint
  if (::madvise(p, len, MADV_POPULATE_READ) != 0) ::madvise(p, len, MADV_WILLNEED);
}

void MappedFile::done_reading(size_t off, size_t n) const {
  if (!data_ || n == 0 || off >= size_) return;
  const auto [p, len] = page_span(data_, size_, off, n);
  ::madvise(p, len, MADV_DONTNEED);  // a read-only file mapping: read again, the page comes back from the file
}

MappedFile::MappedFile(MappedFile&& o) noexcept : data_(o.data_), size_(o.size_) {
  o.data_ = nullptr;
  o.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    if (data_) ::munmap(data_, size_);
    data_ = o.data_;
    size_ = o.size_;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(data_, size_);
}

size_t text_bom_length(std::string_view head, const std::string& name) {
  auto starts = [&](std::string_view bom) { return head.substr(0, bom.size()) == bom; };
  const char* enc = nullptr;
  const char* bom = nullptr;
  if (starts(std::string_view("\xFF\xFE\0\0", 4))) {
    enc = "UTF-32LE", bom = "FF FE 00 00";
  } else if (starts(std::string_view("\0\0\xFE\xFF", 4))) {
    enc = "UTF-32BE", bom = "00 00 FE FF";
  } else if (starts("\xFF\xFE")) {
    enc = "UTF-16LE", bom = "FF FE";
  } else if (starts("\xFE\xFF")) {
    enc = "UTF-16BE", bom = "FE FF";
  }
  if (enc != nullptr)
    fail(name, ": the text is ", enc, " (it starts with the byte-order mark ", bom,
         "); bertcc reads UTF-8: convert it first, e.g. iconv -f ", std::string(enc).substr(0, 6), " -t UTF-8 ",
         name == "<stdin>" ? std::string("FILE") : name, " > FILE.utf8");
  return starts("\xEF\xBB\xBF") ? 3 : 0;
}

void strip_text_bom(std::string& first_line, const std::string& name) {
  const size_t n = text_bom_length(first_line, name);
  if (n > 0) first_line.erase(0, n);
}

std::string read_text_file(const std::string& path, uint64_t cap, const char* kind) {
  std::string s = read_file(path, cap, kind);
  strip_text_bom(s, path);
  return s;
}

void open_text_input(std::ifstream& in, const std::string& path) {
  in.open(path, std::ios::binary);
  BERTCC_CHECK(in, path, ": cannot open: ", std::strerror(errno));
  check_not_directory(path);
  struct stat st;
  BERTCC_CHECK(::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode) || S_ISFIFO(st.st_mode), path, ": is ",
               file_kind(st.st_mode), ", not a text file");
}

void check_stdin_not_directory() {
  struct stat st;
  BERTCC_CHECK(::fstat(0, &st) != 0 || !S_ISDIR(st.st_mode),
               "<stdin>: is a folder (input redirected from a folder?); give a file or a pipe");
}

bool read_line(std::istream& in, std::string& line, const std::string& name, int64_t line_no, size_t cap) {
  line.clear();
  std::streambuf* sb = in.rdbuf();
  for (;;) {
    const int c = sb->sbumpc();
    if (c == std::char_traits<char>::eof()) {
      in.setstate(line.empty() ? std::ios::eofbit | std::ios::failbit : std::ios::eofbit);
      return !line.empty();
    }
    if (c == '\n') return true;
    BERTCC_CHECK(line.size() < cap, name, ":", line_no, ": a line longer than ", cap,
                 " bytes; no input line is that long (is this the right input?)");
    line.push_back(static_cast<char>(c));
  }
}

void check_stdin_read(const std::istream& in) {
  BERTCC_CHECK(!in.bad() && !std::ferror(stdin), "<stdin>: read error: ", std::strerror(errno));
}

static void fsync_dir(const std::string& path) {
  const auto slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

bool is_temp_file_name(const std::string& path) {
  const size_t dot = path.rfind(".tmp.");
  if (dot == std::string::npos || dot + 5 == path.size() || path.find('/', dot) != std::string::npos) return false;
  return std::all_of(path.begin() + static_cast<std::ptrdiff_t>(dot + 5), path.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

void write_file_atomic(const std::string& path, std::string_view data) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  BERTCC_CHECK(fd >= 0, path, ": cannot create temporary file: ", std::strerror(errno));
  size_t done = 0;
  while (done < data.size()) {
    ssize_t w = ::write(fd, data.data() + done, data.size() - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      fail(path, ": write failed: ", std::strerror(e));
    }
    done += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    fail(path, ": fsync/close failed: ", std::strerror(errno));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    fail(path, ": rename failed: ", std::strerror(e));
  }
  fsync_dir(path);
}

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::string join_path(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

void check_output_not_input(const std::string& output, const std::string& output_flag, const std::string& input,
                            const std::string& input_flag, bool input_read_whole) {
  namespace fs = std::filesystem;
  if (output.empty() || input.empty()) return;
  std::error_code ec;
  // Both exist: the same file or folder whatever the path says (hard links, bind mounts).
  if (fs::exists(output, ec) && fs::exists(input, ec) && fs::equivalent(output, input, ec))
    fail(output_flag, " ", output, " is the input ", input_flag, " ", input,
         "; writing it would destroy the input: choose another ", output_flag);
  // Otherwise by their canonical paths (symbolic links resolved as far as the paths exist).
  const fs::path o = fs::weakly_canonical(fs::absolute(output, ec), ec);
  const fs::path i = fs::weakly_canonical(fs::absolute(input, ec), ec);
  if (o.empty() || i.empty()) return;
  auto strip = [](fs::path p) { return p.has_filename() ? p : p.parent_path(); };  // "dir/" is "dir"
  const fs::path oc = strip(o), ic = strip(i);
  if (oc == ic)
    fail(output_flag, " ", output, " is the input ", input_flag, " ", input,
         "; writing it would destroy the input: choose another ", output_flag);
  if (input_read_whole && fs::is_directory(ic, ec)) {
    auto [a, b] = std::mismatch(ic.begin(), ic.end(), oc.begin(), oc.end());
    if (a == ic.end())
      fail(output_flag, " ", output, " lies inside the input folder ", input_flag, " ", input,
           ", every file of which is read; writing there would overwrite or mix with the input: choose an "
           "output outside it");
  }
}

}  // namespace bertcc
