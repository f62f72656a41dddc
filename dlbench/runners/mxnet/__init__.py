"""Apache MXNet 1.9 runner: Gluon model-zoo CNNs, an own Gluon BERT-base, kvstore `dist_sync`.

Importing this module does not import MXNet (the analysis environment imports it to read
MODELS/STRATEGIES); MXNet is imported in `Runner.build()`, after the variables MXNet reads
once at import (OMP_NUM_THREADS, MXNET_CPU_WORKER_NTHREADS, DMLC_*) are set from the spec.

Fast path (what an idiomatic MXNet Gluon training loop does): models hybridized with
`static_alloc=True, static_shape=True` (one cached graph, memory planned once); the
synthetic batch created once on the context; per-sample loss vector, `loss.backward()`,
`trainer.step(batch)` (the trainer scales gradients by 1/batch); no host sync inside
`step()` (it returns the loss NDArray; MXNet's engine runs asynchronously). The PyPI wheel
is oneDNN (MKLDNN) enabled; the runner leaves it on.

`sync()` is `mx.nd.waitall()`: every queued operator of the step -- forward, backward, the
update (or, with a kvstore, the push and pull) -- has finished when a step's end is read, as
the base class says. `DLBENCH_MXNET_SYNC=loss` (for benchmarks/timing_fidelity.py and
harness_overhead.py, not the default) waits only for the last step's losses instead: Python
then dispatches step i+1 while the engine still runs step i's backward and update. The window
still holds exactly N steps of work (the forward of step i+1 reads the parameters that the
update of step i writes, so between two loss-ready times the engine completes one backward,
one update and one forward; the warm-up's last update falls into the first measured step,
the last measured step's into nothing), but the input pipeline's next() then waits for the
engine too (its batch buffers are engine variables), so a real-data run would count the
previous step's trailing backward and update as data wait. benchmarks/README.md has the
measurements behind the default.

Models (`mxnet.gluon.model_zoo.vision`, pretrained=False, 1000 classes):
  resnet50 / resnet152  `resnet50_v1` / `resnet152_v1` with the stride of each
      down-sampling bottleneck moved from the first 1x1 conv to the 3x3 conv, i.e. ResNet
      v1.5 (torchvision's, MLPerf's and NVIDIA's MXNet reference placement; GluonCV calls it
      v1b). Parameter count is unchanged by the move. Unlike torchvision and Keras, Gluon's
      BottleneckV1 gives its two 1x1 body convs a bias: 25,575,912 params for ResNet-50
      (torchvision 25,557,032, +18,880) and 60,252,648 for ResNet-152 (+59,840).
  vgg16         `vgg16`: flattens the last feature map (no adaptive pooling), so its
      first dense layer, and the parameter count, depend on the image size (same as Keras;
      torchvision pools to 7x7). At 224 px all agree (138.36 M).
  inception_v3  `inception_v3` (299 px default; no auxiliary head, like the other runners),
      with its final AvgPool2D(8) replaced by global average pooling: identical at 299 px,
      and it builds below 299 px (the 64-px grid) as torchvision's and Keras's do.
      23,834,568 params, as torchvision without the aux head.
  alexnet       `alexnet` (Gluon's: the torchvision/one-GPU variant, no LRN; flattens the
      last map, so like VGG its size depends on the image size: 61.1 M at 224 px, 24.4 M at
      64 px, where torchvision pools to 6x6 and keeps 61.1 M).
  bert_base     BERT-base pre-training, defined here in Gluon (no gluonnlp: its 0.10.0
      sdist compiles a Cython extension with unpinned build dependencies, so it cannot be
      installed reproducibly from the hash lock). Architecture as gluonnlp's
      `bert_12_768_12` / Google's BERT-base: 12 layers, 768 units, 12 heads, FFN 3072, GELU,
      post-LayerNorm (eps 1e-12), dropout 0.1, learned positions (512), 2 token types,
      pooler (tanh) + next-sentence classifier, masked-LM head (dense + GELU + LayerNorm +
      decoder whose weight is tied to the word embedding, own bias), vocab 30522:
      110,106,428 trainable parameters, the same as gluonnlp's and Hugging Face's
      BertForPreTraining. Attention uses MXNet's fused self-attention kernels
      (`interleaved_matmul_selfatt_*`, one fused QKV projection). Synthetic batch: full
      length sequences (no padding mask), 20 masked positions per sequence (BERT's
      max_predictions_per_seq at length 128), random next-sentence labels. Adam, lr 1e-4.
  CNNs use SGD with momentum 0.9, lr 0.01, as the PyTorch runner does; He (MSRA) init for the
  BatchNorm networks, Glorot for VGG-16/AlexNet (He init makes them diverge at lr 0.01).

Real data (`data: real`, DATA), read from the dataset of `spec.data_dir`:
  images  `mx.io.ImageRecordIter` over `train.rec` + `.idx` (im2rec --pass-through, 0-based
      labels; dlbench.data.recordio), the fast path of MXNet's image-classification examples:
      decoding, `random_resized_crop` (area 0.08-1, aspect 3/4-4/3, to image_size), `rand_mirror`
      and mean/std normalisation (ImageNet's, 0-255 scale) in `preprocess_threads` =
      `spec.data_workers` threads, `prefetch_buffer` batches decoded ahead, shuffled each epoch,
      reset at the epoch's end (the run never runs out of data). The threaded iterator is used on
      every device (`ctx="gpu"`, `device_id=-1` = batches in CPU memory): MXNet's CPU variant
      (`ctx="cpu"`) ignores preprocess_threads and decodes with the operators' OpenMP team.
      dist_sync / horovod: `num_parts` = ranks, `part_index` = rank (each rank its own shard).
      device / nccl: one iterator batch of batch x local devices, split over the contexts
      (`gluon.utils.split_and_load`), i.e. the node's global batch.
  bert_base  the tokenised examples (`dlbench.data.bert.load_examples`) in memory (numpy): a
      seeded permutation of this rank's shard per epoch, batches of input_ids, segment_ids,
      masked_lm_positions (made flat row indices, as the model takes them), masked_lm_ids /
      weights and next_sentence_labels, made NDArrays on the contexts in next_batch(). The
      masked-LM loss of a sequence is the weighted mean over its real prediction slots
      (padding slots have weight 0). The model has no attention mask (as for the synthetic
      full-length batch): padding tokens are attended to; the cost per step is the same.
  A missing or empty .rec/.idx/.npz stops the run before the model is built, naming the file
  (dlbench.data.DataError). A record that does not decode at run time fails the run with one
  error naming the .rec file and, found by decoding the records once more (at most
  DECODE_SCAN_S seconds), the record's id and image path from the .lst.

Precision: `fp32`; `amp` = `mxnet.contrib.amp` (`amp.init` before the model is built) with
bfloat16 on the CPU (oneDNN: convolutions and dense layers in bfloat16; BERT's fused attention
kernels are float32-only on the CPU and are kept in float32) and float16 on CUDA (with
`amp.init_trainer` dynamic loss scaling).

Strategy `dist_sync` (one process per device; parameter server through ps-lite). Every rank
derives the whole ps-lite layout from `spec.dist` alone, with no extra coordination:
  * scheduler  on master_addr:master_port, spawned by rank 0 as a subprocess;
  * servers    one per node (world_size // local_world_size), each spawned by the node's
               local rank 0 as a subprocess;
  * workers    every rank, DMLC_ROLE=worker, set in os.environ before `import mxnet`.
  DMLC_PS_ROOT_URI/PORT = master_addr/master_port, DMLC_NUM_WORKER = world_size,
  DMLC_NUM_SERVER = number of nodes. `PORT` is removed from every ps-lite process's
  environment (ps-lite takes $PORT as the process's own port: the server would bind the
  scheduler's port and everything hangs). Each ps-lite process announces DMLC_NODE_HOST:
  one set in the environment by the operator wins; else 127.0.0.1 when master_addr is a
  loopback address; else this node's address from `spec.dist.endpoints["workers"]` (the
  Slurm launcher fills it); else ps-lite picks an interface (DMLC_INTERFACE is respected). ps-lite numbers its
  workers in order of arrival, so the kvstore rank may differ from the dlbench rank (both go
  into the step-log header). The `mxnet.tools.launch` / dmlc-tracker launcher is not used: it
  crashes on Python >= 3.9 and binds the scheduler to the FQDN's address.
  Gradients are summed over workers on the server, which also runs the optimizer
  (update_on_kvstore, MXNet's default for dist kvstores), so `trainer.step()` is given the
  global batch (batch x world_size): the update is the mean gradient, as with DDP.
  Nothing can hang forever: the scheduler and server exit when their parent rank dies
  (they poll their parent pid) and are killed by rank 0/local rank 0 in `close()` after a
  grace period; a worker waits for the scheduler's port for at most
  `RENDEZVOUS_TIMEOUT_S` and for the ps-lite rendezvous as long again, then fails with a
  clear error; `close()` bounds ps-lite's exit barrier, and if it does not return (another
  rank died) it ends the process with `os._exit` -- after the worker has written the footer.
  The launcher's own bound (--time-limit + 120 s) catches a rank stuck in a collective.

Strategies `device` and `nccl` (one process per node drives the node's devices; the
launcher starts one task per node, `PROCESS_PER_NODE_STRATEGIES`): the model is initialised
on a list of contexts (the node's GPUs; on the CPU the stand-ins `mx.cpu(0..G-1)`, each its
own engine device with one worker thread and threads/G OpenMP threads), every context gets
its own copy of the synthetic batch, and the Gluon Trainer reduces the gradients through
kvstore `device` (sum on the devices) or `nccl` (NCCL all-reduce, GPUs only: the PyPI wheel
is built without NCCL -- "compile with USE_NCCL=1 to use nccl" -- so its cells are
unavailable on a CPU). `trainer.step(batch x G)`: the update is the mean gradient of the
node's global batch; samples per step = batch x G. Single node only.

Strategy `horovod`: one process per device, `hvd.DistributedTrainer` (gradient allreduce,
averaged), parameters broadcast from rank 0 after the deferred initialisation; the Gloo
rendezvous is set up without horovodrun (`dlbench.runners._horovod`). Horovod is not in the
locked environment (it does not build here), so its cells are unavailable
(`UNAVAILABLE_STRATEGIES`); the code path is kept for clusters that have it.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import subprocess
import sys
import threading
import time

from dlbench.models import CATALOGUE, IMAGE_CLASSES
from dlbench.runners import _servers
from dlbench.runners.base import Runner as BaseRunner

FRAMEWORK = "mxnet"
MODELS = ("resnet50", "resnet152", "vgg16", "inception_v3", "alexnet", "bert_base")
UNAVAILABLE: dict[str, str] = {}
STRATEGIES = ("dist_sync", "device", "nccl", "horovod")
PRECISIONS = ("fp32", "amp")
DATA = ("synthetic", "real")
# kvstore device/nccl: one process drives the node's devices (a list of contexts).
PROCESS_PER_NODE_STRATEGIES = ("device", "nccl")
SINGLE_NODE_STRATEGIES = PROCESS_PER_NODE_STRATEGIES
CUDA_ONLY_STRATEGIES = {
    "nccl": "the mxnet 1.9.1 wheel has no NCCL (kvstore 'nccl': \"compile with USE_NCCL=1 to use nccl\")",
}


def _horovod_unavailable() -> str:
    from dlbench.runners._horovod import UNAVAILABLE

    return UNAVAILABLE


UNAVAILABLE_STRATEGIES = {"horovod": _horovod_unavailable()}

# model -> (model-zoo constructor, move the down-sampling stride to the 3x3 conv)
_ZOO_BUILDERS = {
    "resnet50": ("resnet50_v1", True),
    "resnet152": ("resnet152_v1", True),
    "vgg16": ("vgg16", False),
    "inception_v3": ("inception_v3", False),
    "alexnet": ("alexnet", False),
}

# BERT-base (uncased) pre-training configuration.
BERT = {
    "vocab_size": 30522,
    "units": 768,
    "hidden_size": 3072,
    "num_layers": 12,
    "num_heads": 12,
    "max_length": 512,
    "token_types": 2,
    "dropout": 0.1,
    "layer_norm_eps": 1e-12,
    "masked_per_seq": 20,
}

# What sync() waits for (module docstring): the last step's loss, or every queued operator.
SYNC_MODES = ("loss", "waitall")

# ImageNet's per-channel mean and standard deviation (0-255 scale), as MXNet's
# image-classification examples give them to ImageRecordIter.
_MEAN = {"mean_r": 123.68, "mean_g": 116.779, "mean_b": 103.939}
_STD = {"std_r": 58.393, "std_g": 57.12, "std_b": 57.375}
PREFETCH_BATCHES = 4  # ImageRecordIter's prefetch_buffer (its default)
DECODE_SCAN_S = 60  # after a decode failure: time spent looking for the undecodable record

RENDEZVOUS_TIMEOUT_S = 180  # scheduler port reachable / ps-lite rendezvous complete, each
FINALIZE_TIMEOUT_S = 60  # ps-lite's exit barrier in close()
PS_GRACE_S = 30  # scheduler/server exit after the workers finalised

# The scheduler / server process: guard against an orphaned parameter server, then
# `import mxnet`, which (with DMLC_ROLE=scheduler|server) runs the ps-lite loop and exits.
_PS_PROCESS_CODE = (
    _servers.ORPHAN_GUARD
    + """
