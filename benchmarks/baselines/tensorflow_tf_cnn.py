"""tf_cnn_benchmarks — the TensorFlow team's own tool, seed 000's source — as a baseline.

    TF_CNN_BENCHMARKS=/path/to/scripts/tf_cnn_benchmarks/tf_cnn_benchmarks.py \
    TF_CNN_PYTHON=/path/to/venv/bin/python \
        python benchmarks/baselines/tensorflow_tf_cnn.py --model resnet50 --batch 8 --image-size 224

Its code is public (tensorflow/benchmarks) and is not part of dlbench: point TF_CNN_BENCHMARKS at
a checkout and TF_CNN_PYTHON at a python with the locked `tensorflow-cpu` plus `tf-keras` of the
same release (it builds its layers with tf.compat.v1.layers, which needs Keras 2). Runs it
the way issue 14 measured it: synthetic data, NHWC, `--variable_update=parameter_server
--local_parameter_device=cpu`, intra-op threads = --threads, inter-op 1, and prints its
"total images/sec" as `images_per_s=`. Its image size is the model's own (224; 299 for inception3).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

from baseline_args import baseline_arguments

# dlbench model names -> tf_cnn_benchmarks' --model
MODELS = {
    "resnet50": "resnet50_v1.5",  # the runners' variant (tf_cnn_benchmarks' `resnet50` is v1)
    "resnet152": "resnet152",  # v1: tf_cnn_benchmarks has no resnet152_v1.5
    "vgg16": "vgg16",
    "inception_v3": "inception3",
    "alexnet": "alexnet",
}
NATIVE_SIZE = {"inception_v3": 299}


def main() -> int:
    p = baseline_arguments(__doc__.splitlines()[0], MODELS, 2)
    args = p.parse_args()
    script, python = os.environ.get("TF_CNN_BENCHMARKS"), os.environ.get("TF_CNN_PYTHON")
    if not script or not python:
        print("tensorflow_tf_cnn: set TF_CNN_BENCHMARKS and TF_CNN_PYTHON (see the docstring)", file=sys.stderr)
        return 2
    if args.image_size != NATIVE_SIZE.get(args.model, 224):
        print(f"tensorflow_tf_cnn: tf_cnn_benchmarks trains {args.model} at its own size only", file=sys.stderr)
        return 2
    cmd = [
        python,
        script,
        "--device=cpu",
        "--data_format=NHWC",
        f"--model={MODELS[args.model]}",
        f"--batch_size={args.batch}",
        f"--num_batches={args.steps}",
        f"--num_warmup_batches={args.warmup}",
        "--variable_update=parameter_server",
        "--local_parameter_device=cpu",
        f"--num_intra_threads={args.threads}",
        "--num_inter_threads=1",
    ]
    env = {**os.environ, "TF_USE_LEGACY_KERAS": "1", "OMP_NUM_THREADS": str(args.threads), "TF_CPP_MIN_LOG_LEVEL": "2"}
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    found = re.search(r"total images/sec: ([0-9.]+)", out.stdout)
    if out.returncode or not found:
        print(out.stdout[-2000:], out.stderr[-2000:], file=sys.stderr)
        return 1
    print(f"images_per_s={float(found.group(1)):.3f} model={args.model} (tf_cnn_benchmarks)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
