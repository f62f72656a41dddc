"""BERT pre-training examples: masked LM + next sentence, as Google's create_pretraining_data.py.

Input: a corpus in that script's format (one sentence per line, a blank line between
documents) — a file the config names, or, by default, the Python Language Reference that
every CPython ships as `pydoc_data.topics` (the text `help('assignment')` prints: 79 topics,
~465 kB of English technical prose; code and grammar blocks are dropped, paragraphs are
split into sentences). The bert-base-uncased vocabulary cannot be downloaded here, so a
lower-cased WordPiece vocabulary is trained on the corpus with Hugging Face `tokenizers`
(the pytorch environment); ids are < `vocab_size` <= 30522 (BERT-base's embedding rows).

Output `examples.npz` (uncompressed, deterministic bytes), arrays named as the fields of
create_pretraining_data.py's tf.train.Examples, N examples, sequence length L, P = max
predictions per sequence:

    input_ids            int32 [N, L]  [CLS] A [SEP] B [SEP], then 0 ([PAD])
    input_mask           int32 [N, L]  1 for real tokens, 0 for padding
    segment_ids          int32 [N, L]  0 for [CLS] A [SEP], 1 for B [SEP], 0 for padding
    masked_lm_positions  int32 [N, P]  positions of the masked tokens (sorted), 0-padded
    masked_lm_ids        int32 [N, P]  the original token ids there, 0-padded
    masked_lm_weights    float32 [N, P]  1.0 for a real prediction, 0.0 for padding
    next_sentence_labels int32 [N]     1 = B is a random sentence, 0 = B follows A
                                       (Google's and Hugging Face's convention)

`mlm_labels` turns the masked-LM fields into Hugging Face's `labels` (-100 = not predicted).
Stdlib + numpy at module level; `tokenizers` inside the functions that train/apply it.
"""

from __future__ import annotations

import hashlib
import io
import os
import random
import re
import zipfile

import numpy as np

from dlbench.data import DataError, file_entry, require_file, write_manifest

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
PAD, UNK, CLS, SEP, MASK = range(len(SPECIAL_TOKENS))
BERT_VOCAB_SIZE = 30522
DEFAULT_CORPUS = "pydoc_data.topics (the Python Language Reference shipped with CPython)"
FIELDS = {
    "input_ids": np.int32,
    "input_mask": np.int32,
    "segment_ids": np.int32,
    "masked_lm_positions": np.int32,
    "masked_lm_ids": np.int32,
    "masked_lm_weights": np.float32,
    "next_sentence_labels": np.int32,
}
# make_examples' settings from config `data.text`, in the manifest's order ("examples" as "count").
EXAMPLE_SETTINGS = ("examples", "seq_len", "max_predictions", "masked_lm_prob", "short_seq_prob", "seed")
EXAMPLES_NAME, VOCAB_NAME, CORPUS_NAME = "examples.npz", "vocab.txt", "corpus.txt"
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\"'*`])")
_UNDERLINE = re.compile(r"^([*=\-~^])\1{2,}$")


# ---- corpus ----


def _prose_paragraphs(text: str):
    """Paragraphs of reStructuredText-rendered prose: no headings, code or grammar blocks."""
    lines = text.splitlines()
    paragraph: list[str] = []
    for i, line in enumerate(lines):
        stripped = line.strip()
        is_heading = i + 1 < len(lines) and _UNDERLINE.match(lines[i + 1].strip() or "x")
        if not stripped or is_heading or _UNDERLINE.match(stripped):
            if paragraph:
                yield " ".join(paragraph)
            paragraph = []
            continue
        # a block indented beyond list continuations is code, grammar or a table
        if not paragraph and (line.startswith("   ") or stripped.startswith(">>>")):
            continue
        if paragraph or not line.startswith(" "):
            paragraph.append(stripped)
    if paragraph:
        yield " ".join(paragraph)


def sentences_of(paragraph: str) -> list[str]:
    paragraph = re.sub(r"::$", ":", paragraph)
    if "::=" in paragraph or paragraph.count("|") > 2:
        return []
    return [s for s in _SENTENCE_END.split(paragraph) if len(s.split()) >= 3]


