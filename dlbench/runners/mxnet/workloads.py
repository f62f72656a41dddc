"""The MXNet runner's workloads, one object per model kind (dlbench.runners.base.Workload):
Gluon model-zoo CNNs with momentum SGD, its own Gluon BERT-base with Adam (models.py). Each
builds its network, synthetic batch, real-data pipeline, optimizer and loss; the runner drives
the one `WORKLOADS(model)` names. Importing this module does not import MXNet."""

from __future__ import annotations

from dlbench.recipe import ADAM_EPSILON, ADAM_LR, MAX_PREDICTIONS_PER_SEQ, SGD_MOMENTUM, sgd_lr
from dlbench.runners.base import Workload, Workloads
from dlbench.runners.mxnet import models as nets
from dlbench.runners.mxnet import pipeline

WORKLOADS = Workloads("mxnet")


class MXNetWorkload(Workload):
    """What every MXNet workload offers the runner. Real data: `open_data` before the network
    is built (a missing or empty dataset stops the run there), `start_data` after the trainer."""

    def __init__(self, spec, mx, ctxs):
        self.spec, self.mx, self.ctxs = spec, mx, ctxs
        self.data = None  # the real-data pipeline
        self.masked = None  # the masked-LM width of BERT's batches

    def open_data(self, shard) -> None:
        raise NotImplementedError

    def start_data(self, shard) -> None:
        """Start the pipeline opened by open_data (if it did not start it)."""

    def synthetic_batch(self) -> list:
        """[(inputs, labels)] per context, created once on the first context (the same on every
        rank, as in the PyTorch runner: a dist_sync update equals a single device's)."""
        mx, ctx = self.mx, self.ctxs[0]
        mx.random.seed(self.spec.seed, ctx=ctx)
        return nets.replicated(*self._batch(ctx), self.ctxs)

    def describe(self) -> dict:
        return {"model_variant": self.variant}


@WORKLOADS.registers
class ImageClassification(MXNetWorkload):
    """A model-zoo CNN (ResNets moved to v1.5) with momentum SGD and softmax cross-entropy."""

    kind = "image"
    models = tuple(nets.ZOO_BUILDERS)

    @property
    def variant(self) -> str:
        return nets.image_variant(self.spec.coords.model)

    def open_data(self, shard) -> None:
        self.data = pipeline.ImagePipeline(self.spec)

    def start_data(self, shard) -> None:
        self.data.start(self.mx, self.ctxs, shard)

    def net(self):
        mx, model = self.mx, self.spec.coords.model
        return nets.initialised(mx, nets.image_net(mx, model), nets.image_initializer(mx, model), self.ctxs)

    def _batch(self, ctx):
        return nets.image_batch(self.mx, self.spec, ctx)

    def optimizer(self) -> tuple[str, dict]:
        return "sgd", {"learning_rate": sgd_lr(self.spec), "momentum": SGD_MOMENTUM}

    def loss(self, loss_fn, net, inputs, labels):
        return loss_fn(net(*inputs), labels[0])


@WORKLOADS.registers
class BertPretraining(MXNetWorkload):
    """BERT-base pre-training (masked LM + next sentence, tied decoder) with Adam."""

    kind = "text"
    models = ("bert_base",)
    variant = nets.BERT_VARIANT

    def open_data(self, shard) -> None:
        # Read before the network: the data's sequence length and masked-LM width set the graph.
        self.data = pipeline.TextPipeline(self.spec)
        self.data.start(self.mx, self.ctxs, shard)

    def net(self):
        mx = self.mx
        return nets.initialised(mx, nets.bert_net(mx), nets.bert_initializer(mx), self.ctxs)

    def _batch(self, ctx):
        spec = self.spec
        if self.data is not None:
            length, self.masked = self.data.shape
        else:
            length, self.masked = spec.seq_len, min(MAX_PREDICTIONS_PER_SEQ, spec.seq_len)
        return nets.bert_batch(self.mx, ctx, spec.batch, length, self.masked)

    def optimizer(self) -> tuple[str, dict]:
        return "adam", {"learning_rate": ADAM_LR, "epsilon": ADAM_EPSILON}

    def loss(self, loss_fn, net, inputs, labels):
        return nets.pretraining_loss(self.mx, loss_fn, net(*inputs), labels, self.masked)
