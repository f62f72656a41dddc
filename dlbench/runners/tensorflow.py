"""TensorFlow runner: Keras model definitions, a custom `tf.function` train step, MWMS across devices.

The fast path, as TensorFlow's own benchmarks do it: channels-last (NHWC, TF's native
layout), a synthetic batch created once on the device, one `tf.function` per step doing
forward, loss, gradients and the optimizer update (SGD momentum 0.9; Adam for BERT),
XLA (`jit_compile`) only when the run asks for compilation, Keras mixed-precision
policies for AMP ("mixed_bfloat16" on CPU, "mixed_float16" + loss scaling on GPU).

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

import json
import math
import os

from dlbench.models import CATALOGUE, IMAGE_CLASSES
from dlbench.runners.base import Runner as BaseRunner

FRAMEWORK = "tensorflow"
MODELS = ("resnet50", "resnet152", "vgg16", "inception_v3", "alexnet", "bert_base")
UNAVAILABLE: dict[str, str] = {}
STRATEGIES = ("multi_worker_mirrored",)
PRECISIONS = ("fp32", "amp")

_KERAS_APPLICATIONS = {
    "resnet50": "ResNet50",
    "resnet152": "ResNet152",
    "vgg16": "VGG16",
    "inception_v3": "InceptionV3",
}

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
        build) before the TF runtime starts.
        """
        if getattr(self, "tf", None) is not None:
            return
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
        spec = self.spec
        self.distributed = spec.dist.world_size > 1
        strategy_name = spec.coords.strategy
        if self.distributed and strategy_name != "multi_worker_mirrored":
            raise ValueError(f"tensorflow runner: strategy {strategy_name!r} not offered (have {STRATEGIES})")
        if self.distributed:
            # Read when MultiWorkerMirroredStrategy is created.
            os.environ["TF_CONFIG"] = json.dumps(tf_config(spec.dist))

        import keras
        import tensorflow as tf

        self.tf = tf
        self.keras = keras
        # Threads first: they are fixed once the TF runtime initialises.
        tf.config.threading.set_intra_op_parallelism_threads(spec.threads)
        tf.config.threading.set_inter_op_parallelism_threads(_inter_op_threads(spec))
        if spec.device == "cuda":
            gpus = tf.config.list_physical_devices("GPU")
            if not gpus:
                raise RuntimeError("device cuda requested but TensorFlow sees no GPU")
            # One process per GPU: this process sees only its own.
            tf.config.set_visible_devices(gpus[spec.dist.local_rank % len(gpus)], "GPU")
            self.device = "/GPU:0"
        else:
            tf.config.set_visible_devices([], "GPU")
            self.device = "/CPU:0"

    def build(self) -> None:
        self.import_framework()
        tf, keras, spec = self.tf, self.keras, self.spec
        on_cuda = spec.device == "cuda"

        amp = spec.coords.precision == "amp"
        self.policy = ("mixed_float16" if on_cuda else "mixed_bfloat16") if amp else "float32"
        keras.mixed_precision.set_global_policy(self.policy)
        keras.utils.set_random_seed(spec.seed)

        if self.distributed:
            implementation = (
                tf.distribute.experimental.CommunicationImplementation.NCCL
                if on_cuda
                else tf.distribute.experimental.CommunicationImplementation.RING
            )
            self.communication = implementation.name
            self.strategy = tf.distribute.MultiWorkerMirroredStrategy(
                communication_options=tf.distribute.experimental.CommunicationOptions(implementation=implementation)
            )
        else:
            self.communication = None
            self.strategy = tf.distribute.get_strategy()  # the default (no-op) strategy

        model_name = spec.coords.model
        self.is_bert = model_name == "bert_base"
        with self.strategy.scope():
            if self.is_bert:
                self.model = _bert_model(keras, tf, BERT_BASE, spec.seq_len)
                optimizer = keras.optimizers.Adam(learning_rate=ADAM_LR, epsilon=1e-6)
            else:
                size = spec.image_size or CATALOGUE[model_name]["default_image_size"]
                self.model = image_model(keras, model_name, size)
                optimizer = keras.optimizers.SGD(learning_rate=SGD_LR, momentum=SGD_MOMENTUM)
            self.loss_scaling = self.policy == "mixed_float16"
            if self.loss_scaling:
                optimizer = keras.mixed_precision.LossScaleOptimizer(optimizer)
            optimizer.build(self.model.trainable_variables)
            self.optimizer = optimizer
        self.params = int(sum(math.prod(v.shape) for v in self.model.trainable_variables))

        with tf.device(self.device):
            self.inputs = self._synthetic_batch()
        self._step_fn = self._make_step()
        from tensorflow.python.eager import context

        self._async_wait = context.async_wait
        task = f"/task:{spec.dist.rank}/" if self.distributed else None
        self._local_devices = [
            d.name for d in tf.config.list_logical_devices() if task is None or "/job:" not in d.name or task in d.name
        ]

    # -- data -----------------------------------------------------------------------------

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
            mlm_logits, nsp_logits = self.model(
                [inputs["input_ids"], inputs["token_type_ids"], inputs["masked_positions"]], training=training
            )
            mlm = tf.nn.sparse_softmax_cross_entropy_with_logits(
                inputs["masked_ids"], tf.cast(mlm_logits, tf.float32)
            )  # [batch, n_pred]
            nsp = tf.nn.sparse_softmax_cross_entropy_with_logits(inputs["nsp_labels"], tf.cast(nsp_logits, tf.float32))
            return tf.reduce_mean(mlm, axis=1) + nsp
        logits = self.model(inputs["images"], training=training)
        return tf.nn.sparse_softmax_cross_entropy_with_logits(inputs["labels"], tf.cast(logits, tf.float32))

    def _make_step(self):
        tf = self.tf
        spec = self.spec
        model, optimizer = self.model, self.optimizer
        global_batch = spec.batch * spec.dist.world_size
        variables = model.trainable_variables
        inputs = self.inputs

        def forward_backward(inputs):
            with tf.GradientTape() as tape:
                # Mean over the global batch: gradients are summed across replicas.
                loss = tf.nn.compute_average_loss(
                    self._per_example_loss(inputs, training=True), global_batch_size=global_batch
                )
                scaled = optimizer.scale_loss(loss) if self.loss_scaling else loss
            grads = tape.gradient(scaled, variables)
            return loss, grads

        if not self.distributed:

            def train_step():
                loss, grads = forward_backward(inputs)
                optimizer.apply_gradients(zip(grads, variables, strict=True))
                return loss

            return tf.function(train_step, jit_compile=bool(spec.compile))

        # MultiWorkerMirrored: XLA (if asked) compiles the per-replica forward/backward;
        # the cross-worker all-reduce inside the optimizer stays outside it.
        fb = tf.function(forward_backward, jit_compile=True) if spec.compile else forward_backward
        strategy = self.strategy

        def replica_step(inputs):
            loss, grads = fb(inputs)
            optimizer.apply_gradients(zip(grads, variables, strict=True))
            return loss

        @tf.function
        def train_step():
            per_replica = strategy.run(replica_step, args=(inputs,))
            # The global mean loss (each replica's share is already divided by the global batch).
            return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

        return train_step

    def step(self, batch=None):
        return self._step_fn()

    def sync(self) -> None:
        # What tf.test.experimental.sync_devices() does (TF's benchmarking barrier), limited
        # to this process's own devices: under MultiWorkerMirroredStrategy the logical
        # devices include the other workers' and sync_devices() fails there. SyncDevice
        # blocks until every kernel queued on the device has finished. On the CPU an eager
        # tf.function call already returns only when its graph has run, so this costs one
        # tiny op dispatch; on a GPU kernels run asynchronously, and fetching the loss alone
        # would not wait for the backward pass and the update (queued after the loss), so the
        # loss is not the sync point.
        tf = self.tf
        for name in self._local_devices:
            with tf.device(name):
                tf.raw_ops.SyncDevice()
        self._async_wait()  # pending eager ops, if asynchronous execution was enabled

    def loss_value(self, handle) -> float:
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
            info["strategy"] = {
                "name": "MultiWorkerMirroredStrategy",
                "communication": self.communication,
                "num_replicas_in_sync": self.strategy.num_replicas_in_sync,
                "tf_config": json.loads(os.environ["TF_CONFIG"]),
            }
        if self.is_bert:
            info["bert_config"] = dict(BERT_BASE, seq_len=self.spec.seq_len)
        return info