def default_corpus() -> tuple[str, str]:
    """(description, corpus text in create_pretraining_data.py's format) from pydoc_data."""
    from pydoc_data.topics import topics

    documents = []
    for name in sorted(topics):
        sentences = [s for p in _prose_paragraphs(topics[name]) for s in sentences_of(p)]
        if sentences:
            documents.append("\n".join(sentences))
    return DEFAULT_CORPUS, "\n\n".join(documents) + "\n"


def read_documents(text: str) -> list[list[str]]:
    """Documents (lists of sentences) from one-sentence-per-line text, blank-line separated."""
    documents, current = [], []
    for line in text.splitlines():
        if line.strip():
            current.append(line.strip())
        elif current:
            documents.append(current)
            current = []
    if current:
        documents.append(current)
    return documents


# ---- vocabulary (tokenizers) ----


def train_vocab(sentences: list[str], vocab_size: int, out_dir: str):
    """A lower-cased BERT WordPiece vocabulary trained on the sentences (writes vocab.txt);
    returns a tokenizer loaded from that file.

    tokenizers' WordPiece trainer numbers the continuing-subword tokens (`##e`) in hash-map
    order, which changes from process to process and, through merge tie-breaking, the
    vocabulary itself (huggingface/tokenizers#1794). Passing every `##<char>` of the corpus
    in sorted order as an initial token fixes their ids, and the vocabulary is the same in
    every run. Encoding then uses a tokenizer loaded from vocab.txt, where they are ordinary
    entries (as in Google's vocab files).
    """
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from tokenizers import BertWordPieceTokenizer

    options = dict(lowercase=True, clean_text=True, strip_accents=None)
    tokenizer = BertWordPieceTokenizer(**options)
    normalize, split = tokenizer.normalizer.normalize_str, tokenizer.pre_tokenizer.pre_tokenize_str
    continuing = sorted({f"##{char}" for s in sentences for word, _ in split(normalize(s)) for char in word[1:]})
    if len(SPECIAL_TOKENS) + 2 * len(continuing) >= vocab_size:
        raise DataError(f"vocab_size {vocab_size}: too small for the corpus's {len(continuing)} characters")
    tokenizer.train_from_iterator(
        sentences,
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[*SPECIAL_TOKENS, *continuing],
        limit_alphabet=1000,
        wordpieces_prefix="##",
        show_progress=False,
    )
    tokenizer.save_model(out_dir)
    tokenizer = BertWordPieceTokenizer(os.path.join(out_dir, VOCAB_NAME), **options)
    for expected, token in enumerate(SPECIAL_TOKENS):
        if tokenizer.token_to_id(token) != expected:
            raise DataError(f"{out_dir}/{VOCAB_NAME}: {token} is not id {expected}")
    return tokenizer


# ---- instances (create_pretraining_data.py's algorithm) ----


def _truncate_pair(a: list[int], b: list[int], max_tokens: int, rng: random.Random) -> None:
    """Drop tokens from the longer segment, at its front or back at random, until they fit."""
    while len(a) + len(b) > max_tokens:
        longer = a if len(a) > len(b) else b
        del longer[0 if rng.random() < 0.5 else -1]


def _mask(tokens: list[int], masked_lm_prob, max_predictions, vocab_size, rng: random.Random):
    """(tokens with masks, sorted positions, original ids): 15 % of non-special positions
    (at most max_predictions, at least 1): 80 % → [MASK], 10 % kept, 10 % a random word."""
    candidates = [i for i, token in enumerate(tokens) if token not in (CLS, SEP)]
    rng.shuffle(candidates)
    count = min(max_predictions, max(1, round(len(tokens) * masked_lm_prob)))
    output = list(tokens)
    chosen = sorted(candidates[:count])
    for position in chosen:
        if rng.random() < 0.8:
            output[position] = MASK
        elif rng.random() >= 0.5:
            output[position] = rng.randint(len(SPECIAL_TOKENS), vocab_size - 1)
    return output, chosen, [tokens[p] for p in chosen]


