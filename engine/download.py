"""The download client beneath weights.py: one file over HTTP, resumed where it stopped and checked against the
sha256 the server announces, into a cache folder that one process at a time writes. A first reading can skip it.
"""
from __future__ import annotations
import contextlib, hashlib, http.client, os, pathlib, sys, urllib.error, urllib.request
from typing import Iterator
from tinygrad.helpers import tqdm

CHUNK = 1 << 20  # bytes read from the network at a time, at most

class LoadError(Exception):
  """A model or tokenizer could not be had; the message is one sentence that says what to do."""

def cache_dir() -> pathlib.Path:
  """Where downloaded checkpoints live: $XDG_CACHE_HOME/tinyspec, by default ~/.cache/tinyspec."""
  return pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache") / "tinyspec"

class _HubRedirects(urllib.request.HTTPRedirectHandler):
  """Follows the Hub's redirect to its file storage, keeping the X-Linked-Etag (an LFS file's sha256) that
  the redirect announced. urllib copies every header but Content-Length and Content-Type to the redirected
  request, so a Range header reaches the file storage too."""
  linked_etag: str | None = None

  def redirect_request(self, req, fp, code, msg, headers, newurl):
    self.linked_etag = headers.get("X-Linked-Etag", self.linked_etag)
    return super().redirect_request(req, fp, code, msg, headers, newurl)

def download(url: str, dest: pathlib.Path, resume: bool = True) -> None:
  """Download url to dest with a progress bar; check its size and the sha256 the server announced.

  The bytes go to dest + ".incomplete" first, renamed to dest only once whole and verified, so nothing
  half-written is ever loaded. An interrupted download (a cut connection, a killed process) keeps that
  partial file, and with resume the next attempt continues from its end with an HTTP Range request; without
  resume (a small file with no announced sha256, such as config.json) it starts over. A wrong sha256 deletes
  the partial file.
  """
  try:
    fetch(url, dest, resume)
  except urllib.error.HTTPError as e:
    raise LoadError(f"The server answered {e.code} {e.reason} for {url}; "
                    "check the model name and HF_ENDPOINT.") from None
  except (urllib.error.URLError, http.client.HTTPException, ConnectionError, TimeoutError) as e:
    reason = getattr(e, "reason", e) or type(e).__name__
    raise LoadError(f"Could not download {url} ({reason}): with no network, put config.json and "
                    "model.safetensors from huggingface.co/openai-community/<name> in a folder and pass that "
                    "folder instead of the name.") from None
  except OSError as e:  # the network is fine: the cache folder is not writable, or the disk is full
    raise LoadError(f"Could not write {dest} ({e.strerror or type(e).__name__}): free some disk space, "
                    "or point XDG_CACHE_HOME at a folder you can write to.") from None

def fetch(url: str, dest: pathlib.Path, resume: bool) -> None:
  """One attempt at download(): ask for what dest's partial file lacks, append it, verify it, move it
  in place."""
  partial = dest.with_name(dest.name + ".incomplete")
  have = partial.stat().st_size if resume and partial.is_file() else 0
  redirects = _HubRedirects()
  request = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
  try:
    response = urllib.request.build_opener(redirects).open(request, timeout=30)
  except urllib.error.HTTPError as e:
    if e.code != 416 or not have:
      raise
    # 416: there is nothing past byte `have`, so the partial file is not a prefix of this file: start over
    partial.unlink()
    return fetch(url, dest, resume)
  dest.parent.mkdir(parents=True, exist_ok=True)
  with response:
    if response.status != 206:
      have = 0  # a 200, even to a Range request: the server sends the whole file, so start over
    length = response.headers.get("Content-Length")
    size = have + int(length) if length is not None else None
    sha256 = response.headers.get("X-Linked-Etag", redirects.linked_etag)
    h = receive(response, partial, have, size, url)
  if size is not None and (got := partial.stat().st_size) != size:  # the connection closed early
    raise LoadError(f"The download of {url} was cut short ({got:,} of {size:,} bytes); "
                    "run the command again to resume it.")
  if sha256 and h.hexdigest() != (want := sha256.strip('"').removeprefix("W/").strip('"')):
    partial.unlink()  # a wrong byte could be anywhere, so nothing of it is worth resuming
    raise LoadError(f"The download of {url} is corrupt (sha256 {h.hexdigest()}, the server announced "
                    f"{want}); run the command again to retry.")
  os.replace(partial, dest)

def receive(response: http.client.HTTPResponse, partial: pathlib.Path, have: int, size: int | None,
            url: str) -> hashlib._Hash:
  """Write the response's bytes to the partial file, after its first `have` bytes (from scratch when have is
  0), with a progress bar; return the sha256 of the whole file so far."""
  h = hash_file(partial) if have else hashlib.sha256()  # the sha256 covers the resumed part too
  name = f"{partial.parent.name}/{partial.name.removesuffix('.incomplete')}"
  bar = tqdm(total=size, unit="B", unit_scale=True, desc=name, disable=None)
  bar.update(have)  # the progress bar starts from the bytes already on disk
  # Unbuffered, and read1 returns whatever has arrived: every byte received is on disk at once, so even a
  # killed process leaves all it got for the next attempt.
  with open(partial, "ab" if have else "wb", buffering=0) as f, bar:
    while True:
      try:
        chunk = response.read1(CHUNK)
      except (OSError, http.client.HTTPException) as e:  # the partial file stays for the next attempt
        raise LoadError(f"The download of {url} was cut short ({type(e).__name__} after "
                        f"{f.tell():,} bytes); run the command again to resume it.") from None
      if not chunk:
        return h
      h.update(chunk)
      bar.update(f.write(chunk))

def hash_file(path: pathlib.Path) -> hashlib._Hash:
  """The running sha256 of a file's bytes, to continue with the bytes still to come."""
  h = hashlib.sha256()
  with open(path, "rb") as f:
    while chunk := f.read(CHUNK):
      h.update(chunk)
  return h

@contextlib.contextmanager
def download_lock(name: str) -> Iterator[None]:
  """Hold an exclusive lock on cache_dir()/<name>.lock, an empty file (fcntl.flock: Linux and macOS).

  A process that finds the lock taken says so and waits. The lock file stays: deleting it while another
  process waits on it would let a third process take a second lock on a new file of the same name.
  Windows has no fcntl, and there nothing is locked: two processes that download the same model at once
  then both write its partial file, and one of them may end with an error (a wrong sha256, a file in use);
  run it again.
  """
  try:
    import fcntl
  except ImportError:  # Windows
    yield
    return
  try:
    cache_dir().mkdir(parents=True, exist_ok=True)
    lock = open(cache_dir() / f"{name}.lock", "w")
  except OSError as e:
    raise LoadError(f"Could not write to {cache_dir()} ({e.strerror or type(e).__name__}): point "
                    "XDG_CACHE_HOME at a folder you can write to.") from None
  with lock as f:  # closing the file releases the lock
    try:
      fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      print(f"Waiting for another process that is downloading {name} into {cache_dir()}...", file=sys.stderr)
      fcntl.flock(f, fcntl.LOCK_EX)
    yield
