"""What the notebooks share: the models they run on, GPT-2's tokenizer, the coloured trace, and plot defaults.

The saved outputs come from tiny random-weight stand-ins with GPT-2's full vocabulary, so that real prompts tokenize
and decode. A draft is the target's network drawn with the same seed at a slightly smaller weight scale: the same
network, a little flatter, so it agrees with the target often, as a good draft does.
"""
from __future__ import annotations
import codecs, html, pathlib, sys
import matplotlib.pyplot as plt

REPO = pathlib.Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
  sys.path.insert(0, str(REPO))
from tinygrad import Tensor  # noqa: E402
from tinygrad.nn.state import get_state_dict  # noqa: E402
from gpt2 import GPT2, GPT2Config  # noqa: E402
from speculative import EOT  # noqa: E402
from weights import load_model, load_tokenizer  # noqa: E402

TOKENIZER_DIR = REPO.parent / "shared" / "gpt2-tokenizer"  # GPT-2's BPE files beside the checkout, where present
TINY = GPT2Config(n_layer=2, n_head=2, n_embd=32, n_ctx=256)  # GPT-2's vocabulary, a toy body
TARGET_STD = 0.5  # the tiny target's weight scale; drafts use a little less

plt.rcParams.update({"figure.dpi": 72, "figure.figsize": (8, 3.4), "axes.grid": True, "grid.alpha": 0.3,
                     "axes.spines.top": False, "axes.spines.right": False, "font.size": 10})

def tiny_model(std: float = TARGET_STD, seed: int = 0) -> GPT2:
  """A tiny GPT-2 whose weights are drawn N(0, std²) (LayerNorm gains 1 + that) from seed: the same seed draws the
  same numbers, so a smaller std gives the same network with flatter distributions."""
  model = GPT2(TINY)
  Tensor.manual_seed(seed)
  for name, t in get_state_dict(model).items():
    gain = name.split(".")[-2].startswith("ln") and name.endswith("weight")
    t.replace((Tensor.randn(*t.shape) * std + gain).realize())
  return model

def load_models(models: str, draft_stds: tuple[float, ...] = (0.47,)) -> tuple[GPT2, dict[str, GPT2]]:
  """The target q and named drafts p. models "gpt2": GPT-2 1.5B and GPT-2 124M (downloaded once, about 7 GB).
  models "tiny": the tiny target and one tiny draft per weight scale in draft_stds (closer to TARGET_STD = more
  agreement)."""
  if models == "gpt2":
    return load_model("gpt2-xl"), {"GPT-2 124M": load_model("gpt2")}
  if models != "tiny":
    raise ValueError(f'MODELS is {models!r}: use "tiny" or "gpt2".')
  return tiny_model(), {f"tiny draft, weight scale {s}": tiny_model(s) for s in draft_stds}

def tokenizer():
  """GPT-2's tokenizer: from ../shared/gpt2-tokenizer if that folder is there (no network needed), else tiktoken's."""
  return load_tokenizer(str(TOKENIZER_DIR)) if TOKENIZER_DIR.is_dir() else load_tokenizer()

def token_text(enc, token: int) -> str:
  """One token as text; a token that is only part of a UTF-8 character shows as its bytes."""
  if token == EOT:
    return "<|endoftext|>"
  b = enc.decode_single_token_bytes(token)
  try:
    return b.decode("utf-8")
  except UnicodeDecodeError:
    return repr(b)[2:-1]

# the CLI's --trace colours (cli.COLOURS, ANSI), as backgrounds that read on a white page
HTML_COLOURS = {"accepted": "#b6e3b6", "resampled": "#ffe08a", "bonus": "#e9b8f0", "target": "#b8e6f0"}

class Trace:
  """The prompt and the generated tokens, coloured by where each came from; HTML in a notebook, text elsewhere."""
  def __init__(self, enc, prompt: str, tokens: list[int], origins: list[str]):
    self.enc, self.prompt, self.tokens, self.origins = enc, prompt, tokens, origins

  def _pieces(self) -> list[tuple[str, str]]:
    utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")  # whole characters only, as cli.printer does
    return [("" if t == EOT else utf8.decode(self.enc.decode_single_token_bytes(t)), o)
            for t, o in zip(self.tokens, self.origins)]

  def _repr_html_(self) -> str:
    legend = " ".join(f'<span style="background:{c}">&nbsp;{o}&nbsp;</span>' for o, c in HTML_COLOURS.items())
    spans = "".join(f'<span style="background:{HTML_COLOURS.get(o, "none")}">{html.escape(text)}</span>'
                    for text, o in self._pieces())
    return (f'<div style="font-family:monospace;white-space:pre-wrap;line-height:1.6"><b>{html.escape(self.prompt)}</b>'
            f'{spans}</div><div style="font-size:smaller">{legend}</div>')

  def __repr__(self) -> str:  # plain-text fallback: [accepted] (resampled) {bonus} <target>
    marks = {"accepted": "[]", "resampled": "()", "bonus": "{}", "target": "<>"}
    return self.prompt + "".join(f"{marks[o][0]}{text}{marks[o][1]}" if o in marks else text
                                 for text, o in self._pieces())
