"""The report's campaigns section, and byte-identical regeneration from raw logs (#18)."""

import hashlib
import os
import subprocess
import sys
import textwrap

from dlbench.analysis import audit
from dlbench.analysis.derive import derive, flops_counts, pipeline_paths
from dlbench.planning.grid import Grid
from dlbench.report.regenerate import OUTPUTS, output_paths
from tests.conftest import REPO
from tests.test_campaigns import PROTOCOL, PUBLISHED, STEADY, measured_campaign

REGENERATE = textwrap.dedent(
    """
    import sys
    from dlbench.report.regenerate import regenerate
    from dlbench.planning.grid import Grid
    from tests.conftest import make_coords
    root, out, published, protocol = sys.argv[1], sys.argv[2], sys.argv[3], eval(sys.argv[4])
    coords = [make_coords(scale=s, strategy="single" if s == "1x1" else "ddp", repeat=r)
              for s in ("1x1", "1x2") for r in range(1, 6)]
    regenerate(Grid(runs=coords, unavailable={}, protocol=protocol), root, out, {}, published)
    """
)


def _regenerate(root, out, hash_seed):
    env = {**os.environ, "PYTHONHASHSEED": str(hash_seed), "PYTHONPATH": str(REPO)}
    env.pop("SOURCE_DATE_EPOCH", None)
    subprocess.run(
        [sys.executable, "-c", REGENERATE, str(root), str(out), str(PUBLISHED), repr(PROTOCOL)],
        check=True,
        env=env,
        cwd=REPO,
    )
    return {name: hashlib.sha256(path.read_bytes()).hexdigest() for name, path in output_paths(out).items()}


def test_report_and_every_table_regenerate_byte_for_byte(tmp_path):
    measured_campaign(tmp_path / "campaign", STEADY, scales=("1x1", "1x2"))
    first = _regenerate(tmp_path / "campaign", tmp_path / "out", 1)
    assert set(first) == set(OUTPUTS)
    html = output_paths(tmp_path / "out")["index.html"].read_text()
    for path in output_paths(tmp_path / "out").values():
        path.unlink()
    assert _regenerate(tmp_path / "campaign", tmp_path / "out", 2) == first
    # The published campaign regenerated beside this run, and why this run's cells match none of it.
    assert 'id="campaigns"' in html and "seed000-nvidia_dgx_1_8x_tesla_p100" in html
    assert "speedup 7.92× · eff. 0.99" in html  # ResNet-50 batch 64 synthetic, 1734 / 219 on 8 GPUs
    assert "pytorch/resnet50/fp32/synthetic/8/1x2/ddp</code>: no reference cell" in html
    assert "CAICT 2020" in html and "figures only" in html
    assert "Generated from the tables (no run dates recorded)" in html  # no wall clock


def test_audit_recomputes_the_derived_tables_and_hashes_the_flops_inputs(tmp_path):
    coords = measured_campaign(tmp_path, STEADY)
    experiment = Grid(runs=coords, unavailable={}, protocol=PROTOCOL)
    tables_dir = tmp_path / "results" / "tables"
    flops = tmp_path / "results" / "flops" / "resnet50.json"
    flops.parent.mkdir(parents=True)
    flops.write_text('{"model": "resnet50", "train_flops_per_sample": 1.0}\n')
    derive(experiment, {}, tmp_path, flops_counts([flops])).write(pipeline_paths(tmp_path))
    result = audit.audit(experiment, {}, tables_dir, tmp_path, flops_files=[flops])
    assert result.passed, result.problems
    assert result.manifest["flops_inputs"] == {str(flops): hashlib.sha256(flops.read_bytes()).hexdigest()}
    # The FLOPs are part of what is recomputed: without them the cells lose their TFLOP/s.
    assert any("cells.csv differs" in p for p in audit.audit(experiment, {}, tables_dir, tmp_path).problems)
    (tables_dir / "cells.md").write_text((tables_dir / "cells.md").read_text().replace("16.0", "17.0"))
    problems = audit.audit(experiment, {}, tables_dir, tmp_path, flops_files=[flops]).problems
    expected = f"{(tables_dir / 'cells.md').resolve()} differs from the one recomputed from the raw logs"
    assert [p for p in problems if "differs" in p] == [expected]
