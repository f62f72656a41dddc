"""The training workload every runner trains, in numbers: BERT-base's sizes, the optimisers'
settings and ImageNet's normalisation. Stdlib only (imported inside the framework
environments); docs/frameworks/ says how each framework uses them."""

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

# CNNs: SGD with momentum; BERT: Adam. ADAM_EPSILON is Google's BERT optimiser's (the
# TensorFlow and MXNet runners use it; the PyTorch runner keeps torch's default, 1e-8).
SGD_LR = 0.01
SGD_MOMENTUM = 0.9
ADAM_LR = 1e-4
ADAM_EPSILON = 1e-6

# ImageNet's per-channel mean and standard deviation on the 0-255 scale, as torchvision's
# models expect them.
IMAGENET_MEAN = (0.485 * 255, 0.456 * 255, 0.406 * 255)
IMAGENET_STD = (0.229 * 255, 0.224 * 255, 0.225 * 255)
