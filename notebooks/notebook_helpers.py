"""What the notebooks share: the models they run on, GPT-2's tokenizer, the coloured trace, and plot defaults.

The saved outputs come from tiny random-weight stand-ins with GPT-2's full vocabulary (so real prompts
tokenize and decode), written as Hugging Face checkpoints by tests/tiny.py and loaded with weights.py.
A draft is the target's checkpoint with the same seed and a slightly smaller weight scale: the same
network, a little flatter, so it agrees with the target often, as a good draft does.
"""
from __future__ import annotations
import codecs, html, pathlib, sys, tempfile
import matplotlib.pyplot as plt

REPO = pathlib.Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path: sys.path.insert(0, str(REPO))
if str(REPO / "tests") not in sys.path: sys.path.append(str(REPO / "tests"))
from tiny import TOKENIZER_DIR, write_checkpoint  # noqa: E402
from gpt2 import GPT2  # noqa: E402
from speculative import EOT  # noqa: E402
from weights import load_model, load_tokenizer  # noqa: E402

TINY_SHAPE = dict(n_layer=2, n_head=2, n_embd=32, vocab_size=50257, n_ctx=256)  # GPT-2's vocabulary, a toy body
TARGET_STD = 0.5  # the tiny target's weight scale (tests/tiny.py's default); drafts use a little less

plt.rcParams.update({"figure.dpi": 72, "figure.figsize": (8, 3.4), "axes.grid": True, "grid.alpha": 0.3,
                     "axes.spines.top": False, "axes.spines.right": False, "font.size": 10})

def tiny_model(std: float = TARGET_STD, seed: int = 0) -> GPT2:
  """A tiny random GPT-2: written as a Hub-layout checkpoint to a temporary folder, then loaded like a real one."""
  with tempfile.TemporaryDirectory() as folder:
    return load_model(str(write_checkpoint(folder, **TINY_SHAPE, seed=seed, std=std)))

def load_models(models: str, draft_stds: tuple[float, ...] = (0.47,)) -> tuple[GPT2, dict[str, GPT2]]:
  """The target q and named drafts p. models "gpt2": GPT-2 1.5B and GPT-2 124M (downloaded once, about 7 GB in all).
  models "tiny": the tiny target and one tiny draft per weight scale in draft_stds (closer to TARGET_STD = more agreement)."""
  if models == "gpt2": return load_model("gpt2-xl"), {"GPT-2 124M": load_model("gpt2")}
  if models != "tiny": raise ValueError(f'MODELS is {models!r}: use "tiny" or "gpt2".')
  return tiny_model(), {f"tiny draft, weight scale {s}": tiny_model(s) for s in draft_stds}

def acceptance_rate(origins: list[str]) -> float:
  """α̂ = accepted / judged drafts. A loop judges drafts until the first rejection; the drafts after it were never judged, so they do not count."""
  accepted, rejected = origins.count("accepted"), origins.count("resampled")
  return accepted / max(accepted + rejected, 1)

def tokenizer():
  """GPT-2's tokenizer: from ../shared/gpt2-tokenizer if that folder is there (no network needed), else tiktoken's own."""
  return load_tokenizer(str(TOKENIZER_DIR)) if TOKENIZER_DIR.is_dir() else load_tokenizer()

def token_text(enc, token: int) -> str:
  """One token as text; a token that is only part of a UTF-8 character shows as its bytes."""
  if token == EOT: return "<|endoftext|>"
  b = enc.decode_single_token_bytes(token)
  try: return b.decode("utf-8")
  except UnicodeDecodeError: return repr(b)[2:-1]

# the CLI's --trace colours (speculative.COLOURS, ANSI), as backgrounds that read on a white page
HTML_COLOURS = {"accepted": "#b6e3b6", "resampled": "#ffe08a", "bonus": "#e9b8f0"}

class Trace:
  """The prompt and the generated tokens, coloured by where each came from; shows as HTML in a notebook, as text elsewhere."""
  def __init__(self, enc, prompt: str, tokens: list[int], origins: list[str]):
    self.enc, self.prompt, self.tokens, self.origins = enc, prompt, tokens, origins

  def _pieces(self) -> list[tuple[str, str]]:
    utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")  # whole characters only, as speculative.printer does
    return [("" if t == EOT else utf8.decode(self.enc.decode_single_token_bytes(t)), o) for t, o in zip(self.tokens, self.origins)]

  def _repr_html_(self) -> str:
    legend = " ".join(f'<span style="background:{c}">&nbsp;{o}&nbsp;</span>' for o, c in HTML_COLOURS.items())
    spans = "".join(f'<span style="background:{HTML_COLOURS.get(o, "none")}">{html.escape(text)}</span>' for text, o in self._pieces())
    return (f'<div style="font-family:monospace;white-space:pre-wrap;line-height:1.6"><b>{html.escape(self.prompt)}</b>{spans}</div>'
            f'<div style="font-size:smaller">{legend}</div>')

  def __repr__(self) -> str:  # plain-text fallback: [accepted] (resampled) {bonus}
    marks = {"accepted": "[]", "resampled": "()", "bonus": "{}"}
    return self.prompt + "".join(f"{marks[o][0]}{text}{marks[o][1]}" if o in marks else text for text, o in self._pieces())
