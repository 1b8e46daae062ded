"""A model soup (Wortsman et al. 2022) of fine-tunings that start from the same early-stopped weights: the mean
of their averaged fine-tuned weights, moved SHARE of the way from the start (train.interpolate), calibrated and
saved like train.py's models. An experiment of docs/demo.md ("Seeds, soups and the size budget"); not shipped.

    python soup.py OUT SHARE CHECKPOINTS/train-target-ema-b32 CHECKPOINTS/train-target-ema-b32-ditto ...
"""
import math, pathlib, sys
import numpy as np, torch
from tinygrad import dtypes
import train
from weights import load_tokenizer, save_model

out, share, runs = pathlib.Path(sys.argv[1]), float(sys.argv[2]), [pathlib.Path(a) for a in sys.argv[3:]]
r, enc = train.SIZES["target"], load_tokenizer()
train_ids, val_ids, used = train.corpus(enc)
remap = np.zeros(enc.n_vocab, np.int32)
remap[used] = np.arange(len(used))
start = torch.load(runs[0] / "best.pt", weights_only=True)
for run in runs:
  assert all(torch.equal(v, start[k]) for k, v in torch.load(run / "best.pt", weights_only=True).items()), run
tuned = [torch.load(run / "finetune.pt", weights_only=True)["average"] for run in runs]
hf = train.hf_model(r.shape, len(used), 0.0)
hf.load_state_dict({k: sum(t[k] for t in tuned) / len(tuned) if v.is_floating_point() else v for k, v in tuned[0].items()})
train.interpolate(hf, start, share)
temperature = train.calibrate(hf, remap[val_ids], r.shape.n_ctx)
save_model(train.expand(train.to_gpt2(hf, r.shape, len(used)), used), out / "target", dtypes.float16)
print(f"{math.exp(train.val_loss(hf, remap[val_ids], r.shape.n_ctx)):.1f} at temperature {temperature}")
