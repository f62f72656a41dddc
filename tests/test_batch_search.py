"""batch_search without a framework: the search, and the probe's launch (a LaunchRequest)."""

from __future__ import annotations

import json
import stat
import sys

import pytest

from dlbench.launch import LaunchRequest
from dlbench.planning import batch_search
from dlbench.protocol import RunProtocol


def probe_request(preset: str = "dlperf") -> LaunchRequest:
    return batch_search.probe_request(
        "pytorch",
        "resnet50",
        "fp32",
        "cpu",
        preset=preset,
        statistic="median",
        image_size=64,
        seq_len=0,
        threads=2,
        memory_cap_mb=700,
    )


def test_search_finds_the_edge():
    best, history = batch_search.search(lambda b: "ok" if b <= 37 else "oom", limit=1024)
    assert best == 37 and [p["batch"] for p in history][:7] == [1, 2, 4, 8, 16, 32, 64]
    assert batch_search.search(lambda b: "ok", limit=8)[0] == 8
    with pytest.raises(batch_search.SearchError):
        batch_search.search(lambda b: "failed")


def test_probe_request_takes_the_grids_preset():
    request = probe_request("dlperf")
    assert request.protocol == RunProtocol("dlperf", warmup_steps=1, measured_steps=1, statistic="median")
    assert request.progress_every == 0
    assert (request.coords.scale, request.coords.strategy, request.coords.data) == ("1x1", "single", "synthetic")


def test_launcher_probe_runs_the_launcher_with_the_probed_batch(tmp_path):
    """A stand-in python records the launcher's argv; the probe sets only batch and run dir."""
    seen = tmp_path / "argv.json"
    fake = tmp_path / "python"
    fake.write_text(f"#!{sys.executable}\nimport json, sys\njson.dump(sys.argv[1:], open({str(seen)!r}, 'w'))\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    request = probe_request()
    assert batch_search.launcher_probe(str(fake), str(tmp_path), request)(24) == "missing"
    argv = json.loads(seen.read_text())
    assert argv[:2] == ["-m", "dlbench.launch"]
    probed = LaunchRequest.from_argv(argv[2:])
    assert probed.coords == request.coords.with_(batch="24")
    assert probed.run_dir.endswith("/run") and probed == LaunchRequest(
        **{**request.__dict__, "coords": probed.coords, "run_dir": probed.run_dir}
    )


@pytest.mark.parametrize(
    ("exit_code", "status"), [(-11, batch_search.CRASHED_UNDER_CAP), (-9, "missing"), (1, "missing")]
)
def test_a_probe_that_crashed_under_the_cap_counts_as_too_large(tmp_path, exit_code, status):
    """A stand-in launcher leaves only launch.json, as when its rank died: a crash by a signal
    under the cap is a batch too large; SIGKILL (a scheduler's) or an exit code is not."""
    fake = tmp_path / "python"
    fake.write_text(
        f"#!{sys.executable}\nimport json, pathlib, sys\n"
        "run = pathlib.Path(sys.argv[sys.argv.index('--run-dir') + 1]); run.mkdir(parents=True)\n"
        f"(run / 'launch.json').write_text(json.dumps({{'rank_exit_codes': [{exit_code}]}}))\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    assert batch_search.launcher_probe(str(fake), str(tmp_path), probe_request())(24) == status
    best, history = batch_search.search(lambda b: "ok" if b <= 5 else batch_search.CRASHED_UNDER_CAP)
    assert best == 5 and {p["status"] for p in history} == {"ok", batch_search.CRASHED_UNDER_CAP}


def test_a_rank_that_crashed_under_the_cap_is_killed_with_the_cap_named(tmp_path):
    from dataclasses import replace

    from dlbench.launch.record import write_launch_record

    for codes, cap, said in (([-11], 560, True), ([-9], 560, False), ([-11], 0, False)):
        request = replace(probe_request(), run_dir=str(tmp_path), memory_cap_mb=cap)
        write_launch_record(request, codes, 0.0)
        reason = json.loads((tmp_path / "launch.json").read_text())["verdict"]["reason"]
        assert reason.startswith("rank 0 ended by SIG")
        assert ("under the 560 MB address-space cap" in reason) is said, reason
