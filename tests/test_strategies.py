"""Strategies without any framework: the one process layout (tasks per node, devices per
task, step-log writers), availability of cells, the parameter-server cluster and the Horovod
environment, all computed from declarations and `spec.dist` alone."""

from __future__ import annotations

import copy
import re
import subprocess
import sys

import pytest

from dlbench.coords import SAFE_NAME, Scale
from dlbench.planning import grid
from dlbench.runners import (
    Layout,
    capabilities,
    framework_names,
    layout,
    processes_per_node,
    run_layout,
    strategy_unavailable,
)
from dlbench.runners.base import Distributed
from tests.conftest import REPO, make_coords


@pytest.mark.parametrize(
    "framework, strategy, scale, expected",
    [
        # one process per device, each logs batch samples per step
        ("pytorch", "ddp", "2x4", (4, 1, 8)),
        ("tensorflow", "multi_worker_mirrored", "1x2", (2, 1, 2)),
        ("mxnet", "dist_sync", "2x2", (2, 1, 4)),
        ("tensorflow", "horovod", "2x2", (2, 1, 4)),
        ("mxnet", "horovod", "1x4", (4, 1, 4)),
        # one process drives the node's devices: batch x G samples per step, a log per node
        ("tensorflow", "replicated_copy", "1x4", (1, 4, 1)),
        ("tensorflow", "replicated_pscpu", "1x2", (1, 2, 1)),
        ("tensorflow", "replicated_nccl", "1x8", (1, 8, 1)),
        ("mxnet", "device", "1x2", (1, 2, 1)),
        ("mxnet", "nccl", "1x4", (1, 4, 1)),
        # a task per node; only the coordinator (rank 0) logs, counting every device
        ("tensorflow", "parameter_server", "1x2", (1, 2, 1)),
        ("tensorflow", "parameter_server", "2x4", (1, 8, 1)),
        # the single-device strategy
        ("tensorflow", "single", "1x1", (1, 1, 1)),
    ],
)
def test_layout_of_each_strategy(framework, strategy, scale, expected):
    tasks_per_node, local_devices, step_logs = expected
    nodes = Scale.parse(scale).nodes
    assert layout(framework, strategy, scale) == Layout(
        tasks_per_node, nodes * tasks_per_node, local_devices, step_logs
    )
    assert processes_per_node(framework, strategy, Scale.parse(scale).devices_per_node) == tasks_per_node
    coords = make_coords(framework=framework, strategy=strategy, scale=scale)
    assert run_layout(coords) == layout(framework, strategy, scale)


def test_every_declared_strategy_is_offered_and_safely_named():
    for fw in framework_names():
        for s in capabilities(fw).strategy_names:
            assert re.fullmatch(SAFE_NAME, s), s
        # a strategy name means the same process layout in every framework (Slurm rules share it)
    for a in framework_names():
        for b in framework_names():
            for s in set(capabilities(a).strategy_names) & set(capabilities(b).strategy_names):
                assert layout(a, s, "2x4") == layout(b, s, "2x4"), (a, b, s)


def test_capabilities_do_not_import_frameworks():
    code = (
        "import sys; from dlbench.runners import capabilities, framework_names\n"
        "[capabilities(f) for f in framework_names()]\n"
        "bad = [m for m in ('tensorflow', 'keras', 'mxnet', 'torch', 'horovod') if m in sys.modules]\n"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)


def test_why_a_strategy_cannot_run():
    assert "CUDA" in strategy_unavailable("tensorflow", "replicated_nccl", "1x2", "cpu")
    assert strategy_unavailable("tensorflow", "replicated_nccl", "1x2", "cuda") is None
    assert "CUDA" in strategy_unavailable("mxnet", "nccl", "1x2", "cpu")
    assert strategy_unavailable("mxnet", "device", "1x2", "cpu") is None
    for fw, s in (("tensorflow", "replicated_copy"), ("mxnet", "device"), ("tensorflow", "replicated_nccl")):
        assert "one node" in strategy_unavailable(fw, s, "2x2", "cuda")
    assert strategy_unavailable("tensorflow", "parameter_server", "2x2", "cpu") is None
    assert strategy_unavailable("tensorflow", "multi_worker_mirrored", "4x4", "cpu") is None
    for fw in ("tensorflow", "mxnet", "pytorch"):
        assert "Horovod" in strategy_unavailable(fw, "horovod", "1x2", "cuda")


