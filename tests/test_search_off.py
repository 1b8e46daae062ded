"""Only Compiled.search searches kernels: importing the project sets nothing in tinygrad, and with BEAM=2 in the
environment (which tinygrad reads too, and would act on in every kernel it compiles) loading a model, training a
step and demo/train.py's evaluation search no kernel. Its control: a sum realized outside them does search."""
import os, subprocess, sys
import pytest
from tiny import REPO, TOKENIZER_DIR, small_docs, write_checkpoint

pytestmark = pytest.mark.slow  # the slow tier: python -m pytest -m slow

NEEDS = "training runs in PyTorch on transformers' GPT2LMHeadModel: pip install -r requirements-hf.txt"

SCRIPT = """
import dataclasses, pathlib, sqlite3, sys
import tinygrad.helpers as helpers
from tinygrad import Tensor
import gpt2, speculative, weights
from demo import train
from engine import compiled
from tools import session
assert helpers.BEAM.value == 2, "importing the project changed BEAM"
def searches():
  try:
    return helpers.db_connection().execute(f"SELECT count(*) FROM beam_search_{helpers.VERSION}").fetchone()[0]
  except sqlite3.OperationalError:  # no search yet: no table
    return 0
root, docs = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[3])
weights.load_model(sys.argv[2])
print("load", searches())
recipe = train.Recipe(train.GPT2Config(n_layer=1, n_head=2, n_embd=16, n_ctx=256), steps=2, lr=1e-2, dropout=0.0,
                      weight_decay=0.1, batch=2, warmup=1, eval_every=2, patience=2)
train.train("tiny", recipe, root / "out", root / "ckpt", seed=0, fresh=True, docs=docs)
print("train", searches())
train.evaluate({"tiny": root / "out" / "tiny"}, prompts=2, docs=docs)
print("evaluate", searches())
x = Tensor.ones(64, 64).contiguous().realize()
(x @ x).realize()  # the control: plain tinygrad under BEAM=2 searches
print("control", searches())
"""

@pytest.mark.skipif(not (TOKENIZER_DIR / "vocab.bpe").is_file(), reason="no GPT-2 tokenizer files in demo/")
def test_beam_in_the_environment_searches_nothing_outside_compiled_search(tmp_path):
  pytest.importorskip("torch", reason=NEEDS)
  pytest.importorskip("transformers", reason=NEEDS)
  folder = write_checkpoint(tmp_path / "model", n_layer=1, n_head=2, n_embd=16, vocab_size=64, n_ctx=32)
  env = {**os.environ, "BEAM": "2", "CACHEDB": str(tmp_path / "cache.db")}
  out = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path), str(folder),
                        str(small_docs(tmp_path / "docs"))], capture_output=True, text=True,
                       cwd=REPO, env=env, timeout=900)
  assert out.returncode == 0, out.stderr[-3000:]
  counts = dict(line.split() for line in out.stdout.splitlines() if line.split()[0] in
                ("load", "train", "evaluate", "control"))
  assert counts["load"] == counts["train"] == counts["evaluate"] == "0", out.stdout
  assert int(counts["control"]) > 0, "the control searched nothing: the count cannot see a search"
