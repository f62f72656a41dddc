import pandas as pd
import pytest

from dlbench.analysis import references
from tests.conftest import REPO

PUBLISHED = REPO / "config/references/published_throughput.csv"


def cell(**values):
    base = dict(
        framework="tensorflow",
        model="resnet50",
        precision="fp32",
        data="synthetic",
        batch="64",
        scale="1x1",
        strategy="single",
        activation_checkpointing="none",
        grad_accum=1,
        devices=1,
        status="ok",
        throughput=219.0,
    )
    base.update(values)
    return base


def test_published_rows_match_on_model_batch_devices_and_hardware():
    refs = references.load_published(PUBLISHED)
    cells = pd.DataFrame([cell(), cell(model="inception_v3", throughput=300.0), cell(batch="7")])
    out = references.compare_published(cells, refs, "DGX-1", tolerance=0.1)
    resnet = out[out["model"] == "resnet50"]
    assert len(resnet) >= 1 and (resnet["reference"] > 0).all()
    dgx_ps = resnet[resnet["reference_strategy"] == "parameter_server/cpu"].iloc[0]
    assert dgx_ps["reference"] == 219 and dgx_ps["verdict"] == "within"
    inception = out[out["model"] == "inception_v3"]  # published as "inception3"
    assert not inception.empty and set(inception["verdict"]) <= {"faster", "within"}
    assert out[out["batch"] == "7"].empty
    assert references.compare_published(cells, refs, "", 0.1).empty  # no hardware class: no comparison


@pytest.mark.parametrize("ratio,expected", [(1.05, "within"), (1.2, "faster"), (0.7, "slower")])
def test_verdicts(ratio, expected):
    assert references.verdict(ratio, 0.1) == expected


def test_baseline_comparison():
    now = pd.DataFrame([cell(throughput=100.0), cell(scale="1x2", strategy="ddp", devices=2, throughput=150.0)])
    before = pd.DataFrame([cell(throughput=120.0), cell(scale="1x2", strategy="ddp", devices=2, throughput=150.0)])
    out = references.compare_baseline(now, before, "old/cells.csv", 0.1).set_index("scale")
    assert out.loc["1x1", "verdict"] == "slower" and out.loc["1x1", "ratio"] == pytest.approx(100 / 120)
    assert out.loc["1x2", "verdict"] == "within"
