"""The demo pair shipped in demo/ (trained by train.py on pydoc_data.topics, the corpus "topics"; its checks
use that corpus and its split until a pair trained on the documentation's sources replaces it): it loads by
name, its shapes are what docs/demo.md says, the tokens the corpus never uses stay below 1e-3 of the
probability at every position, the target beats a bigram of the corpus on held-out topics and the draft sits
between them, greedy text continues a prompt in sentences of the corpus's words, and the draft's tokens are
accepted at a rate that shows speculative sampling at work."""
import json, re
import numpy as np, pytest
from tinygrad import Tensor
from tinygrad.nn.state import get_state_dict
from tiny import REPO
import train
from gpt2 import GPT2, GPT2Config
import compiled
from sampling import Sampling
from speculative import ModelDraft, autoregressive_sample, speculative_sample
from weights import DEMO, load_model, load_tokenizer

pytestmark = pytest.mark.skipif(not all((d / "model.safetensors").is_file() for d in DEMO.values()),
                                reason="the demo pair is not in demo/")

README_PROMPT = "Every object has an identity, a type and a value."
# docs-style beginnings that the training text does not hold verbatim (checked below)
PROMPTS = ["When a class defines a method, the method",
           "The value of an expression is",
           "If the argument is a string, the function"]

@pytest.fixture(scope="module")
def pair():
  return load_model("demo-target"), load_model("demo-draft")

@pytest.fixture(scope="module")
def corpus():
  enc = load_tokenizer()
  train_ids, val_ids, used = train.corpus(enc, "topics")
  return enc, train_ids, val_ids, used

@pytest.fixture(scope="module")
def words(corpus):
  enc, train_ids, val_ids, _ = corpus
  return set(train.WORD.findall(enc.decode(np.concatenate([train_ids, val_ids]).tolist())))

def test_shapes_are_what_the_docs_say():
  """docs/demo.md's table of the two models matches their config.json, and both keep GPT-2's vocabulary."""
  page = (REPO / "docs" / "demo.md").read_text()
  for name, folder in DEMO.items():
    c = json.loads((folder / "config.json").read_text())
    row = re.search(rf"^\| `{name}` \| (\d+) \| (\d+) \| (\d+) \| (\d+) \|", page, re.M)
    assert row, f"docs/demo.md has no row for {name}"
    assert [int(v) for v in row.groups()] == [c["n_layer"], c["n_head"], c["n_embd"], c["n_positions"]]
    assert c["vocab_size"] == 50257

def test_tokens_off_the_corpus_get_almost_nothing(pair, corpus):
  """At every position of held-out text, the 45,000 tokens the corpus never uses get together < 1e-3."""
  enc, _, val_ids, used = corpus
  off = np.ones(50257, bool)
  off[used] = False
  text = val_ids[:200].tolist()
  for model in pair:
    logits = compiled.logits(model, text, 0).astype(np.float64)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    assert probs[:, off].sum(-1).max() < 1e-3

def test_target_beats_the_bigram_and_the_draft_sits_between(pair, corpus):
  """On the held-out topics (unwrapped, windows of 256 tokens): the target's perplexity is at most 0.7 of the
  interpolated bigram's (fit on the training topics), and the draft's is between the two."""
  _, train_ids, val_ids, used = corpus
  bigram = train.bigram_perplexity(train_ids, val_ids, used)
  target, draft = (train.perplexity(m, val_ids, 256, used) for m in pair)
  assert target <= 0.7 * bigram and target < draft < bigram, (target, draft, bigram)

