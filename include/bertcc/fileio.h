// Files: whole-file reads with clear errors; atomic writes (temporary file, fsync, rename).
#pragma once
#include <string>
#include <string_view>

namespace bertcc {

std::string read_file(const std::string& path);
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
