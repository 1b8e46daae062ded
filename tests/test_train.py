"""demo/corpus.py and demo/train.py: the documentation's reStructuredText turned into prose, pinned to the
corpus that trained the pair, its split by file and the vocabulary the pair may emit; the bigram baseline, the
export through gpt2.py that keeps the tokens the pair may not emit below 1e-6 of the probability, the moving
average of the weights, the pieces of unlikelihood fine-tuning (a loop's tokens found, and pushed down), and a
short training run on a small folder of sources that learns, resumes and exports.
No full training run: the shipped pair's own checks are in test_demo.py. The tests that read the documentation's
sources skip when they are not installed (apt-get install -y python3.11-doc)."""
import dataclasses, hashlib, json, math, os, re, subprocess, sys, zlib
import numpy as np, pytest
from tinygrad import Tensor
from tiny import REPO, TOKENIZER_DIR, small_docs
from demo import corpus, train
from weights import load_model, load_tokenizer

NEEDS_TOKENIZER = pytest.mark.skipif(not (TOKENIZER_DIR / "vocab.bpe").is_file(),
                                     reason="no GPT-2 tokenizer files in demo/")
NEEDS_DOCS = pytest.mark.skipif(not corpus.DOCS.is_dir(), reason=f"no documentation sources in {corpus.DOCS}: "
                                "apt-get install -y python3.11-doc")
NEEDS_HF = "training runs in PyTorch on transformers' GPT2LMHeadModel: pip install -r requirements-hf.txt"

def test_help_from_the_root():
  """`python -m demo.train --help` runs from the repository's root, as docs/demo.md says; the default --out and
  --checkpoints are under the root (demo/, checkpoints/), where they were before train.py moved into demo/."""
  out = subprocess.run([sys.executable, "-m", "demo.train", "--help"], capture_output=True, text=True, cwd=REPO,
                       env={**os.environ, "DEV": os.environ.get("DEV", "CPU")}, timeout=600)
  assert out.returncode == 0 and all(f in out.stdout for f in ("--model", "--steps", "--checkpoints", "--eval",
                                                               "--docs", "--export"))
  assert train.ROOT == REPO

RST = """\
.. _spam-intro:

:mod:`spam` --- An example module
=================================

.. module:: spam
   :synopsis: An example.

.. index:: single: spam

This module is *only* an example.  It wraps the
:func:`len` and :meth:`str.lower` functions, the class :class:`~collections.OrderedDict`
and the constant :const:`None` (see :pep:`8`, :ref:`the introduction <spam-intro>`,
:ref:`spam-intro`, :term:`iterables <iterable>` and `the web page <https://example.org>`_) [#]_.
A ``literal *star*`` stays, and so does |name|; see also prog_.

.. |name| replace:: ``spam()``

.. function:: eggs(a, b=1)
              eggs(a, \\
                   b, c)

   Return *a* plus **b**.  For example::

      >>> eggs(1)
      2

   .. versionadded:: 3.2

   .. versionchanged:: 3.4
      *b* may be negative.

   .. note::
      Not for the faint of heart.

   .. audit-event:: spam.eggs a,b spam.eggs

   .. availability:: Unix.

Some code:

.. code-block:: python

   print("hello")

>>> 1 + 1
2

+-------+-------+
| a     | b     |
+=======+=======+
| 1     | 2     |
+-------+-------+

=====  =====
x      y
=====  =====
1      2
=====  =====

* A list item that the author wrapped
  onto a second line.
* Another item.

#. First.
#. Second.

--------------


term
   Its definition.

.. This is a comment
   over two lines.

Done ::

   code

.. rubric:: Footnotes

.. [#] A footnote.
"""

def test_rst_text_turns_markup_into_what_sphinx_shows():
  """Roles to their text (a function's name with (), a ~dotted name's last part, a reference's title or its
  label's section title, PEP 8), literals, emphasis, links and substitutions to their text, footnote references
  gone; an API directive to its signatures (a backslash continues one) and its description; version notes,
  notes, audit events and availability in Sphinx's words; paragraphs and list items on one line each. Left
  out: code after "::" and in code directives, interactive sessions, tables, transitions, comments, the index,
  footnotes and their heading."""
  labels = corpus.section_labels([RST])
  assert labels == {"spam-intro": "spam --- An example module"}
  assert corpus.rst_text(RST, labels).split("\n") == [
    "spam --- An example module",
    "This module is only an example. It wraps the len() and str.lower() functions, the class OrderedDict and the "
    "constant None (see PEP 8, the introduction, spam --- An example module, iterables and the web page). A "
    "literal *star* stays, and so does spam(); see also prog.",
    "eggs(a, b=1)", "eggs(a, b, c)",
    "Return a plus b. For example:",
    "New in version 3.2.",
    "Changed in version 3.4: b may be negative.",
    "Note: Not for the faint of heart.",
    "Raises an auditing event spam.eggs with arguments a, b.",
    "Availability: Unix.",
    "Some code:",
    "* A list item that the author wrapped onto a second line.", "* Another item.", "1. First.", "2. Second.",
    "term", "Its definition.",
    "Done"]