import mxnet
"""
)


def _is_loopback(addr: str) -> bool:
    try:
        return ipaddress.ip_address(socket.gethostbyname(addr)).is_loopback
    except (OSError, ValueError):
        return False


def _move_stride_to_3x3(net) -> None:
    """ResNet v1 -> v1.5: in each down-sampling BottleneckV1 the stride goes to the 3x3 conv."""
    for stage in net.features:
        for block in getattr(stage, "_children", {}).values():
            body = getattr(block, "body", None)
            if body is None or len(body) != 8:
                continue
            first, mid = body[0], body[3]
            if tuple(first._kwargs["stride"]) != (1, 1):
                mid._kwargs["stride"] = first._kwargs["stride"]
                first._kwargs["stride"] = (1, 1)


def _global_final_pool(net) -> None:
    """InceptionV3: Gluon's final AvgPool2D(8) is global at 299 px; make it global at any size.

    Identical at 299 px; below that (the 64-px default grid) Gluon's fixed 8x8 pool fails,
    while torchvision (adaptive pooling) and Keras (global pooling) still build."""
    from mxnet.gluon import nn

    children = net.features._children
    for key, block in children.items():
        if isinstance(block, nn.AvgPool2D) and tuple(block._kwargs["kernel"]) == (8, 8):
            children[key] = nn.GlobalAvgPool2D()


def _initializer(mx, model: str):
    """He/MSRA (Gaussian, fan-in, magnitude 2) for the BatchNorm networks, as Gluon's ImageNet
    recipes do; Glorot uniform (Keras's default) for VGG-16 and AlexNet, which have no
    BatchNorm and diverge (loss 1e20 in 5 steps) under He init with SGD lr 0.01."""
    if model in ("vgg16", "alexnet"):
        return mx.init.Xavier()
    return mx.init.Xavier(rnd_type="gaussian", factor_type="in", magnitude=2)


def _bert_pretraining_class(mx):
    """Gluon BERT pre-training model (defined lazily: it subclasses MXNet classes)."""
    from mxnet.gluon import nn

    class EncoderLayer(nn.HybridBlock):
        def __init__(self, units, hidden_size, num_heads, dropout, eps, **kwargs):
            super().__init__(**kwargs)
            self._heads = num_heads
            with self.name_scope():
                # One fused projection; its output is read as interleaved (head, q|k|v, dim),
                # the layout MXNet's fused self-attention kernels expect.
                self.qkv = nn.Dense(3 * units, flatten=False, in_units=units, prefix="qkv_")
                self.proj = nn.Dense(units, flatten=False, in_units=units, prefix="proj_")
                self.ln_att = nn.LayerNorm(epsilon=eps, in_channels=units, prefix="ln_att_")
                self.ffn_1 = nn.Dense(hidden_size, flatten=False, in_units=units, prefix="ffn1_")
                self.ffn_2 = nn.Dense(units, flatten=False, in_units=hidden_size, prefix="ffn2_")
                self.ln_ffn = nn.LayerNorm(epsilon=eps, in_channels=units, prefix="ln_ffn_")
                self.drop_att = nn.Dropout(dropout)
                self.drop = nn.Dropout(dropout)

        def hybrid_forward(self, F, x):  # x: (length, batch, units)
            qkv = self.qkv(x)
            scores = F.contrib.interleaved_matmul_selfatt_qk(qkv, heads=self._heads)
            weights = self.drop_att(F.softmax(scores, axis=-1))
            context = F.contrib.interleaved_matmul_selfatt_valatt(qkv, weights, heads=self._heads)
            x = self.ln_att(x + self.drop(self.proj(context)))
            h = self.ffn_2(F.LeakyReLU(self.ffn_1(x), act_type="gelu"))
            return self.ln_ffn(x + self.drop(h))

    class BertForPretraining(nn.HybridBlock):
        def __init__(self, c, **kwargs):
            super().__init__(**kwargs)
            units, eps = c["units"], c["layer_norm_eps"]
            self._vocab = c["vocab_size"]
            self._units = units
            with self.name_scope():
                self.word_embed = nn.Embedding(c["vocab_size"], units, prefix="word_embed_")
                self.type_embed = nn.Embedding(c["token_types"], units, prefix="type_embed_")
                self.position_weight = self.params.get("position_weight", shape=(c["max_length"], units))
                self.ln_embed = nn.LayerNorm(epsilon=eps, in_channels=units, prefix="ln_embed_")
                self.drop = nn.Dropout(c["dropout"])
                self.layers = nn.HybridSequential(prefix="layers_")
                with self.layers.name_scope():
                    for i in range(c["num_layers"]):
                        self.layers.add(
                            EncoderLayer(units, c["hidden_size"], c["num_heads"], c["dropout"], eps, prefix=f"l{i}_")
                        )
                self.pooler = nn.Dense(units, activation="tanh", in_units=units, prefix="pooler_")
                self.nsp = nn.Dense(2, in_units=units, prefix="nsp_")
                self.mlm_dense = nn.Dense(units, flatten=False, in_units=units, prefix="mlm_dense_")
                self.mlm_ln = nn.LayerNorm(epsilon=eps, in_channels=units, prefix="mlm_ln_")
                # The decoder shares the word embedding's parameter dict (gluonnlp's way of
                # tying): its `weight` is the embedding matrix; its bias is its own.
                self.mlm_decoder = nn.Dense(
                    c["vocab_size"], flatten=False, in_units=units, params=self.word_embed.collect_params()
                )
            assert self.mlm_decoder.weight is self.word_embed.weight, "MLM decoder not tied to the embedding"
            self._max_length = c["max_length"]

        def hybrid_forward(self, F, ids, types, positions, position_weight):
            # ids, types: (batch, length); positions: (batch * masked,) flat indices into
            # the (batch * length) token rows.
            x = self.word_embed(ids) + self.type_embed(types)
            steps = F.contrib.arange_like(ids, axis=1)
            pos_embed = F.Embedding(steps, position_weight, input_dim=self._max_length, output_dim=self._units)
            x = F.broadcast_add(x, F.expand_dims(pos_embed, axis=0))
            x = self.drop(self.ln_embed(x))
            x = self.layers(F.transpose(x, axes=(1, 0, 2)))  # (length, batch, units)
            x = F.transpose(x, axes=(1, 0, 2))  # (batch, length, units)
            nsp_logits = self.nsp(self.pooler(F.squeeze(F.slice_axis(x, axis=1, begin=0, end=1), axis=1)))
            rows = F.take(F.reshape(x, shape=(-1, self._units)), positions)
            h = self.mlm_ln(F.LeakyReLU(self.mlm_dense(rows), act_type="gelu"))
            return self.mlm_decoder(h), nsp_logits

    return BertForPretraining


class Runner(BaseRunner):
    # ------------------------------------------------------------------ build
    def import_framework(self) -> None:
        """Set what MXNet reads at import, start the parameter server, import MXNet."""
        if getattr(self, "mx", None) is not None:
            return
        spec = self.spec
        strategy = spec.coords.strategy
        if strategy != "single" and strategy not in STRATEGIES:
            raise ValueError(f"mxnet: strategy {strategy!r} not offered (have {STRATEGIES})")
        self.world = spec.dist.world_size
        # dist_sync: the parameter-server machinery below (one process per device).
        self.distributed = strategy == "dist_sync"
        self.multi_device = strategy in PROCESS_PER_NODE_STRATEGIES
        self.hvd = self._rendezvous = None
        self.ps_procs: list[subprocess.Popen] = []
        self._kv_thread: threading.Thread | None = None
        self.kv = self.trainer = None
        self._pending = None  # the losses of the last step, until sync() waits for them
        self.sync_mode = os.environ.get("DLBENCH_MXNET_SYNC", "waitall")
        if self.sync_mode not in SYNC_MODES:
            raise ValueError(f"mxnet: DLBENCH_MXNET_SYNC={self.sync_mode!r}, expected one of {SYNC_MODES}")
        if strategy == "single" and self.world > 1:
            raise ValueError(f"mxnet: strategy 'single' with {self.world} ranks")
        if self.multi_device and self.world > spec.dist.local_world_size:
            raise ValueError(f"mxnet: kvstore {strategy!r} drives one node's devices, not several nodes")
        if strategy in CUDA_ONLY_STRATEGIES and spec.device != "cuda":
            raise RuntimeError(f"mxnet: kvstore {strategy!r} needs CUDA devices: {CUDA_ONLY_STRATEGIES[strategy]}")
        if "mxnet" in sys.modules:
            # Thread and DMLC variables are read once, at import: too late to set them now.
            print("[dlbench] mxnet: already imported; thread settings may not apply", file=sys.stderr)
        # Each device's operators get its share of the process's threads (device/nccl: one
        # engine worker thread per CPU context, so G contexts run G operators at once).
        devices = spec.local_devices if self.multi_device else 1
        os.environ["OMP_NUM_THREADS"] = str(max(1, spec.threads // devices))
        # One engine worker thread per CPU device, each operator using `threads` OpenMP
        # threads (MXNet's default; more workers oversubscribe the cores).
        os.environ.setdefault("MXNET_CPU_WORKER_NTHREADS", "1")
        if self.distributed:
            self._operator_node_host = os.environ.get("DMLC_NODE_HOST")
            self._ps_environment()
            self._start_parameter_server()

        import mxnet as mx
        import mxnet.gluon.model_zoo.vision  # noqa: F401

        self.mx = mx
        local = spec.dist.local_rank
        if strategy == "horovod":
            self._import_horovod()
            local = self.hvd.local_rank()
        if self.multi_device:
            make = mx.gpu if spec.device == "cuda" else mx.cpu
            self.ctxs = [make(i) for i in range(spec.local_devices)]
        else:
            self.ctxs = [mx.gpu(local) if spec.device == "cuda" else mx.cpu()]
        self.ctx = self.ctxs[0]
        self._start_engine()

    def _import_horovod(self) -> None:
        from dlbench.runners import _horovod

        self.hvd, self._rendezvous = _horovod.start("horovod.mxnet", self.spec.dist)

    def _start_engine(self) -> None:
        """Run a few tiny operators so that MXNet starts its engine worker threads, the
        OpenMP team, OpenBLAS's threads and oneDNN now. MXNet creates them lazily, on the
        first operator; under the worker's address-space cap (applied after
        import_framework) creating them later fails inside C++ and aborts the process
        (`terminate called after throwing dmlc::Error`) instead of raising a catchable
        "Failed to allocate" error."""
        for ctx in self.ctxs:
            self._start_device(ctx)

    def _start_device(self, ctx) -> None:
        mx = self.mx
        x = mx.nd.ones((64, 64), ctx=ctx)
        y = mx.nd.dot(x, x) + mx.nd.ones((1 << 18,), ctx=ctx).sum()
        z = mx.nd.Convolution(
            mx.nd.ones((1, 3, 8, 8), ctx=ctx),
            mx.nd.ones((4, 3, 3, 3), ctx=ctx),
            kernel=(3, 3),
            num_filter=4,
            no_bias=True,
        )
        (y.sum() + z.sum()).wait_to_read()
        mx.nd.waitall()

    def build(self) -> None:
        self.import_framework()
        spec, mx = self.spec, self.mx
        on_cuda = spec.device == "cuda"
        mx.random.seed(spec.seed, ctx="all")

        amp = spec.coords.precision == "amp"
        if amp:
            from mxnet.contrib import amp as mx_amp

            self.amp = mx_amp
            self.amp_dtype = "float16" if on_cuda else "bfloat16"
            # Must run before the model is built: it patches the operator namespaces.
            fp32_ops = None
            if not on_cuda:
                # MXNet's fused self-attention kernels are float32-only on the CPU and are
                # missing from AMP's bfloat16 lists (they would get bfloat16 inputs and fail).
                fp32_ops = mx_amp.list_fp32_ops(mx_amp.amp.bfloat16) + [
                    "_contrib_interleaved_matmul_selfatt_qk",
                    "_contrib_interleaved_matmul_selfatt_valatt",
                ]
            mx_amp.init(target_dtype=self.amp_dtype, fp32_ops=fp32_ops)
        else:
            self.amp, self.amp_dtype = None, None

        model = spec.coords.model
        self.is_bert = model == "bert_base"
        # Real data: a missing or empty dataset file stops the run before the model is built.
        self.real_data = spec.coords.data == "real"
        if self.real_data and self.is_bert:
            self._text_batches = self._text_loader()  # the data's masked-LM width sets the graph
        elif self.real_data:
            from dlbench.data import recordio

            self._rec_files = recordio.split_files(spec.data_dir, "train")
        if self.is_bert:
            net = _bert_pretraining_class(mx)(BERT, prefix="bert_")
            net.initialize(mx.init.Normal(0.02), ctx=self.ctxs)
        else:
            from mxnet.gluon.model_zoo import vision

            name, v15 = _ZOO_BUILDERS[model]
            net = getattr(vision, name)(pretrained=False, classes=IMAGE_CLASSES)
            if v15:
                _move_stride_to_3x3(net)
            if model == "inception_v3":
                _global_final_pool(net)
            net.initialize(_initializer(mx, model), ctx=self.ctxs)
        net.hybridize(static_alloc=True, static_shape=True)
        self.net = net

        self._make_batch()
        # Deferred shapes: one forward pass fixes every parameter shape (in training mode,
        # so the cached graph is the one the steps use; no backward, no update).
        with mx.autograd.record():
            for inputs, _ in self.replicas:
                net(*inputs)
        mx.nd.waitall()
        self.params = sum(int(p.data(self.ctx).size) for p in net.collect_params().values() if p.grad_req != "null")

        if self.is_bert:
            optimizer, opt_args = "adam", {"learning_rate": 1e-4, "epsilon": 1e-6}
        else:
            optimizer, opt_args = "sgd", {"learning_rate": 0.01, "momentum": 0.9}
        if self.hvd is not None:
            # Every rank starts from rank 0's parameters (after the deferred initialisation);
            # the trainer allreduces (averages) gradients over the ranks: the local batch.
            self.hvd.broadcast_parameters(net.collect_params(), root_rank=0)
            self.trainer = self.hvd.DistributedTrainer(net.collect_params(), optimizer, opt_args)
            self.step_batch = spec.batch
        else:
            if self.distributed:
                kvstore = self._create_kvstore()
            elif self.multi_device:
                kvstore = self.kv = mx.kv.create(spec.coords.strategy)
            else:
                kvstore = None
            # dist_sync: the server sums the workers' gradients and runs the optimizer
            # (update_on_kvstore, MXNet's default for dist kvstores; stated here explicitly).
            # device/nccl: MXNet's default (the kvstore sums the contexts' gradients).
            self.trainer = mx.gluon.Trainer(
                net.collect_params(),
                optimizer,
                opt_args,
                kvstore=kvstore,
                update_on_kvstore=True if self.distributed else None,
            )
            # Gradients are summed over workers / devices: normalise by the global batch.
            self.step_batch = spec.batch * self.world * len(self.ctxs)
        if amp and on_cuda:
            self.amp.init_trainer(self.trainer)  # dynamic loss scaling for float16
        self.scale_loss = amp and on_cuda
        if self.real_data and not self.is_bert:
            self.image_iter = self._image_iter()

    def _make_batch(self) -> None:
        mx, spec, ctx = self.mx, self.spec, self.ctx
        # Synthetic data created once on the device; the same on every rank (as in the
        # PyTorch runner), so a dist_sync run's update equals a single-device run's.
        mx.random.seed(spec.seed, ctx=ctx)
        b = spec.batch
        if self.is_bert:
            length = spec.seq_len
            if self.real_data:  # the real batches' sequence length and masked-LM width
                length, masked = self._text_shape
                self.masked = masked
            else:
                masked = self.masked = min(BERT["masked_per_seq"], length)
            ids = mx.nd.random.randint(0, BERT["vocab_size"], shape=(b, length), ctx=ctx).astype("float32")
            types = mx.nd.concat(
                mx.nd.zeros((b, length // 2), ctx=ctx), mx.nd.ones((b, length - length // 2), ctx=ctx), dim=1
            )
            # Flat indices of `masked` distinct positions per sequence into (batch*length) rows.
            pos = mx.nd.stack(*[mx.nd.random.shuffle(mx.nd.arange(length, ctx=ctx))[:masked] for _ in range(b)])
            pos = pos + mx.nd.arange(b, ctx=ctx).reshape((b, 1)) * length
            inputs = (ids, types, pos.reshape((-1,)))
            mlm_labels = mx.nd.random.randint(0, BERT["vocab_size"], shape=(b, masked), ctx=ctx).astype("float32")
            labels = (mlm_labels, mx.nd.random.randint(0, 2, shape=(b,), ctx=ctx).astype("float32"))
        else:
            size = spec.image_size or CATALOGUE[spec.coords.model]["default_image_size"]
            images = mx.nd.random.normal(shape=(b, 3, size, size), ctx=ctx)
            inputs = (images,)
            labels = (mx.nd.random.randint(0, IMAGE_CLASSES, shape=(b,), ctx=ctx).astype("float32"),)
        # (inputs, labels) per context: device/nccl give every device the same batch, copied
        # there once (so the reduced update equals a single-device run's on that batch).
        self.replicas = [(inputs, labels)] + [
            (tuple(x.as_in_context(c) for x in inputs), tuple(y.as_in_context(c) for y in labels))
            for c in self.ctxs[1:]
        ]
        self.loss_fn = mx.gluon.loss.SoftmaxCrossEntropyLoss()

    # ------------------------------------------------------------ dist_sync
    def _ps_environment(self) -> None:
        """DMLC_* for this worker (before `import mxnet`), derived from spec.dist alone."""
        env = os.environ
        env.pop("PORT", None)
        env.update(self._ps_common_env())
        env["DMLC_ROLE"] = "worker"

    def _ps_common_env(self) -> dict:
        d = self.spec.dist
        nodes = max(1, d.world_size // max(1, d.local_world_size))
        env = {
            "DMLC_PS_ROOT_URI": d.master_addr,
            "DMLC_PS_ROOT_PORT": str(d.master_port),
            "DMLC_NUM_WORKER": str(d.world_size),
            "DMLC_NUM_SERVER": str(nodes),
        }
        workers = d.endpoints.get("workers") or []
        if self._operator_node_host:
            env["DMLC_NODE_HOST"] = self._operator_node_host
        elif _is_loopback(d.master_addr):
            env["DMLC_NODE_HOST"] = "127.0.0.1"
        elif len(workers) == d.world_size:
            env["DMLC_NODE_HOST"] = workers[d.rank].rsplit(":", 1)[0]  # this node's address (Slurm)
        return env

    def _start_parameter_server(self) -> None:
        d = self.spec.dist
        roles = []
        if d.rank == 0:
            roles.append("scheduler")
        if d.local_rank == 0:
            roles.append("server")
        for role in roles:
            env = {k: v for k, v in os.environ.items() if k != "PORT" and not k.startswith("DMLC_")}
            env.update(self._ps_common_env())
            env.update(
                DMLC_ROLE=role,
                OMP_NUM_THREADS="1",
                MXNET_CPU_WORKER_NTHREADS="1",
            )
            for key in ("DMLC_INTERFACE",):
                if key in os.environ:
                    env[key] = os.environ[key]
            self.ps_procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", _PS_PROCESS_CODE, str(os.getpid())],
                    env=env,
                    stdin=subprocess.DEVNULL,
                )
            )

    def _create_kvstore(self):
        mx, d = self.mx, self.spec.dist
        deadline = time.monotonic() + RENDEZVOUS_TIMEOUT_S
        while True:  # the scheduler must be listening before ps-lite is asked to connect
            for proc in self.ps_procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"mxnet dist_sync: ps-lite process exited early with code {proc.returncode}")
            try:
                with socket.create_connection((d.master_addr, d.master_port), timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"mxnet dist_sync: no ps-lite scheduler at {d.master_addr}:{d.master_port} "
                        f"after {RENDEZVOUS_TIMEOUT_S} s"
                    ) from None
                time.sleep(0.2)
        # ps-lite's rendezvous blocks in C until every worker and server has registered;
        # run it in a thread so that a missing peer becomes an error, not a hang.
        box: dict = {}

        def create():
            try:
                box["kv"] = mx.kv.create("dist_sync")
            except BaseException as exc:  # noqa: BLE001 - handed to the main thread
                box["error"] = exc

        thread = self._kv_thread = threading.Thread(target=create, daemon=True)
        thread.start()
        thread.join(RENDEZVOUS_TIMEOUT_S)
        if thread.is_alive():
            raise RuntimeError(
                f"mxnet dist_sync: ps-lite rendezvous of {d.world_size} workers did not complete in "
                f"{RENDEZVOUS_TIMEOUT_S} s"
            )
        if "error" in box:
            raise box["error"]
        self.kv = box["kv"]
        if self.kv.num_workers != d.world_size:
            raise RuntimeError(f"mxnet dist_sync: kvstore has {self.kv.num_workers} workers, expected {d.world_size}")
        return self.kv

    # ------------------------------------------------------------- real data
    def _shard(self) -> tuple[int, int]:
        """(parts, index) of this process's shard: one per rank for one-process-per-device
        strategies; the whole dataset for a process that drives all its node's devices."""
        if self.hvd is not None:
            return self.hvd.size(), self.hvd.rank()
        if self.multi_device:
            return 1, 0
        return self.world, self.spec.dist.rank

    def _image_iter(self):
        """ImageRecordIter over train.rec/.idx: decode + random-resized crop + mirror +
        normalisation in `data_workers` threads, batches prefetched; one global batch
        (batch x local devices), split over the contexts in next_batch()."""
        from dlbench.data import DataError

        mx, spec = self.mx, self.spec
        rec, idx, _ = self._rec_files
        with open(idx) as f:
            records = sum(1 for line in f if line.strip())
        parts, index = self._shard()
        self.iter_batch = spec.batch * len(self.ctxs)
        if records // parts < self.iter_batch:
            raise DataError(
                f"{rec}: {records} records cannot fill a batch of {self.iter_batch} on each of {parts} ranks"
            )
        size = spec.image_size or CATALOGUE[spec.coords.model]["default_image_size"]
        self.image_iter_args = dict(
            path_imgrec=rec,
            path_imgidx=idx,
            data_shape=(3, size, size),
            batch_size=self.iter_batch,
            shuffle=True,
            seed=spec.seed,
            seed_aug=spec.seed + index,
            random_resized_crop=True,  # (excludes rand_crop, which is the plain random crop)
            min_random_area=0.08,
            max_random_area=1.0,
            min_aspect_ratio=3 / 4,
            max_aspect_ratio=4 / 3,
            rand_mirror=True,
            **_MEAN,
            **_STD,
            preprocess_threads=spec.data_workers,
            prefetch_buffer=PREFETCH_BATCHES,
            num_parts=parts,
            part_index=index,
            dtype="float32",
            # The threaded iterator (decode in `preprocess_threads`, `prefetch_buffer` batches
            # ahead) on every device; ctx="cpu" would pick MXNet's CPU variant, which ignores
            # preprocess_threads and decodes with the operators' OpenMP team. device_id -1:
            # batches in CPU memory; on CUDA pinned host memory of the rank's GPU.
            ctx="gpu",
            device_id=self.spec.dist.local_rank if spec.device == "cuda" else -1,
            verbose=False,
        )
        try:
            return mx.io.ImageRecordIter(**self.image_iter_args)
        except mx.base.MXNetError as exc:
            raise self._decode_error(exc) from None  # it starts decoding (prefetch) at once

    def _decode_error(self, exc):
        """A DataError naming the .rec file and, when one can be found within DECODE_SCAN_S,
        the first record that mx.image.imdecode cannot decode (its id and .lst path)."""
        from dlbench.data import DataError

        mx = self.mx
        rec, idx, lst = self._rec_files
        reason = str(exc).strip().splitlines()[-1].removeprefix("MXNetError: ") if str(exc).strip() else repr(exc)
        bad = None
        deadline = time.monotonic() + DECODE_SCAN_S
        with contextlib.suppress(Exception):
            reader = mx.recordio.MXIndexedRecordIO(idx, rec, "r")
            try:
                for key in sorted(reader.keys):
                    if time.monotonic() > deadline:
                        break
                    header, data = mx.recordio.unpack(reader.read_idx(key))
                    try:
                        image = mx.image.imdecode(data)
                        undecodable = image.ndim != 3 or min(image.shape) == 0
                    except mx.base.MXNetError:
                        undecodable = True
                    if undecodable:
                        bad = int(header.id)
                        break
            finally:
                reader.close()
        if bad is None:
            return DataError(f"{rec}: ImageRecordIter failed: {reason}")
        name = "?"
        with contextlib.suppress(OSError, ValueError, IndexError), open(lst) as f:
            for line in f:
                fields = line.rstrip("\n").split("\t")
                if int(fields[0]) == bad:
                    name = fields[-1]
                    break
        return DataError(f"{rec}: record {bad} ({name}): corrupt image ({reason})")

    def _text_loader(self):
        """Shuffled batches of the tokenised examples, from memory (numpy), forever: per
        epoch a seeded permutation of this process's shard."""
        import numpy as np

        from dlbench.data import DataError, bert

        spec = self.spec
        arrays = bert.load_examples(spec.data_dir)
        n, length = arrays["input_ids"].shape
        predictions = arrays["masked_lm_ids"].shape[1]
        if spec.seq_len and spec.seq_len != length:
            raise DataError(f"{spec.data_dir}: examples have sequence length {length}, the run {spec.seq_len}")
        if length > BERT["max_length"]:
            raise DataError(f"{spec.data_dir}: sequence length {length} > BERT's {BERT['max_length']}")
        self._text_shape = (length, predictions)
        parts, index = self._shard()
        rows = np.arange(n)[index::parts]
        per_batch = spec.batch * len(self.ctxs)
        if len(rows) < per_batch:
            raise DataError(
                f"{spec.data_dir}: {n} examples cannot fill a batch of {per_batch} on each of {parts} ranks"
            )
        # Flat indices of the masked positions into the (batch * length) token rows.
        offsets = (np.arange(spec.batch) * length)[:, None]
        fields = {
            "ids": arrays["input_ids"].astype(np.float32),
            "types": arrays["segment_ids"].astype(np.float32),
            "positions": arrays["masked_lm_positions"].astype(np.int64),
            "mlm_ids": arrays["masked_lm_ids"].astype(np.float32),
            "mlm_weights": arrays["masked_lm_weights"].astype(np.float32),
            "nsp": arrays["next_sentence_labels"].astype(np.float32),
        }

        def batches():
            rng = np.random.default_rng([spec.seed, index])
            while True:
                order = rng.permutation(rows)
                for start in range(0, len(order) - per_batch + 1, per_batch):
                    take = np.sort(order[start : start + per_batch])
                    chunk = {k: v[take] for k, v in fields.items()}
                    out = []
                    for c in range(len(self.ctxs)):
                        part = {k: v[c * spec.batch : (c + 1) * spec.batch] for k, v in chunk.items()}
                        part["positions"] = (part["positions"] + offsets).reshape(-1).astype(np.float32)
                        out.append(part)
                    yield out

        return batches()

    def next_batch(self):
        """Real data: [(inputs, labels)] per context, on the contexts (copies queued on the
        engine); the time spent here is the step's data wait. Synthetic: None."""
        if not self.real_data:
            return None
        mx = self.mx
        if self.is_bert:
            replicas = []
            for ctx, part in zip(self.ctxs, next(self._text_batches), strict=True):
                a = {k: mx.nd.array(v, ctx=ctx, dtype="float32") for k, v in part.items()}
                replicas.append(((a["ids"], a["types"], a["positions"]), (a["mlm_ids"], a["nsp"], a["mlm_weights"])))
            return replicas
        try:
            try:
                batch = self.image_iter.next()
            except StopIteration:  # end of the epoch (of this rank's part): start the next
                self.image_iter.reset()
                batch = self.image_iter.next()
        except mx.base.MXNetError as exc:
            raise self._decode_error(exc) from None
        images = mx.gluon.utils.split_and_load(batch.data[0], self.ctxs, even_split=True)
        labels = mx.gluon.utils.split_and_load(batch.label[0], self.ctxs, even_split=True)
        return [((x,), (y,)) for x, y in zip(images, labels, strict=True)]

    # ------------------------------------------------------------------- step
    def _loss(self, inputs, labels):
        if self.is_bert:
            mlm_labels, nsp_labels = labels[:2]
            mlm_logits, nsp_logits = self.net(*inputs)
            mlm = self.loss_fn(mlm_logits, mlm_labels.reshape((-1,))).reshape((-1, self.masked))
            if len(labels) == 3:  # real data: padded prediction slots have weight 0
                weights = labels[2]
                mlm = (mlm * weights).sum(axis=1) / self.mx.nd.maximum(weights.sum(axis=1), 1.0)
            else:
                mlm = mlm.mean(axis=1)
            # Per sequence: mean masked-LM loss over its masked positions + NSP loss.
            return mlm + self.loss_fn(nsp_logits, nsp_labels)
        return self.loss_fn(self.net(*inputs), labels[0])

    def step(self, batch=None):
        mx = self.mx
        replicas = self.replicas if batch is None else batch
        with mx.autograd.record():
            losses = [self._loss(inputs, labels) for inputs, labels in replicas]
        if self.scale_loss:
            with self.amp.scale_loss(losses, self.trainer) as scaled:
                mx.autograd.backward(scaled)
        else:
            mx.autograd.backward(losses)
        self.trainer.step(self.step_batch)
        self._pending = losses
        return losses

    def sync(self) -> None:
        last, self._pending = self._pending, None
        if last is None or self.sync_mode == "waitall":
            self.mx.nd.waitall()
        else:
            for loss in last:
                loss.wait_to_read()

    def loss_value(self, handle) -> float:
        # The mean per-sample loss over the contexts' batches (equal sizes).
        return sum(float(loss.mean().asscalar()) for loss in handle) / len(handle)

    def is_oom(self, exc: BaseException) -> bool:
        if isinstance(exc, MemoryError):
            return True
        text = str(exc)
        return any(s in text for s in ("out of memory", "Failed to allocate", "std::bad_alloc", "cudaMalloc"))

    def describe(self) -> dict:
        mx = self.mx
        features = mx.runtime.Features()
        info = {
            "version": mx.__version__,
            "features": {k: features.is_enabled(k) for k in ("MKLDNN", "CUDA", "CUDNN", "NCCL", "DIST_KVSTORE")},
            "device": str(self.ctx),
            "devices": [str(c) for c in self.ctxs],
            "device_name": "cpu" if self.spec.device == "cpu" else f"gpu{self.spec.dist.local_rank}",
            "threads": int(os.environ["OMP_NUM_THREADS"]),
            "engine_worker_threads": int(os.environ["MXNET_CPU_WORKER_NTHREADS"]),
            "trainable_params": self.params,
            "amp_dtype": self.amp_dtype,
            "model_variant": _variant(self.spec.coords.model),
            "sync": self.sync_mode,
        }
        if getattr(self, "real_data", False):
            if self.is_bert:
                info["input_pipeline"] = "tokenised examples in memory (numpy), shuffled batches per epoch"
            else:
                a = self.image_iter_args
                info["input_pipeline"] = (
                    f"ImageRecordIter(train.rec, preprocess_threads={a['preprocess_threads']}, "
                    f"prefetch_buffer={a['prefetch_buffer']}, part {a['part_index']}/{a['num_parts']}), "
                    f"random_resized_crop + rand_mirror, mean/std normalised, batch {a['batch_size']}"
                    + (f" split over {len(self.ctxs)} contexts" if len(self.ctxs) > 1 else "")
                )
        if self.kv is not None and self.multi_device:
            info["kvstore"] = {
                "type": self.kv.type,
                "contexts": [str(c) for c in self.ctxs],
                "update_on_kvstore": bool(getattr(self.trainer, "_update_on_kvstore", None)),
                "step_batch": self.step_batch,
            }
        elif self.kv is not None:
            d = self.spec.dist
            info["kvstore"] = {
                "type": self.kv.type,
                "rank": self.kv.rank,
                "num_workers": self.kv.num_workers,
                "num_servers": int(os.environ["DMLC_NUM_SERVER"]),
                "scheduler": f"{d.master_addr}:{d.master_port}",
                "update_on_kvstore": True,
            }
        if self.hvd is not None:
            info["horovod"] = {
                "version": getattr(__import__("horovod"), "__version__", None),
                "rank": self.hvd.rank(),
                "size": self.hvd.size(),
                "local_rank": self.hvd.local_rank(),
            }
        return info

    # ------------------------------------------------------------------ close
    def close(self) -> None:
        if getattr(self, "_rendezvous", None) is not None:
            with contextlib.suppress(Exception):
                self._rendezvous.stop()
        if not getattr(self, "distributed", False):
            return
        if self._kv_thread is not None and self._kv_thread.is_alive():
            # Rendezvous timed out (or the time limit hit during it): the thread blocked in
            # ps-lite can neither be joined nor left behind safely (MXNet's exit would wait
            # for it). End the process; the worker has already written the footer.
            self._stop_parameter_server(grace=0)
            os._exit(1)
        # Freeing the kvstore runs ps-lite's exit sequence (barrier over all workers, the
        # first worker stops the servers, Finalize). It must happen here, while the
        # scheduler and servers are alive, not at interpreter exit; and if a peer died the
        # barrier never returns, so it is bounded.
        if self.kv is None:  # failed before the rendezvous: nothing to shut down but the servers
            self._stop_parameter_server(grace=0)
            return
        done = threading.Event()

        def finalize():
            import gc
            import weakref

            kv_ref = weakref.ref(self.kv) if self.kv is not None else (lambda: None)
            net = getattr(self, "net", None)
            for param in net.collect_params().values() if net is not None else ():
                param._trainer = None  # Gluon parameters hold their trainer (and its kvstore)
            if self.trainer is not None:
                self.trainer._kvstore = None
            self.trainer = None
            self.kv = None
            gc.collect()
            self.mx.nd.waitall()
            if kv_ref() is None:
                done.set()

        threading.Thread(target=finalize, daemon=True).start()
        finished = done.wait(FINALIZE_TIMEOUT_S)
        self._stop_parameter_server(grace=PS_GRACE_S if finished else 0)
        if not finished:
            print("[dlbench] mxnet: ps-lite shutdown did not complete; ending the process", file=sys.stderr)
            sys.stderr.flush()
            os._exit(1)

    def _stop_parameter_server(self, grace: float) -> None:
        deadline = time.monotonic() + grace
        for proc in self.ps_procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _variant(model: str) -> str:
    if model == "bert_base":
        return "own Gluon BERT-base pre-training (MLM + NSP, tied decoder)"
    name, v15 = _ZOO_BUILDERS[model]
    return f"gluon.model_zoo.vision.{name}" + (" with stride on the 3x3 conv (v1.5)" if v15 else "")
