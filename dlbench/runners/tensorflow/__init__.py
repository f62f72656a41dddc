"""TensorFlow runner: Keras model definitions, a custom `tf.function` train step, MWMS across devices.

The fast path, as TensorFlow's own benchmarks do it: channels-last (NHWC, TF's native
layout), a synthetic batch created once on the device, one `tf.function` per step doing
forward, loss, gradients and the optimizer update (SGD momentum 0.9; Adam for BERT),
XLA (`jit_compile`) only when the run asks for compilation, Keras mixed-precision
policies for AMP ("mixed_bfloat16" on CPU, "mixed_float16" + loss scaling on GPU).

Real data (`data: real`): a tf.data pipeline as TensorFlow's official ResNet model and
tf_cnn_benchmarks read ImageNet TFRecords (see `image_dataset`: shuffled shards, parallel
interleave, shuffle buffer, parallel decode-and-crop + flip + resize, batch, prefetch; the
thread counts from --data-workers), BERT from the tokenised examples in memory. The batch
comes from next_batch() (timed apart as data_wait) and the tf.function step takes it as its
argument with a fixed signature; uint8 images become normalised floats inside the step.

Models:
  resnet50, resnet152, vgg16, inception_v3: `keras.applications` with weights=None,
    classes=1000, the run's image size, logits out (softmax is in the loss). Keras ResNets
    are v1 (stride in the first 1x1 conv; torchvision's are v1.5: same parameters,
    ≈ 10 % fewer FLOPs at the same size); Keras VGG16 flattens the last feature map, so
    below 224 px it has fewer parameters than torchvision's (which pools to 7x7); Keras
    InceptionV3 has no auxiliary head (the PyTorch runner switches it off too).
  alexnet: torchvision's layout in Keras layers (explicit zero padding, adaptive average
    pooling to 6x6, dropout 0.5): same shapes and parameters (61,100,840) at any size.
  bert_base: this module's own Keras BERT-base pre-training model (see `_bert_model`),
    110,106,428 parameters like Google's/Hugging Face's BertForPreTraining, MLM decoder
    tied to the word embeddings; built from `BERT_BASE`, nothing is downloaded.

Importing this module does not import TensorFlow (the analysis environment imports it
to validate config); `build()` does.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import socket
import subprocess
import sys
import time

from dlbench.models import CATALOGUE, IMAGE_CLASSES
from dlbench.runners import _servers
from dlbench.runners.base import Runner as BaseRunner
from dlbench.runners.tensorflow.bert import bert_model as _bert_model

FRAMEWORK = "tensorflow"
MODELS = ("resnet50", "resnet152", "vgg16", "inception_v3", "alexnet", "bert_base")
UNAVAILABLE: dict[str, str] = {}
STRATEGIES = (
    "multi_worker_mirrored",
    "replicated_nccl",
    "replicated_copy",
    "replicated_pscpu",
    "parameter_server",
    "horovod",
)
PRECISIONS = ("fp32", "amp")
DATA = ("synthetic", "real")
# MirroredStrategy: one process drives all devices of its node (and only one node).
PROCESS_PER_NODE_STRATEGIES = ("replicated_nccl", "replicated_copy", "replicated_pscpu")
SINGLE_NODE_STRATEGIES = PROCESS_PER_NODE_STRATEGIES
# ParameterServerStrategy: the coordinator (rank 0) writes the only step log.
COORDINATOR_STRATEGIES = ("parameter_server",)
CUDA_ONLY_STRATEGIES = {
    "replicated_nccl": "NcclAllReduce has no CPU kernels (TensorFlow: 'NcclAllReduce ... no registered kernels')",
}


def _horovod_unavailable() -> str:
    from dlbench.runners._horovod import UNAVAILABLE

    return UNAVAILABLE


UNAVAILABLE_STRATEGIES = {"horovod": _horovod_unavailable()}

# What one step of `parameter_server` is (recorded in the header).
PS_STEP = (
    "synchronous: W scheduled closures (W = workers), each one per-device batch on whichever worker is "
    "free (normally one each), forward + backward, gradients added to sums on the parameter servers; "
    "join; then one scheduled closure applies the summed gradient (divided by the global batch) with the "
    "optimizer and clears the sums; join. samples = W x batch; only the coordinator writes a step log"
)

RENDEZVOUS_TIMEOUT_S = 180  # parameter_server: every server port reachable / coordinator seen


def strategy_kind(name: str) -> str:
    if name == "single":
        return "single"
    if name == "multi_worker_mirrored":
        return "mwms"
    if name in PROCESS_PER_NODE_STRATEGIES:
        return "replicated"
    if name == "parameter_server":
        return "ps"
    if name == "horovod":
        return "horovod"
    raise ValueError(f"tensorflow runner: strategy {name!r} not offered (have {STRATEGIES})")


# BERT-base (Devlin et al. 2018, google-research/bert bert_config.json for uncased_L-12_H-768_A-12).
# max_predictions_per_seq: the MLM head runs on 20 gathered positions per sequence at
# sequence length 128 (round(0.15 * 128)), as in Google's and NVIDIA's TF pre-training
# scripts; Hugging Face's BertForPreTraining runs the decoder on every position instead.
BERT_BASE = {
    "vocab_size": 30522,
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    "layer_norm_eps": 1e-12,
    "initializer_range": 0.02,
    "max_predictions_per_seq_fraction": 0.15,
}

SGD_LR = 0.01
SGD_MOMENTUM = 0.9
ADAM_LR = 1e-4


# -- real data (data: real) ------------------------------------------------------------------
# The ImageNet input pipeline of TensorFlow's official ResNet model (tensorflow/models,
# official/.../imagenet_preprocessing.py) and tf_cnn_benchmarks, on the TFRecord shards of
# dlbench.data.tfrecord. Counts of threads come from the launcher's --data-workers (the
# rank's CPU share) instead of AUTOTUNE, so that the pipeline's CPU use is bounded and
# recorded: a private tf.data thread pool of that many threads runs the parallel
# interleave and map (TF's shared pool would otherwise use every core of the machine),
# each op inside tf.data single-threaded (max_intra_op_parallelism 1, as both do).
SHUFFLE_BUFFER = 10_000  # records (official ResNet and tf_cnn_benchmarks: 10,000)
INTERLEAVE_CYCLE = 10  # shards read at once (official ResNet: cycle_length 10)
TFRECORD_BUFFER = 8 << 20  # TFRecordDataset read buffer (official ResNet: 8 MB)
# ImageNet's per-channel mean and standard deviation (0-255), as the PyTorch runner uses.
IMAGE_MEAN = (0.485 * 255, 0.456 * 255, 0.406 * 255)
IMAGE_STD = (0.229 * 255, 0.224 * 255, 0.225 * 255)
CORRUPT_SCAN_S = 60  # after a decode error: how long to look for the record that caused it


def _data_options(tf, threads: int):
    options = tf.data.Options()
    options.threading.private_threadpool_size = threads
    options.threading.max_intra_op_parallelism = 1
    options.deterministic = False
    return options


def _parse_and_augment(tf, serialized, size: int):
    """One training example: parse, random crop while decoding, flip, resize; uint8 out.

    As the official ResNet pipeline: `sample_distorted_bounding_box` over the record's
    boxes (the whole image when it has none: min_object_covered 0.1, aspect ratio
    [3/4, 4/3], area [5 %, 100 %], 100 attempts), `decode_and_crop_jpeg` decodes only
    the crop window, random left-right flip, bilinear resize to `size`. The pixels stay
    uint8 (rounded) for the trip to the device; the step converts and normalises.
    """
    from dlbench.data.tfrecord import BBOX_KEYS, LABEL_OFFSET

    spec = {
        "image/encoded": tf.io.FixedLenFeature([], tf.string),
        "image/class/label": tf.io.FixedLenFeature([], tf.int64),
        **{f"image/object/bbox/{key}": tf.io.VarLenFeature(tf.float32) for key in BBOX_KEYS},
    }
    features = tf.io.parse_single_example(serialized, spec)
    box = [features[f"image/object/bbox/{key}"].values for key in ("ymin", "xmin", "ymax", "xmax")]
    boxes = tf.stack(box, axis=1)[tf.newaxis]  # [1, boxes, 4]
    encoded = features["image/encoded"]
    begin, crop, _ = tf.image.sample_distorted_bounding_box(
        tf.image.extract_jpeg_shape(encoded),
        bounding_boxes=boxes,
        min_object_covered=0.1,
        aspect_ratio_range=[0.75, 1.33],
        area_range=[0.05, 1.0],
        max_attempts=100,
        use_image_if_no_bounding_boxes=True,
    )
    window = tf.stack([begin[0], begin[1], crop[0], crop[1]])
    image = tf.image.decode_and_crop_jpeg(encoded, window, channels=3)
    image = tf.image.random_flip_left_right(image)
    image = tf.image.resize(image, [size, size], method="bilinear")
    image = tf.cast(tf.clip_by_value(tf.round(image), 0.0, 255.0), tf.uint8)
    label = tf.cast(features["image/class/label"], tf.int32) - LABEL_OFFSET
    return {"images": image, "labels": label}


def image_dataset(tf, shards, *, batch: int, size: int, threads: int, seed, pipelines: int = 1, index: int = 0):
    """The training images of one input pipeline: batches of {"images": uint8 NHWC, "labels"}.

    list shards (shuffled) → this pipeline's shards (whole files when there are at least as
    many as pipelines, else every pipelines-th record) → parallel interleave of the
    TFRecord readers → shuffle buffer → repeat → parallel parse/decode/augment → batch
    (drop remainder) → prefetch (autotuned). `seed` None: a fresh order per pipeline.
    """
    shards = list(shards)
    files = tf.data.Dataset.from_tensor_slices(shards).shuffle(len(shards), seed=seed)
    by_file = pipelines > 1 and len(shards) >= pipelines
    if by_file:
        files = files.shard(pipelines, index)
    cycle = max(1, min(INTERLEAVE_CYCLE, -(-len(shards) // pipelines) if by_file else len(shards)))
    records = files.interleave(
        lambda path: tf.data.TFRecordDataset(path, buffer_size=TFRECORD_BUFFER),
        cycle_length=cycle,
        num_parallel_calls=min(threads, cycle),  # tf.data: at most cycle_length
        deterministic=False,
    )
    if pipelines > 1 and not by_file:
        records = records.shard(pipelines, index)
    dataset = (
        records.shuffle(SHUFFLE_BUFFER, seed=seed)
        .repeat()
        .map(lambda s: _parse_and_augment(tf, s, size), num_parallel_calls=threads, deterministic=False)
        .batch(batch, drop_remainder=True)
        .prefetch(tf.data.AUTOTUNE)
    )
    return dataset.with_options(_data_options(tf, threads))


def image_pipeline_text(shards: int, threads: int, batch: int, size: int, sharding: str, pipelines: int = 1) -> str:
    cycle = max(1, min(INTERLEAVE_CYCLE, -(-shards // pipelines) if shards >= pipelines else shards))
    return (
        f"tf.data TFRecord ({shards} shards, {sharding}): interleave cycle {cycle} x {min(threads, cycle)} threads, "
        f"shuffle {SHUFFLE_BUFFER}, repeat, map {threads} threads (sample_distorted_bounding_box + "
        f"decode_and_crop_jpeg + flip + resize {size}, uint8), batch {batch}, prefetch AUTOTUNE; "
        f"private threadpool {threads}; float + normalise in the step"
    )


# Examples (dlbench.data.bert, create_pretraining_data.py's fields) → the model's inputs.
BERT_FIELDS = {
    "input_ids": "input_ids",
    "token_type_ids": "segment_ids",
    "input_mask": "input_mask",
    "masked_positions": "masked_lm_positions",
    "masked_ids": "masked_lm_ids",
    "masked_weights": "masked_lm_weights",
    "nsp_labels": "next_sentence_labels",
}


def bert_dataset(tf, arrays: dict, *, batch: int, threads: int, seed, pipelines: int = 1, index: int = 0):
    """Pre-training batches from the examples in memory: (shard) → shuffle → repeat → batch → prefetch."""
    dataset = tf.data.Dataset.from_tensor_slices({key: arrays[field] for key, field in BERT_FIELDS.items()})
    if pipelines > 1:
        dataset = dataset.shard(pipelines, index)
    count = len(arrays["input_ids"]) // pipelines
    dataset = dataset.shuffle(count, seed=seed).repeat().batch(batch, drop_remainder=True).prefetch(tf.data.AUTOTUNE)
    return dataset.with_options(_data_options(tf, threads))


def _error_reason(error) -> str:
    """The first line of a TensorFlow error, without its op/function decorations."""
    text = (getattr(error, "message", None) or str(error) or type(error).__name__).strip().splitlines()[0]
    text = re.sub(r"\{\{function_node [^}]*\}\}\s*|\s*\[\[\{\{node [^}]*\}\}\]\]|\s*\[Op:\w+\]( name: \S*)?", "", text)
    return text.strip() or type(error).__name__


def find_corrupt_record(tf, shards, budget_s: float = CORRUPT_SCAN_S) -> str | None:
    """After a decode error: '<shard>: record <i> (<image/filename>): <reason>' of the first
    record of `shards` whose JPEG does not decode (or that cannot be read), or None when none
    is found within `budget_s` seconds (tf.data's errors name the op, not the record)."""
    deadline = time.monotonic() + budget_s
    spec = {
        "image/encoded": tf.io.FixedLenFeature([], tf.string),
        "image/filename": tf.io.FixedLenFeature([], tf.string),
    }

    def decoded(i, serialized):
        image = tf.io.decode_jpeg(tf.io.parse_single_example(serialized, spec)["image/encoded"], channels=3)
        return i, tf.shape(image)

    for shard in shards:
        try:
            total = int(tf.data.TFRecordDataset(shard).reduce(tf.constant(0, tf.int64), lambda n, _: n + 1))
        except tf.errors.OpError as error:
            return f"{shard}: cannot be read as TFRecords ({_error_reason(error)})"
        checked = (
            tf.data.TFRecordDataset(shard)
            .enumerate()
            .map(decoded, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
            .ignore_errors()
        )
        expected = 0  # records come back in order; a record whose decode failed is missing
        for i, _ in checked.as_numpy_iterator():
            if i != expected:
                break
            expected += 1
            if time.monotonic() > deadline:
                return None
        if expected >= total:
            continue
        # Record `expected` was dropped: read it alone to name it and say why.
        record = next(iter(tf.data.TFRecordDataset(shard).skip(expected).take(1)))
        features = tf.io.parse_single_example(record, spec)
        where = f"{shard}: record {expected} ({features['image/filename'].numpy().decode(errors='replace')})"
        try:
            tf.io.decode_jpeg(features["image/encoded"], channels=3)
        except tf.errors.OpError as error:
            return f"{where}: corrupt image (tf.io.decode_jpeg: {_error_reason(error)})"
        return f"{where}: corrupt image"
    return None


def tf_config(dist) -> dict:
    """The TF_CONFIG of this rank, computed from `spec.dist` alone (so all ranks agree).

    Assumptions: `dist.endpoints["workers"]`, if present, lists every rank's "host:port"
    in rank order (a multi-node launcher must provide it); otherwise all ranks are on one
    node and rank r listens on `master_addr:master_port + r` (the launcher's free
    `master_port` and the next world_size - 1 ports must be free).
    """
    workers = dist.endpoints.get("workers") if dist.endpoints else None
    if workers:
        workers = [str(w) for w in workers]
        if len(workers) != dist.world_size:
            raise ValueError(f"endpoints['workers'] has {len(workers)} entries for world size {dist.world_size}")
    elif dist.local_world_size == dist.world_size:
        workers = [f"{dist.master_addr}:{dist.master_port + r}" for r in range(dist.world_size)]
    else:
        raise ValueError(
            "multi_worker_mirrored across nodes needs spec.dist.endpoints['workers'] (one 'host:port' per rank)"
        )
    return {"cluster": {"worker": workers}, "task": {"type": "worker", "index": dist.rank}}


def ps_cluster(dist, devices_per_node: int) -> dict:
    """The `parameter_server` cluster, computed from `spec.dist` alone (every task agrees).

    One launcher task per node (dist.world_size = nodes). Node n (address
    `dist.endpoints["nodes"][n]`, or `master_addr` on one node) runs the workers
    n*G .. n*G+G-1 (one per device) and parameter server n; the coordinator ("chief") runs
    in task 0. Ports: chief master_port, worker w master_port+1+w, ps n master_port+1+W+n
    (distinct across nodes, so several "nodes" may share a host; Slurm's port block per job
    is 100 ports: W + nodes <= 98).
    """
    nodes = max(1, dist.world_size // max(1, dist.local_world_size))
    hosts = list((dist.endpoints or {}).get("nodes") or [])[:nodes]
    if not hosts and nodes == 1:
        hosts = [dist.master_addr]
    if len(hosts) != nodes:
        raise ValueError(f"parameter_server on {nodes} nodes needs spec.dist.endpoints['nodes'] (one address per node)")
    base, workers = dist.master_port, nodes * devices_per_node
    return {
        "chief": [f"{hosts[0]}:{base}"],
        "worker": [f"{hosts[w // devices_per_node]}:{base + 1 + w}" for w in range(workers)],
        "ps": [f"{hosts[n]}:{base + 1 + workers + n}" for n in range(nodes)],
    }


def node_servers(cluster: dict, node: int) -> list[tuple[str, int]]:
    """(job, index) of the servers node `node` runs: its workers, then its parameter server."""
    per_node = len(cluster["worker"]) // len(cluster["ps"])
    return [("worker", node * per_node + g) for g in range(per_node)] + [("ps", node)]


# A worker / PS server: guard against an orphan, then serve until killed.
_SERVER_CODE = (
    _servers.ORPHAN_GUARD
    + """
import json
conf = json.loads(sys.argv[2])
import tensorflow as tf
tf.config.threading.set_intra_op_parallelism_threads(conf["intra"])
tf.config.threading.set_inter_op_parallelism_threads(conf["inter"])
if not conf["gpu"]:
    tf.config.set_visible_devices([], "GPU")
# The server runs the closures sent to it with its own session config (the eager threading
# settings above do not reach it): without this a worker used every core of the machine.
threads = tf.compat.v1.ConfigProto(
    intra_op_parallelism_threads=conf["intra"], inter_op_parallelism_threads=conf["inter"]
)
server = tf.distribute.Server(
    tf.train.ClusterSpec(conf["cluster"]), job_name=conf["job"], task_index=conf["index"], protocol="grpc",
    config=threads, start=True,
)
server.join()
"""
)


def start_ps_servers(spec, cluster: dict, node: int) -> list:
    """Start node `node`'s worker servers (one per device: on a GPU its own, on the CPU
    threads/G intra-op threads each) and its parameter server (CPU, 1 thread)."""
    per_node = len(cluster["worker"]) // len(cluster["ps"])
    procs = []
    for job, index in node_servers(cluster, node):
        worker = job == "worker"
        intra = max(1, spec.threads // per_node) if worker else 1
        conf = {
            "cluster": cluster,
            "job": job,
            "index": index,
            "intra": intra,
            "inter": max(2, intra),
            "gpu": worker and spec.device == "cuda",
        }
        env = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
        if spec.device == "cuda":
            env["CUDA_VISIBLE_DEVICES"] = str(index % per_node) if worker else ""
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", _SERVER_CODE, str(os.getpid()), json.dumps(conf)],
                env=env,
                stdin=subprocess.DEVNULL,
            )
        )
    return procs


def _port_open(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=2):
            return True
    except OSError:
        return False


def wait_for_servers(cluster: dict, procs: list, timeout_s: float = RENDEZVOUS_TIMEOUT_S) -> None:
    """Until every worker and PS server of the cluster accepts connections (bounded)."""
    deadline = time.monotonic() + timeout_s
    pending = [*cluster["worker"], *cluster["ps"]]
    while pending:
        for proc in procs:
            if proc.poll() is not None:
                raise RuntimeError(f"parameter_server: a server process exited early with code {proc.returncode}")
        pending = [a for a in pending if not _port_open(a)]
        if pending and time.monotonic() > deadline:
            raise RuntimeError(f"parameter_server: servers {pending} not reachable after {timeout_s} s")
        if pending:
            time.sleep(0.5)


def stop_processes(procs: list) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
    for proc in procs:
        with contextlib.suppress(Exception):
            proc.wait(timeout=30)


def serve(spec, time_limit_s: int = 0) -> int:
    """A helper task of `parameter_server` (a node other than the coordinator's): start this
    node's servers, wait for the coordinator to come up and to finish (its port closes),
    then stop them. Writes no step log. Exit code 0 when the coordinator finished."""
    node = spec.dist.rank // max(1, spec.dist.local_world_size)
    cluster = ps_cluster(spec.dist, spec.coords.scale_obj.devices_per_node)
    procs = start_ps_servers(spec, cluster, node)
    chief = cluster["chief"][0]
    started = time.monotonic()
    limit = RENDEZVOUS_TIMEOUT_S + (time_limit_s or 0) + 60
    seen = False
    try:
        while True:
            for proc in procs:
                if proc.poll() is not None:
                    print(
                        f"[dlbench] parameter_server node {node}: a server exited ({proc.returncode})", file=sys.stderr
                    )
                    return 1
            up = _port_open(chief)
            if up:
                seen = True
            elif seen:
                return 0  # the coordinator has finished
            elapsed = time.monotonic() - started
            if (not seen and elapsed > RENDEZVOUS_TIMEOUT_S) or elapsed > limit:
                print(
                    f"[dlbench] parameter_server node {node}: coordinator {chief} not seen / not done", file=sys.stderr
                )
                return 1
            time.sleep(1.0)
    finally:
        stop_processes(procs)


def _inter_op_threads(spec) -> int:
    """Inter-op threads: the cores this process is given (TensorFlow's own default is one per
    core of the machine), at least 2. Measured on 2 cores under load, alternating: ResNet-50
    64 px batch 8, one process with 2 intra-op threads: inter-op 2 beat 1 in 4 of 5 rounds
    (median 14.6 vs 10.7 images/s): the many small ops (BatchNorm gradients, per-variable
    optimizer updates) run on one thread each and leave the other core idle with 1. Two MWMS
    workers with 1 intra-op thread each: inter-op 2 beat 1 in 3 of 3 (collectives overlap
    compute). DLBENCH_TF_INTER_OP_THREADS overrides it (for such measurements; the header
    records inter_op_threads)."""
    return int(os.environ.get("DLBENCH_TF_INTER_OP_THREADS", max(2, spec.threads)))


class Runner(BaseRunner):
    def import_framework(self) -> None:
        """Import TensorFlow and fix its process-wide settings (before the worker's memory cap).

        Only configuration here, no op: MultiWorkerMirroredStrategy must be created (in
        build) before the TF runtime starts, and logical CPU devices (MirroredStrategy's
        stand-ins for GPUs) can only be configured before it starts.
        """
        if getattr(self, "tf", None) is not None:
            return
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
        spec = self.spec
        self.kind = strategy_kind(spec.coords.strategy)
        self.distributed = self.kind != "single"
        if self.kind == "single" and spec.dist.world_size > 1:
            raise ValueError(f"tensorflow runner: strategy 'single' with {spec.dist.world_size} ranks")
        if self.kind == "replicated" and spec.dist.world_size > spec.dist.local_world_size:
            raise ValueError(f"{spec.coords.strategy}: MirroredStrategy drives one node's devices, not several nodes")
        if self.kind == "replicated" and spec.coords.strategy in CUDA_ONLY_STRATEGIES and spec.device != "cuda":
            raise RuntimeError(
                f"{spec.coords.strategy} needs CUDA devices: {CUDA_ONLY_STRATEGIES[spec.coords.strategy]}"
            )
        if self.kind == "mwms":
            # Read when MultiWorkerMirroredStrategy is created.
            os.environ["TF_CONFIG"] = json.dumps(tf_config(spec.dist))
        self.hvd = self._rendezvous = None
        self.ps_procs: list = []
        if self.kind == "horovod":
            self._import_horovod()
        if self.kind == "ps":
            # This node's worker and PS servers, before TensorFlow starts here.
            self.cluster = ps_cluster(spec.dist, spec.coords.scale_obj.devices_per_node)
            self.ps_procs = start_ps_servers(
                spec, self.cluster, node=spec.dist.rank // max(1, spec.dist.local_world_size)
            )

        import keras
        import tensorflow as tf

        self.tf = tf
        self.keras = keras
        # Threads first: they are fixed once the TF runtime initialises. MirroredStrategy's
        # logical CPU devices share this process's one intra-op pool (TensorFlow has no
        # per-device pool), so it gets the threads of all the node's devices; the
        # parameter-server coordinator computes nothing (its workers have the threads).
        intra = 1 if self.kind == "ps" else spec.threads
        tf.config.threading.set_intra_op_parallelism_threads(intra)
        tf.config.threading.set_inter_op_parallelism_threads(_inter_op_threads(spec))
        local = self.hvd.local_rank() if self.hvd is not None else spec.dist.local_rank
        if spec.device == "cuda" and self.kind != "ps":
            gpus = tf.config.list_physical_devices("GPU")
            if not gpus:
                raise RuntimeError("device cuda requested but TensorFlow sees no GPU")
            if self.kind == "replicated":
                # One process drives the node's GPUs.
                if len(gpus) < spec.local_devices:
                    raise RuntimeError(
                        f"{spec.coords.strategy}: {spec.local_devices} devices, TensorFlow sees {len(gpus)} GPUs"
                    )
                tf.config.set_visible_devices(gpus[: spec.local_devices], "GPU")
                self.devices = [f"/GPU:{i}" for i in range(spec.local_devices)]
            else:
                # One process per GPU: this process sees only its own.
                tf.config.set_visible_devices(gpus[local % len(gpus)], "GPU")
                self.devices = ["/GPU:0"]
        else:
            tf.config.set_visible_devices([], "GPU")
            if self.kind == "replicated":
                # CPU stand-ins for a node's GPUs: one logical CPU device per device.
                cpu = tf.config.list_physical_devices("CPU")[0]
                tf.config.set_logical_device_configuration(
                    cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(spec.local_devices)]
                )
                self.devices = [f"/CPU:{i}" for i in range(spec.local_devices)]
            else:
                self.devices = ["/CPU:0"]
        self.device = self.devices[0]

    def _import_horovod(self) -> None:
        from dlbench.runners import _horovod

        self.hvd, self._rendezvous = _horovod.start("horovod.tensorflow", self.spec.dist)

    def _make_strategy(self):
        tf, spec = self.tf, self.spec
        self.communication = None
        if self.kind == "mwms":
            implementation = (
                tf.distribute.experimental.CommunicationImplementation.NCCL
                if spec.device == "cuda"
                else tf.distribute.experimental.CommunicationImplementation.RING
            )
            self.communication = implementation.name
            return tf.distribute.MultiWorkerMirroredStrategy(
                communication_options=tf.distribute.experimental.CommunicationOptions(implementation=implementation)
            )
        if self.kind == "replicated":
            # tf_cnn_benchmarks' variable_update=replicated with its all_reduce_spec: nccl, a
            # hierarchical copy (its DGX-1 "copy"), or reduction to the CPU (its "pscpu").
            name = spec.coords.strategy
            if name == "replicated_nccl":
                self.cross_device_ops = tf.distribute.NcclAllReduce()
            elif name == "replicated_copy":
                self.cross_device_ops = tf.distribute.HierarchicalCopyAllReduce()
            else:
                self.cross_device_ops = tf.distribute.ReductionToOneDevice(reduce_to_device="/cpu:0")
            return tf.distribute.MirroredStrategy(devices=self.devices, cross_device_ops=self.cross_device_ops)
        if self.kind == "ps":
            wait_for_servers(self.cluster, self.ps_procs)
            resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
                tf.train.ClusterSpec(self.cluster), task_type="chief", task_id=0, rpc_layer="grpc"
            )
            strategy = tf.distribute.ParameterServerStrategy(resolver)
            self.coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
            return strategy
        return tf.distribute.get_strategy()  # the default (no-op) strategy: single, horovod

    def build(self) -> None:
        self.import_framework()
        tf, keras, spec = self.tf, self.keras, self.spec
        on_cuda = spec.device == "cuda"

        amp = spec.coords.precision == "amp"
        self.policy = ("mixed_float16" if on_cuda else "mixed_bfloat16") if amp else "float32"
        keras.mixed_precision.set_global_policy(self.policy)
        keras.utils.set_random_seed(spec.seed)
        self.strategy = self._make_strategy()
        # Samples one step trains over all replicas; losses are averaged over it (gradients
        # are summed across replicas). Horovod averages gradients itself: its loss is local.
        if self.kind == "mwms":
            self.replicas = self.strategy.num_replicas_in_sync
        elif self.kind in ("replicated", "ps"):
            self.replicas = spec.local_devices  # the node's devices / all workers
        else:
            self.replicas = 1
        self.global_batch = spec.batch * self.replicas

        model_name = spec.coords.model
        self.is_bert = model_name == "bert_base"
        with self.strategy.scope():
            if self.is_bert:
                self.model = _bert_model(keras, tf, BERT_BASE, spec.seq_len)
                optimizer = keras.optimizers.Adam(learning_rate=ADAM_LR, epsilon=1e-6)
                self.loss_scaling = self.policy == "mixed_float16"
                if self.loss_scaling:
                    optimizer = keras.mixed_precision.LossScaleOptimizer(optimizer)
            else:
                self.model, optimizer = self._image_model_and_optimizer(model_name)
            optimizer.build(self.model.trainable_variables)
            self.optimizer = optimizer
            if self.kind == "ps":
                # Gradient sums on the parameter servers (one per trainable variable).
                self.accumulators = [
                    tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False, name="grad_sum")
                    for v in self.model.trainable_variables
                ]
        self.params = int(sum(math.prod(v.shape) for v in self.model.trainable_variables))
        if self.hvd is not None:
            # Every rank starts from rank 0's initial state.
            for variables in (self.model.variables, self.optimizer.variables):
                self.hvd.broadcast_variables(
                    [v if isinstance(v, tf.Variable) else v.value for v in variables], root_rank=0
                )

        self.real_data = spec.coords.data == "real"
        self._batches = None  # real data outside parameter_server: the iterator next_batch() reads
        if self.real_data:
            self._real_input()
        else:
            self._synthetic_input()
        self._step_fn = self._make_step()
        from tensorflow.python.eager import context

        self._async_wait = context.async_wait
        if self.kind == "ps":
            self._local_devices = []  # the coordinator runs nothing; step() joins the workers
        else:
            task = f"/task:{spec.dist.rank}/" if self.kind == "mwms" else None
            self._local_devices = [
                d.name
                for d in tf.config.list_logical_devices()
                if task is None or "/job:" not in d.name or task in d.name
            ]

    def _image_model_and_optimizer(self, model_name: str):
        """The TF-native CNN (dlbench.runners.tensorflow.cnn) and its momentum SGD."""
        from dlbench.runners.tensorflow import cnn, optim

        tf, spec = self.tf, self.spec
        size = spec.image_size or CATALOGUE[model_name]["default_image_size"]
        # Batch-norm moving statistics: each replica keeps its own under the mirrored
        # strategies (updated in replica context, averaged when read), as Keras does.
        mirrored = self.kind in ("mwms", "replicated")
        stats = (
            {"synchronization": tf.VariableSynchronization.ON_READ, "aggregation": tf.VariableAggregation.MEAN}
            if mirrored
            else {}
        )
        compute = {"mixed_bfloat16": "bfloat16", "mixed_float16": "float16"}.get(self.policy, "float32")
        model = cnn.ImageModel(model_name, size, IMAGE_CLASSES, spec.seed, stats, compute)
        self.loss_scaling = compute == "float16"
        self.model_implementation = cnn.IMPLEMENTATION
        return model, optim.MomentumSGD(SGD_LR, SGD_MOMENTUM, loss_scaling=self.loss_scaling)

    # -- data -----------------------------------------------------------------------------

    def _synthetic_input(self) -> None:
        tf = self.tf
        with tf.device(self.device):
            batch = self._synthetic_batch()
        if self.kind == "replicated":
            # The same batch on every device, copied there once.
            self.inputs = self.strategy.experimental_distribute_values_from_function(
                lambda ctx: tf.nest.map_structure(tf.identity, batch)
            )
        elif self.kind == "ps":
            # Each worker holds the batch in a dataset of its own (created on the worker once).
            host = tf.nest.map_structure(lambda t: t.numpy(), batch)
            dataset = self.coordinator.create_per_worker_dataset(lambda: tf.data.Dataset.from_tensors(host).repeat())
            self.inputs = iter(dataset)
        else:
            self.inputs = batch

    def _real_input(self) -> None:
        """The real-data input pipeline of this strategy (see `image_dataset`, `bert_dataset`).

        single (and horovod): one pipeline, read by next_batch() (on a GPU prefetched to the
        device). multi_worker_mirrored: `distribute_datasets_from_function`, one pipeline
        per worker of per-replica batches (`spec.batch`), each reading its own shards.
        replicated_*: the same with the one pipeline of the process; each step takes one
        per-replica batch for each device (global batch = batch x devices). parameter_server:
        `create_per_worker_dataset`: every worker runs a pipeline of its own (all shards, its
        own random order, as TensorFlow advises for PS training) and reads it inside its
        scheduled closure, so the wait for data is part of the step there.
        """
        tf, spec = self.tf, self.spec
        from dlbench.data import DataError

        if self.is_bert:
            from dlbench.data import bert

            arrays = bert.load_examples(spec.data_dir)
            n, seq_len = arrays["input_ids"].shape
            if seq_len != spec.seq_len:
                raise DataError(f"{spec.data_dir}: examples have sequence length {seq_len}, the run {spec.seq_len}")

            def make(batch, threads, seed, pipelines=1, index=0):
                if n // pipelines < batch:
                    raise DataError(f"{spec.data_dir}: {n} examples cannot fill a batch of {batch} per pipeline")
                return bert_dataset(
                    tf, arrays, batch=batch, threads=threads, seed=seed, pipelines=pipelines, index=index
                )

        else:
            from dlbench.data import tfrecord

            shards = tfrecord.shard_paths(spec.data_dir, "train")
            self._shards = shards
            size = spec.image_size or CATALOGUE[spec.coords.model]["default_image_size"]

            def make(batch, threads, seed, pipelines=1, index=0):
                return image_dataset(
                    tf, shards, batch=batch, size=size, threads=threads, seed=seed, pipelines=pipelines, index=index
                )

        threads = spec.data_workers
        if self.kind == "ps":
            # One pipeline per worker server (the task's data workers split over its devices).
            threads = max(1, spec.data_workers // max(1, spec.coords.scale_obj.devices_per_node))
            dataset = self.coordinator.create_per_worker_dataset(lambda: make(spec.batch, threads, None))
            self.inputs = iter(dataset)
            sharding, pipelines = "every worker all shards, its own order", 1
        elif self.kind in ("mwms", "replicated"):

            def dataset_fn(context):
                return make(
                    context.get_per_replica_batch_size(self.global_batch),
                    threads,
                    spec.seed,
                    context.num_input_pipelines,
                    context.input_pipeline_id,
                )

            self.inputs = None
            self._batches = iter(self.strategy.distribute_datasets_from_function(dataset_fn))
            self._element_spec = self._batches.element_spec
            pipelines = spec.dist.world_size if self.kind == "mwms" else 1
            sharding = f"{pipelines} workers, each its own" if pipelines > 1 else "one pipeline, a batch per device"
        else:
            ranks = self.hvd.size() if self.hvd is not None else 1
            rank = self.hvd.rank() if self.hvd is not None else 0
            dataset = make(spec.batch, threads, spec.seed, ranks, rank)
            if self.device.startswith("/GPU"):
                dataset = dataset.apply(tf.data.experimental.prefetch_to_device(self.device))
            self.inputs = None
            self._batches = iter(dataset)
            self._element_spec = dataset.element_spec
            sharding, pipelines = (f"{ranks} ranks, each its own" if ranks > 1 else "one pipeline"), ranks
        if self.is_bert:
            self.input_pipeline = (
                f"tf.data from the tokenised examples in memory ({n} x {seq_len}): shuffle {n}, repeat, "
                f"batch {spec.batch}, prefetch AUTOTUNE ({sharding})"
            )
        else:
            self.input_pipeline = image_pipeline_text(len(shards), threads, spec.batch, size, sharding, pipelines)
        if self.kind == "ps":
            self.input_pipeline += "; read on each worker inside its step (data_wait does not see it)"

    def next_batch(self):
        batches = self._batches
        if batches is None:
            return None
        try:
            return next(batches)
        except (self.tf.errors.InvalidArgumentError, self.tf.errors.DataLossError) as error:
            raise self._data_error(error) from None

    def _data_error(self, error):
        """A decode/read error of the pipeline as one DataError naming the record (or the shards)."""
        from dlbench.data import DataError

        reason = _error_reason(error)
        if self.is_bert:
            return DataError(f"{self.spec.data_dir}: {reason}")
        found = find_corrupt_record(self.tf, self._shards)
        if found:
            return DataError(found)
        names = ", ".join(os.path.basename(s) for s in self._shards)
        return DataError(f"{self.spec.data_dir} (shards {names}): a record failed to decode: {reason}")

    def _prepare(self, inputs):
        """In the step, on the device: real images uint8 → float32, normalised (ImageNet mean/std)."""
        tf = self.tf
        images = (tf.cast(inputs["images"], tf.float32) - tf.constant(IMAGE_MEAN)) / tf.constant(IMAGE_STD)
        return {"images": images, "labels": inputs["labels"]}

    def _synthetic_batch(self) -> dict:
        """One fixed batch, created once on the device (the pipeline's `synthetic` data)."""
        tf, spec = self.tf, self.spec
        gen = tf.random.Generator.from_seed(spec.seed)
        b = spec.batch
        if self.is_bert:
            cfg, seq = BERT_BASE, spec.seq_len
            n_pred = max(1, round(cfg["max_predictions_per_seq_fraction"] * seq))
            # n_pred distinct positions per sequence, ascending (as BERT's data generator makes them).
            positions = tf.sort(tf.argsort(gen.uniform([b, seq]), axis=1)[:, :n_pred], axis=1)
            return {
                "input_ids": gen.uniform([b, seq], 0, cfg["vocab_size"], dtype=tf.int32),
                "token_type_ids": tf.concat(
                    [tf.zeros([b, seq // 2], tf.int32), tf.ones([b, seq - seq // 2], tf.int32)], axis=1
                ),
                "masked_positions": tf.cast(positions, tf.int32),
                "masked_ids": gen.uniform([b, n_pred], 0, cfg["vocab_size"], dtype=tf.int32),
                "nsp_labels": gen.uniform([b], 0, 2, dtype=tf.int32),
            }
        size = spec.image_size or CATALOGUE[spec.coords.model]["default_image_size"]
        return {
            "images": gen.normal([b, size, size, 3], dtype=tf.float32),
            "labels": gen.uniform([b], 0, IMAGE_CLASSES, dtype=tf.int32),
        }

    # -- the step -------------------------------------------------------------------------

    def _per_example_loss(self, inputs, training: bool):
        tf = self.tf
        if self.is_bert:
            model_inputs = [inputs["input_ids"], inputs["token_type_ids"], inputs["masked_positions"]]
            if "input_mask" in inputs:  # real examples are padded
                model_inputs.append(inputs["input_mask"])
            mlm_logits, nsp_logits = self.model(model_inputs, training=training)
            mlm = tf.nn.sparse_softmax_cross_entropy_with_logits(
                inputs["masked_ids"], tf.cast(mlm_logits, tf.float32)
            )  # [batch, n_pred]
            nsp = tf.nn.sparse_softmax_cross_entropy_with_logits(inputs["nsp_labels"], tf.cast(nsp_logits, tf.float32))
            if "masked_weights" in inputs:
                # Real examples: padding slots (weight 0) do not count; Google's run_pretraining
                # divides by the batch's weight sum, this by each example's (per-example losses).
                weights = inputs["masked_weights"]
                return tf.reduce_sum(mlm * weights, axis=1) / (tf.reduce_sum(weights, axis=1) + 1e-5) + nsp
            return tf.reduce_mean(mlm, axis=1) + nsp
        logits = self.model(inputs["images"], training=training)
        return tf.nn.sparse_softmax_cross_entropy_with_logits(inputs["labels"], tf.cast(logits, tf.float32))

    def _make_step(self):
        tf = self.tf
        spec = self.spec
        model, optimizer = self.model, self.optimizer
        global_batch = self.global_batch
        variables = model.trainable_variables
        inputs = self.inputs
        # Real images arrive as uint8: converted and normalised on the device, in the step.
        prepare = self._prepare if self.real_data and not self.is_bert else (lambda batch: batch)

        def function(body, **kwargs):
            """The step as a tf.function: of the batch next_batch() gives (real data; a fixed
            signature, traced once), or of nothing with the synthetic batch captured."""
            if self._batches is not None:
                return tf.function(body, input_signature=[self._element_spec], **kwargs)
            return tf.function(lambda: body(inputs), **kwargs)

        def forward_backward(inputs):
            inputs = prepare(inputs)
            with tf.GradientTape() as tape:
                # Mean over the global batch: gradients are summed across replicas.
                loss = tf.nn.compute_average_loss(
                    self._per_example_loss(inputs, training=True), global_batch_size=global_batch
                )
                scaled = optimizer.scale_loss(loss) if self.loss_scaling else loss
            grads = tape.gradient(scaled, variables)
            return loss, grads

        if self.kind == "horovod":
            hvd = self.hvd

            def horovod_step(inputs):
                with tf.GradientTape() as tape:
                    loss = tf.nn.compute_average_loss(
                        self._per_example_loss(prepare(inputs), training=True), global_batch_size=spec.batch
                    )
                    scaled = optimizer.scale_loss(loss) if self.loss_scaling else loss
                # Allreduce (average over ranks, Gloo on CPU / NCCL on GPU) of the gradients.
                grads = hvd.DistributedGradientTape(tape).gradient(scaled, variables)
                optimizer.apply_gradients(zip(grads, variables, strict=True))
                return loss

            return function(horovod_step, jit_compile=bool(spec.compile))

        if self.kind == "single":

            def train_step(inputs):
                loss, grads = forward_backward(inputs)
                optimizer.apply_gradients(zip(grads, variables, strict=True))
                return loss

            return function(train_step, jit_compile=bool(spec.compile))

        # Strategies: XLA (if asked) compiles the per-replica forward/backward; the
        # cross-replica reduction inside the optimizer stays outside it.
        fb = tf.function(forward_backward, jit_compile=True) if spec.compile else forward_backward
        strategy = self.strategy

        if self.kind == "ps":
            accumulators = self.accumulators

            @tf.function
            def worker_step(iterator):
                def replica(batch):
                    loss, grads = fb(batch)
                    for acc, grad in zip(accumulators, grads, strict=True):
                        acc.assign_add(grad)  # pushed to the parameter server holding the variable
                    return loss

                return strategy.run(replica, args=(next(iterator),))

            @tf.function
            def apply_step():
                def replica():
                    # The summed gradient of every worker's batch (each already divided by the
                    # global batch), applied once; then the sums are cleared.
                    optimizer.apply_gradients(zip([a.read_value() for a in accumulators], variables, strict=True))
                    for acc in accumulators:
                        acc.assign(tf.zeros_like(acc))

                strategy.run(replica)

            coordinator, workers = self.coordinator, len(self.cluster["worker"])

            def ps_step():
                losses = [coordinator.schedule(worker_step, args=(inputs,)) for _ in range(workers)]
                coordinator.join()
                coordinator.schedule(apply_step)
                coordinator.join()
                return losses

            if not self.real_data:
                return ps_step

            def ps_step_real_data():
                try:
                    return ps_step()
                except (tf.errors.InvalidArgumentError, tf.errors.DataLossError) as error:
                    raise self._data_error(error) from None

            return ps_step_real_data

        # MultiWorkerMirrored (one replica per worker process) and Mirrored (one per device
        # of this process): the optimizer all-reduces (sums) the gradients across replicas.
        def replica_step(inputs):
            loss, grads = fb(inputs)
            optimizer.apply_gradients(zip(grads, variables, strict=True))
            return loss

        def train_step(inputs):
            per_replica = strategy.run(replica_step, args=(inputs,))
            # The global mean loss (each replica's share is already divided by the global batch).
            return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

        return function(train_step)

    def step(self, batch=None):
        # batch None: synthetic data (captured in the step) or parameter_server (its workers
        # read their own datasets).
        return self._step_fn() if batch is None else self._step_fn(batch)

    def sync(self) -> None:
        # What tf.test.experimental.sync_devices() does (TF's benchmarking barrier), limited
        # to this process's own devices: under MultiWorkerMirroredStrategy the logical
        # devices include the other workers' and sync_devices() fails there. SyncDevice
        # blocks until every kernel queued on the device has finished. On the CPU an eager
        # tf.function call already returns only when its graph has run, so this costs one
        # tiny op dispatch; on a GPU kernels run asynchronously, and fetching the loss alone
        # would not wait for the backward pass and the update (queued after the loss), so the
        # loss is not the sync point. Under MirroredStrategy this covers every device of the
        # node; the parameter-server coordinator has none (its step ends with join()).
        tf = self.tf
        for name in self._local_devices:
            with tf.device(name):
                tf.raw_ops.SyncDevice()
        self._async_wait()  # pending eager ops, if asynchronous execution was enabled

    def loss_value(self, handle) -> float:
        if isinstance(handle, list):  # parameter server: each worker's share of the global mean
            return float(sum(float(r.fetch()) for r in handle))
        return float(handle.numpy())

    def is_oom(self, exc: BaseException) -> bool:
        if isinstance(exc, MemoryError):
            return True
        tf = getattr(self, "tf", None)
        if tf is not None and isinstance(exc, tf.errors.ResourceExhaustedError):
            return True
        text = str(exc)
        return "ResourceExhaustedError" in type(exc).__name__ or "RESOURCE_EXHAUSTED" in text or "OOM when" in text

    def describe(self) -> dict:
        tf = self.tf
        build = dict(tf.sysconfig.get_build_info())
        info = {
            "version": tf.__version__,
            "keras_version": self.keras.__version__,
            "device_name": "cpu",
            "threads": self.spec.threads,
            "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
            "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
            "trainable_params": self.params,
            "xla": bool(self.spec.compile),
            "precision_policy": self.policy,
            "memory_format": "channels_last",
            # Which model and training-step code ran (issue 14: the fastest known path).
            "implementation": getattr(self, "model_implementation", "Keras model, Keras optimizer"),
            "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default (on)"),
            "cuda_build": bool(build.get("is_cuda_build")),
            "cuda": build.get("cuda_version"),
            "cudnn": build.get("cudnn_version"),
        }
        if self.device.startswith("/GPU"):
            details = tf.config.experimental.get_device_details(tf.config.get_visible_devices("GPU")[0])
            info["device_name"] = details.get("device_name", "gpu")
            info["compute_capability"] = details.get("compute_capability")
        if self.distributed:
            info["strategy"] = self._describe_strategy()
        if self.is_bert:
            info["bert_config"] = dict(BERT_BASE, seq_len=self.spec.seq_len)
        if getattr(self, "real_data", False):
            info["input_pipeline"] = self.input_pipeline
        return info

    def _describe_strategy(self) -> dict:
        spec = self.spec
        if self.kind == "mwms":
            return {
                "name": "MultiWorkerMirroredStrategy",
                "communication": self.communication,
                "num_replicas_in_sync": self.strategy.num_replicas_in_sync,
                "tf_config": json.loads(os.environ["TF_CONFIG"]),
            }
        if self.kind == "replicated":
            ops = self.cross_device_ops
            return {
                "name": "MirroredStrategy",
                "variant": spec.coords.strategy,
                "cross_device_ops": type(ops).__name__,
                "reduce_to_device": "/cpu:0" if spec.coords.strategy == "replicated_pscpu" else None,
                "devices": list(self.strategy.extended.worker_devices),
                "num_replicas_in_sync": self.strategy.num_replicas_in_sync,
                # On the CPU the devices are logical devices of one physical CPU, sharing the
                # process's intra-op pool (TensorFlow has no per-device thread pool).
                "logical_cpu_devices": spec.device != "cuda",
                "global_batch": self.global_batch,
            }
        if self.kind == "ps":
            return {
                "name": "ParameterServerStrategy",
                "coordinator": "ClusterCoordinator",
                "synchronous": True,
                "step": PS_STEP,
                "workers": len(self.cluster["worker"]),
                "parameter_servers": len(self.cluster["ps"]),
                "global_batch": self.global_batch,
                "tf_config": {"cluster": self.cluster, "task": {"type": "chief", "index": 0}},
            }
        if self.kind == "horovod":
            hvd = self.hvd
            return {
                "name": "horovod",
                "version": getattr(__import__("horovod"), "__version__", None),
                "rank": hvd.rank(),
                "size": hvd.size(),
                "local_rank": hvd.local_rank(),
                "gloo_enabled": bool(hvd.gloo_enabled()),
                "nccl_built": bool(hvd.nccl_built()),
            }
        return {"name": spec.coords.strategy}

    def close(self) -> None:
        if self._rendezvous is not None:
            with contextlib.suppress(Exception):
                self._rendezvous.stop()
        if self.ps_procs:
            stop_processes(self.ps_procs)
            if self.kind == "ps":
                # At interpreter exit the coordinator's eager context would try to remove its
                # functions from the stopped servers (gRPC errors, retries): the footer is
                # written, so the process ends here.
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(0)
