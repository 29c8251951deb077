// bertcc serve's HTTP/1.1 transport, on Boost.Beast (Debian: libboost-dev).
//
// Beast and Asio carry the sockets: event-driven connections (a few I/O threads hold thousands),
// a deadline for a whole operation rather than per read, and the responses' serialization. Request
// framing is bertcc's own (serve/framing.h, RFC 9112 in full: Beast 1.74's parser ignores a
// Transfer-Encoding whose final coding is not chunked, accepts obs-fold and repeated
// Content-Length values, and holds chunk extensions and trailers without a bound). Request
// handlers that wait for a forward pass run on a separate pool, and the quick ones (health,
// metadata, metrics) on the I/O threads, so a full pool never delays a health check.
//
// What every connection gets:
//   - idle_timeout_s to start a request (keep-alive included), then request_timeout_s to send all of
//     it, headers and body (closed when it runs out: a slowloris client is cut, not waited for);
//   - headers (and chunked trailers) over max_header_bytes: 431; a body (chunk extensions included)
//     over max_body_bytes: 413, checked on Content-Length before the body is read (and before
//     "100 Continue" is sent); framing that RFC 9112 refuses (serve/framing.h): 400 (501 for a
//     transfer coding other than chunked), and the connection closed;
//   - a path with invalid percent-encoding or invalid UTF-8 once decoded: 400;
//   - responses in the order of the requests (pipelining), each at most max_response_bytes (400 above);
//   - at most max_connections open at once (further ones are closed when accepted);
//   - write_timeout_s to take each response.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <regex>
#include <string>
#include <utility>
#include <vector>

namespace bertcc::serve::http {

struct Request {
  std::string method;  // GET, POST, ...
  std::string path;    // percent-decoded, without the query
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;     // as received
  std::vector<std::string> matches;                             // the route's regex groups ([0]: the path)
  bool has_header(const std::string& name) const;               // case-insensitive
  std::string get_header_value(const std::string& name) const;  // "" when absent
};

struct Response {
  int status = 200;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // Content-Type among them
  void set_content(std::string b, const std::string& type);
  void set_header(const std::string& name, const std::string& value);  // replaces
  std::string get_header_value(const std::string& name) const;
};

using Handler = std::function<void(const Request&, Response&)>;

struct Limits {
  int64_t max_header_bytes = 16 << 10;  // request line and headers
  int64_t max_body_bytes = 8 << 20;
  int64_t max_response_bytes = 64 << 20;
  double idle_timeout_s = 5;      // to start a request (a new or kept-alive connection)
  double request_timeout_s = 10;  // to send a whole request once started
  double write_timeout_s = 10;    // to take a response
  int max_connections = 10000;
  int io_threads = 2;
  int worker_threads = 256;  // handlers that may block (inference)
};

// The error body of every status the transport answers itself and of handler errors:
// {"error": "..."} with any invalid UTF-8 in the message replaced (U+FFFD).
std::string error_json(const std::string& message);

// The percent-decoded path ('+' stays '+'); false on a bad escape or when the result is not UTF-8.
bool decode_path(const std::string& target, std::string& path);
bool valid_utf8(const std::string& s);

class Server {
 public:
  explicit Server(Limits limits);
  ~Server();
  // Routes, matched in order on the decoded path (std::regex_match). `quick` handlers run on the
  // I/O threads: they must not block.
  void route(const std::string& method, const std::string& pattern, Handler h, bool quick = false);
  // Called for every answered request (after the route's handler, or for the transport's own
  // answers with endpoint "http": 400, 404, 405, 413, 414, 431, 501, 505), with the seconds taken.
  void on_answered(std::function<void(const std::string& endpoint_or_path, int status, double seconds)> f);
  // Binds and listens (SO_REUSEADDR only: a port another server listens on is refused). Port 0: any
  // free port. Returns the port. Throws bertcc::Error naming host:port, "address already in use"
  // when that is why.
  int bind(const std::string& host, int port, int backlog);
  // Serves until stop(): then stops accepting, closes idle connections, finishes the requests in
  // flight (their responses are sent) and returns.
  void run();
  void stop();  // from any thread
  int64_t open_connections() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace bertcc::serve::http
