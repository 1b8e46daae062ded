"""Train the demo pair: a target and a draft GPT-2 on the documentation that ships inside every CPython
(pydoc_data.topics: the text of help("for"), help("yield"), ...), so that this repository shows real text and
a real acceptance rate with no download.

    python train.py                                            # both models, into demo/target and demo/draft
    python train.py --model draft --steps 20 --out /tmp/pair   # a quick try

Both models are gpt2.py's GPT2, the code that decodes. They keep GPT-2's tokenizer and all its 50257 tokens,
but train on the 5170 that the corpus uses (an output layer 10 times narrower, so 10 times cheaper here); the
others get one shared row that keeps their total probability below 1e-6 (see expand). A run that is cut short
resumes from its last evaluation (checkpoints/train-<model>/); --fresh starts over.
"""
from __future__ import annotations
import argparse, contextlib, json, math, pathlib, sys, time
from typing import Iterator
import numpy as np
from tinygrad import Context, Tensor, TinyJit, dtypes, nn
from tinygrad.helpers import tqdm
from tinygrad.nn.state import get_parameters, get_state_dict, load_state_dict, safe_load, safe_save
from cli import heartbeat
from gpt2 import GPT2, GPT2Config, SEARCH
from weights import load_tokenizer, save_model

ROOT = pathlib.Path(__file__).resolve().parent
# name: (shape, training steps, peak learning rate); a step is one sequence of 256 tokens
SIZES = {
  "target": (GPT2Config(n_layer=4, n_head=4, n_embd=256, n_ctx=256), 1500, 1e-3),
  "draft":  (GPT2Config(n_layer=2, n_head=2, n_embd=128, n_ctx=256), 1000, 2e-3),
}
BATCH, WARMUP, EVAL_EVERY = 1, 100, 500
OFF = 1000.0  # every token the corpus never uses gets the logit -OFF: see expand

def corpus(enc) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """The training and validation token streams (every 10th topic held out, whole) and the sorted token ids
  that the corpus uses; topics are joined by a blank line."""
  from pydoc_data.topics import topics
  names = sorted(topics)
  val = [topics[n] for n in names[::10]]
  train = [topics[n] for i, n in enumerate(names) if i % 10]
  train_ids, val_ids = (np.array(enc.encode("\n\n".join(t)), dtype=np.int32) for t in (train, val))
  return train_ids, val_ids, np.unique(np.concatenate([train_ids, val_ids]))

def init(model: GPT2) -> None:
  """GPT-2's initialisation: N(0, 0.02) weights, zero biases, the residual projections' weights scaled by
  1/sqrt(2 layers); LayerNorms keep gain 1 and bias 0."""
  for name, w in get_state_dict(model).items():
    if ".ln" in name or name.startswith("ln"):
      continue
    if name.endswith("bias"):
      w.replace(Tensor.zeros(*w.shape))
    else:
      std = 0.02 / math.sqrt(2 * model.config.n_layer) if name.endswith("c_proj.weight") else 0.02
      w.replace(Tensor.normal(*w.shape, std=std))

def pin(model: GPT2) -> None:
  """Hold the last feature of ln_f's output at 1 (gain 0, bias 1): the tied LM head's last column is then a
  per-token bias, and expand sets it very negative for the tokens the corpus never uses."""
  C = model.config.n_embd
  model.ln_f.weight.assign(model.ln_f.weight * (Tensor.arange(C) < C - 1))
  model.ln_f.bias.assign(model.ln_f.bias * (Tensor.arange(C) < C - 1) + (Tensor.arange(C) == C - 1))

def expand(model: GPT2, used: np.ndarray) -> GPT2:
  """The model over GPT-2's full vocabulary: the corpus's tokens keep their trained rows; every other token
  gets the row (0, ..., 0, -OFF), whose logit is -OFF as ln_f's last feature is always 1. A trained logit is
  far above -1000 + ln(50257), so those tokens together get less than 1e-6 of the mass at every position."""
  cfg = model.config
  full = GPT2(GPT2Config(cfg.n_layer, cfg.n_head, cfg.n_embd, 50257, cfg.n_ctx))
  wte = np.zeros((50257, cfg.n_embd), np.float32)
  wte[:, -1] = -OFF
  wte[used] = model.wte.weight.numpy()
  state = get_state_dict(model) | {"wte.weight": Tensor(wte)}
  load_state_dict(full, {k: v for k, v in state.items() if not k.endswith("cache_kv")}, verbose=False)
  return full

def batch(tokens: np.ndarray, seed: int, step: int, T: int) -> tuple[Tensor, Tensor]:
  """BATCH random windows of T + 1 tokens, the same for the same seed and step (so a resumed run sees the
  batches an uncut one would): inputs and next-token targets."""
  starts = np.random.default_rng([seed, step]).integers(0, len(tokens) - T - 1, BATCH)
  windows = np.stack([tokens[s:s + T + 1] for s in starts])
  return Tensor(windows[:, :-1]), Tensor(windows[:, 1:])

def evaluate(model: GPT2, tokens: np.ndarray, T: int) -> float:
  """Mean cross-entropy (nats per token) over the stream cut into windows of T tokens, each predicted from
  the start of its window."""
  n = (len(tokens) - 1) // T
  x, y = tokens[:n * T].reshape(n, T), tokens[1:n * T + 1].reshape(n, T)
  losses = [model.logits(Tensor(x[i:i + BATCH])).sparse_categorical_crossentropy(Tensor(y[i:i + BATCH]),
            reduction="sum").item() for i in range(0, n, BATCH)]
  return sum(losses) / (n * T)