def test_doc_files_reads_both_layouts_and_says_what_to_install(tmp_path):
  """Debian's _sources (library/os.rst.txt) and a CPython checkout's Doc/ (library/os.rst) give the same names;
  an empty folder stops with the one sentence that says what to install."""
  for suffix in (".rst.txt", ".rst"):
    (tmp_path / suffix / "library").mkdir(parents=True)
    (tmp_path / suffix / "library" / f"os{suffix}").write_text("os\n==\n")
    (tmp_path / suffix / f"glossary{suffix}").write_text("")
    assert list(corpus.doc_files(tmp_path / suffix)) == ["glossary", "library/os"]
  with pytest.raises(SystemExit, match=r"apt-get install -y python3\.11-doc.*Doc/"):
    corpus.doc_files(tmp_path / "nothing")

def test_held_out_files_are_named_by_their_crc():
  """A file is held out when the CRC-32 of its name is divisible by 10, whatever else the folder holds."""
  assert all(corpus.held_out(n) for n in corpus.DOCS_HELD_OUT)
  assert all(zlib.crc32(n.encode()) % 10 == 0 for n in corpus.DOCS_HELD_OUT)
  assert not corpus.held_out("library/os") and not corpus.held_out("library/functions")
  assert corpus.held_out("reference/compound_stmts") and corpus.held_out("tutorial/modules")

@pytest.mark.slow
@NEEDS_DOCS
def test_the_documentation_becomes_prose_with_no_markup_left():
  """Every file that goes in (TREES) converts with no role, literal, directive or comment left, no blank line
  and no margin; the held-out files are DOCS_HELD_OUT, and a sentence of the docs reads as Sphinx shows it."""
  train_files, held = corpus.docs_split()
  assert sorted(held) == corpus.DOCS_HELD_OUT and not set(train_files) & set(held)
  assert len(train_files) == 352 and all(n.startswith(corpus.TREES) for n in [*train_files, *held])
  assert not any(n.startswith(("whatsnew/", "c-api/", "extending/", "distutils/")) for n in train_files)
  for name, text in [*train_files.items(), *held.items()]:
    assert text and not re.search(r":[\w:-]+:`|``|^\.\. |^ |\n\n", text, re.M), name
  assert ("Return the absolute value of a number. The argument may be an integer, a floating point number, or an "
          "object implementing __abs__().") in train_files["library/functions"]

@pytest.mark.slow
@NEEDS_DOCS
@NEEDS_TOKENIZER
def test_corpus_splits_by_file_and_emits_only_what_training_uses():
  """The held-out stream is the held-out files; the tokens the pair may emit are those the training files use
  at least MIN_COUNT times (none that only the held-out files use), and the held-out targets outside them are
  few: 1.55 % in 3.11.2."""
  enc = load_tokenizer(TOKENIZER_DIR)
  train_ids, val_ids, used = corpus.corpus(enc)
  train_files, held = corpus.docs_split()
  assert val_ids.tolist() == enc.encode("\n".join(held.values()))
  assert 1_000_000 < len(train_ids) < 1_300_000 and 0.08 < len(val_ids) / len(train_ids) < 0.13
  ids, counts = np.unique(train_ids, return_counts=True)
  assert used.tolist() == ids[counts >= corpus.MIN_COUNT].tolist() and 10_000 < len(used) < 12_000
  outside = ~np.isin(val_ids, used)
  assert 0.005 < outside.mean() < 0.03
  assert (train.emit_index(val_ids, used) == len(used)).tolist() == outside.tolist()

