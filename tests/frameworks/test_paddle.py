"""The PaddlePaddle runner for real, in its own environment (built by tools/test.sh), and the
OneFlow plug-in that keeps its cells N/A with the reason."""

import json
import re
import subprocess
import sys

import pytest

from dlbench.steplog import read_steplog
from tests.conftest import REPO, SHARED_CORES_ENV, framework_python
from tests.frameworks import equivalence

PYTHON = framework_python("paddle")
needs_env = pytest.mark.skipif(not PYTHON.exists(), reason="the paddle environment is not built")
ENV = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", **SHARED_CORES_ENV}
STEPS = (0, 6)
LR_TIMES_2 = {equivalence.LR_SCALE_ENV: "2"}


def launch(run_dir, model="resnet50", scale="1x1", strategy="single", batch=4, size=32, steps=(2, 6), extra=(),
           threads=2, env=None):  # fmt: skip
    data = "real" if "--data-dir" in extra else "synthetic"
    cmd = [
        str(PYTHON), "-m", "dlbench.launch",
        "--framework", "paddle", "--model", model, "--precision", "fp32", "--data", data,
        "--batch", str(batch), "--scale", scale, "--strategy", strategy, "--repeat", "1",
        "--run-dir", str(run_dir), "--preset", "caict2020",
        "--warmup-steps", str(steps[0]), "--measured-steps", str(steps[1]), "--statistic", "mean",
        "--image-size", str(size), "--threads", str(threads), "--time-limit", "500", "--progress-every", "0",
        "--env-lock", str(REPO / "envs/paddle.txt"), *extra,
    ]  # fmt: skip
    env = {**ENV, **(env or {})}
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600, check=False)


def workdir(path, config: dict, name: str):
    """A pipeline working directory: the default config and `config` as `name` over it."""
    import yaml

    (path / "config").mkdir()
    (path / "config/config.yaml").write_text((REPO / "config/config.yaml").read_text())
    (path / name).write_text(yaml.safe_dump(config))
    return path


def finished_log(result, run_dir, rank=0):
    assert result.returncode == 0, result.stderr[-3000:]
    log = read_steplog(run_dir / f"rank{rank}.steps.jsonl")
    assert log.valid and log.status == "ok", (log.problems, log.footer)
    return log