def _document_instances(documents, index, seq_len, short_seq_prob, rng: random.Random):
    """(tokens_a, tokens_b, is_random_next) from one document, as create_instances_from_document."""
    document = documents[index]
    max_tokens = seq_len - 3
    target = rng.randint(2, max_tokens) if rng.random() < short_seq_prob else max_tokens
    chunk, length, i = [], 0, 0
    while i < len(document):
        chunk.append(document[i])
        length += len(document[i])
        if i == len(document) - 1 or length >= target:
            a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
            a = [t for segment in chunk[:a_end] for t in segment]
            b: list[int] = []
            random_next = len(chunk) == 1 or rng.random() < 0.5
            if random_next and len(documents) > 1:
                other = index
                for _ in range(10):
                    other = rng.randint(0, len(documents) - 1)
                    if other != index:
                        break
                start = rng.randint(0, len(documents[other]) - 1)
                for segment in documents[other][start:]:
                    b += segment
                    if len(b) >= target - len(a):
                        break
                i -= len(chunk) - a_end  # the unused segments start the next instance
            else:
                random_next = False
                b = [t for segment in chunk[a_end:] for t in segment]
            _truncate_pair(a, b, max_tokens, rng)
            if a and b:
                yield a, b, random_next
            chunk, length = [], 0
        i += 1


def make_examples(
    documents: list[list[list[int]]],
    *,
    examples: int,
    seq_len: int,
    max_predictions: int,
    masked_lm_prob: float,
    short_seq_prob: float,
    vocab_size: int,
    seed: int,
) -> dict[str, np.ndarray]:
    """`examples` instances: passes over the documents (dupe_factor) until there are enough,
    shuffled, the first `examples` kept."""
    rng = random.Random(seed)
    documents = [[s for s in d if s] for d in documents]
    documents = [d for d in documents if d]
    instances = []
    for _ in range(1000):
        for index in range(len(documents)):
            instances += _document_instances(documents, index, seq_len, short_seq_prob, rng)
        if len(instances) >= examples or not instances:
            break
    if not instances:
        raise DataError("the corpus yields no sentence pairs (it needs documents with at least one sentence)")
    rng.shuffle(instances)
    arrays = {name: np.zeros((examples, seq_len), np.int32) for name in ("input_ids", "input_mask", "segment_ids")}
    arrays |= {
        name: np.zeros((examples, max_predictions), FIELDS[name]) for name in FIELDS if name.startswith("masked")
    }
    arrays["next_sentence_labels"] = np.zeros(examples, np.int32)
    for n, (a, b, random_next) in enumerate(instances[:examples]):
        tokens = [CLS, *a, SEP, *b, SEP]
        tokens, positions, originals = _mask(tokens, masked_lm_prob, max_predictions, vocab_size, rng)
        arrays["input_ids"][n, : len(tokens)] = tokens
        arrays["input_mask"][n, : len(tokens)] = 1
        arrays["segment_ids"][n, len(a) + 2 : len(tokens)] = 1
        arrays["masked_lm_positions"][n, : len(positions)] = positions
        arrays["masked_lm_ids"][n, : len(positions)] = originals
        arrays["masked_lm_weights"][n, : len(positions)] = 1.0
        arrays["next_sentence_labels"][n] = int(random_next)
    return arrays


# ---- files ----


