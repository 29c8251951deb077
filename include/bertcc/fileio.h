// Files: whole-file reads with clear errors; atomic writes (temporary file, fsync, rename).
#pragma once
#include <cstdint>
#include <fstream>
#include <string>
#include <string_view>

namespace bertcc {

// ---- the bounded reader: every file read whole goes through read_file. Only a regular file is
// read (a folder, /dev/zero or a FIFO where a file is expected is an error naming it), and only
// up to the cap of its kind, checked from its size before anything is read: sizes no real input
// of that kind reaches. `-` is stdin (a pipe or a redirected file), its cap checked as it is read.
constexpr uint64_t kMaxConfigBytes = uint64_t{64} << 20;  // config.json, trainer_state.json, JSON settings
constexpr uint64_t kMaxVocabBytes = uint64_t{1} << 30;    // vocab.txt, tokenizer.json
constexpr uint64_t kMaxDataBytes = uint64_t{64} << 30;    // task data, predictions, weights
std::string read_file(const std::string& path, uint64_t cap = kMaxDataBytes, const char* kind = "input file");
// The same checks for a large file read whole (weights), its bytes mapped read-only from the page
// cache (as safetensors' own safe_open and PyTorch's mmap loading do): no copy, no zeroed buffer
// faulted in page by page, which was most of a bert-base load. Empty for an empty file. (A file
// cut short by another process while it is mapped ends the process with SIGBUS where it reads
// past the new end: write weights by rename, as bertcc does.) A reader brackets each range it
// reads with will_read (its pages mapped in one call) and done_reading (its pages dropped from
// this process, the page cache keeping them), so that a load holds one tensor of the file at a
// time, not the whole file besides the weights it fills.
class MappedFile {
 public:
  static MappedFile map(const std::string& path, uint64_t cap = kMaxDataBytes, const char* kind = "input file");
  MappedFile() = default;
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();
  const char* data() const { return data_; }
  size_t size() const { return size_; }
  void will_read(size_t off, size_t n) const;
  void done_reading(size_t off, size_t n) const;

 private:
  char* data_ = nullptr;
  size_t size_ = 0;
};

// ---- text input: UTF-8. Every command reads its text files and stdin through these.
// The length of a UTF-8 byte-order mark at the start of `head` (3: skip it; 0: none). A UTF-16 or
// UTF-32 byte-order mark (FF FE, FE FF, FF FE 00 00, 00 00 FE FF) is refused, naming `name` and the
// encoding (bytes of UTF-16 read as UTF-8 keep their NULs and merge lines), with the iconv command
// that converts it.
size_t text_bom_length(std::string_view head, const std::string& name);
// The first line read from `name` (by std::getline): a UTF-8 BOM removed, UTF-16/32 refused.
void strip_text_bom(std::string& first_line, const std::string& name);
// read_file for text: a UTF-8 BOM removed, UTF-16/32 refused.
std::string read_text_file(const std::string& path, uint64_t cap = kMaxDataBytes, const char* kind = "input file");
// Opens `path` for reading text line by line: an error naming it when it cannot be opened, or is
// a folder or a device (/dev/zero would be one endless line); a FIFO is read as a stream.
void open_text_input(std::ifstream& in, const std::string& path);
// Commands that read stdin: refuses a folder on stdin (`bertcc classify ... < somedir` read
// nothing and exited 0) before reading, and a read error after (`in` at its end).
void check_stdin_not_directory();
// std::getline with a bound: a line longer than `cap` bytes (stdin from /dev/zero is one endless
// line) is an error naming `name` and the line number, before more is read.
constexpr size_t kMaxLineBytes = size_t{64} << 20;
bool read_line(std::istream& in, std::string& line, const std::string& name, int64_t line_no,
               size_t cap = kMaxLineBytes);
void check_stdin_read(const std::istream& in);
// Writes to `path.tmp.<pid>`, fsyncs, renames over `path`, fsyncs the directory.
void write_file_atomic(const std::string& path, std::string_view data);
// A name of that form (NAME.tmp.DIGITS): the temporary file of a write that has not finished or
// was interrupted, which a command listing a folder's inputs leaves out.
bool is_temp_file_name(const std::string& path);
bool file_exists(const std::string& path);
std::string join_path(const std::string& dir, const std::string& name);

// Refuses, naming both flags and paths, an output that is the input (the same file or folder,
// through symbolic or hard links too) or, when `input_read_whole` (a folder of which every file
// is read: a corpus folder, shards), that lies inside the input folder. Empty paths are ignored.
// Commands call it for each of their inputs before writing anything.
void check_output_not_input(const std::string& output, const std::string& output_flag, const std::string& input,
                            const std::string& input_flag, bool input_read_whole = false);

}  // namespace bertcc
