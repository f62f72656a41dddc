"""Apptainer images: recipe checks, the digest lock, image verification.

    python -m dlbench.images.apptainer check [FRAMEWORK ...]       recipes agree with the lock and the repo
    python -m dlbench.images.apptainer verify FRAMEWORK IMAGE.sif  the image's sha256 is the pinned one
    python -m dlbench.images.apptainer pin FRAMEWORK IMAGE.sif     record a built, checked image's sha256
    python -m dlbench.images.apptainer stage FRAMEWORK DIR         a build directory for `apptainer build`

`containers/images.lock` (TOML) pins, per framework, the vendor base image by digest and the
built `.sif` by sha256. Recipe checks read the definition files with spython (imported only
there); everything else is stdlib, so workflow/scripts/verify_image.py runs with any Python 3.11.
Runs outside the framework environments (Snakemake's side), never inside a training process.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import tomllib

from dlbench import __version__
from dlbench.launch import allocator
from dlbench.provenance import sha256_file

REPO_ROOT = Path(__file__).resolve().parents[2]
CONTAINERS_DIR = REPO_ROOT / "containers"
LOCK_PATH = CONTAINERS_DIR / "images.lock"
# Where the images' recipes put dlbench's code and the framework's env lock.
IMAGE_CODE_DIR = "/opt/dlbench"

# Labels every recipe must carry (docs/containers.md says what each means).
REQUIRED_LABELS = (
    "DLBENCH_FRAMEWORK",
    "DLBENCH_VERSION",
    "DLBENCH_BASE_IMAGE",
    "DLBENCH_BASE_TAG",
    "DLBENCH_FRAMEWORK_SOURCE",
    "DLBENCH_ENV_LOCK",
    "DLBENCH_ENV_LOCK_SHA256",
    "DLBENCH_ENV_LOCK_INSTALLED",
)
FRAMEWORK_SOURCES = {"base-image": "no", "lock": "yes"}  # → DLBENCH_ENV_LOCK_INSTALLED
# Optional label: packages a base-image recipe installs on top, as name==version; each must be
# the version the framework's env lock pins.
EXTRA_PACKAGES_LABEL = "DLBENCH_EXTRA_PACKAGES"
DIGEST_REF = re.compile(r"^[a-z0-9][a-z0-9._/:-]*@sha256:[0-9a-f]{64}$")
SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")
# Files a recipe's %files section may name: the staged build directory holds exactly these.
STAGED = ("dlbench", "pyproject.toml", "envs", "BUILD_INFO.json")


class ContainerError(Exception):
    """A recipe, the lock or an image does not hold what dlbench needs."""


class DigestMismatch(ContainerError):
    pass


@dataclass(frozen=True)
class ImagePin:
    framework: str
    base: str  # registry/name@sha256:...
    base_tag: str
    base_digest_checked: bool
    base_digest_source: str
    framework_source: str  # "base-image" or "lock"
    sif_sha256: str  # "" until pinned

    @property
    def recipe_path(self) -> Path:
        return CONTAINERS_DIR / f"{self.framework}.def"

    @property
    def image_name(self) -> str:
        return f"{self.framework}.sif"


# ------------------------------------------------------------------ the lock


def load_lock(path: str | os.PathLike = LOCK_PATH) -> dict[str, ImagePin]:
    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ContainerError(f"cannot read the image lock {path}: {error}") from None
    pins = {}
    for framework, entry in data.items():
        missing = [k for k in ImagePin.__dataclass_fields__ if k != "framework" and k not in entry]
        if missing:
            raise ContainerError(f"{path}: [{framework}] lacks {', '.join(missing)}")
        pins[framework] = ImagePin(
            framework=framework, **{k: entry[k] for k in entry if k in ImagePin.__dataclass_fields__}
        )
    return pins


def pin_for(framework: str, lock: str | os.PathLike = LOCK_PATH) -> ImagePin:
    pins = load_lock(lock)
    if framework not in pins:
        raise ContainerError(f"{lock} has no [{framework}] entry (known: {', '.join(sorted(pins))})")
    return pins[framework]


def set_pinned_sha256(framework: str, sha256: str, lock: str | os.PathLike = LOCK_PATH) -> None:
    """Rewrite `sif_sha256` of one table in place, keeping the file's comments."""
    if not SHA256_HEX.match(sha256):
        raise ContainerError(f"not a sha256 digest: {sha256!r}")
    text = Path(lock).read_text()
    table = re.search(rf"(?ms)^\[{re.escape(framework)}\]\n(.*?)(?=^\[|\Z)", text)
    if table is None:
        raise ContainerError(f"{lock} has no [{framework}] table")
    body, n = re.subn(r'(?m)^sif_sha256\s*=\s*".*"$', f'sif_sha256 = "{sha256}"', table.group(1))
    if n != 1:
        raise ContainerError(f"{lock}: [{framework}] needs exactly one sif_sha256 line")
    Path(lock).write_text(text[: table.start(1)] + body + text[table.end(1) :])


