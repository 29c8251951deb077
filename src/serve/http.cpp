// bertcc serve's HTTP/1.1 transport: see http.h.
#include "serve/http.h"

#include <algorithm>
#include <atomic>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <unordered_map>

#include "bertcc/error.h"
#include "serve/framing.h"

namespace bertcc::serve::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

bool iequal(const std::string& a, const std::string& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}

int hex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

bool Request::has_header(const std::string& name) const {
  for (const auto& [k, v] : headers)
    if (iequal(k, name)) return true;
  return false;
}

std::string Request::get_header_value(const std::string& name) const {
  for (const auto& [k, v] : headers)
    if (iequal(k, name)) return v;
  return "";
}

void Response::set_content(std::string b, const std::string& type) {
  body = std::move(b);
  set_header("Content-Type", type);
}

void Response::set_header(const std::string& name, const std::string& value) {
  for (auto& [k, v] : headers)
    if (iequal(k, name)) {
      v = value;
      return;
    }
  headers.emplace_back(name, value);
}

std::string Response::get_header_value(const std::string& name) const {
  for (const auto& [k, v] : headers)
    if (iequal(k, name)) return v;
  return "";
}

std::string error_json(const std::string& message) {
  return nlohmann::json{{"error", message}}.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

bool valid_utf8(const std::string& s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    const unsigned c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    unsigned cp;
    if (c >= 0xC2 && c <= 0xDF)
      len = 2, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF)
      len = 3, cp = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4)
      len = 4, cp = c & 0x07;
    else
      return false;  // a continuation byte, an overlong lead (C0, C1) or beyond U+10FFFF
    if (i + len > n) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
      return false;  // overlong, out of range, or a UTF-16 surrogate
    i += len;
  }
  return true;
}

