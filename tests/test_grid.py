import copy
import dataclasses

import pytest

from dlbench.planning import grid

BASE = {
    "grid": {
        "frameworks": ["pytorch"],
        "models": ["resnet50", "vgg16"],
        "batch_per_device": [1, 8, 32],
        "data": ["synthetic"],
        "precision": ["fp32"],
        "scales": ["1x1", "1x2"],
        "strategies": {"pytorch": ["ddp"]},
        "exclude": [],
        "only": [],
    },
    "protocol": {"preset": "caict2020"},
}


def config(**grid_changes):
    c = copy.deepcopy(BASE)
    c["grid"].update(grid_changes)
    return c


def test_full_grid_is_product_times_repeats():
    g = grid.expand(config())
    assert len(g.runs) == 2 * 3 * 2 * 3  # models x batches x scales x caict2020's 3 repeats
    assert len(set(g.runs)) == len(g.runs)
    assert {r.strategy for r in g.runs if r.scale == "1x1"} == {"single"}
    assert {r.strategy for r in g.runs if r.scale == "1x2"} == {"ddp"}


def test_exclude_and_only_rules():
    g = grid.expand(config(exclude=[{"model": "vgg16", "batch": [32]}]))
    assert len(g.runs) == 36 - 2 * 3
    assert not any(r.model == "vgg16" and r.batch == "32" for r in g.runs)
    g = grid.expand(config(only=[{"scale": "1x1", "batch": 8}]))
    assert {(r.model, r.batch, r.scale) for r in g.runs} == {("resnet50", "8", "1x1"), ("vgg16", "8", "1x1")}


def test_protocol_overrides_and_repeats():
    c = config()
    c["protocol"] = {"preset": "dlperf", "repeats": 2, "measured_steps": 7}
    g = grid.expand(c)
    assert g.protocol == {
        "preset": "dlperf",
        "warmup_steps": 20,
        "measured_steps": 7,
        "repeats": 2,
        "statistic": "median",
    }
    assert {r.repeat for r in g.runs} == {1, 2}


def test_unbuildable_model_becomes_unavailable_cell_not_dropped(monkeypatch):
    real = grid.capabilities

    def without_bert(name):
        caps = real(name)
        return dataclasses.replace(
            caps,
            models=tuple(m for m in caps.models if m != "bert_base"),
            unavailable_models={"bert_base": "no BERT in this build"},
        )

    monkeypatch.setattr(grid, "capabilities", without_bert)
    g = grid.expand(config(models=["resnet50", "bert_base"], scales=["1x1"], batch_per_device=[8]))
    assert [c.model for c in g.unavailable] == ["bert_base"]
    assert list(g.unavailable.values()) == ["no BERT in this build"]
    assert all(r.model == "resnet50" for r in g.runs)


@pytest.mark.parametrize(
    "changes,message",
    [
        ({"models": ["resnet5O"]}, "resnet5O"),
        ({"frameworks": ["caffe"]}, "caffe"),
        ({"strategies": {"pytorch": ["parameter_server"]}}, "parameter_server"),
        ({"strategies": {}}, "grid.strategies.pytorch"),
        ({"exclude": [{"modle": "vgg16"}]}, "modle"),
    ],
)
def test_semantic_errors_name_key_and_value(changes, message):
    with pytest.raises(grid.ConfigError, match=message):
        grid.expand(config(**changes))


def test_real_data_without_an_input_pipeline_is_an_unavailable_cell(monkeypatch):
    # A runner with no real-data pipeline (PyTorch has one now: declare it away).
    real_capabilities = grid.capabilities
    monkeypatch.setattr(
        grid, "capabilities", lambda fw: dataclasses.replace(real_capabilities(fw), data=("synthetic",))
    )
    g = grid.expand(config(data=["synthetic", "real"], scales=["1x1"], batch_per_device=[8]))
    assert {r.data for r in g.runs} == {"synthetic"}
    assert {c.data for c in g.unavailable} == {"real"}
    assert all("input pipeline" in why for why in g.unavailable.values())


def test_strategies_of_a_known_framework_outside_the_grid_are_ignored_but_a_typo_is_not():
    merged = config(strategies={"pytorch": ["ddp"], "mxnet": ["dist_sync"]})
    grid.check_semantics(merged)  # mxnet is known, just not in this grid (a merged default)
    merged["grid"]["strategies"]["pytorh"] = ["ddp"]
    with pytest.raises(grid.ConfigError, match="grid.strategies.pytorh: unknown framework"):
        grid.check_semantics(merged)
