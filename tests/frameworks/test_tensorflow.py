"""The TensorFlow runner for real, in its own environment (.venvs/tensorflow, built by the pipeline).

These tests run in the analysis environment, which has no TensorFlow: everything that
needs TensorFlow runs in a subprocess of the framework environment's python.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import textwrap

import pytest

from dlbench.steplog import read_steplog
from tests.conftest import REPO, SHARED_CORES_ENV, framework_python
from tests.frameworks import equivalence

PYTHON = framework_python("tensorflow")
pytestmark = pytest.mark.skipif(not PYTHON.exists(), reason="the tensorflow environment is not built")

LOCK = REPO / "envs/tensorflow.txt"
ENV = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", **SHARED_CORES_ENV, "TF_CPP_MIN_LOG_LEVEL": "2"}

# Trainable parameters as this runner builds each model, measured with TF 2.21.0 (the CNNs
# are TF-native, dlbench/runners/tensorflow/cnn.py; BERT is Keras 3.15.1); batch-norm moving
# statistics excluded, as torch excludes buffers. The torchvision counts are from
# torchvision 0.29.1 (.venvs/pytorch).
# The counts at the small sizes the tests train at; at 224 px every model's count and FLOPs
# (ResNet-50 and -152 as torchvision's: no conv bias before batch norm, v1.5; AlexNet in
# torchvision's layout; BERT-base with the MLM decoder tied) are test_model_equivalence.py's.
EXPECTED_TRAINABLE_PARAMS = {
    ("resnet50", 32): 25_557_032,  # = torchvision's at any size
    # Keras VGG16 flattens the last feature map: the first dense layer depends on the size.
    ("vgg16", 32): 37_694_248,  # 14,714,688 conv + (512 x 4096 + 4096) + 16,781,312 + 4,097,000
    # InceptionV3 batch norm has no scale (gamma), as Keras's: torchvision (aux_logits=False) has
    # 23,834,568, i.e. 17,216 more. Needs >= 75 px.
    ("inception_v3", 75): 23_817_352,
    ("alexnet", 64): 61_100_840,  # adaptive pool to 6x6: = torchvision's at any size
}


# The single-device reference runs at the learning rate of a 2-device run's global batch.
TWO_DEVICE_LR = {equivalence.LR_SCALE_ENV: "2"}


def run_python(code: str, timeout: int = 300) -> str:
    result = subprocess.run(
        [str(PYTHON), "-c", textwrap.dedent(code)],
        cwd=REPO,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout


def launch(
    run_dir,
    *extra,
    model="resnet50",
    precision="fp32",
    scale="1x1",
    strategy="single",
    batch=4,
    steps=(2, 4),
    threads=2,
    image_size=32,
    data="synthetic",
    env=None,
):
    cmd = [
        str(PYTHON), "-m", "dlbench.launch",
        "--framework", "tensorflow", "--model", model, "--precision", precision, "--data", data,
        "--batch", str(batch), "--scale", scale, "--strategy", strategy, "--repeat", "1",
        "--run-dir", str(run_dir), "--preset", "caict2020",
        "--warmup-steps", str(steps[0]), "--measured-steps", str(steps[1]), "--statistic", "mean",
        "--image-size", str(image_size), "--threads", str(threads), "--time-limit", "400",
        "--progress-every", "0", "--env-lock", str(LOCK),
        *extra,
    ]  # fmt: skip
    run_env = {**ENV, **(env or {})}
    result = subprocess.run(cmd, cwd=REPO, env=run_env, capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stderr[-4000:]
    return result


def ok_log(path):
    log = read_steplog(path)
    assert log.valid and log.status == "ok", (log.problems, log.footer)
    return log


def losses(log):
    return [s["loss"] for s in log.steps]


def locked_version(package: str) -> str:
    return re.search(rf"^{package}==(\S+)", LOCK.read_text(), re.M).group(1)


# -- no TensorFlow needed ------------------------------------------------------------------


def test_module_declares_capabilities_without_importing_tensorflow():
    code = (
        "import sys; from dlbench.runners import capabilities; c = capabilities('tensorflow');"
        "assert 'tensorflow' not in sys.modules and 'keras' not in sys.modules; print(c)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert "multi_worker_mirrored" in out and "bert_base" in out


def test_every_rank_computes_the_same_tf_config():
    from dlbench.runners.base import Distributed
    from dlbench.runners.tensorflow import tf_config

    ranks = [Distributed(rank=r, world_size=3, local_rank=r, local_world_size=3, master_port=4000) for r in range(3)]
    configs = [tf_config(d) for d in ranks]
    assert all(c["cluster"] == configs[0]["cluster"] for c in configs)
    assert configs[0]["cluster"]["worker"] == ["127.0.0.1:4000", "127.0.0.1:4001", "127.0.0.1:4002"]
    assert [c["task"] for c in configs] == [{"type": "worker", "index": r} for r in range(3)]

    two_nodes = Distributed(rank=3, world_size=4, local_rank=1, local_world_size=2)
    with pytest.raises(ValueError, match="endpoints"):
        tf_config(two_nodes)
    workers = ["a:1", "a:2", "b:1", "b:2"]
    given = Distributed(rank=3, world_size=4, local_rank=1, local_world_size=2, endpoints={"workers": workers})
    assert tf_config(given) == {"cluster": {"worker": workers}, "task": {"type": "worker", "index": 3}}


# -- in the TensorFlow environment ---------------------------------------------------------


@pytest.mark.slow
def test_trainable_parameter_counts_of_every_model():
    cases = [[m, s] for m, s in EXPECTED_TRAINABLE_PARAMS]
    out = run_python(
        f"""
        import json, keras, tensorflow as tf
        from dlbench.runners import tensorflow as r
        from dlbench.runners.tensorflow import cnn
        counts = {{}}
        for model, size in {cases!r}:
            if model == "bert_base":
                m = r._bert_model(keras, tf, r.BERT_BASE, size)
            else:
                m = cnn.ImageModel(model, size, 1000, 0, {{}})
            counts[f"{{model}}@{{size}}"] = int(sum(v.numpy().size for v in m.trainable_variables))
            keras.backend.clear_session()
        print(json.dumps(counts))
        """
    )
    counts = json.loads(out.strip().splitlines()[-1])
    assert counts == {f"{m}@{s}": n for (m, s), n in EXPECTED_TRAINABLE_PARAMS.items()}


def test_oom_errors_are_recognised():
    out = run_python(
        """
        import tensorflow as tf
        from dlbench.runners.tensorflow import Runner
        r = Runner(None); r.tf = tf
        print(r.is_oom(tf.errors.ResourceExhaustedError(None, None, "OOM when allocating tensor")),
              r.is_oom(MemoryError("std::bad_alloc")), r.is_oom(ValueError("shapes")))
        """
    )
    assert out.split() == ["True", "True", "False"]


@pytest.fixture(scope="module")
def single_run(tmp_path_factory):
    """One single-device ResNet-50 run (32 px, batch 4, 30 steps on the fixed synthetic batch)."""
    run_dir = tmp_path_factory.mktemp("tf") / "single"
    launch(run_dir, steps=(0, 30), threads=1, env=TWO_DEVICE_LR)
    return ok_log(run_dir / "rank0.steps.jsonl")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The equivalence reference at 1 thread: the kernels of each 1-thread worker of a 2-thread
    two-worker run (tests/frameworks/equivalence.py)."""
    return equivalence.reference("tensorflow", tmp_path_factory.mktemp("tf") / "reference")