@pytest.mark.slow
@NEEDS_DOCS
@NEEDS_TOKENIZER
def test_the_corpus_is_the_one_the_pair_was_trained_on():
  """The prose and its tokens, pinned to those of 3.11.2's sources that trained the shipped pair (docs/demo.md):
  the SHA-256 of the training and of the held-out text (their files joined by a line break, 4,845,786 and
  502,834 bytes), 1,122,286 training and 114,865 held-out tokens, and 16,265 distinct training tokens, of which
  the pair may emit 11,041 and 5,224 are rarer. A change to the converter that changes one character fails."""
  train_files, held = corpus.docs_split()
  texts = ["\n".join(t.values()).encode() for t in (train_files, held)]
  assert [len(t) for t in texts] == [4_845_786, 502_834]
  assert [hashlib.sha256(t).hexdigest() for t in texts] == [
    "f44e7dac40d2b0d881bbc454bc2e6611eda9dc3b962cafd2c567ea17dde765fa",
    "0c97225b970ee9316654199edcc7f8292c2eb4b5533f45289db45059f71a0802"]
  train_ids, val_ids, used = corpus.corpus(load_tokenizer(TOKENIZER_DIR))
  distinct = len(np.unique(train_ids))
  assert (len(train_ids), len(val_ids), distinct, len(used), distinct - len(used)) == \
         (1_122_286, 114_865, 16_265, 11_041, 5_224)

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

def test_bigram_baseline_leaves_out_the_tokens_it_may_not_emit():
  """A token outside used (9) is one more context (OTHER), never a target: the pairs that end in it are not
  counted, nor are the held-out targets that are it, and the unigram counts the training tokens in used."""
  used = np.array([3, 5])
  fit = np.array([3, 5, 9, 3, 5, 3])   # in used: 3 three times, 5 twice; 3->5 twice, 5->3 once, 9->3 once
  val = np.array([9, 3, 5, 9, 3])      # windows of 2: targets 3|9, 5|3 and 9|5 (left out), 3|9
  unigram = {3: 4 / 7, 5: 3 / 7}
  probs = [0.6 * 1 + 0.4 * unigram[3], 0.6 * 1 + 0.4 * unigram[5], 0.6 * 1 + 0.4 * unigram[3]]
  assert train.bigram_perplexity(fit, val, used, T=2) == pytest.approx(math.exp(-np.mean(np.log(probs))))
  assert train.emit_index(np.array([9, 3, 5, 2, 7]), used).tolist() == [2, 0, 1, 2, 2]

TINY = train.Recipe(train.GPT2Config(n_layer=1, n_head=2, n_embd=16, n_ctx=32), steps=40, lr=1e-2, dropout=0.1,
                    weight_decay=0.1, batch=4, warmup=5, eval_every=20, patience=2)

@pytest.mark.slow
def test_export_keeps_the_used_tokens_and_silences_the_rest():
  """The torch model over the used tokens and OTHER, pinned and exported through gpt2.py and widened to 50257
  tokens, gives the used tokens the torch model's logits, and every other token together less than 1e-6 of
  the mass; a token not in used reads as OTHER did in training. restrict undoes expand."""
  torch = pytest.importorskip("torch", reason=NEEDS_HF)
  pytest.importorskip("transformers", reason=NEEDS_HF)
  torch.manual_seed(0)
  V = 30
  hf = train.hf_model(TINY.shape, V + 1, 0.0).eval()
  with torch.no_grad():  # a trained-looking ln_f and per-token bias, not the initial ones
    hf.transformer.ln_f.weight.normal_(1, 0.3)
    hf.transformer.wte.weight[:, -1].normal_(0, 3)
  train.pin(hf)
  used = np.sort(np.random.default_rng(1).choice(50257, V, replace=False))
  full = train.expand(train.to_gpt2(hf, TINY.shape, V + 1), used)
  ids = [*range(10), V, 3]  # OTHER among them
  not_used = int(np.setdiff1d(np.arange(50257), used)[-1])
  with torch.no_grad():
    small = hf(torch.tensor([ids])).logits[0].numpy()
  big = full.logits(Tensor([[int(used[i]) if i < V else not_used for i in ids]])).numpy()[0]
  np.testing.assert_allclose(big[:, used], small[:, :V], atol=1e-4)
  assert hf.transformer.ln_f.weight[-1] == 0 and hf.transformer.ln_f.bias[-1] == 1
  assert hf.transformer.wte.weight[-1, -1] == -train.OFF and not hf.transformer.wte.weight[-1, :-1].any()
  probs = np.exp(big - big.max(-1, keepdims=True))
  probs /= probs.sum(-1, keepdims=True)
  off = np.ones(50257, bool)
  off[used] = False
  assert probs[:, off].sum(-1).max() < 1e-6
  back = train.restrict(full, used).logits(Tensor([ids])).numpy()[0]
  np.testing.assert_allclose(back, small, atol=1e-4)

