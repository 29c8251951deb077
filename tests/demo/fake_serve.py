# The fake bertcc's `serve` (demo_failure.sh): the two requests demo.sh sends, then SIGTERM.
import http.server
import json
import signal
import sys
import threading


class H(http.server.BaseHTTPRequestHandler):
    def answer(self, obj):
        body = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.answer({"inputs": [{"name": "input_ids"}], "outputs": [{"name": "logits", "shape": [-1, 2]}]})

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.answer({"results": [{"label": "ham", "score": 0.9}, {"label": "spam", "score": 0.8}]})

    def log_message(self, *a):
        pass


srv = http.server.HTTPServer(("127.0.0.1", 0), H)
signal.signal(signal.SIGTERM, lambda *a: threading.Thread(target=srv.shutdown).start())
print(f"listening on http://127.0.0.1:{srv.server_address[1]}", flush=True)
srv.serve_forever()
print("serve: stopped after answering 2 requests", file=sys.stderr)
