"""Get OpenAI's GPT-2 checkpoints (Hugging Face safetensors) and tokenizer (tiktoken), cache them, load them
into gpt2.py.

    model = load_model("gpt2")          # downloads openai-community/gpt2 once, then loads from the cache
    model = load_model("path/to/dir")   # a folder in Hugging Face layout: config.json + model.safetensors
    enc = load_tokenizer()              # tiktoken's gpt2 encoding

Downloads come from $HF_ENDPOINT (default https://huggingface.co) into $XDG_CACHE_HOME/tinyspec
(default ~/.cache/tinyspec).
"""
from __future__ import annotations
import contextlib, hashlib, http.client, json, os, pathlib, urllib.error, urllib.request
from typing import Iterator
import tiktoken
from tinygrad import Tensor, dtypes
from tinygrad.dtype import DType
from tinygrad.helpers import tqdm
from tinygrad.nn.state import get_parameters, get_state_dict, load_state_dict, safe_load, safe_save
from gpt2 import GPT2, GPT2Config, PRESETS

FILES = ("config.json", "model.safetensors")
# stored (in, out)
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
# tiktoken's gpt2 encoding: where it downloads its two files from, and their sha256
TOKENIZER_URL = "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/"
TOKENIZER_SHA256 = {"vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
                    "encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"}

class LoadError(Exception):
  """A model or tokenizer could not be had; the message is one sentence that says what to do."""

def cache_dir() -> pathlib.Path:
  return pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache") / "tinyspec"

class _HubRedirects(urllib.request.HTTPRedirectHandler):
  """Follows the Hub's redirect to its file storage, keeping the X-Linked-Etag (an LFS file's sha256) it
  announced."""
  linked_etag: str | None = None
  def redirect_request(self, req, fp, code, msg, headers, newurl):
    self.linked_etag = headers.get("X-Linked-Etag", self.linked_etag)
    return super().redirect_request(req, fp, code, msg, headers, newurl)

def download(url: str, dest: pathlib.Path) -> None:
  """Download url to dest with a progress bar, resuming an interrupted download; check its size and announced
  sha256.

  The bytes go to dest + ".incomplete" first, renamed to dest only once whole and verified, so nothing
  half-written is ever loaded. An interrupted download (a cut connection, a killed process) keeps that partial
  file, and the next attempt continues from its end with an HTTP Range request; a wrong sha256 deletes it.
  """
  try:
    fetch(url, dest)
  except urllib.error.HTTPError as e:
    raise LoadError(f"The server answered {e.code} {e.reason} for {url}; "
                    "check the model name and HF_ENDPOINT.") from None
  except (urllib.error.URLError, OSError, http.client.HTTPException) as e:
    raise LoadError(f"Could not download {url} ({getattr(e, 'reason', e) or type(e).__name__}): "
                    "with no network, put "
                    "config.json and model.safetensors from huggingface.co/openai-community/<name> "
                    "in a folder and "
                    "pass that folder instead of the name.") from None

@contextlib.contextmanager
def folder_lock(folder: pathlib.Path) -> Iterator[None]:
  """Hold an exclusive lock on a folder (fcntl.flock on the folder itself, so no lock file is left behind).

  Linux and macOS have fcntl. Windows does not, and there nothing is locked: two processes that download the
  same model at once may then both write its partial file, and one of them ends with a sha256 error; run it
  again.
  """
  try:
    import fcntl
  except ImportError:
    yield
    return
  fd = os.open(folder, os.O_RDONLY)
  try:
    fcntl.flock(fd, fcntl.LOCK_EX)
    yield
  finally:
    os.close(fd)  # closing the descriptor releases the lock

def fetch(url: str, dest: pathlib.Path) -> None:
  """One attempt at download(): resume dest's partial file, append the rest, verify, and move it in place."""
  partial = dest.with_name(dest.name + ".incomplete")
  have = partial.stat().st_size if partial.is_file() else 0
  # urllib carries the Range header through the Hub's redirect to its file storage
  redirects = _HubRedirects()
  request = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
  try:
    response = urllib.request.build_opener(redirects).open(request, timeout=30)
  except urllib.error.HTTPError as e:
    if e.code != 416 or not have:
      raise
    # 416: the partial file is not a prefix of this file (it is as long or longer): start over
    partial.unlink()
    return fetch(url, dest)
  dest.parent.mkdir(parents=True, exist_ok=True)
  with response:
    if response.status != 206:
      have = 0  # the server ignored the Range and sends the whole file: start over
    size = have + int(response.headers.get("Content-Length", 0))
    sha256 = response.headers.get("X-Linked-Etag", redirects.linked_etag)
    # the sha256 covers the whole file, resumed part included
    h = hash_file(partial) if have else hashlib.sha256()
    bar = tqdm(total=size, unit="B", unit_scale=True, desc=f"{dest.parent.name}/{dest.name}", disable=None)
    bar.update(have)  # the progress bar starts from the bytes already on disk
    with open(partial, "ab" if have else "wb") as f:
      while chunk := response.read(1 << 20):
        h.update(chunk)
        bar.update(f.write(chunk))
  if size and (got := partial.stat().st_size) != size:  # the partial file stays for the next attempt
    raise LoadError(f"The download of {url} was cut short ({got} of {size} bytes); "
                    "run the command again to resume it.")
  if sha256 and h.hexdigest() != (want := sha256.strip('"').removeprefix("W/").strip('"')):
    partial.unlink()
    raise LoadError(f"The download of {url} is corrupt "
                    f"(sha256 {h.hexdigest()}, the server announced {want}); "
                    "run the command again to retry.")
  os.replace(partial, dest)
  bar.update(close=True)