# -- model definitions (called inside build(), with keras/tf passed in) ----------------------


def image_model(keras, name: str, size: int):
    """An ImageNet classifier for `size`x`size` NHWC images, returning logits."""
    if name == "alexnet":
        return _alexnet(keras, size)
    builder = getattr(keras.applications, _KERAS_APPLICATIONS[name])
    return builder(weights=None, classes=IMAGE_CLASSES, input_shape=(size, size, 3), classifier_activation=None)


def _alexnet(keras, size: int):
    """torchvision.models.alexnet in Keras layers (channels-last).

    Same layers, shapes and parameter count as torchvision (61,100,840): explicit zero
    padding (2 / 2 / 1 / 1 / 1) before VALID convs, 3x3/2 max pools, adaptive average
    pooling to 6x6 with torch's semantics (`_AdaptiveAvgPool`: at 224 px the map is already
    6x6; below, e.g. 1x1 at 64 px, it is replicated, which Keras's own
    AdaptiveAveragePooling2D refuses), dropout 0.5 before the two 4096 layers. Differences: Keras's default
    initialisers (Glorot uniform, zero bias) instead of torch's Kaiming-uniform; the
    flatten order is H, W, C instead of C, H, W (a permutation of the same weights).
    Inputs below 63 px are too small, as in torchvision.
    """
    L = keras.layers
    x = inputs = keras.Input((size, size, 3))
    for filters, kernel, stride, pad, pool in (
        (64, 11, 4, 2, True),
        (192, 5, 1, 2, True),
        (384, 3, 1, 1, False),
        (256, 3, 1, 1, False),
        (256, 3, 1, 1, True),
    ):
        x = L.ZeroPadding2D(pad)(x)
        x = L.Conv2D(filters, kernel, strides=stride, activation="relu")(x)
        if pool:
            x = L.MaxPooling2D(3, strides=2)(x)
    x = _AdaptiveAvgPool(keras, 6)(x)
    x = L.Flatten()(x)
    x = L.Dropout(0.5)(x)
    x = L.Dense(4096, activation="relu")(x)
    x = L.Dropout(0.5)(x)
    x = L.Dense(4096, activation="relu")(x)
    outputs = L.Dense(IMAGE_CLASSES)(x)
    return keras.Model(inputs, outputs, name="alexnet")


