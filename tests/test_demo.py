"""The demo pair shipped in demo/, trained by demo/train.py on the documentation's sources (python3.11-doc; these
tests skip without them): it loads by name, its shapes are what docs/demo.md says, the tokens it may not emit
stay below 1e-3 of the probability at every position, on the held-out files the target beats a bigram of the
training text by the margin docs/demo.md states and the draft sits between them, greedy text from held-out
sentence openings is sentences of the docs, and the draft's tokens are accepted at a rate that shows
speculative sampling at work. Every prompt comes from a held-out file."""
import json, re
import numpy as np, pytest
from tinygrad import Tensor
from tiny import REPO
import demo.corpus
from demo import train
from gpt2 import GPT2, GPT2Config
from engine import compiled
from sampling import Sampling
from speculative import ModelDraft, autoregressive_sample, speculative_sample
from weights import DEMO, load_model, load_tokenizer, weights_of

pytestmark = [pytest.mark.slow,  # the slow tier: python -m pytest -m slow
              pytest.mark.skipif(not all((d / "model.safetensors").is_file() for d in DEMO.values()),
                                 reason="the demo pair is not in demo/"),
              pytest.mark.skipif(not demo.corpus.DOCS.is_dir(), reason="no documentation sources in "
                                 f"{demo.corpus.DOCS}: apt-get install -y python3.11-doc")]

README_PROMPT = "A module is a file containing Python definitions and statements."  # tutorial/modules
# beginnings of sentences of held-out files, which the training text does not hold (checked below)
PROMPTS = ["The pickle module implements binary protocols for",             # library/pickle
           "Compound statements contain (groups of) other statements;",    # reference/compound_stmts
           "There are several ways to present the output of a program;"]  # tutorial/inputoutput
OPENINGS = 60   # held-out sentence openings (train.openings) whose greedy text is checked
FAILING = 0.10  # the share of them whose greedy text may fail the sentence check

@pytest.fixture(scope="module")
def pair():
  return load_model("demo-target"), load_model("demo-draft")

@pytest.fixture(scope="module")
def corpus():
  enc = load_tokenizer()
  train_ids, val_ids, used = demo.corpus.corpus(enc)
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
  """At every position of held-out text, the 39,000 tokens the pair may not emit get together < 1e-3."""
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
  """On the first quarter of the held-out stream (112 windows of 256 tokens; `python -m demo.train --eval` scores
  it all), over the targets the pair may emit: the target's perplexity is at most 0.6 of the interpolated
  bigram's (fit on the training files), and the draft's is between the two."""
  _, train_ids, val_ids, used = corpus
  val_ids = val_ids[:len(val_ids) // 4]
  bigram = train.bigram_perplexity(train_ids, val_ids, used)
  target, draft = (train.perplexity(m, val_ids, 256, used) for m in pair)
  assert target <= 0.6 * bigram and target < draft < bigram, (target, draft, bigram)

def untrained(shape: GPT2Config, used: np.ndarray) -> GPT2:
  """The control: the target's shape at GPT-2's initialisation, ln_f pinned and widened as demo/train.py does."""
  model = GPT2(GPT2Config(shape.n_layer, shape.n_head, shape.n_embd, len(used), shape.n_ctx))
  rng = np.random.default_rng(0)
  for name, w in weights_of(model).items():
    ln = name.startswith("ln") or ".ln_" in name
    value = (np.ones(w.shape) if name.endswith("weight") else np.zeros(w.shape)) if ln else \
            np.zeros(w.shape) if name.endswith("bias") else rng.normal(0, 0.02, w.shape)
    if name.startswith("ln_f"):
      value[-1] = 0.0 if name.endswith("weight") else 1.0
    w.replace(Tensor(value.astype(np.float32)))
  return train.expand(model, used)

def test_the_sentence_check_rejects_its_controls(corpus, words):
  """train.sentence_faults rejects 64 tokens drawn uniformly from the tokens the pair may emit (word salad) and
  passes a passage of held-out docs and the prompts' own sentences, which the training text does not hold."""
  enc, train_ids, val_ids, used = corpus
  noise = np.random.default_rng(0).choice(used, 64).tolist()
  assert train.sentence_faults(enc.decode(noise), words), "uniform tokens pass: the check cannot tell"
  text, training_text = enc.decode(val_ids.tolist()), enc.decode(train_ids.tolist())
  prose = text[text.index("Compound statements contain"):][:400]
  assert not train.sentence_faults(prose, words), prose
  for prompt in [README_PROMPT, *PROMPTS]:
    assert prompt in text and prompt not in training_text, prompt

def failing_share(model: GPT2, corpus, words) -> float:
  """The share of OPENINGS held-out sentence openings whose greedy continuation (64 tokens) fails the sentence
  check (train.greedy_faults)."""
  enc, _, val_ids, _ = corpus
  return len(train.greedy_faults(model, enc, train.openings(enc.decode(val_ids.tolist()), OPENINGS), words)) / OPENINGS

def test_greedy_text_is_sentences_of_the_docs(pair, corpus, words):
  """The target's greedy continuations of 60 sentence openings drawn from the held-out files: at most 10 % fail
  the sentence check (at least 25 words, 90 % of them the corpus's, no 4-gram more than twice). Control: the
  untrained model of the target's shape, whose greedy text repeats one token, fails more than that."""
  target, _ = pair
  share = failing_share(target, corpus, words)
  assert share <= FAILING, share
  control = failing_share(untrained(train.SIZES["target"].shape, corpus[3]), corpus, words)
  assert control > FAILING, "the untrained model passes: the test cannot tell"

def test_the_draft_is_accepted_often_but_not_always(pair, corpus):
  """α̂ at temperature 1, K = 4, over the README's prompt and the three above, seeds 0 to 2, 64 new
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
