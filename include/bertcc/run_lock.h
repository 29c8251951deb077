// One run per output folder: a lock file (OUTPUT/.bertcc.lock) held with flock(2) for the life of
// the run. The kernel drops the lock when the process ends however it ends, so a crashed run never
// blocks the next; its record (PID, host, start time, command) is then taken over with a note.
#pragma once
#include <string>

namespace bertcc {

class RunLock {
 public:
  RunLock() = default;
  // Locks `dir` (which must exist) for `command`; a folder another live run holds is an error
  // naming that run (PID, host, start time) and `flag`.
  RunLock(const std::string& dir, const std::string& flag, const std::string& command);
  RunLock(RunLock&& o) noexcept : fd_(o.fd_), path_(std::move(o.path_)) { o.fd_ = -1; }
  RunLock& operator=(RunLock&& o) noexcept;
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;
  ~RunLock() { release(); }
  void release();  // removes the lock file, then drops the lock

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace bertcc
