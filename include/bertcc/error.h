// Errors: one exception type; every message names the file, field or tensor at fault.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace bertcc {

struct Error : std::runtime_error {
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

namespace detail {
inline void append(std::ostringstream&) {}
template <class T, class... R>
void append(std::ostringstream& os, const T& v, const R&... rest) {
  os << v;
  append(os, rest...);
}
}  // namespace detail

template <class... A>
[[noreturn]] void fail(const A&... parts) {
  std::ostringstream os;
  detail::append(os, parts...);
  throw Error(os.str());
}

}  // namespace bertcc

#define BERTCC_CHECK(cond, ...)               \
  do {                                        \
    if (!(cond)) ::bertcc::fail(__VA_ARGS__); \
  } while (0)