def learning_rate(step: int, steps: int, peak: float) -> float:
  """Linear warm-up over WARMUP steps, then a cosine down to a tenth of the peak."""
  if step < WARMUP:
    return peak * (step + 1) / WARMUP
  return peak * (0.1 + 0.45 * (1 + math.cos(math.pi * (step - WARMUP) / max(steps - WARMUP, 1))))

def train_step(model: GPT2, opt: nn.optim.Optimizer) -> TinyJit:
  """One compiled training step: step(x, y, lr) takes a batch of inputs and targets (B, T) and the learning
  rate (1,), updates the weights with AdamW, and returns the batch's mean cross-entropy before the update."""
  params = get_parameters(model)
  @TinyJit
  def step(x: Tensor, y: Tensor, lr: Tensor) -> Tensor:
    opt.lr.assign(lr)
    opt.zero_grad()
    loss = model.logits(x).sparse_categorical_crossentropy(y).backward()
    opt.step()
    pin(model)
    return loss.realize(*params)
  return step

@contextlib.contextmanager
def compiling(name: str) -> Iterator[None]:
  """Around the step's first two calls, which compile it (run, then capture): search its kernels then (cached
  on disk, so once per machine), saying so every minute."""
  with Context(BEAM=SEARCH), heartbeat(lambda: f"{name}: compiling the training step", 60):
    yield

def resume(ckpt: pathlib.Path, model: GPT2, opt: nn.optim.Optimizer, steps: int, seed: int) -> int:
  """Load the training state saved in ckpt by a run with the same steps and seed; the step to go on from."""
  if not (ckpt / "state.json").is_file():
    return 0
  state = json.loads((ckpt / "state.json").read_text())
  if (state.get("steps"), state.get("seed")) != (steps, seed):
    print(f"{ckpt} holds a run of {state.get('steps')} steps, seed {state.get('seed')}: starting over",
          file=sys.stderr)
    return 0
  load_state_dict([model, opt], safe_load(ckpt / "state.safetensors"), verbose=False)
  print(f"resuming at step {state['step']} from {ckpt}", file=sys.stderr)
  return state["step"]

def train(name: str, cfg: GPT2Config, steps: int, peak: float, out: pathlib.Path, seed: int,
          fresh: bool) -> None:
  """Train one model on the corpus's tokens, print its validation loss, save it over the full vocabulary."""
  enc = load_tokenizer()
  train_ids, val_ids, used = corpus(enc)
  remap = np.zeros(enc.n_vocab, np.int32)
  remap[used] = np.arange(len(used))
  train_ids, val_ids = remap[train_ids], remap[val_ids]  # the corpus's tokens, numbered 0 .. len(used) - 1
  Tensor.manual_seed(seed)
  model = GPT2(GPT2Config(cfg.n_layer, cfg.n_head, cfg.n_embd, len(used), cfg.n_ctx))
  init(model)
  opt = nn.optim.AdamW(get_parameters(model), lr=peak, b1=0.9, b2=0.95, weight_decay=0.1)
  ckpt = ROOT / "checkpoints" / f"train-{name}"
  start = 0 if fresh else resume(ckpt, model, opt, steps, seed)
  pin(model)
  Tensor.realize(*get_parameters(model))
  step, T = train_step(model, opt), cfg.n_ctx
  print(f"{name}: {cfg.n_layer} layers, {cfg.n_embd} wide; {len(train_ids):,} training and {len(val_ids):,} "
        f"validation tokens; {steps} steps of {BATCH * T} tokens", file=sys.stderr)
  with Context(TRAINING=1):
    bar, t0 = tqdm(range(start, steps), desc=name, total=steps - start), time.perf_counter()
    for s in bar:
      with compiling(name) if s < start + 2 else contextlib.nullcontext():
        loss = step(*batch(train_ids, seed, s, T), Tensor([learning_rate(s, steps, peak)])).item()
      rate = BATCH * T * (s + 1 - start) / (time.perf_counter() - t0)
      bar.set_description(f"{name} loss {loss:.3f} {rate:.0f} tok/s")
      if (s + 1) % EVAL_EVERY == 0 or s + 1 == steps:
        with Context(TRAINING=0):
          val = evaluate(model, val_ids, T)
        print(f"\n{name} step {s + 1}: validation loss {val:.3f}, perplexity {math.exp(val):.1f}",
              file=sys.stderr)
        ckpt.mkdir(parents=True, exist_ok=True)
        safe_save(get_state_dict([model, opt]), str(ckpt / "state.safetensors"))
        state = {"step": s + 1, "steps": steps, "seed": seed, "val_loss": val}
        (ckpt / "state.json").write_text(json.dumps(state))
  save_model(expand(model, used), out / name, dtypes.float16)
  print(f"{name}: saved to {out / name} after {time.perf_counter() - t0:.0f} s", file=sys.stderr)

def main() -> None:
  ap = argparse.ArgumentParser(description="Train the demo pair on Python's own documentation: the target, "
                               "then the draft, into demo/ (see docs/demo.md).")
  ap.add_argument("--model", choices=[*SIZES, "both"], default="both")
  ap.add_argument("--steps", type=int, help="training steps (default: as shipped)")
  ap.add_argument("--out", default=str(ROOT / "demo"), help="where to write the checkpoints (default demo/)")
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--fresh", action="store_true", help="ignore a saved training state and start over")
  args = ap.parse_args()
  for name in SIZES if args.model == "both" else [args.model]:
    cfg, steps, lr = SIZES[name]
    train(name, cfg, args.steps or steps, lr, pathlib.Path(args.out), args.seed, args.fresh)

if __name__ == "__main__":
  main()
