// bertcc serve's HTTP transport (serve/http.h) as a client sees it: one server, started once, with
// small limits and routes of each kind (quick, on the worker pool, with regex groups, echoing the
// body); each input is sent as raw bytes on a new connection (any number of pipelined requests,
// any framing), the write side shut, and every answer read until the server closes. A finding is a
// crash or sanitizer report in the server, a hang (the server must close every connection once the
// client has sent everything), or an answer that is not a well-formed HTTP/1.1 response.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>

#include "serve/http.h"

namespace {

int start_server() {
  using namespace bertcc::serve::http;
  Limits lim;
  lim.max_header_bytes = 1024;
  lim.max_body_bytes = 4096;
  lim.max_response_bytes = 3000;  // an echoed body near the body limit goes over it
  lim.idle_timeout_s = 1;
  lim.request_timeout_s = 1;
  lim.write_timeout_s = 1;
  lim.max_connections = 64;
  lim.io_threads = 1;
  lim.worker_threads = 2;
  // Never destroyed: libFuzzer ends the process with exit(), which would run a static Server's
  // destructor while its run() goes on in the detached thread below (a crash at exit that libFuzzer
  // reported against whatever input came last: the empty one in CI).
  static Server& svr = *new Server(lim);
  svr.route(
      "GET", "/health", [](const Request&, Response& r) { r.set_content("{}", "application/json"); }, true);
  svr.route("POST", "/echo", [](const Request& q, Response& r) {
    r.set_content(q.body, q.has_header("Content-Type") ? q.get_header_value("Content-Type") : "text/plain");
  });
  svr.route("GET", R"(/m/([^/]+)(?:/v/1)?/ready)", [](const Request& q, Response& r) {
    if (q.matches.size() != 2) __builtin_trap();
    r.status = q.matches[1] == "x" ? 200 : 404;
    r.set_content(error_json("no model named '" + q.matches[1] + "'"), "application/json");
  });
  const int port = svr.bind("127.0.0.1", 0, 128);
  std::thread([] { svr.run(); }).detach();
  return port;
}

// libFuzzer's -timeout arms SIGALRM without SA_RESTART, so any of the client's blocking calls may
// return EINTR: retried, never taken for the server's doing (a campaign trapped on connect's EINTR
// after 85,142 executions; a send or recv cut short would have skipped part of an input or answer).
void connect_or_trap(int fd, const sockaddr_in& a) {
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) == 0) return;
  if (errno != EINTR) __builtin_trap();
  // an interrupted connect goes on in the background: wait for it and take its result
  pollfd p{fd, POLLOUT, 0};
  int r;
  while ((r = ::poll(&p, 1, 15000)) < 0 && errno == EINTR) {
  }
  int err = 0;
  socklen_t len = sizeof err;
  if (r != 1 || ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int port = start_server();
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) __builtin_trap();
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  connect_or_trap(fd, a);
  // The server's own deadlines are 1 s: 15 s without an answer or a close is a hang (below
  // libFuzzer's -timeout of 20 s). 5 s was too short on a starved machine: a campaign run at nice 10
  // under a load of 12 on 2 cores trapped on an input that closes in time when run again.
  timeval tv{15, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  size_t sent = 0;
  while (sent < size) {
    const ssize_t n = ::send(fd, data + sent, size - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the server closed early (an error answered): fine
    sent += static_cast<size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  std::string out;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n == 0) break;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) __builtin_trap();  // no close within 15 s
      break;                                                          // reset: fine
    }
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  // Every answer starts with a status line.
  if (!out.empty() && out.compare(0, 9, "HTTP/1.1 ") != 0 && out.compare(0, 9, "HTTP/1.0 ") != 0) __builtin_trap();
  return 0;
}
