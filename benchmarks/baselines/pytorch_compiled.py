"""pytorch_eager.py's loop under `torch.compile` (TorchInductor), as a yardstick for the runner.

    .venvs/pytorch/bin/python benchmarks/baselines/pytorch_compiled.py \
        --model resnet50 --batch 8 --image-size 224 --steps 20 --warmup 5 --threads 2 \
        [--mode default] [--no-compile-optimizer]

The model is compiled (forward and, through AOTAutograd, backward; static shapes), and so is
the optimizer step (Inductor fuses the foreach SGD-momentum update into one kernel), as
PyTorch's own recipes do. Compilation happens in the first warm-up step: its time is printed
apart ("first step N s", Inductor's on-disk cache makes later processes faster) and is
outside the measured window. Mode "default": "max-autotune-no-cudagraphs" was no faster here
(ResNet-50 bs 8 224 px, 3 rotating rounds: medians 0.68 vs 0.73 img/s on the loaded shared
machine) and its cold compile took 1.8x as long (132 s vs 75 s); "reduce-overhead" and
"max-autotune" only add CUDA graphs to those, which a CPU run has none of.
"""

from __future__ import annotations

from pytorch_eager import build, measure, parse_args, report, train_step_of

MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def _options(p) -> None:
    p.add_argument("--mode", default="default", choices=MODES)
    p.add_argument(
        "--no-compile-optimizer", dest="compile_optimizer", action="store_false", help="eager optimizer.step"
    )


def main() -> None:
    args = parse_args(__doc__.splitlines()[0], extra=_options)
    training = build(args)
    torch = training.torch
    forward = torch.compile(training.model, mode=args.mode, dynamic=False)
    optimizer_step = None
    if args.compile_optimizer:
        # fullgraph=False: the optimizer's step has Python-side bookkeeping Dynamo may split on.
        optimizer_step = torch.compile(training.optimizer.step, mode=args.mode, dynamic=False)
    first_step, elapsed, loss = measure(train_step_of(training, forward, optimizer_step), args)
    label = f"compiled mode={args.mode} optimizer={'compiled' if args.compile_optimizer else 'eager'}"
    report(torch, args, label, elapsed, loss, extra=f", first step {first_step:.1f} s")


if __name__ == "__main__":
    main()