def test_a_strategy_for_some_model_kinds_says_why_not_for_the_others():
    from dlbench.runners.plugin import Strategy

    mesh = Strategy("x", "one line", model_kinds=("llm",), kind_reason="rules name the Llama's parameters")
    assert mesh.model_unavailable("llama_small") is None and Strategy("y", "d").model_unavailable("resnet50") is None
    assert mesh.model_unavailable("resnet50") == (
        "x trains llm models only (rules name the Llama's parameters): resnet50 is image"
    )
    with pytest.raises(ValueError, match=r"Strategy\('x'\).model_kinds: expected model kinds"):
        Strategy("x", "d", model_kinds=("pictures",), kind_reason="r")
    with pytest.raises(ValueError, match=r"kind_reason: expected a reason exactly when model_kinds is set"):
        Strategy("x", "d", model_kinds=("llm",))


def test_grid_keeps_cells_a_strategy_cannot_run_as_unavailable():
    config = {
        "grid": {
            "frameworks": ["tensorflow", "mxnet"],
            "models": ["resnet50"],
            "batch_per_device": [8],
            "data": ["synthetic"],
            "precision": ["fp32"],
            "scales": ["1x1", "1x2", "2x2"],
            "strategies": {
                "tensorflow": ["replicated_nccl", "replicated_copy", "parameter_server", "horovod"],
                "mxnet": ["device", "nccl", "dist_sync"],
            },
        },
        "protocol": {"preset": "caict2020", "repeats": 1},
        "run": {"device": "cpu"},
    }
    g = grid.expand(config)
    runs = {(r.framework, r.scale, r.strategy) for r in g.runs}
    assert runs == {
        ("tensorflow", "1x1", "single"),
        ("tensorflow", "1x2", "replicated_copy"),
        ("tensorflow", "1x2", "parameter_server"),
        ("tensorflow", "2x2", "parameter_server"),
        ("mxnet", "1x1", "single"),
        ("mxnet", "1x2", "device"),
        ("mxnet", "1x2", "dist_sync"),
        ("mxnet", "2x2", "dist_sync"),
    }
    why = {(c.framework, c.scale, c.strategy): reason for c, reason in g.unavailable.items()}
    assert set(why) == {
        ("tensorflow", "1x2", "replicated_nccl"),
        ("tensorflow", "2x2", "replicated_nccl"),
        ("tensorflow", "2x2", "replicated_copy"),
        ("tensorflow", "1x2", "horovod"),
        ("tensorflow", "2x2", "horovod"),
        ("mxnet", "1x2", "nccl"),
        ("mxnet", "2x2", "nccl"),
        ("mxnet", "2x2", "device"),
    }
    assert "one node" in why[("tensorflow", "2x2", "replicated_copy")]
    assert "CUDA" in why[("mxnet", "1x2", "nccl")]
    on_gpus = copy.deepcopy(config)
    on_gpus["run"]["device"] = "cuda"
    why = {(c.framework, c.scale, c.strategy) for c in grid.expand(on_gpus).unavailable}
    assert ("tensorflow", "1x2", "replicated_nccl") not in why and ("mxnet", "1x2", "nccl") not in why
    assert ("tensorflow", "2x2", "replicated_nccl") in why


# ------------------------------------------------------- TF parameter-server cluster
def test_parameter_server_cluster_on_one_node():
    from dlbench.runners.tensorflow import node_servers, ps_cluster

    dist = Distributed(rank=0, world_size=1, local_rank=0, local_world_size=1, master_port=5000)
    cluster = ps_cluster(dist, devices_per_node=2)
    assert cluster == {
        "chief": ["127.0.0.1:5000"],
        "worker": ["127.0.0.1:5001", "127.0.0.1:5002"],
        "ps": ["127.0.0.1:5003"],
    }
    assert node_servers(cluster, 0) == [("worker", 0), ("worker", 1), ("ps", 0)]


