"""SGD with momentum for the TF-native CNNs: one fused op per variable, the Keras update rule.

Same arithmetic as keras.optimizers.SGD(momentum=m) (accum = m * accum - lr * grad;
var += accum), as tf_cnn_benchmarks' MomentumOptimizer applies it with one op per variable.
The `apply_gradients` contract is Keras's: inside a replica context of a strategy with
several replicas the gradients are summed across replicas first (the strategy's own
cross-device ops / collectives), then every replica updates its copy identically.
Float16 training (AMP on a GPU) gets dynamic loss scaling as Keras's LossScaleOptimizer does
it: scale 2^15, halved (and the step skipped) on a non-finite gradient, doubled after 2,000
finite steps.
"""

from __future__ import annotations

import tensorflow as tf

from dlbench.runners._hyperparameters import loss_scaling_record, optimizer_record

INITIAL_LOSS_SCALE = 2.0**15
LOSS_SCALE_GROWTH_STEPS = 2000
LOSS_SCALE_GROWTH_FACTOR = 2.0


class MomentumSGD:
    def __init__(self, learning_rate: float, momentum: float, loss_scaling: bool = False):
        self.learning_rate, self.momentum = learning_rate, momentum
        self.loss_scaling = loss_scaling
        self.slots: list = []

    def build(self, variables) -> None:
        self.slots = [self._slot(v) for v in variables]
        if self.loss_scaling:
            # One value for all replicas (each computes the same from all-reduced gradients).
            first = {"trainable": False, "aggregation": tf.VariableAggregation.ONLY_FIRST_REPLICA}
            self.scale = tf.Variable(INITIAL_LOSS_SCALE, name="loss_scale", **first)
            self.good_steps = tf.Variable(0, name="good_steps", **first)

    @staticmethod
    def _slot(var):
        # With several parameter servers a slot must live on its variable's server (one op updates both).
        with tf.distribute.get_strategy().extended.colocate_vars_with(var):
            return tf.Variable(tf.zeros(var.shape, var.dtype), trainable=False, name="momentum")

    def get_config(self) -> dict:
        """Its settings under keras.optimizers.SGD's names: what each update applies."""
        return {"learning_rate": self.learning_rate, "momentum": self.momentum, "nesterov": False}

    def loss_scaling_record(self) -> dict | None:
        if not self.loss_scaling:
            return None
        return loss_scaling_record(
            "dynamic (Keras LossScaleOptimizer's rule)",
            dynamic=True,
            scale=float(self.scale.numpy()),
            growth_interval=LOSS_SCALE_GROWTH_STEPS,
            growth_factor=LOSS_SCALE_GROWTH_FACTOR,
            backoff_factor=1 / LOSS_SCALE_GROWTH_FACTOR,
        )

    @property
    def variables(self) -> list:
        extra = [self.scale, self.good_steps] if self.loss_scaling else []
        return self.slots + extra

    def scale_loss(self, loss):
        return loss * tf.cast(self.scale, loss.dtype) if self.loss_scaling else loss

    def apply_gradients(self, grads_and_vars) -> None:
        grads, variables = zip(*grads_and_vars, strict=True)
        context = tf.distribute.get_replica_context()
        replicated = context is not None and context.num_replicas_in_sync > 1
        if replicated:
            grads = context.all_reduce(tf.distribute.ReduceOp.SUM, list(grads))
        finite = tf.constant(True)
        if self.loss_scaling:
            grads = [g / self.scale for g in grads]
            finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(g)) for g in grads])
            self._adjust_scale(finite)
        if replicated:
            # Each device's copy is updated by the strategy (a variable's handle in replica
            # context is not the device's own copy under MirroredStrategy).
            context.merge_call(self._update_each_device, args=(grads, variables, finite))
        else:
            # After the whole backward pass (tf.gradients' GATE_GRAPH): an update that runs while
            # a backward op still holds its variable's value copies the variable first
            # (copy-on-write: 411 MB a step for VGG-16's first dense layer).
            with tf.control_dependencies(grads):
                for var, slot, grad in zip(variables, self.slots, grads, strict=True):
                    self._apply(var, slot, grad, finite)

    def _update_each_device(self, strategy, grads, variables, finite) -> None:
        for var, slot, grad in zip(variables, self.slots, grads, strict=True):
            strategy.extended.update(var, self._apply, args=(slot, grad, finite), group=False)

    def _apply(self, var, slot, grad, finite):
        def update():
            tf.raw_ops.ResourceApplyKerasMomentum(
                var=var.handle,
                accum=slot.handle,
                lr=tf.cast(self.learning_rate, var.dtype),
                grad=tf.cast(grad, var.dtype),
                momentum=tf.cast(self.momentum, var.dtype),
            )
            return tf.constant(True)

        if not self.loss_scaling:
            return update()
        return tf.cond(finite, update, lambda: tf.constant(False))  # a non-finite step is skipped

    def _adjust_scale(self, finite) -> None:
        """Halve the scale on overflow; double it after LOSS_SCALE_GROWTH_STEPS finite steps."""
        grow = tf.logical_and(finite, self.good_steps + 1 >= LOSS_SCALE_GROWTH_STEPS)
        factor = LOSS_SCALE_GROWTH_FACTOR
        scale = tf.where(grow, self.scale * factor, tf.where(finite, self.scale, tf.maximum(self.scale / factor, 1.0)))
        self.scale.assign(scale)
        self.good_steps.assign(tf.where(finite & ~grow, self.good_steps + 1, 0))


def training_record(optimizer) -> dict:
    """The header's framework.optimizer (dlbench.runners._hyperparameters) from the optimizer's
    get_config(): a Keras optimizer's, the inner one's under a LossScaleOptimizer, or MomentumSGD's."""
    scaling = None
    if hasattr(optimizer, "inner_optimizer"):  # keras.mixed_precision.LossScaleOptimizer
        config = optimizer.get_config()
        scaling = loss_scaling_record(
            f"keras.mixed_precision.{type(optimizer).__name__}",
            dynamic=True,
            scale=float(optimizer.dynamic_scale.numpy()),
            growth_interval=config["dynamic_growth_steps"],
        )
        optimizer = optimizer.inner_optimizer
    elif isinstance(optimizer, MomentumSGD):
        scaling = optimizer.loss_scaling_record()
    settings = optimizer.get_config()
    settings.pop("name", None)  # Keras's instance name ("adam_1"); the class names the optimizer
    rate = settings["learning_rate"]
    schedule = "constant" if isinstance(rate, (int, float)) else rate  # a schedule: its serialised config
    name = "sgd" if isinstance(optimizer, MomentumSGD) else type(optimizer).__name__
    return optimizer_record(name, settings, schedule, scaling)
