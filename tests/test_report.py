"""The report document and its generated findings, from hand-made cells and from real step logs."""

import math
import re

import pandas as pd
import pytest

from dlbench import report
from dlbench.analysis import environment, references
from dlbench.analysis.aggregate import cells_table, runs_table
from dlbench.coords import CellKey, RunCoords
from dlbench.findings import grid as findings
from dlbench.findings import vocabulary
from dlbench.steplog import StepLogWriter, rank_log_name

PROTOCOL = {"preset": "caict2020", "warmup_steps": 1, "measured_steps": 3, "repeats": 3, "statistic": "mean"}
CONFIG = {
    "grid": {"frameworks": ["pytorch", "tensorflow"], "models": ["resnet50", "vgg16", "bert_base"]},
    "run": {"image_size": 64, "device": "cpu", "threads": 2, "time_limit_s": 900},
    "analysis": {"noisy_cv": 0.1},
}
STRATEGY = {"pytorch": "ddp", "tensorflow": "multi_worker_mirrored"}


# ---------------------------------------------------------------- a hand-made cells table


def cell(framework, scale, throughput, model="resnet50", status="ok", cv=0.02, n=3, data="synthetic", **extra):
    devices = int(scale.split("x")[0]) * int(scale.split("x")[1])
    return {
        "framework": framework,
        "model": model,
        "precision": extra.pop("precision", "fp32"),
        "data": data,
        "batch": "8",
        "scale": scale,
        "strategy": "single" if devices == 1 else STRATEGY[framework],
        "activation_checkpointing": "none",
        "grad_accum": 1,
        "pp_schedule": "none",
        "pp_microbatches": 1,
        "devices": devices,
        "status": status,
        "reason": extra.pop("reason", ""),
        "statistic": "mean",
        "throughput": throughput,
        "n": n,
        "repeats": 3,
        "std": throughput * cv if throughput == throughput else math.nan,
        "cv": cv if n > 1 else math.nan,
        **extra,
    }


def hand_made_cells() -> pd.DataFrame:
    rows = [
        cell("pytorch", "1x1", 100.0),
        cell("pytorch", "1x2", 194.0),
        cell("pytorch", "2x2", 324.0, cv=0.25),
        cell("tensorflow", "1x1", 80.0),
        cell("tensorflow", "1x2", 150.0),
        cell("tensorflow", "2x2", math.nan, status="oom", n=0, reason="rank 0: oom: out of memory"),
        cell("pytorch", "1x1", 40.0, model="vgg16"),
        cell("pytorch", "1x2", 36.0, model="vgg16"),
        cell("pytorch", "1x1", 70.0, data="real"),
    ]
    cells = pd.DataFrame(rows)
    cells["noisy"] = cells["cv"] > 0.1
    cells["speedup"] = [
        r["throughput"]
        / cells[
            (cells.framework == r.framework) & (cells.model == r.model) & (cells.data == r.data) & (cells.devices == 1)
        ]["throughput"].iloc[0]
        for _, r in cells.iterrows()
    ]
    cells["efficiency"] = cells["speedup"] / cells["devices"]
    return cells


def hand_made_runs(cells: pd.DataFrame) -> pd.DataFrame:
    """Three repeats per cell with a number: throughput × (1 - cv, 1, 1 + cv) (mean and CV as the cell's)."""
    rows = [
        {**c.to_dict(), "status": "ok", "throughput": c["throughput"] * f}
        for _, c in cells[cells["throughput"].notna()].iterrows()
        for f in (1 - c["cv"], 1, 1 + c["cv"])
    ]
    return pd.DataFrame(rows)


def key(framework, scale, model="resnet50", data="synthetic"):
    strategy = "single" if scale == "1x1" else STRATEGY[framework]
    return CellKey(framework, model, "fp32", data, "8", scale, strategy)


def by_topic(found, topic, model=None):
    return [f for f in found if f.topic == topic and (model is None or f.model == model)]


