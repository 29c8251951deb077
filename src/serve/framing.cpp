// HTTP/1.1 request framing: see framing.h.
#include "serve/framing.h"

#include <algorithm>
#include <cctype>
#include <cstring>

namespace bertcc::serve::http {

namespace {

bool tchar(unsigned char c) {  // RFC 9110 §5.6.2
  return std::isalnum(c) || std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
}

bool token(const std::string& s) {
  return !s.empty() &&
         std::all_of(s.begin(), s.end(), [](char c) { return c != '\0' && tchar(static_cast<unsigned char>(c)); });
}

bool ows(char c) { return c == ' ' || c == '\t'; }

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && ows(s[b])) ++b;
  while (e > b && ows(s[e - 1])) --e;
  return s.substr(b, e - b);
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// The elements of a comma-separated list (RFC 9110 §5.6.1: empty elements are ignored), trimmed.
std::vector<std::string> list_elements(const std::string& v) {
  std::vector<std::string> out;
  size_t b = 0;
  while (b <= v.size()) {
    size_t e = v.find(',', b);
    if (e == std::string::npos) e = v.size();
    std::string x = trim(v.substr(b, e - b));
    if (!x.empty()) out.push_back(std::move(x));
    b = e + 1;
  }
  return out;
}

// chunk-ext = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] ), RFC 9112 §7.1.1;
// chunk-ext-val = token / quoted-string.
bool chunk_extensions(const std::string& s, size_t i) {
  auto skip_ws = [&] {
    while (i < s.size() && ows(s[i])) ++i;
  };
  auto take_token = [&] {
    const size_t b = i;
    while (i < s.size() && tchar(static_cast<unsigned char>(s[i]))) ++i;
    return i > b;
  };
  for (;;) {
    skip_ws();
    if (i == s.size()) return true;
    if (s[i++] != ';') return false;
    skip_ws();
    if (!take_token()) return false;
    skip_ws();
    if (i == s.size() || s[i] != '=') continue;
    ++i;
    skip_ws();
    if (i < s.size() && s[i] == '"') {  // quoted-string
      ++i;
      for (;;) {
        if (i == s.size()) return false;
        const unsigned char c = static_cast<unsigned char>(s[i++]);
        if (c == '"') break;
        if (c == '\\') {
          if (i == s.size()) return false;
          const unsigned char q = static_cast<unsigned char>(s[i++]);
          if (q != '\t' && (q < 0x20 || q == 0x7F)) return false;
        } else if (c != '\t' && (c < 0x20 || c == 0x7F)) {
          return false;
        }
      }
    } else if (!take_token()) {
      return false;
    }
  }
}

}  // namespace

bool RequestParser::fail(int status, std::string message) {
  state_ = State::Error;
  error_status_ = status;
  error_ = std::move(message);
  return false;
}

size_t RequestParser::feed(const char* data, size_t n) {
  size_t i = 0;
  while (i < n && (state_ == State::Head || state_ == State::Body)) {
    if (part_ == Part::Data) {  // body bytes: taken as they are
      const size_t k = static_cast<size_t>(std::min<int64_t>(remaining_, static_cast<int64_t>(n - i)));
      req_.body.append(data + i, k);
      i += k;
      remaining_ -= static_cast<int64_t>(k);
      if (remaining_ == 0) {
        if (!chunked_)
          state_ = State::Done;
        else
          part_ = Part::DataEnd;
      }
      continue;
    }
    // Line-oriented parts: bytes up to the next CR or LF join the line, within its part's limit.
    size_t e = i;
    while (e < n && data[e] != '\r' && data[e] != '\n' && !cr_) ++e;
    const bool in_head = part_ == Part::Start || part_ == Part::Fields || part_ == Part::Trailers;
    const int64_t took = static_cast<int64_t>(e - i) + (e < n ? 1 : 0);
    if (in_head) {
      head_bytes_ += took;
      if (head_bytes_ > lim_.max_header_bytes) {
        fail(431, std::string(part_ == Part::Trailers ? "request trailers" : "request headers") +
                      " over the limit of " + std::to_string(lim_.max_header_bytes) + " bytes (--max-header-bytes)");
        return i;
      }
    } else if (part_ == Part::Size) {  // hex digits (at most 16) and the extensions, with the body
      if (static_cast<int64_t>(line_.size() + (e - i)) > 16 + lim_.max_body_bytes - body_bytes_) {
        fail(413, "request body over the limit of " + std::to_string(lim_.max_body_bytes) +
                      " bytes (--max-body-bytes), chunk extensions included");
        return i;
      }
    } else if (e > i) {  // DataEnd: the CRLF after a chunk's data, nothing else
      {
        fail(400, "malformed HTTP request: chunk data longer than its chunk-size");
        return i;
      }
    }
    line_.append(data + i, e - i);
    i = e;
    if (i == n) break;
    const char c = data[i++];
    if (cr_) {
      cr_ = false;
      if (c != '\n') {
        fail(400, "malformed HTTP request: CR without LF");
        return i;
      }
      std::string l;
      l.swap(line_);
      if (!line(l)) return i;
    } else if (c == '\r') {
      cr_ = true;
    } else {
      {
        fail(400, "malformed HTTP request: a line ends in LF without CR");
        return i;
      }
    }
  }
  return i;
}