bool decode_path(const std::string& target, std::string& path) {
  const size_t q = target.find('?');
  const size_t end = q == std::string::npos ? target.size() : q;
  path.clear();
  path.reserve(end);
  for (size_t i = 0; i < end; ++i) {
    if (target[i] != '%') {
      path.push_back(target[i]);
      continue;
    }
    if (i + 2 >= end) return false;
    const int hi = hex(target[i + 1]), lo = hex(target[i + 2]);
    if (hi < 0 || lo < 0) return false;
    path.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return valid_utf8(path);
}

// ---- the server ---------------------------------------------------------------------------------
constexpr size_t kMaxPath = 8192;  // 414 above, whatever --max-header-bytes allows

struct Route {
  std::string method;
  std::regex re;
  Handler handler;
  bool quick;
};

class Conn;

struct Server::Impl {
  Limits lim;
  asio::io_context ioc;
  tcp::acceptor acceptor{ioc};
  std::unique_ptr<asio::thread_pool> workers;
  std::vector<Route> routes;
  std::function<void(const std::string&, int, double)> answered;
  std::atomic<int64_t> conns{0};
  std::atomic<bool> stopping{false};
  std::mutex mu;
  std::unordered_map<Conn*, std::weak_ptr<Conn>> live;  // for stop(): the idle ones are closed
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard;

  explicit Impl(Limits l) : lim(l) {}
  void accept();
};

class Conn : public std::enable_shared_from_this<Conn> {
 public:
  Conn(Server::Impl& s, tcp::socket sock) : s_(s), stream_(std::move(sock)) { ++s_.conns; }
  ~Conn() {
    --s_.conns;
    std::lock_guard<std::mutex> g(s_.mu);
    s_.live.erase(this);
  }

  void start() {
    {
      std::lock_guard<std::mutex> g(s_.mu);
      s_.live[this] = weak_from_this();
    }
    asio::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->wait_request(); });
  }

  // stop(): a connection between requests is closed; one reading or answering a request finishes it.
  void stop_if_idle() {
    asio::post(stream_.get_executor(), [self = shared_from_this()] {
      if (self->state_ == State::Idle) self->close();
    });
  }

 private:
  enum class State { Idle, Reading, Handling, Writing, Closed };

  // Between requests: a pipelined request already read is parsed at once; otherwise the
  // connection has idle_timeout_s to send the first bytes of one.
  void wait_request() {
    if (s_.stopping) return close();
    state_ = State::Idle;
    if (!in_.empty()) return begin_request();
    stream_.expires_after(seconds(s_.lim.idle_timeout_s));
    read_more(4096, [](Conn& c) { c.begin_request(); });
  }

  // Reads at most `size` more bytes after those not yet parsed, then calls `next`; any read error
  // (the deadline, a client that left, stop()) closes the connection.
  template <class Next>
  void read_more(size_t size, Next next) {
    const size_t old = in_.size();
    in_.resize(old + size);
    stream_.async_read_some(asio::buffer(&in_[old], size),
                            [self = shared_from_this(), old, next](beast::error_code ec, size_t n) {
                              self->in_.resize(old + n);
                              // closed meanwhile (stop() closes an idle connection while a read that
                              // already completed waits on the strand): its bytes are not a request
                              if (ec || self->state_ == State::Closed) return self->close();
                              next(*self);
                            });
  }

  void begin_request() {
    state_ = State::Reading;
    t0_ = Clock::now();
    FramingLimits fl;
    fl.max_header_bytes = s_.lim.max_header_bytes;
    fl.max_body_bytes = s_.lim.max_body_bytes;
    parser_.emplace(fl);
    continue_sent_ = false;
    stream_.expires_after(seconds(s_.lim.request_timeout_s));  // the whole request, headers and body
    parse();
  }

  // Feeds what was read to the framing parser (serve/framing.h), which holds every limit: its
  // refusals are answered, then the connection is closed.
  void parse() {
    in_.erase(0, parser_->feed(in_.data(), in_.size()));
    switch (parser_->state()) {
      case RequestParser::State::Error:
        version_ = 11;
        return answer_error(parser_->error_status(), parser_->error());
      case RequestParser::State::Done:
        return dispatch();
      case RequestParser::State::Body:
        version_ = parser_->request().version;
        if (parser_->request().expect_continue && !continue_sent_) {
          continue_sent_ = true;  // the body is within the limit: the client may send it
          auto cont = std::make_shared<bhttp::response<bhttp::empty_body>>(bhttp::status::continue_, version_);
          bhttp::async_write(stream_, *cont, [self = shared_from_this(), cont](beast::error_code ec, size_t) {
            if (ec) return self->close();
            self->read_more(64 << 10, [](Conn& c) { c.parse(); });
          });
          return;
        }
        return read_more(64 << 10, [](Conn& c) { c.parse(); });
      case RequestParser::State::Head:
        return read_more(4096, [](Conn& c) { c.parse(); });
    }
  }

  void dispatch() {
    state_ = State::Handling;
    ParsedRequest msg = parser_->take();
    parser_.reset();
    keep_alive_ = msg.keep_alive;
    version_ = msg.version;
    auto req = std::make_shared<Request>();
    req->method = msg.method;
    head_ = msg.method == "HEAD";
    const std::string& target = msg.target;
    req->headers = std::move(msg.headers);
    req->body = std::move(msg.body);
    if (target.size() > kMaxPath)  // a route's regex walks the path recursively (std::regex): bounded here
      return answer_error(414, "request path of " + std::to_string(target.size()) + " bytes is over the limit of " +
                                   std::to_string(kMaxPath));
    if (!decode_path(target, req->path))
      return answer_error(400, "the request path is not valid percent-encoded UTF-8", keep_alive_);
    const std::string method = head_ ? "GET" : req->method;
    const Route* route = nullptr;
    bool path_known = false;
    std::smatch sm;
    for (const auto& r : s_.routes) {
      if (!std::regex_match(req->path, sm, r.re)) continue;
      path_known = true;
      if (r.method != method) continue;
      route = &r;
      for (const auto& g : sm) req->matches.push_back(g.str());
      break;
    }
    if (!route) {
      if (path_known) return answer_error(405, "method " + req->method + " not allowed on " + req->path, keep_alive_);
      return answer_error(404, "HTTP 404: no such endpoint", keep_alive_);
    }
    if (route->quick) {
      auto res = std::make_shared<Response>();
      run_handler(*route, *req, *res);
      return write(res);
    }
    // On the worker pool; the io_context keeps running until the answer is back.
    asio::post(*s_.workers, [self = shared_from_this(), route, req, work = asio::make_work_guard(s_.ioc)] {
      auto res = std::make_shared<Response>();
      self->run_handler(*route, *req, *res);
      asio::post(self->stream_.get_executor(), [self, res] { self->write(res); });
    });
  }

  static void run_handler(const Route& r, const Request& req, Response& res) {
    try {
      r.handler(req, res);
    } catch (const std::exception& e) {  // the routes catch their own; this is the last line
      res = Response{};
      res.status = 500;
      res.set_content(error_json(std::string("internal error: ") + e.what()), "application/json");
    } catch (...) {
      res = Response{};
      res.status = 500;
      res.set_content(error_json("internal error"), "application/json");
    }
  }

  void answer_error(int status, const std::string& message, bool keep_alive = false) {
    keep_alive_ = keep_alive;
    unread_ = !keep_alive;  // the rest of the request (and any after it) was not read
    if (s_.answered) s_.answered("http", status, std::chrono::duration<double>(Clock::now() - t0_).count());
    auto res = std::make_shared<Response>();
    res->status = status;
    res->set_content(error_json(message), "application/json");
    write(res);
  }

  // After an error answered before the whole request was read: stop sending, then read and drop
  // what the client still sends (at most 1 MiB, 2 s) before closing, so that the close does not
  // reset the connection and discard the answer before the client reads it (a lingering close).
  void linger() {
    state_ = State::Closed;
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.expires_after(std::chrono::seconds(2));
    drain(0);
  }
  void drain(size_t total) {
    in_.resize(64 << 10);
    stream_.async_read_some(asio::buffer(&in_[0], in_.size()),
                            [self = shared_from_this(), total](beast::error_code ec, size_t n) {
                              if (ec || total + n > (1u << 20)) {
                                beast::error_code ignored;
                                self->stream_.socket().close(ignored);
                                return;
                              }
                              self->drain(total + n);
                            });
  }

  void write(std::shared_ptr<Response> r) {
    state_ = State::Writing;
    if (static_cast<int64_t>(r->body.size()) > s_.lim.max_response_bytes) {
      const std::string n = std::to_string(r->body.size());
      *r = Response{};
      r->status = 400;
      r->set_content(error_json("the response would be " + n + " bytes, over the limit of " +
                                std::to_string(s_.lim.max_response_bytes) +
                                " (--max-response-bytes): ask for fewer inputs or outputs"),
                     "application/json");
    }
    auto res = std::make_shared<bhttp::response<bhttp::string_body>>(static_cast<bhttp::status>(r->status),
                                                                     version_ ? version_ : 11);
    for (auto& [k, v] : r->headers) res->set(k, v);
    const size_t n = r->body.size();
    if (!head_) res->body() = std::move(r->body);
    const bool keep = keep_alive_ && !s_.stopping;
    res->keep_alive(keep);
    res->content_length(n);
    stream_.expires_after(seconds(s_.lim.write_timeout_s));
    const bool unread = !keep && unread_;
    bhttp::async_write(stream_, *res, [self = shared_from_this(), res, keep, unread](beast::error_code ec, size_t) {
      if (!ec && unread) return self->linger();
      if (ec || !keep) return self->close();
      self->wait_request();
    });
  }

  void close() {
    if (state_ == State::Closed) return;
    state_ = State::Closed;
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close();
  }

  Server::Impl& s_;
  beast::tcp_stream stream_;
  std::string in_;  // bytes read and not yet parsed (a pipelined request's, say)
  std::optional<RequestParser> parser_;
  bool continue_sent_ = false;
  State state_ = State::Idle;
  Clock::time_point t0_ = Clock::now();
  bool keep_alive_ = true, head_ = false, unread_ = false;
  unsigned version_ = 11;
};

