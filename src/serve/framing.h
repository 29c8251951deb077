// HTTP/1.1 request framing (RFC 9112), incremental and without I/O: bytes in, requests out. The
// transport (serve/http.cpp) feeds it what it reads; the fuzz target fuzz_framing feeds it alone.
//
// What it enforces, each violation answered with a status and the connection closed:
//   - request line `method SP target SP HTTP/1.x` (single spaces; a token method; a target of
//     visible ASCII) and header fields `token ":" OWS value OWS` (no space before the colon; no
//     control characters; lines end in CRLF, never a bare CR or LF): 400;
//   - obs-fold (a header or trailer line that starts with a space or tab): 400 (RFC 9112 §5.2);
//   - Content-Length: one field with one decimal value; several fields or a list (even of equal
//     values), a sign or a value over 2^53: 400 (§6.3: the message length cannot be trusted);
//   - Transfer-Encoding: its final coding must be chunked (§6.3): 400 otherwise; chunked twice, or
//     a coding that is not a token list: 400; another coding before chunked (gzip, deflate,
//     identity, unknown): 501, as §6.1 asks of a server that does not implement it; together with
//     Content-Length, or in an HTTP/1.0 request: 400 (§6.1, §6.3: a smuggling attempt);
//   - the request line and header section over max_header_bytes: 431; the trailer section (after
//     the last chunk; checked like header fields, then discarded) over max_header_bytes: 431;
//   - the body over max_body_bytes: 413, from Content-Length before any of the body is read, and
//     for chunked bodies the chunk data and the chunk extensions together (extensions are checked
//     against RFC 9112 §7.1.1's grammar, then discarded); a chunk-size over 16 hex digits: 400.
// Memory held is bounded by max_header_bytes + max_body_bytes whatever the client sends.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace bertcc::serve::http {

struct FramingLimits {
  int64_t max_header_bytes = 16 << 10;  // request line and header fields; the trailer section alike
  int64_t max_body_bytes = 8 << 20;     // decoded body, with chunk extensions
};

struct ParsedRequest {
  std::string method, target;
  int version = 11;                                          // 10 or 11
  std::vector<std::pair<std::string, std::string>> headers;  // as received (values trimmed)
  std::string body;
  bool keep_alive = true;        // HTTP/1.1 unless "Connection: close"; 1.0 with "keep-alive"
  bool expect_continue = false;  // "Expect: 100-continue"
  int64_t content_length = -1;   // -1: none given (chunked, or no body)
};

class RequestParser {
 public:
  enum class State { Head, Body, Done, Error };

  explicit RequestParser(FramingLimits lim) : lim_(lim) {}
  // Takes bytes from data[0, n) until the request is done or wrong; returns how many it took (the
  // rest belongs to the next request). Call again with more bytes while state() is Head or Body.
  size_t feed(const char* data, size_t n);
  State state() const { return state_; }
  // Once state() is Body or Done: the request line and headers are read (the body follows).
  bool head_done() const { return state_ == State::Body || state_ == State::Done; }
  const ParsedRequest& request() const { return req_; }
  ParsedRequest take() { return std::move(req_); }
  int error_status() const { return error_status_; }  // 400, 413, 431 or 501 when state() is Error
  const std::string& error() const { return error_; }

 private:
  enum class Part { Start, Fields, Size, Data, DataEnd, Trailers };
  bool line(const std::string& l);  // one complete line (without CRLF) of the current part
  bool start_line(const std::string& l);
  bool field_line(const std::string& l, bool trailer);
  bool end_of_head();
  bool chunk_size_line(const std::string& l);
  bool fail(int status, std::string message);

  FramingLimits lim_;
  State state_ = State::Head;
  Part part_ = Part::Start;
  ParsedRequest req_;
  std::string line_;        // the line being read
  bool cr_ = false;         // line_ ended in CR: LF must follow
  int64_t head_bytes_ = 0;  // of the request line and header section, or of the trailer section
  int64_t body_bytes_ = 0;  // chunk data and extensions so far
  int64_t remaining_ = 0;   // of the Content-Length body or of the current chunk
  bool chunked_ = false;
  int error_status_ = 0;
  std::string error_;
};

}  // namespace bertcc::serve::http
