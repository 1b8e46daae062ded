#!/usr/bin/env bash
# The GPU measurement of docs/gpu.md: gpt2-xl drafted by gpt2 on an NVIDIA card (tools/bench.py: random weights
# in float16, K = 4, 48 new tokens, 2 prompts, tinygrad's default kernels (BEAM=0), --bandwidth of the card),
# each model's steps of 1 and 5 rows kernel by kernel (JIT=2 DEBUG=2, after the timed runs), then summary.md:
# Algorithm 1 against its memory floor, s, c, a round ÷ its parts, the measured speedup, the cost model's
# prediction, the break-even α, what the measured costs give at α = 0.71, and issue 58's bounds, pass or fail.
#
#   bash tools/bench_gpu.sh                   # a plain clone: pip installs what is missing (requirements*.txt)
#   bash tools/bench_gpu.sh --before aa872a4  # and an older commit (git archive into a temp folder), same card
#   bash tools/bench_gpu.sh --search          # instead of now: this checkout's kernels searched for SEARCH_MINUTES
#                                       # (default 6) by speculative.py --compare (Algorithm 1's step too), timed
#   bash tools/bench_gpu.sh --wheel DIR ...   # an offline machine: the tinygrad wheel in DIR, installed --no-index
#
# now is timed first: the older tree (a commit with git, or a folder holding one; GPT-2's tokenizer is copied in
# from demo/) compiles beside it, then waits for it to end, so that a failure there loses nothing; the summary is
# rewritten after each run. NVRTC: NVRTC_PATH, else the CUDA toolkit's libnvrtc, else pip's; its header
# cuda_fp16.h: CUDA_PATH/include, the toolkit's, else pip's nvidia-cuda-runtime-cu12 (installed if missing). The
# bandwidth: nominal by nvidia-smi's name (H100 SXM 3350 GB/s, H200 4800), or BANDWIDTH=GB/s, else measured.
# Logs go to $OUT if set, else .gpu/out, at most 8 files: summary.md, now.txt, now.json, before.txt, before.json,
# kernels.txt (every run's steps, kernel by kernel), searched.txt, searched.json.
#
# The lent GPU machine (no network, no clang; python3, numpy, tiktoken and CUDA there). Here, once:
#   python3 -m pip download --no-deps -d .gpu/wheels tinygrad==0.14.0
#   mkdir -p .gpu/before && git archive aa872a4 | tar -x -C .gpu/before --exclude=demo --exclude=notebooks
# then one call there, carrying .gpu/wheels and .gpu/before, with a timeout of 600 s:
#   bash tools/bench_gpu.sh --wheel .gpu/wheels --before .gpu/before
# Its time is the CPU's (tinygrad schedules and compiles every call; the GPU mostly waits): tried on
# DEV=NULL:CUDA:sm_90 with an empty kernel cache, gpt2-xl + gpt2 with --before took 10.5 to 11 min of CPU on this
# project's machine (16 to 17 min on its 2 busy cores), 6 of them now's; with the two trees' compiles side by side,
# expect 6 to 9 min there, now's summary after 5 to 6. --search: about twice a default run, plus SEARCH_MINUTES.
#
# With no GPU, NVRTC compiles every kernel for an H100 and none runs (the times mean nothing; 4 min with --before):
#   DEV=NULL:CUDA:sm_90 NULL_ALLOW_COPYOUT=1 TARGET=2,25,1600 DRAFT=1,12,768 bash tools/bench_gpu.sh --before aa872a4
set -uo pipefail
cd "$(dirname "$0")/.."  # the repository root, where the commands run
py="${PYTHON:-python3}" wheel="" before="" search=0
while [ $# -gt 0 ]; do
  case "$1" in
    --wheel) wheel="${2:?--wheel needs a folder}"; shift 2 ;;
    --before) before="${2:?--before needs a commit or a folder}"; shift 2 ;;
    --search) search=1; shift ;;
    -h|--help) sed -n '2,/^set /p' "$0" | sed '$d'; exit 0 ;;
    *) echo "unknown option $1 (bash tools/bench_gpu.sh --help)" >&2; exit 2 ;;
  esac
done
out="$(mkdir -p "${OUT:-.gpu/out}" && cd "${OUT:-.gpu/out}" && pwd)" work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
rm -f "$out"/{summary.md,now.txt,now.json,before.txt,before.json,kernels.txt,searched.txt,searched.json}
export DEV="${DEV:-CUDA}" PYTHONUNBUFFERED=1

