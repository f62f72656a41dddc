"""PyTorch model definitions and synthetic batches (docs/frameworks/pytorch.md). Importing
this module does not import torch."""

from __future__ import annotations

from dlbench.models import IMAGE_CLASSES
from dlbench.recipe import BERT_BASE, MASK_TOKEN_ID, MLM_WEIGHT_EPSILON

# model -> (torchvision constructor, its keyword arguments)
TORCHVISION_BUILDERS = {
    "resnet50": ("resnet50", {}),
    "resnet152": ("resnet152", {}),
    "vgg16": ("vgg16", {}),
    # aux_logits off: the auxiliary head is a training-time regulariser whose cost
    # the CAICT/tf_cnn numbers do not include either.
    "inception_v3": ("inception_v3", {"aux_logits": False, "init_weights": True}),
    "alexnet": ("alexnet", {}),
}

# BertConfig's names for the BERT_BASE entries it takes (the rest are Hugging Face defaults).
_BERT_CONFIG_KEYS = (
    "vocab_size",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "intermediate_size",
    "hidden_dropout_prob",
    "attention_probs_dropout_prob",
    "max_position_embeddings",
    "type_vocab_size",
    "layer_norm_eps",
    "initializer_range",
)


def image_model(model: str):
    """A torchvision CNN, untrained, ImageNet's 1000 classes."""
    import torchvision

    name, kwargs = TORCHVISION_BUILDERS[model]
    return getattr(torchvision.models, name)(weights=None, num_classes=IMAGE_CLASSES, **kwargs)


def bert_for_pretraining():
    """BERT-base (uncased) pre-training model from its configuration: masked-LM and
    next-sentence heads, MLM decoder tied to the word embeddings (110.1 M parameters)."""
    from transformers import BertConfig, BertForPreTraining

    return BertForPreTraining(BertConfig(**{key: BERT_BASE[key] for key in _BERT_CONFIG_KEYS}))


# The fields of a pre-training batch, in the real-data loader's order (pipeline.text_loader).
PRETRAINING_FIELDS = ("input_ids", "token_type_ids", "attention_mask", "labels", "next_sentence_label")


def pretraining_loss(torch, outputs, labels, next_sentence_label):
    """dlbench.recipe's reference loss of the batch from BertForPreTraining's logits (its own
    `loss` divides by the count of masked slots, without the reference's + 1e-5): `labels` is
    -100 where a position is no masked-LM target (weight 0)."""
    functional = torch.nn.functional
    logits = outputs.prediction_logits.float().flatten(0, 1)
    weights = (labels.flatten() != -100).to(logits.dtype)
    slots = functional.cross_entropy(logits, labels.flatten().clamp(min=0), reduction="none")
    mlm = (slots * weights).sum() / (weights.sum() + MLM_WEIGHT_EPSILON)
    return mlm + functional.cross_entropy(outputs.seq_relationship_logits.float(), next_sentence_label)


def pretraining_batch(torch, spec, generator) -> dict:
    """A synthetic pre-training batch: random tokens, 15 % of positions masked-LM targets,
    random next-sentence labels; sentence B is the second half of the sequence."""
    batch, seq = spec.batch, spec.seq_len
    input_ids = torch.randint(1000, BERT_BASE["vocab_size"], (batch, seq), generator=generator)
    masked = torch.rand(batch, seq, generator=generator) < BERT_BASE["max_predictions_per_seq_fraction"]
    labels = torch.where(masked, input_ids, torch.full_like(input_ids, -100))
    input_ids = torch.where(masked, torch.full_like(input_ids, MASK_TOKEN_ID), input_ids)
    token_type_ids = torch.zeros(batch, seq, dtype=torch.long)
    token_type_ids[:, seq // 2 :] = 1
    return {
        "input_ids": input_ids,
        "token_type_ids": token_type_ids,
        "attention_mask": torch.ones(batch, seq, dtype=torch.long),
        "labels": labels,
        "next_sentence_label": torch.randint(0, 2, (batch,), generator=generator),
    }


def image_batch(torch, spec, size: int, generator):
    """A synthetic image batch (normal noise) and its labels, on the CPU."""
    images = torch.randn(spec.batch, 3, size, size, generator=generator)
    labels = torch.randint(0, IMAGE_CLASSES, (spec.batch,), generator=generator)
    return images, labels