bool RequestParser::line(const std::string& l) {
  switch (part_) {
    case Part::Start:
      if (l.empty()) return true;  // empty lines before the request line are ignored (RFC 9112 §2.2)
      return start_line(l);
    case Part::Fields:
      if (l.empty()) return end_of_head();
      return field_line(l, false);
    case Part::Size:
      return chunk_size_line(l);
    case Part::DataEnd:
      part_ = Part::Size;
      return true;
    case Part::Trailers:
      if (l.empty()) {
        state_ = State::Done;
        return true;
      }
      return field_line(l, true);
    case Part::Data:
      break;
  }
  return fail(400, "malformed HTTP request");
}

bool RequestParser::start_line(const std::string& l) {
  const size_t a = l.find(' ');
  const size_t b = a == std::string::npos ? a : l.find(' ', a + 1);
  if (b == std::string::npos || l.find(' ', b + 1) != std::string::npos)
    return fail(400, "malformed HTTP request: the request line is not METHOD SP TARGET SP VERSION");
  req_.method = l.substr(0, a);
  req_.target = l.substr(a + 1, b - a - 1);
  const std::string v = l.substr(b + 1);
  if (!token(req_.method)) return fail(400, "malformed HTTP request: bad method");
  if (req_.target.empty() || !std::all_of(req_.target.begin(), req_.target.end(), [](char c) {
        return static_cast<unsigned char>(c) > 0x20 && static_cast<unsigned char>(c) < 0x7F;
      }))
    return fail(400, "malformed HTTP request: bad target");
  if (v.size() != 8 || v.compare(0, 5, "HTTP/") != 0 || !std::isdigit(static_cast<unsigned char>(v[5])) ||
      v[6] != '.' || !std::isdigit(static_cast<unsigned char>(v[7])))
    return fail(400, "malformed HTTP request: bad version");
  if (v[5] != '1') return fail(505, "HTTP version " + v.substr(5) + " not supported (HTTP/1.1 or 1.0)");
  req_.version = v[7] == '0' ? 10 : 11;
  part_ = Part::Fields;
  return true;
}

bool RequestParser::field_line(const std::string& l, bool trailer) {
  const char* what = trailer ? "trailer" : "header";
  if (ows(l[0]))
    return fail(400,
                std::string("malformed HTTP request: a ") + what + " line folded onto the previous one (obs-fold)");
  const size_t colon = l.find(':');
  if (colon == std::string::npos || !token(l.substr(0, colon)))
    return fail(400, std::string("malformed HTTP request: bad ") + what + " field name");
  std::string value = trim(l.substr(colon + 1));
  for (const char ch : value) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if ((c < 0x20 && c != '\t') || c == 0x7F)
      return fail(400, std::string("malformed HTTP request: a control character in a ") + what + " field");
  }
  if (!trailer) req_.headers.emplace_back(l.substr(0, colon), std::move(value));
  return true;  // trailers are checked, then discarded (RFC 9110 §6.5.1)
}

