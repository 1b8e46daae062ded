"""The trainer of the demo pair: a target and a draft GPT-2 trained on Python's own documentation, so that this
repository shows real text and a real acceptance rate with no download. Run it from the repository's root:

    python -m demo.train --model target   # into demo/target (resumes from checkpoints/train-target/)
    python -m demo.train --model draft    # into demo/draft
    python -m demo.train --eval           # held-out perplexity of the pair in demo/ and of the bigram baseline
    python -m demo.train --model draft --steps 50 --out /tmp/pair   # a quick try

The corpus is the documentation's reStructuredText sources turned into prose, split by file (demo/corpus.py;
--docs names the sources' folder). The models keep GPT-2's tokenizer and all its 50257 tokens, but train on the
11,041 that the training files use at least corpus.MIN_COUNT times (an output layer 4.5 times narrower, so about
that much cheaper) and one row, OTHER, that every other token shares as input and that is never a target;
exported, all the others get that row, which keeps their total probability below 1e-6 (see expand). Each model
keeps a moving average of its weights (follow), is early stopped on the held-out files and then
temperature-scaled on them (calibrate). SIZES are the recipes that made the pair in demo/.

The training loop runs in PyTorch, on Hugging Face's own GPT2LMHeadModel (requirements-hf.txt), on a GPU when
torch has one and on one CPU core otherwise, where it trains these shapes many times faster than tinygrad 0.14's
default kernels (how much, measured: docs/demo.md, "Why PyTorch"). Everything after training is this project's
own code: the weights are exported through gpt2.py's GPT2 and weights.save_model, and --eval scores the shipped
float16 files with gpt2.py. A run that is cut short resumes from its last evaluation (--checkpoints); --fresh
starts over.
"""
from __future__ import annotations
import argparse, hashlib, json, math, pathlib, re, sys, time
from collections import Counter
from dataclasses import dataclass, replace
import numpy as np
from tinygrad import Context, Tensor, TinyJit, dtypes
from tinygrad.nn.state import load_state_dict
from gpt2 import GPT2, GPT2Config
from sampling import Sampling
from weights import hf_to_tinyspec, load_tokenizer, save_model, weights_of
from demo.corpus import DOCS, corpus

ROOT = pathlib.Path(__file__).resolve().parents[1]  # the repository's root: demo/ and checkpoints/ are in it
OFF = 1000.0  # every token the corpus never uses gets the logit -OFF: see expand

@dataclass(frozen=True)
class Recipe:
  shape: GPT2Config
  steps: int            # at most this many steps of `batch` windows of n_ctx tokens (early stopping: fewer)
  lr: float             # the peak learning rate
  dropout: float        # on the embeddings, the attention weights and each residual branch
  weight_decay: float   # AdamW's, on the matrices and the embeddings (not on biases and LayerNorms)
  batch: int = 8
  warmup: int = 100
  eval_every: int = 100
  patience: int = 4     # stop after this many evaluations without a better validation loss
  average: float = 0.0  # evaluate and keep a moving average of the weights with this decay (0: none)
  unlikelihood: int = 0   # then this many steps of unlikelihood fine-tuning against greedy loops (see finetune)
  unlikelihood_lr: float = 4e-4  # its peak learning rate
  continuations: int = 32  # greedy continuations written and checked for loops at each unlikelihood step
  token_unlikelihood: float = 1.0  # the weight of token-level unlikelihood on the fine-tune's cross-entropy steps

SIZES = {  # the recipes of the pair shipped in demo/ (docs/demo.md)
  "target": Recipe(GPT2Config(n_layer=6, n_head=4, n_embd=256, n_ctx=256), 8000, 1e-3, 0.1, 0.1, warmup=200,
                   eval_every=250, average=0.99, unlikelihood=2000),
  "draft":  Recipe(GPT2Config(n_layer=2, n_head=2, n_embd=64, n_ctx=256), 6000, 3e-3, 0.0, 0.1, warmup=200,
                   eval_every=250, average=0.99),
}
def emit_index(tokens: np.ndarray, used: np.ndarray) -> np.ndarray:
  """GPT-2's token ids as the pair's own: token used[i] is i, every token not in used is len(used), the row
  OTHER that every such token shares (see expand). A model never emits OTHER, and no perplexity here scores it
  as a target."""
  i = np.minimum(np.searchsorted(used, tokens), len(used) - 1)
  return np.where(used[i] == tokens, i, len(used))

def windows(tokens: np.ndarray, T: int) -> tuple[np.ndarray, np.ndarray]:
  """The stream cut into windows of T tokens: inputs (n, T) and their next tokens (n, T); each window is
  predicted from its own start. Every perplexity here is over these targets."""
  n = (len(tokens) - 1) // T
  return tokens[:n * T].reshape(n, T), tokens[1:n * T + 1].reshape(n, T)