def test_framework_comparison_sentences_and_their_cells():
    cells = hand_made_cells()
    found = findings.findings(cells, runs=hand_made_runs(cells))
    compare = by_topic(found, "compare", "resnet50")
    # Every scale where both frameworks have a number: 1x1 and 1x2 (tensorflow 2x2 is OOM).
    assert [f.text for f in compare] == [
        "At 1x1, ResNet-50 (batch 8/device, fp32, synthetic data) throughput by framework: PyTorch 100.0 images/s; "
        "then TensorFlow 80.0, PyTorch faster by 1.25× [95% CI 1.22–1.28].",
        "At 1x2, ResNet-50 (batch 8/device, fp32, synthetic data) throughput by framework: PyTorch 194.0 images/s; "
        "then TensorFlow 150.0, PyTorch faster by 1.29× [95% CI 1.26–1.33].",
    ]
    ratio = [n for n in compare[1].numbers if n.quantity == "ratio"][0]
    assert ratio.value == pytest.approx(194 / 150)
    assert ratio.cells == (key("pytorch", "1x2"), key("tensorflow", "1x2"))
    assert compare[1].cells == [key("pytorch", "1x2"), key("tensorflow", "1x2")]


def test_scaling_sentences():
    cells = hand_made_cells()
    found = findings.findings(cells, runs=hand_made_runs(cells))
    texts = [f.text for f in by_topic(found, "scaling")]
    # 2x2 is noisy (CV 0.25): the fall in efficiency is not claimed.
    assert (
        "PyTorch's ResNet-50 (batch 8/device, fp32, synthetic data) scaling efficiency is 0.97 [95% CI 0.94–1.00] "
        "at 1x2 and 0.81 [95% CI 0.61–1.01] at 2x2: uncertain, a noisy cell; speedup at 2x2: 3.24× "
        "[95% CI 2.43–4.02]." in texts
    )
    assert (
        "TensorFlow's ResNet-50 (batch 8/device, fp32, synthetic data) speedup at 1x2 is 1.88× [95% CI 1.83–1.93] "
        "over one device (scaling efficiency 0.94 [95% CI 0.91–0.96])." in texts
    )
    assert (
        "PyTorch's VGG-16 speedup at 1x2 is 0.90× [95% CI 0.88–0.92] over one device (scaling efficiency 0.45 "
        "[95% CI 0.44–0.46]): it is slower than on one device." in texts
    )
    falls = next(f for f in by_topic(found, "scaling") if "noisy" in f.text)
    first, last = [n for n in falls.numbers if n.quantity == "efficiency"]
    # Each efficiency traces to its cell and the 1-device cell it is relative to.
    assert first.cells == (key("pytorch", "1x2"), key("pytorch", "1x1"))
    assert last.cells == (key("pytorch", "2x2"), key("pytorch", "1x1"))
    assert last.value == pytest.approx(324 / 100 / 4)


def test_noise_status_and_variant_sentences():
    cells = hand_made_cells()
    found = findings.findings(cells, noisy_cv=0.1, runs=hand_made_runs(cells))
    (noise,) = by_topic(found, "noise")
    assert noise.text == (
        "1 of 8 cells with two or more repeats has a coefficient of variation above 0.1 (their numbers are "
        "uncertain); the largest is 0.25 (PyTorch ResNet-50 at 2x2)."
    )
    assert noise.numbers[0].cells == (key("pytorch", "2x2"),)
    (status,) = by_topic(found, "status")
    assert status.text == "1 of 9 cells has no number: TensorFlow ResNet-50 at 2x2 (OOM)."
    assert status.numbers[0].cells == (key("tensorflow", "2x2"),)
    (variant,) = by_topic(found, "variant")
    assert variant.text == (
        "With real data, PyTorch's ResNet-50 throughput at 1x1 (batch 8/device) is 0.70× [95% CI 0.68–0.72] its "
        "synthetic-data throughput (70.0 vs 100.0 images/s)."
    )
    assert variant.numbers[0].cells == (key("pytorch", "1x1", data="real"), key("pytorch", "1x1"))