void Server::Impl::accept() {
  acceptor.async_accept(asio::make_strand(ioc), [this](beast::error_code ec, tcp::socket sock) {
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;  // stop()
    if (!ec) {
      if (conns >= lim.max_connections) {
        beast::error_code ignored;
        sock.close(ignored);  // over --max-connections: refused at once
      } else {
        std::make_shared<Conn>(*this, std::move(sock))->start();
      }
    } else if (ec == asio::error::no_descriptors) {
      // out of file descriptors: wait for connections to close rather than spin
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    accept();
  });
}

Server::Server(Limits limits) : impl_(std::make_unique<Impl>(limits)) {}
Server::~Server() = default;

void Server::route(const std::string& method, const std::string& pattern, Handler h, bool quick) {
  impl_->routes.push_back(Route{method, std::regex(pattern), std::move(h), quick});
}

void Server::on_answered(std::function<void(const std::string&, int, double)> f) { impl_->answered = std::move(f); }

int Server::bind(const std::string& host, int port, int backlog) {
  auto& a = impl_->acceptor;
  beast::error_code ec;
  tcp::resolver resolver(impl_->ioc);
  const auto eps =
      resolver.resolve(host, std::to_string(port), tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || eps.empty()) fail("serve: cannot bind ", host, ":", port, " (", ec ? ec.message() : "no address", ")");
  const tcp::endpoint ep = eps.begin()->endpoint();
  a.open(ep.protocol(), ec);
  if (ec) fail("serve: cannot open a socket for ", host, ":", port, " (", ec.message(), ")");
  // SO_REUSEADDR rebinds a port left in TIME_WAIT but refuses one that is listening.
  a.set_option(asio::socket_base::reuse_address(true), ec);
  a.bind(ep, ec);
  if (ec == asio::error::address_in_use)
    fail("serve: cannot bind ", host, ":", port, ": address already in use (another server listens on this port)");
  if (ec) fail("serve: cannot bind ", host, ":", port, " (", ec.message(), "; not an address of this machine?)");
  a.listen(backlog, ec);
  if (ec) fail("serve: listen(backlog ", backlog, ") on ", host, ":", port, ": ", ec.message());
  return a.local_endpoint().port();
}

void Server::run() {
  Impl& s = *impl_;
  s.workers = std::make_unique<asio::thread_pool>(static_cast<size_t>(std::max(1, s.lim.worker_threads)));
  s.guard.emplace(asio::make_work_guard(s.ioc));
  s.accept();
  // An exception out of a handler (none is expected: bad_alloc, say) ends that handler, not the
  // thread or the server: the thread logs it and goes back to running the others.
  auto serve = [&s] {
    for (;;) {
      try {
        s.ioc.run();
        return;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "serve: HTTP thread: %s\n", e.what());
      }
    }
  };
  std::vector<std::thread> io;
  for (int i = 1; i < std::max(1, s.lim.io_threads); ++i) io.emplace_back(serve);
  serve();
  for (auto& t : io) t.join();
  s.workers->join();
}

void Server::stop() {
  Impl& s = *impl_;
  asio::post(s.ioc, [&s] {
    if (s.stopping.exchange(true)) return;
    beast::error_code ec;
    s.acceptor.close(ec);
    std::vector<std::shared_ptr<Conn>> conns;
    {
      std::lock_guard<std::mutex> g(s.mu);
      for (auto& [p, w] : s.live)
        if (auto c = w.lock()) conns.push_back(std::move(c));
    }
    for (auto& c : conns) c->stop_if_idle();
    s.guard.reset();  // run() returns once the requests in flight are answered
  });
}

int64_t Server::open_connections() const { return impl_->conns.load(); }

}  // namespace bertcc::serve::http