@pytest.fixture(scope="module")
def reference_two_threads(tmp_path_factory):
    """ResNet-50 (no dropout: each MirroredStrategy replica draws its own masks) at 2 threads,
    the kernels one MirroredStrategy process with 2 threads runs; its first update."""
    run_dir = tmp_path_factory.mktemp("tf") / "reference2"
    case, steps = equivalence.NO_DROPOUT_CASE, equivalence.FIRST_STEPS
    return equivalence.reference("tensorflow", run_dir, threads=2, case=case, steps=steps)


def test_single_device_run_writes_a_valid_log(single_run):
    header = single_run.header
    assert header["framework"]["version"] == locked_version("tensorflow-cpu")
    assert header["framework"]["trainable_params"] == 25_557_032
    assert "FusedBatchNormV3" in header["framework"]["implementation"]
    assert header["framework"]["xla"] is False and header["framework"]["precision_policy"] == "float32"
    assert header["framework"]["intra_op_threads"] == 1 and header["threads"] == 1
    assert len(header["provenance"]["env_lock_sha256"]) == 64
    assert len(single_run.measured_steps()) == 30
    assert all(s["samples"] == 4 for s in single_run.steps)


def test_loss_decreases_on_a_fixed_batch(single_run):
    values = losses(single_run)
    assert len(values) == 30 and all(v is not None and math.isfinite(v) for v in values)
    assert sum(values[-5:]) / 5 < 0.5 * sum(values[:5]) / 5


