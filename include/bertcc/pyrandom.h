// Python's `random.Random` reproduced exactly (MT19937 with CPython's seeding, random(),
// getrandbits, _randbelow, randint, shuffle), so that data preparation makes the same choices as
// Google's create_pretraining_data.py for the same seed and tokens.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace bertcc {

class PyRandom {
 public:
  explicit PyRandom(uint64_t seed);
  double random();                 // [0, 1), 53 bits
  uint32_t getrandbits(int k);     // 1 <= k <= 32
  uint64_t randbelow(uint64_t n);  // [0, n), n >= 1
  int64_t randint(int64_t a, int64_t b) {
    return a + static_cast<int64_t>(randbelow(static_cast<uint64_t>(b - a + 1)));
  }
  template <class T>
  void shuffle(std::vector<T>& x) {
    for (size_t i = x.size(); i-- > 1;) std::swap(x[i], x[static_cast<size_t>(randbelow(i + 1))]);
  }

 private:
  uint32_t next();
  uint32_t mt_[624];
  int idx_ = 624;
};

// Python 3's round() to an integer: halves go to the even neighbour.
int64_t round_half_even(double x);

// Python's str.isspace() for one code point (bidirectional WS/B/S or category Zs), which is what
// str.split() and str.strip() split and strip on.
bool py_isspace(uint32_t c);
// Python's " ".join(s.split()) on UTF-8 text (code points as decode_utf8 reads them).
std::string py_join_split(std::string_view s);

}  // namespace bertcc
