// Files: whole-file reads with clear errors; atomic writes (temporary file, fsync, rename).
#pragma once
#include <fstream>
#include <string>
#include <string_view>

namespace bertcc {

// Refuses a folder (read(2) fails with EISDIR, which iostreams would report as an empty file).
std::string read_file(const std::string& path);

// ---- text input: UTF-8. Every command reads its text files and stdin through these.
// The length of a UTF-8 byte-order mark at the start of `head` (3: skip it; 0: none). A UTF-16 or
// UTF-32 byte-order mark (FF FE, FE FF, FF FE 00 00, 00 00 FE FF) is refused, naming `name` and the
// encoding (bytes of UTF-16 read as UTF-8 keep their NULs and merge lines), with the iconv command
// that converts it.
size_t text_bom_length(std::string_view head, const std::string& name);
// The first line read from `name` (by std::getline): a UTF-8 BOM removed, UTF-16/32 refused.
void strip_text_bom(std::string& first_line, const std::string& name);
// read_file for text: a UTF-8 BOM removed, UTF-16/32 refused.
std::string read_text_file(const std::string& path);
// Opens `path` for reading text line by line: an error naming it when it cannot be opened or is a
// folder.
void open_text_input(std::ifstream& in, const std::string& path);
// Commands that read stdin: refuses a folder on stdin (`bertcc classify ... < somedir` read
// nothing and exited 0) before reading, and a read error after (`in` at its end).
void check_stdin_not_directory();
void check_stdin_read(const std::istream& in);
// Writes to `path.tmp.<pid>`, fsyncs, renames over `path`, fsyncs the directory.
void write_file_atomic(const std::string& path, std::string_view data);
bool file_exists(const std::string& path);
std::string join_path(const std::string& dir, const std::string& name);

// Refuses, naming both flags and paths, an output that is the input (the same file or folder,
// through symbolic or hard links too) or, when `input_read_whole` (a folder of which every file
// is read: a corpus folder, shards), that lies inside the input folder. Empty paths are ignored.
// Commands call it for each of their inputs before writing anything.
void check_output_not_input(const std::string& output, const std::string& output_flag, const std::string& input,
                            const std::string& input_flag, bool input_read_whole = false);

}  // namespace bertcc
