"""GPT-2 in tinygrad, with a preallocated KV cache: the model and nothing else, as nanoGPT's model.py is.

    from tinygrad import Tensor, dtypes
    from gpt2 import GPT2, GPT2Config
    model = GPT2(GPT2Config(n_layer=2, n_head=2, n_embd=64))  # random weights (weights.load_model: OpenAI's)
    model.prepare()                         # once, before the first forward: the zeroed KV cache
    ids = Tensor([464, 3290, 318], dtype=dtypes.int32)
    logits = model.forward(ids, 0)          # ids: T token ids (an int32 Tensor) at positions 0..T-1;
                                            # logits: float32 (T, vocab rounded up to 64), the next-token
                                            # logits at each (-inf for the tokens past the vocabulary)
    again = model.forward(ids[2:], 2)       # from position 2 on, reading the cache's positions 0 and 1
    batch = model.logits(ids.unsqueeze(0))  # training's forward: (B, T) ids at positions 0..T-1, no cache

forward writes its T positions into the cache. Rolling back is calling again with a smaller start_pos:
positions at or past it are overwritten before they are read. engine/compiled.py runs forward as compiled calls
(compiled.logits(model, ids, start_pos) returns NumPy); weights.py loads and saves the weights.
"""
from __future__ import annotations
import math
from dataclasses import dataclass
from tinygrad import Context, Tensor, UOp, dtypes, nn
from engine import layout  # how a device runs the products, layer norms and softmax below: engine/layout.py
from engine.layout import MAX_ROWS  # a compiled call's most rows: the KV cache keeps MAX_ROWS - 1 spare positions

@dataclass(frozen=True)
class GPT2Config:
  n_layer: int = 12
  n_head: int = 12
  n_embd: int = 768
  vocab_size: int = 50257
  n_ctx: int = 1024
  norm_eps: float = 1e-5

  def __post_init__(self):
    sizes = (self.n_layer, self.n_head, self.n_embd, self.vocab_size, self.n_ctx)
    if not all(type(n) is int and n > 0 for n in sizes):
      raise ValueError("n_layer, n_head, n_embd, vocab_size and n_ctx must be positive integers.")
    if self.n_embd % self.n_head:
      raise ValueError(f"n_embd {self.n_embd} is not a multiple of n_head {self.n_head}: "
                       "every head needs the same width.")

# The four sizes OpenAI released, as named on the Hugging Face Hub.
PRESETS = {
  "gpt2":        GPT2Config(n_layer=12, n_head=12, n_embd=768),    # 124M
  "gpt2-medium": GPT2Config(n_layer=24, n_head=16, n_embd=1024),   # 355M
  "gpt2-large":  GPT2Config(n_layer=36, n_head=20, n_embd=1280),   # 774M
  "gpt2-xl":     GPT2Config(n_layer=48, n_head=25, n_embd=1600),   # 1.5B
}

def causal_mask(T: int, start_pos: int | UOp) -> Tensor | None:
  """The attention mask of T queries at positions start_pos..: -inf where query i (at start_pos+i) may not see
  a key, one past start_pos+i. None for one query, which sees every key in the cache."""
  return Tensor.full((1, 1, T, start_pos + T), float("-inf")).triu(start_pos + 1) if T > 1 else None

class Attention:
  def __init__(self, cfg: GPT2Config):
    self.n_head, self.head_dim = cfg.n_head, cfg.n_embd // cfg.n_head
    self.c_attn = layout.Linear(cfg.n_embd, 3 * cfg.n_embd)  # q, k, v for all heads in one matmul
    self.c_proj = layout.Linear(cfg.n_embd, cfg.n_embd)
    self.cache_kv: Tensor | None = None  # (2, 1, n_head, n_ctx + MAX_ROWS - 1, head_dim), made on first use

  def __call__(self, x: Tensor, start_pos: int | UOp | None, mask: Tensor | None = None) -> Tensor:
    B, T, C = x.shape
    qkv = layout.fused(self.c_attn(x)).split(C, dim=2)  # one kernel on a GPU (engine/layout.py)
    q, k, v = [t.reshape(B, T, self.n_head, self.head_dim).transpose(1, 2) for t in qkv]
    if start_pos is None:  # training: a whole sequence at once, no cache
      y = q.scaled_dot_product_attention(k, v, is_causal=True)
      return self.c_proj(y.transpose(1, 2).reshape(B, T, C))
    # write this step's keys and values at start_pos .. start_pos+T-1; anything past them is stale, never read
    self.cache_kv[:, :, :, start_pos:start_pos + T].assign(Tensor.stack(k, v))
    k, v = self.cache_kv[0, :, :, :start_pos + T], self.cache_kv[1, :, :, :start_pos + T]
    scores = q.matmul(k.transpose(2, 3), dtype=dtypes.float32) / math.sqrt(self.head_dim)
    mask = causal_mask(T, start_pos) if mask is None else mask  # forward passes one for all layers
    if mask is not None:
      scores = scores + mask
    return self.c_proj(layout.attend(scores, v))  # softmax(scores) @ v, the heads side by side

