"""The Paddle runner's workloads, one object per model kind (dlbench.runners.base.Workload):
paddle.vision CNNs with Momentum SGD, a paddle.nn BERT-base with Adam (bert.py). Each builds
its model, optimizer and loss into a `train.Trainer`, and its batch source; the runner drives
the one `WORKLOADS(model)` names. Importing this module does not import Paddle: `build` does."""

from __future__ import annotations

from dlbench.runners.base import Workload, Workloads

WORKLOADS = Workloads("paddle")


class PaddleWorkload(Workload):
    """What every Paddle workload offers the runner: after `build(paddle)`, `trainer` steps,
    `prepare` turns a real batch into the step's arguments, and the batch source is `batches`
    (real data) or `batch` (the synthetic batch)."""

    def __init__(self, spec):
        self.spec = spec
        self.real_data = spec.coords.data == "real"
        self.batches = self.batch = None


@WORKLOADS.registers
class ImageClassification(PaddleWorkload):
    """A paddle.vision CNN (NCHW) with Momentum SGD and softmax cross-entropy."""

    kind = "image"
    models = ("resnet50", "resnet152", "vgg16", "inception_v3", "alexnet")  # paddle.vision.models'

    def build(self, paddle) -> None:
        from dlbench.runners.paddle import train

        spec = self.spec
        size = spec.image_size
        model, self.params = train.image_model(spec.coords.model, spec.seed)
        self.trainer = train.Trainer(model, spec, train.momentum_sgd(spec, model), train.image_loss)
        self.prepare = self.trainer.normalised
        if self.real_data:
            from dlbench.runners.paddle import pipeline

            self.batches = pipeline.forever(pipeline.image_loader(spec, size))
        else:
            # The same batch in every rank, as the other runners' synthetic data (the losses of
            # a collective run are then the single-device run's: tests/frameworks/equivalence.py).
            self.batch = train.synthetic_batch(spec.batch, size, spec.seed)

    @property
    def input_pipeline(self) -> str:
        return f"paddle.io.DataLoader(DatasetFolder, workers={self.spec.data_workers}), RandomResizedCrop + flip"


@WORKLOADS.registers
class BertPretraining(PaddleWorkload):
    """BERT-base pre-training (masked LM + next sentence, paddle.nn) with Adam."""

    kind = "text"
    models = ("bert_base",)
    input_pipeline = "tokenised examples in memory, this rank's share"

    def build(self, paddle) -> None:
        from dlbench.runners.paddle import bert, train

        spec = self.spec
        paddle.seed(spec.seed)
        model = bert.BertForPreTraining()
        self.params = sum(int(p.size) for p in model.parameters() if not p.stop_gradient)
        self.trainer = train.Trainer(model, spec, train.adam(model), bert.loss)
        self.prepare = bert.fields
        if self.real_data:
            self.batches = bert.real_batches(spec)
        else:
            self.batch = bert.synthetic_batch(spec.batch, spec.seq_len, spec.seed)
