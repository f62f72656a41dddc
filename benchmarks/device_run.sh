#!/usr/bin/env bash
# The one prepared call on a lent accelerator (docs/gpu.md, "The device run"). In about nine
# minutes it prints the machine and the framework versions it finds, runs the pipeline itself
# on config/grids/gpu_single.yaml in the site's own Python (run.python: the machine's
# python3), then benchmarks/gpu_check.py (runner vs bare loop, window vs per-step sync), and
# packs the raw step logs, tables, figures and report into $OUT/gpu_campaign.tar.gz.
#
#   bash benchmarks/device_run.sh          # on the GPU machine (the device tool sets $OUT)
#   bash benchmarks/device_run.sh --cpu    # the same path here, first: the venvs stand in for
#                                          # the site's Python, the CPU for the GPU, toy sizes
#   bash benchmarks/device_run.sh --llm    # the LLM line instead (config/grids/gpu_single_llm.yaml:
#                                          # Llama 3.2 1B, bf16; then benchmarks/llm_overhead.py
#                                          # for PyTorch and JAX at llama_small); with --cpu too
# Stages have their own time limits, so that one that hangs leaves the others their time;
# a stage that fails is reported and the next one still runs.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
mode=--gpu workload=cnn
for arg in "$@"; do
    case $arg in
        --cpu | --gpu) mode=$arg ;;
        --llm) workload=llm ;;
        *) echo "usage: $0 [--cpu] [--llm]" >&2 && exit 2 ;;
    esac
done
grid=config/grids/gpu_single.yaml
[ "$workload" = llm ] && grid=config/grids/gpu_single_llm.yaml
OUT=${OUT:-$repo/device-out}
work=${DEVICE_WORK:-$(mktemp -d)}
mkdir -p "$OUT" "$work"
exec > >(tee "$OUT/device_run.log") 2>&1
start=$SECONDS
stage() { echo; echo "== [$((SECONDS - start)) s] $*"; }

if [ "$mode" = --cpu ]; then
    torch_python=$repo/.venvs/pytorch/bin/python jax_python=$repo/.venvs/jax/bin/python
    snakemake_python=$repo/.venvs/analysis/bin/python
    overrides="run: {device: cpu, image_size: 32, threads: 2, time_limit_s: 120}
grid: {batch_per_device: [2]}
protocol: {warmup_steps: 1, measured_steps: 3, repeats: 2}"
    check_args=(--device cpu --batch 2 --image-size 32 --warmup 1 --steps 2 --rounds 2)
    llm_args=(--device cpu --precision amp --batch 2 --seq-len 64 --warmup 2 --steps 3 --rounds 2)
    [ "$workload" = llm ] && overrides="run: {device: cpu, seq_len: 64, threads: 2, time_limit_s: 120}
grid: {models: [llama_small], batch_per_device: [2]}
protocol: {warmup_steps: 2, measured_steps: 3, repeats: 2}"
    pipeline_s=600 check_s=300
else
    torch_python=$(command -v python3) jax_python=$(command -v python3) snakemake_python=$(command -v python3)
    overrides=""
    check_args=(--batch 128 --warmup 8 --steps 25 --rounds 4)
    llm_args=(--device cuda --precision amp --batch 8 --seq-len 2048 --warmup 10 --steps 50 --rounds 4)
    # The LLM line's check starts 16 processes (4 rounds, 2 arms, 2 frameworks): 200 s.
    checks_default=100
    [ "$workload" = llm ] && checks_default=200
    pipeline_s=${PIPELINE_S:-300} check_s=${CHECK_S:-$checks_default}
fi

stage "the machine"
nvidia-smi || echo "nvidia-smi: not here"
nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm --format=csv || true
"$torch_python" - <<'EOF'
import importlib, platform, sys
print("python", platform.python_version(), sys.executable)
for name in ("torch", "torchvision", "jax", "jaxlib", "flax", "optax", "numpy", "pandas", "pynvml"):
    try:
        module = importlib.import_module(name)
        print(f"{name} {getattr(module, '__version__', '?')}")
    except Exception as error:  # a missing one is a finding, not a stop
        print(f"{name}: not importable ({error})")
