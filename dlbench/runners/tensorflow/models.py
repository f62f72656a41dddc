"""The TensorFlow runner's workloads, one object per model kind (dlbench.runners.base.Workload):
the model and its optimizer, the synthetic batch, the per-example loss and the real data
(docs/frameworks/tensorflow.md); the runner drives the one `WORKLOADS(model)` names.
TensorFlow and Keras are passed in: importing this module imports neither."""

from __future__ import annotations

from dlbench.models import IMAGE_CLASSES
from dlbench.recipe import (
    ADAM_EPSILON,
    ADAM_LR,
    BERT_BASE,
    IMAGENET_MEAN,
    IMAGENET_STD,
    MLM_WEIGHT_EPSILON,
    SGD_MOMENTUM,
    sgd_lr,
)
from dlbench.runners.base import Workload, Workloads
from dlbench.runners.tensorflow import pipeline
from dlbench.runners.tensorflow.bert import bert_model

# Keras's mixed-precision policy → the TF-native CNNs' compute dtype.
_COMPUTE_DTYPE = {"mixed_bfloat16": "bfloat16", "mixed_float16": "float16"}

WORKLOADS = Workloads("tensorflow")


@WORKLOADS.registers
class ImageClassification(Workload):
    """A TF-native CNN (dlbench.runners.tensorflow.cnn) with momentum SGD on 1000 classes."""

    kind = "image"
    models = ("resnet50", "resnet152", "vgg16", "inception_v3", "alexnet")  # cnn.ImageModel's

    implementation = (
        "TensorFlow-native ops (tf.nn.conv2d, FusedBatchNormV3, NHWC; no conv bias before batch norm), "
        "SGD momentum as one ResourceApplyKerasMomentum per variable, one tf.function per step"
    )

    def __init__(self, spec):
        self.spec = spec
        self.size = spec.image_size

    def build(self, keras, tf, policy: str, mirrored: bool):
        """(model, optimizer, loss_scaling), created in the strategy's scope by the caller."""
        from dlbench.runners.tensorflow import cnn, optim

        # Batch-norm moving statistics: each replica keeps its own under the mirrored
        # strategies (updated in replica context, averaged when read), as Keras does.
        stats = (
            {"synchronization": tf.VariableSynchronization.ON_READ, "aggregation": tf.VariableAggregation.MEAN}
            if mirrored
            else {}
        )
        compute = _COMPUTE_DTYPE.get(policy, "float32")
        model = cnn.ImageModel(self.spec.coords.model, self.size, IMAGE_CLASSES, self.spec.seed, stats, compute)
        loss_scaling = compute == "float16"
        return model, optim.MomentumSGD(sgd_lr(self.spec), SGD_MOMENTUM, loss_scaling=loss_scaling), loss_scaling

    def synthetic_batch(self, tf) -> dict:
        """One fixed batch, created once on the device (the pipeline's `synthetic` data)."""
        gen = tf.random.Generator.from_seed(self.spec.seed)
        b, size = self.spec.batch, self.size
        return {
            "images": gen.normal([b, size, size, 3], dtype=tf.float32),
            "labels": gen.uniform([b], 0, IMAGE_CLASSES, dtype=tf.int32),
        }

    def per_example_loss(self, tf, model, inputs, training: bool):
        logits = model(inputs["images"], training=training)
        return tf.nn.sparse_softmax_cross_entropy_with_logits(inputs["labels"], tf.cast(logits, tf.float32))

    def prepare(self, tf, real_data: bool):
        """What the step does to a batch first: real images arrive as uint8 and are converted
        and normalised (ImageNet mean/std) on the device, in the step."""
        if not real_data:
            return lambda batch: batch

        def normalise(inputs):
            images = (tf.cast(inputs["images"], tf.float32) - tf.constant(IMAGENET_MEAN)) / tf.constant(IMAGENET_STD)
            return {"images": images, "labels": inputs["labels"]}

        return normalise

    def real_data(self, tf) -> pipeline.ImageRecords:
        return pipeline.ImageRecords(tf, self.spec, self.size)


@WORKLOADS.registers
class BertPretraining(Workload):
    """BERT-base pre-training (masked LM + next sentence) with Adam, in Keras layers."""

    kind = "text"
    models = ("bert_base",)

    implementation = "Keras model, Keras optimizer"

    def __init__(self, spec):
        self.spec = spec

    def build(self, keras, tf, policy: str, mirrored: bool):
        model = bert_model(keras, tf, BERT_BASE, self.spec.seq_len)
        optimizer = keras.optimizers.Adam(learning_rate=ADAM_LR, epsilon=ADAM_EPSILON)
        loss_scaling = policy == "mixed_float16"
        if loss_scaling:
            optimizer = keras.mixed_precision.LossScaleOptimizer(optimizer)
        return model, optimizer, loss_scaling

    def synthetic_batch(self, tf) -> dict:
        """One fixed batch without padding; round(0.15 x seq_len) masked positions per sequence."""
        gen = tf.random.Generator.from_seed(self.spec.seed)
        cfg, b, seq = BERT_BASE, self.spec.batch, self.spec.seq_len
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

    def per_example_loss(self, tf, model, inputs, training: bool):
        model_inputs = [inputs["input_ids"], inputs["token_type_ids"], inputs["masked_positions"]]
        if "input_mask" in inputs:  # real examples are padded
            model_inputs.append(inputs["input_mask"])
        mlm_logits, nsp_logits = model(model_inputs, training=training)
        mlm = tf.nn.sparse_softmax_cross_entropy_with_logits(
            inputs["masked_ids"], tf.cast(mlm_logits, tf.float32)
        )  # [batch, n_pred]
        nsp = tf.nn.sparse_softmax_cross_entropy_with_logits(inputs["nsp_labels"], tf.cast(nsp_logits, tf.float32))
        # dlbench.recipe's reference loss of this replica's batch, as per-example losses
        # (averaged over the global batch by the caller): each example carries batch /
        # (sum(weight) + 1e-5) times its weighted slot losses; synthetic slots all weigh 1.
        weights = inputs.get("masked_weights")
        weights = tf.ones_like(mlm) if weights is None else tf.cast(weights, mlm.dtype)
        share = tf.cast(tf.shape(weights)[0], mlm.dtype) / (tf.reduce_sum(weights) + MLM_WEIGHT_EPSILON)
        return tf.reduce_sum(mlm * weights, axis=1) * share + nsp

    def prepare(self, tf, real_data: bool):
        return lambda batch: batch

    def real_data(self, tf) -> pipeline.BertExamples:
        return pipeline.BertExamples(tf, self.spec)

    def describe(self) -> dict:
        return {"bert_config": dict(BERT_BASE, seq_len=self.spec.seq_len)}