def bigram_perplexity(train_ids: np.ndarray, val_ids: np.ndarray, used: np.ndarray, T: int = 256) -> float:
  """The baseline: 0.6 x bigram + 0.4 x add-one unigram, both over the tokens `used` (what the pair may emit),
  fit on train_ids, scoring the same targets of val_ids as a model does (windows of T, targets not in used left
  out): the previous token is always known, and may be one not in used (OTHER, one more context). After a token
  never seen in training the bigram term is the unigram's."""
  V = len(used)
  t = emit_index(train_ids, used).astype(np.int64)
  x0, y0 = t[:-1][t[1:] < V], t[1:][t[1:] < V]  # the training pairs, counted over the tokens in used
  keys, counts = np.unique(x0 * (V + 1) + y0, return_counts=True)
  rows = np.bincount(x0, minlength=V + 1)  # how often each context is followed by a token in used
  unigram = (np.bincount(t, minlength=V + 1)[:V] + 1) / ((t < V).sum() + V)
  x, y = (emit_index(a, used).astype(np.int64).ravel() for a in windows(val_ids, T))
  x, y = x[y < V], y[y < V]
  at = np.minimum(np.searchsorted(keys, x * (V + 1) + y), len(keys) - 1)
  pair = np.where(keys[at] == x * (V + 1) + y, counts[at], 0)
  bigram = np.where(rows[x] > 0, pair / np.maximum(rows[x], 1), unigram[y])
  return float(np.exp(-np.mean(np.log(0.6 * bigram + 0.4 * unigram[y]))))

def perplexity(model: GPT2, tokens: np.ndarray, T: int | None = None, used: np.ndarray | None = None) -> float:
  """A gpt2.py model's perplexity on a token stream, over windows of T (default its context) tokens: training's
  forward (model.logits) compiled once for one window, then replayed for each. With used (the tokens the model
  may emit), over the model restricted to them (see restrict), and over the targets in used only: an output
  layer len(used) + 1 rows wide, not 50257, and the same up to the mass the other tokens get (the demo pair's:
  less than 1e-6, see expand)."""
  ignore = -1
  if used is not None:
    model, tokens, ignore = restrict(model, used), emit_index(tokens, used), len(used)
  x, y = windows(tokens, T or model.config.n_ctx)
  nll = TinyJit(lambda x, y: model.logits(x).float().sparse_categorical_crossentropy(y, ignore_index=ignore,
                                                                                     reduction="sum").realize())
  total = sum(nll(Tensor(x[i:i + 1]).realize(), Tensor(y[i:i + 1]).realize()).item() for i in range(len(x)))
  return math.exp(total / (y != ignore).sum())

# --- greedy text ---

WORD = re.compile(r"[A-Za-z]+")  # a word, to the sentence check: a run of letters (the corpus's words are the same)

def sentence_faults(text: str, words: set[str]) -> list[str]:
  """What keeps text from being sentences of the docs: fewer than 25 words, a run of blank lines, under 90 %
  of its words (runs of letters) words of the corpus, a 4-gram of words repeated more than twice."""
  found = WORD.findall(text)
  faults = []
  if len(found) < 25:
    faults.append(f"{len(found)} words")
  if re.search(r"\n[ \t]*\n[ \t]*\n", text):
    faults.append("a run of blank lines")
  if found and sum(w in words for w in found) < 0.9 * len(found):
    faults.append(f"{sum(w not in words for w in found)} of {len(found)} words not in the corpus")
  grams = Counter(tuple(w.lower() for w in found[i:i + 4]) for i in range(len(found) - 3))
  if grams and max(grams.values()) > 2:
    faults.append(f"the 4-gram {' '.join(grams.most_common(1)[0][0])!r} {grams.most_common(1)[0][1]} times")
  return faults

def openings(val_text: str, n: int) -> list[str]:
  """n sentence openings (a capital word and five lower-case words) drawn (seed 1) from the held-out files' text:
  docs-style prompts that the training text cannot hold verbatim and that nobody chose by hand."""
  found = list(dict.fromkeys(re.findall(r"(?:^|(?<=\. ))([A-Z][a-z]+(?: [a-z]+){5})", val_text, re.M)))
  return [found[i] for i in sorted(np.random.default_rng(1).choice(len(found), n, replace=False))]

GREEDY = Sampling(0)  # the argmax at every step

