#!/usr/bin/env python3
"""bertcc serve against hostile and careless clients (issue 39's server items), on loopback.

  hostile.py BERTCC VOCAB WORKDIR [--soak-seconds 60] [--slowloris 2000] [--only queue,limits,slowloris,soak]

Each check failed before the HTTP transport moved to Boost.Beast and the batcher's jobs owned
their features:
  1. requests that time out while queued (504) leave the batcher consistent: queued_sequences
     back to 0, later requests answered, ready still honest;
  2. body and header limits on every transfer encoding: a chunked body over --max-body-bytes is
     413, a body sent without Content-Length is not read as the request's, headers over the
     limit are 431; the server's memory does not follow what the client sends;
  3. a slowloris (thousands of connections each trickling a header line a second): health checks
     and a normal client keep getting answers within 1 s, and the slow connections are closed at
     --read-timeout;
  4. a response over --max-response-bytes is refused (400) before the forward pass;
  5. invalid UTF-8 in a body or in a model name in the path: 400 with a JSON error, counted in /metrics;
  6. pipelined requests on one connection are all answered, in order;
  7. message framing as RFC 9112 has it (framing): chunked trailers and chunk extensions bounded
     by --max-header-bytes and --max-body-bytes; Transfer-Encoding whose final coding is not
     chunked, codings other than chunked, Transfer-Encoding with Content-Length or in HTTP/1.0,
     obs-fold, several Content-Length values: refused and the connection closed, so that the
     body is never read as a second request;
  8. amplification (amplify): per endpoint, crafted small requests whose answers would be large
     (fill-mask's masks x top_k, many short inputs, long texts); each answer's bytes over the
     request's bytes, and the server's RSS growth over them, stay under the bounds in AMPLIFY;
     requests that can never fit the queue get a 4xx naming the limit, not 503;
  9. (misc) SIGHUP and SIGUSR1 are ignored; /v1/qa with an empty context is an error; a model
     whose id2label repeats a name, or whose name is not UTF-8, is refused at start-up;
and a soak: 64 clients for --soak-seconds sending a mix of valid, malformed, oversized and
timing-out requests; the server keeps answering, queued_sequences ends at 0, and its RSS stays
within 20 % of where it was after a warm-up with the same mix.
"""
import argparse
import http.client
import json
import os
import random
import re
import resource
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

ap = argparse.ArgumentParser()
ap.add_argument("bertcc")
ap.add_argument("vocab")
ap.add_argument("work")
ap.add_argument("--soak-seconds", type=float, default=60)
ap.add_argument("--slowloris", type=int, default=2000)
ap.add_argument("--only", default="queue,limits,framing,amplify,misc,slowloris,soak", help="the parts to run (comma-separated)")
args = ap.parse_args()
parts = set(args.only.split(","))
here = os.path.dirname(os.path.abspath(__file__))
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))

# bert-tiny-sized models: this script tests the transport and the batcher, not the model.
env = dict(os.environ, SERVE_TEST_CONFIG=os.environ.get("SERVE_TEST_CONFIG", "bert-tiny"))
subprocess.run([sys.executable, os.path.join(here, "make_models.py"), args.bertcc, args.vocab, args.work], check=True,
               stdout=subprocess.DEVNULL, env=env)
M = {n: os.path.join(args.work, n) for n in ("sst", "base", "squad", "ner")}
fails = 0
lock = threading.Lock()


def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    fails += not ok


