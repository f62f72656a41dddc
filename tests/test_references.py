import math

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
        pp_schedule="none",
        pp_microbatches=1,
        devices=1,
        status="ok",
        throughput=219.0,
    )
    base.update(values)
    return base


def test_published_rows_match_on_model_batch_devices_and_hardware():
    refs = references.load_published(PUBLISHED)
    measured = {"ci95_low": 214.0, "ci95_high": 224.0, "n": 5}  # 0.98–1.02 of the 219 published
    cells = pd.DataFrame([cell(**measured), cell(model="inception_v3", throughput=300.0), cell(batch="7")])
    out = references.compare_published(cells, refs, "DGX-1", tolerance=0.1)
    resnet = out[out["model"] == "resnet50"]
    assert len(resnet) >= 1 and (resnet["reference"] > 0).all()
    dgx_ps = resnet[resnet["reference_strategy"] == "parameter_server/cpu"].iloc[0]
    assert dgx_ps["reference"] == 219 and dgx_ps["verdict"] == "within"
    assert (dgx_ps["ratio_low"], dgx_ps["ratio_high"]) == pytest.approx((214 / 219, 224 / 219))
    inception = out[out["model"] == "inception_v3"]  # published as "inception3", one number: no CI
    assert not inception.empty and set(inception["verdict"]) == {"inconclusive"}
    assert inception["why"].str.contains("no 95% CI").all() and inception["why"].str.contains("cannot be decided").all()
    assert out[out["batch"] == "7"].empty
    assert references.compare_published(cells, refs, "", 0.1).empty  # no hardware class: no comparison


@pytest.mark.parametrize(
    ("ratio", "ci", "expected"),
    [
        (1.05, (1.02, 1.08), "within"),  # the whole CI inside ±10%
        (1.05, (0.95, 1.15), "inconclusive"),  # crosses 1.1
        (1.05, (math.nan, math.nan), "inconclusive"),  # no CI: the point estimate alone decides nothing
        (1.2, (1.15, 1.25), "faster"),
        (0.7, (0.6, 0.8), "slower"),
    ],
)
def test_verdicts(ratio, ci, expected):
    assert references.verdict(ratio, 0.1, ci) == expected


def test_an_inconclusive_comparison_says_how_many_repeats_would_decide_it():
    why = references.why(1.05, 0.1, (0.95, 1.15), (3,))
    needed = math.ceil(3 * ((1.15 - 1.05) / (1.1 - 1.05)) ** 2)
    assert (
        why == f"the 95% CI crosses the ±10% band: about {needed} repeats (now 3) to decide it, if the estimate holds"
    )
    assert references.why(1.1, 0.1, (1.0, 1.2), (3,)).endswith("cannot be decided by more repeats")  # on the edge


def test_baseline_comparison():
    two = {"scale": "1x2", "strategy": "ddp", "devices": 2}
    now = pd.DataFrame(
        [
            cell(throughput=100.0, ci95_low=98.0, ci95_high=102.0, n=3),
            cell(**two, throughput=150.0, ci95_low=149.0, ci95_high=151.0, n=3),
        ]
    )
    before = pd.DataFrame(
        [
            cell(throughput=120.0, ci95_low=118.0, ci95_high=122.0, n=3),
            cell(**two, throughput=150.0, ci95_low=140.0, ci95_high=160.0, n=3),
        ]
    )
    out = references.compare_baseline(now, before, "old/cells.csv", 0.1).set_index("scale")
    assert out.loc["1x1", "verdict"] == "slower" and out.loc["1x1", "ratio"] == pytest.approx(100 / 120)
    assert out.loc["1x1", "ratio_high"] < 0.9
    # 150 ÷ 150, the two CIs' log half-widths combined in quadrature: ±6.6%, inside ±10%.
    half = math.hypot(math.log(151 / 149) / 2, math.log(160 / 140) / 2)
    assert (out.loc["1x2", "ratio_low"], out.loc["1x2", "ratio_high"]) == pytest.approx(
        (math.exp(-half), math.exp(half))
    )
    assert out.loc["1x2", "verdict"] == "within"
    wide = references.compare_baseline(now, before.assign(ci95_low=100.0, ci95_high=200.0), "old", 0.1)
    assert set(wide["verdict"]) == {"inconclusive"} and wide["why"].str.contains(r"repeats \(now 3 and 3\)").all()
