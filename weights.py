"""Get OpenAI's GPT-2 checkpoints (Hugging Face safetensors) and tokenizer (tiktoken), cache them, load them
into gpt2.py, and save a model in the same layout.

    model = load_model("gpt2")          # downloads openai-community/gpt2 once, then loads from the cache
    model = load_model("demo-target")   # the demo pair in demo/: demo-target, demo-draft (no download)
    model = load_model("path/to/dir")   # a folder in Hugging Face layout: config.json + model.safetensors
    save_model(model, "path/to/dir")    # load_model's inverse
    enc = load_tokenizer()              # tiktoken's gpt2 encoding

Downloads come from $HF_ENDPOINT (default https://huggingface.co) into $XDG_CACHE_HOME/tinyspec
(default ~/.cache/tinyspec).
"""
from __future__ import annotations
import json, os, pathlib
import tiktoken
from tinygrad import Context, Tensor, dtypes
from tinygrad.dtype import DType
from tinygrad.nn.state import get_state_dict, load_state_dict, safe_load, safe_save
from gpt2 import GPT2, GPT2Config, PRESETS
from engine.download import LoadError, cache_dir, download, download_lock

FILES = ("config.json", "model.safetensors")
# Hugging Face's GPT-2 stores these as Conv1D weights, (in, out); tinygrad's Linear wants (out, in)
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
# tiktoken's gpt2 encoding: where it downloads its two files from, and their sha256
TOKENIZER_URL = "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/"
TOKENIZER_SHA256 = {"vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
                    "encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"}

# The demo pair that demo/train.py trained on Python's documentation, shipped in demo/ with GPT-2's two tokenizer
# files (byte for byte what tiktoken downloads): names that work from any working directory
REPO = pathlib.Path(__file__).resolve().parent
DEMO = {"demo-target": REPO / "demo" / "target", "demo-draft": REPO / "demo" / "draft"}
TOKENIZER_DIR = REPO / "demo"

def looks_like_path(name: str) -> bool:
  """Whether a model name is meant as a folder: it has a path separator or starts with . or ~."""
  return os.sep in name or "/" in name or name.startswith((".", "~"))

def checkpoint_dir(name_or_dir: str) -> pathlib.Path:
  """A model's folder: a demo model's in this repository, a preset's in the cache (downloading what it lacks),
  or a checkpoint folder as given. A name wins over a folder of that name in the working directory (./name is
  the folder)."""
  if name_or_dir in DEMO:
    return local_checkpoint(str(DEMO[name_or_dir]))
  if name_or_dir not in PRESETS:
    if looks_like_path(name_or_dir) or os.path.isdir(name_or_dir):
      return local_checkpoint(name_or_dir)
    raise LoadError(f"Unknown model '{name_or_dir}': use one of {', '.join([*PRESETS, *DEMO])}, "
                    f"or a folder holding {' and '.join(FILES)}.")
  folder = cache_dir() / name_or_dir
  if all((folder / f).is_file() for f in FILES):
    return folder  # complete: no lock, so a cached model loads even while another one downloads
  endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
  # Two processes loading at once take turns; the second then finds the files complete.
  with download_lock(name_or_dir):
    for f in FILES:
      if not (folder / f).is_file():
        # config.json is small and has no announced sha256: fetched whole each time, never resumed
        download(f"{endpoint}/openai-community/{name_or_dir}/resolve/main/{f}", folder / f,
                 resume=f != "config.json")
  return folder

def local_checkpoint(path: str) -> pathlib.Path:
  """A folder the user named, checked to exist and to hold a checkpoint's two files."""
  folder = pathlib.Path(path).expanduser()
  if not folder.is_dir():
    raise LoadError(f"The folder {path} does not exist: give the path of a folder holding "
                    f"{' and '.join(FILES)}, or a model name ({', '.join(PRESETS)}).")
  if missing := [f for f in FILES if not (folder / f).is_file()]:
    raise LoadError(f"{folder} is not a GPT-2 checkpoint folder: it has no {' or '.join(missing)}.")
  return folder

# --- verify and load ---

def read_config(folder: pathlib.Path) -> GPT2Config:
  """The model shape from a Hugging Face config.json."""
  try:
    c = json.loads((folder / "config.json").read_text())
    if c.get("activation_function", "gelu_new") != "gelu_new":
      raise LoadError(f"{folder} uses {c['activation_function']}, not GPT-2's gelu_new: "
                      "give a GPT-2 checkpoint.")
    return GPT2Config(n_layer=c["n_layer"], n_head=c["n_head"], n_embd=c["n_embd"],
                      vocab_size=c["vocab_size"], n_ctx=c["n_positions"],
                      norm_eps=c.get("layer_norm_epsilon", 1e-5))
  except (ValueError, KeyError, TypeError, AttributeError) as e:  # AttributeError: JSON that is not an object
    raise LoadError(f"{folder / 'config.json'} is not a GPT-2 config ({type(e).__name__}: {e}); "
                    "fetch it again.") from None

def check_safetensors(path: pathlib.Path) -> None:
  """Refuse a file that is not a whole safetensors file, saying what is wrong.

  A safetensors file is 8 bytes of header length (little-endian), a JSON header that gives each tensor's
  data_offsets, then the data: so its header promises its size, which a download cut short does not have.
  """
  size = path.stat().st_size
  with open(path, "rb") as f:
    n = int.from_bytes(f.read(8), "little")
    try:
      header = json.loads(f.read(n)) if 8 + n <= size else None
      promised = 8 + n + max(v["data_offsets"][1] for k, v in header.items() if k != "__metadata__")
    except (ValueError, TypeError, KeyError, AttributeError, IndexError):
      promised = None
  if promised is None:
    raise LoadError(f"Cannot read {path}: its {size:,} bytes hold no safetensors header (the file is cut "
                    "short or is not a checkpoint); delete it and fetch it again.")
  if promised != size:
    what = "cut short" if size < promised else "damaged"
    raise LoadError(f"Cannot read {path}: it is {size:,} bytes but its header promises {promised:,}, "
                    f"so it is {what}; delete it and fetch it again.")