def test_every_number_is_the_value_of_its_cells():
    """Re-derive each number from the cells it names: nothing is computed from anywhere else."""
    cells = hand_made_cells()
    index = {vocabulary.cell_key(r): r for _, r in cells.iterrows()}
    for f in findings.findings(cells, runs=hand_made_runs(cells)):
        for n in f.numbers:
            rows = [index[k] for k in n.cells]
            if n.quantity == "throughput":
                assert n.value == pytest.approx(rows[0]["throughput"])
            elif n.quantity == "ratio":
                assert n.value == pytest.approx(rows[0]["throughput"] / rows[1]["throughput"])
            elif n.quantity in ("speedup", "efficiency"):
                assert n.value == pytest.approx(rows[0][n.quantity])
                assert rows[1]["devices"] == 1
            if n.quantity in ("ratio", "speedup", "efficiency"):
                assert n.low <= n.value <= n.high
            elif n.quantity == "cv":
                assert n.value == pytest.approx(rows[0]["cv"])
            elif n.quantity == "count":
                assert n.value == len(n.cells)
            assert n.text in f.text


def test_reference_verdict_sentence():
    common = dict(model="resnet50", precision="fp32", data="synthetic", batch="64", kind="published")
    common |= dict(activation_checkpointing="none", grad_accum=1, pp_schedule="none", pp_microbatches=1)
    common |= dict(source="tf_cnn_benchmarks", hardware="DGX-1 (8x V100)", reference_framework="tensorflow")
    refs = pd.DataFrame(
        [
            {
                **common,
                "framework": "pytorch",
                "scale": "1x1",
                "strategy": "single",
                "devices": 1,
                "reference": 360.0,
                "measured": 300.0,
                "ratio": 300 / 360,
                "verdict": "slower",
            },
            {
                **common,
                "framework": "pytorch",
                "scale": "1x2",
                "strategy": "ddp",
                "devices": 2,
                "reference": 700.0,
                "measured": 690.0,
                "ratio": 690 / 700,
                "verdict": "within",
            },
        ]
    )
    (f,) = findings.reference_verdicts(refs, 0.1)
    assert f.text == (
        "Of the 2 comparisons with published numbers, tolerance ±10%: 1 within and 1 slower. Furthest: PyTorch "
        "ResNet-50 at 1x1 (batch 64/device), 300.0 images/s, is 0.83× the reference 360.0 (tf_cnn_benchmarks, "
        "DGX-1 (8x V100))."
    )
    slower = CellKey("pytorch", "resnet50", "fp32", "synthetic", "64", "1x1", "single")
    assert f.numbers[1].cells == (slower,) and f.numbers[-1].quantity == "reference_ratio"
    assert findings.reference_verdicts(None, 0.1) == [] and findings.reference_verdicts(refs.iloc[0:0], 0.1) == []


def test_no_findings_without_numbers():
    empty = hand_made_cells().iloc[0:0]
    assert findings.findings(empty) == []
    lonely = pd.DataFrame([cell("pytorch", "1x1", 100.0, n=1)])
    lonely["noisy"], lonely["speedup"], lonely["efficiency"] = False, 1.0, 1.0
    assert findings.findings(lonely) == []


# ---------------------------------------------------------------- real step logs → tables → report


def provenance(framework: str, cpu_model="Test CPU @ 2.0GHz", cpu_count=2, memory_gb=23.6) -> dict:
    """A step-log header's provenance, as the worker records it (dlbench.provenance)."""
    return {
        "os": "Linux-6.1-x86_64-with-glibc2.36",
        "cpu_model": cpu_model,
        "cpu_count": cpu_count,
        "memory_gb": memory_gb,
        "gpu": None,
        "slurm": None,
        "env_lock": f"{framework}.txt",
        "env_lock_sha256": "ab" * 32,
        "container_image": None,
        "git": {"commit": "0123456789abcdef0123", "dirty": False},
    }