def greedy_faults(model: GPT2, enc, prompts: list[str], words: set[str]) -> list[tuple[str, str, list[str]]]:
  """(prompt, text, faults) for each prompt whose greedy continuation (64 tokens) sentence_faults finds fault with."""
  from speculative import autoregressive_sample
  texts = [enc.decode(autoregressive_sample(model, enc.encode(p), 64, sampling=GREEDY, eos=None)[0]) for p in prompts]
  found = [(p, text, sentence_faults(text, words)) for p, text in zip(prompts, texts)]
  return [f for f in found if f[2]]

# --- the full vocabulary ---

def expand(model: GPT2, used: np.ndarray) -> GPT2:
  """The model over GPT-2's full vocabulary: the tokens `used` keep their trained rows (the model's first
  len(used)); every other token gets the row (0, ..., 0, -OFF), the OTHER row that training pins (see pin),
  whose logit is -OFF times ln_f's last feature, a constant: 1 (see pin), or 1 / the temperature after
  calibrate, at least 0.6. A trained logit is far above -600 + ln(50257), so those tokens together get less
  than 1e-6 of the mass everywhere."""
  cfg = model.config
  full = GPT2(GPT2Config(cfg.n_layer, cfg.n_head, cfg.n_embd, 50257, cfg.n_ctx))
  wte = np.zeros((50257, cfg.n_embd), np.float32)
  wte[:, -1] = -OFF
  wte[used] = model.wte.weight.numpy()[:len(used)]
  load_state_dict(full, weights_of(model) | {"wte.weight": Tensor(wte)}, verbose=False)
  return full

def restrict(model: GPT2, used: np.ndarray) -> GPT2:
  """expand's inverse: the model over the tokens `used` and OTHER only (token used[i] is its token i, every
  other token its token len(used): see emit_index), sharing weights."""
  cfg = model.config
  other = int(np.setdiff1d(np.arange(len(used) + 1), used)[0])  # a token not in used: its row is OTHER's
  small = GPT2(GPT2Config(cfg.n_layer, cfg.n_head, cfg.n_embd, len(used) + 1, cfg.n_ctx))
  load_state_dict(small, weights_of(model) | {"wte.weight": Tensor(model.wte.weight.numpy()[[*used, other]])},
                  verbose=False)
  return small

# --- training, in PyTorch ---

def hf_model(cfg: GPT2Config, vocab: int, dropout: float):
  """Hugging Face's GPT2LMHeadModel of this shape over `vocab` tokens, with GPT-2's initialisation; its state
  dict is the Hub's layout, which weights.hf_to_tinyspec reads."""
  import transformers
  config = transformers.GPT2Config(vocab_size=vocab, n_positions=cfg.n_ctx, n_embd=cfg.n_embd, n_layer=cfg.n_layer,
                                   n_head=cfg.n_head, layer_norm_epsilon=cfg.norm_eps, resid_pdrop=dropout,
                                   embd_pdrop=dropout, attn_pdrop=dropout, activation_function="gelu_new")
  return transformers.GPT2LMHeadModel(config)

def pin(hf) -> None:
  """Hold the last feature of ln_f's output at 1 (gain 0, bias 1): the tied LM head's last column is then a
  per-token bias. And hold the last row of the embedding, OTHER (the row every token the pair may not emit
  shares: see emit_index), at (0, ..., 0, -OFF): its logit is then -OFF, and expand gives that row to every such
  token of GPT-2's vocabulary, so that the model trains with the very row it is exported with."""
  import torch
  with torch.no_grad():
    hf.transformer.ln_f.weight[-1] = 0.0
    hf.transformer.ln_f.bias[-1] = 1.0
    hf.transformer.wte.weight[-1] = 0.0
    hf.transformer.wte.weight[-1, -1] = -OFF

def to_gpt2(hf, cfg: GPT2Config, vocab: int) -> GPT2:
  """The torch model's weights in gpt2.py's GPT2 (float32)."""
  model = GPT2(GPT2Config(cfg.n_layer, cfg.n_head, cfg.n_embd, vocab, cfg.n_ctx))
  state = {k: Tensor(v.detach().float().cpu().numpy().copy()) for k, v in hf.state_dict().items()}
  load_state_dict(model, hf_to_tinyspec(state, dtypes.float32), verbose=False, strict=False)
  return model

def to_torch(hf, a: np.ndarray):
  """Token ids as a torch tensor on the model's device (a GPU when torch has one: see train)."""
  import torch
  return torch.from_numpy(a.astype(np.int64)).to(hf.device)

