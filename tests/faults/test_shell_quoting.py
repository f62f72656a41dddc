"""Config values never reach a shell unquoted: the two free-text paths of the config
(data.images.source, data.text.corpus) go through the data rules' shell commands for real,
named with every shell metacharacter a path may hold. They must arrive as one argument each
and run nothing. (Every other config value that reaches a shell is an integer, a number or
an enum the schema checks; the training command is shell-quoted by dlbench.planning.deployment.)
"""

import json
import shutil
import subprocess
import sys

import pytest
import yaml

from dlbench.data import imagenet
from dlbench.planning import datasets as paths
from dlbench.planning.origins import merge
from tests.conftest import REPO, framework_python

pytestmark = [
    pytest.mark.faults,
    pytest.mark.skipif(not framework_python("pytorch").exists(), reason="the pytorch environment is not built"),
]

HOSTILE = "a $(touch INJECTED1); touch INJECTED2 `touch INJECTED3` 'q\" & | > x"


def test_config_paths_reach_the_shell_as_one_argument(tmp_path):
    hostile = tmp_path / HOSTILE
    imagenet.generate(hostile / "imagenet", count=8, classes=2, image_size=32, seed=1)
    corpus = hostile / "corpus.txt"
    corpus.write_text((REPO / "README.md").read_text())
    override = {
        "data": {
            "images": {"source": str(hostile / "imagenet")},
            "text": {"corpus": str(corpus), "examples": 8, "vocab_size": 200, "seq_len": 32},
        }
    }
    work = tmp_path / "work"
    (work / "config").mkdir(parents=True)
    shutil.copy(REPO / "config/config.yaml", work / "config/config.yaml")
    # The default grid with the override in it: a grid file is the whole experiment.
    grid = yaml.safe_load((REPO / "config/config.yaml").read_text())
    merge(grid, override)
    (work / "data.yaml").write_text(yaml.safe_dump(grid))
    folder, text = paths.format_files("imagefolder", override)[-1], paths.format_files("bert", override)[-1]
    cmd = [sys.executable, "-m", "snakemake", folder, text, "-s", str(REPO / "Snakefile"), "-d", str(work)]
    cmd += ["--profile", str(REPO / "profiles/local"), "--configfile", str(work / "data.yaml")]
    result = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stderr[-4000:]
    injected = [*tmp_path.rglob("INJECTED*"), *REPO.glob("INJECTED*")]  # the jobs run in `work`
    assert not injected, injected
    assert json.loads((work / folder).read_text())["source"] == str(hostile / "imagenet")
    assert json.loads((work / text).read_text())["corpus"] == str(corpus)
