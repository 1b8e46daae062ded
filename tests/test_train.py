"""train.py: the unwrapped corpus and its split, the bigram baseline, the export through gpt2.py that keeps the
tokens the corpus never uses below 1e-6 of the probability, a short training run that learns and resumes, and
the pieces of unlikelihood fine-tuning (a loop's tokens found, and pushed down).
No full training run: the shipped pair's own checks are in test_demo.py."""
import json, math, re
import numpy as np, pytest
from tinygrad import Tensor
from tiny import TOKENIZER_DIR, run_script
import train
from weights import load_model, load_tokenizer

NEEDS_TOKENIZER = pytest.mark.skipif(not (TOKENIZER_DIR / "vocab.bpe").is_file(),
                                     reason="no GPT-2 tokenizer files in demo/")
NEEDS_HF = "training runs in PyTorch on transformers' GPT2LMHeadModel: pip install -r requirements-hf.txt"

def test_help():
  out = run_script("train.py", "--help")
  assert out.returncode == 0 and all(f in out.stdout for f in ("--model", "--steps", "--checkpoints", "--eval"))

DOC = """\
The "for" statement
*******************

The "for" statement is used to iterate over the elements of a sequence
(such as a string, tuple or list) or other iterable object, and it is
a compound statement that has, as every reader of the docs knows, a
well-known left-hand side, which all the readers of this page know: left-
hand side:

   for_stmt ::= "for" target_list "in" starred_list ":" suite
                ["else" ":" suite]

For instance:

   for i in range(10):
       print(i)

   >>> list(range(3))
   [0, 1, 2]

* A list item whose text is long enough that the docs had to wrap it
  onto a second line, indented past the marker.

* short item
* another short one"""

def test_unwrap_joins_wrapped_prose_and_keeps_code_grammar_and_headings():
  assert train.unwrap(DOC).split("\n") == [
    'The "for" statement', "*******************",
    'The "for" statement is used to iterate over the elements of a sequence (such as a string, tuple or list) or '
    "other iterable object, and it is a compound statement that has, as every reader of the docs knows, a "
    "well-known left-hand side, which all the readers of this page know: left-hand side:",
    'for_stmt ::= "for" target_list "in" starred_list ":" suite', '             ["else" ":" suite]',
    "For instance:", "for i in range(10):", "    print(i)",
    ">>> list(range(3))", "[0, 1, 2]",
    "* A list item whose text is long enough that the docs had to wrap it onto a second line, indented past the "
    "marker.", "* short item", "* another short one"]

def test_unwrap_only_removes_line_breaks_and_spaces():
  """On every topic: the same characters but for whitespace, no blank line and no trailing space, every grammar
  production and interactive line kept whole (but for its margin and trailing spaces), the text on fewer
  lines, and far fewer line breaks followed by a space."""
  from pydoc_data.topics import topics
  before = after = spaced_before = spaced_after = 0
  for text in topics.values():
    flat = train.unwrap(text)
    assert re.sub(r"\s", "", flat) == re.sub(r"\s", "", text)
    assert "\n\n" not in flat and "  \n" not in flat
    lines = set(l.strip() for l in flat.split("\n"))
    assert all(l.strip() in lines for l in text.split("\n") if "::=" in l or l.lstrip().startswith(">>>"))
    before, after = before + text.count("\n"), after + flat.count("\n")
    spaced_before, spaced_after = spaced_before + text.count("\n "), spaced_after + flat.count("\n ")
  assert after < 0.5 * before and spaced_after < 0.1 * spaced_before  # 3.11.7: 11,374 to 4,352; 4,039 to 348

@NEEDS_TOKENIZER
def test_corpus_is_pythons_documentation_unwrapped_and_split_by_whole_topics():
  """Every 10th topic of pydoc_data held out whole; the token set is the tokens the two streams use."""
  from pydoc_data.topics import topics
  enc = load_tokenizer(TOKENIZER_DIR)
  train_ids, val_ids, used = train.corpus(enc)
  names = sorted(topics)
  assert val_ids.tolist() == enc.encode("\n".join(train.unwrap(topics[n]) for n in names[::10]))
  assert enc.decode(train_ids[:40].tolist()).startswith(train.unwrap(topics[names[1]])[:60])
  assert 10 * len(val_ids) < len(train_ids) < 20 * len(val_ids)
  assert used.tolist() == sorted(set(train_ids.tolist()) | set(val_ids.tolist()))