def _adaptive_pool_matrix(n_in: int, n_out: int) -> list[list[float]]:
    """torch.nn.AdaptiveAvgPool semantics: bin i averages [floor(i*n/o), ceil((i+1)*n/o))."""
    rows = []
    for i in range(n_out):
        start, end = (i * n_in) // n_out, -((-(i + 1) * n_in) // n_out)
        rows.append([1.0 / (end - start) if start <= j < end else 0.0 for j in range(n_in)])
    return rows


def _AdaptiveAvgPool(keras, out: int):
    """Adaptive average pooling to `out`x`out` (NHWC) as two small constant matmuls."""

    class AdaptiveAvgPool(keras.layers.Layer):
        def call(self, x):
            import tensorflow as tf

            h, w = x.shape[1], x.shape[2]
            ph = tf.constant(_adaptive_pool_matrix(h, out), dtype=x.dtype)
            pw = tf.constant(_adaptive_pool_matrix(w, out), dtype=x.dtype)
            return tf.einsum("ih,bhwc,jw->bijc", ph, x, pw)

        def compute_output_shape(self, input_shape):
            return (input_shape[0], out, out, input_shape[3])

    return AdaptiveAvgPool(name="adaptive_avg_pool")


def _bert_model(keras, tf, cfg: dict, seq_len: int):
    """BERT-base for pre-training: encoder + pooler + masked-LM and next-sentence heads.

    Layout and parameter count of Google's BERT / Hugging Face's BertForPreTraining
    (110,106,428 for BERT-base): word + position + token-type embeddings, LayerNorm,
    dropout; 12 post-LN encoder layers (Keras MultiHeadAttention with biases, exact GELU
    FFN); tanh pooler on [CLS]; MLM head = dense + GELU + LayerNorm, then the decoder
    *tied* to the word embeddings plus its own output bias, on the gathered masked
    positions; NSP head = dense 768 -> 2 on the pooled output. No attention mask: the
    synthetic sequences have no padding.
    """
    L = keras.layers
    H = cfg["hidden_size"]
    init = keras.initializers.TruncatedNormal(stddev=cfg["initializer_range"])

    class PositionEmbedding(L.Layer):
        def build(self, input_shape):
            self.embeddings = self.add_weight(
                shape=(cfg["max_position_embeddings"], H), initializer=init, name="embeddings"
            )

        def call(self, x):
            return x + tf.cast(self.embeddings[: tf.shape(x)[1]], x.dtype)[tf.newaxis]

    class EncoderLayer(L.Layer):
        def __init__(self, **kw):
            super().__init__(**kw)
            heads = cfg["num_attention_heads"]
            self.attention = L.MultiHeadAttention(
                heads, H // heads, dropout=cfg["attention_probs_dropout_prob"], kernel_initializer=init
            )
            self.attention_dropout = L.Dropout(cfg["hidden_dropout_prob"])
            self.attention_norm = L.LayerNormalization(epsilon=cfg["layer_norm_eps"])
            self.intermediate = L.Dense(cfg["intermediate_size"], kernel_initializer=init)
            self.output_dense = L.Dense(H, kernel_initializer=init)
            self.output_dropout = L.Dropout(cfg["hidden_dropout_prob"])
            self.output_norm = L.LayerNormalization(epsilon=cfg["layer_norm_eps"])

        def call(self, x, training=None):
            a = self.attention(x, x, training=training)
            x = self.attention_norm(x + self.attention_dropout(a, training=training))
            h = keras.activations.gelu(self.intermediate(x), approximate=False)
            return self.output_norm(x + self.output_dropout(self.output_dense(h), training=training))

    class BertPretraining(keras.Model):
        def __init__(self):
            super().__init__(name="bert_base_pretraining")
            self.word_embeddings = L.Embedding(
                cfg["vocab_size"], H, embeddings_initializer=init, name="word_embeddings"
            )
            self.type_embeddings = L.Embedding(cfg["type_vocab_size"], H, embeddings_initializer=init, name="types")
            self.position_embeddings = PositionEmbedding(name="position_embeddings")
            self.embedding_norm = L.LayerNormalization(epsilon=cfg["layer_norm_eps"])
            self.embedding_dropout = L.Dropout(cfg["hidden_dropout_prob"])
            self.encoder = [EncoderLayer(name=f"layer_{i}") for i in range(cfg["num_hidden_layers"])]
            self.pooler = L.Dense(H, activation="tanh", kernel_initializer=init, name="pooler")
            self.mlm_transform = L.Dense(H, kernel_initializer=init, name="mlm_transform")
            self.mlm_norm = L.LayerNormalization(epsilon=cfg["layer_norm_eps"], name="mlm_norm")
            self.nsp = L.Dense(2, kernel_initializer=init, name="nsp")
            self.mlm_bias = self.add_weight(shape=(cfg["vocab_size"],), initializer="zeros", name="mlm_bias")

        def call(self, inputs, training=None):
            input_ids, token_type_ids, masked_positions = inputs
            x = self.word_embeddings(input_ids) + self.type_embeddings(token_type_ids)
            x = self.embedding_dropout(self.embedding_norm(self.position_embeddings(x)), training=training)
            for layer in self.encoder:
                x = layer(x, training=training)
            pooled = self.pooler(x[:, 0])
            h = tf.gather(x, masked_positions, batch_dims=1)  # [batch, n_pred, H]
            h = self.mlm_norm(keras.activations.gelu(self.mlm_transform(h), approximate=False))
            table = tf.cast(self.word_embeddings.embeddings, h.dtype)
            mlm_logits = tf.matmul(h, table, transpose_b=True) + tf.cast(self.mlm_bias, h.dtype)
            return mlm_logits, self.nsp(pooled)

    model = BertPretraining()
    n_pred = max(1, round(cfg["max_predictions_per_seq_fraction"] * seq_len))
    model(
        [tf.zeros([1, seq_len], tf.int32), tf.zeros([1, seq_len], tf.int32), tf.zeros([1, n_pred], tf.int32)],
        training=False,
    )
    return model
