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
#                                          # Llama 3.2 1B, bf16; then the pipeline again with
#                                          # torch.compile and a profiled run, the AC rows, then
#                                          # benchmarks/llm_gpu_check.py); with --cpu too
#   STAGES=memory bash benchmarks/device_run.sh --llm   # the memory axes on their own call:
#                                          # PyTorch's selective and full activation checkpointing,
#                                          # 1 repeat (peak memory per rank beside planning's
#                                          # estimate, tokens/s)
#   STAGES=fp8 bash benchmarks/device_run.sh --llm      # fp8 on its own call: Llama 3.2 1B
#                                          # compiled, float8 linears (torchao, carried in
#                                          # .whl-torchao/) beside bf16, tokens/s, MFU of the fp8
#                                          # peak, both losses step by step; with --cpu: emulated
# Stages have their own time limits inside one budget (BUDGET_S), so that one that hangs leaves
# the others their time; each stage's end (ok, exit status, or TIMED OUT) goes to the log and
# to stages.txt, which the archives carry; a stage that fails does not stop the next.
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
budget=${BUDGET_S:-540}
# STAGES: which of the LLM line's stages run (a rerun on a lent machine can pick up the rest).
stages=" ${STAGES:-pipeline compiled memory pytorch jax fp8} "
want() { [[ $stages == *" $1 "* ]]; }
stage() { echo; echo "== [$((SECONDS - start)) s] $*"; }
# run_stage NAME LIMIT_S COMMAND...: at most LIMIT_S and what is left of the budget (less 20 s
# for the archives); its end is recorded, a time-out by name.
run_stage() {
    local name=$1 limit=$2 left rc
    shift 2
    left=$((budget - (SECONDS - start) - 20))
    [ "$left" -lt "$limit" ] && limit=$left
    if [ "$limit" -lt 30 ]; then
        echo "$name: SKIPPED, ${left} s of the ${budget} s budget left" | tee -a "$OUT/stages.txt"
        return 0
    fi
    stage "$name (at most $limit s)"
    timeout -k 10 "$limit" "$@"
    rc=$?
    case $rc in
        0) echo "$name: ok in $((SECONDS - start)) s" ;;
        124 | 137) echo "$name: TIMED OUT after $limit s (what it finished is kept)" ;;
        *) echo "$name: exit status $rc" ;;
    esac | tee -a "$OUT/stages.txt"
}

if [ "$mode" = --cpu ]; then
    torch_python=$repo/.venvs/pytorch/bin/python jax_python=$repo/.venvs/jax/bin/python
    snakemake_python=$repo/.venvs/analysis/bin/python
    overrides="run: {device: cpu, image_size: 32, threads: 2, time_limit_s: 120}
grid: {batch_per_device: [2]}
protocol: {warmup_steps: 1, measured_steps: 3, repeats: 2}"
    check_args=(--device cpu --batch 2 --image-size 32 --warmup 1 --steps 2 --rounds 2)
    llm_args=(--device cpu --model llama_small --batch 2 --seq-len 64 --warmup 1 --steps 3 --rounds 2 --threads 2)
    # fp8 on a CPU: torchao's emulation, eager (Inductor's compile of a CPU step takes minutes here).
    fp8_args=(--device cpu --model llama_small --batch 2 --seq-len 64 --warmup 1 --steps 3 --rounds 2 --threads 2
        --fp8-emulation)
    [ "$workload" = llm ] && overrides="run: {device: cpu, seq_len: 64, threads: 2, time_limit_s: 120}
grid: {models: [llama_small], batch_per_device: [2]}
protocol: {warmup_steps: 2, measured_steps: 3, repeats: 2}"
    budget=${BUDGET_S:-900} pipeline_s=400 check_s=200 compiled_s=300 memory_s=400 fp8_s=200