def test_bigram_baseline_by_hand():
  """0.6 x bigram + 0.4 x add-one unigram over the used tokens, on the targets a model scores (windows of T)."""
  used = np.array([3, 5, 7])
  fit = np.array([3, 5, 3, 5, 7])      # counts: 3 twice, 5 twice, 7 once; 3->5 twice, 5->3 once, 5->7 once
  val = np.array([3, 5, 7, 3, 7])      # windows of 2: targets 5|3, 7|5 and 7|3, 3|7 (the last token left over)
  unigram = {3: 3 / 8, 5: 3 / 8, 7: 2 / 8}
  probs = [0.6 * 1 + 0.4 * unigram[5], 0.6 * 0.5 + 0.4 * unigram[7],
           0.6 * 0 + 0.4 * unigram[7], 1.0 * unigram[3]]  # 7 is never followed in training: the unigram alone
  expected = math.exp(-np.mean(np.log(probs)))
  assert train.bigram_perplexity(fit, val, used, T=2) == pytest.approx(expected)

TINY = train.Recipe(train.GPT2Config(n_layer=1, n_head=2, n_embd=16, n_ctx=32), steps=40, lr=1e-2, dropout=0.1,
                    weight_decay=0.1, batch=4, warmup=5, eval_every=20, patience=2)

def test_export_keeps_the_used_tokens_and_silences_the_rest():
  """The torch model, pinned and exported through gpt2.py and widened to 50257 tokens, gives the used tokens
  the torch model's logits and every other token together less than 1e-6 of the mass."""
  torch = pytest.importorskip("torch", reason=NEEDS_HF)
  pytest.importorskip("transformers", reason=NEEDS_HF)
  torch.manual_seed(0)
  V = 30
  hf = train.hf_model(TINY.shape, V, 0.0).eval()
  with torch.no_grad():  # a trained-looking ln_f and per-token bias, not the initial ones
    hf.transformer.ln_f.weight.normal_(1, 0.3)
    hf.transformer.wte.weight[:, -1].normal_(0, 3)
  train.pin(hf)
  used = np.sort(np.random.default_rng(1).choice(50257, V, replace=False))
  full = train.expand(train.to_gpt2(hf, TINY.shape, V), used)
  ids = list(range(10))
  with torch.no_grad():
    small = hf(torch.tensor([ids])).logits[0].numpy()
  big = full.logits(Tensor([used[ids].tolist()])).numpy()[0]
  np.testing.assert_allclose(big[:, used], small, atol=1e-4)
  assert hf.transformer.ln_f.weight[-1] == 0 and hf.transformer.ln_f.bias[-1] == 1
  probs = np.exp(big - big.max(-1, keepdims=True))
  probs /= probs.sum(-1, keepdims=True)
  off = np.ones(50257, bool)
  off[used] = False
  assert probs[:, off].sum(-1).max() < 1e-6

@NEEDS_TOKENIZER
def test_a_short_run_learns_resumes_and_saves_a_loadable_model(tmp_path):
  """40 steps of a tiny model on the corpus: the validation loss falls from the uniform one, the best weights
  are saved in the Hub's layout in float16 over 50257 tokens, and a second call resumes instead of training
  again."""
  pytest.importorskip("torch", reason=NEEDS_HF)
  pytest.importorskip("transformers", reason=NEEDS_HF)
  train.train("tiny", TINY, tmp_path / "out", tmp_path / "ckpt", seed=0, fresh=False)
  state = json.loads((tmp_path / "ckpt" / "train-tiny" / "state.json").read_text())
  _, _, used = train.corpus(load_tokenizer(TOKENIZER_DIR))
  assert state["step"] == 40 and [h[0] for h in state["history"]] == [20, 40]
  assert state["best"] < math.log(len(used)) - 1
  config = json.loads((tmp_path / "out" / "tiny" / "config.json").read_text())
  assert config["vocab_size"] == 50257 and config["n_layer"] == 1
  assert load_model(str(tmp_path / "out" / "tiny")).wte.weight.shape == (50257, 16)
  train.train("tiny", TINY, tmp_path / "out2", tmp_path / "ckpt", seed=0, fresh=False)  # nothing left to do
  assert json.loads((tmp_path / "ckpt" / "train-tiny" / "state.json").read_text())["history"] == state["history"]