# ------------------------------------------------------------------ recipes


@dataclass(frozen=True)
class Recipe:
    path: Path
    from_ref: str
    labels: dict[str, str]
    files: list[tuple[str, str]]
    post: list[str]


def parse_recipe(path: str | os.PathLike) -> Recipe:
    """Read a definition file with spython; refuse lines spython would misread."""
    path = Path(path)
    lines = path.read_text().splitlines()
    problems = _spython_pitfalls(lines)
    if problems:
        raise ContainerError(f"{path}: " + "; ".join(problems))
    from spython.main.parse.parsers import SingularityParser

    try:
        parsed = SingularityParser(str(path)).recipe
    except NotImplementedError as error:  # spython accepts only docker bases
        raise ContainerError(f"{path}: {error}") from None
    if len(parsed) != 1:
        raise ContainerError(f"{path}: {len(parsed)} stages; dlbench recipes have one")
    (layer,) = parsed.values()
    labels = {}
    for line in layer.labels:
        key, _, value = line.strip().partition(" ")
        labels[key] = value.strip()
    files = []
    for line in layer.files:
        parts = line.split()
        files.append((parts[0], parts[-1]))
    return Recipe(
        path=path, from_ref=(layer.fromHeader or "").strip(), labels=labels, files=files, post=list(layer.install)
    )


def _spython_pitfalls(lines: list[str]) -> list[str]:
    """spython treats any line containing 'bootstrap', 'from:' or 'stage:' as a header."""
    found = []
    for number, line in enumerate(lines, 1):
        low = line.lower()
        if number > 2 and any(word in low for word in ("bootstrap", "from:", "stage:")):
            found.append(f"line {number} contains 'bootstrap', 'from:' or 'stage:', which spython reads as a header")
    if not (lines and lines[0].strip().lower() == "bootstrap: docker"):
        found.append("line 1 must be 'Bootstrap: docker'")
    if len(lines) < 2 or not lines[1].lower().startswith("from:"):
        found.append("line 2 must be the 'From:' line")
    return found


def check_recipe(pin: ImagePin, repo: Path = REPO_ROOT, recipe: str | os.PathLike | None = None) -> list[str]:
    """Everything wrong with one framework's recipe (default containers/<framework>.def), as sentences."""
    where = Path(recipe) if recipe is not None else pin.recipe_path
    if not where.exists():
        return [f"{pin.framework}: recipe {where} does not exist"]
    try:
        parsed = parse_recipe(where)
    except ContainerError as error:
        return [str(error)]
    name = f"{pin.framework} ({where.relative_to(repo) if where.is_relative_to(repo) else where})"
    problems = []
    missing = [label for label in REQUIRED_LABELS if label not in parsed.labels]
    if missing:
        problems.append(f"{name}: missing labels {', '.join(missing)}")
    if not DIGEST_REF.match(parsed.from_ref):
        problems.append(f"{name}: base {parsed.from_ref!r} is not pinned by digest (registry/name@sha256:<64 hex>)")
    if parsed.from_ref != pin.base.lower():
        problems.append(f"{name}: From {parsed.from_ref!r} differs from images.lock base {pin.base!r}")
    labels = parsed.labels

    def expect(label: str, want: str) -> None:
        if label in labels and labels[label] != want:
            problems.append(f"{name}: label {label} is {labels[label]!r}, expected {want!r}")

    expect("DLBENCH_FRAMEWORK", pin.framework)
    expect("DLBENCH_VERSION", __version__)
    expect("DLBENCH_BASE_IMAGE", pin.base)
    expect("DLBENCH_BASE_TAG", pin.base_tag)
    expect("DLBENCH_FRAMEWORK_SOURCE", pin.framework_source)
    if pin.framework_source not in FRAMEWORK_SOURCES:
        problems.append(f"{name}: framework_source must be one of {sorted(FRAMEWORK_SOURCES)}")
    else:
        expect("DLBENCH_ENV_LOCK_INSTALLED", FRAMEWORK_SOURCES[pin.framework_source])
    lock_rel = f"envs/{pin.framework}.txt"
    expect("DLBENCH_ENV_LOCK", lock_rel)
    problems += _lock_problems(name, labels, repo, lock_rel)
    sources = {src for src, _ in parsed.files}
    unknown = sorted(s for s in sources if s.split("/")[0] not in STAGED)
    if unknown:
        problems.append(f"{name}: %files names {unknown}, which the build directory does not hold")
    if lock_rel not in sources:
        problems.append(f"{name}: %files must copy {lock_rel} into the image")
    if "BUILD_INFO.json" not in sources:
        problems.append(f"{name}: %files must copy BUILD_INFO.json into the image")
    post = "\n".join(parsed.post)
    absent = [package for package in allocator.DEBIAN_PACKAGES if package not in post]
    if absent:
        problems.append(f"{name}: %post must install {', '.join(absent)} (the allocators run.allocator preloads)")
    return problems