else
    torch_python=$(command -v python3) jax_python=$(command -v python3) snakemake_python=$(command -v python3)
    overrides=""
    check_args=(--batch 128 --warmup 8 --steps 25 --rounds 4)
    # Llama 3.2 1B, 4 x 2048 tokens: a step is 0.20 s (PyTorch) to 0.23 s (JAX) on an H200;
    # each check builds the runner and the reference in one process (62 GiB with PyTorch).
    llm_args=(--device cuda --model llama3_1b --batch 4 --seq-len 2048 --warmup 3 --steps 10 --rounds 4)
    # fp8: both runners compiled (float8's casts fused by Inductor, as torchtitan trains it);
    # not run yet (docs/frameworks/llm.md, "fp8"): budget for two compiles of about a minute.
    fp8_args=(--device cuda --model llama3_1b --batch 4 --seq-len 2048 --warmup 3 --steps 10 --rounds 3 --compile)
    pipeline_s=${PIPELINE_S:-300} check_s=${CHECK_S:-100} compiled_s=${COMPILED_S:-240} memory_s=${MEMORY_S:-500}
    fp8_s=${FP8_S:-300}
    # Seen on an H200 (docs/gpu.md, 2026-11-28): the pipeline's six runs 293 s (PyTorch 14 s a
    # run, JAX 68-78 s: 57-61 s of it initialising the state), compiled 146 s (its first run
    # 68 s: Inductor's compile), memory 43 s, the JAX check 2 min with two arms. One 600 s
    # call: STAGES="pipeline compiled memory jax" BUDGET_S=585 PIPELINE_S=390 COMPILED_S=240
    # MEMORY_S=100 CHECK_S=180 ran the three pipelines; the JAX check needs a second call.
    [ "$workload" = llm ] && pipeline_s=${PIPELINE_S:-500} check_s=${CHECK_S:-200}
fi

stage "the machine"
nvidia-smi || echo "nvidia-smi: not here"
nvidia-smi --query-gpu=name,driver_version,memory.total,power.limit,clocks.max.sm --format=csv || true
"$torch_python" - <<'EOF'
import importlib, platform, sys
print("python", platform.python_version(), sys.executable)
for name in ("torch", "torchvision", "torchao", "transformers", "jax", "jaxlib", "flax", "optax", "numpy", "pandas",
             "pynvml"):
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

cat >"$work/site.yaml" <<EOF
run:
  python: {pytorch: $torch_python, jax: $jax_python}
EOF
[ -n "$overrides" ] && printf '%s\n' "$overrides" >"$work/overrides.yaml" || echo "{}" >"$work/overrides.yaml"
# JAX compiles its step in every process: its persistent cache lets repeats 2 and 3 reuse it.
export JAX_COMPILATION_CACHE_DIR="$work/jax-cache"