@pytest.mark.slow
def test_training_and_scoring_leave_out_other_targets():
  """cross_entropy and scores leave out the targets that are OTHER (the model's last token): a stream whose
  every other target is OTHER scores as the mean over the rest."""
  torch = pytest.importorskip("torch", reason=NEEDS_HF)
  pytest.importorskip("transformers", reason=NEEDS_HF)
  torch.manual_seed(0)
  hf = train.hf_model(TINY.shape, 11, 0.0)
  train.pin(hf)
  tokens = np.random.default_rng(0).integers(0, 10, 65)
  tokens[1::2] = 10
  x, y = train.windows(tokens, 32)
  with torch.no_grad():
    logp = hf.eval()(torch.from_numpy(x.astype(np.int64))).logits.log_softmax(-1).numpy()
  keep = y != 10
  expected = -np.take_along_axis(logp, y[..., None], -1)[..., 0][keep].mean()
  assert train.scores(hf, tokens, 32, chunk=1)[0] == pytest.approx(expected, rel=1e-5)
  assert train.val_loss(hf, tokens, 32) == pytest.approx(expected, rel=1e-5)

@pytest.mark.slow
@NEEDS_TOKENIZER
def test_a_short_run_learns_resumes_and_saves_a_loadable_model(tmp_path):
  """40 steps of a tiny model on a small folder of sources: the validation loss falls well below the uniform
  one, the best weights are saved in the Hub's layout in float16 over 50257 tokens, a second call resumes
  instead of training again (from the best weights alone: the optimiser's state is not needed once a run is
  over), and --export saves the same model from the run's best weights without training."""
  pytest.importorskip("torch", reason=NEEDS_HF)
  pytest.importorskip("transformers", reason=NEEDS_HF)
  docs = small_docs(tmp_path / "docs")
  assert corpus.held_out("tutorial/modules") and not corpus.held_out("library/os")
  train.train("tiny", TINY, tmp_path / "out", tmp_path / "ckpt", seed=0, fresh=False, docs=docs)
  state = json.loads((tmp_path / "ckpt" / "train-tiny" / "state.json").read_text())
  _, _, used = corpus.corpus(load_tokenizer(TOKENIZER_DIR), docs)
  assert state["step"] == 40 and [h[0] for h in state["history"]] == [20, 40]
  assert state["best"] < math.log(len(used)) - 1
  config = json.loads((tmp_path / "out" / "tiny" / "config.json").read_text())
  assert config["vocab_size"] == 50257 and config["n_layer"] == 1
  assert load_model(str(tmp_path / "out" / "tiny")).wte.weight.shape == (50257, 16)
  (tmp_path / "ckpt" / "train-tiny" / "state.pt").unlink()  # a finished run needs only its best weights
  train.train("tiny", TINY, tmp_path / "out2", tmp_path / "ckpt", seed=0, fresh=False, docs=docs)  # nothing to do
  assert json.loads((tmp_path / "ckpt" / "train-tiny" / "state.json").read_text())["history"] == state["history"]
  train.train("tiny", TINY, tmp_path / "out3", tmp_path / "ckpt", seed=0, fresh=False, docs=docs, export=True)
  assert (tmp_path / "out3" / "tiny" / "model.safetensors").read_bytes() == \
         (tmp_path / "out" / "tiny" / "model.safetensors").read_bytes()

@pytest.mark.slow
@NEEDS_TOKENIZER
def test_fine_tuning_follows_pretraining_and_exports_its_own_weights(tmp_path):
  """With unlikelihood steps in the recipe, train fine-tunes after pretraining (6 steps, their history saved),
  saves the fine-tuned weights, and --export saves the same model from finetune.pt, not from pretraining's
  best.pt. Control: the pretrained model alone differs from it."""
  pytest.importorskip("torch", reason=NEEDS_HF)
  pytest.importorskip("transformers", reason=NEEDS_HF)
  docs = small_docs(tmp_path / "docs")
  pre = dataclasses.replace(TINY, shape=train.GPT2Config(n_layer=1, n_head=2, n_embd=16, n_ctx=128))
  tuned = dataclasses.replace(pre, unlikelihood=6, continuations=2)
  train.train("tiny", pre, tmp_path / "pre", tmp_path / "ckpt", seed=0, fresh=False, docs=docs)
  train.train("tiny", tuned, tmp_path / "out", tmp_path / "ckpt", seed=0, fresh=False, docs=docs)
  state = json.loads((tmp_path / "ckpt" / "train-tiny" / "finetune.json").read_text())
  assert state["step"] == 6 and [h[0] for h in state["history"]] == [6]
  train.train("tiny", tuned, tmp_path / "again", tmp_path / "ckpt", seed=0, fresh=False, docs=docs, export=True)
  saved = lambda d: (tmp_path / d / "tiny" / "model.safetensors").read_bytes()
  assert saved("again") == saved("out") and saved("pre") != saved("out")

