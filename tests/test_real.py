"""The opt-in tier on OpenAI's real GPT-2 weights, gpt2 and gpt2-xl (about 7 GB, downloaded once into the cache as
speculative.py downloads them, or read from it):

    python -m pytest -m real     # skipped, with one sentence that says what to do, where the weights cannot be had

Its checks: gpt2's logits against transformers', the greedy check against a published run (tools/reproduce.py's
PUBLISHED), Theorem 1's one-step chi-square at one prefix with its negative control, and the memory that loading
gpt2-xl beside gpt2 takes in float32 and in float16, printed under "figures" after the results. On a GPU it takes
minutes; on a CPU, the chi-square's 2,000 rounds of gpt2-xl take most of an hour. tests/test_reproduce.py runs this
tier on a tiny pair served under the same names, where every check but the published opening passes."""
from __future__ import annotations
import subprocess, sys
import numpy as np, pytest
from tinygrad import Device, dtypes
from tiny import REPO
from engine.compiled import logits
from speculative import ModelDraft
from tools import reproduce
from tools.reproduce import PUBLISHED_TOKENS, THRESHOLD, TURING
from weights import LoadError, checkpoint_dir, load_model, load_tokenizer

pytestmark = pytest.mark.real
N = 2000  # the one-step test's rounds at its prefix, as tools/reproduce.py's default

@pytest.fixture(scope="module")
def folders() -> dict:
  """The pair's checkpoint folders, downloaded if need be; without them, every test here is skipped, saying why."""
  try:
    return {name: checkpoint_dir(name) for name in ("gpt2", "gpt2-xl")}
  except LoadError as e:
    pytest.skip(str(e))

@pytest.fixture(scope="module")
def pair(folders) -> tuple:
  return load_model("gpt2-xl"), ModelDraft(load_model("gpt2"))

@pytest.fixture(scope="module")
def greedy(pair) -> dict:
  """tools/reproduce.py's greedy check, as its command runs it on this pair."""
  return reproduce.greedy_check(*pair, load_tokenizer(), PUBLISHED_TOKENS, published=True)

# first, while no model is loaded in this process: the two loads are in processes of their own
LOAD = ("import sys; from tinygrad import dtypes; from tinygrad.helpers import GlobalCounters; "
        "from weights import load_model; from tools.reproduce import peak_host_bytes; "
        "models = [load_model(name, getattr(dtypes, sys.argv[1])) for name in ('gpt2-xl', 'gpt2')]; "
        "print(peak_host_bytes(), GlobalCounters.mem_used)")

def test_memory_of_loading_the_pair(folders, record_property):
  """Loading gpt2-xl beside gpt2, each dtype in a fresh process: its peak host memory and the device memory in use
  (reported after the results); float16 holds the weights in half float32's device memory, or a little more."""
  used = {}
  for dtype in ("float32", "float16"):
    if getattr(dtypes, dtype) not in Device[Device.DEFAULT].renderer.supported_dtypes():
      continue
    run = subprocess.run([sys.executable, "-c", LOAD, dtype], capture_output=True, text=True, cwd=REPO, timeout=1800)
    assert run.returncode == 0, run.stderr[-2000:]
    host, used[dtype] = (int(x) for x in run.stdout.split()[-2:])
    record_property("figure", f"loading gpt2-xl beside gpt2, {dtype}: peak host memory {host / 1e9:.2f} GB, device "
                    f"memory in use {used[dtype] / 1e9:.2f} GB ({Device.DEFAULT})")
  if "float16" in used:
    assert used["float16"] < 0.6 * used["float32"]

def test_gpt2_logits_match_transformers(folders):
  """gpt2's logits after each token of the README's prompt, against transformers' on the same file: within 5e-3
  (logits of magnitude about 100, in float32), and the same argmax at every position."""
  torch = pytest.importorskip("torch", reason="the comparison needs torch and transformers: see requirements-hf.txt")
  transformers = pytest.importorskip("transformers", reason="see requirements-hf.txt")
  tokens = load_tokenizer().encode(TURING)
  with torch.no_grad():
    hf = transformers.GPT2LMHeadModel.from_pretrained(folders["gpt2"]).eval()
    expected = hf(torch.tensor([tokens])).logits[0].numpy()
  got = logits(load_model("gpt2"), tokens, 0)
  assert np.abs(got - expected).max() <= 5e-3, np.abs(got - expected).max()
  assert (got.argmax(-1) == expected.argmax(-1)).all()

def test_greedy_algorithms_agree(greedy):
  """At temperature 0, Algorithm 2's tokens are Algorithm 1's, all of them."""
  assert greedy["same_tokens"], "\n".join(reproduce.greedy_lines(greedy))

def test_greedy_check_matches_the_published_opening(greedy):
  """Their text opens as the published run's did (its first sentence at least)."""
  assert greedy["published_sentences_matched"] >= 1, "\n".join(reproduce.greedy_lines(greedy))

def test_one_step_chisquare_on_the_real_pair(pair):
  """At the README's prompt, N rounds at top-p 0.8: the first tokens pass against q, and the control is rejected."""
  prefix = load_tokenizer().encode(TURING)
  r = reproduce.theorem(*pair, [prefix], reproduce.SETTINGS["xsum-nucleus"][0], N, reproduce.Progress(N, "rounds"))
  lines = "\n".join(reproduce.theorem_lines(r))
  assert r["ours"]["p_value"] > THRESHOLD, lines
  assert r["control"]["p_value"] < THRESHOLD, lines + "\n(if the power above is low, this N cannot see the mistake)"
