"""train.py: the corpus and its split, a training step that learns, and the full-vocabulary export that keeps
the tokens the corpus never uses below 1e-6 of the probability. No training run: the shipped pair's own
checks are in test_demo.py."""
import numpy as np, pytest
from tinygrad import Context, Tensor, nn
from tinygrad.nn.state import get_parameters
from gpt2 import GPT2, GPT2Config
from tiny import TOKENIZER_DIR, run_script
import train
from weights import load_tokenizer

TINY = GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=30, n_ctx=16)

def tiny_model(seed: int = 0) -> GPT2:
  Tensor.manual_seed(seed)
  model = GPT2(TINY)
  train.init(model)
  train.pin(model)
  Tensor.realize(*get_parameters(model))
  return model

def test_help():
  out = run_script("train.py", "--help")
  assert out.returncode == 0 and "--model" in out.stdout and "--steps" in out.stdout

@pytest.mark.skipif(not (TOKENIZER_DIR / "vocab.bpe").is_file(), reason="no GPT-2 tokenizer files in demo/")
def test_corpus_is_pythons_documentation_split_by_whole_topics():
  """Every 10th topic of pydoc_data held out whole; the token set is the tokens the two streams use."""
  from pydoc_data.topics import topics
  train_ids, val_ids, used = train.corpus(load_tokenizer(TOKENIZER_DIR))
  names = sorted(topics)
  enc = load_tokenizer(TOKENIZER_DIR)
  assert val_ids.tolist() == enc.encode("\n\n".join(topics[n] for n in names[::10]))
  assert 10 * len(val_ids) < len(train_ids) < 20 * len(val_ids)
  assert used.tolist() == sorted(set(train_ids.tolist()) | set(val_ids.tolist()))

def test_a_training_step_lowers_the_loss():
  """Ten compiled steps on one batch of a tiny model: the loss falls, and ln_f's last feature stays pinned."""
  model = tiny_model()
  opt = nn.optim.AdamW(get_parameters(model), lr=1e-2)
  step = train.train_step(model, opt)
  rng = np.random.default_rng(0)
  x = rng.integers(0, TINY.vocab_size, (2, TINY.n_ctx))
  y = np.roll(x, -1, axis=1)
  with Context(TRAINING=1):
    losses = [step(Tensor(x), Tensor(y), Tensor([1e-2])).item() for _ in range(10)]
  assert losses[-1] < losses[0] - 0.5, losses
  assert model.ln_f.weight.numpy()[-1] == 0 and model.ln_f.bias.numpy()[-1] == 1

def test_expand_keeps_the_used_tokens_and_silences_the_rest():
  """The full-vocabulary model gives the used tokens the trained model's logits (up to the constant shift a
  softmax ignores: none here) and every other token together less than 1e-6 of the mass."""
  model = tiny_model()
  used = np.sort(np.random.default_rng(1).choice(50257, TINY.vocab_size, replace=False))
  full = train.expand(model, used)
  ids = list(range(10))
  small = model.logits(Tensor([ids])).numpy()[0]
  big = full.logits(Tensor([used[ids].tolist()])).numpy()[0]
  np.testing.assert_allclose(big[:, used], small, atol=1e-4)
  probs = np.exp(big - big.max(-1, keepdims=True))
  probs /= probs.sum(-1, keepdims=True)
  off = np.ones(50257, bool)
  off[used] = False
  assert probs[:, off].sum(-1).max() < 1e-6
