// JSON from outside (JSON lines on stdin, HTTP request bodies) is refused when it nests deeper than
// kMaxJsonDepth arrays and objects: nlohmann::json destroys and serializes values recursively, so
// a line of 100,000 '[' crashed the process with a stack overflow. The text is scanned before it
// is parsed.
#pragma once
#include <cstddef>
#include <string_view>

namespace bertcc {

inline constexpr int kMaxJsonDepth = 64;

// The byte offset of the first '[' or '{' (outside strings) that opens level max_depth + 1, or
// std::string_view::npos if the text nests no deeper than max_depth.
inline size_t json_too_deep_at(std::string_view text, int max_depth = kMaxJsonDepth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;  // the escaped character (\" included) is skipped
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return i;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return std::string_view::npos;
}

}  // namespace bertcc