def test_repeats_marks_the_loops_of_the_continuation_only():
  """repeats: every token of a 4-gram the continuation (from start) already held; the prompt's do not count."""
  assert train.repeats([7, 1, 2, 3, 4, 1, 2, 3, 4, 5], 1).tolist() == [False] * 5 + [True] * 4 + [False]
  assert not train.repeats([1, 2, 3, 4, 1, 2, 3, 4], 4).any()
  assert not train.repeats(list(range(20)) + [1, 2, 3], 0).any()  # 3 tokens again are not a 4-gram

@pytest.mark.slow
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
    seq, loop = train.greedy_loops(hf, tokens, np.random.default_rng(0), B=4, vocab=([b" x"] * 30, {b"x"}), new=32)
    assert loop.float().mean() > 0.5
    def p() -> float:
      with torch.no_grad():
        probs = hf.eval()(seq[:, :-1]).logits[:, -32:].softmax(-1).gather(-1, seq[:, -32:, None])[..., 0]
      return probs[loop].mean().item()
    before, opt = p(), train.optimizer(hf, lr, 0.0)
    for _ in range(10):
      train.optimizer_step(hf.train(), opt, train.unlikelihood_loss(hf, seq, loop))
    return before, p()
  before, after = loop_probability(1e-2)
  assert after < before / 2, (before, after)
  assert loop_probability(0.0) == (before, before)

def test_strays_marks_the_words_the_training_text_never_uses():
  """strays: every token of the continuation (from start) that lies in a word the training text does not use,
  the prompt's tokens left alone, and the last word left alone (64 tokens may cut it off). Control: the same
  text with that word in the training text marks nothing."""
  pieces = [b" the", b" kind", b"cy", b"itations", b" of", b".", b" kin"]
  seq = [0, 1, 2, 3, 4, 0, 1, 5, 0, 6]  # " the kindcyitations of the kind. the kin"
  words = {b"the", b"kind", b"of"}
  assert train.strays(seq, 0, pieces, words).tolist() == [False, True, True, True] + [False] * 6
  assert train.strays(seq, 2, pieces, words).tolist() == [False, False, True, True] + [False] * 6
  assert not train.strays(seq, 0, pieces, words | {b"kindcyitations"}).any()
  enc = load_tokenizer(TOKENIZER_DIR) if (TOKENIZER_DIR / "vocab.bpe").is_file() else None
  if enc:  # written: the pair's tokens as bytes, OTHER as none, and the training text's words
    used = np.array(sorted(set(enc.encode(" the kind of thing"))))
    pieces, words = train.written(enc, np.array(enc.encode("The kind of thing")), used)
    assert b"".join(pieces) == b"".join(enc.decode_single_token_bytes(int(i)) for i in used)
    assert pieces[-1] == b"" and words == {b"The", b"kind", b"of", b"thing"}

@pytest.mark.slow
def test_token_unlikelihood_pushes_down_the_tokens_the_window_already_held():
  """cross_entropy with alpha adds alpha times token-level unlikelihood: at each position t, -log(1 - p(c)) for
  every token c among the window's inputs up to t, but the target and OTHER, summed, then averaged over the
  positions: here against a loop over the positions and tokens written out. Control: alpha 0 is the
  cross-entropy alone."""
  torch = pytest.importorskip("torch", reason=NEEDS_HF)
  pytest.importorskip("transformers", reason=NEEDS_HF)
  torch.manual_seed(0)
  r = dataclasses.replace(TINY, batch=2, shape=train.GPT2Config(n_layer=1, n_head=2, n_embd=16, n_ctx=12))
  hf = train.hf_model(r.shape, 8, 0.0).eval()
  train.pin(hf)
  tokens = np.random.default_rng(0).integers(0, 8, 200)  # token 7 is OTHER
  ce = train.cross_entropy(hf, tokens, 0, 3, r).item()
  with_ul = train.cross_entropy(hf, tokens, 0, 3, r, alpha=0.5).item()
  x, y = train.batch(tokens, 0, 3, r.batch, r.shape.n_ctx)
  with torch.no_grad():
    p = hf(torch.from_numpy(x.astype(np.int64))).logits.softmax(-1).numpy()
  total = sum(-math.log(1 - p[b, t, c]) for b in range(2) for t in range(12)
              for c in set(x[b, :t + 1].tolist()) - {int(y[b, t]), 7})
  assert with_ul == pytest.approx(ce + 0.5 * total / y.size, rel=1e-4)
  assert with_ul > ce and train.cross_entropy(hf, tokens, 0, 3, r, alpha=0.0).item() == ce

@pytest.mark.slow
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
