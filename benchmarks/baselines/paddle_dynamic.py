"""The plain dynamic-graph PaddlePaddle loop (`paddle_static.py --mode dynamic`), a baseline file
of its own for harness_overhead.py, which passes only the common options.

    .venvs/paddle/bin/python benchmarks/baselines/paddle_dynamic.py \
        --model resnet50 --batch 8 --image-size 224 --steps 20 --warmup 5 --threads 2
"""

from paddle_static import main

if __name__ == "__main__":
    main(default_mode="dynamic")
