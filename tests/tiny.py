"""Tiny random-weight GPT-2 checkpoints, written in the Hugging Face Hub's exact layout, for tests that need a
model."""
from __future__ import annotations
import json, os, pathlib, subprocess, sys
import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
# GPT-2's BPE files, shipped beside the demo pair
TOKENIZER_DIR = REPO / "demo"

def hub_tensors(n_layer: int, n_head: int, n_embd: int, vocab_size: int, n_ctx: int, seed: int,
                std: float) -> dict[str, np.ndarray]:
  """openai-community/gpt2's tensor names, shapes and dtype (float32, Conv1D weights stored (in, out)), random
  values."""
  rng, C = np.random.default_rng(seed), n_embd
  shapes = {"wte.weight": (vocab_size, C), "wpe.weight": (n_ctx, C), "ln_f.weight": (C,), "ln_f.bias": (C,)}
  for i in range(n_layer):
    shapes |= {f"h.{i}.ln_1.weight": (C,), f"h.{i}.ln_1.bias": (C,),
               f"h.{i}.ln_2.weight": (C,), f"h.{i}.ln_2.bias": (C,),
               f"h.{i}.attn.c_attn.weight": (C, 3 * C), f"h.{i}.attn.c_attn.bias": (3 * C,),
               f"h.{i}.attn.c_proj.weight": (C, C), f"h.{i}.attn.c_proj.bias": (C,),
               f"h.{i}.mlp.c_fc.weight": (C, 4 * C), f"h.{i}.mlp.c_fc.bias": (4 * C,),
               f"h.{i}.mlp.c_proj.weight": (4 * C, C), f"h.{i}.mlp.c_proj.bias": (C,)}
  tensors = {k: (rng.normal(0, std, s) + (k.split(".")[-2].startswith("ln") and k.endswith("weight")))
                .astype(np.float32) for k, s in shapes.items()}
  for i in range(n_layer):
    # the Hub's causal-mask buffer
    tensors[f"h.{i}.attn.bias"] = np.tril(np.ones((n_ctx, n_ctx), np.float32))[None, None]
  return tensors

def run_script(script: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
  """Run one of the repo's commands as a user would, from the repository's root, in a fresh Python on the CPU
  unless DEV says otherwise: a file at the root (speculative.py) by its path, a tool by its module (tools.bench,
  as `python -m tools.bench`)."""
  command = [str(REPO / script)] if script.endswith(".py") else ["-m", script]
  return subprocess.run([sys.executable, *command, *args], capture_output=True, text=True, cwd=REPO,
                        env={**os.environ, "DEV": os.environ.get("DEV", "CPU"), **(env or {})}, timeout=600)

def write_checkpoint(folder: str | pathlib.Path, *, n_layer: int = 2, n_head: int = 2, n_embd: int = 32,
                     vocab_size: int = 64, n_ctx: int = 128, seed: int = 0, std: float = 0.5,
                     noise: float = 0.0) -> pathlib.Path:
  """Write config.json and model.safetensors for a random GPT-2 of the given shape; return the folder. noise: add
  normal noise of this std to every weight (seeded by seed + 1): a draft that agrees with the seed's model in part,
  as a real draft agrees with its target."""
  folder = pathlib.Path(folder)
  folder.mkdir(parents=True, exist_ok=True)
  config = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "activation_function": "gelu_new",
            "layer_norm_epsilon": 1e-5, "n_layer": n_layer, "n_head": n_head, "n_embd": n_embd,
            "vocab_size": vocab_size, "n_positions": n_ctx, "n_ctx": n_ctx}
  (folder / "config.json").write_text(json.dumps(config, indent=2))
  tensors, rng = hub_tensors(n_layer, n_head, n_embd, vocab_size, n_ctx, seed, std), np.random.default_rng(seed + 1)
  for k, a in tensors.items():
    if not k.endswith(".attn.bias"):  # the causal mask stays a mask
      tensors[k] = (a + noise * rng.normal(0, 1, a.shape)).astype(np.float32) if noise else a
  save_safetensors(tensors, folder / "model.safetensors")
  return folder

def save_safetensors(tensors: dict[str, np.ndarray], path: pathlib.Path) -> None:
  """The safetensors format by hand (8-byte header size, JSON header, raw little-endian data), as the Hub
  stores it.

  Written with NumPy alone, independent of the tinygrad code under test, and so usable on any DEV (no CPU
  compiler needed).
  """
  header, offset = {"__metadata__": {"format": "pt"}}, 0
  for name, a in tensors.items():
    header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
    offset += a.nbytes
  text = json.dumps(header, separators=(",", ":")).encode()
  text += b" " * (-len(text) % 8)  # the safetensors library pads the header to 8 bytes
  with open(path, "wb") as f:
    f.write(len(text).to_bytes(8, "little") + text)
    for a in tensors.values():
      f.write(np.ascontiguousarray(a, dtype="<f4").tobytes())

def small_docs(folder: pathlib.Path) -> pathlib.Path:
  """A folder of sources in Debian's layout: four files of sentences drawn (seed 0) from a small grammar, one of
  them (tutorial/modules) held out. Each sentence is a capitalised word and six more, so train.openings finds
  openings in them."""
  rng = np.random.default_rng(0)
  subjects, verbs = ["The module", "A function", "Every object", "The list"], ["returns", "holds", "takes", "names"]
  for name in ("library/os", "library/functions", "reference/datamodel", "tutorial/modules"):
    (folder / name).parent.mkdir(parents=True, exist_ok=True)
    text = " ".join(f"{subjects[i]} {verbs[j]} a value in turn." for i, j in rng.integers(0, 4, (300, 2)))
    (folder / f"{name}.rst.txt").write_text(f"{name}\n{'=' * len(name)}\n\n{text}\n")
  return folder
