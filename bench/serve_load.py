#!/usr/bin/env python3
"""A load generator for bertcc serve where wrk is missing (the GPU machine): CLIENTS threads, each
with one keep-alive connection, post the same request for SECONDS; prints one line with requests/s,
p50/p99 latency, errors and the server's mean batch size (from /metrics). Standard library only.
The client threads share Python's interpreter lock: the rate it can drive is bounded (thousands of
small requests a second), so a line says when the clients, not the server, may be the limit.

  serve_load.py URL_BASE ENDPOINT BODY_JSON [--clients 64] [--seconds 20]
  e.g. serve_load.py http://127.0.0.1:8000 /v1/classify '{"text": "a fine film"}'"""
import argparse
import http.client
import json
import re
import threading
import time
import urllib.parse


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("endpoint")
    ap.add_argument("body")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=20.0)
    a = ap.parse_args()
    u = urllib.parse.urlparse(a.base)
    body = a.body.encode()
    json.loads(body)  # a malformed body is the caller's mistake, not the server's
    lat, errors, lock = [], {}, threading.Lock()
    stop = time.monotonic() + a.seconds

    def client():
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
        mine, bad = [], {}
        while time.monotonic() < stop:
            t0 = time.monotonic()
            try:
                c.request("POST", a.endpoint, body=body, headers={"Content-Type": "application/json"})
                r = c.getresponse()
                r.read()
                if r.status != 200:
                    bad[str(r.status)] = bad.get(str(r.status), 0) + 1
                else:
                    mine.append(time.monotonic() - t0)
            except (OSError, http.client.HTTPException) as e:
                bad[type(e).__name__] = bad.get(type(e).__name__, 0) + 1
                c.close()
                c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
        c.close()
        with lock:
            lat.extend(mine)
            for k, v in bad.items():
                errors[k] = errors.get(k, 0) + v

    t0 = time.monotonic()
    th = [threading.Thread(target=client) for _ in range(a.clients)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall = time.monotonic() - t0
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    c.request("GET", "/metrics")
    m = c.getresponse().read().decode()
    total = lambda name: sum(float(v) for v in re.findall(r"^" + name + r"(?:\{[^}]*\})?\s+(\S+)", m, re.M))
    n = total("bertcc_batch_size_count")
    mean_batch = total("bertcc_batch_size_sum") / n if n > 0 else float("nan")
    lat.sort()
    q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] * 1e3 if lat else float("nan")
    print(json.dumps({"endpoint": a.endpoint, "clients": a.clients, "seconds": round(wall, 1),
                      "requests": len(lat), "req_per_s": round(len(lat) / wall, 1), "p50_ms": round(q(0.5), 2),
                      "p99_ms": round(q(0.99), 2), "errors": sum(errors.values()), "error_kinds": errors, "mean_batch": round(mean_batch, 2)}))


if __name__ == "__main__":
    main()
