"""The JAX training state and step: one `jax.jit` executable per step with the state donated
(updated in place), optax SGD with momentum, softmax cross-entropy. Imports JAX: only
`Runner.build` imports this module."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

from dlbench.workload import SGD_LR, SGD_MOMENTUM


def initial_state(model, images, seed: int):
    """(params, batch_stats, opt_state, step) and the optimizer, on the default device."""
    variables = model.init({"params": jax.random.key(seed), "dropout": jax.random.key(seed + 1)}, images, train=False)
    params = variables["params"]
    optimizer = optax.sgd(SGD_LR, momentum=SGD_MOMENTUM)
    state = (params, variables.get("batch_stats", {}), optimizer.init(params), jnp.zeros((), jnp.uint32))
    return state, optimizer


def train_step(model, optimizer, seed: int):
    """step(state, images, labels) -> (state, loss), jitted, the state's buffers donated.
    Dropout draws its mask from the step count (the same sequence in every process)."""
    dropout_key = jax.random.key(seed + 2)

    def step(state, images, labels):
        params, batch_stats, opt_state, count = state

        def loss_fn(params):
            logits, updated = model.apply(
                {"params": params, "batch_stats": batch_stats},
                images,
                train=True,
                mutable=["batch_stats"],
                rngs={"dropout": jax.random.fold_in(dropout_key, count)},
            )
            loss = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), labels).mean()
            return loss, updated.get("batch_stats", {})

        (loss, batch_stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), batch_stats, opt_state, count + 1), loss

    return jax.jit(step, donate_argnums=(0,))


def synthetic_batch(batch: int, size: int, seed: int, classes: int):
    """Images (NHWC, float32) and labels, created once on the host."""
    rng = np.random.default_rng(seed)
    images = rng.standard_normal((batch, size, size, 3), dtype=np.float32)
    return images, rng.integers(0, classes, batch).astype(np.int32)


def placement(devices: list):
    """(data, replicated): where the batch and the state go. Several devices: a one-axis mesh,
    the batch split along it and the state replicated (XLA all-reduces the gradients)."""
    if len(devices) == 1:
        return devices[0], devices[0]
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.array(devices), ("data",))
    return NamedSharding(mesh, PartitionSpec("data")), NamedSharding(mesh, PartitionSpec())
