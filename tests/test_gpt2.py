"""gpt2.py: its usage lines run as written, logits match Hugging Face transformers, and the KV cache is exact
under decoding, block scoring and rollback."""
import gc, re, sqlite3, textwrap
import numpy as np, pytest
import tinygrad.helpers
from tinygrad import Tensor, dtypes
from tinygrad.codegen import to_program_cache
from tinygrad.helpers import GlobalCounters
from tiny import hub_tensors, write_checkpoint
import gpt2
from engine import compiled
from engine.compiled import PREFILL_ROWS, calls, logits, step
from sampling import Sampling
from weights import load_model

NEEDS_HF = ("the comparison with Hugging Face transformers needs torch and transformers: "
            "see requirements-hf.txt")

def test_the_docstrings_usage_lines_run_as_written():
  """The indented lines at the top of gpt2.py, run as a reader pastes them, give what they say: forward's
  logits (T, vocab rounded up to 64), -inf past the vocabulary, the training forward's on the vocabulary, and
  the same again from a later position over the cache."""
  usage = re.search(r"\n\n((?: {4}.*\n)+)", gpt2.__doc__).group(1)
  scope: dict = {}
  exec(textwrap.dedent(usage), scope)
  V = scope["model"].config.vocab_size
  logits, again, batch = (scope[name].numpy() for name in ("logits", "again", "batch"))
  assert logits.shape == (3, -(-V // 64) * 64) and np.isneginf(logits[:, V:]).all()
  assert np.abs(logits[:, :V] - batch[0]).max() <= 1e-4 and np.abs(again[0, :V] - batch[0, 2]).max() <= 1e-4

# (n_layer, n_head, n_embd, vocab_size, n_ctx): an odd head count, a head dim that is no power of two,
# GPT-2's full vocabulary
HF_SHAPES = [(2, 4, 32, 100, 64), (3, 3, 48, 257, 128), (1, 5, 40, 50257, 32)]

@pytest.mark.parametrize("shape", HF_SHAPES)
def test_logits_match_transformers(tmp_path, shape):
  torch = pytest.importorskip("torch", reason=NEEDS_HF)
  transformers = pytest.importorskip("transformers", reason=NEEDS_HF)
  n_layer, n_head, n_embd, vocab_size, n_ctx = shape
  torch.manual_seed(0)
  config = transformers.GPT2Config(n_layer=n_layer, n_head=n_head, n_embd=n_embd, vocab_size=vocab_size,
                                   n_positions=n_ctx, initializer_range=0.3)
  hf = transformers.GPT2LMHeadModel(config).eval()
  hf.save_pretrained(tmp_path)
  tokens = np.random.default_rng(1).integers(0, vocab_size, n_ctx // 2).tolist()
  with torch.no_grad():
    expected = hf(torch.tensor([tokens])).logits[0].numpy()
  got = logits(load_model(str(tmp_path)), tokens, 0)
  assert expected.std() > 0.1, "the reference logits are too flat to tell models apart"
  assert np.abs(got - expected).max() <= 1e-4

def test_tiny_checkpoints_have_the_hub_layout(tmp_path):
  """tests/tiny.py writes what transformers writes: same tensor names, shapes and dtype (the Hub keeps no
  'transformer.' prefix)."""
  transformers = pytest.importorskip("transformers", reason=NEEDS_HF)
  safetensors = pytest.importorskip("safetensors.numpy",
                                    reason="layout check needs safetensors, which transformers installs")
  config = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=64, n_positions=128)
  transformers.GPT2LMHeadModel(config).save_pretrained(tmp_path)
  hf = {k.removeprefix("transformer."): (v.shape, v.dtype)
        for k, v in safetensors.load_file(tmp_path / "model.safetensors").items()}
  ours = {k: (v.shape, v.dtype) for k, v in hub_tensors(2, 2, 32, 64, 128, 0, 0.5).items()
          if not k.endswith(".attn.bias")}
  assert ours == hf

@pytest.fixture(scope="module")
def tiny_pair(tmp_path_factory):
  folder = write_checkpoint(tmp_path_factory.mktemp("tiny"), n_layer=2, n_head=3, n_embd=48, vocab_size=101,
                            n_ctx=96, seed=3)
  # the model under test, and a reference that recomputes from scratch
  return load_model(str(folder)), load_model(str(folder))

def test_cache_is_exact(tiny_pair):
  """Decode token by token, score blocks of K+1 (in a step of 8 rows, whose padding rows write the cache past
  them), roll back as a rejection does (keeping some of a block, or none) and, now and then, to any earlier
  position: every logit matches a full recompute, up to the context's last positions."""
  model, ref = tiny_pair
  rng = np.random.default_rng(0)
  for _ in range(3):
    seq = rng.integers(0, 101, 90).tolist()
    full = logits(ref, seq, 0)
    n = int(rng.integers(1, 12))
    assert np.abs(logits(model, seq[:n], 0) - full[:n]).max() <= 1e-4  # prefill of any length
    while n < 80:
      T = int(rng.choice([1, 3, 5]))  # a decode step, or K+1 with K = 2, 4
      assert np.abs(logits(model, seq[n:n + T], n) - full[n:n + T]).max() <= 1e-4
      u = rng.random()  # keep all; keep some or none of the block (a rejection); or roll back anywhere
      back_to = 1 if u > 0.95 else max(1, n + T - 6)
      n = n + T if u < 0.7 else int(rng.integers(back_to, n + T))

def test_blocks_called_alone_are_causal(tiny_pair):
  """Notebook 02 runs the blocks one by one, passing no mask: each makes its own, and the logits are the model's."""
  model, ref = tiny_pair
  tokens = [5, 17, 3, 99, 42, 8]
  model.prepare()
  x = model.wte(Tensor([tokens], dtype=dtypes.int32)) + model.wpe.weight[:len(tokens)]
  for block in model.h:
    x = block(x, 0)
  by_blocks = (model.ln_f(x[0]) @ model.wte.weight.T).numpy()
  assert np.abs(by_blocks - logits(ref, tokens, 0)).max() <= 1e-4

def test_steady_state_compiles_nothing(tiny_pair):
  """T=1 and T=K+1 replay their TinyJit: after two warm-up calls, calls at new positions compile no kernel."""
  model, _ = tiny_pair
  logits(model, list(range(10)), 0)
  for T in (1, 5):
    for pos in (10, 11, 12):
      logits(model, [7] * T, pos)
  compiled = len(to_program_cache)
  for pos in (20, 33, 47):
    for T in (1, 5):
      logits(model, [7] * T, pos)
  assert len(to_program_cache) == compiled

def test_steady_state_schedules_nothing(tiny_pair, monkeypatch):
  """After its first call, a compiled step takes its ids and start_pos as bound Variables: no tensor is
  built and scheduled per call (that host work cost more than the kernels), only the replay."""
  model, _ = tiny_pair
  for pos in (10, 11):
    compiled.logits(model, [7] * 5, pos, last=5, head=Sampling())
  scheduled = []
  monkeypatch.setattr(Tensor, "schedule_linear", lambda *args, **kw: scheduled.append(args))
  for pos in (12, 30, 50):
    compiled.logits(model, [7, 8, 9, 10, 11], pos, last=5, head=Sampling())
  assert scheduled == []

def test_dropping_a_model_frees_its_memory(tmp_path):
  """The compiled steps belong to the model: once it is gone, its weights, caches and compiled steps are
  freed."""
  folder = write_checkpoint(tmp_path, n_layer=2, n_head=2, n_embd=32, vocab_size=64, n_ctx=32)
  gc.collect()
  before = GlobalCounters.mem_used
  model = load_model(str(folder))
  for pos in range(3):
    compiled.logits(model, [1, 2, 3], pos, last=3, head=Sampling())
    compiled.logits(model, [4], pos + 3, head=Sampling(0))
  used = GlobalCounters.mem_used - before
  del model
  gc.collect()
  assert used > 100_000 and GlobalCounters.mem_used - before < 0.01 * used

def searches() -> int:
  """How many kernel searches tinygrad's cache of searches holds."""
  try:
    return tinygrad.helpers.db_connection().execute(
      f"SELECT count(*) FROM beam_search_{tinygrad.helpers.VERSION}").fetchone()[0]
  except sqlite3.OperationalError:  # no search yet: no table
    return 0

@pytest.mark.slow
def test_search_is_never_in_a_call_and_gives_the_same_logits(tmp_path, monkeypatch):
  """The fast path, which the rest of the suite skips (tests/conftest.py). A call never searches: a new step
  compiles with the default kernels until its search() has searched it, which sends its kernels through
  tinygrad's BEAM search and recompiles it with them. Replays search nothing; the searched logits are the
  default kernels' up to float32 rounding; and another model of the same shape then finds the step searched
  (remembered on disk) and compiles it from the cache of searches, searching nothing new."""
  monkeypatch.setattr(tinygrad.helpers, "CACHEDB", str(tmp_path / "cache.db"))  # a fresh cache of searches
  monkeypatch.setattr(tinygrad.helpers, "_db_connection", None)
  monkeypatch.setattr(tinygrad.helpers, "_db_tables", set())
  folder = write_checkpoint(tmp_path, n_layer=1, n_head=2, n_embd=16, vocab_size=40, n_ctx=16, seed=4)
  monkeypatch.setattr(compiled, "BEAM_SET", 1)  # as BEAM=1 would
  model, ref = load_model(str(folder)), load_model(str(folder))
  tokens = [3, 1, 4]
  expected = logits(ref, tokens, 0)  # the default kernels, before anything is searched
  for _ in range(3):
    logits(model, tokens, 0)
  unsearched = lambda m: [c for c in calls(m) if not c.searched]
  assert searches() == 0 and unsearched(model) == [step(model, PREFILL_ROWS, None)], "a call searched"
  step(model, PREFILL_ROWS, None).search()
  n = searches()
  assert n > 0 and unsearched(model) == [], "Compiled.search searched nothing"
  got = logits(model, tokens, 0)
  np.testing.assert_allclose(got, expected, atol=1e-5)
  assert searches() == n, "a replay searched again"
  again = load_model(str(folder))
  np.testing.assert_allclose(logits(again, tokens, 0), got, atol=1e-6)
  assert unsearched(again) == [] and searches() == n, "the search was not remembered"
  assert got.shape == (3, 40)

def test_float16_weights_give_float32_logits(tmp_path):
  folder = write_checkpoint(tmp_path, std=0.2)
  tokens = list(range(20))
  full = logits(load_model(str(folder)), tokens, 0)
  half = logits(load_model(str(folder), dtype=dtypes.float16), tokens, 0)
  assert half.dtype == np.float32 and np.abs(half - full).max() < 0.05 * np.abs(full).max()

def test_positions_past_the_context_are_refused(tiny_pair):
  with pytest.raises(ValueError, match="outside the context"):
    logits(tiny_pair[0], [1, 2], 95)

@pytest.mark.parametrize("length,last", [(40, 3), (17, 5), (20, 8)])
def test_long_input_is_fed_in_blocks(tiny_pair, length, last):
  """An input longer than PREFILL_ROWS tokens (a prompt, or a prompt and K drafts) goes through one compiled step
  block by block, the last block padded, and the last `last` tokens' logits are the same as in one call."""
  model, ref = tiny_pair
  seq = np.random.default_rng(5).integers(0, 101, length).tolist()
  full = logits(ref, seq, 0)
  np.testing.assert_allclose(compiled.logits(model, seq, 0, last=last), full[-last:], atol=1e-4)
