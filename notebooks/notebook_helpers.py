"""What the notebooks share: their models, the device's random numbers replayed on the host, the coloured trace,
and plot defaults.

Text and acceptance rates in the saved outputs come from the demo pair (demo-target, demo-draft: small GPT-2s
trained by demo/train.py on Python's documentation, shipped in demo/). Where a notebook needs exact small cases, it
uses tiny random-weight stand-ins built by the package (weights.random_model), with GPT-2's full vocabulary, so
that real prompts tokenize and decode. A tiny draft is the target's network drawn with the same seed, its
weights scaled a little smaller: the same network, a little flatter, so it agrees with the target often, as a
good draft does.
"""
from __future__ import annotations
import codecs, html, pathlib, sys
import matplotlib.pyplot as plt
import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
  sys.path.insert(0, str(REPO))
from tinygrad.nn.state import get_parameters  # noqa: E402
from gpt2 import GPT2  # noqa: E402
from sampling import random_bits  # noqa: E402
from speculative import EOT  # noqa: E402
from weights import load_model, random_model  # noqa: E402

TINY_SHAPE = "2,2,32"  # n_layer, n_head, n_embd: a toy body on GPT-2's vocabulary and context
# random_model draws weights as PyTorch does: so small that the next-token distributions are nearly uniform.
# Scaled up 12 times, they are peaked, as a trained model's are.
TARGET_SCALE = 12.0
DRAFT_SCALE = 0.94  # the tiny draft's weights against the target's: close, so it agrees often

plt.rcParams.update({"figure.dpi": 72, "figure.figsize": (8, 3.4), "axes.grid": True, "grid.alpha": 0.3,
                     "axes.spines.top": False, "axes.spines.right": False, "font.size": 10})

def scale_weights(model: GPT2, factor: float) -> GPT2:
  """model, with every weight multiplied by factor (in place)."""
  for p in get_parameters(model):
    p.replace((p * factor).realize())
  return model

def tiny_model(scale: float = 1.0, seed: int = 0) -> GPT2:
  """The tiny target (scale 1), or a draft (scale a little under 1): random_model(TINY_SHAPE, seed=seed) with
  every weight multiplied by TARGET_SCALE · scale. The same seed draws the same network; a smaller scale only
  flattens its distributions, so its likeliest tokens stay the target's. Its calls run tinygrad's default
  kernels: only the command lines search kernels (session.search_kernels), and a toy's calls are too short for
  the minutes of search to pay."""
  return scale_weights(random_model(TINY_SHAPE, seed=seed), TARGET_SCALE * scale)

def load_models(models: str, draft_scales: tuple[float, ...] = (DRAFT_SCALE,)) -> tuple[GPT2, dict[str, GPT2]]:
  """The target q and named drafts p.

  models "demo": the demo pair shipped in demo/ (no download).
  models "gpt2": GPT-2 1.5B and GPT-2 124M (downloaded once, about 7 GB).
  models "tiny": the tiny target and one tiny draft per scale in draft_scales (closer to 1 = more agreement).
  """
  if models == "demo":
    return load_model("demo-target"), {"demo-draft": load_model("demo-draft")}
  if models == "gpt2":
    return load_model("gpt2-xl"), {"GPT-2 124M": load_model("gpt2")}
  if models != "tiny":
    raise ValueError(f'MODELS is {models!r}: use "demo", "tiny" or "gpt2".')
  return tiny_model(), {f"tiny draft, weights × {s}": tiny_model(s) for s in draft_scales}

def farther_draft(models: str, scale: float) -> GPT2:
  """load_models(models)'s draft made again with every weight multiplied by scale (under 1): the same network,
  its distributions flatter, so that it agrees with the target less often. A farther draft to set beside it."""
  if models == "tiny":
    return tiny_model(DRAFT_SCALE * scale)
  if models not in ("demo", "gpt2"):
    raise ValueError(f'MODELS is {models!r}: use "demo", "tiny" or "gpt2".')
  return scale_weights(load_model("demo-draft" if models == "demo" else "gpt2"), scale)

class Uniforms:
  """A stand-in for NumPy's generator in reference.sample and reference.verify: each .random() returns the next
  of the given numbers. With the uniforms of round_uniforms, a round walked on the host with reference.py
  makes the tokens that speculative_sample's compiled round makes on the device (up to float rounding at a
  boundary, about one draw in ten million)."""
  def __init__(self, *numbers: float):
    self.numbers = list(numbers)

  def random(self) -> float:
    return self.numbers.pop(0)

def round_uniforms(seed: int, counter: int, K: int) -> dict[str, np.ndarray]:
  """The uniform numbers of round `counter` of speculative_sample(..., seed=seed) with a model draft, as the
  device uses them: its 3K + 2 random uint32 (sampling.random_bits) become the K accept-test r's
  ("r", as sampling.uniform makes them: top 24 bits + ½, times 2^-24), the final draw's uniform ("final":
  the residual or bonus draw, 48 bits as sampling.draw reads them) and one uniform per draft ("drafts")."""
  bits = random_bits(seed, counter, 3 * K + 2).numpy().astype(np.int64) >> 8  # 24 bits each
  draw = lambda hi, lo: (hi * 2**24 + lo) / 2**48
  return {"r": (bits[:K] + 0.5) * 2.0**-24, "final": draw(bits[K], bits[K + 1]),
          "drafts": np.array([draw(bits[K + 2 + 2 * t], bits[K + 3 + 2 * t]) for t in range(K)])}

def verify_uniforms(u: dict[str, np.ndarray], drafts: list[int], p: np.ndarray, q: np.ndarray) -> Uniforms:
  """The uniforms of a round (round_uniforms) in the order reference.verify takes them: one r for each draft it
  tests, up to the first rejection, then the final draw's. The device's round draws all of them at once and
  uses the same ones, so that verify on these makes its tokens."""
  tests = [r * p[t, x] < q[t, x] for t, (r, x) in enumerate(zip(u["r"], drafts))]  # accepted, as verify tests
  tested = tests.index(False) + 1 if False in tests else len(drafts)
  return Uniforms(*u["r"][:tested], u["final"])

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
  """The prompt and the generated tokens, coloured by where each came from; HTML in a notebook, text
  elsewhere."""
  def __init__(self, enc, prompt: str, tokens: list[int], origins: list[str]):
    self.enc, self.prompt, self.tokens, self.origins = enc, prompt, tokens, origins

  def _pieces(self) -> list[tuple[str, str]]:
    # whole characters only, as cli.printer does
    utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
    return [("" if t == EOT else utf8.decode(self.enc.decode_single_token_bytes(t)), o)
            for t, o in zip(self.tokens, self.origins)]

  def _repr_html_(self) -> str:
    legend = " ".join(f'<span style="background:{c}">&nbsp;{o}&nbsp;</span>' for o, c in HTML_COLOURS.items())
    spans = "".join(f'<span style="background:{HTML_COLOURS.get(o, "none")}">{html.escape(text)}</span>'
                    for text, o in self._pieces())
    return ('<div style="font-family:monospace;white-space:pre-wrap;line-height:1.6">'
            f'<b>{html.escape(self.prompt)}</b>'
            f'{spans}</div><div style="font-size:smaller">{legend}</div>')

  def __repr__(self) -> str:  # plain-text fallback: [accepted] (resampled) {bonus} <target>
    marks = {"accepted": "[]", "resampled": "()", "bonus": "{}", "target": "<>"}
    return self.prompt + "".join(f"{marks[o][0]}{text}{marks[o][1]}" if o in marks else text
                                 for text, o in self._pieces())