def hash_file(path: pathlib.Path) -> hashlib._Hash:
  """The running sha256 of a file's bytes, to continue with the bytes still to come."""
  h = hashlib.sha256()
  with open(path, "rb") as f:
    while chunk := f.read(1 << 20):
      h.update(chunk)
  return h

def checkpoint_dir(name_or_dir: str) -> pathlib.Path:
  """A local checkpoint folder as it is, or a preset name's cache folder, downloading what it lacks."""
  if os.path.isdir(name_or_dir):
    folder = pathlib.Path(name_or_dir)
    if missing := [f for f in FILES if not (folder / f).is_file()]:
      raise LoadError(f"{folder} is not a GPT-2 checkpoint folder: it has no {' or '.join(missing)}.")
    return folder
  if name_or_dir not in PRESETS:
    if os.sep in name_or_dir or "/" in name_or_dir or name_or_dir.startswith((".", "~")):
      raise LoadError(f"The folder {name_or_dir} does not exist: give the path of a folder holding "
                      f"{' and '.join(FILES)}, or a model name ({', '.join(PRESETS)}).")
    raise LoadError(f"Unknown model '{name_or_dir}': use one of {', '.join(PRESETS)}, "
                    f"or a folder holding {' and '.join(FILES)}.")
  folder = cache_dir() / name_or_dir
  endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
  cache_dir().mkdir(parents=True, exist_ok=True)
  # two processes loading at once take turns: the second finds the files complete
  with folder_lock(cache_dir()):
    for f in FILES:
      if not (folder / f).is_file():
        download(f"{endpoint}/openai-community/{name_or_dir}/resolve/main/{f}", folder / f)
  return folder

def read_config(folder: pathlib.Path) -> GPT2Config:
  """The model shape from a Hugging Face config.json."""
  try:
    c = json.loads((folder / "config.json").read_text())
    if c.get("activation_function", "gelu_new") != "gelu_new":
      raise LoadError(f"{folder} uses {c['activation_function']}, not GPT-2's gelu_new.")
    cfg = GPT2Config(n_layer=c["n_layer"], n_head=c["n_head"], n_embd=c["n_embd"], vocab_size=c["vocab_size"],
                     n_ctx=c["n_positions"], norm_eps=c.get("layer_norm_epsilon", 1e-5))
    return cfg
  except (ValueError, KeyError, TypeError, AttributeError) as e:  # AttributeError: JSON that is not an object
    raise LoadError(f"{folder / 'config.json'} is not a GPT-2 config ({type(e).__name__}: {e}); "
                    "fetch it again.") from None

def hf_to_tinyspec(state: dict[str, Tensor], dtype: DType) -> dict[str, Tensor]:
  """Rename Hugging Face GPT-2 tensors to gpt2.py's names, transposing the Conv1D weights to (out, in)."""
  out = {}
  for k, v in state.items():
    k = k.removeprefix("transformer.")
    if k == "lm_head.weight" or k.endswith((".attn.bias", ".attn.masked_bias")):
      continue  # tied to wte; causal-mask buffers
    v = v.to(None)
    out[k] = (v.T if k.endswith(CONV1D) else v).cast(dtype).contiguous()
  return out

def load_model(name_or_dir: str, dtype: DType = dtypes.float32) -> GPT2:
  """A GPT-2 with real weights: a preset name (gpt2, gpt2-medium, gpt2-large, gpt2-xl) or a Hugging Face
  checkpoint folder.

  dtype float16 halves memory and bandwidth; the logits come back as float32 either way.
  """
  folder = checkpoint_dir(name_or_dir)
  model = GPT2(read_config(folder))
  path = folder / "model.safetensors"
  check_safetensors(path)
  try:
    state = hf_to_tinyspec(safe_load(path), dtype)
  except Exception as e:
    raise LoadError(f"Cannot read {path} ({type(e).__name__}); delete it and fetch it again.") from None
  expected = {k: v.shape for k, v in get_state_dict(model).items()}
  for k in expected.keys() | state.keys():
    if k not in state or k not in expected or state[k].shape != expected[k]:
      raise LoadError(f"{folder} does not match its config.json: tensor {k} is "
                      f"{state[k].shape if k in state else 'missing'}, "
                      f"the config needs {expected.get(k, 'no such tensor')}.")
  load_state_dict(model, state, verbose=False)
  return model