# what it needs: tinygrad as requirements.txt pins it, numpy, tiktoken; on CUDA, NVRTC and cuda_fp16.h
nvidia() {  # a file of pip's NVIDIA packages, nvidia/*/$1
  "$py" -c "import glob, nvidia; print(min(f for p in nvidia.__path__ for f in glob.glob(p + '/*/$1')))" 2>/dev/null; }
nvrtc() {  # the CUDA toolkit's libnvrtc, else pip's (nvidia/cuda_nvrtc/lib for CUDA 12, nvidia/cu13/lib for 13)
  for f in /usr/local/cuda/targets/x86_64-linux/lib/libnvrtc.so* /usr/local/cuda-*/targets/x86_64-linux/lib/libnvrtc.so*
  do [ -f "$f" ] && echo "$f" && return; done
  nvidia 'lib/libnvrtc.so*'; }
headers() {  # the folder whose include/ holds cuda_fp16.h, which --half's kernels include
  for d in ${CUDA_PATH:-} /usr/local/cuda /usr /opt/cuda; do [ -f "$d/include/cuda_fp16.h" ] && echo "$d" && return; done
  local f && f="$(nvidia include/cuda_fp16.h)" && dirname "$(dirname "$f")"; }
cuda() { [[ $DEV != *CUDA* ]] || { [ -n "${NVRTC_PATH:-$(nvrtc)}" ] && [ -n "$(headers)" ]; }; }
ready() { "$py" -c "import importlib.metadata as m, numpy, tiktoken
assert 'tinygrad==' + m.version('tinygrad') == '$(grep '^tinygrad' requirements.txt)'" 2>/dev/null && cuda; }
if [ -n "$wheel" ]; then
  "$py" -m pip install -q --no-index --no-deps --no-cache-dir "$wheel"/*.whl || exit
elif ! ready; then
  "$py" -m pip install -q -r requirements.txt -r requirements-cuda.txt || exit
  cuda || "$py" -m pip install -q nvidia-cuda-runtime-cu12 || exit  # cuda_fp16.h, for NVRTC without the toolkit
fi
if [[ $DEV == *CUDA* ]]; then
  export NVRTC_PATH="${NVRTC_PATH:-$(nvrtc)}" CUDA_PATH="$(headers)"
  export LD_LIBRARY_PATH="$(dirname "${NVRTC_PATH:-.}")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"  # libnvrtc-builtins
  cuda || echo "warning: no NVRTC or no cuda_fp16.h found (NVRTC_PATH='$NVRTC_PATH', CUDA_PATH='$CUDA_PATH')"
fi

card="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
case "$card" in *H200*) bandwidth=4800 ;; *H100*PCIe*) bandwidth=2000 ;; *H100*) bandwidth=3350 ;; *) bandwidth= ;; esac
bandwidth="${BANDWIDTH:-$bandwidth}"  # nominal GB/s; none: bench.py measures it
target="${TARGET:-gpt2-xl}" draft="${DRAFT:-gpt2}"
models=(--random --half --target "$target" --draft "$draft")
args=("${models[@]}" -K 4 --max-new-tokens 48 --prompts 2 ${bandwidth:+--bandwidth "$bandwidth"})
commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
[ -z "$(git status --porcelain 2>/dev/null)" ] || commit+=" + uncommitted changes"
about="card ${card:-none} (DEV=$DEV), ${bandwidth:-measured} GB/s, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $commit
tinygrad $("$py" -c 'import importlib.metadata as m; print(m.version("tinygrad"))'), NVRTC_PATH=${NVRTC_PATH:-}, CUDA_PATH=${CUDA_PATH:-}
bench.py ${args[*]} (now, before: BEAM=0; searched: BEAM unset)"
echo "$about"
runs=() times="" failed=0

# bench.py through this: the steps that it counts the kernels of after its timed runs (each model's of 1 and K+1
# rows) compiled and replayed kernel by kernel, each kernel timed (JIT=2 DEBUG=2), into kernels.txt; and its timed
# runs held, once compiled, until the file BENCH_GPU_WAIT exists (BENCH_GPU_READY made then), so that an older
# tree compiles beside this one and takes its turn on the GPU after it
BENCH='
import contextlib, os, pathlib, sys, time
try:
  from tools import bench
except ImportError:  # an older tree (--before): bench.py at its root
  import bench
from tinygrad import Context
log, header = sys.argv.pop(1), [f"##### {sys.argv.pop(1)}"]
cost, warm_up_baseline = bench.step_cost, bench.warm_up_baseline
def logged(model, rows, sampling):
  with open(log, "a") as f, contextlib.redirect_stdout(f), Context(DEBUG=2):
    while header:
      print(header.pop())
    print(f"=== {model.config}, a step of {rows} rows: compiled, captured, then replayed", flush=True)
    result = cost(model, rows, sampling)
    print("=== kernels, bytes touched ÷ weights:", result, flush=True)
  return result
def turn(*args, **kwargs):
  warm_up_baseline(*args, **kwargs)
  if ready := os.environ.get("BENCH_GPU_READY"):
    pathlib.Path(ready).touch()
  while (wait := os.environ.get("BENCH_GPU_WAIT")) and not os.path.exists(wait):
    time.sleep(1)
bench.step_cost, bench.warm_up_baseline = logged, turn
sys.exit(bench.main(bench.run, bench.parse_args(sys.argv[1:])))
'
step() {  # name, then the command: run it in turn, timed; a failure is counted, and the script goes on
  local name=$1 start=$SECONDS; shift
  echo "### $name: $*"
  "$@" || { echo "### $name failed (exit $?)"; failed=$((failed + 1)); }
  times+="$name $((SECONDS - start)) s; "
}
run_bench() {  # run, tree, then env's arguments: bench.py in the tree, its output in $out/run.txt
  local run=$1 tree=$2; shift 2
  (cd "$tree" && env "$@" "$py" -c "$BENCH" "$out/kernels.txt" "$run" "${args[@]}" --out "$work/$run") 2>&1 |
    tee -a "$out/$run.txt"
}
collect() {  # run: its JSON copied to $out/run.json, the summary rewritten
  sed -i 's/\x1b\[[0-9;]*m//g' "$out/kernels.txt" 2>/dev/null  # tinygrad's colours out
  cp "$work/$1/t1.json" "$out/$1.json" && runs+=("$1") && summary
}
measure() { run_bench "$@" && collect "$1"; }
finish() { wait "$beside" && collect before; }  # the older tree, run beside now
search_kernels() {  # the kernels of every call that bench.py times, searched for at most SEARCH_MINUTES
  env -u BEAM "$py" speculative.py "${models[@]}" --compare --max-new-tokens 16 -K 4 --search-minutes \
    "${SEARCH_MINUTES:-6}" --prompt "Alan Turing theorized that computers would one day become" </dev/null 2>&1 |
    tee -a "$out/searched.txt"
}
old_tree() {  # the older tree: a folder as it is, or a commit extracted; GPT-2's tokenizer copied into it
  local tree="$before"
  if [ ! -d "$tree" ]; then
    tree="$work/before" && mkdir -p "$tree" &&
      git archive "$before" | tar -x -C "$tree" --exclude=demo --exclude=notebooks || return
  fi
  mkdir -p "$tree/demo" && cp demo/encoder.json demo/vocab.bpe "$tree/demo/" && echo "$tree"
}
summary() {
  "$py" - "$out" "$bandwidth" "$about" "$times" "${runs[@]}" <<'EOF' > "$out/summary.md"
import json, pathlib, sys
out, bandwidth, about, times, runs = pathlib.Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
try:  # this checkout's cost model: what the measured costs give at α = 0.71
  from tools.bench import ALPHA_REAL, row_costs
  from costs import predicted_speedup
except Exception as e:
  ALPHA_REAL, row_costs = 0.71, None
  print(f"(bench.py does not import here: {type(e).__name__}: {e}; 'at α' left out)\n")
def fmt(x, spec=".2f", unit=""):
  return "-" if x is None else f"{x:{spec}}{unit}"
BOUNDS = [("Algorithm 1 ≤ 4.5× its floor", "floor_x", lambda x: x <= 4.5), ("s ≤ 1.15", "s", lambda x: x <= 1.15),
          ("c ≤ 0.23", "c", lambda x: x <= 0.23), ("speedup ≥ 1.9× at α̂", "speedup", lambda x: x >= 1.9),
          (f"≥ 1.3× at α = {ALPHA_REAL} (K = 4: the best K can only add)", "at_real", lambda x: x >= 1.3)]
rows, notes = {}, []
for run in runs:
  result = json.loads((out / f"{run}.json").read_text())
  r = dict(result["rows"][0])
  if "s" not in r and "r" in r:  # a JSON from before s was named: the same cost under the key "r"
    r["s"] = r.pop("r")
  if "s" not in r:  # an older tree's JSON: its own keys, the rest left out
    t1 = r.get("target_one_row_ms")
    r = {k: r.get(k) for k in ("K", "alpha", "alg1_ms_per_token", "alg2_ms_per_token", "speedup", "ms_per_round",
                               "round_over_parts", "draft_step_ms")} | {"t1_ms": t1, "s": r.get("scoring_ratio"),
         "c": r["draft_step_ms"] / t1 if t1 and r.get("draft_step_ms") else None}
    notes.append(f"{run}: an older JSON. s is its scoring_ratio and t(1) its target_one_row_ms (the 1-row step "
                 "without the draw), c its draft_step_ms ÷ that; its speedup counts the prefill; predicted, "
                 "break-even α and at α: -")
  elif "v" not in r:  # the cost model before v: its predicted is E·t(1) ÷ the replayed round
    notes.append(f"{run}: its JSON prices a round with o (the replayed round less its parts), not v, the round's own "
                 "work timed alone: its predicted is E·t(1) ÷ the replayed round; v and at α: -")
  elif row_costs:
    r["at_real"] = predicted_speedup(ALPHA_REAL, row_costs(r))
  bw = result.get("bandwidth") or (float(bandwidth) * 1e9 if bandwidth else None)
  r["floor_ms"] = 1e3 * result["target_bytes"] / bw if bw else None
  r["floor_x"] = r["alg1_ms_per_token"] / r["floor_ms"] if r["floor_ms"] else None
  rows[run] = r
print(f"# GPU measurement\n\n{about}\nwall times: {times}\n")
print(f"| run | K | α̂ | Alg1 ms/token | floor ms | ÷ floor | Alg2 ms/token | t(1) ms | s | c | v | round ÷ parts "
      f"| ms/round | speedup (α̂) | predicted | break-even α | at α = {ALPHA_REAL} |")
print("|" + " --- |" * 17)
for run, r in rows.items():
  even = "none" if "break_even_alpha" in r and r["break_even_alpha"] is None else fmt(r.get("break_even_alpha"))
  print(f"| {run} | {r['K']} | {fmt(r['alpha'])} | {fmt(r['alg1_ms_per_token'])} | {fmt(r['floor_ms'])} "
        f"| {fmt(r['floor_x'], '.1f')} | {fmt(r['alg2_ms_per_token'])} | {fmt(r['t1_ms'])} | {fmt(r['s'])} "
        f"| {fmt(r['c'], '.3f')} | {fmt(r.get('v'))} | {fmt(r['round_over_parts'])} | {fmt(r['ms_per_round'])} "
        f"| {fmt(r['speedup'], '.2f', '×')} | {fmt(r.get('predicted'), '.2f', '×')} | {even} "
        f"| {fmt(r.get('at_real'), '.2f', '×')} |")
print("\n| issue 58's bound | " + " | ".join(rows) + " |\n|" + " --- |" * (len(rows) + 1))
for what, key, ok in BOUNDS:
  print(f"| {what} | " + " | ".join("-" if r.get(key) is None else "pass" if ok(r[key]) else "FAIL"
                                     for r in rows.values()) + " |")
if "now" in rows and "searched" in rows:
  now, searched = rows["now"], rows["searched"]
  slower = [k for k in ("alg1_ms_per_token", "alg2_ms_per_token") if searched[k] > now[k]]
  print(f"\nsearched no slower than default: {'FAIL, ' + ', '.join(slower) if slower else 'pass'}")
print()
for run in runs:  # whether its kernels were searched, in bench.py's words
  line = [l for l in (out / f"{run}.txt").read_text().splitlines() if l.startswith("kernels:")] or ["-"]
  print(f"- {run}: {line[-1]}")
for note in notes:
  print(f"- {note}")
EOF
}

if [ -n "$before" ]; then
  tree="$(old_tree)" || { echo "### before: no tree from $before"; failed=$((failed + 1)); }
fi
if [ "$search" = 0 ] && [ -n "${tree:-}" ]; then  # the older tree compiles beside now, then times after it
  (run_bench before "$tree" BEAM=0 BENCH_GPU_READY="$work/before.warm" BENCH_GPU_WAIT="$work/now.done" >/dev/null
   status=$?; touch "$work/before.warm"; exit $status) & beside=$!
fi
if [ "$search" = 0 ]; then
  step now measure now . BEAM=0 BENCH_GPU_WAIT="${beside:+$work/before.warm}"
  touch "$work/now.done"
fi
if [ -n "${beside:-}" ]; then
  step before finish
elif [ -n "${tree:-}" ]; then
  step before measure before "$tree" BEAM=0
fi
if [ "$search" = 1 ]; then
  step search search_kernels
  step searched measure searched . -u BEAM
fi
times+="in all $SECONDS s"
summary && cat "$out/summary.md"
echo "### $failed step(s) failed; logs in $out"
exit $((failed > 0))
