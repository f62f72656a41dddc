"""The fp8 precision in PyTorch: torchao's float8 training (`convert_to_float8_training`), its
recipe recorded from the converted modules (docs/frameworks/llm.md, "float8"). Each converted
`nn.Linear` becomes a `Float8Linear` that casts its input, weight and output gradient to float8
with dynamic tensorwise scales (amax over the tensor each step: torchao's default recipe, the one
torchtitan calls "tensorwise") and multiplies in float8 (`torch._scaled_mm`); the rest of the
model trains as amp does (bf16). Emulated (`Float8LinearConfig(emulate=True)`), the same casts
and scales run and the matmul is a float32 `mm` of the float8 values: the numerics of float8
training, on any device, at no speed worth measuring. Importing this module does not import
torch or torchao: the runner calls it with torch imported.
"""

from __future__ import annotations

import dataclasses

from dlbench.devices import capability_lacking, precision_lacking

# The float8 matmul needs both dimensions of a weight divisible by 16 (torch._scaled_mm; as
# torchtitan's module filter).
DIMENSION_MULTIPLE = 16


def device_problem(torch, device, emulate: bool) -> str | None:
    """Why the run's device cannot train in float8 (None: it can, or `emulate` asks for none of
    its matmuls): a CPU, or a CUDA device below compute capability 8.9."""
    if emulate:
        return None
    if device.type != "cuda":
        return precision_lacking("fp8", device.type)
    return capability_lacking("fp8", torch.cuda.get_device_name(device), torch.cuda.get_device_capability(device))


def convert(torch, model, keep: tuple[str, ...], emulate: bool) -> dict:
    """Swap the model's linear layers for torchao's Float8Linear in place, but those whose
    qualified name ends with one of `keep` (the workload's: an LLM's output head) and those whose
    dimensions float8 cannot multiply; returns the header's `float8` record, read back from the
    converted modules."""
    import torchao
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    def converts(linear, name: str) -> bool:  # asked of each nn.Linear, with its qualified name
        kept = any(name == k or name.endswith("." + k) for k in keep)
        return not kept and all(size % DIMENSION_MULTIPLE == 0 for size in linear.weight.shape)

    convert_to_float8_training(model, module_filter_fn=converts, config=Float8LinearConfig(emulate=emulate))
    return record(torchao.__version__, model, torch.nn.Linear)


def record(version: str, model, linear) -> dict:
    """The header's `float8`: torchao's version, the recipe of the converted modules' config
    (each cast's scaling, granularity and dtype, emulation), which linear layers it converted
    (their names without the block index, and how many) and which it kept in high precision."""
    converted = {name: m for name, m in model.named_modules() if type(m).__name__ == "Float8Linear"}
    kept = [name for name, m in model.named_modules() if isinstance(m, linear) and name not in converted]
    configs = {repr(m.config) for m in converted.values()}
    if len(configs) > 1:
        raise ValueError(f"float8: the converted modules have {len(configs)} configs; one was given")
    config = next(iter(converted.values())).config if converted else None
    return {
        "name": "torchao.float8.convert_to_float8_training",
        "torchao": version,
        "recipe": _recipe(config) if config is not None else None,
        "emulate": bool(config.emulate) if config is not None else None,
        "converted": len(converted),
        "converted_modules": sorted({_generic(name) for name in converted}),
        "kept_high_precision": sorted({_generic(name) for name in kept}),
    }


def _recipe(config) -> dict:
    """Each cast of the config as `dynamic tensorwise float8_e4m3fn`, and the gemms' settings."""
    settings = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    casts = {
        name.removeprefix("cast_config_"): " ".join(
            (c.scaling_type.value, c.scaling_granularity.value, str(c.target_dtype).removeprefix("torch."))
        )
        for name, c in settings.items()
        if name.startswith("cast_config_")
    }
    gemms = {
        name.removeprefix("gemm_config_"): {"use_fast_accum": c.use_fast_accum}
        for name, c in settings.items()
        if name.startswith("gemm_config_")
    }
    return {
        "casts": casts,
        "gemms": gemms,
        "enable_fsdp_float8_all_gather": config.enable_fsdp_float8_all_gather,
        "round_scales_to_power_of_2": config.round_scales_to_power_of_2,
    }


def _generic(name: str) -> str:
    """A module's name with its list indices as `*`: blocks.3.attention.q → blocks.*.attention.q."""
    return ".".join("*" if part.isdigit() else part for part in name.split("."))
