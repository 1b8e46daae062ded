"""Unlikelihood fine-tuning (ema-b32's recipe) of the SHIPPED target, with its embeddings and first layer frozen
at the shipped file's values: the exported file then holds those tensors byte for byte, and git stores it as a
delta of the shipped one (about 4.4 MB instead of 8.4). An experiment of docs/demo.md ("Seeds, soups and the
size budget"); not shipped. Run with DEV=CPU, whose float16 cast keeps subnormals as the shipped file does.

    DEV=CPU python frozen.py NAME SEED CHECKPOINTS   # reads CHECKPOINTS/train-target-dedent/best.pt, resumes
"""
import dataclasses, math, pathlib, sys
import numpy as np, torch
from safetensors.numpy import load_file
from tinygrad import dtypes
import train
from weights import load_tokenizer, save_model

FROZEN = ("transformer.wte.", "transformer.wpe.", "transformer.h.0.")
name, seed, ckpts = sys.argv[1], int(sys.argv[2]), pathlib.Path(sys.argv[3])
torch.set_num_threads(1)
r = dataclasses.replace(train.SIZES["target"], average=0.99, continuations=32, unlikelihood=2000,
                        unlikelihood_lr=4e-4)
enc = load_tokenizer()
train_ids, val_ids, used = train.corpus(enc)
remap = np.zeros(enc.n_vocab, np.int32)
remap[used] = np.arange(len(used))
train_ids, val_ids = remap[train_ids], remap[val_ids]
hf = train.hf_model(r.shape, len(used), r.dropout)
hf.load_state_dict(torch.load(ckpts / "train-target-dedent/best.pt", weights_only=True))  # the shipped run's best
shipped = load_file("demo/target/model.safetensors")
with torch.no_grad():
  for n, p in hf.named_parameters():
    if n.startswith(FROZEN):  # the shipped float16 values, so that the export rounds them back to the same bytes
      w = shipped[n.removeprefix("transformer.")].astype(np.float32)
      p.copy_(torch.from_numpy(w[used] if n == "transformer.wte.weight" else w))
      p.requires_grad = False  # no gradient: AdamW leaves it, weight decay included
start = {k: v.clone() for k, v in hf.state_dict().items()}
train.finetune(hf, r, ckpts / f"train-{name}", train_ids, val_ids, seed, False)
tuned = {k: v.clone() for k, v in hf.state_dict().items()}
for share in (0.9, 1.0):
  hf.load_state_dict(tuned)
  train.interpolate(hf, start, share)
  temperature = train.calibrate(hf, val_ids, r.shape.n_ctx)
  save_model(train.expand(train.to_gpt2(hf, r.shape, len(used)), used), ckpts / f"out/{name}-{share}/target",
             dtypes.float16)
  print(f"share {share}: {math.exp(train.val_loss(hf, val_ids, r.shape.n_ctx)):.1f} at temperature {temperature}")