def batch(tokens: np.ndarray, seed: int, step: int, B: int, T: int) -> tuple[np.ndarray, np.ndarray]:
  """B random windows of T + 1 tokens, the same for the same seed and step (so a resumed run sees the batches
  an uncut one would): inputs and next-token targets."""
  starts = np.random.default_rng([seed, step]).integers(0, len(tokens) - T - 1, B)
  w = np.stack([tokens[s:s + T + 1] for s in starts])
  return w[:, :-1], w[:, 1:]

def learning_rate(step: int, steps: int, peak: float, warmup: int) -> float:
  """Linear warm-up over `warmup` steps, then a cosine down to a tenth of the peak at `steps`."""
  if step < warmup:
    return peak * (step + 1) / warmup
  return peak * (0.1 + 0.45 * (1 + math.cos(math.pi * min(step - warmup, steps - warmup) / max(steps - warmup, 1))))

def scores(hf, val: np.ndarray, T: int, temperatures=(1.0,), chunk: int = 2) -> list[float]:
  """Mean cross-entropy (nats per token) of the torch model on the held-out windows, dropout off, its logits
  divided by each temperature; targets that are OTHER (the model's last token) left out. In chunks of windows,
  so that the logits of a large held-out set need not fit in memory at once."""
  import torch
  x, y = windows(val, T)
  other = hf.config.vocab_size - 1
  totals, count = np.zeros(len(temperatures)), 0
  hf.eval()
  with torch.no_grad():
    for i in range(0, len(x), chunk):
      logits = hf(to_torch(hf, x[i:i + chunk])).logits.reshape(-1, hf.config.vocab_size)
      target = to_torch(hf, y[i:i + chunk]).reshape(-1)
      for k, t in enumerate(temperatures):
        totals[k] += float(torch.nn.functional.cross_entropy(logits / t, target, ignore_index=other,
                                                             reduction="sum"))
      count += int((target != other).sum())
  hf.train()
  return list(totals / count)

def val_loss(hf, val: np.ndarray, T: int, temperature: float = 1.0) -> float:
  """Mean cross-entropy (nats per token) of the torch model on the held-out windows (see scores)."""
  return scores(hf, val, T, (temperature,))[0]

TEMPERATURES = [1 + i / 40 for i in range(25)]  # 1 to 1.6 in steps of 0.025

def calibrate(hf, val: np.ndarray, T: int) -> float:
  """Temperature scaling (Guo et al. 2017), chosen like early stopping on the held-out files: the temperature
  in TEMPERATURES whose logits / temperature score them best. The models are overconfident on text they have
  not seen (1.0 would keep them as trained). Folded into the weights: ln_f's gain and bias are divided by it, so
  every logit is (ln_f's last feature, the pinned 1, becomes 1 / temperature: see expand)."""
  import torch
  found = scores(hf, val, T, TEMPERATURES)
  best = TEMPERATURES[int(np.argmin(found))]
  with torch.no_grad():
    hf.transformer.ln_f.weight /= best
    hf.transformer.ln_f.bias /= best
  return best

def optimizer(hf, lr: float, weight_decay: float):
  """AdamW (beta = 0.9, 0.95), with weight decay on the matrices and embeddings only."""
  import torch
  decay = [p for n, p in hf.named_parameters() if p.dim() == 2]
  rest = [p for n, p in hf.named_parameters() if p.dim() != 2]
  return torch.optim.AdamW([{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}],
                           lr=lr, betas=(0.9, 0.95))

def cross_entropy(hf, tokens: np.ndarray, seed: int, step: int, r: Recipe, alpha: float = 0.0):
  """Training's loss on batch `step`: the next-token cross-entropy; targets that are OTHER (the model's last
  token: see emit_index) left out. With alpha, plus alpha times token-level unlikelihood (Welleck et al. 2020,
  section 4): at each position, every token that the window already held, but the target, is pushed down by
  -log(1 - p(token)), summed over those tokens and averaged over positions."""
  import torch
  x, y = batch(tokens, seed, step, r.batch, r.shape.n_ctx)
  x, y = to_torch(hf, x), to_torch(hf, y)
  logits = hf(x).logits
  loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1),
                                           ignore_index=logits.shape[-1] - 1)
  if not alpha:
    return loss
  seen = torch.zeros_like(logits).scatter_(2, x[:, :, None], 1.0).cummax(1).values  # x[:, :t + 1] held the token
  seen = seen.scatter_(2, y[:, :, None], 0.0)
  seen[..., -1] = 0.0  # OTHER: never a candidate
  p = logits.float().softmax(-1)
  return loss - alpha * (torch.log((1 - p).clamp(min=1e-5)) * seen).sum() / y.numel()