def write_log(root, coords: RunCoords, step_s: float, status="ok", error=None, ranks=None, warmup=1, measured=3):
    """One run's rank logs with full headers (provenance included), as the worker writes them."""
    ranks = ranks or coords.devices
    for rank in range(ranks):
        nodes = int(coords.scale.split("x")[0])
        node = f"node{rank * nodes // coords.devices}"
        header = {
            "run": coords.as_dict(),
            "protocol": {k: PROTOCOL[k] for k in ("preset", "warmup_steps", "measured_steps", "statistic")},
            "batch": 8,
            "image_size": 64,
            "seq_len": 0,
            "threads": 1,
            "device": "cpu",
            "rank": rank,
            "world_size": coords.devices,
            "node": node,
            "start_time": "2026-01-02T03:04:05.000+00:00",
            "python": "3.11.7",
            "framework": {
                "name": coords.framework,
                "version": {"pytorch": "2.5.1", "tensorflow": "2.18.0"}[coords.framework],
                "trainable_params": {"resnet50": 25557032, "vgg16": 138357544}[coords.model],
            },
            "provenance": provenance(coords.framework),
        }
        writer = StepLogWriter(root / coords.run_dir / rank_log_name(rank), header)
        steps, t = [], 10.0
        n_steps = warmup + measured if status == "ok" else 1
        for i in range(n_steps):
            steps.append(
                {
                    "i": i,
                    "phase": "warmup" if i < warmup else "measure",
                    "t_start": t,
                    "t_end": t + step_s,
                    "samples": 8,
                    "loss": 1.0,
                }
            )
            t += step_s
        writer.write_steps(steps)
        writer.close(status, error)


# step time per (framework, model, scale), per repeat: throughput = devices * 8 / step time.
FIXTURE_STEPS = {
    ("pytorch", "resnet50", "1x1"): [0.100, 0.102, 0.098],
    ("pytorch", "resnet50", "1x2"): [0.105, 0.103, 0.104],
    ("pytorch", "resnet50", "2x2"): [0.125, 0.120, None],  # third repeat failed: partial
    ("tensorflow", "resnet50", "1x1"): [0.125, 0.126, 0.124],
    ("tensorflow", "resnet50", "1x2"): [0.140, 0.139, 0.141],
    ("tensorflow", "resnet50", "2x2"): [0.170, 0.250, 0.120],  # noisy
    ("pytorch", "vgg16", "1x1"): [0.300, 0.301, 0.299],
    ("pytorch", "vgg16", "1x2"): [0.330, 0.331, 0.329],
    ("pytorch", "vgg16", "2x2"): ["oom", "oom", "oom"],
}


def fixture_results(root):
    """A small grid written as real step logs, aggregated by dlbench.analysis.aggregate: (cells, runs)."""
    coords = []
    for (fw, model, scale), per_repeat in FIXTURE_STEPS.items():
        strategy = "single" if scale == "1x1" else STRATEGY[fw]
        for repeat, step in enumerate(per_repeat, start=1):
            c = RunCoords(fw, model, "fp32", "synthetic", "8", scale, strategy, repeat)
            if step is None:
                write_log(root, c, 0.1, status="failed", error="RuntimeError: connection reset by peer")
            elif step == "oom":
                write_log(root, c, 0.1, status="oom", error="out of memory: tried to allocate 2.0 GiB")
            else:
                write_log(root, c, step)
            coords.append(c)
    unavailable = {
        CellKey(
            fw, "bert_base", "fp32", "synthetic", "8", scale, "single" if scale == "1x1" else STRATEGY[fw]
        ): f"{fw} BERT-base runner not built yet"
        for fw in ("pytorch",)
        for scale in ("1x1", "1x2")
    }
    runs = runs_table(coords, root)
    cells = cells_table(runs, "mean", unavailable, noisy_cv=0.1)
    return cells, runs


