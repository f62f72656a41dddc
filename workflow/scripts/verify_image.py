"""Before a framework's training jobs run in its image: is the image the one images.lock pins?

    python workflow/scripts/verify_image.py --framework F --image F.sif [--lock L] [--record R] [--log LOG]

Exit 0 and write RECORD (the image path, its sha256, size and mtime: the training job's step-log
header takes the digest from there instead of hashing the image again); exit 1 with one line
naming the image and both digests when the sha256 differs or nothing is pinned. Stdlib only.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from dlbench.images.apptainer import LOCK_PATH, ContainerError, verify_image  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--framework", required=True)
    p.add_argument("--image", required=True)
    p.add_argument("--lock", default=str(LOCK_PATH))
    p.add_argument("--record", default=None)
    p.add_argument("--log", default=None, help="also write the outcome here")
    args = p.parse_args(argv)
    try:
        result = verify_image(args.framework, args.image, args.lock, args.record)
        message, code = f"verify_image: {result['image']}: sha256 {result['sha256']} matches {args.lock}", 0
    except ContainerError as error:
        message, code = f"verify_image: ERROR: {error}", 1
    print(message, file=sys.stderr if code else sys.stdout)
    if args.log:
        Path(args.log).parent.mkdir(parents=True, exist_ok=True)
        Path(args.log).write_text(message + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