def hf_to_tinyspec(state: dict[str, Tensor], dtype: DType) -> dict[str, Tensor]:
  """Rename Hugging Face GPT-2 tensors to gpt2.py's names, transposing the Conv1D weights to (out, in)."""
  out = {}
  for k, v in state.items():
    k = k.removeprefix("transformer.")
    if k == "lm_head.weight" or k.endswith((".attn.bias", ".attn.masked_bias")):
      continue  # the LM head is tied to wte; the others are causal-mask buffers, not weights
    v = v.to(None)
    out[k] = (v.T if k.endswith(CONV1D) else v).cast(dtype).contiguous()
  return out

def weights_of(model: GPT2) -> dict[str, Tensor]:
  """The model's weights by name (the Hub's names): not its KV caches, which are state, nor model.calls, whose
  compiled calls hold their results."""
  state = get_state_dict({"wte": model.wte, "wpe": model.wpe, "h": model.h, "ln_f": model.ln_f})
  return {k: v for k, v in state.items() if not k.endswith("cache_kv")}

def load_model(name_or_dir: str, dtype: DType = dtypes.float32) -> GPT2:
  """A GPT-2 with real weights: a preset name (gpt2, gpt2-medium, gpt2-large, gpt2-xl), a demo model
  (demo-target, demo-draft) or a Hugging Face checkpoint folder.

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
  expected = {k: v.shape for k, v in weights_of(model).items()}
  for k in expected.keys() | state.keys():
    if k not in state or k not in expected or state[k].shape != expected[k]:
      raise LoadError(f"{folder} does not match its config.json: tensor {k} is "
                      f"{state[k].shape if k in state else 'missing'}, "
                      f"the config needs {expected.get(k, 'no such tensor')}.")
  with Context(BEAM=0):  # only compiled calls may search kernels (engine/compiled.py), whatever BEAM says
    load_state_dict(model, state, verbose=False)
  return model

# --- save ---

def save_model(model: GPT2, folder: str | pathlib.Path, dtype: DType = dtypes.float32) -> pathlib.Path:
  """Write a model as a Hugging Face checkpoint (config.json, model.safetensors with its weights in dtype),
  which load_model reads back: load_model's inverse. Returns the folder."""
  folder = pathlib.Path(folder)
  folder.mkdir(parents=True, exist_ok=True)
  cfg = model.config
  config = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "activation_function": "gelu_new",
            "n_layer": cfg.n_layer, "n_head": cfg.n_head, "n_embd": cfg.n_embd, "vocab_size": cfg.vocab_size,
            "n_positions": cfg.n_ctx, "n_ctx": cfg.n_ctx, "layer_norm_epsilon": cfg.norm_eps}
  (folder / "config.json").write_text(json.dumps(config, indent=2))
  # the Conv1D weights go back to (in, out)
  state = {k: (v.T if k.endswith(CONV1D) else v).cast(dtype).contiguous() for k, v in weights_of(model).items()}
  with Context(BEAM=0):  # as in load_model
    safe_save(state, str(folder / "model.safetensors"))
  return folder

# --- the tokenizer, and random weights ---

def load_tokenizer(folder: str | pathlib.Path | None = None) -> tiktoken.Encoding:
  """GPT-2's tokenizer, built from encoder.json and vocab.bpe in folder (checked against tiktoken's sha256).
  By default the copies shipped in demo/ beside the demo pair, so no network is needed; without them,
  tiktoken's own download (cached under TIKTOKEN_CACHE_DIR)."""
  folder = folder or (TOKENIZER_DIR if (TOKENIZER_DIR / "vocab.bpe").is_file() else None)
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
    raise LoadError(f"Could not load the GPT-2 tokenizer from {where} ({type(e).__name__}): put encoder.json "
                    f"and vocab.bpe from {TOKENIZER_URL} in a folder and pass it (--tokenizer DIR, "
                    "or load_tokenizer(DIR)).") from None

def random_model(shape: str, dtype: DType = dtypes.float32, seed: int = 0) -> GPT2:
  """A GPT-2 with random weights (the same for the same seed): a preset's shape (gpt2, ..., gpt2-xl) or
  "n_layer,n_head,n_embd" with GPT-2's vocabulary and context. Real costs, no download, meaningless text."""
  if shape in PRESETS:
    cfg = PRESETS[shape]
  else:
    try:
      n_layer, n_head, n_embd = (int(s) for s in shape.split(","))
    except ValueError:
      raise ValueError(f"'{shape}' is neither a preset ({', '.join(PRESETS)}) nor a shape "
                       "n_layer,n_head,n_embd such as 2,4,256.") from None
    cfg = GPT2Config(n_layer=n_layer, n_head=n_head, n_embd=n_embd)
  Tensor.manual_seed(seed)
  model = GPT2(cfg)
  for p in weights_of(model).values():
    p.replace(p.cast(dtype))
  # compute the random init once; left lazy, every call would redo it
  with Context(BEAM=0):  # as in load_model
    Tensor.realize(*weights_of(model).values())
  return model
