// HTTP/1.1 request framing alone (serve/framing.h): no sockets, no threads. The first input byte
// picks the limits and how the rest is cut into reads; the rest is the byte stream of one
// connection (any number of pipelined requests). A finding is a crash or sanitizer report, or a
// broken invariant:
//   - the same stream gives the same requests and the same refusal whether it arrives at once or
//     in pieces (a parser that carries state wrongly across reads is how smuggling starts);
//   - a body never exceeds max_body_bytes, nor the header section max_header_bytes; a refusal has
//     one of the documented statuses; a Content-Length body has exactly that length;
//   - a request that was accepted, written out again in the canonical form (its headers, its body
//     with Content-Length), is accepted again as the same request.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "serve/framing.h"

namespace {

using bertcc::serve::http::FramingLimits;
using bertcc::serve::http::ParsedRequest;
using bertcc::serve::http::RequestParser;

struct Outcome {
  std::vector<ParsedRequest> requests;
  int status = 0;  // the refusal that ended the stream, or 0
  std::string error;
};

bool same(const ParsedRequest& a, const ParsedRequest& b) {
  return a.method == b.method && a.target == b.target && a.version == b.version && a.headers == b.headers &&
         a.body == b.body && a.keep_alive == b.keep_alive && a.expect_continue == b.expect_continue &&
         a.content_length == b.content_length;
}

void check(bool ok) {
  if (!ok) __builtin_trap();
}

// Parses `s` as one connection's stream, fed in pieces of the sizes `cuts` cycles through.
Outcome parse(const std::string& s, const FramingLimits& lim, const std::vector<size_t>& cuts) {
  Outcome out;
  RequestParser p(lim);
  size_t at = 0, k = 0, avail = 0;  // bytes [at, avail) have arrived and not been taken
  while (out.requests.size() < 64) {
    if (at == avail) {
      if (avail == s.size()) break;
      avail = std::min(s.size(), avail + cuts[k++ % cuts.size()]);
    }
    const size_t took = p.feed(s.data() + at, avail - at);
    check(took <= avail - at);
    at += took;
    if (p.state() == RequestParser::State::Error) {
      out.status = p.error_status();
      out.error = p.error();
      check(out.status == 400 || out.status == 413 || out.status == 431 || out.status == 501 || out.status == 505);
      break;
    }
    if (p.state() == RequestParser::State::Done) {
      ParsedRequest r = p.take();
      check(static_cast<int64_t>(r.body.size()) <= lim.max_body_bytes);
      check(r.content_length < 0 || static_cast<int64_t>(r.body.size()) == r.content_length);
      size_t head = r.method.size() + r.target.size() + 12;
      for (const auto& [k2, v] : r.headers) head += k2.size() + v.size() + 3;
      check(static_cast<int64_t>(head) <= lim.max_header_bytes + 2);
      out.requests.push_back(std::move(r));
      p = RequestParser(lim);
      continue;
    }
    check(at == avail);  // a parser that wants more has taken everything it was given
  }
  return out;
}

std::string canonical(const ParsedRequest& r) {
  std::string s = r.method + " " + r.target + (r.version == 10 ? " HTTP/1.0\r\n" : " HTTP/1.1\r\n");
  for (const auto& [k, v] : r.headers) {
    std::string name(k.size(), ' ');
    for (size_t i = 0; i < k.size(); ++i) name[i] = static_cast<char>(std::tolower(static_cast<unsigned char>(k[i])));
    if (name == "content-length" || name == "transfer-encoding") continue;
    s += k + ": " + v + "\r\n";
  }
  if (!r.body.empty()) s += "Content-Length: " + std::to_string(r.body.size()) + "\r\n";
  return s + "\r\n" + r.body;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  const std::string s(reinterpret_cast<const char*>(data) + 1, size - 1);
  FramingLimits lim;
  lim.max_header_bytes = (mode & 1) ? 256 : 16 << 10;
  lim.max_body_bytes = (mode & 2) ? 64 : 1 << 16;
  std::vector<size_t> cuts = {1};
  switch ((mode >> 2) & 3) {
    case 0:
      cuts = {1};
      break;
    case 1:
      cuts = {2, 3, 5, 7};
      break;
    case 2:
      cuts = {13, 1, 64};
      break;
    default:
      cuts = {static_cast<size_t>(1 + (mode >> 4))};
      break;
  }
  const Outcome whole = parse(s, lim, {s.size() + 1});
  const Outcome pieces = parse(s, lim, cuts);
  check(whole.requests.size() == pieces.requests.size() && whole.status == pieces.status &&
        whole.error == pieces.error);
  for (size_t i = 0; i < whole.requests.size(); ++i) check(same(whole.requests[i], pieces.requests[i]));
  // Canonical form: accepted again as the same request (its header section may be longer than the
  // original's: ": " after each name, Content-Length for Transfer-Encoding; given that room).
  FramingLimits roomy = lim;
  roomy.max_header_bytes = 2 * lim.max_header_bytes + 64;
  for (const ParsedRequest& r : whole.requests) {
    const Outcome again = parse(canonical(r), roomy, {1 << 20});
    check(again.status == 0 && again.requests.size() == 1);
    ParsedRequest a = again.requests[0];
    check(a.method == r.method && a.target == r.target && a.version == r.version && a.body == r.body &&
          a.keep_alive == r.keep_alive && a.expect_continue == r.expect_continue);
  }
  return 0;
}
