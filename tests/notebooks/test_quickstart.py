"""``notebooks/quickstart.ipynb`` runs top to bottom (nbclient) on a small budget."""

from __future__ import annotations

import os

import nbformat
from nbclient import NotebookClient

from tests.launch.conftest import REPO


def test_quickstart_notebook_trains_evaluates_and_plots(tmp_path):
    """Test that the notebook trains, evaluates both object sets, and draws the learning curve."""
    nb = nbformat.read(os.path.join(REPO, "notebooks", "quickstart.ipynb"), as_version=4)
    (params,) = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    # Papermill-style parameter injection: the same cell, a small budget.
    params.source = 'TOTAL_TIMESTEPS = 2048\nSEED = 0\nRUN_DIR = "runs/notebook"\n'
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()

    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) == 1  # the learning curve, shown inline
    assert os.path.getsize(tmp_path / "runs" / "notebook" / "learning_curve.png") > 1000
    final = [o for o in outputs if "eval_ood/generalization_gap" in str(o.get("data", {}).get("text/plain", ""))]
    assert len(final) == 1 and "eval/return_mean" in final[0]["data"]["text/plain"]
    # 2048 steps of 8 x 32 = 8 epochs, evaluated every 10: only the final test evaluated,
    # yet the curve has a point per set from it.
    assert "env steps: 2,048" in "".join(o.get("text", "") for o in outputs)
