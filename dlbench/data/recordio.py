"""MXNet RecordIO as `im2rec.py --pass-through` writes it: `<split>.rec`, `.idx`, `.lst`.

    <split>.lst   im2rec's list: `index<TAB>label<TAB>path` (label as %f, path relative to
                  the split directory, e.g. n01440764/n01440764_10026.JPEG)
    <split>.rec   one record per image: IRHeader(flag=0, label=float(0-based label), id=index,
                  id2=0) packed with mx.recordio.pack in front of the file's raw bytes
    <split>.idx   `index<TAB>byte offset` (mx.recordio.MXIndexedRecordIO)

Labels are the 0-based class index (the same as ImageFolder's). Records are in the shared
record order (`imagenet.record_order`): record i is example i of the TFRecord shards.

MXNet is imported inside the functions; `read_index` / `read_raw` are a stdlib reader of
the same files (for checks outside the MXNet environment).
"""

from __future__ import annotations

import os
import struct

from dlbench.data import DataError, file_entry, imagenet, read_manifest, require_file, write_manifest

MAGIC = 0xCED7230A
IR_FORMAT = "IfQQ"  # flag, label, id, id2 (mx.recordio._IR_FORMAT)
IR_SIZE = struct.calcsize(IR_FORMAT)
SUFFIXES = (".rec", ".idx", ".lst")


def file_names(split: str) -> list[str]:
    return [f"{split}{suffix}" for suffix in SUFFIXES]


def _mx():
    import mxnet as mx

    return mx


def _check_decodes(mx, path: str, data: bytes) -> None:
    try:
        image = mx.image.imdecode(data)
    except mx.base.MXNetError as error:
        # MXNet's message is a C++ stack, its last line the reason
        reason = str(error).strip().splitlines()[-1].removeprefix("MXNetError: ")
        raise DataError(f"{path}: corrupt image (mx.image.imdecode: {reason})") from None
    if image.ndim != 3 or min(image.shape) == 0:
        raise DataError(f"{path}: corrupt image (mx.image.imdecode gave shape {image.shape})")


def convert(source: str | os.PathLike, out_dir: str | os.PathLike, *, splits, seed: int) -> dict:
    """Write `<split>.rec/.idx/.lst` for each split and the manifest."""
    mx = _mx()
    source, out_dir = os.path.abspath(source), os.fspath(out_dir)
    wnids, plan = imagenet.plan(source, splits, seed)
    os.makedirs(out_dir, exist_ok=True)
    manifest_splits = {}
    for split, entries in plan.items():
        rec, idx, lst = (os.path.join(out_dir, name) for name in file_names(split))
        record = mx.recordio.MXIndexedRecordIO(idx, rec, "w")
        try:
            with open(lst, "w") as listing:
                for index, entry in enumerate(entries):
                    path, data, _ = imagenet.read_image(source, entry)
                    _check_decodes(mx, path, data)
                    header = mx.recordio.IRHeader(0, float(entry.label), index, 0)
                    record.write_idx(index, mx.recordio.pack(header, data))
                    listing.write(f"{index}\t{float(entry.label):f}\t{os.path.relpath(entry.path, split)}\n")
        finally:
            record.close()
        manifest_splits[split] = {"count": len(entries), "files": [file_entry(p, out_dir) for p in (rec, idx, lst)]}
    return write_manifest(
        out_dir,
        {
            "format": "recordio",
            "layout": "im2rec --pass-through (raw JPEG bytes, IRHeader label)",
            "source": source,
            "classes": wnids,
            "label": "IRHeader.label = 0-based index of the sorted wnid (float)",
            "label_offset": 0,
            "order_seed": seed,
            "splits": manifest_splits,
        },
    )


# ---- readers ----


def split_files(directory: str | os.PathLike, split: str = "train") -> tuple[str, str, str]:
    """(.rec, .idx, .lst) of a split; a missing or empty file is an error naming it."""
    manifest = read_manifest(directory)
    if split not in manifest["splits"]:
        raise DataError(f"{directory}: no '{split}' split in the RecordIO manifest")
    rec, idx, lst = (require_file(os.path.join(directory, name), "RecordIO file") for name in file_names(split))
    return rec, idx, lst


def read_examples(directory: str | os.PathLike, split: str = "train", limit: int | None = None) -> list[dict]:
    """The first `limit` records, decoded with mx.image.imdecode (RGB), via the index."""
    mx = _mx()
    rec, idx, _ = split_files(directory, split)
    record = mx.recordio.MXIndexedRecordIO(idx, rec, "r")
    try:
        keys = sorted(record.keys)[:limit]
        examples = []
        for key in keys:
            header, data = mx.recordio.unpack(record.read_idx(key))
            image = mx.image.imdecode(data).asnumpy()
            examples.append({"image": image, "label": int(header.label), "id": int(header.id), "bytes": data})
        return examples
    finally:
        record.close()


def read_index(idx_path: str | os.PathLike) -> dict[int, int]:
    """key → byte offset of an .idx file (stdlib)."""
    with open(idx_path) as f:
        return {int(key): int(offset) for key, offset in (line.split("\t") for line in f if line.strip())}


def read_raw(rec_path: str | os.PathLike, offset: int) -> tuple[tuple, bytes]:
    """((flag, label, id, id2), payload) of the record at `offset` (stdlib, dmlc framing)."""
    payload = b""
    with open(rec_path, "rb") as f:
        f.seek(offset)
        while True:
            head = f.read(8)
            if len(head) < 8:
                raise DataError(f"{rec_path}: truncated record at offset {offset}")
            magic, lrec = struct.unpack("<II", head)
            if magic != MAGIC:
                raise DataError(f"{rec_path}: no RecordIO record at offset {offset}")
            cflag, length = lrec >> 29, lrec & ((1 << 29) - 1)
            payload += f.read(length)
            f.read((4 - length % 4) % 4)
            if cflag in (0, 3):  # a whole record, or the last part of a split one
                break
            payload += struct.pack("<I", MAGIC)  # the writer split the record at a magic word
    header = struct.unpack(IR_FORMAT, payload[:IR_SIZE])
    return header, payload[IR_SIZE:]
