"""PyTorch: DDP against the single-device step (the runner in its own environment,
.venvs/pytorch; tests/test_pytorch_runner.py has the rest, tests/frameworks/test_bert.py its
BERT)."""

import json

import pytest

from tests.conftest import framework_python
from tests.frameworks import equivalence

pytestmark = pytest.mark.skipif(not framework_python("pytorch").exists(), reason="the pytorch environment is not built")


def test_ddp_reproduces_the_single_device_losses(tmp_path):
    """Two 1-thread DDP ranks on copies of the batch: the all-reduced mean gradient is the
    single run's; a missing all-reduce (or a sum instead of the mean) changes the first update."""
    single = equivalence.reference("pytorch", tmp_path / "single")
    for losses in equivalence.multi_device("pytorch", tmp_path / "ddp", "ddp"):
        equivalence.assert_equivalent(losses, single)


def test_header_names_the_autocast_dtype_and_what_was_compiled():
    """AMP on the CPU autocasts to bfloat16 (float16 + GradScaler on CUDA, whose optimizer step
    stays eager: GradScaler calls the optimizer's own); torch.compile wraps lazily, so building
    a compiled runner compiles nothing here."""
    code = (
        "import json; from dlbench.coords import RunCoords; from dlbench.runners.base import RunSpec\n"
        "from dlbench.runners.pytorch import Runner\n"
        "out = {}\n"
        "for precision, compiled in (('fp32', False), ('amp', True)):\n"
        "    coords = RunCoords('pytorch', 'alexnet', precision, 'synthetic', '2', '1x1', 'single', 1)\n"
        "    spec = RunSpec(coords, 2, 64, 0, 1, 'cpu', compile=compiled)\n"
        "    runner = Runner(spec); runner.import_framework(); runner.build(); info = runner.describe()\n"
        "    out[precision] = [info['compute_dtype'], info['torch_compile']]\n"
        "print('RESULT', json.dumps(out))"
    )
    out = json.loads(equivalence.run_script(framework_python("pytorch"), code))
    assert out == {"fp32": ["float32", None], "amp": ["bfloat16", "model and optimizer step"]}


def test_dali_is_not_chosen_where_no_nvidia_package_is_installed(monkeypatch):
    """A torch built on a system CUDA brings no `nvidia` namespace package: looking for
    nvidia.dali then raises instead of answering None."""
    import importlib.util

    from dlbench.runners.pytorch import pipeline

    def find_spec(name):
        raise ModuleNotFoundError("No module named 'nvidia'")

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    assert pipeline.use_dali("cuda") is False
