#!/usr/bin/env bash
# The GPU measurement of docs/benchmarks.md ("On a GPU"), in one call of a lent NVIDIA machine: gpt2-xl drafted by
# gpt2 (random weights in float16, K = 4, bench.py) with tinygrad's default kernels, for the code in .gpu/before
# and for this checkout on the same card; one step of each kernel by kernel (JIT=2 DEBUG=2); then a summary:
# Algorithm 1 against the memory floor, t(5)/t(1), c, a round ÷ its parts, the speedup, and what the measured
# costs give at α = 0.7 and 0.8. With --search (a second call), this checkout's kernels searched for at most
# SEARCH_MINUTES (default 6) by the command line, then timed again.
#
#   pip download --no-deps -d .gpu/wheels tinygrad==0.14.0                          # here, where PyPI is
#   mkdir -p .gpu/before && git archive 55db00f | tar -x -C .gpu/before --exclude=demo --exclude=notebooks
#   mkdir -p .gpu/tokenizer && cp ../shared/gpt2-tokenizer/{encoder.json,vocab.bpe} .gpu/tokenizer/  # no network there
#   bash bench_gpu.sh            # there, carrying .gpu; then: bash bench_gpu.sh --search
#
# The logs go to $OUT (the device tool's folder that comes back) or .gpu/out. TARGET and DRAFT change the models
# (a smaller card), DEV the device: DEV=NULL:CUDA:sm_90 NULL_ALLOW_COPYOUT=1 TARGET=2,25,1600 DRAFT=1,12,768 tries
# the whole script here with no GPU (NVRTC compiles every kernel, none runs: its times mean nothing).
set -euo pipefail
cd "$(dirname "$0")"
out="$(mkdir -p "${OUT:-.gpu/out}" && cd "${OUT:-.gpu/out}" && pwd)"
python3 -m pip install -q --no-index --no-deps .gpu/wheels/tinygrad-*.whl  # no network there
export NVRTC_PATH="${NVRTC_PATH:-$(ls /usr/local/cuda*/targets/x86_64-linux/lib/libnvrtc.so.* 2>/dev/null | head -1)}"
export DEV="${DEV:-CUDA}" PYTHONUNBUFFERED=1
card="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)"
case "$card" in *H200*) bandwidth=4800 ;; *H100*) bandwidth=3350 ;; *) bandwidth=0 ;; esac  # nominal GB/s
models=(--random --half --target "${TARGET:-gpt2-xl}" --draft "${DRAFT:-gpt2}" --tokenizer "$PWD/.gpu/tokenizer")
args=("${models[@]}" -K 4 --max-new-tokens 48 --prompts 2)
[ "$bandwidth" != 0 ] && args+=(--bandwidth "$bandwidth")
echo "card: ${card:-none} ($DEV), nominal bandwidth ${bandwidth} GB/s, $(date -u)" | tee "$out/card.txt"

# one step of each model, kernel by kernel: where the time goes
STEPS='
import sys
from tinygrad import dtypes
from bench import step_cost
from sampling import Sampling
from weights import random_model
for shape, rows in ((sys.argv[1], 1), (sys.argv[1], 5), (sys.argv[2], 1)):
  print(f"=== {shape}, {rows} rows", flush=True)
  step_cost(random_model(shape, dtypes.float16), rows, Sampling())
'

if [ "${1:-}" = --search ]; then
  minutes="${SEARCH_MINUTES:-6}"
  python3 speculative.py "${models[@]}" --max-new-tokens 16 --search-minutes "$minutes" \
    --prompt "Alan Turing theorized that computers would one day become" </dev/null 2>&1 | tee "$out/search.txt"
  python3 bench.py "${args[@]}" --out "$out/searched" 2>&1 | tee "$out/searched.txt"
  runs=(searched)
else
  for tree in before after; do
    dir=$([ $tree = before ] && echo .gpu/before || echo .)
    (cd "$dir" && BEAM=0 python3 bench.py "${args[@]}" --out "$out/$tree") 2>&1 | tee "$out/$tree.txt"
    (cd "$dir" && BEAM=0 JIT=2 DEBUG=2 python3 -c "$STEPS" "${TARGET:-gpt2-xl}" "${DRAFT:-gpt2}") \
      > "$out/$tree-kernels.txt" 2>&1
  done
  runs=(before after)
fi

python3 - "$out" "$bandwidth" "${runs[@]}" <<'EOF' | tee "$out/summary.md"
import json, pathlib, sys
out, bandwidth, runs = pathlib.Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
def tokens(alpha, K):  # the paper's expected tokens a round
  return (1 - alpha ** (K + 1)) / (1 - alpha)
print("| run | Alg1 ms/token | × floor | t(5)/t(1) | c | round ÷ parts | ms/round | speedup (α̂) | α = 0.7 | 0.8 |")
print("|" + " --- |" * 10)
for run in runs:
  result = json.loads((out / run / "t1.json").read_text())
  r = result["rows"][0]
  floor = result["target_bytes"] / (bandwidth * 1e9) * 1e3 if bandwidth else float("nan")
  at = [tokens(a, r["K"]) * r["alg1_ms_per_token"] / r["ms_per_round"] for a in (0.7, 0.8)]
  print(f"| {run} | {r['alg1_ms_per_token']:.2f} | {r['alg1_ms_per_token'] / floor:.1f} | {r['scoring_ratio']:.2f} "
        f"| {r['c']:.3f} | {r['round_over_parts']:.2f} | {r['ms_per_round']:.2f} | {r['speedup']:.2f}x "
        f"({r['alpha']:.2f}) | {at[0]:.2f}x | {at[1]:.2f}x |")
EOF
