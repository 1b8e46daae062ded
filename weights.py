"""Get OpenAI's GPT-2 checkpoints (Hugging Face safetensors) and tokenizer (tiktoken), cache them, load them into gpt2.py.

    model = load_model("gpt2")          # downloads openai-community/gpt2 once, then loads from the cache
    model = load_model("path/to/dir")   # a folder in Hugging Face layout: config.json + model.safetensors
    enc = load_tokenizer()              # tiktoken's gpt2 encoding

Downloads come from $HF_ENDPOINT (default https://huggingface.co) into $XDG_CACHE_HOME/tinyspec (default ~/.cache/tinyspec).
"""
from __future__ import annotations
import hashlib, json, os, pathlib, tempfile, urllib.error, urllib.request
import tiktoken
from tinygrad import Tensor, dtypes
from tinygrad.dtype import DType
from tinygrad.helpers import tqdm
from tinygrad.nn.state import get_parameters, get_state_dict, load_state_dict, safe_load, safe_save
from gpt2 import GPT2, GPT2Config, PRESETS

FILES = ("config.json", "model.safetensors")
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")  # stored (in, out)
# tiktoken's gpt2 encoding: where it downloads its two files from, and their sha256
TOKENIZER_URL = "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/"
TOKENIZER_SHA256 = {"vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
                    "encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"}

class LoadError(Exception):
  """A model or tokenizer could not be had; the message is one sentence that says what to do."""

def cache_dir() -> pathlib.Path:
  return pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache") / "tinyspec"

class _HubRedirects(urllib.request.HTTPRedirectHandler):
  """Follows the Hub's redirect to its file storage, keeping the X-Linked-Etag (an LFS file's sha256) it announced."""
  linked_etag: str | None = None
  def redirect_request(self, req, fp, code, msg, headers, newurl):
    self.linked_etag = headers.get("X-Linked-Etag", self.linked_etag)
    return super().redirect_request(req, fp, code, msg, headers, newurl)

def download(url: str, dest: pathlib.Path) -> None:
  """Download url to dest with a progress bar; check its size and announced sha256, then move it in place atomically."""
  redirects = _HubRedirects()
  try:
    with urllib.request.build_opener(redirects).open(url, timeout=30) as r:
      size, sha256 = int(r.headers.get("Content-Length", 0)), r.headers.get("X-Linked-Etag", redirects.linked_etag)
      dest.parent.mkdir(parents=True, exist_ok=True)
      h, bar = hashlib.sha256(), tqdm(total=size, unit="B", unit_scale=True, desc=f"{dest.parent.name}/{dest.name}", disable=None)
      with tempfile.NamedTemporaryFile(dir=dest.parent, prefix=f".{dest.name}.", delete=False) as f:
        try:
          while chunk := r.read(1 << 20): h.update(chunk); bar.update(f.write(chunk))
          f.close()
          if size and (got := os.path.getsize(f.name)) != size:
            raise LoadError(f"The download of {url} was cut short ({got} of {size} bytes); run the command again to retry.")
          if sha256 and h.hexdigest() != (want := sha256.strip('"').removeprefix("W/").strip('"')):
            raise LoadError(f"The download of {url} is corrupt (sha256 {h.hexdigest()}, the server announced {want}); run the command again to retry.")
          os.replace(f.name, dest)
          bar.update(close=True)
        finally:
          if os.path.exists(f.name): os.unlink(f.name)  # a failed download leaves nothing behind
  except urllib.error.HTTPError as e:
    raise LoadError(f"The server answered {e.code} {e.reason} for {url}; check the model name and HF_ENDPOINT.") from None
  except (urllib.error.URLError, OSError) as e:
    raise LoadError(f"Could not download {url} ({getattr(e, 'reason', e)}): with no network, put config.json and model.safetensors "
                    f"from huggingface.co/openai-community/<name> in a folder and pass that folder instead of the name.") from None

def checkpoint_dir(name_or_dir: str) -> pathlib.Path:
  """A local checkpoint folder as it is, or a preset name's cache folder, downloading what it lacks."""
  if os.path.isdir(name_or_dir):
    folder = pathlib.Path(name_or_dir)
    if missing := [f for f in FILES if not (folder / f).is_file()]:
      raise LoadError(f"{folder} is not a GPT-2 checkpoint folder: it has no {' or '.join(missing)}.")
    return folder
  if name_or_dir not in PRESETS:
    raise LoadError(f"Unknown model '{name_or_dir}': use one of {', '.join(PRESETS)}, or a folder holding {' and '.join(FILES)}.")
  folder, endpoint = cache_dir() / name_or_dir, os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
  for f in FILES:
    if not (folder / f).is_file(): download(f"{endpoint}/openai-community/{name_or_dir}/resolve/main/{f}", folder / f)
  return folder