def test_parameter_server_cluster_across_nodes_is_the_same_in_every_task():
    from dlbench.runners.tensorflow import node_servers, ps_cluster

    nodes = ["10.0.0.1", "10.0.0.2"]
    dists = [
        Distributed(
            rank=r, world_size=2, local_rank=0, local_world_size=1, master_addr="10.0.0.1", master_port=13000,
            endpoints={"nodes": nodes},
        )
        for r in range(2)
    ]  # fmt: skip
    clusters = [ps_cluster(d, devices_per_node=4) for d in dists]
    assert clusters[0] == clusters[1]
    cluster = clusters[0]
    assert cluster["chief"] == ["10.0.0.1:13000"]
    assert cluster["worker"] == [f"10.0.0.1:{13001 + w}" for w in range(4)] + [
        f"10.0.0.2:{13005 + w}" for w in range(4)
    ]
    assert cluster["ps"] == ["10.0.0.1:13009", "10.0.0.2:13010"]
    # all ports distinct (several Slurm "nodes" may share one host) and within Slurm's port block
    ports = [int(a.rsplit(":", 1)[1]) for job in cluster.values() for a in job]
    assert len(set(ports)) == len(ports) and max(ports) - 13000 < 100
    assert node_servers(cluster, 1) == [("worker", 4), ("worker", 5), ("worker", 6), ("worker", 7), ("ps", 1)]
    with pytest.raises(ValueError, match="endpoints"):
        ps_cluster(Distributed(rank=1, world_size=2, local_rank=0, local_world_size=1), devices_per_node=4)


def test_strategy_kind_rejects_an_unknown_strategy():
    from dlbench.runners.tensorflow import strategy_kind

    assert [strategy_kind(s) for s in ("single", "multi_worker_mirrored", "replicated_copy", "parameter_server")] == [
        "single",
        "mwms",
        "replicated",
        "ps",
    ]
    with pytest.raises(ValueError, match="strategy 'replicated_bogus' has no class"):
        strategy_kind("replicated_bogus")


# --------------------------------------------------------------------- Horovod
def test_horovod_environment_without_horovodrun():
    from dlbench.runners import _horovod

    dists = [
        Distributed(
            rank=r, world_size=4, local_rank=r % 2, local_world_size=2, master_addr="10.0.0.1", master_port=13000
        )
        for r in range(4)
    ]
    envs = [_horovod.slot_environment(d) for d in dists]
    assert [e["HOROVOD_RANK"] for e in envs] == ["0", "1", "2", "3"]
    assert [e["HOROVOD_LOCAL_RANK"] for e in envs] == ["0", "1", "0", "1"]
    assert [e["HOROVOD_CROSS_RANK"] for e in envs] == ["0", "0", "1", "1"]
    assert [e["HOROVOD_HOSTNAME"] for e in envs] == ["node0", "node0", "node1", "node1"]
    assert {e["HOROVOD_SIZE"] for e in envs} == {"4"} and {e["HOROVOD_CROSS_SIZE"] for e in envs} == {"2"}
    assert {(e["HOROVOD_GLOO_RENDEZVOUS_ADDR"], e["HOROVOD_GLOO_RENDEZVOUS_PORT"]) for e in envs} == {
        ("10.0.0.1", str(13000 + _horovod.RENDEZVOUS_OFFSET))
    }
    # above MultiWorkerMirrored's per-rank ports and inside Slurm's port block of the job
    assert 4 <= _horovod.RENDEZVOUS_OFFSET < 100


def test_horovod_start_without_horovod_names_the_reason():
    """The one Horovod entry point of the runners: here Horovod is not installed."""
    from dlbench.runners import _horovod
    from dlbench.runners.base import Distributed

    with pytest.raises(RuntimeError, match="horovod: Horovod is not in the framework environment's lock"):
        _horovod.start("horovod.no_such_framework", Distributed(world_size=2, local_world_size=2))


# ------------------------------------------------------------- loss equivalence
def test_every_strategy_has_a_loss_equivalence_test():
    """Each strategy of each framework is compared with its single-device run: by the test
    tests/frameworks/equivalence.py.TESTS names (which must exist), or else by
    tests/frameworks/test_equivalence.py's generic one (which skips naming why it cannot run here)."""
    import ast

    from tests.frameworks import equivalence, test_equivalence

    for (framework, strategy), node in equivalence.TESTS.items():
        assert strategy in capabilities(framework).strategy_names, (framework, strategy)
        path, name = node.split("::")
        defined = {f.name for f in ast.walk(ast.parse((REPO / path).read_text())) if isinstance(f, ast.FunctionDef)}
        assert name in defined, node
    offered = {(f, s) for f in framework_names() for s in capabilities(f).strategy_names}
    assert offered == set(equivalence.TESTS) | set(test_equivalence.OTHERS)