def untrained(shape: GPT2Config, used: np.ndarray) -> GPT2:
  """The control: the target's shape at GPT-2's initialisation, ln_f pinned and widened as train.py does."""
  model = GPT2(GPT2Config(shape.n_layer, shape.n_head, shape.n_embd, len(used), shape.n_ctx))
  rng = np.random.default_rng(0)
  for name, w in get_state_dict(model).items():
    if "cache_kv" in name:
      continue
    ln, C = name.startswith("ln") or ".ln_" in name, shape.n_embd
    value = (np.ones(w.shape) if name.endswith("weight") else np.zeros(w.shape)) if ln else \
            np.zeros(w.shape) if name.endswith("bias") else rng.normal(0, 0.02, w.shape)
    if name.startswith("ln_f"):
      value[-1] = 0.0 if name.endswith("weight") else 1.0
    w.replace(Tensor(value.astype(np.float32)))
  return train.expand(model, used)

def test_the_sentence_check_rejects_its_controls(corpus, words):
  """train.sentence_faults rejects the untrained model of the target's shape (greedy: one token over and over) and
  64 tokens drawn uniformly from the corpus's tokens (word salad), and passes a passage of held-out docs."""
  enc, _, val_ids, used = corpus
  control, _ = autoregressive_sample(untrained(train.SHIPPED["target"].shape, used), enc.encode(PROMPTS[0]), 64,
                                     sampling=Sampling(0), eos=None)
  assert train.sentence_faults(enc.decode(control), words), "the untrained model passes: the check cannot tell"
  noise = np.random.default_rng(0).choice(used, 64).tolist()
  assert train.sentence_faults(enc.decode(noise), words), "uniform tokens pass: the check cannot tell"
  text = enc.decode(val_ids.tolist())
  prose = text[text.index("Comparisons yield boolean values"):][:400]
  assert not train.sentence_faults(prose, words), prose

@pytest.mark.xfail(strict=True, reason="greedy text from the shipped target repeats itself: a 4-gram more than "
                   "twice in 64 tokens (docs/demo.md, 'Against loops')")
def test_greedy_text_is_sentences_of_the_docs(pair, corpus, words):
  """The target's greedy continuations (64 tokens) of docs-style prompts that the training text does not hold
  verbatim, the three above and ten sentence openings of the held-out topics, are sentences:
  train.sentence_faults finds nothing. Not yet: greedy decoding falls into loops ("the target is evaluated once,
  the target is evaluated once, ..."), the degeneration that greedy text from language models is known for;
  strict, so that a pair that passes turns this test red until the mark goes."""
  enc, train_ids, val_ids, used = corpus
  training_text = enc.decode(train_ids.tolist())
  target, _ = pair
  for prompt in PROMPTS + train.openings(enc.decode(val_ids.tolist()), 10):
    assert prompt not in training_text
    tokens, _ = autoregressive_sample(target, enc.encode(prompt), 64, sampling=Sampling(0), eos=None)
    text = enc.decode(tokens)
    assert not train.sentence_faults(text, words), (prompt, text, train.sentence_faults(text, words))

def test_the_draft_is_accepted_often_but_not_always(pair, corpus):
  """α̂ at temperature 1, K = 4, over the README's prompt and three docs-style ones, seeds 0 to 2, 64 new
  tokens each, pooled (accepted over checked drafts): between 0.5 and 0.9. And at temperature 0 speculative
  sampling gives the target's greedy text exactly."""
  enc = corpus[0]
  target, draft = pair
  accepted = checked = 0
  for prompt in [README_PROMPT, *PROMPTS]:
    for seed in range(3):
      _, _, stats = speculative_sample(target, ModelDraft(draft), enc.encode(prompt), 64, K=4, seed=seed,
                                       eos=None)
      accepted, checked = accepted + stats.accepted, checked + stats.accepted + stats.rejected
  assert 0.5 <= accepted / checked <= 0.9, accepted / checked
  prompt = enc.encode(README_PROMPT)
  greedy, _ = autoregressive_sample(target, prompt, 16, sampling=Sampling(0), eos=None)
  assert speculative_sample(target, ModelDraft(draft), prompt, 16, K=4, sampling=Sampling(0), eos=None)[0] == greedy