def save_npz(path: str | os.PathLike, arrays: dict[str, np.ndarray]) -> None:
    """np.savez without its timestamps: the same arrays give the same bytes; np.load reads it."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for name in sorted(arrays):
            buffer = io.BytesIO()
            np.lib.format.write_array(buffer, np.ascontiguousarray(arrays[name]), allow_pickle=False)
            archive.writestr(zipfile.ZipInfo(f"{name}.npy", date_time=(1980, 1, 1, 0, 0, 0)), buffer.getvalue())


def build(out_dir: str | os.PathLike, settings: dict) -> dict:
    """Corpus → vocab.txt (+ corpus.txt for the default corpus) → examples.npz → manifest.
    `settings`: config `data.text` as dlbench.planning.datasets.text_settings resolves it."""
    out_dir = os.fspath(out_dir)
    corpus, vocab_size = settings["corpus"], settings["vocab_size"]
    example_settings = {name: settings[name] for name in EXAMPLE_SETTINGS}
    if not 5 < vocab_size <= BERT_VOCAB_SIZE:
        raise DataError(f"vocab_size {vocab_size}: must be in (5, {BERT_VOCAB_SIZE}]")
    os.makedirs(out_dir, exist_ok=True)
    if corpus is None:
        description, text = default_corpus()
        with open(os.path.join(out_dir, CORPUS_NAME), "w") as f:
            f.write(text)
    else:
        description = os.path.abspath(require_file(corpus, "text corpus"))
        with open(corpus, encoding="utf-8") as f:
            text = f.read()
    documents = read_documents(text)
    sentences = [s for d in documents for s in d]
    if not sentences:
        raise DataError(f"{description}: no sentences in the text corpus")
    tokenizer = train_vocab(sentences, vocab_size, out_dir)
    encoded = iter(tokenizer.encode_batch(sentences, add_special_tokens=False))
    token_documents = [[next(encoded).ids for _ in document] for document in documents]
    arrays = make_examples(token_documents, **example_settings, vocab_size=tokenizer.get_vocab_size())
    examples_path = os.path.join(out_dir, EXAMPLES_NAME)
    save_npz(examples_path, arrays)
    files = [EXAMPLES_NAME, VOCAB_NAME] + ([CORPUS_NAME] if corpus is None else [])
    weights = arrays["masked_lm_weights"]
    return write_manifest(
        out_dir,
        {
            "format": "bert-pretraining-npz",
            "layout": "create_pretraining_data.py fields as int32/float32 arrays in one .npz",
            "corpus": description,
            "corpus_sha256": hashlib.sha256(text.encode()).hexdigest(),
            "documents": len(documents),
            "sentences": len(sentences),
            **{("count" if name == "examples" else name): value for name, value in example_settings.items()},
            "vocab_size": tokenizer.get_vocab_size(),
            "special_tokens": {token: i for i, token in enumerate(SPECIAL_TOKENS)},
            "lowercase": True,
            "next_sentence_labels": "1 = B is a random sentence, 0 = B follows A",
            "mean_masked_per_example": float(weights.sum(axis=1).mean()),
            "random_next_fraction": float(arrays["next_sentence_labels"].mean()),
            "files": [file_entry(os.path.join(out_dir, name), out_dir) for name in files],
        },
    )


# ---- readers ----


def load_examples(directory: str | os.PathLike) -> dict[str, np.ndarray]:
    """The arrays of `<dir>/examples.npz`, their fields and shapes checked."""
    path = require_file(os.path.join(directory, EXAMPLES_NAME), "BERT examples file")
    with np.load(path, allow_pickle=False) as archive:
        arrays = {name: archive[name] for name in archive.files}
    missing = sorted(set(FIELDS) - set(arrays))
    if missing:
        raise DataError(f"{path}: missing fields {', '.join(missing)}")
    n, seq_len = arrays["input_ids"].shape
    predictions = arrays["masked_lm_ids"].shape[1]
    for name, dtype in FIELDS.items():
        expected = (
            (n,) if name == "next_sentence_labels" else (n, predictions if name.startswith("masked") else seq_len)
        )
        if arrays[name].shape != expected or arrays[name].dtype != dtype:
            raise DataError(f"{path}: {name} is {arrays[name].dtype}{arrays[name].shape}, expected {expected}")
    return arrays


def mlm_labels(arrays: dict[str, np.ndarray], ignore_index: int = -100) -> np.ndarray:
    """Hugging Face BertForPreTraining `labels` [N, L] (int64): original ids at masked positions."""
    labels = np.full(arrays["input_ids"].shape, ignore_index, np.int64)
    rows, slots = np.nonzero(arrays["masked_lm_weights"] > 0)
    labels[rows, arrays["masked_lm_positions"][rows, slots]] = arrays["masked_lm_ids"][rows, slots]
    return labels