def repeats(seq: list[int], start: int, n: int = 4) -> np.ndarray:
  """True at every token of seq[start:] that lies in an n-gram which seq[start:] already held: a loop's tokens."""
  loop, seen = np.zeros(len(seq), bool), set()
  for i in range(start, len(seq) - n + 1):
    gram = tuple(seq[i:i + n])
    if gram in seen:
      loop[i:i + n] = True
    seen.add(gram)
  return loop

WORD_BYTES = re.compile(WORD.pattern.encode())  # WORD, over bytes: strays and the sentence check agree on a word

def written(enc, train_ids: np.ndarray, used: np.ndarray) -> tuple[list[bytes], set[bytes]]:
  """What strays reads: each of the pair's tokens as bytes (token used[i] is its i; OTHER: none), and the words
  of the training text (GPT-2's ids)."""
  pieces = [enc.decode_single_token_bytes(int(i)) for i in used] + [b""]
  return pieces, set(WORD_BYTES.findall(enc.decode_bytes(train_ids.tolist())))

def strays(seq: list[int], start: int, pieces: list[bytes], words: set[bytes]) -> np.ndarray:
  """True at every token of seq[start:] that lies in a word (a run of letters) the training text never uses: the
  junk glued from sub-word tokens ("kindscyitations") that pushing down loops alone leaves. The text's last word
  may be cut off, and is left alone."""
  text = b"".join(pieces[t] for t in seq)
  ends = np.cumsum([len(pieces[t]) for t in seq])
  junk = np.zeros(len(seq), bool)
  for m in WORD_BYTES.finditer(text):
    if m.end() < len(text) and m.group() not in words:
      first, last = (int(np.searchsorted(ends, b, side="right")) for b in (m.start(), m.end() - 1))
      junk[max(first, start):last + 1] = True
  return junk

def greedy_loops(hf, tokens: np.ndarray, rng: np.random.Generator, B: int, vocab: tuple[list[bytes], set[bytes]],
                 new: int = 64):
  """The model's greedy continuations (`new` tokens, as it writes them: no dropout) of B prefixes of the training
  text, 4 to 32 tokens long, and where they go wrong: the (B, P + new) tokens, and (B, new) True at every token of
  a continuation that lies in a 4-gram the continuation already held (repeats) or in a word the training text
  never uses (strays, with vocab from written)."""
  import torch
  P = int(rng.integers(4, 33))
  prefix = to_torch(hf, np.stack([tokens[s:s + P] for s in rng.integers(0, len(tokens) - P, B)]))
  hf.eval()
  with torch.no_grad():
    seq = hf.generate(prefix, attention_mask=torch.ones_like(prefix), max_new_tokens=new, do_sample=False,
                      pad_token_id=0)
  hf.train()
  bad = [repeats(row, P) | strays(row, P, *vocab) for row in seq.tolist()]
  return seq, torch.from_numpy(np.stack([b[P:] for b in bad])).to(hf.device)

def unlikelihood_loss(hf, seq, loop):
  """Sequence-level unlikelihood (Welleck et al. 2020, "Neural Text Generation with Unlikelihood Training", 5.2):
  each token of seq's continuations (its last loop.shape[1] tokens) where loop is True is pushed down, by
  -log(1 - p(token)); the mean over the continuations' tokens."""
  import torch
  new = loop.shape[1]
  p = hf(seq[:, :-1]).logits[:, -new:].softmax(-1).gather(-1, seq[:, -new:, None])[..., 0]
  return -(torch.log((1 - p).clamp(min=1e-5)) * loop).sum() / loop.numel()

def optimizer_step(hf, opt, loss) -> None:
  """One optimiser step on loss, then ln_f's last feature pinned again (see pin)."""
  opt.zero_grad()
  loss.backward()
  opt.step()
  pin(hf)

def follow(avg, hf, decay: float) -> None:
  """One step of the weights' exponential moving average (Polyak averaging): avg's weights move 1 - decay of
  the way to hf's. Without averaging avg is hf itself."""
  import torch
  if avg is not hf:
    with torch.no_grad():
      for a, p in zip(avg.parameters(), hf.parameters()):
        a.lerp_(p, 1 - decay)

def averaged(hf, decay: float):
  """The model whose weights follow hf's moving average (see follow), starting at hf's; hf itself with decay 0."""
  import copy
  return copy.deepcopy(hf) if decay else hf

# the recipe's fields that pretraining does not read
FINETUNING = ("unlikelihood", "unlikelihood_lr", "continuations", "token_unlikelihood")

def fingerprint(r: Recipe, seed: int, data: str, ignore: tuple[str, ...] = ()) -> str:
  """What marks a phase's saved state as its own: the recipe's fields but those the phase does not read, the
  seed and the data's hash."""
  return repr({k: v for k, v in r.__dict__.items() if k not in ignore}) + f"|seed={seed}|data={data}"

