"""Why a PaddlePaddle cell cannot run, in words the plug-in and the trainer share. Stdlib only."""

# paddle.amp's autocast casts on GPUs only (docs/frameworks/paddle.md).
AMP_CPU_REASON = (
    "PaddlePaddle 3.3's CPU build leaves paddle.amp.auto_cast a no-op on CPUPlace and has no bfloat16 conv2d CPU kernel"
)