def test_repeats_marks_the_loops_of_the_continuation_only():
  """repeats: every token of a 4-gram the continuation (from start) already held; the prompt's do not count."""
  assert train.repeats([7, 1, 2, 3, 4, 1, 2, 3, 4, 5], 1).tolist() == [False] * 5 + [True] * 4 + [False]
  assert not train.repeats([1, 2, 3, 4, 1, 2, 3, 4], 4).any()
  assert not train.repeats(list(range(20)) + [1, 2, 3], 0).any()  # 3 tokens again are not a 4-gram

def test_unlikelihood_steps_push_a_loop_down():
  """A tiny untrained model's greedy text loops (one token over and over); greedy_loops finds the loop, and 10
  optimiser steps on unlikelihood_loss take the probability of the loop's tokens below half of what it was.
  Control: the same steps with a learning rate of 0 leave it as it was."""
  torch = pytest.importorskip("torch", reason=NEEDS_HF)
  pytest.importorskip("transformers", reason=NEEDS_HF)
  tokens = np.random.default_rng(0).integers(0, 30, 2000)
  def loop_probability(lr: float) -> tuple[float, float]:
    torch.manual_seed(0)
    hf = train.hf_model(train.GPT2Config(n_layer=1, n_head=2, n_embd=16, n_ctx=128), 30, 0.0)
    train.pin(hf)
    seq, loop = train.greedy_loops(hf, tokens, np.random.default_rng(0), B=4, new=32)
    assert loop.float().mean() > 0.5
    def p() -> float:
      with torch.no_grad():
        probs = hf.eval()(seq[:, :-1]).logits[:, -32:].softmax(-1).gather(-1, seq[:, -32:, None])[..., 0]
      return probs[loop].mean().item()
    before, opt = p(), train.optimizer(hf, lr, 0.0)
    for _ in range(10):
      train.step(hf.train(), opt, train.unlikelihood_loss(hf, seq, loop))
    return before, p()
  before, after = loop_probability(1e-2)
  assert after < before / 2, (before, after)
  assert loop_probability(0.0) == (before, before)

def test_the_moving_average_follows_the_weights_by_one_minus_the_decay():
  """follow moves each averaged weight 1 - decay of the way to the model's; pin's constants stay exact. Control:
  without averaging (decay 0) averaged returns the model itself, and follow changes nothing."""
  torch = pytest.importorskip("torch", reason=NEEDS_HF)
  pytest.importorskip("transformers", reason=NEEDS_HF)
  torch.manual_seed(0)
  hf = train.hf_model(TINY.shape, 30, 0.0)
  train.pin(hf)
  avg = train.averaged(hf, 0.9)
  before = {k: v.clone() for k, v in avg.state_dict().items()}
  with torch.no_grad():
    for p in hf.parameters():
      p.add_(1.0)
  train.pin(hf)
  train.follow(avg, hf, 0.9)
  w, a = hf.transformer.h[0].mlp.c_fc.weight, avg.transformer.h[0].mlp.c_fc.weight
  b = before["transformer.h.0.mlp.c_fc.weight"]
  assert torch.allclose(a, b + 0.1 * (w - b), atol=1e-6) and not torch.allclose(a, w)
  assert avg.transformer.ln_f.weight[-1] == 0 and avg.transformer.ln_f.bias[-1] == 1
  assert train.averaged(hf, 0.0) is hf
  state = {k: v.clone() for k, v in hf.state_dict().items()}
  train.follow(hf, hf, 0.0)
  assert all(torch.equal(state[k], v) for k, v in hf.state_dict().items())
