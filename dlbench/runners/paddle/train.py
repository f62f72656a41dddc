"""The Paddle model, optimizer and step: paddle.vision's CNN (Momentum SGD, softmax
cross-entropy) or BERT (bert.py, Adam), the step in dynamic graph mode or through `paddle.jit.to_static` (--compile),
paddle.amp on GPUs. Imports Paddle: only `Runner.build` imports this module."""

from __future__ import annotations

import numpy as np
import paddle

from dlbench.models import IMAGE_CLASSES
from dlbench.recipe import ADAM_EPSILON, ADAM_LR, IMAGENET_MEAN, IMAGENET_STD, SGD_MOMENTUM, sgd_lr
from dlbench.runners._hyperparameters import loss_scaling_record, optimizer_record
from dlbench.runners.paddle.reasons import AMP_CPU_REASON


def image_model(name: str, seed: int):
    """(paddle.vision's `name` with 1000 classes, its trainable parameter count); the same
    initial weights in every rank (DataParallel broadcasts rank 0's too)."""
    from paddle.vision import models

    paddle.seed(seed)
    model = getattr(models, name)(num_classes=IMAGE_CLASSES)
    if name == "alexnet":
        # torchvision's adaptive 6×6 pool after the last max pool (the identity at 224 px), so
        # that smaller images fit the classifier as they do in the other runners.
        model._conv5._pool = paddle.nn.Sequential(model._conv5._pool, paddle.nn.AdaptiveAvgPool2D(6))
    return model, sum(int(p.size) for p in model.parameters() if not p.stop_gradient)


def synthetic_batch(batch: int, size: int, seed: int):
    """Images (NCHW, float32, standard normal) and int64 labels, on the device once."""
    rng = np.random.default_rng(seed)
    images = rng.standard_normal((batch, 3, size, size), dtype=np.float32)
    labels = rng.integers(0, IMAGE_CLASSES, batch).astype(np.int64)
    return paddle.to_tensor(images), paddle.to_tensor(labels)


def image_loss(model, images, labels):
    """Softmax cross-entropy of the CNN's logits, in float32."""
    return paddle.nn.functional.cross_entropy(model(images).astype("float32"), labels)


def momentum_sgd(spec, model):
    """The CNNs' optimizer (dlbench.recipe's settings)."""
    return paddle.optimizer.Momentum(learning_rate=sgd_lr(spec), momentum=SGD_MOMENTUM, parameters=model.parameters())


def adam(model):
    """BERT's optimizer (dlbench.recipe's settings)."""
    return paddle.optimizer.Adam(learning_rate=ADAM_LR, epsilon=ADAM_EPSILON, parameters=model.parameters())


class Trainer:
    """One training step: the loss (`loss_of(model, *batch)`, under autocast with AMP),
    backward, the optimizer's update; the loss is returned detached, without a host copy."""

    def __init__(self, model, spec, optimizer, loss_of) -> None:
        on_gpu = spec.device == "cuda"
        self.amp = spec.coords.precision == "amp"
        if self.amp and not on_gpu:  # a hand-made launch (the grid plans these cells N/A)
            raise RuntimeError(f"amp runs on CUDA devices only: {AMP_CPU_REASON}")
        self.to_static, self.optimizer, self.loss_of = spec.compile, optimizer, loss_of
        self.scaler = paddle.amp.GradScaler() if self.amp else None
        if self.to_static:
            model = paddle.jit.to_static(model, full_graph=True)
        if spec.dist.world_size > 1:
            model = paddle.DataParallel(model)
        self.model = model
        self.model.train()
        self.mean = paddle.to_tensor(IMAGENET_MEAN, dtype="float32").reshape([1, 3, 1, 1])
        self.std = paddle.to_tensor(IMAGENET_STD, dtype="float32").reshape([1, 3, 1, 1])

    def normalised(self, images, labels):
        """A real-data image batch (uint8 NCHW) as the model's float input."""
        return (images.astype("float32") - self.mean) / self.std, labels

    def step(self, *batch):
        if self.amp:
            with paddle.amp.auto_cast(level="O1", dtype="float16"):
                loss = self.loss_of(self.model, *batch)
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss = self.loss_of(self.model, *batch)
            loss.backward()
            self.optimizer.step()
        self.optimizer.clear_grad()
        # The worker keeps every step's loss until the run ends: the tensor itself would keep
        # its step's autograd graph alive (docs/frameworks/paddle.md, "Fast path").
        return loss.detach()

    def describe(self) -> dict:
        name = type(self.optimizer).__name__
        return {
            "optimizer": training_record(self.optimizer, self.scaler),
            "seed": paddle.framework.core.default_cpu_generator().initial_seed(),  # paddle.seed's
            "execution": "paddle.jit.to_static (full graph)" if self.to_static else "dynamic graph",
            "compute_dtype": "float16" if self.amp else "float32",
            "implementation": f"paddle.nn model, paddle.optimizer.{name}, "
            + ("paddle.amp O1 autocast + GradScaler" if self.amp else "fp32"),
        }


def training_record(optimizer, scaler) -> dict:
    """The header's framework.optimizer (dlbench.runners._hyperparameters) from the optimizer
    object: its hyperparameters (`_default_dict`, Paddle's own table of them), learning rate,
    weight decay (Momentum's regularization_coeff or the L2Decay Adam holds) and flags, its
    LRScheduler, and the GradScaler's dynamic loss scaling."""
    settings = dict(optimizer._default_dict)
    decay = optimizer.regularization
    coefficient = settings.pop("regularization_coeff", None)
    settings["weight_decay"] = coefficient if coefficient is not None else getattr(decay, "_coeff", 0.0)
    settings.update(learning_rate=optimizer.get_lr(), multi_precision=optimizer._multi_precision)
    settings["grad_clip"] = None if optimizer._grad_clip is None else str(optimizer._grad_clip)
    if hasattr(optimizer, "_amsgrad"):
        settings["amsgrad"] = optimizer._amsgrad
    rate = optimizer._learning_rate
    schedule = "constant"
    if not isinstance(rate, (int, float)):  # a paddle.optimizer.lr.LRScheduler
        schedule = {"name": type(rate).__name__, **{k: v for k, v in vars(rate).items() if k[0] != "_"}}
    scaling = None
    if scaler is not None and scaler.is_enable():
        scaling = loss_scaling_record(
            "paddle.amp.GradScaler",
            dynamic=scaler.is_use_dynamic_loss_scaling(),
            scale=scaler.get_init_loss_scaling() if scaler._scale is None else scaler._scale,
            growth_interval=scaler.get_incr_every_n_steps(),
            growth_factor=scaler.get_incr_ratio(),
            backoff_factor=scaler.get_decr_ratio(),
            backoff_interval=scaler.get_decr_every_n_nan_or_inf(),
        )
    return optimizer_record(type(optimizer).__name__, settings, schedule, scaling)