def resume(ckpt: pathlib.Path, phase: str, recipe: str, hf, opt, avg, state: dict, finished) -> dict:
  """The saved state of this phase of a run (ckpt/<phase>.json and .pt) if it was made by the same recipe, with
  the model, optimiser and averaged model loaded from it (not needed, and not read, when finished(state) says
  the phase is over); else state, to start over."""
  import torch
  if not (ckpt / f"{phase}.json").is_file():
    return state
  saved = json.loads((ckpt / f"{phase}.json").read_text())
  if saved.get("recipe") != recipe:
    print(f"{ckpt} holds another recipe ({saved.get('recipe')}): starting over", file=sys.stderr)
    return state
  if finished(saved):
    return saved
  blob = torch.load(ckpt / f"{phase}.pt", weights_only=True, map_location="cpu")
  hf.load_state_dict(blob["model"])
  opt.load_state_dict(blob["opt"])
  avg.load_state_dict(blob["average"])
  print(f"resuming {phase} at step {saved['step']} from {ckpt}", file=sys.stderr)
  return saved

def save(ckpt: pathlib.Path, phase: str, recipe: str, hf, opt, avg, state: dict) -> None:
  """What resume reads: the model, the optimiser, the averaged model and the phase's state, marked with its
  recipe."""
  import torch
  ckpt.mkdir(parents=True, exist_ok=True)
  torch.save({"model": hf.state_dict(), "opt": opt.state_dict(), "average": avg.state_dict()}, ckpt / f"{phase}.pt")
  (ckpt / f"{phase}.json").write_text(json.dumps(state | {"recipe": recipe}))

def pretrain(hf, r: Recipe, ckpt: pathlib.Path, train_ids: np.ndarray, val_ids: np.ndarray, seed: int,
             fresh: bool, data: str = "") -> None:
  """Training proper: cross-entropy on random windows, the held-out files scored every r.eval_every steps and
  the best weights kept (ckpt/best.pt); stop r.patience evaluations after the best or at r.steps. With
  r.average, the weights scored and kept are the moving average's (follow). Ends with the best weights in hf."""
  import torch
  opt, avg = optimizer(hf, r.lr, r.weight_decay), averaged(hf, r.average)
  recipe = fingerprint(r, seed, data, FINETUNING)
  finished = lambda st: st["step"] >= r.steps or st["step"] - st["best_step"] >= r.patience * r.eval_every
  state = {"step": 0, "best": float("inf"), "best_step": 0, "history": []}
  state = state if fresh else resume(ckpt, "state", recipe, hf, opt, avg, state, finished)
  t0, s0 = time.perf_counter(), state["step"]
  hf.train()
  while not finished(state):
    s = state["step"]
    torch.manual_seed(seed * 1_000_003 + s)  # dropout's masks: the same for a resumed run
    for g in opt.param_groups:
      g["lr"] = learning_rate(s, r.steps, r.lr, r.warmup)
    loss = cross_entropy(hf, train_ids, seed, s, r)
    optimizer_step(hf, opt, loss)
    follow(avg, hf, r.average)
    state["step"] = s + 1
    if state["step"] % r.eval_every == 0 or state["step"] == r.steps:
      val = val_loss(avg, val_ids, r.shape.n_ctx)
      rate = r.batch * r.shape.n_ctx * (state["step"] - s0) / (time.perf_counter() - t0)
      epochs = state["step"] * r.batch * r.shape.n_ctx / len(train_ids)
      state["history"].append([state["step"], round(loss.item(), 4), round(val, 4)])
      print(f"step {state['step']} ({epochs:.1f} epochs): training loss {loss.item():.3f}, validation loss "
            f"{val:.3f}, perplexity {math.exp(val):.1f}; {rate:.0f} tokens/s", file=sys.stderr, flush=True)
      if val < state["best"]:
        state["best"], state["best_step"] = val, state["step"]
        ckpt.mkdir(parents=True, exist_ok=True)
        torch.save(avg.state_dict(), ckpt / "best.pt")
      save(ckpt, "state", recipe, hf, opt, avg, state)
  hf.load_state_dict(torch.load(ckpt / "best.pt", weights_only=True, map_location="cpu"))
  print(f"the best: step {state['best_step']}, validation perplexity {math.exp(state['best']):.1f}", file=sys.stderr)

