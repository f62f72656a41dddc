"""JAX's strategies, one class each: the named device mesh of a run and where each array of
the training state and the batch lives on it (a `NamedSharding` per leaf, by parameter path);
the jitted step is then partitioned by XLA's GSPMD (all-gathers, reduce-scatters), with no
collectives written here. docs/frameworks/llm.md, Strategies. Importing this module does not
import JAX: a strategy object is made in `Runner.build`, after JAX is imported."""

from __future__ import annotations

from dlbench.runners.plugin import StrategyClasses

STRATEGIES = StrategyClasses("jax")

# Why JAX's `pp` cells are N/A (Capabilities: the strategy is declared, so a grid asking for it
# keeps its cells with this reason rather than failing).
PIPELINE_UNAVAILABLE = (
    "JAX has no pipeline-parallel API, and no maintained library in the lock pipelines a model it did "
    "not write: MaxText's and Praxis' pipelines (a vmap over stages, ppermute between them) run their own layers"
)

# Tensor-parallel roles of a Llama's parameters (dlbench.runners.jax.llm), by module name: the
# kernel dimension split on the `tensor` axis (Megatron-LM's layout; MaxText's logical rules
# put the vocabulary of the embedding and the head on `tensor` too).
COLUMNS = ("q", "k", "v", "gate", "up")  # (hidden, out): whole heads / FFN units per device
ROWS = ("o", "down")  # (in, hidden): partial sums, all-reduced by XLA
TENSOR_DIM = {**dict.fromkeys(COLUMNS, 1), **dict.fromkeys(ROWS, 0), "embed": 0, "head": 1}


def _names(path) -> tuple[str, ...]:
    """The dictionary keys of a leaf's path: ('block0', 'q', 'kernel') for a parameter and
    for its AdamW moments alike (optax's state nests the parameter tree)."""
    return tuple(str(k.key) for k in path if hasattr(k, "key"))


@STRATEGIES.binds("single", "sharded")
class DataParallel:
    """A one-axis mesh (`data`) over the run's devices: the batch split along it, the state
    replicated, the gradients all-reduced (`sharded`; one device for `single`)."""

    axes = ("data",)

    def __init__(self, spec, devices: list):
        import numpy as np
        from jax.sharding import Mesh

        # Every process's devices, a node's together (the `tensor` axis stays within a node).
        ordered = sorted(devices, key=lambda d: (d.process_index, d.id))
        self.mesh = Mesh(np.array(ordered).reshape(self.mesh_shape(spec, len(ordered))), self.axes)

    def mesh_shape(self, spec, count: int) -> tuple[int, ...]:
        return (count,)

    def sharding(self, *spec):
        from jax.sharding import NamedSharding, PartitionSpec

        return NamedSharding(self.mesh, PartitionSpec(*spec))

    @property
    def data(self):
        """The batch: its first dimension split over the first (data / fsdp) axis."""
        return self.sharding(self.axes[0])

    @property
    def replicated(self):
        return self.sharding()

    def state(self, abstract):
        """The shardings of the state `abstract` (jax.eval_shape's): here one for every leaf."""
        return self.replicated

    @property
    def layout(self) -> dict | None:
        return None


@STRATEGIES.binds("mesh_fsdp")
class FSDP(DataParallel):
    """A one-axis mesh (`fsdp`) over every device: the batch split along it, and every
    parameter and AdamW moment split on its largest dimension that the axis divides (ZeRO-3
    as GSPMD does it: XLA all-gathers a weight where the step uses it and reduce-scatters its
    gradient). A leaf with no such dimension (the step count) is replicated."""

    axes = ("fsdp",)
    RULE = "every parameter and AdamW moment on its largest dimension that the fsdp size divides"

    def state(self, abstract):
        import jax

        return jax.tree_util.tree_map_with_path(
            lambda path, leaf: self.sharding(*self.spec_of(path, leaf.shape)), abstract
        )

    def spec_of(self, path, shape) -> list:
        return self.fsdp_dim([None] * len(shape), shape)

    def fsdp_dim(self, spec: list, shape) -> list:
        """`spec` with `fsdp` on the largest free dimension it divides (none: unchanged)."""
        size = self.mesh.shape["fsdp"]
        free = [i for i, axis in enumerate(spec) if axis is None and shape[i] % size == 0]
        if size > 1 and free:
            spec[max(free, key=lambda i: shape[i])] = "fsdp"
        return spec

    @property
    def layout(self) -> dict:
        return {"mesh": dict(self.mesh.shape), "batch": "fsdp", "fsdp": self.RULE}


@STRATEGIES.binds("mesh_fsdp_tp")
class FSDPTensorParallel(FSDP):
    """A 2-D mesh (`fsdp`, `tensor`): `tensor` over a node's devices, `fsdp` across the nodes.
    In each block q/k/v and gate/up are split by output columns and o/down by input rows on
    `tensor`; the embedding and the head by vocabulary on `tensor`; then every leaf as FSDP's
    on `fsdp`. The batch is split on `fsdp` only: a node's devices read the same sequences."""

    axes = ("fsdp", "tensor")

    def mesh_shape(self, spec, count: int) -> tuple[int, ...]:
        return (count // spec.local_devices, spec.local_devices)

    def spec_of(self, path, shape) -> list:
        names, spec = _names(path), [None] * len(shape)
        role = names[-2] if len(names) >= 2 and len(shape) == 2 else None
        dim = TENSOR_DIM.get(role)
        if dim is not None and shape[dim] % self.mesh.shape["tensor"] == 0:
            spec[dim] = "tensor"
        return self.fsdp_dim(spec, shape)

    @property
    def layout(self) -> dict:
        return {
            "mesh": dict(self.mesh.shape),
            "batch": "fsdp",
            "tensor": "blocks: q k v gate up by columns, o down by rows; embedding and head by vocabulary; norms whole",
            "fsdp": self.RULE,
        }


@STRATEGIES.binds("pp")
class Pipeline:
    """Declared unavailable (PIPELINE_UNAVAILABLE): planning never launches it; a run by hand
    fails at once with the reason."""

    def __init__(self, spec, devices: list):
        raise ValueError(f"jax's pp: {PIPELINE_UNAVAILABLE}")