def test_modules_declare_capabilities_without_importing_paddle_or_oneflow():
    code = (
        "import sys; from dlbench.runners import capabilities; p = capabilities('paddle'); o = capabilities('oneflow');"
        "assert not {'paddle', 'oneflow'} & set(sys.modules); print(p.strategy_names, p.models, o.models)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    models = "('resnet50', 'resnet152', 'vgg16', 'inception_v3', 'alexnet', 'bert_base')"
    assert out.strip() == f"('collective',) {models} ()"


def test_amp_on_the_cpu_and_every_oneflow_cell_are_planned_na_with_the_reason():
    from dlbench.planning.grid import expand

    grid = {
        "frameworks": ["paddle", "oneflow"],
        "models": ["resnet50", "bert_base"],
        "precision": ["fp32", "amp"],
        "data": ["synthetic"],
        "batch_per_device": [8],
        "scales": ["1x1", "1x2"],
        "strategies": {"paddle": ["collective"], "oneflow": ["ddp"]},
    }
    planned = expand({"grid": grid, "protocol": {"preset": "caict2020"}})
    runs = {(r.framework, r.model, r.precision, r.scale) for r in planned.runs}
    assert runs == {("paddle", m, "fp32", scale) for m in ("resnet50", "bert_base") for scale in ("1x1", "1x2")}
    reasons = {(c.framework, c.model, c.precision): why for c, why in planned.unavailable.items()}
    assert "auto_cast a no-op on CPUPlace" in reasons["paddle", "resnet50", "amp"]
    assert "auto_cast a no-op on CPUPlace" in reasons["paddle", "bert_base", "amp"]
    oneflow = {why for (fw, *_), why in reasons.items() if fw == "oneflow"}
    assert len(oneflow) == 1 and "CPython 3.7-3.10 wheels only" in oneflow.pop()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The equivalence reference (tests/frameworks/equivalence.py): one 1-thread device at the
    learning rate of two devices' global batch."""
    return equivalence.reference("paddle", tmp_path_factory.mktemp("paddle") / "reference")


@pytest.fixture(scope="module")
def single_run(tmp_path_factory):
    """ResNet-50, 32 px, batch 4, one device, 6 steps on the fixed synthetic batch."""
    run_dir = tmp_path_factory.mktemp("paddle") / "single"
    finished_log(launch(run_dir, steps=STEPS, threads=1, env=LR_TIMES_2), run_dir)
    return run_dir


@needs_env
def test_single_device_run_trains_and_writes_a_valid_log(single_run):
    log = read_steplog(single_run / "rank0.steps.jsonl")
    header = log.header["framework"]
    assert header["trainable_params"] == 25_557_032  # torchvision's ResNet-50
    assert header["execution"] == "dynamic graph" and header["compute_dtype"] == "float32"
    assert len(log.header["provenance"]["env_lock_sha256"]) == 64
    losses = [s["loss"] for s in log.steps]
    assert sum(losses[-3:]) < 0.5 * sum(losses[:3])  # a fixed batch is learnt
    assert json.loads((single_run / "launch.json").read_text())["rank_exit_codes"] == [0]


@needs_env
def test_collective_reproduces_the_single_device_losses(tmp_path, reference):
    """Two collective ranks (Gloo) on copies of the single run's batch: the all-reduced mean
    gradient is the single run's, so are the first update and the losses."""
    for losses in equivalence.multi_device("paddle", tmp_path / "run", "collective"):
        equivalence.assert_equivalent(losses, reference)
    for rank in (0, 1):
        framework = read_steplog(tmp_path / f"run/rank{rank}.steps.jsonl").header["framework"]
        assert framework["collective_backend"] == "GLOO" and framework["processes"] == 2


@needs_env
def test_to_static_steps_the_same_losses_as_the_dynamic_graph(tmp_path, reference):
    run_dir = tmp_path / "run"
    lr = {equivalence.LR_SCALE_ENV: "2"}
    equivalence.launch("paddle", run_dir, "--compile", steps=equivalence.STEPS, threads=1, env=lr, **equivalence.CASE)
    log = read_steplog(run_dir / "rank0.steps.jsonl")
    assert log.header["framework"]["execution"] == "paddle.jit.to_static (full graph)"
    equivalence.assert_equivalent(equivalence.losses(run_dir / "rank0.steps.jsonl"), reference)


@needs_env
def test_the_step_returns_the_loss_without_its_autograd_graph():
    """The worker keeps every step's loss handle until the run ends; with its graph, each would
    keep its step's memory (docs/frameworks/paddle.md, "Fast path")."""
    code = (
        "from dlbench.coords import RunCoords\n"
        "from dlbench.runners.base import RunSpec\n"
        "from dlbench.runners.paddle import Runner\n"
        "for compile in (False, True):\n"
        "    coords = RunCoords('paddle', 'resnet50', 'fp32', 'synthetic', '2', '1x1', 'single', 1)\n"
        "    runner = Runner(RunSpec(coords, 2, 32, 0, 1, 'cpu', compile=compile))\n"
        "    runner.build()\n"
        "    loss = runner.step()\n"
        "    print(compile, loss.stop_gradient, loss.grad_fn is None, runner.loss_value(loss) > 0)"
    )
    out = subprocess.run([str(PYTHON), "-c", code], cwd=REPO, env=ENV, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True", "True", "True", "True", "True", "True", "True"]


def test_a_cuda_only_precision_must_be_one_the_framework_offers():
    from dlbench.runners.plugin import Capabilities

    base = {"label": "X", "colour": "#000000", "models": ("resnet50",), "precisions": ("fp32",)}
    with pytest.raises(ValueError, match=r"cuda_only_precisions: expected some of precisions \('fp32',\)"):
        Capabilities(**base, cuda_only_precisions={"amp": "why"})
    assert Capabilities(**base, cuda_only_precisions={"fp32": "why"}).precision_unavailable("fp32", "cuda") is None


@needs_env
def test_paddle_vision_models_have_torchvisions_parameter_counts():
    code = (
        "from dlbench.runners.paddle import train\n"
        "for name in ('resnet152', 'vgg16', 'alexnet', 'inception_v3'):\n"
        "    print(name, train.image_model(name, 0)[1])"
    )
    out = subprocess.run([str(PYTHON), "-c", code], cwd=REPO, env=ENV, capture_output=True, text=True, check=True)
    counts = dict(line.split() for line in out.stdout.splitlines())
    # InceptionV3 without the auxiliary head, as the MXNet and TensorFlow runners build it.
    assert counts == {"resnet152": "60192808", "vgg16": "138357544", "alexnet": "61100840", "inception_v3": "23834568"}


@needs_env
def test_real_images_through_the_dataloader(tmp_path):
    """The ImageFolder layout (as the pipeline converts it) read by paddle.io.DataLoader in
    worker processes: uint8 NCHW batches, the manifest's labels; then a real-data run."""
    from dlbench.data import imagefolder, imagenet

    imagenet.generate(tmp_path / "imagenet", count=12, classes=3, image_size=40, seed=1, val_count=0)
    imagefolder.convert(tmp_path / "imagenet", tmp_path / "folder", splits=["train"])
    code = (
        "from types import SimpleNamespace as N\n"
        "from dlbench.runners.paddle import pipeline\n"
        f"spec = N(data_dir={str(tmp_path / 'folder')!r}, batch=4, data_workers=2, seed=0,\n"
        "         dist=N(rank=0, world_size=1))\n"
        "images, labels = next(pipeline.forever(pipeline.image_loader(spec, 32)))\n"
        "print(list(images.shape), images.dtype, list(labels.shape), set(labels.tolist()) <= {0, 1, 2})"
    )
    out = subprocess.run([str(PYTHON), "-c", code], cwd=REPO, env=ENV, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split("\n")[-2] == "[4, 3, 32, 32] paddle.uint8 [4] True"
    extra = ("--data-dir", str(tmp_path / "folder"), "--data-workers", "1")
    result = launch(tmp_path / "run", model="alexnet", batch=4, steps=(1, 3), extra=extra)
    log = finished_log(result, tmp_path / "run")
    assert "DataLoader(DatasetFolder" in log.header["framework"]["input_pipeline"]


@needs_env
def test_bert_base_trains_on_real_examples_with_the_reference_loss(tmp_path):
    """BERT-base (paddle.nn, Hugging Face's layers) on pre-training examples with padding and
    padded prediction slots: its parameters, a first loss near ln(vocab) + ln(2), finite steps."""
    import math

    import numpy as np

    from dlbench.data import bert
    from dlbench.recipe import BERT_BASE

    rng = np.random.default_rng(0)
    documents = [[list(rng.integers(1000, 30000, rng.integers(3, 9))) for _ in range(4)] for _ in range(6)]
    arrays = bert.make_examples(documents, examples=8, seq_len=32, max_predictions=5, masked_lm_prob=0.15,
                                short_seq_prob=0.5, vocab_size=BERT_BASE["vocab_size"], seed=0)  # fmt: skip
    (tmp_path / "bert").mkdir()
    bert.save_npz(tmp_path / "bert" / bert.EXAMPLES_NAME, arrays)
    extra = ("--data-dir", str(tmp_path / "bert"), "--seq-len", "32")
    result = launch(tmp_path / "run", model="bert_base", batch=2, steps=(0, 3), extra=extra)
    log = finished_log(result, tmp_path / "run")
    assert log.header["framework"]["trainable_params"] == 110_106_428  # MLM decoder tied to the embeddings
    assert log.header["framework"]["input_pipeline"].startswith("tokenised examples in memory")
    losses = [s["loss"] for s in log.steps]
    assert abs(losses[0] - (math.log(BERT_BASE["vocab_size"]) + math.log(2))) < 1.5 and all(map(math.isfinite, losses))


def test_a_five_framework_grid_plans_every_cell_or_names_why_not(tmp_path):
    """snakemake -n of TensorFlow, PyTorch, MXNet, PaddlePaddle and OneFlow x ResNet-50, VGG-16,
    BERT-base: every runnable cell is a train job, every other one has its reason."""

    from dlbench.planning.grid import expand

    grid = {
        "frameworks": ["tensorflow", "pytorch", "mxnet", "paddle", "oneflow"],
        "models": ["resnet50", "vgg16", "bert_base"],
        "batch_per_device": [8],
        "data": ["synthetic"],
        "precision": ["fp32"],
        "scales": ["1x1", "1x2"],
        "strategies": {
            "tensorflow": ["multi_worker_mirrored"], "pytorch": ["ddp"], "mxnet": ["dist_sync"],
            "paddle": ["collective"], "oneflow": ["ddp"],
        },
        "exclude": [],
        "only": [],
    }  # fmt: skip
    config = {"grid": grid, "protocol": {"preset": "caict2020", "repeats": 1}}
    workdir(tmp_path, config, "grid.yaml")
    command = [sys.executable, "-m", "snakemake", "-n", "-s", str(REPO / "Snakefile"), "-d", str(tmp_path)]
    result = subprocess.run([*command, "--configfile", str(tmp_path / "grid.yaml")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = set(re.findall(r"output: results/runs/([a-z0-9_]+/[a-z0-9_]+)/fp32/synthetic/bs8/(1x[12])/", result.stdout))
    planned = expand(config)
    assert jobs == {(f"{r.framework}/{r.model}", r.scale) for r in planned.runs}
    assert len(jobs) + len(planned.unavailable) == 5 * 3 * 2
    assert {c.framework for c in planned.unavailable} == {"oneflow"}
    assert all(why for why in planned.unavailable.values())


@needs_env
@pytest.mark.slow
def test_resnet50_through_the_pipeline_with_na_cells_named(tmp_path):
    """plan → data → train → aggregate → report with PaddlePaddle alone: ResNet-50 on synthetic
    and real images (the imagefolder conversion, DataLoader); AMP (CPU) stays in the tables as
    N/A. Two devices: test_collective_reproduces_the_single_device_losses."""
    import pandas as pd

    from tests.tiny_pipeline import snakemake

    grid = {
        "frameworks": ["paddle"],
        "models": ["resnet50"],
        "precision": ["fp32", "amp"],
        "data": ["synthetic", "real"],
        "batch_per_device": [4],
        "scales": ["1x1"],
        "exclude": [],
    }
    tiny = {
        "grid": grid,
        "protocol": {"preset": "mlperf", "warmup_steps": 1, "measured_steps": 3, "repeats": 1},
        "run": {"image_size": 32, "threads": 2, "progress_every": 1},
        "data": {"images": {"count": 16, "classes": 4, "image_size": 40, "shards": 2}},
    }
    result = snakemake(workdir(tmp_path, tiny, "tiny.yaml"))
    assert result.returncode == 0, result.stderr[-4000:]
    cells = pd.read_csv(tmp_path / "results/tables/cells.csv", dtype={"batch": str})
    measured = cells[cells["status"] == "ok"]
    ran = set(zip(measured["data"], measured["scale"], strict=True))
    assert ran == {("synthetic", "1x1"), ("real", "1x1")}
    assert (measured["model"] == "resnet50").all() and (measured["throughput"] > 0).all()
    na = cells[cells["status"] == "unavailable"]
    assert len(na) == 2 and na["reason"].str.contains("auto_cast a no-op on CPUPlace").all()
    assert "PaddlePaddle" in (tmp_path / "results/report/index.html").read_text()  # its label