def finetune(hf, r: Recipe, ckpt: pathlib.Path, train_ids: np.ndarray, val_ids: np.ndarray, seed: int,
             fresh: bool, data: str, vocab: tuple[list[bytes], set[bytes]]) -> None:
  """r.unlikelihood steps from the early-stopped weights against the loops of greedy text ("the function is
  called with the same arguments as the function. The function is called ..."): every other step pushes down
  the loops and stray words of the model's own greedy continuations (greedy_loops, unlikelihood_loss; vocab from
  written), and the steps between are training's cross-entropy on windows pretrain never drew, which keeps it a
  model of the docs, plus r.token_unlikelihood times token-level unlikelihood (Welleck et al. alternate the two,
  and add the token-level term to the cross-entropy). Loops alone pushed down, a model this small falls to
  junk words glued from sub-word tokens; the stray words and the token-level term hold that back (docs/log.md
  has the figures). The learning rate decays along a cosine from r.unlikelihood_lr to a tenth of it. hf ends
  as the moving average of its weights (follow), which is also what is scored and saved (ckpt/finetune.pt)."""
  import torch
  opt, avg = optimizer(hf, r.unlikelihood_lr, r.weight_decay), averaged(hf, r.average)
  recipe, finished = fingerprint(r, seed, data), lambda st: st["step"] >= r.unlikelihood
  state = {"step": 0, "history": []}
  state = state if fresh else resume(ckpt, "finetune", recipe, hf, opt, avg, state, finished)
  loops = []
  while not finished(state):
    s = state["step"]
    torch.manual_seed(seed * 1_000_003 + r.steps + s)
    for g in opt.param_groups:
      g["lr"] = learning_rate(s, r.unlikelihood, r.unlikelihood_lr, 0)
    if s % 2:
      seq, loop = greedy_loops(hf, train_ids, np.random.default_rng([seed, r.steps + s]), r.continuations, vocab)
      loss = unlikelihood_loss(hf, seq, loop)
      loops.append(loop.float().mean().item())
    else:
      loss = cross_entropy(hf, train_ids, seed, r.steps + s, r, r.token_unlikelihood)  # batches past pretrain's last
    optimizer_step(hf, opt, loss)
    follow(avg, hf, r.average)
    state["step"] = s + 1
    if state["step"] % r.eval_every == 0 or finished(state):
      val = val_loss(avg, val_ids, r.shape.n_ctx)
      state["history"].append([state["step"], round(float(np.mean(loops)), 4), round(val, 4)])
      print(f"unlikelihood step {state['step']}: {np.mean(loops):.0%} of greedy tokens in loops, validation "
            f"perplexity {math.exp(val):.1f}", file=sys.stderr, flush=True)
      loops = []
      save(ckpt, "finetune", recipe, hf, opt, avg, state)
  hf.load_state_dict(torch.load(ckpt / "finetune.pt", weights_only=True, map_location="cpu")["average"])

@Context(BEAM=0)  # no kernel search, whatever BEAM says: only compiled.py's Compiled.search searches
def train(name: str, r: Recipe, out: pathlib.Path, ckpt_root: pathlib.Path, seed: int, fresh: bool,
          docs: pathlib.Path = DOCS, export: bool = False) -> None:
  """Train one model on the corpus's tokens (pretrain, then finetune if the recipe asks; on a GPU when torch
  has one), calibrate it on the held-out files and save it over the full vocabulary in float16. With export, no
  training: the weights the run has kept so far (its best.pt, or with fine-tuning its finetune.pt, which a run
  under way keeps writing) are calibrated and saved, to look at a run before it ends."""
  import torch
  device = "cuda" if torch.cuda.is_available() else "cpu"
  if device == "cpu":
    torch.set_num_threads(1)  # one core: the other is for everything else
  enc = load_tokenizer()
  train_ids, val_ids, used = corpus(enc, docs)
  data = hashlib.sha1(train_ids.tobytes() + val_ids.tobytes() + used.tobytes()).hexdigest()[:12]
  vocab = written(enc, train_ids, used)
  train_ids, val_ids = emit_index(train_ids, used), emit_index(val_ids, used)  # 0 .. len(used), OTHER last
  cfg, T, t0 = r.shape, r.shape.n_ctx, time.perf_counter()
  torch.manual_seed(seed)
  hf = hf_model(cfg, len(used) + 1, r.dropout).to(device)
  pin(hf)
  print(f"{name}: {cfg.n_layer} layers, {cfg.n_embd} wide; {len(train_ids):,} training and {len(val_ids):,} "
        f"held-out tokens (data {data}), {len(used):,} that it may emit; up to {r.steps} steps of {r.batch} x {T} "
        f"tokens, on {hf.device}", file=sys.stderr)
  ckpt = ckpt_root / f"train-{name}"
  if export and r.unlikelihood and (ckpt / "finetune.pt").is_file():
    hf.load_state_dict(torch.load(ckpt / "finetune.pt", weights_only=True, map_location="cpu")["average"])
    saved = json.loads((ckpt / "finetune.json").read_text())
    print(f"exporting the fine-tuned weights of {ckpt} so far: step {saved['step']} of {r.unlikelihood}",
          file=sys.stderr)
  elif export:
    hf.load_state_dict(torch.load(ckpt / "best.pt", weights_only=True, map_location="cpu"))
    saved = json.loads((ckpt / "state.json").read_text())
    print(f"exporting the best weights of {ckpt} so far: step {saved['best_step']} of {saved['step']}",
          file=sys.stderr)
  else:
    pretrain(hf, r, ckpt, train_ids, val_ids, seed, fresh, data)
    if r.unlikelihood:
      finetune(hf, r, ckpt, train_ids, val_ids, seed, fresh, data, vocab)
  temperature = calibrate(hf, val_ids, T)
  save_model(expand(to_gpt2(hf, cfg, len(used) + 1), used), out / name, dtypes.float16)
  print(f"{name}: validation perplexity {math.exp(val_loss(hf, val_ids, T)):.1f} at temperature "
        f"{temperature:.3f} (folded into ln_f), saved to {out / name} after {time.perf_counter() - t0:.0f} s",
        file=sys.stderr)

