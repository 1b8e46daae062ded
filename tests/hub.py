"""A real HTTP server on 127.0.0.1 in the Hugging Face Hub's layout, for tests that download as a user does
(weights.py reads HF_ENDPOINT): tests/test_weights.py's downloads, and the real names served with tiny checkpoints
(tests/test_reproduce.py)."""
from __future__ import annotations
import hashlib, socket, struct, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

class Hub:
  """Serves {name: folder} as /openai-community/<name>/resolve/main/<file>, recording requests.

  mode: "direct"   model.safetensors comes with X-Linked-Etag: "<sha256>", as the Hub does for small LFS files
        "redirect" the Hub's real way: a 302 to /cdn/<name>/<file>, the X-Linked-Etag only on the 302
        "truncate" model.safetensors announces its full length, sends half, closes the connection
        "stall"    model.safetensors sends half, then hangs until the test ends (for a process to be killed)
        "reset"    model.safetensors sends half, then resets the connection (TCP RST)
        "no-range" model.safetensors ignores Range headers: always 200 and the whole file
  Range requests ("bytes=N-") are answered 206 with the rest of the file, as the Hub's file storage does;
  ranges records every Range header, whatever the file. bad_sha: announce a wrong sha256 for
  model.safetensors. hold: model.safetensors pauses half-way until this event is set (set by default).
  """
  def __init__(self, repos: dict):
    self.repos, self.mode, self.bad_sha, self.hold = repos, "direct", False, threading.Event()
    self.requests, self.ranges, self.released = [], [], threading.Event()
    self.hold.set()
    hub = self
    class Handler(BaseHTTPRequestHandler):
      def log_message(self, *args):
        pass
      def do_GET(self):
        hub.answer(self)
    self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    self.server.daemon_threads = True
    self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
    self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02},
                                   daemon=True)
    self.thread.start()

  def etag(self, data: bytes) -> str:
    sha256 = hashlib.sha256(b"not these bytes" if self.bad_sha else data).hexdigest()
    return f'"{sha256}"'

  def answer(self, h: BaseHTTPRequestHandler) -> None:
    self.requests.append(h.path)
    parts = h.path.strip("/").split("/")
    if parts[:1] == ["openai-community"] and parts[2:4] == ["resolve", "main"] and len(parts) == 5:
      name, file, cdn = parts[1], parts[4], False
    elif parts[:1] == ["cdn"] and len(parts) == 3:
      name, file, cdn = parts[1], parts[2], True
    else:
      return h.send_error(404)
    path = self.repos[name] / file if name in self.repos else None
    if path is None or not path.is_file():
      return h.send_error(404, "Entry not found")
    data, lfs = path.read_bytes(), file == "model.safetensors"
    if lfs and self.mode == "redirect" and not cdn:
      h.send_response(302)
      h.send_header("Location", f"/cdn/{name}/{file}")
      h.send_header("X-Linked-Etag", self.etag(data))
      h.send_header("Content-Length", "0")
      return h.end_headers()
    start = 0
    if wanted := h.headers.get("Range"):
      self.ranges.append(wanted)
      if not (lfs and self.mode == "no-range"):
        start = int(wanted.removeprefix("bytes=").removesuffix("-"))
        if start >= len(data):
          return h.send_error(416)
    h.send_response(206 if start else 200)
    h.send_header("Content-Length", str(len(data) - start))
    if lfs and self.mode != "redirect":
      h.send_header("X-Linked-Etag", self.etag(data))
    h.end_headers()
    h.close_connection = True
    body, half = data[start:], (len(data) - start) // 2
    h.wfile.write(body[:half])
    h.wfile.flush()
    if not lfs:
      h.wfile.write(body[half:])
    elif self.mode == "stall":
      self.released.wait(30)
    elif self.mode == "reset":
      time.sleep(0.3)  # for the client to take the first half: a reset drops what it has not read
      # SO_LINGER with a zero timeout makes close() send a TCP RST: the client's read fails
      h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
      h.connection.close()
    elif self.mode != "truncate":
      self.hold.wait(30)
      h.wfile.write(body[half:])

  def close(self):
    self.released.set()
    self.server.shutdown()
    self.server.server_close()
