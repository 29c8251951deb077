#include "bertcc/pyrandom.h"

#include <algorithm>
#include <cmath>

#include "bertcc/utf8.h"

namespace bertcc {

PyRandom::PyRandom(uint64_t seed) {
  // CPython: the absolute value of an int seed as little-endian 32-bit words -> init_by_array.
  std::vector<uint32_t> key;
  for (uint64_t s = seed; s; s >>= 32) key.push_back(static_cast<uint32_t>(s));
  if (key.empty()) key.push_back(0);
  mt_[0] = 19650218u;
  for (int i = 1; i < 624; ++i) mt_[i] = 1812433253u * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + static_cast<uint32_t>(i);
  int i = 1;
  size_t j = 0;
  for (size_t k = std::max<size_t>(624, key.size()); k; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1664525u)) + key[j] + static_cast<uint32_t>(j);
    ++i;
    ++j;
    if (i >= 624) {
      mt_[0] = mt_[623];
      i = 1;
    }
    if (j >= key.size()) j = 0;
  }
  for (int k = 623; k; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1566083941u)) - static_cast<uint32_t>(i);
    ++i;
    if (i >= 624) {
      mt_[0] = mt_[623];
      i = 1;
    }
  }
  mt_[0] = 0x80000000u;
  idx_ = 624;
}

uint32_t PyRandom::next() {
  if (idx_ >= 624) {
    for (int k = 0; k < 624; ++k) {
      const uint32_t y = (mt_[k] & 0x80000000u) | (mt_[(k + 1) % 624] & 0x7fffffffu);
      mt_[k] = mt_[(k + 397) % 624] ^ (y >> 1) ^ ((y & 1u) ? 0x9908b0dfu : 0u);
    }
    idx_ = 0;
  }
  uint32_t y = mt_[idx_++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

double PyRandom::random() {
  const uint32_t a = next() >> 5, b = next() >> 6;
  return (a * 67108864.0 + b) * (1.0 / 9007199254740992.0);
}

uint32_t PyRandom::getrandbits(int k) { return next() >> (32 - k); }

uint64_t PyRandom::randbelow(uint64_t n) {
  int k = 0;
  for (uint64_t v = n; v; v >>= 1) ++k;  // n.bit_length()
  if (k <= 32) {
    uint32_t r = getrandbits(k);
    while (r >= n) r = getrandbits(k);
    return r;
  }
  for (;;) {  // k > 32: CPython fills whole 32-bit words, least significant first
    const uint64_t lo = next();
    const uint64_t hi = next() >> (64 - k);
    const uint64_t r = lo | (hi << 32);
    if (r < n) return r;
  }
}

bool py_isspace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

std::string py_join_split(std::string_view s) {
  std::string out;
  bool pending = false;
  const auto* b = reinterpret_cast<const unsigned char*>(s.data());
  for (size_t i = 0; i < s.size();) {
    bool invalid = false;
    const uint32_t c = decode_utf8(b, s.size(), i, invalid);
    if (py_isspace(c)) {
      pending = !out.empty();
      continue;
    }
    if (pending) out.push_back(' ');
    pending = false;
    append_utf8(out, c);
  }
  return out;
}

int64_t round_half_even(double x) {
  const double f = std::floor(x), d = x - f;
  if (d != 0.5) return static_cast<int64_t>(d > 0.5 ? f + 1 : f);
  return static_cast<int64_t>(f) + (static_cast<int64_t>(f) % 2 != 0);
}

}  // namespace bertcc
