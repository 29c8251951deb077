#include "bertcc/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <iostream>

#include "bertcc/error.h"

namespace bertcc {

namespace {
std::string read_fd(int fd) {
  std::string s(512, '\0');
  const ssize_t n = ::pread(fd, s.data(), s.size(), 0);
  s.resize(n > 0 ? static_cast<size_t>(n) : 0);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
  return s;
}

std::string host_name() {
  char h[256] = {};
  if (::gethostname(h, sizeof h - 1) != 0) return "?";
  return h;
}

std::string utc_now() {
  char buf[32];
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}
}  // namespace

RunLock::RunLock(const std::string& dir, const std::string& flag, const std::string& command) {
  path_ = dir + "/.bertcc.lock";
  // Another run may remove the file between our open and our flock: then the lock we got is on
  // a file no longer in the folder, and we try again on the new one.
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    BERTCC_CHECK(fd >= 0, flag, " ", dir, ": cannot create the lock file ", path_, ": ", std::strerror(errno));
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int e = errno;
      const std::string holder = read_fd(fd);
      ::close(fd);
      BERTCC_CHECK(e == EWOULDBLOCK || e == EINTR, flag, " ", dir, ": cannot lock ", path_, ": ", std::strerror(e));
      fail(flag, " ", dir, ": another run is writing to this folder (",
           holder.empty() ? "its record is not written yet" : holder, "); wait for it to end, or give another ", flag);
    }
    struct stat a, b;
    if (::fstat(fd, &a) != 0 || ::stat(path_.c_str(), &b) != 0 || a.st_ino != b.st_ino || a.st_dev != b.st_dev) {
      ::close(fd);
      continue;
    }
    const std::string stale = read_fd(fd);
    if (!stale.empty())  // (its process ended without removing the file: the kernel dropped its lock)
      std::cerr << "note: " << path_ << ": taking over the lock of a run that ended without releasing it (" << stale
                << ")\n";
    const std::string rec = "pid " + std::to_string(::getpid()) + " on " + host_name() + ", started " + utc_now() +
                            ", bertcc " + command + "\n";
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, rec.data(), rec.size(), 0) != static_cast<ssize_t>(rec.size())) {
      const int e = errno;
      ::close(fd);
      fail(flag, " ", dir, ": cannot write the lock file ", path_, ": ", std::strerror(e));
    }
    fd_ = fd;
    return;
  }
  fail(flag, " ", dir, ": cannot lock ", path_, ": it keeps being replaced");
}

RunLock& RunLock::operator=(RunLock&& o) noexcept {
  if (this != &o) {
    release();
    fd_ = o.fd_;
    path_ = std::move(o.path_);
    o.fd_ = -1;
  }
  return *this;
}

void RunLock::release() {
  if (fd_ < 0) return;
  ::unlink(path_.c_str());  // while still holding it: a run that opens it now finds it gone and retries
  ::close(fd_);
  fd_ = -1;
}

}  // namespace bertcc