def read_config(folder: pathlib.Path) -> GPT2Config:
  """The model shape from a Hugging Face config.json."""
  try:
    c = json.loads((folder / "config.json").read_text())
    if c.get("activation_function", "gelu_new") != "gelu_new": raise LoadError(f"{folder} uses {c['activation_function']}, not GPT-2's gelu_new.")
    cfg = GPT2Config(n_layer=c["n_layer"], n_head=c["n_head"], n_embd=c["n_embd"], vocab_size=c["vocab_size"],
                     n_ctx=c["n_positions"], norm_eps=c.get("layer_norm_epsilon", 1e-5))
    return cfg
  except (ValueError, KeyError, TypeError, AttributeError) as e:  # AttributeError: JSON that is not an object
    raise LoadError(f"{folder / 'config.json'} is not a GPT-2 config ({type(e).__name__}: {e}); fetch it again.") from None

def hf_to_tinyspec(state: dict[str, Tensor], dtype: DType) -> dict[str, Tensor]:
  """Rename Hugging Face GPT-2 tensors to gpt2.py's names, transposing the Conv1D weights to (out, in)."""
  out = {}
  for k, v in state.items():
    k = k.removeprefix("transformer.")
    if k == "lm_head.weight" or k.endswith((".attn.bias", ".attn.masked_bias")): continue  # tied to wte; causal-mask buffers
    v = v.to(None)
    out[k] = (v.T if k.endswith(CONV1D) else v).cast(dtype).contiguous()
  return out

def load_model(name_or_dir: str, dtype: DType = dtypes.float32) -> GPT2:
  """A GPT-2 with real weights: a preset name (gpt2, gpt2-medium, gpt2-large, gpt2-xl) or a Hugging Face checkpoint folder.

  dtype float16 halves memory and bandwidth; the logits come back as float32 either way.
  """
  folder = checkpoint_dir(name_or_dir)
  model = GPT2(read_config(folder))
  try: state = hf_to_tinyspec(safe_load(folder / "model.safetensors"), dtype)
  except Exception as e: raise LoadError(f"Cannot read {folder / 'model.safetensors'} ({type(e).__name__}); delete it and fetch it again.") from None
  expected = {k: v.shape for k, v in get_state_dict(model).items()}
  for k in expected.keys() | state.keys():
    if k not in state or k not in expected or state[k].shape != expected[k]:
      raise LoadError(f"{folder} does not match its config.json: tensor {k} is {state[k].shape if k in state else 'missing'}, "
                      f"the config needs {expected.get(k, 'no such tensor')}.")
  load_state_dict(model, state, verbose=False)
  return model

def save_model(model: GPT2, folder: str | pathlib.Path) -> pathlib.Path:
  """Write a model as a Hugging Face checkpoint (config.json, model.safetensors in float32): load_model's inverse."""
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
  """GPT-2's tokenizer: tiktoken's gpt2 encoding (cached under TIKTOKEN_CACHE_DIR), or built from a folder with its two files."""
  try:
    if folder is None: return tiktoken.get_encoding("gpt2")
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks
    from tiktoken_ext.openai_public import r50k_pat_str
    ranks = data_gym_to_mergeable_bpe_ranks(vocab_bpe_file=os.path.join(folder, "vocab.bpe"), encoder_json_file=os.path.join(folder, "encoder.json"),
                                            vocab_bpe_hash=TOKENIZER_SHA256["vocab.bpe"], encoder_json_hash=TOKENIZER_SHA256["encoder.json"])
    return tiktoken.Encoding(name="gpt2", pat_str=r50k_pat_str, mergeable_ranks=ranks, special_tokens={"<|endoftext|>": 50256}, explicit_n_vocab=50257)
  except Exception as e:
    where = f"the folder {folder}" if folder else "tiktoken's download"
    raise LoadError(f"Could not load the GPT-2 tokenizer from {where} ({type(e).__name__}): put encoder.json and vocab.bpe from "
                    f"{TOKENIZER_URL} in a folder and pass it (--tokenizer DIR, or load_tokenizer(DIR)).") from None

def random_model(shape: str, dtype: DType = dtypes.float32, seed: int = 0) -> GPT2:
  """A GPT-2 with random weights (the same for the same seed): a preset's shape (gpt2, ..., gpt2-xl) or
  "n_layer,n_head,n_embd" with GPT-2's vocabulary and context. Real costs, no download, meaningless text."""
  if shape in PRESETS:
    cfg = PRESETS[shape]
  else:
    try:
      n_layer, n_head, n_embd = (int(s) for s in shape.split(","))
    except ValueError:
      raise ValueError(f"'{shape}' is neither a preset ({', '.join(PRESETS)}) nor a shape n_layer,n_head,n_embd "
                       "such as 2,4,256.") from None
    cfg = GPT2Config(n_layer=n_layer, n_head=n_head, n_embd=n_embd)
  Tensor.manual_seed(seed)
  model = GPT2(cfg)
  for p in get_parameters(model):
    p.replace(p.cast(dtype))
  Tensor.realize(*get_parameters(model))  # compute the random init once; left lazy, every call would redo it
  return model