bool RequestParser::end_of_head() {
  int content_lengths = 0;
  std::string cl, te, connection;
  bool has_te = false;
  for (const auto& [k, v] : req_.headers) {
    const std::string name = lower(k);
    if (name == "content-length") {
      ++content_lengths;
      cl = v;
    } else if (name == "transfer-encoding") {
      te += (has_te ? "," : "") + v;
      has_te = true;
    } else if (name == "connection") {
      connection += "," + v;
    } else if (name == "expect") {
      req_.expect_continue = lower(v) == "100-continue";
    }
  }
  bool close = false, keep = false;
  for (const std::string& t : list_elements(lower(connection))) close |= t == "close", keep |= t == "keep-alive";
  req_.keep_alive = req_.version >= 11 ? !close : keep && !close;
  if (content_lengths > 1) return fail(400, "malformed HTTP request: more than one Content-Length field");
  if (has_te) {
    if (req_.version < 11) return fail(400, "malformed HTTP request: Transfer-Encoding in an HTTP/1.0 request");
    if (content_lengths) return fail(400, "malformed HTTP request: both Transfer-Encoding and Content-Length");
    const std::vector<std::string> codings = list_elements(lower(te));
    if (codings.empty() || codings.back() != "chunked")
      return fail(400, "malformed HTTP request: the final transfer coding is not chunked");
    for (size_t k = 0; k + 1 < codings.size(); ++k) {
      const std::string name = trim(codings[k].substr(0, codings[k].find(';')));
      if (!token(name) || name == "chunked")
        return fail(400, "malformed HTTP request: bad Transfer-Encoding '" + te + "'");
    }
    if (codings.size() > 1)
      return fail(501, "transfer coding '" + trim(codings[0].substr(0, codings[0].find(';'))) +
                           "' not implemented (only chunked)");
    chunked_ = true;
    state_ = State::Body;
    part_ = Part::Size;
    return true;
  }
  if (content_lengths) {
    if (cl.empty() || !std::all_of(cl.begin(), cl.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return fail(400, "malformed HTTP request: Content-Length '" + cl + "' is not a decimal length");
    const size_t digits = cl.size() - std::min(cl.find_first_not_of('0'), cl.size());
    const int64_t n = digits > 18 ? INT64_MAX : std::stoll(cl);
    if (n > lim_.max_body_bytes)
      return fail(413, "request body of " + cl + " bytes is over the limit of " + std::to_string(lim_.max_body_bytes) +
                           " (--max-body-bytes)");
    req_.content_length = n;
    if (n > 0) {
      req_.body.reserve(static_cast<size_t>(n));
      remaining_ = n;
      state_ = State::Body;
      part_ = Part::Data;
      return true;
    }
  }
  state_ = State::Done;
  return true;
}

bool RequestParser::chunk_size_line(const std::string& l) {
  size_t i = 0;
  uint64_t size = 0;
  while (i < l.size() && std::isxdigit(static_cast<unsigned char>(l[i]))) {
    if (i == 16) return fail(400, "malformed HTTP request: a chunk-size of more than 16 hex digits");
    const char c = static_cast<char>(std::tolower(static_cast<unsigned char>(l[i])));
    size = size * 16 + static_cast<uint64_t>(c <= '9' ? c - '0' : c - 'a' + 10);
    ++i;
  }
  if (i == 0) return fail(400, "malformed HTTP request: a chunk does not start with its size in hex");
  if (!chunk_extensions(l, i)) return fail(400, "malformed HTTP request: bad chunk extension");
  body_bytes_ += static_cast<int64_t>(l.size() - i);
  if (body_bytes_ > lim_.max_body_bytes || size > static_cast<uint64_t>(lim_.max_body_bytes - body_bytes_))
    return fail(413, "request body over the limit of " + std::to_string(lim_.max_body_bytes) +
                         " bytes (--max-body-bytes), chunk extensions included");
  if (size == 0) {  // the last chunk: the trailer section follows, bounded as the header section
    part_ = Part::Trailers;
    head_bytes_ = 0;
    return true;
  }
  body_bytes_ += static_cast<int64_t>(size);
  remaining_ = static_cast<int64_t>(size);
  part_ = Part::Data;
  return true;
}

}  // namespace bertcc::serve::http