class MLP:
  def __init__(self, cfg: GPT2Config):
    self.c_fc, self.c_proj = layout.Linear(cfg.n_embd, 4 * cfg.n_embd), layout.Linear(4 * cfg.n_embd, cfg.n_embd)

  def __call__(self, x: Tensor) -> Tensor:
    return self.c_proj(layout.fused(self.c_fc(x).gelu()))  # GPT-2's gelu: the tanh approximation, as tinygrad's

class Block:
  def __init__(self, cfg: GPT2Config):
    self.ln_1, self.attn = layout.LayerNorm(cfg.n_embd, cfg.norm_eps), Attention(cfg)
    self.ln_2, self.mlp = layout.LayerNorm(cfg.n_embd, cfg.norm_eps), MLP(cfg)

  def __call__(self, x: Tensor, start_pos: int | UOp | None, mask: Tensor | None = None) -> Tensor:
    # pre-norm residual blocks, as in GPT-2; layout.fused makes each sum and the product that ends its branch (a
    # c_proj) one kernel on a GPU
    x = layout.fused(x + self.attn(self.ln_1(x), start_pos, mask))
    return layout.fused(x + self.mlp(self.ln_2(x)))

class GPT2:
  def __init__(self, cfg: GPT2Config):
    self.config = cfg
    self.wte, self.wpe = nn.Embedding(cfg.vocab_size, cfg.n_embd), nn.Embedding(cfg.n_ctx, cfg.n_embd)
    self.h = [Block(cfg) for _ in range(cfg.n_layer)]
    self.ln_f = layout.LayerNorm(cfg.n_embd, cfg.norm_eps)
    self.calls: dict = {}  # the compiled calls that run it (engine/compiled.py keeps them here: they go with it)

  def prepare(self, write_norms: bool = False) -> None:
    """Before the first forward: allocate (once) the zeroed KV caches that compiled calls point at (stale
    entries are never cleared), and prepare the layer norms (layout.LayerNorm.prepare; write_norms: whether
    they write their result out)."""
    cfg, w = self.config, self.wte.weight
    shape = (2, 1, cfg.n_head, cfg.n_ctx + MAX_ROWS - 1, cfg.n_embd // cfg.n_head)
    if self.h[0].attn.cache_kv is None:
      with Context(BEAM=0):  # filling zeros is not worth a kernel search
        for block in self.h:
          block.attn.cache_kv = Tensor.zeros(*shape, dtype=w.dtype, device=w.device).contiguous().realize()
    for norm in [self.ln_f] + [n for block in self.h for n in (block.ln_1, block.ln_2)]:
      norm.prepare(write_norms)

  def forward(self, ids: Tensor, start_pos: int | UOp) -> Tensor:
    """Float32 logits (T, vocab rounded up to 64) after each of the T token ids (an int32 Tensor) at start_pos..,
    written into the KV cache; the padding tokens' logits are -inf. No JIT: this is what a compiled call runs,
    with start_pos symbolic and the ids bound numbers or tokens drawn on the device."""
    T = ids.shape[0]
    x = self.wte.weight[ids].unsqueeze(0)  # a gather: reads T rows of the embedding, not all of it
    # a call's padding rows may sit past the context's end: give them zero position embeddings there. Written out:
    # the gather is a sum, and layout.fused lays out a kernel of one sum, the first block's product
    x = (x + self.wpe.weight.pad(((0, MAX_ROWS - 1), None))[start_pos:start_pos + T]).contiguous()
    mask = causal_mask(T, start_pos)  # one Tensor for all layers, one kernel (made in each, a kernel per layer)
    for block in self.h:
      x = block(x, start_pos, mask)
    return layout.lm_head(self.ln_f(x[0]), self.wte.weight)  # tied to the token embedding

  def logits(self, idx: Tensor) -> Tensor:
    """Training's forward: logits (B, T, vocab) for the token ids idx (B, T) at positions 0..T-1, no cache."""
    x = self.wte(idx) + self.wpe.weight[:idx.shape[1]]
    for block in self.h:
      x = block(x, None)
    return self.ln_f(x) @ self.wte.weight.T