def start(*extra):
    if os.environ.get("HOSTILE_OLD_BINARY"):  # a binary from before the transport's flags (to see the checks fail)
        e = list(extra)
        for f in ("--read-timeout", "--keep-alive-timeout", "--max-response-bytes", "--max-header-bytes"):
            while f in e:
                del e[e.index(f):e.index(f) + 2]
        extra = e
    p = subprocess.Popen([args.bertcc, "serve", "--port", "0", "--precision", "fp32", "--threads", "1", "--model", M["sst"],
                          "--model", M["base"]] + list(extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert "listening on" in line, line + p.stderr.read()
    return p, int(line.strip().rsplit(":", 1)[1])


def stop(p):
    p.terminate()
    try:
        rc = p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        rc = "killed after 60 s"
    return rc


def req(port, method, path, body=None, headers=None, timeout=30):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
    c.request(method, path, body=body, headers=headers or {})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


def metrics(port):
    s, d = req(port, "GET", "/metrics")
    return d.decode()


def metric(text, name, labels=""):
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + ("{" if labels or "{" in line.split(" ")[0] else " ")) and labels in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def code_count(port, code):
    return metric(metrics(port), "bertcc_requests_total", f'code="{code}"')


def rss_mb(p):
    with open(f"/proc/{p.pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0


def raw(port, data, timeout=10, shut=True):
    """Sends bytes, returns everything the server answers until it closes (or the timeout)."""
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(timeout)
    try:
        s.sendall(data)
        if shut:
            s.shutdown(socket.SHUT_WR)
    except (BrokenPipeError, ConnectionResetError):
        pass
    out = b""
    try:
        while True:
            d = s.recv(1 << 16)
            if not d:
                break
            out += d
    except (socket.timeout, ConnectionResetError):
        pass
    s.close()
    return out


def statuses(data):
    return [int(m) for m in re.findall(rb"HTTP/1\.[01] (\d{3}) ", data)]


def words(n, seed):
    r = random.Random(seed)
    return " ".join(r.choice(["the", "movie", "was", "not", "good", "at", "all", "charming", "dull", "plot"]) for _ in range(n))


# ---- 1. timeouts while queued leave the batcher consistent -----------------------------------
if "queue" in parts:
    srv, PORT = start("--request-timeout", "0.05", "--max-batch-size", "4")
    slow_status = []


    def slow_batch():
        try:
            slow_status.append(req(PORT, "POST", "/v1/classify", {"inputs": [{"text": words(400, i)} for i in range(256)]},
                                   timeout=120)[0])
        except Exception as e:  # noqa: BLE001
            slow_status.append(repr(e))


    seen = {}


    def small_client(k, until):
        c = http.client.HTTPConnection("127.0.0.1", PORT, timeout=60)
        i = 0
        while time.time() < until:
            c.request("POST", "/v1/classify", body=json.dumps({"inputs": [{"text": words(5 + i % 7, k * 1000 + i)}] * (1 + i % 3)}))
            r = c.getresponse()
            r.read()
            with lock:
                seen[r.status] = seen.get(r.status, 0) + 1
            i += 1
        c.close()


    t = threading.Thread(target=slow_batch)
    t.start()
    time.sleep(0.2)
    until = time.time() + 4
    cs = [threading.Thread(target=small_client, args=(k, until)) for k in range(8)]
    for c in cs:
        c.start()
    for c in cs:
        c.join()
    t.join()
    check(504 in seen, f"requests timed out while queued behind a slow batch: {dict(sorted(seen.items()))}, slow batch {slow_status}")
    m = metrics(PORT)
    q = metric(m, "bertcc_queued_sequences")
    check(q == 0, f"queued_sequences after the timeouts: {q:g}")
    # The server answers again once the slow batch's forward pass (computed although its client left)
    # is done; with a 0.05 s timeout that takes a few tries on a busy machine. Before the fix: 503
    # "queue full" for good.
    ok, t0, last = False, time.time(), None
    while time.time() < t0 + 60:
        last = req(PORT, "POST", "/v1/classify", {"text": "fine again"})
        if last[0] == 200:
            ok = True
            break
        time.sleep(0.1)
    check(ok, f"a request after the timeouts is answered 200 after {time.time() - t0:.1f} s (last {last[0]})")
    check(req(PORT, "GET", "/v2/health/ready")[0] == 200 and srv.poll() is None, "ready and alive after the timeouts")
    check(stop(srv) == 0, "SIGTERM: exit 0")

# ---- the transport's limits --------------------------------------------------------------------
if "limits" in parts:
    srv, PORT = start("--read-timeout", "3", "--keep-alive-timeout", "2")
    rss0 = rss_mb(srv)

    # 2. a chunked body over --max-body-bytes (8 MiB): 413, whatever the encoding
    before = code_count(PORT, 413)
    chunk = b"a" * (1 << 20)
    body = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(50)) + b"0\r\n\r\n"
    out = raw(PORT, b"POST /v1/classify HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + body)
    check(statuses(out)[:1] == [413] or code_count(PORT, 413) == before + 1,
          f"50 MB chunked body -> {statuses(out)} (413s counted: {code_count(PORT, 413) - before:g})")
    # Content-Length over the limit: refused from the header, before any of the body is read
    out = raw(PORT, b"POST /v1/classify HTTP/1.1\r\nHost: x\r\nContent-Length: 9000000\r\n\r\n{", shut=False, timeout=5)
    check(statuses(out) == [413] and b"max-body-bytes" in out, f"Content-Length 9,000,000 -> {statuses(out)} at once")
    # 100-continue: the refusal comes before the client sends the body
    out = raw(PORT, b"POST /v1/classify HTTP/1.1\r\nHost: x\r\nContent-Length: 9000000\r\nExpect: 100-continue\r\n\r\n",
              shut=False, timeout=5)
    check(statuses(out) == [413], f"Expect: 100-continue with a body over the limit -> {statuses(out)}")
    out = raw(PORT, b'POST /v1/classify HTTP/1.1\r\nHost: x\r\nContent-Length: 18\r\nExpect: 100-continue\r\n\r\n',
              shut=False, timeout=1)
    check(statuses(out) == [100], f"Expect: 100-continue within the limit -> {statuses(out)} (100 Continue)")
    # 30 MB without Content-Length: the request has no body (RFC 9112), the bytes after it are not a request
    out = raw(PORT, b"POST /v1/classify HTTP/1.1\r\nHost: x\r\n\r\n" + b'{"text": "' + b"a" * (30 << 20) + b'"}')
    st = statuses(out)
    check(len(st) >= 1 and all(400 <= s < 500 for s in st), f"30 MB body without Content-Length -> {st}")
    # 160 MB of header lines: 431 after the first 16 KiB
    before = code_count(PORT, 431)
    hdr = b"".join(b"X-Pad-%d: %s\r\n" % (i, b"b" * 1000) for i in range(160 * 1024))
    out = raw(PORT, b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n" + hdr + b"\r\n")
    check(statuses(out)[:1] == [431] or code_count(PORT, 431) == before + 1,
          f"160 MB of headers -> {statuses(out)} (431s counted: {code_count(PORT, 431) - before:g})")
    out = raw(PORT, b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\nX-Big: " + b"c" * 20000 + b"\r\n\r\n")
    check(statuses(out) == [431], f"one 20 KB header -> {statuses(out)}")
    out = raw(PORT, b"GET /v2/models/" + b"m" * 9000 + b"/ready HTTP/1.1\r\nHost: x\r\n\r\n")
    check(statuses(out) == [414], f"a 9 KB path -> {statuses(out)}")
    rss1 = rss_mb(srv)
    check(rss1 - rss0 < 64, f"RSS after the oversized requests: {rss0:.0f} -> {rss1:.0f} MB")

    # 4. responses over --max-response-bytes (64 MiB): refused before the forward pass
    ids = [101] + [2009] * 510 + [102]
    big = {"inputs": [{"name": "input_ids", "shape": [128, 512], "datatype": "INT64", "data": ids * 128}]}
    t0 = time.time()
    s, d = req(PORT, "POST", "/v2/models/base/infer", big)
    check(s == 400 and b"max-response-bytes" in d, f"128 x 512 last_hidden_state as JSON -> {s} {d[:120]!r} in {time.time() - t0:.2f} s")
    rss2 = rss_mb(srv)
    check(rss2 - rss1 < 32, f"RSS after the refused large-response request: {rss1:.0f} -> {rss2:.0f} MB")
    big = {"inputs": [{"name": "input_ids", "shape": [8, 512], "datatype": "INT64", "data": ids * 8}],
           "outputs": [{"name": "pooler_output"}]}
    s, d = req(PORT, "POST", "/v2/models/base/infer", big)
    check(s == 200 and len(json.loads(d)["outputs"][0]["data"]) == 8 * 128, f"8 x 512 rows asking for pooler_output only -> {s}")

    # 5. invalid UTF-8
    before = code_count(PORT, 400)
    s, d = req(PORT, "POST", "/v1/classify", b'{"text": "caf\xe9 \xff\xfe"}')
    check(s == 400 and "error" in json.loads(d), f"invalid UTF-8 in a JSON body -> {s} {d[:100]!r}")
    s, d = req(PORT, "GET", "/v2/models/%FF%FE/ready")
    check(s == 400 and "error" in json.loads(d), f"a model name of invalid UTF-8 (percent-encoded) -> {s} {d[:100]!r}")
    out = raw(PORT, b"GET /v2/models/\xff\xfe/ready HTTP/1.1\r\nHost: x\r\n\r\n")
    check(statuses(out) == [400], f"raw invalid bytes in the path -> {statuses(out)}")
    s, d = req(PORT, "GET", "/v2/models/caf%C3%A9/ready")
    check(s == 404 and "café" in json.loads(d)["error"], f"a valid UTF-8 unknown model name -> {s} {d[:80]!r}")
    after = code_count(PORT, 400)
    check(after - before == 3, f"/metrics counts the three 400s ({after - before:g})")

    # 6. pipelining: three requests in one write, three answers in order
    one = json.dumps({"text": "a fine film"}).encode()
    pipe = (b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n"
            b"POST /v1/classify HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
            b"GET /v2 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n") % (len(one), one)
    out = raw(PORT, pipe)
    check(statuses(out) == [200, 200, 200] and out.index(b'"label"') < out.index(b'"bertcc"'),
          f"three pipelined requests -> {statuses(out)} in order")
    check(req(PORT, "GET", "/v2/health/ready")[0] == 200 and srv.poll() is None, "ready and alive after the limits")
    check(stop(srv) == 0, "SIGTERM: exit 0")

# ---- 7. message framing (RFC 9112) ------------------------------------------------------------
if "framing" in parts:
    srv, PORT = start("--max-header-bytes", "4096", "--max-body-bytes", "65536", "--read-timeout", "5")
    good = json.dumps({"text": "a fine film"}).encode()

    def chunked(body, ext=b"", trailer=b""):
        return b"%x%s\r\n%s\r\n0\r\n%s\r\n" % (len(body), ext, body, trailer)

    post = b"POST /v1/classify HTTP/1.1\r\nHost: x\r\n"
    out = raw(PORT, post + b"Transfer-Encoding: chunked\r\n\r\n" + chunked(good, b";a=b;c=\"d e\"", b"X-Trailer: 1\r\n"))
    check(statuses(out) == [200], f"chunked body with extensions and a trailer within the limits -> {statuses(out)}")
    rss0 = rss_mb(srv)
    trailers = b"".join(b"X-T-%d: %s\r\n" % (i, b"t" * 1000) for i in range(20 * 1024))  # 20 MB of trailer lines
    out = raw(PORT, post + b"Transfer-Encoding: chunked\r\n\r\n" + chunked(good, trailer=trailers))
    check(statuses(out) == [431] and b"max-header-bytes" in out, f"20 MB of chunked trailers -> {statuses(out)} {out[-90:]!r}")
    out = raw(PORT, post + b"Transfer-Encoding: chunked\r\n\r\n" + chunked(good, b";x=" + b"e" * (20 << 20)))
    check(statuses(out) == [413] and b"max-body-bytes" in out, f"one 20 MB chunk extension -> {statuses(out)}")
    many = b"".join(b"1;x=%s\r\n%s\r\n" % (b"e" * 1000, good[i:i + 1]) for i in range(len(good))) * 4
    out = raw(PORT, post + b"Transfer-Encoding: chunked\r\n\r\n" + many + b"0\r\n\r\n")
    check(statuses(out) == [413], f"1 KB extensions on each 1-byte chunk, 88 KB in all -> {statuses(out)}")
    rss1 = rss_mb(srv)
    check(rss1 - rss0 < 16, f"RSS after the trailer and extension floods: {rss0:.0f} -> {rss1:.0f} MB")
    second = b"GET /v2 HTTP/1.1\r\nHost: x\r\n\r\n"
    for te, want in ((b"gzip", 400), (b"identity", 400), (b"chunked, identity", 400), (b"chunked, gzip", 400),
                     (b"gzip, chunked", 501), (b"foo, chunked", 501), (b"chunked, chunked", 400), (b"", 400)):
        # the smuggled request after the headers must not be answered: one refusal, then close
        out = raw(PORT, post + b"Transfer-Encoding: " + te + b"\r\n\r\n" + second)
        check(statuses(out) == [want], f"Transfer-Encoding: {te.decode()!r} with a request as its body -> {statuses(out)} (want [{want}])")
    out = raw(PORT, post + b"Transfer-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s" % (len(good), good))
    check(statuses(out) == [400], f"Transfer-Encoding gzip and Content-Length -> {statuses(out)}")
    out = raw(PORT, post + b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n" % len(good) + chunked(good))
    check(statuses(out) == [400], f"Content-Length then Transfer-Encoding chunked -> {statuses(out)}")
    out = raw(PORT, b"POST /v1/classify HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(good))
    check(statuses(out) == [400], f"Transfer-Encoding in an HTTP/1.0 request -> {statuses(out)}")
    out = raw(PORT, post + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(good))
    check(statuses(out) == [400], f"Transfer-Encoding: chunked twice -> {statuses(out)}")
    for cl in (b"Content-Length: %d\r\nContent-Length: %d\r\n" % (len(good), len(good)),
               b"Content-Length: %d, %d\r\n" % (len(good), len(good)), b"Content-Length: +%d\r\n" % len(good)):
        out = raw(PORT, post + cl + b"\r\n" + good + second)
        check(statuses(out) == [400], f"{cl!r} -> {statuses(out)}")
    out = raw(PORT, post + b"Content-Length: %d\r\nX-Folded: a\r\n b\r\n\r\n%s" % (len(good), good))
    check(statuses(out) == [400] and b"obs-fold" in out, f"an obs-fold header line -> {statuses(out)}")
    out = raw(PORT, post + b"Transfer-Encoding: chunked\r\n\r\n" + chunked(good, trailer=b"X-A: 1\r\n folded\r\n"))
    check(statuses(out) == [400], f"an obs-fold trailer line -> {statuses(out)}")
    out = raw(PORT, b"GET /v2 HTTP/1.1\nHost: x\n\n")
    check(statuses(out) == [400], f"lines ending in LF alone -> {statuses(out)}")
    out = raw(PORT, b"GET /v2 HTTP/1.1\r\nHost : x\r\n\r\n")
    check(statuses(out) == [400], f"a space before a header's colon -> {statuses(out)}")
    check(req(PORT, "GET", "/v2/health/ready")[0] == 200 and srv.poll() is None, "ready and alive after the framing checks")
    check(stop(srv) == 0, "SIGTERM: exit 0")

# ---- 8. amplification ---------------------------------------------------------------------------
# The largest answer-to-request byte ratio allowed per endpoint over the crafted requests below
# (bert-tiny: 128 hidden units, so one embedding is about 2.5 KB of JSON), and the largest RSS
# growth, in MB, over all of them.
AMPLIFY = {"/v1/fill-mask": 1200, "/v1/embed": 800, "/v1/classify": 40, "/v1/tag": 60, "/v1/qa": 20,
           "/v2/models/sst/infer": 40, "/v2/models/base/infer": 800}
AMPLIFY_RSS_MB = 200
if "amplify" in parts:
    srv, PORT = start("--model", M["squad"], "--model", M["ner"], "--max-queue", "64", "--max-response-bytes", "4000000")
    worst = {}
    rss0 = rss_mb(srv)
    masks = " ".join(["[MASK]"] * 510)

    def amplify(path, body, want=(200,)):
        b = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
        s, d = req(PORT, "POST", path, b, timeout=120)
        ratio = len(d) / len(b)
        worst[path] = max(worst.get(path, 0), ratio)
        check(s in want, f"{path} {len(b)} B -> {s}, {len(d)} B (x{ratio:.0f}) {d[:100] if s != 200 else b''!r}")
        return s, d

    s, d = amplify("/v1/fill-mask", {"model": "base", "text": masks, "top_k": 100}, (413,))
    check(b"max-response-bytes" in d, f"510 masks x top_k 100: refused naming --max-response-bytes: {d[:120]!r}")
    s, d = amplify("/v1/fill-mask", {"model": "base", "text": masks, "top_k": 1000}, (400,))
    check(b"top_k" in d, f"top_k 1000 is over the cap: {d[:120]!r}")
    amplify("/v1/fill-mask", {"model": "base", "text": " ".join(["[MASK]"] * 20), "top_k": 100})
    amplify("/v1/fill-mask", {"model": "base", "inputs": ["[MASK]"] * 60, "top_k": 5})
    # 2,040 masks' vocabulary logits: 249 MB, over 4 x --max-response-bytes, although the answer is small
    s, d = amplify("/v1/fill-mask", {"model": "base", "inputs": [masks] * 4, "top_k": 1}, (413,))
    check(b"vocabulary logits" in d, f"2,040 masks x top_k 1: refused for their logits: {d[:120]!r}")
    amplify("/v1/embed", {"model": "base", "inputs": ["a"] * 64})
    amplify("/v1/classify", {"inputs": ["a"] * 64})
    amplify("/v1/tag", {"text": ", " * 4000})
    amplify("/v1/tag", {"inputs": [", " * 200] * 256}, (413,))  # 256 sequences, never within --max-queue 64
    amplify("/v1/qa", {"inputs": [{"question": "a", "context": "b " * 300}] * 4})
    ids = [101] + [2009] * 126 + [102]
    amplify("/v2/models/sst/infer", {"inputs": [{"name": "input_ids", "shape": [64, 2], "datatype": "INT32", "data": [101, 102] * 64}]})
    amplify("/v2/models/base/infer", {"inputs": [{"name": "input_ids", "shape": [1, 128], "datatype": "INT32", "data": ids}],
                                      "outputs": [{"name": "last_hidden_state"}]})
    # a request that can never fit the queue (64 sequences here): 413 naming --max-queue, not 503
    s, d = amplify("/v1/qa", {"question": "a", "context": "word " * 40000}, (413,))
    check(b"max-queue" in d, f"a 200 KB context of {s}: names --max-queue: {d[:140]!r}")
    s, d = amplify("/v1/tag", {"text": "abcdefghijklmnopqrstuvwxyz " * 5000}, (413,))
    check(b"max-queue" in d, f"a 135 KB text to tag (over 100 windows): names --max-queue: {d[:140]!r}")
    rss1 = rss_mb(srv)
    for path, ratio in sorted(worst.items()):
        bound = next(v for k, v in AMPLIFY.items() if path.startswith(k))
        check(ratio <= bound, f"{path}: largest answer/request ratio {ratio:.0f} <= {bound}")
    check(rss1 - rss0 < AMPLIFY_RSS_MB, f"RSS over the amplification requests: {rss0:.0f} -> {rss1:.0f} MB (< +{AMPLIFY_RSS_MB})")
    check(stop(srv) == 0, "SIGTERM: exit 0")

# ---- 9. signals, empty QA contexts, models refused at start-up -------------------------------------
if "misc" in parts:
    srv, PORT = start("--model", M["squad"])
    for sig in (signal.SIGHUP, signal.SIGUSR1):
        srv.send_signal(sig)
        time.sleep(0.3)
        check(srv.poll() is None and req(PORT, "GET", "/v2/health/ready")[0] == 200, f"{sig.name}: ignored, still serving")
    if srv.poll() is not None:  # a binary that ended on them: a fresh server for the checks below
        srv, PORT = start("--model", M["squad"])
    for ctx in ("", "   "):
        s, d = req(PORT, "POST", "/v1/qa", {"question": "who?", "context": ctx})
        check(s == 400 and b"context" in d, f"/v1/qa with context {ctx!r} -> {s} {d[:100]!r}")
    s, d = req(PORT, "POST", "/v1/qa", {"question": "", "context": "a b c"})
    check(s == 400 and b"question" in d, f"/v1/qa with an empty question -> {s} {d[:100]!r}")
    check(stop(srv) == 0, "SIGTERM after SIGHUP and SIGUSR1: exit 0 (requests in flight drained)")
    dup = os.path.join(args.work, "dup_labels")
    shutil.rmtree(dup, ignore_errors=True)
    shutil.copytree(M["sst"], dup)
    c = json.load(open(os.path.join(dup, "config.json")))
    c["id2label"] = {"0": "positive", "1": "positive"}
    c.pop("label2id", None)
    json.dump(c, open(os.path.join(dup, "config.json"), "w"))


    def refused(cmd):
        """(exit code, stderr) of a server that should refuse to start; one still serving after 30 s is stopped."""
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            _, err = p.communicate(timeout=30)
            return p.returncode, err.decode(errors="replace")
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()
            return "still serving", ""

    rc, err = refused([args.bertcc, "serve", "--port", "0", "--model", dup])
    check(rc not in (0, "still serving") and "positive" in err and "config.json" in err,
          f"id2label naming 'positive' twice: refused at start-up ({rc}, {err.strip()[-140:]!r})")
    rc, err = refused([args.bertcc.encode(), b"serve", b"--port", b"0", b"--model", b"caf\xe9=" + M["sst"].encode()])
    check(rc not in (0, "still serving") and "UTF-8" in err, f"a model name that is not UTF-8: refused at start-up ({rc}, {err.strip()[-120:]!r})")
    r = subprocess.run([args.bertcc, "qa", "--model", M["squad"], "--question", "a", "--context", "b c", "--max-answer-length", "-1"],
                       capture_output=True, text=True, timeout=60)
    check(r.returncode != 0 and "max-answer-length" in r.stderr, f"bertcc qa --max-answer-length -1: refused ({r.returncode}, {r.stderr.strip()[-120:]!r})")

# ---- 3. slowloris ----------------------------------------------------------------------------
if "slowloris" in parts:
    srv, PORT = start("--read-timeout", "5")
    N = args.slowloris
    conns = []
    for i in range(N):
        s = socket.create_connection(("127.0.0.1", PORT))
        s.setblocking(False)
        conns.append(s)
    sel = selectors.DefaultSelector()
    t_start = time.time()
    for s in conns:
        s.send(b"GET /v2/health/live HTTP/1.1\r\nHost: x\r\n")
        sel.register(s, selectors.EVENT_READ)
    closed_at = {}

    def note_closed(timeout):  # records when the server closed each slow connection
        for key, _ in sel.select(timeout=timeout):
            try:
                d = key.fileobj.recv(4096)
            except OSError:
                d = b""
            if not d:
                closed_at[key.fileobj.fileno()] = time.time() - t_start
                sel.unregister(key.fileobj)

    worst, answered, slow_answers = 0.0, 0, 0
    deadline = t_start + 8
    next_line = t_start + 1
    while time.time() < deadline:
        if time.time() >= next_line:  # one more header line a second on every slow connection
            for s in conns:
                if s.fileno() in closed_at or s.fileno() < 0:
                    continue
                try:
                    s.send(b"X-Slow: 1\r\n")
                except OSError:
                    pass
            next_line += 1
        note_closed(0)
        t0 = time.time()
        ok1 = req(PORT, "GET", "/v2/health/ready", timeout=5)[0] == 200
        ok2 = req(PORT, "POST", "/v1/classify", {"text": "still there?"}, timeout=5)[0] == 200
        dt = time.time() - t0
        worst = max(worst, dt)
        answered += ok1 and ok2
        slow_answers += dt > 1
        time.sleep(0.2)
    check(answered > 10 and slow_answers == 0,
          f"{N} slowloris connections: health + classify answered {answered} times, worst {worst:.2f} s, {slow_answers} over 1 s")
    while len(closed_at) < N and time.time() < t_start + 12:
        note_closed(0.5)
    times = sorted(closed_at.values())
    check(len(times) == N and 4 < times[0] and times[-1] < 9,
          f"the server closed {len(times)} of {N} slow connections, between {times[0] if times else 0:.1f} and "
          f"{times[-1] if times else 0:.1f} s (--read-timeout 5)")
    for s in conns:
        s.close()
    check(stop(srv) == 0, "SIGTERM: exit 0")

# ---- soak ------------------------------------------------------------------------------------
if "soak" in parts:
    srv, PORT = start("--request-timeout", "0.5", "--max-body-bytes", "65536", "--max-batch-size", "8")
    kinds = {}


    def one_request(r, c_holder):
        k = r.random()
        try:
            if k < 0.6:
                kind, body, headers = "valid", {"inputs": [{"text": words(r.randint(1, 40), r.random())}] * r.randint(1, 4)}, {}
            elif k < 0.7:
                kind, body, headers = "malformed", b'{"text": "unfinished', {}
            elif k < 0.75:
                kind, body, headers = "bad-utf8", b'{"text": "\xc3\x28"}', {}
            elif k < 0.85:
                kind, body, headers = "oversized", b'{"text": "' + b"z" * 70000 + b'"}', {}
            else:  # long enough to time out behind the others now and then
                kind, body, headers = "slow", {"inputs": [{"text": words(150, r.random())}] * 32}, {}
            if kind == "oversized":
                c_holder[0] = None  # the server closes the connection after a 413
                st = statuses(raw(PORT, b"POST /v1/classify HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body) + body))
                st = st[0] if st else "closed"
            else:
                if c_holder[0] is None:
                    c_holder[0] = http.client.HTTPConnection("127.0.0.1", PORT, timeout=30)
                c = c_holder[0]
                c.request("POST", "/v1/classify", body=json.dumps(body) if isinstance(body, dict) else body, headers=headers)
                resp = c.getresponse()
                resp.read()
                st = resp.status
                if resp.will_close:
                    c.close()
                    c_holder[0] = None
        except Exception as e:  # noqa: BLE001
            kind, st = "error", type(e).__name__
            c_holder[0] = None
        with lock:
            kinds[(kind, st)] = kinds.get((kind, st), 0) + 1


    def soak_client(seed, until):
        r = random.Random(seed)
        holder = [None]
        while time.time() < until:
            one_request(r, holder)


    def soak(seconds, seed0):
        until = time.time() + seconds
        ts = [threading.Thread(target=soak_client, args=(seed0 + i, until)) for i in range(64)]
        for x in ts:
            x.start()
        for x in ts:
            x.join()


    soak(10, 1000)  # warm-up: the allocator's pools, the batch sizes seen (the row counts' primitives)
    rss_start = rss_mb(srv)
    kinds.clear()
    # in two halves: what a server keeps per shape it meets (oneDNN's primitives for each new row
    # count, up to their cache's bound) and the allocator's pools grow fast at first and then level
    # off, while a leak grows with the requests, as much in the second half as in the first
    soak(args.soak_seconds / 2, 2000)
    rss_mid = rss_mb(srv)
    soak(args.soak_seconds / 2, 3000)
    time.sleep(1)
    rss_end = rss_mb(srv)
    m = metrics(PORT)
    q = metric(m, "bertcc_queued_sequences")
    summary = ", ".join(f"{k}:{s} x{n}" for (k, s), n in sorted(kinds.items(), key=lambda x: str(x)))
    print("soak:", summary)
    check(not any(k == "error" for k, s in kinds) and kinds.get(("valid", 200), 0) > 0,
          f"soak {args.soak_seconds:g} s, 64 clients: no connection errors, valid requests answered")
    check(all(s in (200, 504) for k, s in kinds if k in ("valid", "slow")) and
          all(s == 400 for k, s in kinds if k in ("malformed", "bad-utf8")) and
          all(s == 413 for k, s in kinds if k == "oversized"), "soak: every answer has the expected status")
    check(q == 0, f"soak: queued_sequences back at {q:g}")
    check(req(PORT, "GET", "/v2/health/ready")[0] == 200 and req(PORT, "POST", "/v1/classify", {"text": "and now?"})[0] == 200,
          "soak: the server still answers")
    # (bounds: a server process without the CUDA libraries holds ~110-150 MB at the start, so 20 % is
    # 22-30 MB; seen here: +28 MB in the first 40 s, +6 in the next 40, +3 in each 40 after. With
    # a 5 s warm-up, 60 s of soak gave +31 to +38 and +6 to +8 MB on a Zen 4, and +51 in all once
    # with the machine busy, before and after the nineteenth session's changes alike: most of it
    # is oneDNN's primitives for each new row count, bounded by its cache. A 10 s warm-up meets
    # more of those first: +25 and +7.)
    check(rss_end - rss_start <= max(0.2 * rss_start, 48),
          f"soak: RSS {rss_start:.0f} -> {rss_end:.0f} MB (within 20 % or 48 MB)")
    check(rss_end - rss_mid <= max(0.5 * (rss_mid - rss_start), 8),
          f"soak: RSS levels off: +{rss_mid - rss_start:.1f} MB in the first half, +{rss_end - rss_mid:.1f} in the second")
    check(stop(srv) == 0, "SIGTERM after the soak: exit 0")

print("hostile: all checks passed" if fails == 0 else f"hostile: {fails} check(s) FAILED")
sys.exit(1 if fails else 0)