# pipeline DIR ARCHIVE [CONFIG...]: the grid in DIR, then its archive in $OUT: raw step logs,
# tables, figures, report, the config files in merge order and stages.txt.
pipeline() {
    local name=$1 dir=$work/$1 archive=$2 configs=$work/configs-$1
    shift 2
    mkdir -p "$dir" "$configs"
    cp "$grid" "$configs/1-$(basename "$grid")"
    cp "$work/site.yaml" "$configs/2-site.yaml"
    cp "$work/overrides.yaml" "$configs/3-overrides.yaml"
    local n=4 extra
    for extra in "$@"; do cp "$extra" "$configs/$n-$(basename "$extra")" && n=$((n + 1)); done
    run_stage "pipeline $name: $grid in the site's Python" "$pipeline_s" \
        "$snakemake_python" -m snakemake -s "$repo/Snakefile" -d "$dir" --profile "$repo/profiles/local" \
        --cores "$(nproc)" --resources gpu=1 --scheduler greedy --configfile "$configs"/*.yaml
    cat "$dir/results/tables/cells.md" 2>/dev/null | head -40
    cat "$dir/results/audit/verdict.txt" 2>/dev/null
    cp "$OUT/stages.txt" "$dir/stages.txt" 2>/dev/null
    stage "the archive $archive"
    tar -C "$work" -czf "$OUT/$archive" --transform "s,^configs-$name,configs,;s,^$name/,pipeline/," "configs-$name" \
        $(cd "$work" && ls -d "$name/results" "$name/logs" "$name/.snakemake/log" "$name/stages.txt" 2>/dev/null) ||
        echo "tar: failed"
}

want pipeline && pipeline pipeline gpu_campaign.tar.gz

if [ "$workload" = llm ]; then
    # torch.compile's gain in the pipeline itself: PyTorch again, compiled (Inductor's cache
    # lets repeats 2 and 3 skip most of the compile), with one profiled run (repeat 0, config
    # `profile`): where the compiled step's time goes, the device kernels by class.
    printf 'grid: {frameworks: [pytorch]}\nrun: {compile: true}\nprofile: true\n' >"$work/compiled.yaml"
    if want compiled; then
        pipeline_s=$compiled_s pipeline compiled gpu_campaign_compiled.tar.gz "$work/compiled.yaml"
        profiled=$(ls -d "$work"/compiled/results/runs/pytorch/*/*/*/*/*/*/rep0 2>/dev/null)
        [ -n "$profiled" ] && "$torch_python" benchmarks/gpu_kernel_breakdown.py $profiled --json "$OUT/profile_breakdown.json"
    fi
    # The memory axes (docs/memory.md), PyTorch's: selective and full checkpointing at one
    # micro-batch beside the pipeline's none; the tables hold the measured peak beside the estimate.
    cat >"$work/memory.yaml" <<'EOF'
grid:
  frameworks: [pytorch]
  activation_checkpointing: [selective, full]
protocol: {repeats: 1}
EOF
    want memory && pipeline_s=$memory_s pipeline memory gpu_campaign_memory.tar.gz "$work/memory.yaml"
    # Each runner beside transformers' definition of the same Llama, in one process per framework.
    want pytorch && run_stage "llm_gpu_check pytorch" "$check_s" "$torch_python" benchmarks/llm_gpu_check.py \
        --framework pytorch "${llm_args[@]}" --json "$OUT/llm_check_pytorch.json"
    # FlaxLlamaForCausalLM left transformers after 4.57: its wheels in a folder of their own.
    flax_path=$PYTHONPATH
    if compgen -G ".whl-flax/*.whl" >/dev/null; then
        "$jax_python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target "$work/flax-reference" .whl-flax/*.whl && flax_path=$work/flax-reference:$PYTHONPATH
    fi
    # JAX_ARMS: the check's arms (xla-attention adds a second runner with XLA's attention).
    want jax && PYTHONPATH=$flax_path run_stage "llm_gpu_check jax" "$check_s" "$jax_python" benchmarks/llm_gpu_check.py \
        --framework jax "${llm_args[@]}" --arms ${JAX_ARMS:-window reference} --json "$OUT/llm_check_jax.json"
    # fp8 (docs/frameworks/llm.md, "fp8"): the Llama in float8 beside the same Llama in bf16;
    # torchao from .whl-torchao/ (fetch_wheels.sh torchao; 3.2 MiB) where the Python lacks it.
    # Two Llama 3.2 1B runners in one process: about the PyTorch check's 62 GiB.
    if want fp8; then
        torchao_path=$PYTHONPATH
        if ! "$torch_python" -c "import torchao" 2>/dev/null && compgen -G ".whl-torchao/*.whl" >/dev/null; then
            "$torch_python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
                --target "$work/torchao" .whl-torchao/*.whl && torchao_path=$work/torchao:$PYTHONPATH
        fi
        PYTHONPATH=$torchao_path run_stage "llm_gpu_check fp8" "$fp8_s" "$torch_python" \
            benchmarks/llm_gpu_check.py --framework pytorch "${fp8_args[@]}" --precision fp8 --arms window amp \
            --json "$OUT/llm_check_fp8.json"
    fi
else
    flops=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['train_flops_per_sample'] or 0)" \
        "$work/pipeline/results/flops/resnet50.json" 2>/dev/null || echo 0)
    run_stage "gpu_check: runner (window sync) vs per-step sync vs bare loop" "$check_s" \
        "$torch_python" benchmarks/gpu_check.py "${check_args[@]}" --precisions fp32 amp --compile off \
        --flops-per-sample "$flops"
fi
ls -la "$OUT"
stage "done"
cat "$OUT/stages.txt"
