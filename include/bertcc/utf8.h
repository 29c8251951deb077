// UTF-8 helpers shared by the tokenizer, corpus preparation and Wikipedia extraction.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace bertcc {

inline void append_utf8(std::string& s, uint32_t cp) {
  if (cp < 0x80) {
    s.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    s.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    s.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    s.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    s.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// Decodes the code point at s[i] and advances i. Invalid input (bad lead byte, truncated or
// malformed sequence, overlong form, surrogate, > U+10FFFF) gives U+FFFD, sets `invalid` and
// advances one byte.
inline uint32_t decode_utf8(const unsigned char* s, size_t n, size_t& i, bool& invalid) {
  const unsigned char c = s[i];
  invalid = false;
  if (c < 0x80) {
    ++i;
    return c;
  }
  int len;
  uint32_t cp, min;
  if (c >= 0xC2 && c <= 0xDF) {
    len = 2;
    cp = c & 0x1F;
    min = 0x80;
  } else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    cp = c & 0x0F;
    min = 0x800;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    cp = c & 0x07;
    min = 0x10000;
  } else {
    ++i;
    invalid = true;
    return 0xFFFD;
  }
  if (i + static_cast<size_t>(len) > n) {
    ++i;
    invalid = true;
    return 0xFFFD;
  }
  for (int k = 1; k < len; ++k) {
    const unsigned char cc = s[i + static_cast<size_t>(k)];
    if ((cc & 0xC0) != 0x80) {
      ++i;
      invalid = true;
      return 0xFFFD;
    }
    cp = (cp << 6) | (cc & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    ++i;
    invalid = true;
    return 0xFFFD;
  }
  i += static_cast<size_t>(len);
  return cp;
}

// Code points in s[0, bytes) as decode_utf8 reads them (an invalid byte counts as one).
inline size_t utf8_length(const std::string& s, size_t bytes = std::string::npos) {
  const size_t n = bytes < s.size() ? bytes : s.size();
  size_t count = 0;
  for (size_t i = 0; i < n; ++count) {
    bool invalid = false;
    decode_utf8(reinterpret_cast<const unsigned char*>(s.data()), n, i, invalid);
  }
  return count;
}

}  // namespace bertcc