def _lock_problems(name: str, labels: dict, repo: Path, lock_rel: str) -> list[str]:
    """The recipe's lock labels against the lock file as it is now."""
    problems = []
    lock_file = repo / lock_rel
    if not lock_file.exists():
        problems.append(f"{name}: {lock_rel} does not exist")
    elif "DLBENCH_ENV_LOCK_SHA256" in labels:
        actual = sha256_file(lock_file)
        if labels["DLBENCH_ENV_LOCK_SHA256"] != actual:
            problems.append(
                f"{name}: label DLBENCH_ENV_LOCK_SHA256 is {labels['DLBENCH_ENV_LOCK_SHA256']} but {lock_rel} "
                f"now hashes to {actual}: review the recipe against the new lock, then update the label"
            )
    if EXTRA_PACKAGES_LABEL in labels and lock_file.exists():
        pinned = locked_versions(lock_file)
        for requirement in labels[EXTRA_PACKAGES_LABEL].split():
            package, _, version = requirement.partition("==")
            want = pinned.get(_normalise(package))
            if want != version:
                problems.append(
                    f"{name}: {EXTRA_PACKAGES_LABEL} installs {requirement} but {lock_rel} pins "
                    f"{f'{package}=={want}' if want else f'no {package}'}"
                )
    return problems


def _normalise(package: str) -> str:
    return re.sub(r"[-_.]+", "-", package).lower()


def locked_versions(lock_file: str | os.PathLike) -> dict[str, str]:
    """name → version of every `name==version` requirement in a pip lock file."""
    found = {}
    for line in Path(lock_file).read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)", line)
        if match:
            found[_normalise(match.group(1))] = match.group(2)
    return found


def build_problems(pin: ImagePin) -> list[str]:
    """Why the image must not be built yet: recipe problems plus an unchecked base digest."""
    problems = check_recipe(pin)
    if not pin.base_digest_checked:
        problems.append(
            f"{pin.framework}: base digest {pin.base} (for {pin.base_tag}) was copied from public material "
            f"({pin.base_digest_source}) and nobody has checked it against the registry: check it "
            f"(skopeo inspect --raw docker://{pin.base_tag}), then set base_digest_checked = true in {LOCK_PATH.name}"
        )
    return problems


# ------------------------------------------------------------------ building


def build_info(repo: Path = REPO_ROOT) -> dict:
    """What the image is built from, copied into it as /opt/dlbench/BUILD_INFO.json."""

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    dirty = git("status", "--porcelain", "--untracked-files=no")
    return {
        "dlbench_version": __version__,
        "git_commit": git("rev-parse", "HEAD"),
        "git_dirty": bool(dirty) if dirty is not None else None,
        "built_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }


def stage(framework: str, directory: str | os.PathLike, lock: str | os.PathLike = LOCK_PATH) -> Path:
    """Fill DIR with the recipe and exactly the files its %files section copies.

    `apptainer build` then runs inside DIR, so relative %files sources mean one thing whether
    Apptainer resolves them against the working directory or the recipe's directory.
    """
    pin = pin_for(framework, lock)
    directory = Path(directory)
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    shutil.copy2(pin.recipe_path, directory / "recipe.def")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO_ROOT / "dlbench", directory / "dlbench", ignore=ignore)
    shutil.copy2(REPO_ROOT / "pyproject.toml", directory / "pyproject.toml")
    (directory / "envs").mkdir()
    shutil.copy2(REPO_ROOT / "envs" / f"{framework}.txt", directory / "envs" / f"{framework}.txt")
    info = build_info() | {"framework": framework, "recipe_sha256": sha256_file(pin.recipe_path), "base": pin.base}
    (directory / "BUILD_INFO.json").write_text(json.dumps(info, indent=1) + "\n")
    return directory / "recipe.def"


