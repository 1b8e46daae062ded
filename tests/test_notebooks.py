"""notebooks/: every teaching notebook runs top to bottom in time, its plots are titled and labelled, and the
committed copy carries its outputs.

After changing a notebook, or code that a notebook runs, save fresh outputs
(each on the models its MODELS line names, the demo pair or the tiny ones, as CI does):

    DEV=CPU python tests/test_notebooks.py                      # all notebooks, in place
    DEV=CPU python tests/test_notebooks.py notebooks/03_*.ipynb # some
"""
from __future__ import annotations
import pathlib, sys, time
import pytest

pytestmark = pytest.mark.slow  # the slow tier: python -m pytest -m slow

NEEDS_TOOLS = "notebook tests need the notebook tools: pip install -r requirements-dev.txt"
nbformat = pytest.importorskip("nbformat", reason=NEEDS_TOOLS)
nbclient = pytest.importorskip("nbclient", reason=NEEDS_TOOLS)

NOTEBOOK_DIR = pathlib.Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))
TIME_LIMIT_S = 120     # per notebook, top to bottom: a reader waits no longer
MAX_BYTES = 1_000_000  # per committed notebook, outputs included

# Run in the kernel before the notebook's own cells:
# every figure the notebook shows is checked as it is drawn.
PLOT_CHECK = '''
import matplotlib.backend_bases as _backend_bases
_plot_problems, _draw = [], _backend_bases.FigureCanvasBase.print_figure
def _checked_draw(canvas, *args, **kwargs):
    fig = canvas.figure
    for ax in fig.axes:
        name = ax.get_title() or fig.get_suptitle() or "an untitled plot"
        if ax.get_label() == "<colorbar>":
            if not (ax.get_ylabel() or ax.get_xlabel()):
                _plot_problems.append(f"{name}: a colour bar has no label")
            continue
        if not (ax.get_title() or fig.get_suptitle()):
            _plot_problems.append(f"a plot has no title (x axis: {ax.get_xlabel()!r})")
        if not ax.get_xlabel():
            _plot_problems.append(f"{name}: no x-axis label")
        if not any(a.get_ylabel() for a in ax.get_shared_y_axes().get_siblings(ax)):
            _plot_problems.append(f"{name}: no y-axis label")
    return _draw(canvas, *args, **kwargs)
_backend_bases.FigureCanvasBase.print_figure = _checked_draw
'''
PLOT_REPORT = ("assert not _plot_problems, "
               "'plots need a title and labelled axes: ' + '; '.join(_plot_problems)")

def execute(path: pathlib.Path) -> tuple[nbformat.NotebookNode, float]:
  """Run a notebook top to bottom in notebooks/ (as a reader would), with the plot checks around it; the
  outputs and the seconds taken."""
  nb = nbformat.read(path, as_version=4)
  nb.cells = [nbformat.v4.new_code_cell(PLOT_CHECK)] + nb.cells + [nbformat.v4.new_code_cell(PLOT_REPORT)]
  start = time.perf_counter()
  # raises CellExecutionError on the first failing cell
  nbclient.NotebookClient(nb, timeout=TIME_LIMIT_S, kernel_name="python3", record_timing=False,
                          resources={"metadata": {"path": str(NOTEBOOK_DIR)}}).execute()
  seconds = time.perf_counter() - start
  nb.cells = nb.cells[1:-1]
  for i, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
    cell.execution_count = i + 1  # as if the checks were not there
  for cell in nb.cells:
    for out in cell.get("outputs", []):
      if "execution_count" in out:
        out.execution_count = cell.execution_count
  return nb, seconds

def pngs(cell) -> int:
  return sum("image/png" in out.get("data", {}) for out in cell.get("outputs", []))

def test_the_four_notebooks_are_there():
  assert [p.name for p in NOTEBOOKS] == ["01_rejection_sampling.ipynb", "02_gpt2_kv_cache.ipynb",
                                         "03_speculative_sampling.ipynb", "04_speedup.ipynb"]

@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_notebook_has_its_outputs(path):
  """Saved top to bottom in one run, with no errors, plots saved as PNG, each under a takeaway, and small
  enough to read on the web."""
  assert path.stat().st_size < MAX_BYTES, \
    f"{path.name} is {path.stat().st_size:,} bytes: lower the figure dpi or print less"
  nb = nbformat.read(path, as_version=4)
  nbformat.validate(nb)
  code = [c for c in nb.cells if c.cell_type == "code"]
  assert [c.execution_count for c in code] == list(range(1, len(code) + 1)), \
    f"{path.name} was not saved from one top-to-bottom run: {__doc__}"
  assert not [o for c in code for o in c.outputs if o.output_type == "error"], \
    f"{path.name} was saved with an error"
  assert sum(map(pngs, code)) >= 1, f"{path.name} has no saved plots"
  for before, cell in zip(nb.cells, nb.cells[1:]):
    if pngs(cell):
      assert before.cell_type == "markdown" and "Takeaway" in before.source, \
        f"{path.name}: the plot of cell {cell.source.splitlines()[0]!r} " \
        "needs a one-line takeaway in the markdown cell above it"

@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_top_to_bottom(path):
  """Every cell runs (on the models its MODELS line names), within the time limit, every plot is titled and
  labelled, and the saved outputs have the same shape."""
  fresh, seconds = execute(path)
  assert seconds < TIME_LIMIT_S, f"{path.name} took {seconds:.0f} s; the limit is {TIME_LIMIT_S} s"
  saved = nbformat.read(path, as_version=4)
  assert [c.source for c in fresh.cells] == [c.source for c in saved.cells]
  for new, old in zip(fresh.cells, saved.cells):
    if new.cell_type == "code":
      assert (bool(new.outputs), pngs(new)) == (bool(old.outputs), pngs(old)), \
        f"{path.name}: the saved outputs of {new.source.splitlines()[0]!r} are stale: {__doc__}"

def main(paths: list[str]) -> None:
  for path in [pathlib.Path(p).resolve() for p in paths] or NOTEBOOKS:
    nb, seconds = execute(path)
    nbformat.write(nb, path)
    print(f"{path.name}: ran in {seconds:.0f} s, saved ({path.stat().st_size / 1e3:.0f} kB)")

if __name__ == "__main__":
  main(sys.argv[1:])
