// torch.save's format: a zip archive (entries stored, not compressed) holding PREFIX/data.pkl (the
// pickled object, protocol 2 by default), PREFIX/data/KEY (one raw little-endian storage each),
// PREFIX/byteorder and PREFIX/version. Tensors in the pickle are calls of
// torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks) whose storage
// is a persistent id ('storage', torch.FloatStorage, KEY, location, numel).
#include "bertcc/torch_checkpoint.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <set>

#include "bertcc/error.h"

namespace bertcc {

int64_t TorchTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

namespace {

// ---- the file, mapped read-only -------------------------------------------------------------
struct Mapped {
  const unsigned char* data = nullptr;
  size_t size = 0;
  Mapped(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    BERTCC_CHECK(fd >= 0, path, ": cannot open: ", std::strerror(errno));
    struct stat st;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      fail(path, ": not a regular file");
    }
    size = static_cast<size_t>(st.st_size);
    if (size > 0) {
      void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
      ::close(fd);
      BERTCC_CHECK(p != MAP_FAILED, path, ": cannot map: ", std::strerror(errno));
      data = static_cast<const unsigned char*>(p);
    } else {
      ::close(fd);
    }
  }
  ~Mapped() {
    if (data) ::munmap(const_cast<unsigned char*>(data), size);
  }
  Mapped(const Mapped&) = delete;
  Mapped& operator=(const Mapped&) = delete;
};

uint64_t le(const unsigned char* p, int n) {
  uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// ---- zip: the central directory (zip64 included), stored entries only --------------------------
struct ZipEntry {
  size_t data = 0, size = 0;
};

std::map<std::string, ZipEntry> read_zip(const Mapped& m, const std::string& path) {
  const unsigned char* d = m.data;
  const size_t n = m.size;
  BERTCC_CHECK(n >= 22, path, ": too short to be a zip archive");
  size_t eocd = std::string::npos;
  for (size_t i = n - 22 + 1; i-- > (n > 65557 ? n - 65557 : 0);)
    if (le(d + i, 4) == 0x06054b50) {
      eocd = i;
      break;
    }
  BERTCC_CHECK(eocd != std::string::npos, path, ": no zip end-of-central-directory record (truncated file?)");
  uint64_t count = le(d + eocd + 10, 2), cd_size = le(d + eocd + 12, 4), cd_off = le(d + eocd + 16, 4);
  if (count == 0xffff || cd_size == 0xffffffffu || cd_off == 0xffffffffu) {  // zip64
    BERTCC_CHECK(eocd >= 20 && le(d + eocd - 20, 4) == 0x07064b50, path, ": zip64 locator missing");
    const uint64_t z = le(d + eocd - 20 + 8, 8);
    BERTCC_CHECK(z + 56 <= n && le(d + z, 4) == 0x06064b50, path, ": zip64 end record out of range");
    count = le(d + z + 32, 8);
    cd_size = le(d + z + 40, 8);
    cd_off = le(d + z + 48, 8);
  }
  BERTCC_CHECK(cd_off <= n && cd_size <= n - cd_off, path, ": zip central directory out of range");
  std::map<std::string, ZipEntry> out;
  size_t p = cd_off;
  const size_t end = cd_off + cd_size;
  for (uint64_t k = 0; k < count; ++k) {
    BERTCC_CHECK(p + 46 <= end && le(d + p, 4) == 0x02014b50, path, ": zip central directory entry ", k,
                 " is malformed");
    const uint64_t method = le(d + p + 10, 2);
    uint64_t csize = le(d + p + 20, 4), usize = le(d + p + 24, 4), loff = le(d + p + 42, 4);
    const size_t nlen = le(d + p + 28, 2), xlen = le(d + p + 30, 2), clen = le(d + p + 32, 2);
    BERTCC_CHECK(p + 46 + nlen + xlen + clen <= end, path, ": zip central directory entry ", k, " overruns");
    std::string name(reinterpret_cast<const char*>(d + p + 46), nlen);
    // zip64 extra field: the 64-bit values of the fields that hold 0xffffffff, in order.
    for (size_t x = p + 46 + nlen; x + 4 <= p + 46 + nlen + xlen;) {
      const uint64_t id = le(d + x, 2), len = le(d + x + 2, 2);
      BERTCC_CHECK(x + 4 + len <= p + 46 + nlen + xlen, path, ": zip extra field of '", name, "' overruns");
      if (id == 1) {
        size_t q = x + 4;
        auto take = [&](uint64_t& f) {
          if (f != 0xffffffffu) return;
          BERTCC_CHECK(q + 8 <= x + 4 + len, path, ": zip64 field of '", name, "' too short");
          f = le(d + q, 8);
          q += 8;
        };
        take(usize);
        take(csize);
        take(loff);
      }
      x += 4 + len;
    }
    BERTCC_CHECK(method == 0, path, ": zip entry '", name, "' is compressed (method ", method,
                 "); torch.save writes stored entries, re-save the checkpoint with torch.save");
    BERTCC_CHECK(loff + 30 <= n && le(d + loff, 4) == 0x04034b50, path, ": zip entry '", name, "' has no local header");
    const size_t data = loff + 30 + le(d + loff + 26, 2) + le(d + loff + 28, 2);
    BERTCC_CHECK(data <= n && usize <= n - data && csize == usize, path, ": zip entry '", name,
                 "' lies outside the file (truncated?)");
    BERTCC_CHECK(!out.count(name), path, ": zip entry '", name, "' appears twice");
    out[name] = {data, static_cast<size_t>(usize)};
    p += 46 + nlen + xlen + clen;
  }
  return out;
}

// ---- the unpickler ---------------------------------------------------------------------------
struct PyVal {
  enum Kind { None, Bool, Int, Float, Str, Bytes, List, Tuple, Dict, Global, Storage, Tensor, DType } kind = None;
  int64_t i = 0;
  double f = 0;
  std::string s;              // Str, Bytes; Global: "module.name"; Storage: key; DType: dtype name
  std::vector<PyVal*> items;  // List, Tuple; Tensor: {storage}
  std::vector<std::pair<PyVal*, PyVal*>> dict;
  std::string dtype;  // Storage, Tensor
  std::vector<int64_t> shape, stride;
};

// Storage classes and dtypes the rebuild functions name.
const char* storage_dtype(const std::string& g) {
  static const std::map<std::string, const char*> m = {
      {"torch.FloatStorage", "F32"},  {"torch.HalfStorage", "F16"},  {"torch.BFloat16Storage", "BF16"},
      {"torch.DoubleStorage", "F64"}, {"torch.LongStorage", "I64"},  {"torch.IntStorage", "I32"},
      {"torch.ShortStorage", "I16"},  {"torch.CharStorage", "I8"},   {"torch.ByteStorage", "U8"},
      {"torch.BoolStorage", "BOOL"},  {"torch.UntypedStorage", "U8"}};
  auto it = m.find(g);
  return it == m.end() ? nullptr : it->second;
}
const char* torch_dtype(const std::string& g) {
  static const std::map<std::string, const char*> m = {
      {"torch.float32", "F32"}, {"torch.float16", "F16"}, {"torch.bfloat16", "BF16"}, {"torch.float64", "F64"},
      {"torch.int64", "I64"},   {"torch.int32", "I32"},   {"torch.int16", "I16"},     {"torch.int8", "I8"},
      {"torch.uint8", "U8"},    {"torch.bool", "BOOL"}};
  auto it = m.find(g);
  return it == m.end() ? nullptr : it->second;
}
int dtype_bytes(const std::string& t) {
  if (t == "F64" || t == "I64") return 8;
  if (t == "F32" || t == "I32") return 4;
  if (t == "F16" || t == "BF16" || t == "I16") return 2;
  return 1;
}

const std::set<std::string>& callables() {
  static const std::set<std::string> s = {"collections.OrderedDict", "torch._utils._rebuild_tensor_v2",
                                          "torch._utils._rebuild_tensor_v3", "torch._utils._rebuild_parameter",
                                          "torch._utils._rebuild_parameter_with_state"};
  return s;
}

class Unpickler {
 public:
  Unpickler(const unsigned char* p, size_t n, std::string where) : p_(p), end_(p + n), where_(std::move(where)) {}

  PyVal* run() {
    for (;;) {
      BERTCC_CHECK(p_ < end_, where_, ": pickle ends without STOP (truncated)");
      const size_t at = static_cast<size_t>(p_ - begin_);
      const unsigned char op = *p_++;
      if (op == 0x80) {  // PROTO
        take(1);
      } else if (op == 0x95) {  // FRAME
        take(8);
      } else if (op == '.') {  // STOP
        BERTCC_CHECK(stack_.size() == 1 && marks_.empty(), where_, ": pickle stack not balanced at STOP");
        return stack_.back();
      } else if (!stack_op(op) && !scalar_op(op, at) && !container_op(op) && !memo_op(op) && !torch_op(op, at)) {
        fail(where_, ": pickle opcode 0x", hex(op), " ('", printable(op), "') at offset ", at,
             " is not allowed (only containers, numbers, strings and tensor rebuilds are read; a "
             "pickle can run code)");
      }
    }
  }

  void set_begin(const unsigned char* b) { begin_ = b; }

 private:
  // Marks and the stack; false: not one of them
  bool stack_op(unsigned char op) {
    switch (op) {
      case '(':
        marks_.push_back(stack_.size());
        break;
      case '1':
        pop_mark();
        break;  // POP_MARK
      case '0':
        pop();
        break;  // POP
      case '2':
        push(top());
        break;  // DUP
      default:
        return false;
    }
    return true;
  }

  // None, booleans, numbers, strings and bytes; false: not one of them
  bool scalar_op(unsigned char op, size_t at) {
    switch (op) {
      case 'N':
        push(make(PyVal::None));
        break;
      case 0x88:
        push(make_int(PyVal::Bool, 1));
        break;
      case 0x89:
        push(make_int(PyVal::Bool, 0));
        break;
      case 'J':
        push(make_int(PyVal::Int, static_cast<int32_t>(le(take(4), 4))));
        break;
      case 'K':
        push(make_int(PyVal::Int, static_cast<int64_t>(le(take(1), 1))));
        break;
      case 'M':
        push(make_int(PyVal::Int, static_cast<int64_t>(le(take(2), 2))));
        break;
      case 0x8a: {  // LONG1: little-endian two's complement of n bytes
        const size_t n = le(take(1), 1);
        BERTCC_CHECK(n <= 8, where_, ": integer of ", n, " bytes at pickle offset ", at, " is too large");
        const unsigned char* b = take(n);
        uint64_t v = n ? le(b, static_cast<int>(n)) : 0;
        if (n > 0 && n < 8 && (b[n - 1] & 0x80)) v |= ~uint64_t{0} << (8 * n);
        push(make_int(PyVal::Int, static_cast<int64_t>(v)));
        break;
      }
      case 'G': {  // BINFLOAT, big-endian
        const unsigned char* b = take(8);
        uint64_t u = 0;
        for (int k = 0; k < 8; ++k) u = (u << 8) | b[k];
        PyVal* v = make(PyVal::Float);
        std::memcpy(&v->f, &u, 8);
        push(v);
        break;
      }
      case 'X':
        push_str(PyVal::Str, le(take(4), 4));
        break;
      case 0x8c:
        push_str(PyVal::Str, le(take(1), 1));
        break;
      case 0x8d:
        push_str(PyVal::Str, le(take(8), 8));
        break;
      case 'T':
        push_str(PyVal::Str, le(take(4), 4));
        break;  // BINSTRING (protocol 1 str)
      case 'U':
        push_str(PyVal::Str, le(take(1), 1));
        break;
      case 'B':
        push_str(PyVal::Bytes, le(take(4), 4));
        break;
      case 'C':
        push_str(PyVal::Bytes, le(take(1), 1));
        break;
      case 0x8e:
        push_str(PyVal::Bytes, le(take(8), 8));
        break;
      default:
        return false;
    }
    return true;
  }

  // Tuples, lists and dicts, and filling them; false: not one of them
  bool container_op(unsigned char op) {
    switch (op) {
      case ')':
        push(make(PyVal::Tuple));
        break;
      case ']':
        push(make(PyVal::List));
        break;
      case '}':
        push(make(PyVal::Dict));
        break;
      case 't': {
        PyVal* t = make(PyVal::Tuple);
        t->items = pop_mark();
        push(t);
        break;
      }
      case 'l': {
        PyVal* t = make(PyVal::List);
        t->items = pop_mark();
        push(t);
        break;
      }
      case 'd': {
        PyVal* t = make(PyVal::Dict);
        set_items(t, pop_mark());
        push(t);
        break;
      }
      case 0x85:
      case 0x86:
      case 0x87: {
        const size_t k = op - 0x84u;
        need(k);
        PyVal* t = make(PyVal::Tuple);
        t->items.assign(stack_.end() - static_cast<std::ptrdiff_t>(k), stack_.end());
        stack_.resize(stack_.size() - k);
        push(t);
        break;
      }
      case 'a': {
        PyVal* v = pop();
        expect(top(), PyVal::List, "APPEND")->items.push_back(v);
        break;
      }
      case 'e': {
        auto vs = pop_mark();
        auto& l = expect(top(), PyVal::List, "APPENDS")->items;
        l.insert(l.end(), vs.begin(), vs.end());
        break;
      }
      case 's': {
        PyVal* v = pop();
        PyVal* k = pop();
        expect(top(), PyVal::Dict, "SETITEM")->dict.emplace_back(k, v);
        break;
      }
      case 'u': {
        auto vs = pop_mark();
        set_items(expect(top(), PyVal::Dict, "SETITEMS"), vs);
        break;
      }
      default:
        return false;
    }
    return true;
  }

  // The memo; false: not one of them
  bool memo_op(unsigned char op) {
    switch (op) {
      case 'q':
        memo_[le(take(1), 1)] = top();
        break;
      case 'r':
        memo_[le(take(4), 4)] = top();
        break;
      case 0x94:
        memo_[memo_.size()] = top();
        break;  // MEMOIZE
      case 'h':
        push(get(le(take(1), 1)));
        break;
      case 'j':
        push(get(le(take(4), 4)));
        break;
      default:
        return false;
    }
    return true;
  }

  // Globals, storages and the tensor rebuilds (evaluated here, never called); false: not one of them
  bool torch_op(unsigned char op, size_t at) {
    switch (op) {
      case 'c': {  // GLOBAL "module\nname\n"
        std::string mod = line(), name = line();
        push(global(mod + "." + name, at));
        break;
      }
      case 0x93: {  // STACK_GLOBAL
        PyVal* name = pop();
        PyVal* mod = pop();
        BERTCC_CHECK(name->kind == PyVal::Str && mod->kind == PyVal::Str, where_,
                     ": STACK_GLOBAL without module and name strings at pickle offset ", at);
        push(global(mod->s + "." + name->s, at));
        break;
      }
      case 'Q': {  // BINPERSID: ('storage', storage class, key, location, numel)
        PyVal* pid = pop();
        BERTCC_CHECK(pid->kind == PyVal::Tuple && pid->items.size() == 5 && pid->items[0]->kind == PyVal::Str &&
                         pid->items[0]->s == "storage" && pid->items[1]->kind == PyVal::Global &&
                         pid->items[2]->kind == PyVal::Str && pid->items[4]->kind == PyVal::Int,
                     where_, ": unexpected persistent id at pickle offset ", at, " (not a torch storage)");
        const char* dt = storage_dtype(pid->items[1]->s);
        BERTCC_CHECK(dt, where_, ": storage type '", pid->items[1]->s, "' is not supported");
        PyVal* s = make(PyVal::Storage);
        s->s = pid->items[2]->s;
        s->dtype = dt;
        s->i = pid->items[4]->i;
        push(s);
        break;
      }
      case 'R': {  // REDUCE: only the allow-listed rebuild functions, evaluated here, never called
        PyVal* args = pop();
        PyVal* fn = pop();
        BERTCC_CHECK(fn->kind == PyVal::Global && callables().count(fn->s) && args->kind == PyVal::Tuple, where_,
                     ": REDUCE of something other than a tensor rebuild at pickle offset ", at);
        push(reduce(fn->s, args->items, at));
        break;
      }
      case 'b': {  // BUILD: the state of an OrderedDict (state_dict's _metadata) or a parameter; dropped
        pop();
        const PyVal* t = top();
        BERTCC_CHECK(t->kind == PyVal::Dict || t->kind == PyVal::Tensor, where_,
                     ": BUILD on something other than a dict or tensor at pickle offset ", at);
        break;
      }
      default:
        return false;
    }
    return true;
  }

  static std::string hex(unsigned char c) {
    const char* d = "0123456789abcdef";
    return {d[c >> 4], d[c & 15]};
  }
  static std::string printable(unsigned char c) { return c >= 32 && c < 127 ? std::string(1, char(c)) : "?"; }

  const unsigned char* take(size_t n) {
    BERTCC_CHECK(static_cast<size_t>(end_ - p_) >= n, where_, ": pickle truncated");
    const unsigned char* r = p_;
    p_ += n;
    return r;
  }
  std::string line() {
    const unsigned char* s = p_;
    while (p_ < end_ && *p_ != '\n') ++p_;
    BERTCC_CHECK(p_ < end_ && p_ - s < 256, where_, ": malformed GLOBAL");
    std::string r(reinterpret_cast<const char*>(s), static_cast<size_t>(p_ - s));
    ++p_;
    return r;
  }
  PyVal* make(PyVal::Kind k) {
    BERTCC_CHECK(arena_.size() < 50'000'000, where_, ": pickle has too many objects");
    arena_.push_back(std::make_unique<PyVal>());
    arena_.back()->kind = k;
    return arena_.back().get();
  }
  PyVal* make_int(PyVal::Kind k, int64_t v) {
    PyVal* r = make(k);
    r->i = v;
    return r;
  }
  void push_str(PyVal::Kind k, uint64_t n) {
    BERTCC_CHECK(n <= static_cast<uint64_t>(end_ - p_), where_, ": string of ", n, " bytes overruns the pickle");
    PyVal* v = make(k);
    const unsigned char* b = take(static_cast<size_t>(n));
    v->s.assign(reinterpret_cast<const char*>(b), static_cast<size_t>(n));
    push(v);
  }
  void push(PyVal* v) { stack_.push_back(v); }
  void need(size_t k) {
    const size_t floor = marks_.empty() ? 0 : marks_.back();
    BERTCC_CHECK(stack_.size() >= floor + k, where_, ": pickle stack underflow");
  }
  PyVal* top() {
    need(1);
    return stack_.back();
  }
  PyVal* pop() {
    need(1);
    PyVal* v = stack_.back();
    stack_.pop_back();
    return v;
  }
  std::vector<PyVal*> pop_mark() {
    BERTCC_CHECK(!marks_.empty(), where_, ": pickle MARK missing");
    const size_t m = marks_.back();
    marks_.pop_back();
    std::vector<PyVal*> r(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return r;
  }
  PyVal* expect(PyVal* v, PyVal::Kind k, const char* op) {
    BERTCC_CHECK(v->kind == k, where_, ": pickle ", op, " on an object of the wrong type");
    return v;
  }
  void set_items(PyVal* d, const std::vector<PyVal*>& kv) {
    BERTCC_CHECK(kv.size() % 2 == 0, where_, ": odd number of items for a dict");
    for (size_t k = 0; k < kv.size(); k += 2) d->dict.emplace_back(kv[k], kv[k + 1]);
  }
  PyVal* get(uint64_t k) {
    auto it = memo_.find(k);
    BERTCC_CHECK(it != memo_.end(), where_, ": pickle memo ", k, " read before it was written");
    return it->second;
  }
  PyVal* global(const std::string& name, size_t at) {
    PyVal* g = make(PyVal::Global);
    g->s = name;
    if (const char* dt = torch_dtype(name)) {
      g->kind = PyVal::DType;
      g->s = dt;
      return g;
    }
    BERTCC_CHECK(callables().count(name) || storage_dtype(name), where_, ": pickle refers to '", name,
                 "' (GLOBAL at offset ", at,
                 "), which is not a tensor rebuild; refused, as loading it would run code. If the "
                 "checkpoint holds more than weights, save only the state dict: "
                 "torch.save(model.state_dict(), FILE)");
    return g;
  }
  std::vector<int64_t> ints(const PyVal* t, const char* what, size_t at) {
    BERTCC_CHECK(t->kind == PyVal::Tuple || t->kind == PyVal::List, where_, ": tensor ", what,
                 " is not a tuple at pickle offset ", at);
    std::vector<int64_t> r;
    for (const PyVal* v : t->items) {
      BERTCC_CHECK(v->kind == PyVal::Int && v->i >= 0, where_, ": tensor ", what, " holds a non-integer at offset ",
                   at);
      r.push_back(v->i);
    }
    return r;
  }
  PyVal* reduce(const std::string& fn, const std::vector<PyVal*>& a, size_t at) {
    if (fn == "collections.OrderedDict") {
      BERTCC_CHECK(a.empty(), where_, ": OrderedDict with arguments at pickle offset ", at);
      return make(PyVal::Dict);
    }
    if (fn == "torch._utils._rebuild_parameter" || fn == "torch._utils._rebuild_parameter_with_state") {
      BERTCC_CHECK(!a.empty() && a[0]->kind == PyVal::Tensor, where_, ": parameter without a tensor at offset ", at);
      return a[0];
    }
    // _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata]) and
    // _rebuild_tensor_v3(..., hooks, dtype[, metadata]).
    BERTCC_CHECK(a.size() >= 4 && a[0]->kind == PyVal::Storage && a[1]->kind == PyVal::Int, where_,
                 ": malformed tensor rebuild at pickle offset ", at);
    PyVal* t = make(PyVal::Tensor);
    t->items = {a[0]};
    t->dtype = a[0]->dtype;
    if (fn == "torch._utils._rebuild_tensor_v3") {
      BERTCC_CHECK(a.size() >= 7 && a[6]->kind == PyVal::DType, where_, ": tensor rebuild v3 without a dtype at ", at);
      t->dtype = a[6]->s;
    }
    t->i = a[1]->i;
    t->shape = ints(a[2], "size", at);
    t->stride = ints(a[3], "stride", at);
    BERTCC_CHECK(t->i >= 0 && t->shape.size() == t->stride.size(), where_, ": tensor at pickle offset ", at, " has ",
                 t->shape.size(), " sizes but ", t->stride.size(), " strides");
    return t;
  }

  const unsigned char* p_;
  const unsigned char* end_;
  const unsigned char* begin_ = nullptr;
  std::string where_;
  std::vector<std::unique_ptr<PyVal>> arena_;
  std::vector<PyVal*> stack_;
  std::vector<size_t> marks_;
  std::map<uint64_t, PyVal*> memo_;
};

bool all_tensors(const PyVal* d) {
  if (d->kind != PyVal::Dict || d->dict.empty()) return false;
  for (const auto& [k, v] : d->dict)
    if (k->kind != PyVal::Str || v->kind != PyVal::Tensor) return false;
  return true;
}

}  // namespace

struct TorchCheckpoint::Impl {
  Mapped file;
  std::map<std::string, ZipEntry> entries;
  std::string prefix;
  explicit Impl(const std::string& p) : file(p) {}
};

bool looks_like_torch_zip(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  unsigned char b[4] = {0, 0, 0, 0};
  const bool ok = ::read(fd, b, 4) == 4 && le(b, 4) == 0x04034b50;
  ::close(fd);
  return ok;
}

TorchCheckpoint::TorchCheckpoint(const std::string& path) : impl_(std::make_unique<Impl>(path)), path_(path) {
  const Mapped& m = impl_->file;
  BERTCC_CHECK(m.size >= 4, path, ": too short to be a PyTorch checkpoint");
  if (m.data[0] == 0x80)
    fail(path, ": a legacy (PyTorch < 1.6, non-zip) checkpoint; re-save it with a recent torch.save");
  BERTCC_CHECK(le(m.data, 4) == 0x04034b50, path, ": not a PyTorch checkpoint (torch.save writes a zip archive)");
  impl_->entries = read_zip(m, path);
  std::string pkl;
  for (const auto& [name, e] : impl_->entries) {
    const size_t slash = name.find('/');
    if (slash != std::string::npos && name.compare(slash, std::string::npos, "/data.pkl") == 0) {
      BERTCC_CHECK(pkl.empty(), path, ": more than one data.pkl in the archive");
      pkl = name;
      impl_->prefix = name.substr(0, slash + 1);
    }
  }
  BERTCC_CHECK(!pkl.empty(), path, ": no data.pkl in the archive (not written by torch.save?)");
  auto bo = impl_->entries.find(impl_->prefix + "byteorder");
  if (bo != impl_->entries.end()) {
    const std::string order(reinterpret_cast<const char*>(m.data + bo->second.data), bo->second.size);
    BERTCC_CHECK(order == "little", path, ": byte order '", order, "' is not supported");
  }
  const ZipEntry& pe = impl_->entries.at(pkl);
  Unpickler u(m.data + pe.data, pe.size, path + ": " + pkl);
  u.set_begin(m.data + pe.data);
  const PyVal* root = u.run();
  const PyVal* sd = nullptr;
  if (all_tensors(root)) {
    sd = root;
  } else if (root->kind == PyVal::Dict) {
    for (const char* key : {"model", "state_dict", "module", "model_state_dict"})
      for (const auto& [k, v] : root->dict)
        if (!sd && k->kind == PyVal::Str && k->s == key && all_tensors(v)) {
          sd = v;
          key_ = key;
        }
  }
  BERTCC_CHECK(sd, path, ": no state dict found (a dict of tensors, at the top or under 'model' or 'state_dict')");
  std::set<std::string> seen;
  for (const auto& [k, v] : sd->dict) {
    BERTCC_CHECK(seen.insert(k->s).second, path, ": tensor '", k->s, "' appears twice");
    TorchTensor t;
    t.name = k->s;
    t.dtype = v->dtype;
    t.shape = v->shape;
    t.stride = v->stride;
    t.offset = v->i;
    const PyVal* st = v->items[0];
    t.storage = st->s;
    // Extent: the largest element index the strides reach must lie inside the storage. Every
    // product and sum is checked for overflow (an offset near 2^63 wrapped around and read the
    // bytes before the storage, or far outside the file).
    const int64_t storage_numel = st->i;
    BERTCC_CHECK(storage_numel >= 0, path, ": tensor '", t.name, "': storage data/", t.storage,
                 " has a negative element count ", storage_numel);
    BERTCC_CHECK(t.offset >= 0, path, ": tensor '", t.name, "' has a negative storage offset ", t.offset);
    int64_t last = t.offset, numel = 1;
    bool empty = false;
    for (size_t d = 0; d < t.shape.size(); ++d) {
      BERTCC_CHECK(t.shape[d] >= 0 && t.stride[d] >= 0, path, ": tensor '", t.name, "' has a negative size or stride");
      if (t.shape[d] == 0) empty = true;
    }
    for (size_t d = 0; d < t.shape.size() && !empty; ++d) {
      int64_t reach = 0;
      BERTCC_CHECK(!__builtin_mul_overflow(t.shape[d] - 1, t.stride[d], &reach) &&
                       !__builtin_add_overflow(last, reach, &last) &&
                       !__builtin_mul_overflow(numel, t.shape[d], &numel),
                   path, ": tensor '", t.name, "': storage offset ", t.offset,
                   " with its sizes and strides overflows "
                   "64-bit element indices");
    }
    BERTCC_CHECK(empty || last < storage_numel, path, ": tensor '", t.name, "' reaches element ", last,
                 " of a storage of ", storage_numel);
    auto e = impl_->entries.find(impl_->prefix + "data/" + t.storage);
    BERTCC_CHECK(e != impl_->entries.end(), path, ": tensor '", t.name, "': storage data/", t.storage,
                 " missing from the archive");
    BERTCC_CHECK(e->second.size / static_cast<size_t>(dtype_bytes(st->dtype)) >= static_cast<size_t>(storage_numel),
                 path, ": storage data/", t.storage, " holds ", e->second.size, " bytes, fewer than its ",
                 storage_numel, " elements");
    BERTCC_CHECK(t.dtype == st->dtype, path, ": tensor '", t.name, "' is ", t.dtype, " on a ", st->dtype,
                 " storage (reinterpreted storages are not supported)");
    tensors_.push_back(std::move(t));
  }
}

TorchCheckpoint::~TorchCheckpoint() = default;

void TorchCheckpoint::read_f32(const TorchTensor& t, float* dst) const {
  const ZipEntry& e = impl_->entries.at(impl_->prefix + "data/" + t.storage);
  const unsigned char* base = impl_->file.data + e.data;
  const int es = dtype_bytes(t.dtype);
  auto load = [&](int64_t idx) -> float {
    const unsigned char* p = base + static_cast<size_t>(idx) * static_cast<size_t>(es);
    if (t.dtype == "F32") {
      float f;
      std::memcpy(&f, p, 4);
      return f;
    }
    if (t.dtype == "BF16") return bf16_to_f32(static_cast<uint16_t>(le(p, 2)));
    if (t.dtype == "F16") return f16_to_f32(static_cast<uint16_t>(le(p, 2)));
    double d;
    std::memcpy(&d, p, 8);
    return static_cast<float>(d);
  };
  BERTCC_CHECK(t.dtype == "F32" || t.dtype == "F16" || t.dtype == "BF16" || t.dtype == "F64", path_, ": tensor '",
               t.name, "' has dtype ", t.dtype, ", expected a floating type");
  const size_t nd = t.shape.size();
  const int64_t n = t.numel();
  if (n == 0) return;
  // Walk the index space in row-major order, following the strides.
  std::vector<int64_t> idx(nd, 0);
  int64_t src = t.offset;
  for (int64_t k = 0; k < n; ++k) {
    dst[k] = load(src);
    for (size_t d = nd; d-- > 0;) {
      if (++idx[d] < t.shape[d]) {
        src += t.stride[d];
        break;
      }
      src -= (t.shape[d] - 1) * t.stride[d];
      idx[d] = 0;
    }
  }
}

}  // namespace bertcc