def test_two_worker_mirrored_run_reproduces_the_single_device_losses(tmp_path, reference):
    """Two MWMS workers on copies of the batch: the all-reduced gradient (sum over ranks of each
    rank's loss divided by the global batch) is the single-device gradient; a missing all-reduce
    or a wrong normalisation changes the first update."""
    for losses in equivalence.multi_device("tensorflow", tmp_path / "mwms", "multi_worker_mirrored"):
        equivalence.assert_equivalent(losses, reference)
    assert json.loads((tmp_path / "mwms/launch.json").read_text())["rank_exit_codes"] == [0, 0]
    for rank in (0, 1):
        log = ok_log(tmp_path / f"mwms/rank{rank}.steps.jsonl")
        assert log.header["world_size"] == 2 and log.header["rank"] == rank
        assert log.header["threads"] == 1  # 2 threads split over 2 local ranks
        strategy = log.header["framework"]["strategy"]
        assert strategy["num_replicas_in_sync"] == 2 and strategy["communication"] == "RING"
        assert strategy["tf_config"]["task"]["index"] == rank


@pytest.mark.parametrize(
    "strategy, cross_device_ops",
    [
        pytest.param("replicated_copy", "HierarchicalCopyAllReduce", marks=pytest.mark.slow),
        ("replicated_pscpu", "ReductionToOneDevice"),
    ],
)
def test_replicated_on_two_logical_cpu_devices_reproduces_the_single_device_losses(
    tmp_path, reference_two_threads, strategy, cross_device_ops
):
    """MirroredStrategy: one process drives two (logical CPU) devices, one step log. Both
    devices hold the same batch and the loss is divided by the global batch (2 x 4), so only
    gradients really summed across the two replicas give the single-device update: without
    the all-reduce each replica would take half a step at the first update."""
    case, steps = equivalence.NO_DROPOUT_CASE, equivalence.FIRST_STEPS
    (losses,) = equivalence.multi_device("tensorflow", tmp_path / "run", strategy, case=case, steps=steps)
    equivalence.assert_same_first_update(losses, reference_two_threads)
    assert json.loads((tmp_path / "run/launch.json").read_text())["rank_exit_codes"] == [0]
    log = ok_log(tmp_path / "run/rank0.steps.jsonl")
    assert log.header["run"]["strategy"] == strategy
    assert log.header["local_devices"] == 2 and log.header["world_size"] == 1
    assert all(s["samples"] == 2 * equivalence.CASE["batch"] for s in log.steps)  # batch x devices
    info = log.header["framework"]["strategy"]
    assert info["name"] == "MirroredStrategy" and info["variant"] == strategy
    assert info["cross_device_ops"] == cross_device_ops and info["num_replicas_in_sync"] == 2
    assert [d.rsplit("/", 1)[1] for d in info["devices"]] == ["device:CPU:0", "device:CPU:1"]
    assert log.header["threads"] == 2 and log.header["framework"]["intra_op_threads"] == 2


def test_parameter_server_coordinator_with_two_workers_reproduces_the_single_device_losses(tmp_path, reference):
    """ParameterServerStrategy: the launcher starts one task; it starts 2 worker servers and 1
    parameter server and coordinates; only the coordinator writes a step log (samples = 2 x
    batch). The gradient sums on the parameter server of two identical batches, divided by the
    global batch, are the single-device gradient: a lost worker contribution, or workers
    updating the variables on their own, would change the first update."""
    (losses,) = equivalence.multi_device("tensorflow", tmp_path / "run", "parameter_server")
    equivalence.assert_equivalent(losses, reference)
    assert sorted(p.name for p in (tmp_path / "run").glob("rank*")) == ["rank0.steps.jsonl"]
    record = json.loads((tmp_path / "run/launch.json").read_text())
    assert record["rank_exit_codes"] == [0] and record["step_logs"] == 1
    log = ok_log(tmp_path / "run/rank0.steps.jsonl")
    assert log.header["run"]["strategy"] == "parameter_server" and log.header["local_devices"] == 2
    assert all(s["samples"] == 2 * equivalence.CASE["batch"] for s in log.steps)
    info = log.header["framework"]["strategy"]
    assert info["name"] == "ParameterServerStrategy" and info["synchronous"] is True
    assert info["workers"] == 2 and info["parameter_servers"] == 1 and info["global_batch"] == 8
    assert info["tf_config"]["task"] == {"type": "chief", "index": 0}
    # the worker and PS servers ended with the run
    ports = [a.rsplit(":", 1)[1] for job in ("worker", "ps") for a in info["tf_config"]["cluster"][job]]
    assert not any(f"127.0.0.1:{p}" in _cmdlines() for p in ports)