def check_safetensors(path: pathlib.Path) -> None:
  """Refuse a file that is not a whole safetensors file, saying what is wrong: its size against the size its
  header promises (8 bytes of header length, a JSON header, then the data up to the largest data offset)."""
  size = path.stat().st_size
  with open(path, "rb") as f:
    n = int.from_bytes(f.read(8), "little")
    try:
      header = json.loads(f.read(n)) if 8 <= 8 + n <= size else None
      promised = 8 + n + max(v["data_offsets"][1] for k, v in header.items() if k != "__metadata__")
    except (ValueError, TypeError, KeyError, AttributeError):
      promised = None
  if promised is None:
    raise LoadError(f"Cannot read {path}: its {size:,} bytes hold no safetensors header "
                    "(the file is cut short or "
                    "is not a checkpoint); delete it and fetch it again.")
  if promised != size:
    raise LoadError(f"Cannot read {path}: it is {size:,} bytes "
                    f"but its header promises {promised:,}, so it is "
                    f"{'cut short' if size < promised else 'damaged'}; delete it and fetch it again.")

def save_model(model: GPT2, folder: str | pathlib.Path) -> pathlib.Path:
  """Write a model as a Hugging Face checkpoint (config.json, model.safetensors in float32): load_model's
  inverse."""
  cfg, folder = model.config, pathlib.Path(folder)
  folder.mkdir(parents=True, exist_ok=True)
  config = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "activation_function": "gelu_new",
            "n_layer": cfg.n_layer, "n_head": cfg.n_head, "n_embd": cfg.n_embd, "vocab_size": cfg.vocab_size,
            "n_positions": cfg.n_ctx, "n_ctx": cfg.n_ctx, "layer_norm_epsilon": cfg.norm_eps}
  (folder / "config.json").write_text(json.dumps(config, indent=2))
  state = {k: (v.T if k.endswith(CONV1D) else v).float().contiguous()  # back to Conv1D's (in, out)
           for k, v in get_state_dict(model).items() if not k.endswith("cache_kv")}
  safe_save(state, str(folder / "model.safetensors"))
  return folder

def load_tokenizer(folder: str | None = None) -> tiktoken.Encoding:
  """GPT-2's tokenizer: tiktoken's gpt2 encoding (cached under TIKTOKEN_CACHE_DIR), or built from a folder
  with its two files."""
  try:
    if folder is None:
      return tiktoken.get_encoding("gpt2")
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks
    from tiktoken_ext.openai_public import r50k_pat_str
    ranks = data_gym_to_mergeable_bpe_ranks(vocab_bpe_file=os.path.join(folder, "vocab.bpe"),
                                            encoder_json_file=os.path.join(folder, "encoder.json"),
                                            vocab_bpe_hash=TOKENIZER_SHA256["vocab.bpe"],
                                            encoder_json_hash=TOKENIZER_SHA256["encoder.json"])
    return tiktoken.Encoding(name="gpt2", pat_str=r50k_pat_str, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": 50256}, explicit_n_vocab=50257)
  except Exception as e:
    where = f"the folder {folder}" if folder else "tiktoken's download"
    raise LoadError(f"Could not load the GPT-2 tokenizer from {where} ({type(e).__name__}): "
                    "put encoder.json and vocab.bpe from "
                    f"{TOKENIZER_URL} in a folder and pass it "
                    "(--tokenizer DIR, or load_tokenizer(DIR)).") from None

def random_model(shape: str, dtype: DType = dtypes.float32, seed: int = 0) -> GPT2:
  """A GPT-2 with random weights (the same for the same seed): a preset's shape (gpt2, ..., gpt2-xl) or
  "n_layer,n_head,n_embd" with GPT-2's vocabulary and context. Real costs, no download, meaningless text."""
  if shape in PRESETS:
    cfg = PRESETS[shape]
  else:
    try:
      n_layer, n_head, n_embd = (int(s) for s in shape.split(","))
    except ValueError:
      raise ValueError(f"'{shape}' is neither a preset ({', '.join(PRESETS)}) "
                       "nor a shape n_layer,n_head,n_embd "
                       "such as 2,4,256.") from None
    cfg = GPT2Config(n_layer=n_layer, n_head=n_head, n_embd=n_embd)
  Tensor.manual_seed(seed)
  model = GPT2(cfg)
  for p in get_parameters(model):
    p.replace(p.cast(dtype))
  Tensor.realize(*get_parameters(model))  # compute the random init once; left lazy, every call would redo it
  return model
