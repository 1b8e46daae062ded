"""bench.py runs as a user runs it, on tiny checkpoints: its table, its plots and its JSON. (It times nothing for the tests.)"""
import json, subprocess
import pytest
from tiny import TOKENIZER_DIR, run_script, write_checkpoint

SHAPE = dict(n_layer=1, n_head=2, n_embd=16, vocab_size=64, n_ctx=64)

def bench(*args: str) -> subprocess.CompletedProcess:
  return run_script("bench.py", *args)

def test_sweep_prints_the_table_and_writes_plots_and_json(tmp_path):
  pytest.importorskip("matplotlib", reason="--sweep draws with matplotlib: pip install -r requirements-dev.txt")
  target, draft = write_checkpoint(tmp_path / "target", seed=1, **SHAPE), write_checkpoint(tmp_path / "draft", seed=2, **SHAPE)
  out = bench("--target", str(target), "--draft", str(draft), "--sweep", "1,2", "--max-new-tokens", "6", "--prompts", "2",
              "--out", str(tmp_path / "out"))
  assert out.returncode == 0, out.stderr
  rows = [l for l in out.stdout.splitlines() if l.strip().startswith(("1 ", "2 "))]
  assert "meas/pred" in out.stdout and "ms/round" in out.stdout and len(rows) == 2
  assert "at α = 0.8" in out.stdout and "memory-bandwidth floor" in out.stdout and "Bytes read per token" in out.stdout
  results = json.loads(next((tmp_path / "out").glob("*.json")).read_text())
  assert [r["K"] for r in results["rows"]] == [1, 2] and len(list((tmp_path / "out").glob("*.png"))) == 3

def test_scoring_prints_total_host_and_ratio_per_T(tmp_path):
  target = write_checkpoint(tmp_path / "target", **SHAPE)
  out = bench("--target", str(target), "--draft", str(target), "--scoring")
  assert out.returncode == 0, out.stderr
  assert "T   total ms   host ms   t(T)/t(1)" in out.stdout
  rows = [l.split() for l in out.stdout.splitlines() if l.split() and l.split()[0].isdigit()]
  assert [int(r[0]) for r in rows] == list(range(1, 9)) and rows[0][3] == "1.00"

def test_ngram_draft_on_a_prompt_of_ones_own(tmp_path):
  if not TOKENIZER_DIR.is_dir():
    pytest.skip(f"the GPT-2 tokenizer files are not in {TOKENIZER_DIR}")
  target = write_checkpoint(tmp_path / "target", **{**SHAPE, "vocab_size": 50257})
  out = bench("--target", str(target), "--draft", "ngram", "--greedy", "--prompt", "one two one two one two one two",
              "--prompts", "1", "--max-new-tokens", "8", "--out", str(tmp_path / "out"), "--tokenizer", str(TOKENIZER_DIR))
  assert out.returncode == 0, out.stderr
  assert "draft ngram" in out.stdout and "your prompt" in out.stdout

def test_bad_shape_gets_one_sentence_and_exit_2():
  out = bench("--random", "--target", "2,3,16", "--draft", "1,2,8")
  assert out.returncode == 2 and "not a multiple of n_head" in out.stderr and len(out.stderr.strip().splitlines()) == 1