# ------------------------------------------------------------------ verification


def verify_image(
    framework: str,
    image: str | os.PathLike,
    lock: str | os.PathLike = LOCK_PATH,
    record: str | os.PathLike | None = None,
) -> dict:
    """Check the image file's sha256 against the lock; raise DigestMismatch naming both digests.

    With `record`, write what was verified (path, sha256, size, mtime) as JSON: the training job
    reads it into its step-log header (dlbench.provenance) instead of hashing the image again.
    """
    pin = pin_for(framework, lock)
    image = Path(image)
    if not image.is_file():
        raise ContainerError(f"image {image} for {framework} does not exist (build it: snakemake container_image)")
    actual = sha256_file(image)
    expected = pin.sif_sha256.strip().lower()
    if not expected:
        raise DigestMismatch(
            f"image {image} ({framework}): no sha256 is pinned in {lock} (sif_sha256 is empty); the file's "
            f"sha256 is {actual}. If this image was built from the checked recipe and passed its tests, "
            f"pin it: python -m dlbench.images.apptainer pin {framework} {image}"
        )
    if actual != expected:
        raise DigestMismatch(
            f"image {image} ({framework}): sha256 {actual} does not match {expected} pinned in {lock}; "
            f"refusing to run {framework} jobs in an image other than the pinned one"
        )
    stat = image.stat()
    result = {
        "framework": framework,
        "image": str(image.resolve()),
        "sha256": actual,
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "lock": str(Path(lock).resolve()),
        "base": pin.base,
        "verified_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    if record is not None:
        Path(record).parent.mkdir(parents=True, exist_ok=True)
        Path(record).write_text(json.dumps(result, indent=1) + "\n")
    return result


# ------------------------------------------------------------------ command line


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m dlbench.images.apptainer", description=__doc__.splitlines()[0])
    p.add_argument("--lock", default=str(LOCK_PATH))
    sub = p.add_subparsers(dest="command", required=True)
    c = sub.add_parser("check", help="check recipes against the lock, the env locks and the labels")
    c.add_argument("frameworks", nargs="*")
    c.add_argument("--for-build", action="store_true", help="also refuse unchecked base digests")
    v = sub.add_parser("verify", help="check an image file's sha256 against the lock")
    v.add_argument("framework")
    v.add_argument("image")
    v.add_argument("--record", default=None)
    pn = sub.add_parser("pin", help="record an image file's sha256 in the lock")
    pn.add_argument("framework")
    pn.add_argument("image")
    s = sub.add_parser("stage", help="make a build directory for one framework; prints the recipe path")
    s.add_argument("framework")
    s.add_argument("directory")
    args = p.parse_args(argv)
    try:
        if args.command == "check":
            pins = load_lock(args.lock)
            names = args.frameworks or sorted(pins)
            problems = []
            for name in names:
                if name not in pins:
                    problems.append(f"{args.lock} has no [{name}] entry")
                    continue
                problems += build_problems(pins[name]) if args.for_build else check_recipe(pins[name])
            for problem in problems:
                print(f"dlbench.images.apptainer: {problem}", file=sys.stderr)
            if not problems:
                print(f"recipes OK: {', '.join(names)}")
            return 1 if problems else 0
        if args.command == "verify":
            result = verify_image(args.framework, args.image, args.lock, args.record)
            print(f"{result['image']}: sha256 {result['sha256']} matches {args.lock}")
            return 0
        if args.command == "pin":
            digest = sha256_file(args.image)
            set_pinned_sha256(args.framework, digest, args.lock)
            print(f"pinned {args.framework}: {args.image} sha256 {digest} in {args.lock}")
            return 0
        if args.command == "stage":
            print(stage(args.framework, args.directory, args.lock))
            return 0
    except ContainerError as error:
        print(f"dlbench.images.apptainer: {error}", file=sys.stderr)
        return 1
    return 2


if __name__ == "__main__":
    sys.exit(main())
