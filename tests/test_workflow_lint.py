"""The workflow's own hygiene, checked with every test run (tools/test.sh): snakefmt's
formatting and Snakemake's linter, both on the repository's Snakefile and rule files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)


def test_snakefmt_leaves_the_workflow_unchanged():
    result = run(str(BIN / "snakefmt"), "--check", "Snakefile", "workflow/rules")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def test_snakemake_lint_is_clean():
    result = run(sys.executable, "-m", "snakemake", "--lint", "--profile", "profiles/local")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "Lints for" not in result.stdout + result.stderr


def test_common_smk_holds_validation_and_input_functions_only():
    lines = (REPO / "workflow/rules/common.smk").read_text().splitlines()
    # Also the workflow's globals (grid, deployment, job shapes, prescreen), defined before the
    # rule files that read them are included.
    assert len(lines) <= 180, f"common.smk has {len(lines)} lines"
    assert not any(line.startswith("rule ") for line in lines)