REFERENCE_CONFIG = {**CONFIG, "references": {"hardware": "Test GPU", "baseline": "old/cells.csv", "tolerance": 0.1}}


def fixture_references(cells):
    """references.csv as dlbench.analysis.references writes it: one published number and a baseline 1.5x faster."""
    published = pd.DataFrame(
        [
            {
                "source": "a paper",
                "hardware": "Test GPU x8",
                "framework": "tensorflow",
                "model": "resnet50",
                "precision": "fp32",
                "data": "synthetic",
                "batch_per_device": "8",
                "gpus": 1.0,
                "strategy": "replicated",
                "throughput": 160.0,
            },
        ]
    )
    baseline = cells.assign(throughput=cells["throughput"] * 1.5)
    refs = pd.concat(
        [
            references.compare_published(cells, published, "Test GPU", 0.1),
            references.compare_baseline(cells, baseline, "old/cells.csv", 0.1),
        ],
        ignore_index=True,
    )
    return refs


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    cells, runs = fixture_results(root)
    # Through CSV, as the pipeline does.
    cells.to_csv(root / "cells.csv", index=False)
    runs.to_csv(root / "runs.csv", index=False)
    cells = pd.read_csv(root / "cells.csv", dtype={"batch": str})
    runs = pd.read_csv(root / "runs.csv", dtype={"batch": str})
    # environment.json as the aggregate stage writes it, read back.
    (root / "environment.json").write_text(environment.to_json(environment.table(runs, root)), encoding="utf-8")
    env = environment.read(root / "environment.json")
    html = report.render(cells, runs, PROTOCOL, CONFIG, environment=env, generated="2026-01-02 03:04 UTC")
    (root / "index.html").write_text(html, encoding="utf-8")
    return root, html, cells


def test_report_sections_and_method(rendered):
    _, html, _ = rendered
    for section in (
        'id="summary"',
        'id="method"',
        'id="environment"',
        'id="model-resnet50"',
        'id="model-vgg16"',
        'id="model-bert_base"',
        'id="reading"',
    ):
        assert section in html
    assert "published vs measured" not in html.lower()  # no references table: no section
    assert "caict2020" in html and "warm-up steps (discarded)</th><td>1<" in html
    assert "64×64 px images" in html and "smaller than the 224 px" in html
    assert "each “device” is one CPU process" in html


def test_report_environment_from_headers(rendered):
    _, html, _ = rendered
    env = html[html.index('id="environment"') : html.index('id="model-resnet50"')]
    assert "2.5.1" in env and "2.18.0" in env and "3.11.7" in env
    assert "Test CPU @ 2.0GHz" in env and "23.6 GB" in env and "Linux-6.1" in env
    assert "node0" in env and "node1" in env
    assert "pytorch.txt sha256 abababababab" in env
    assert "0123456789" in env and "not used" in env  # git commit; no Slurm


def test_report_tables_mark_cells_with_their_reason(rendered):
    _, html, cells = rendered
    vgg = html[html.index('id="model-vgg16"') :]
    assert 'id="cell-pytorch-vgg16-fp32-synthetic-8-2x2-ddp"' in vgg
    assert ">OOM<" in vgg and "out of memory: tried to allocate 2.0 GiB" in vgg
    bert = html[html.index('id="model-bert_base"') : html.index('id="model-bert_base"') + 4000]
    assert ">N/A<" in bert and "BERT-base runner not built yet" in bert
    # The partial cell, and its reason once for all four ranks.
    assert "* (2/3)" in html and "ranks 0, 1, 2, 3: failed: RuntimeError: connection reset by peer" in html
    # Every cell of cells.csv has exactly one anchor.
    for _, c in cells.iterrows():
        assert html.count(f'id="{report.cell_id(vocabulary.cell_key(c))}"') == 1


