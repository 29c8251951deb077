#!/usr/bin/python3
"""bertcc serve --device DEVICE against serve --device cpu: the same requests to both servers (every
text endpoint, batched inputs, and a KServe v2 infer request) must give the same response bodies,
byte for byte (fp32, or PRECISION=bf16 in the environment). Used by tests/train/device.sh with the cpu-staged device, where the bits must
agree; prints one line per request and exits 1 on any difference. With RTOL in the environment (a
real GPU: tests/cuda/e2e.sh) the bodies must instead have the same structure and strings, numbers
within RTOL relative (and 1e-4 absolute). With JOINT (a model with ELECTRA's
joint SQuAD head), its /v1/qa answers must also equal `bertcc qa`'s.
  same_on_device.py BERTCC DEVICE CLASSIFIER QA TAGGER MLM [JOINT]"""
import http.client
import json
import os
import subprocess
import sys

bertcc, device, clf, qa, tagger, mlm = sys.argv[1:7]
joint = sys.argv[7] if len(sys.argv) > 7 else None
rtol = float(os.environ["RTOL"]) if os.environ.get("RTOL") else None
precision = os.environ.get("PRECISION", "fp32")  # both servers (bf16: the device holds bf16-only matrices)


def close(x, y):
    """Same structure and strings, numbers within rtol (the RTOL comparison)."""
    if isinstance(x, dict) and isinstance(y, dict):
        return set(x) == set(y) and all(close(x[k], y[k]) for k in x)
    if isinstance(x, list) and isinstance(y, list):
        return len(x) == len(y) and all(close(p, q) for p, q in zip(x, y))
    if isinstance(x, bool) or isinstance(y, bool) or not isinstance(x, (int, float)) or not isinstance(y, (int, float)):
        return x == y
    return abs(x - y) <= 1e-4 + rtol * abs(y)


def same(a, b):
    return a == b if rtol is None else close(json.loads(a), json.loads(b))


def start(dev):
    p = subprocess.Popen([bertcc, "serve", "--port", "0", "--precision", precision, "--threads", "2", "--device", dev,
                          "--max-queue-delay-us", "2000", "--model", "clf=" + clf, "--model", "qa=" + qa,
                          "--model", "tagger=" + tagger, "--model", "mlm=" + mlm]
                         + (["--model", "joint=" + joint] if joint else []),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    if "listening on" not in line:
        p.kill()
        sys.exit(f"serve --device {dev} did not start: {line}{p.stderr.read()}")
    return p, int(line.strip().rsplit(":", 1)[1])


def post(port, path, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


ids = [[2, 17, 30, 41, 52, 3, 0, 0], [2, 60, 61, 62, 63, 64, 65, 3]]
requests = [
    ("/v1/classify", {"model": "clf", "inputs": [{"text": "a gorgeous, witty film"}, {"text": "dull and long", "text_pair": "boring"}]}),
    ("/v1/qa", {"model": "qa", "inputs": [{"question": "Who lives in Berlin?", "context": "John lives in Berlin. Mary lives in Paris."}]}),
    ("/v1/tag", {"model": "tagger", "inputs": [{"text": "John lives in Berlin"}, {"text": "Mary met Peter in Paris last year"}]}),
    ("/v1/fill-mask", {"model": "mlm", "inputs": [{"text": "sentence one of [MASK] is here.", "top_k": 3}]}),
    ("/v1/embed", {"model": "mlm", "inputs": [{"text": "a third one ends the paragraph"},
                              {"text": "then a fourth line appears", "pooling": "mean"}]}),
    ("/v2/models/clf/infer", {"inputs": [
        {"name": "input_ids", "shape": [2, 8], "datatype": "INT64", "data": sum(ids, [])},
        {"name": "attention_mask", "shape": [2, 8], "datatype": "INT64",
         "data": [1, 1, 1, 1, 1, 1, 0, 0] + [1] * 8},
        {"name": "token_type_ids", "shape": [2, 8], "datatype": "INT64", "data": [0] * 16}]}),
    ("/v2/models/mlm/infer", {"inputs": [
        {"name": "input_ids", "shape": [2, 8], "datatype": "INT64", "data": sum(ids, [])},
        {"name": "attention_mask", "shape": [2, 8], "datatype": "INT64",
         "data": [1, 1, 1, 1, 1, 1, 0, 0] + [1] * 8}]}),
]
qa_in = [{"question": "Who lives in Berlin?", "context": "John lives in Berlin. Mary lives in Paris."},
         {"question": "Where does Mary live?", "context": "John lives in Berlin. Mary lives in Paris."}]
if joint:
    requests.append(("/v1/qa", {"model": "joint", "inputs": qa_in}))
servers = {d: start(d) for d in ("cpu", device)}
fails = 0
try:
    for path, body in requests:
        (sa, a), (sb, b) = (post(servers[d][1], path, body) for d in ("cpu", device))
        if sa == 200 and sa == sb and same(a, b):
            print(f"ok   serve {path} {precision} on {device}: {a[:90].decode(errors='replace')}")
        else:
            fails += 1
            print(f"FAIL serve {path}: {device} {sb} {b[:200]!r} vs cpu {sa} {a[:200]!r}")
    # the joint head's beam search served = the command line's (fp32: in bf16 the CPU's GEMMs may
    # sum in another order for the server's batch of two than for the command line's one question)
    if joint and precision == "fp32":
        _, body = post(servers[device][1], "/v1/qa", {"model": "joint", "inputs": qa_in})
        served = json.loads(body)["results"]
        cli = [json.loads(subprocess.run([bertcc, "qa", "--model", joint, "--precision", precision, "--question",
                                          q["question"], "--context", q["context"]], capture_output=True, text=True,
                                         check=True).stdout) for q in qa_in]
        if (served == cli if rtol is None else close(served, cli)):
            print(f"ok   serve /v1/qa with the joint SQuAD head = bertcc qa: {served}"[:200])
        else:
            fails += 1
            print(f"FAIL serve /v1/qa with the joint head: {served} vs bertcc qa {cli}")
finally:
    for p, _ in servers.values():
        p.terminate()
        p.wait(timeout=30)
sys.exit(1 if fails else 0)
