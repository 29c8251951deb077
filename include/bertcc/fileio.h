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

}  // namespace bertcc