def test_report_findings_link_to_cells_that_exist(rendered):
    _, html, _ = rendered
    targets = set(re.findall(r'href="#(cell-[^"]+)"', html))
    assert targets, "findings carry links to cells"
    for target in targets:
        assert f'id="{target}"' in html
    assert "1.25×" in html  # pytorch vs tensorflow ResNet-50 at 1x1: 80.0 / 64.0 images/s


def test_report_figures_embedded(rendered):
    _, html, _ = rendered
    images = re.findall(r'<img src="([^"]+)"', html)
    # The summary's; ResNet-50 and VGG-16: throughput + speedup; BERT-base has no number, so no figure.
    assert len(images) == 5 and all(src.startswith("data:image/png;base64,") for src in images)
    assert "No cell of BERT-base produced a number" in html


def test_report_references_section_when_a_table_exists(rendered):
    root, _, cells = rendered
    runs = pd.read_csv(root / "runs.csv", dtype={"batch": str})
    refs = fixture_references(cells)
    env = environment.read(root / "environment.json")
    html = report.render(cells, runs, PROTOCOL, REFERENCE_CONFIG, environment=env, references=refs)
    section = html[html.index('id="references"') :]
    assert "Published vs measured" in section and "a paper" in section and "Test GPU x8" in section
    # pytorch 1x1 vs the paper: the ratio with its CI (the cell's own, the paper's number taken as exact)
    assert ">160.0<" in section and ">80.0<" in section and ">0.50× [95% CI 0.49–0.51]<" in section
    assert ">slower<" in section and "<img" in section
    # The noisy tensorflow 2x2 cell against its baseline: its CI crosses ±10%, and says what would decide it.
    assert re.search(
        r">inconclusive: the 95% CI crosses the ±10% band: about \d+ and \d+ repeats \(now 3 and 3\)", section
    )
    assert 'href="#cell-pytorch-resnet50-fp32-synthetic-8-1x1-single"' in section
    assert "Of the 2 comparisons with published numbers" in html  # pytorch and tensorflow at 1x1
    assert "Of the 8 comparisons with the baseline (old/cells.csv)" in html
    # A references table without rows: the section says why; no table: no section.
    empty = report.render(cells, runs, PROTOCOL, CONFIG, environment=env, references=refs.iloc[0:0])
    assert "no hardware class is set" in empty
    assert 'id="references"' not in report.render(cells, runs, PROTOCOL, CONFIG, environment=env)


def test_report_without_headers_falls_back_to_runs_csv(rendered):
    root, _, cells = rendered
    runs = pd.read_csv(root / "runs.csv", dtype={"batch": str})
    html = report.render(cells, runs, PROTOCOL, CONFIG, environment=environment.table(runs, root / "elsewhere"))
    assert "step-log headers were not found" in html and "2.5.1" in html
    assert report.render(cells, runs, PROTOCOL, CONFIG) == html  # no environment table: the same fallback


def test_compact_reason():
    reason = "rank 0: oom: X; rank 1: oom: X | rank 0: failed: Y"
    assert report.compact_reason(reason) == "ranks 0, 1: oom: X; rank 0: failed: Y"
    assert report.compact_reason("a model the framework lacks") == "a model the framework lacks"


