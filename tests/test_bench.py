"""bench.py runs as a user runs it, on tiny checkpoints: its table, its plots and its JSON. (It times nothing for the tests.)"""
import json, subprocess
import pytest
from tiny import run_script, write_checkpoint

def bench(*args: str) -> subprocess.CompletedProcess:
  return run_script("bench.py", *args)

def test_sweep_prints_the_table_and_writes_plots_and_json(tmp_path):
  pytest.importorskip("matplotlib", reason="--sweep draws with matplotlib: pip install -r requirements-dev.txt")
  shape = dict(n_layer=1, n_head=2, n_embd=16, vocab_size=64, n_ctx=64)
  target, draft = write_checkpoint(tmp_path / "target", seed=1, **shape), write_checkpoint(tmp_path / "draft", seed=2, **shape)
  out = bench("--target", str(target), "--draft", str(draft), "--sweep", "1,2", "--max-new-tokens", "6", "--prompts", "2", "--out", str(tmp_path / "out"))
  assert out.returncode == 0, out.stderr
  assert "meas/pred" in out.stdout and len([l for l in out.stdout.splitlines() if l.strip().startswith(("1 ", "2 "))]) == 2
  results = json.loads(next((tmp_path / "out").glob("*.json")).read_text())
  assert results and len(list((tmp_path / "out").glob("*.png"))) == 3

def test_bad_shape_gets_one_sentence_and_exit_2():
  out = bench("--random", "--target", "2,3,16", "--draft", "1,2,8")
  assert out.returncode == 2 and "not a multiple of n_head" in out.stderr and len(out.stderr.strip().splitlines()) == 1