def _cmdlines() -> str:
    """Command lines of every process (the PS servers carry their cluster in theirs)."""
    import contextlib
    from pathlib import Path

    text = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                text.append((proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
    return "\n".join(text)


def test_amp_run_uses_bfloat16_on_cpu(tmp_path):
    launch(tmp_path / "run", precision="amp", steps=(0, 6))
    log = ok_log(tmp_path / "run/rank0.steps.jsonl")
    assert log.header["framework"]["precision_policy"] == "mixed_bfloat16"
    values = losses(log)
    assert all(v is not None and math.isfinite(v) for v in values)
    assert sum(values[-3:]) < sum(values[:3])


@pytest.mark.slow
def test_xla_compiled_step(tmp_path):
    launch(tmp_path / "run", "--compile", model="alexnet", image_size=64, steps=(1, 3))
    log = ok_log(tmp_path / "run/rank0.steps.jsonl")
    assert log.header["framework"]["xla"] is True
    assert log.header["framework"]["trainable_params"] == 61_100_840


@pytest.mark.slow
def test_parameter_server_across_two_nodes_started_like_srun(tmp_path, reference):
    """The multi-node layout of parameter_server, with two "nodes" on this host: two tasks
    started by hand as srun would (one per node; DLBENCH_NODES lists the node addresses).
    Task 0 coordinates and logs; task 1 serves its node's worker and parameter server and
    exits 0 once the coordinator has finished. Two parameter servers hold the variables."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    case, steps = equivalence.CASE, equivalence.STEPS
    args = [
        "--framework", "tensorflow", "--model", case["model"], "--precision", "fp32", "--data", "synthetic",
        "--batch", str(case["batch"]), "--scale", "2x1", "--strategy", "parameter_server", "--repeat", "1",
        "--run-dir", str(run_dir), "--preset", "caict2020", "--warmup-steps", str(steps[0]),
        "--measured-steps", str(steps[1]), "--statistic", "mean", "--image-size", str(case["image_size"]),
        "--threads", "1", "--time-limit", "400", "--progress-every", "0",
    ]  # fmt: skip
    procs = []
    for rank in (0, 1):
        env = dict(
            ENV,
            DLBENCH_RANK=str(rank),
            DLBENCH_WORLD_SIZE="2",
            DLBENCH_LOCAL_RANK="0",
            DLBENCH_LOCAL_WORLD_SIZE="1",
            DLBENCH_MASTER_ADDR="127.0.0.1",
            DLBENCH_MASTER_PORT=str(port),
            DLBENCH_NODES="127.0.0.1,127.0.0.1",
        )
        procs.append(
            subprocess.Popen([str(PYTHON), "-m", "dlbench.launch", *args], cwd=REPO, env=env, stderr=subprocess.PIPE)
        )
    codes = [p.wait(timeout=600) for p in procs]
    assert codes == [0, 0], procs[1].stderr.read()[-3000:]
    assert sorted(p.name for p in run_dir.iterdir()) == ["rank0.steps.jsonl"]
    log = ok_log(run_dir / "rank0.steps.jsonl")
    info = log.header["framework"]["strategy"]
    assert info["workers"] == 2 and info["parameter_servers"] == 2
    assert all(s["samples"] == 2 * case["batch"] for s in log.steps)
    equivalence.assert_equivalent(losses(log), reference)


# -- real data -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tfrecords(tmp_path_factory):
    """24 generated 48 px JPEGs of 3 classes in 3 TFRecord shards, converted by the rule's script."""
    from dlbench.data import imagenet

    root = tmp_path_factory.mktemp("tfdata")
    imagenet.generate(root / "images", count=24, classes=3, image_size=48, seed=1)
    script = REPO / "workflow/scripts/convert_tfrecord.py"
    args = ["--source", str(root / "images"), "--out", str(root / "tfrecord"), "--splits", "train"]
    result = subprocess.run(
        [str(PYTHON), str(script), *args, "--seed", "0", "--shards", "3"],
        cwd=REPO, env=ENV, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    return root / "tfrecord"


@pytest.fixture(scope="module")
def bert_examples(tmp_path_factory):
    """32 pre-training examples of sequence length 32 (padded, up to 5 predictions), made by
    dlbench.data.bert from random token 'documents' (no tokenizer needed)."""
    import random

    from dlbench.data import bert

    rng = random.Random(0)
    documents = [
        [[rng.randrange(5, 2000) for _ in range(rng.randint(4, 12))] for _ in range(rng.randint(2, 6))]
        for _ in range(20)
    ]
    arrays = bert.make_examples(
        documents, examples=32, seq_len=32, max_predictions=5, masked_lm_prob=0.15, short_seq_prob=0.1,
        vocab_size=2000, seed=0,
    )  # fmt: skip
    assert (arrays["input_mask"] == 0).any()  # some padding, which the attention mask must hide
    root = tmp_path_factory.mktemp("bert")
    bert.save_npz(root / bert.EXAMPLES_NAME, arrays)
    return root


def check_real_data_steps(log, samples):
    assert log.steps and all(s["samples"] == samples for s in log.steps)
    assert all(s.get("data_wait") is not None and s["data_wait"] >= 0 for s in log.measured_steps())
    # Labels out of range would fail sparse_softmax_cross_entropy on the CPU; NaN would show here.
    assert all(v is not None and math.isfinite(v) for v in losses(log))


def test_real_images_single_device(tmp_path, tfrecords):
    launch(
        tmp_path / "run", "--data-dir", str(tfrecords), "--data-workers", "2",
        model="alexnet", image_size=64, steps=(2, 3), data="real",
    )  # fmt: skip
    log = ok_log(tmp_path / "run/rank0.steps.jsonl")
    assert log.header["run"]["data"] == "real"
    check_real_data_steps(log, samples=4)
    pipeline = log.header["framework"]["input_pipeline"]
    assert pipeline.startswith("tf.data TFRecord (3 shards, one pipeline)")
    assert "interleave cycle 3 x 2 threads" in pipeline and "map 2 threads" in pipeline
    assert "resize 64" in pipeline and "private threadpool 2" in pipeline


def test_real_images_replicated_on_two_logical_cpu_devices(tmp_path, tfrecords):
    """MirroredStrategy: one pipeline, one per-device batch for each of the two devices."""
    launch(
        tmp_path / "run", "--data-dir", str(tfrecords), "--data-workers", "1",
        model="alexnet", image_size=64, scale="1x2", strategy="replicated_copy", steps=(2, 3), data="real",
    )  # fmt: skip
    log = ok_log(tmp_path / "run/rank0.steps.jsonl")
    check_real_data_steps(log, samples=2 * 4)
    assert log.header["framework"]["strategy"]["global_batch"] == 8
    assert "one pipeline, a batch per device" in log.header["framework"]["input_pipeline"]


def test_real_bert_examples(tmp_path, bert_examples):
    """The full 110 M-parameter BERT-base through the launcher, on real examples at short
    sequences (that it learns: tests/frameworks/test_bert.py, at tiny sizes)."""
    launch(
        tmp_path / "run", "--seq-len", "32", "--data-dir", str(bert_examples),
        model="bert_base", batch=2, steps=(2, 3), data="real",
    )  # fmt: skip
    log = ok_log(tmp_path / "run/rank0.steps.jsonl")
    check_real_data_steps(log, samples=2)
    assert log.header["framework"]["trainable_params"] == 110_106_428
    assert log.header["seq_len"] == 32
    assert log.header["framework"]["input_pipeline"].startswith(
        "tf.data from the tokenised examples in memory (32 x 32)"
    )
    # masked LM over a vocabulary of 30,522 (≈ ln 30522 = 10.3) + next sentence (≈ ln 2)
    assert all(8 < v < 14 for v in losses(log))


def test_bert_attention_mask_hides_padding():
    """With input_mask, what sits in the padding does not change the outputs; without, it does."""
    out = run_python(
        """
        import keras, tensorflow as tf
        from dlbench.runners import tensorflow as r
        cfg = dict(r.BERT_BASE, vocab_size=50, hidden_size=16, num_hidden_layers=2, num_attention_heads=2,
                   intermediate_size=32)
        keras.utils.set_random_seed(0)
        model = r._bert_model(keras, tf, cfg, 8)
        ids = tf.constant([[2, 7, 8, 9, 3, 0, 0, 0]])
        other = tf.constant([[2, 7, 8, 9, 3, 11, 12, 13]])  # different tokens in the padding
        types, positions = tf.zeros_like(ids), tf.constant([[1, 2]])
        mask = tf.constant([[1, 1, 1, 1, 1, 0, 0, 0]])
        def mlm(x, *extra):
            return model([x, types, positions, *extra], training=False)[0]
        masked = float(tf.reduce_max(tf.abs(mlm(ids, mask) - mlm(other, mask))))
        unmasked = float(tf.reduce_max(tf.abs(mlm(ids) - mlm(other))))
        print(masked, unmasked)
        """
    )
    masked, unmasked = map(float, out.split()[-2:])
    assert masked < 1e-5 < unmasked


@pytest.fixture(scope="module")
def broken_tfrecords(tfrecords):
    """Copies of the shards: one with record 3 of shard 1 truncated to half its JPEG, one with shard 2 missing."""
    import shutil

    corrupt, missing = tfrecords.parent / "corrupt", tfrecords.parent / "missing"
    shutil.copytree(tfrecords, corrupt)
    shutil.copytree(tfrecords, missing)
    (missing / "train-00002-of-00003").unlink()
    out = run_python(
        f"""
        import tensorflow as tf
        path = {str(corrupt / "train-00001-of-00003")!r}
        records = [r.numpy() for r in tf.data.TFRecordDataset(path)]
        example = tf.train.Example.FromString(records[3])
        feature = example.features.feature
        encoded = feature["image/encoded"].bytes_list.value[0]
        feature["image/encoded"].bytes_list.value[0] = encoded[: len(encoded) // 2]
        records[3] = example.SerializeToString()
        with tf.io.TFRecordWriter(path) as writer:
            for record in records:
                writer.write(record)
        print(feature["image/filename"].bytes_list.value[0].decode())
        """
    )
    return corrupt, missing, out.split()[-1]


def failed_log(run_dir):
    log = read_steplog(run_dir / "rank0.steps.jsonl")
    assert log.status == "failed", log.footer
    return log.footer["error"]


def test_corrupt_jpeg_and_missing_shard_are_named(tmp_path, broken_tfrecords):
    corrupt, missing, filename = broken_tfrecords
    # 24 images in batches of 4: every image is decoded within the first 6 steps.
    launch(
        tmp_path / "corrupt", "--data-dir", str(corrupt),
        model="alexnet", image_size=64, steps=(0, 12), data="real",
    )  # fmt: skip
    error = failed_log(tmp_path / "corrupt")
    assert f"{corrupt}/train-00001-of-00003: record 3 ({filename}): corrupt image" in error
    assert "Invalid JPEG data" in error and "function_node" not in error
    launch(tmp_path / "missing", "--data-dir", str(missing), model="alexnet", image_size=64, steps=(0, 2), data="real")
    error = failed_log(tmp_path / "missing")
    assert f"{missing}/train-00002-of-00003: TFRecord shard not found" in error


@pytest.mark.slow
def test_real_images_two_worker_mirrored(tmp_path, tfrecords):
    """MWMS: each worker its own pipeline over its own shards; both log the same global loss."""
    launch(
        tmp_path / "run", "--data-dir", str(tfrecords), "--data-workers", "1",
        model="alexnet", image_size=64, scale="1x2", strategy="multi_worker_mirrored", steps=(2, 3), data="real",
    )  # fmt: skip
    logs = [ok_log(tmp_path / f"run/rank{r}.steps.jsonl") for r in (0, 1)]
    for log in logs:
        check_real_data_steps(log, samples=4)
        # 3 shards over 2 workers: whole files each (2 and 1); --data-workers is per rank
        assert (
            "(3 shards, 2 workers, each its own): interleave cycle 2 x 1 threads"
            in log.header["framework"]["input_pipeline"]
        )
    assert losses(logs[0]) == pytest.approx(losses(logs[1]))


@pytest.mark.slow
def test_real_images_parameter_server(tmp_path, tfrecords):
    """Each PS worker reads its own pipeline inside its scheduled closure (data_wait ≈ 0 there)."""
    launch(
        tmp_path / "run", "--data-dir", str(tfrecords), "--data-workers", "2",
        model="alexnet", image_size=64, scale="1x2", strategy="parameter_server", steps=(2, 3), data="real",
    )  # fmt: skip
    log = ok_log(tmp_path / "run/rank0.steps.jsonl")
    check_real_data_steps(log, samples=2 * 4)
    pipeline = log.header["framework"]["input_pipeline"]
    assert "every worker all shards, its own order" in pipeline and "inside its step" in pipeline