def test_environment_with_slurm_gpus_and_a_container():
    header = {
        "run": {"framework": "pytorch", "scale": "2x4", "repeat": 1},
        "node": "gpu01",
        "device": "cuda",
        "threads": 4,
        "python": "3.11.7",
        "framework": {"name": "pytorch", "version": "2.5.1"},
        "start_time": "2026-01-02T03:04:05+00:00",
        "provenance": {
            "cpu_model": "Xeon",
            "cpu_count": 64,
            "cpus_allowed": 16,
            "memory_gb": 512.0,
            "memory_limit_gb": 64.0,
            "os": "Linux",
            "gpu": {"gpus": ["Tesla V100-SXM2-32GB, 535.1, 32768 MiB"] * 2},
            "slurm": {"slurm_job_id": "4242", "slurm_cluster_name": "hpc", "slurm_job_nodelist": "gpu[01-02]"},
            "container": {"path": "/images/pytorch.sif", "sha256": "cd" * 32},
            "git": {"commit": "fedcba9876543210", "dirty": True},
        },
    }
    env = environment.summarize(pd.DataFrame(), [header, {**header, "node": "gpu02"}])
    (software,) = env["software"]
    assert software["container"] == "/images/pytorch.sif sha256 cdcdcdcdcdcd"
    gpu01 = env["machines"][0]
    assert gpu01["cpu_count"] == "64 (16 allowed)" and gpu01["memory_gb"] == "512 GB (limit 64 GB)"
    assert gpu01["gpu"].count("Tesla V100") == 2
    facts = dict(env["facts"])
    assert facts["Slurm"] == "1 job(s) (4242) on cluster hpc, nodes gpu[01-02]"
    assert facts["dlbench code (git)"] == "fedcba9876 with uncommitted changes"
    assert facts["Threads per process"] == "4 with 4 processes per node"
    assert facts["Devices"] == "cuda (2 processes)"
    assert "Memory allocator (malloc)" not in facts  # headers older than the field
    jemalloc = {**header, "allocator": {"name": "jemalloc", "library": "/usr/lib/libjemalloc.so.2"}}
    system = {**header, "allocator": {"name": "system", "library": "/usr/lib/libc.so.6"}}
    facts = dict(environment.summarize(pd.DataFrame(), [jemalloc, jemalloc, system])["facts"])
    assert facts["Memory allocator (malloc)"] == (
        "jemalloc (/usr/lib/libjemalloc.so.2): 2 processes, system (/usr/lib/libc.so.6): 1 process"
    )


def test_labels_have_one_spelling_each():
    from dlbench import labels

    assert (
        labels.scale_with_caict("2x4", "ddp") == "2x4 (2n8c) ddp"
        and labels.scale_with_caict("1x1", "single") == "1x1 (1n1c)"
    )
    assert labels.scale_and_strategy("1x2", "ddp") == "1x2 ddp" and labels.series_label("mxnet", "single") == "MXNet"
    assert labels.status_label("oom") == "OOM" and labels.status_label("partial") == "PARTIAL"
    assert labels.status_label("partial", unknown=str) == "partial"
    assert labels.unit("bert_base") == "sequences/s" and labels.unit("unknown_model") == "samples/s"
    assert labels.setup("8", "fp32", "real") == "batch 8/device, fp32, real data"
    assert labels.sorted_scales(["2x2", "1x1", "1x2", "1x1"]) == ["1x1", "1x2", "2x2"]


def test_the_method_names_the_llm_flops_formula_and_the_mfu_peak():
    """An LLM cell's TFLOP/s and MFU are only as good as what they count: the method says it."""
    import pandas as pd

    from dlbench import llm
    from dlbench.report.sections import _llm_flops

    sizes = {"llama_small": (0, 64), "resnet50": (64, 0)}
    basis = "NVIDIA H100 80GB HBM3 tf32 dense 494.7 TFLOP/s (NVIDIA datasheet)"
    cells = pd.DataFrame({"model": ["llama_small", "resnet50"], "peak_basis": [basis, None]})
    text = _llm_flops(sizes, cells)
    assert "6 × the matmul parameters" in text and "12 × layers × hidden × sequence length" in text
    assert f"{llm.train_flops_per_token('llama_small', 64) / 1e9:.3g} GFLOP/token" in text
    assert f"MFU = achieved TFLOP/s ÷ {basis}" in text
    assert "No dense peak" in _llm_flops(sizes, cells.assign(peak_basis=None))
    assert _llm_flops({"resnet50": (64, 0)}, cells) is None  # no LLM: nothing to say
