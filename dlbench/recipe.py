"""The training recipe every runner trains, in numbers: BERT-base's sizes, the optimisers'
settings and ImageNet's normalisation. Stdlib only (imported inside the framework
environments); docs/frameworks/ says how each framework uses them."""

import os

# BERT-base (Devlin et al. 2018; google-research/bert's bert_config.json for
# uncased_L-12_H-768_A-12), in Google's and Hugging Face's key names.
# max_predictions_per_seq_fraction: the share of a sequence's tokens that are masked-LM
# targets (create_pretraining_data's masked_lm_prob).
BERT_BASE = {
    "vocab_size": 30522,
    "hidden_size": 768,
    "num_hidden_layers": 12,
    "num_attention_heads": 12,
    "intermediate_size": 3072,
    "hidden_dropout_prob": 0.1,
    "attention_probs_dropout_prob": 0.1,
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    "layer_norm_eps": 1e-12,
    "initializer_range": 0.02,
    "max_predictions_per_seq_fraction": 0.15,
}
# Masked-LM slots per sequence at length 128 (Google's pre-training scripts' max_predictions_per_seq).
MAX_PREDICTIONS_PER_SEQ = 20
MASK_TOKEN_ID = 103  # [MASK] in BERT's uncased vocabulary
# The masked-LM loss of a device's batch, in every runner as in google-research/bert's
# run_pretraining.get_masked_lm_output: sum(weight x loss) / (sum(weight) + 1e-5) over its
# prediction slots (padding slots weigh 0); the next-sentence loss is the batch mean.
MLM_WEIGHT_EPSILON = 1e-5

# CNNs: SGD with momentum, its learning rate scaled linearly with the global batch (Goyal
# et al. 2017, "Accurate, Large Minibatch SGD"), from 0.05 per 256 samples: half their 0.1,
# the largest rate whose real-data loss fell in every run at the default's batch 8
# (docs/sanity.md has the measurements); BERT: Adam, every runner at Google's BERT optimiser's
# epsilon. The step-log header records what each framework's optimizer holds
# (dlbench.runners._hyperparameters), read back once it is built.
SGD_LR_PER_256 = 0.05
SGD_MOMENTUM = 0.9
ADAM_LR = 1e-4
ADAM_EPSILON = 1e-6
# A factor on the CNNs' SGD learning rate, for tests that plant a diverging run (e.g. 1e5).
LR_SCALE_ENV = "DLBENCH_LR_SCALE"

# ImageNet's per-channel mean and standard deviation on the 0-255 scale, as torchvision's
# models expect them.
IMAGENET_MEAN = (0.485 * 255, 0.456 * 255, 0.406 * 255)
IMAGENET_STD = (0.229 * 255, 0.224 * 255, 0.225 * 255)


def lr_scale() -> float:
    """The factor DLBENCH_LR_SCALE puts on the SGD learning rate (1 when unset)."""
    raw = os.environ.get(LR_SCALE_ENV, "").strip()
    try:
        scale = float(raw) if raw else 1.0
    except ValueError:
        raise ValueError(f"{LR_SCALE_ENV}={raw!r} is not a number") from None
    if not scale > 0:
        raise ValueError(f"{LR_SCALE_ENV}={raw!r} must be a positive number")
    return scale


def sgd_lr(spec) -> float:
    """The CNNs' SGD learning rate for a run (`spec`: a RunSpec): 0.05 × global batch / 256."""
    return SGD_LR_PER_256 * spec.batch * spec.coords.devices / 256 * lr_scale()