try:
    import torch
    print("torch CUDA", torch.version.cuda, "cuDNN", torch.backends.cudnn.version(),
          "GPU", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none")
except Exception as error:
    print("torch: no CUDA device", error)
EOF

stage "Snakemake and its needs, carried as wheels (benchmarks/device/wheels.txt)"
snakemake_python=${SNAKEMAKE_PYTHON:-$snakemake_python}
if ! "$snakemake_python" -c "import snakemake" 2>/dev/null && compgen -G ".whl/*.whl" >/dev/null; then
    "$snakemake_python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$work/site" .whl/*.whl && export PYTHONPATH="$work/site"
    "$snakemake_python" -m pip check | grep -v "requires pulp" || true  # pulp is left out (wheels.txt)
fi
# The workflow and its scripts import dlbench from this checkout (a venv has it on a .pth).
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$repo"
"$snakemake_python" -m snakemake --version || echo "snakemake: not importable"

stage "the pipeline: $grid in the site's Python ($torch_python)"
cat >"$work/site.yaml" <<EOF
run:
  python: {pytorch: $torch_python, jax: $jax_python}
EOF
[ -n "$overrides" ] && printf '%s\n' "$overrides" >"$work/overrides.yaml" || echo "{}" >"$work/overrides.yaml"
mkdir -p "$work/pipeline"
# JAX compiles ResNet-50 in every process: its persistent cache lets repeats 2 and 3 reuse it.
export JAX_COMPILATION_CACHE_DIR="$work/jax-cache"
timeout -k 10 "$pipeline_s" "$snakemake_python" -m snakemake -s "$repo/Snakefile" -d "$work/pipeline" \
    --profile "$repo/profiles/local" --cores "$(nproc)" --resources gpu=1 --scheduler greedy \
    --configfile "$repo/$grid" "$work/site.yaml" "$work/overrides.yaml"
echo "pipeline exit status: $?"
cat "$work/pipeline/results/tables/cells.md" 2>/dev/null | head -40
cat "$work/pipeline/results/audit/verdict.txt" 2>/dev/null

if [ "$workload" = llm ]; then
    # Each framework's runner against its bare loop (the same Llama and AdamW, no harness).
    for framework in pytorch jax; do
        stage "llm_overhead: the $framework runner vs its bare loop at llama_small"
        python=$torch_python
        [ "$framework" = jax ] && python=$jax_python
        timeout -k 10 $((check_s / 2)) "$snakemake_python" benchmarks/llm_overhead.py --framework "$framework" \
            --python "$python" "${llm_args[@]}" 2>&1 | tee -a "$OUT/llm_overhead.txt"
    done
else
    stage "gpu_check: runner (window sync) vs per-step sync vs bare loop"
    flops=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['train_flops_per_sample'] or 0)" \
        "$work/pipeline/results/flops/resnet50.json" 2>/dev/null || echo 0)
    timeout -k 10 "$check_s" "$torch_python" benchmarks/gpu_check.py "${check_args[@]}" \
        --precisions fp32 amp --compile off --flops-per-sample "$flops" 2>&1 | tee "$OUT/gpu_check.txt"
fi

stage "the archive: raw step logs, tables, figures, report, and the config files in merge order"
mkdir -p "$work/configs"
cp config/config.yaml "$work/configs/1-config.yaml"
cp "$grid" "$work/configs/2-$(basename "$grid")"
cp "$work/site.yaml" "$work/configs/3-site.yaml"
cp "$work/overrides.yaml" "$work/configs/4-overrides.yaml"
tar -C "$work" -czf "$OUT/gpu_campaign.tar.gz" configs \
    $(cd "$work" && ls -d pipeline/results pipeline/logs pipeline/.snakemake/log 2>/dev/null) || echo "tar: failed"
ls -la "$OUT"
stage "done"
