"""The plain JAX training loop: one jitted step, state donated, as a yardstick for the runner.

    .venvs/jax/bin/python benchmarks/baselines/jax_jit.py \
        --model resnet50 --batch 8 --image-size 224 --steps 20 --warmup 5 --threads 2

Flax has no model zoo: the network is dlbench's Flax definition (dlbench/runners/jax/models.py,
layer for layer torchvision's); everything else is written here, apart from the runner: SGD lr
0.01 momentum 0.9 (optax), softmax cross-entropy, a synthetic NHWC batch put on the device once,
`jax.jit(step, donate_argnums=0)`, no host sync inside the loop (JAX dispatches asynchronously;
one `block_until_ready` closes the warm-up and one the measured window). `--threads N` keeps
N CPUs (XLA:CPU sizes its thread pool by the CPUs it may run on), as the runner does.

Prints images/s over the measured steps and the first step's seconds (compilation).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from baseline_args import baseline_arguments

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the Flax model definitions


def build(args):
    """(the jitted step, the state, images, labels): JAX must not be imported before the CPUs are set."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax

    from dlbench.runners.jax import models

    model = models.build(args.model)
    rng = np.random.default_rng(0)
    images = jnp.asarray(rng.standard_normal((args.batch, args.image_size, args.image_size, 3), dtype=np.float32))
    labels = jnp.asarray(rng.integers(0, models.CLASSES, args.batch).astype(np.int32))
    variables = model.init({"params": jax.random.key(0), "dropout": jax.random.key(1)}, images[:1], train=False)
    optimizer = optax.sgd(0.01, momentum=0.9)
    params = variables["params"]
    state = (params, variables.get("batch_stats", {}), optimizer.init(params), jax.random.key(2))

    def step(state, images, labels):
        params, batch_stats, opt_state, key = state
        key, dropout = jax.random.split(key)

        def loss_fn(params):
            logits, new = model.apply(
                {"params": params, "batch_stats": batch_stats},
                images,
                train=True,
                mutable=["batch_stats"],
                rngs={"dropout": dropout},
            )
            return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean(), new.get("batch_stats", {})

        (loss, batch_stats), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return (optax.apply_updates(params, updates), batch_stats, opt_state, key), loss

    return jax.jit(step, donate_argnums=(0,)), state, images, labels


def main() -> None:
    args = baseline_arguments(__doc__.splitlines()[0], None, 0, "CPUs kept; 0 = all").parse_args()
    allowed = sorted(os.sched_getaffinity(0))
    if 0 < args.threads < len(allowed):
        os.sched_setaffinity(0, set(allowed[: args.threads]))
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax

    step, state, images, labels = build(args)
    start = time.perf_counter()
    state, loss = step(state, images, labels)
    loss.block_until_ready()
    first_step = time.perf_counter() - start
    for _ in range(max(args.warmup, 1) - 1):
        state, loss = step(state, images, labels)
    loss.block_until_ready()
    start = time.perf_counter()
    for _ in range(args.steps):
        state, loss = step(state, images, labels)
    loss.block_until_ready()
    elapsed = time.perf_counter() - start
    print(
        f"jax {jax.__version__} jit {args.model} batch {args.batch} {args.image_size} px cpus "
        f"{len(os.sched_getaffinity(0))}: {args.steps * args.batch / elapsed:.2f} images/s "
        f"({elapsed / args.steps:.3f} s/step, loss {float(loss):.4f}, first step {first_step:.1f} s)",
        flush=True,
    )


if __name__ == "__main__":
    main()