@Context(BEAM=0)  # no kernel search, whatever BEAM says: only compiled.py's Compiled.search searches
def evaluate(folders: dict[str, pathlib.Path], prompts: int = 60, docs: pathlib.Path = DOCS) -> dict[str, float]:
  """Held-out perplexity of each saved model (as shipped: float16 files, through gpt2.py) and of the bigram
  baseline, over the targets the pair may emit, printed with the ratios and the held-out mass of the others;
  and how many greedy continuations of `prompts` held-out sentence openings fail the sentence check."""
  from weights import load_model
  enc = load_tokenizer()
  train_ids, val_ids, used = corpus(enc, docs)
  text = enc.decode(np.concatenate([train_ids, val_ids]).tolist())
  words, starts = set(WORD.findall(text)), openings(enc.decode(val_ids.tolist()), prompts)
  result = {"bigram": bigram_perplexity(train_ids, val_ids, used)}
  x, y = windows(val_ids, 256)
  print(f"docs: {len(train_ids):,} training and {len(val_ids):,} held-out tokens; {len(used):,} tokens may be "
        f"emitted; {np.mean(~np.isin(y, used)):.2%} of the held-out targets are others, left out of every score")
  print(f"  bigram: held-out perplexity {result['bigram']:7.1f}")
  for name, folder in folders.items():
    model = load_model(str(folder))
    result[name], faults = perplexity(model, val_ids, 256, used), greedy_faults(model, enc, starts, words)
    print(f"{name:>8}: held-out perplexity {result[name]:7.1f}, {result[name] / result['bigram']:.3f} x the "
          f"bigram's; greedy text of {len(faults)} of {prompts} held-out openings fails the sentence check")
  return result

def main() -> None:
  ap = argparse.ArgumentParser(prog="python -m demo.train", description="Train the demo pair on Python's own "
                               "documentation, or score it (see docs/demo.md).")
  ap.add_argument("--model", choices=[*SIZES, "both"], default="both")
  ap.add_argument("--steps", type=int, help="at most this many training steps (default: the recipe's)")
  ap.add_argument("--out", default=str(ROOT / "demo"), help="where to write the models (default demo/)")
  ap.add_argument("--checkpoints", default=str(ROOT / "checkpoints"),
                  help="where to keep the training state, to resume from (default checkpoints/)")
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--fresh", action="store_true", help="ignore a saved training state and start over")
  ap.add_argument("--eval", action="store_true", help="score the models in --out and the bigram baseline on the "
                  "held-out files; no training")
  ap.add_argument("--docs", default=str(DOCS), help=f"the documentation's reStructuredText sources (default {DOCS}, "
                  "Debian's python3.11-doc; or a CPython checkout's Doc/)")
  ap.add_argument("--export", action="store_true", help="no training: calibrate and save into --out the best "
                  "weights a run (in --checkpoints) has kept so far, to look at a run under way")
  args = ap.parse_args()
  names = list(SIZES) if args.model == "both" else [args.model]
  if args.eval:
    evaluate({n: pathlib.Path(args.out) / n for n in names}, docs=pathlib.Path(args.docs))
    return
  for name in names:
    r = replace(SIZES[name], steps=args.steps) if args.steps else SIZES[name]
    train(name, r, pathlib.Path(args.out), pathlib.Path(args.checkpoints), args.seed, args.fresh,
          pathlib.Path(args.docs), args.export)

if __name__ == "__main__":
  main()
