"""Real text for the LLMs: a corpus tokenised byte-level and packed into
fixed-length sequences (docs/frameworks/llm.md, Real text).

Corpus: a UTF-8 file the config names (`data.text.corpus`; its blank-line-separated
documents), or, by default, the Python Language Reference that CPython ships as
`pydoc_data.topics` (79 topics, ~466 kB for CPython 3.11; each topic a document, in sorted
order). Its sha256 and origin go into the manifest, and from there into each run's header.

Tokens: a document's UTF-8 bytes are ids 0-255, and END_OF_TEXT (256) follows each document,
as GPT-2's <|endoftext|> does: a vocabulary of 257, which every Llama of dlbench.llm covers;
nothing is trained and nothing downloaded. The documents' tokens, concatenated, are cut into
rows of seq_len + 1 (a row's first seq_len tokens are the inputs, its last seq_len the
next-token targets), the remainder dropped.

Output `tokens.npy`: uint16 [N, seq_len + 1] (np.save: the same corpus gives the same bytes).
Stdlib + numpy only.
"""

from __future__ import annotations

import hashlib
import os
import sys

import numpy as np

from dlbench.data import DataError, file_entry, read_manifest, require_file, write_manifest

BYTES = 256
END_OF_TEXT = 256
VOCAB_SIZE = 257
TOKENS_NAME = "tokens.npy"
FORMAT = "llm-tokens-npy"


def default_documents() -> tuple[dict, list[bytes]]:
    """(where the corpus came from, its documents) from pydoc_data.topics."""
    import pydoc_data.topics as module

    topics = module.topics
    source = {
        "name": "pydoc_data.topics (the Python Language Reference shipped with CPython)",
        "path": module.__file__,
        "python": sys.version.split()[0],
    }
    return source, [topics[name].encode("utf-8") for name in sorted(topics)]


def file_documents(path: str) -> tuple[dict, list[bytes]]:
    """(origin, documents) of a UTF-8 file: its blank-line-separated paragraphs."""
    path = os.path.abspath(require_file(path, "text corpus"))
    with open(path, "rb") as f:
        raw = f.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise DataError(f"{path}: not UTF-8 text ({error})") from None
    documents = [d.strip().encode("utf-8") for d in text.replace("\r\n", "\n").split("\n\n") if d.strip()]
    return {"name": path, "path": path}, documents


def pack(documents: list[bytes], seq_len: int) -> np.ndarray:
    """Rows of seq_len + 1 tokens from the documents' bytes, each document ended by END_OF_TEXT."""
    stream = np.frombuffer(b"".join(d + b"\0" for d in documents), np.uint8).astype(np.uint16)
    ends = np.cumsum([len(d) + 1 for d in documents]) - 1
    stream[ends] = END_OF_TEXT  # the separator's placeholder byte, now the special id
    width = seq_len + 1
    rows = len(stream) // width
    if rows == 0:
        raise DataError(f"the corpus's {len(stream)} tokens cannot fill one sequence of {width}")
    return stream[: rows * width].reshape(rows, width)


def build(out_dir: str | os.PathLike, corpus: str | None, seq_len: int) -> dict:
    """Corpus → tokens.npy → manifest (written last)."""
    out_dir = os.fspath(out_dir)
    if seq_len < 1:
        raise DataError(f"seq_len {seq_len}: must be at least 1")
    source, documents = default_documents() if corpus is None else file_documents(corpus)
    if not documents:
        raise DataError(f"{source['name']}: no text in the corpus")
    digest = hashlib.sha256(b"".join(documents)).hexdigest()
    rows = pack(documents, seq_len)
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, TOKENS_NAME)
    np.save(path, rows, allow_pickle=False)
    return write_manifest(
        out_dir,
        {
            "format": FORMAT,
            "layout": f"uint16 [sequences, seq_len + 1]: bytes 0-255, {END_OF_TEXT} ends each document",
            "corpus": source,
            "corpus_sha256": digest,
            "corpus_bytes": sum(len(d) for d in documents),
            "documents": len(documents),
            "tokenizer": "byte-level UTF-8",
            "vocab_size": VOCAB_SIZE,
            "special_tokens": {"<|endoftext|>": END_OF_TEXT},
            "seq_len": seq_len,
            "count": int(rows.shape[0]),
            "files": [file_entry(path, out_dir)],
        },
    )


def load(directory: str | os.PathLike, seq_len: int, vocab: int) -> tuple[np.ndarray, dict]:
    """(rows [N, seq_len + 1] memory-mapped, manifest), checked against the run's sequence
    length and the model's vocabulary; a mismatch is one DataError naming the file."""
    manifest = read_manifest(directory)
    path = require_file(os.path.join(directory, TOKENS_NAME), "token file")
    rows = np.load(path, mmap_mode="r", allow_pickle=False)
    if rows.ndim != 2 or rows.dtype != np.uint16 or rows.shape[1] != seq_len + 1:
        raise DataError(
            f"{path}: {rows.dtype}{list(rows.shape)}, expected uint16 [N, {seq_len + 1}] (seq_len {seq_len})"
        )
    if manifest.get("vocab_size", VOCAB_SIZE) > vocab:
        raise DataError(f"{path}: vocabulary of {manifest['vocab_size']} exceeds the model's {vocab}")
    return rows, manifest


def header_record(manifest: dict) -> dict:
    """What a run's header says of its dataset."""
    keys = ("format", "corpus", "corpus_sha256", "documents", "tokenizer", "vocab_size", "seq_len", "count")
    return {key: manifest.get(key) for key in keys}


def epoch_order(count: int, epoch: int, seed: int) -> np.ndarray:
    """The row order of one epoch (JAX's loader; PyTorch's DataLoader shuffles its own way)."""
    return np.random.default_rng([seed, epoch]).permutation(count)
