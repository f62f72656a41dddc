"""MXNet real-data input pipelines (docs/frameworks/mxnet.md): ImageRecordIter over RecordIO,
tokenised BERT examples from memory. Importing this module does not import MXNet."""

from __future__ import annotations

import contextlib
import time

from dlbench.recipe import BERT_BASE

# ImageNet's per-channel mean and standard deviation (0-255 scale) as MXNet's
# image-classification examples give them to ImageRecordIter. They differ from
# dlbench.recipe.IMAGENET_MEAN/STD (torchvision's) in the first decimals; kept, so that
# MXNet's real-data runs stay as measured.
RECORDITER_MEAN = {"mean_r": 123.68, "mean_g": 116.779, "mean_b": 103.939}
RECORDITER_STD = {"std_r": 58.393, "std_g": 57.12, "std_b": 57.375}
PREFETCH_BATCHES = 4  # ImageRecordIter's prefetch_buffer (its default)
DECODE_SCAN_S = 60  # after a decode failure: time spent looking for the undecodable record


class ImagePipeline:
    """ImageRecordIter over train.rec/.idx: decode + random-resized crop + mirror +
    normalisation in `data_workers` threads, batches prefetched; one global batch
    (batch x contexts), split over the contexts in next()."""

    def __init__(self, spec):
        from dlbench.data import recordio

        self.spec = spec
        # A missing or empty file stops the run here, before the model is built.
        self.rec, self.idx, self.lst = recordio.split_files(spec.data_dir, "train")

    def start(self, mx, ctxs, shard: tuple[int, int]) -> None:
        from dlbench.data import DataError

        self.mx, self.ctxs, spec = mx, ctxs, self.spec
        with open(self.idx) as f:
            records = sum(1 for line in f if line.strip())
        parts, index = shard
        batch = spec.batch * len(ctxs)
        if records // parts < batch:
            raise DataError(f"{self.rec}: {records} records cannot fill a batch of {batch} on each of {parts} ranks")
        self.args = self._iter_args(batch, parts, index)
        try:
            self.iter = mx.io.ImageRecordIter(**self.args)
        except mx.base.MXNetError as exc:
            raise self._decode_error(exc) from None  # it starts decoding (prefetch) at once

    def _iter_args(self, batch: int, parts: int, index: int) -> dict:
        spec = self.spec
        size = spec.image_size
        return dict(
            path_imgrec=self.rec,
            path_imgidx=self.idx,
            data_shape=(3, size, size),
            batch_size=batch,
            shuffle=True,
            seed=spec.seed,
            seed_aug=spec.seed + index,
            random_resized_crop=True,  # (excludes rand_crop, which is the plain random crop)
            min_random_area=0.08,
            max_random_area=1.0,
            min_aspect_ratio=3 / 4,
            max_aspect_ratio=4 / 3,
            rand_mirror=True,
            **RECORDITER_MEAN,
            **RECORDITER_STD,
            preprocess_threads=spec.data_workers,
            prefetch_buffer=PREFETCH_BATCHES,
            num_parts=parts,
            part_index=index,
            dtype="float32",
            # The threaded iterator on every device: ctx="cpu" would pick MXNet's CPU variant,
            # which ignores preprocess_threads. device_id -1: batches in CPU memory; on CUDA
            # pinned host memory of the rank's GPU.
            ctx="gpu",
            device_id=spec.dist.local_rank if spec.device == "cuda" else -1,
            verbose=False,
        )

    def next(self):
        """[((images,), (labels,))] per context; a new epoch when this rank's part runs out."""
        mx = self.mx
        try:
            try:
                batch = self.iter.next()
            except StopIteration:
                self.iter.reset()
                batch = self.iter.next()
        except mx.base.MXNetError as exc:
            raise self._decode_error(exc) from None
        images = mx.gluon.utils.split_and_load(batch.data[0], self.ctxs, even_split=True)
        labels = mx.gluon.utils.split_and_load(batch.label[0], self.ctxs, even_split=True)
        return [((x,), (y,)) for x, y in zip(images, labels, strict=True)]

    def describe(self) -> str:
        a = self.args
        return (
            f"ImageRecordIter(train.rec, preprocess_threads={a['preprocess_threads']}, "
            f"prefetch_buffer={a['prefetch_buffer']}, part {a['part_index']}/{a['num_parts']}), "
            f"random_resized_crop + rand_mirror, mean/std normalised, batch {a['batch_size']}"
            + (f" split over {len(self.ctxs)} contexts" if len(self.ctxs) > 1 else "")
        )

    def _decode_error(self, exc):
        """A DataError naming the .rec file and, when found within DECODE_SCAN_S, the first
        record that mx.image.imdecode cannot decode (its id and .lst path)."""
        from dlbench.data import DataError

        text = str(exc).strip()
        reason = text.splitlines()[-1].removeprefix("MXNetError: ") if text else repr(exc)
        bad = self._undecodable_record()
        if bad is None:
            return DataError(f"{self.rec}: ImageRecordIter failed: {reason}")
        name = "?"
        with contextlib.suppress(OSError, ValueError, IndexError), open(self.lst) as f:
            for line in f:
                fields = line.rstrip("\n").split("\t")
                if int(fields[0]) == bad:
                    name = fields[-1]
                    break
        return DataError(f"{self.rec}: record {bad} ({name}): corrupt image ({reason})")

    def _undecodable_record(self) -> int | None:
        mx = self.mx
        deadline = time.monotonic() + DECODE_SCAN_S
        with contextlib.suppress(Exception):
            reader = mx.recordio.MXIndexedRecordIO(self.idx, self.rec, "r")
            try:
                for key in sorted(reader.keys):
                    if time.monotonic() > deadline:
                        return None
                    header, data = mx.recordio.unpack(reader.read_idx(key))
                    try:
                        image = mx.image.imdecode(data)
                        undecodable = image.ndim != 3 or min(image.shape) == 0
                    except mx.base.MXNetError:
                        undecodable = True
                    if undecodable:
                        return int(header.id)
            finally:
                reader.close()
        return None


class TextPipeline:
    """Shuffled batches of the tokenised examples, from memory (numpy), forever: per epoch a
    seeded permutation of this process's shard."""

    def __init__(self, spec):
        from dlbench.data import DataError, bert

        self.spec = spec
        # Read before the model is built: the data's masked-LM width sets the graph.
        self.arrays = bert.load_examples(spec.data_dir)
        length = self.arrays["input_ids"].shape[1]
        if spec.seq_len and spec.seq_len != length:
            raise DataError(f"{spec.data_dir}: examples have sequence length {length}, the run {spec.seq_len}")
        limit = BERT_BASE["max_position_embeddings"]
        if length > limit:
            raise DataError(f"{spec.data_dir}: sequence length {length} > BERT's {limit}")
        self.shape = (length, self.arrays["masked_lm_ids"].shape[1])  # (length, masked-LM width)

    def start(self, mx, ctxs, shard: tuple[int, int]) -> None:
        import numpy as np

        from dlbench.data import DataError

        self.mx, self.ctxs, spec, arrays = mx, ctxs, self.spec, self.arrays
        n = arrays["input_ids"].shape[0]
        parts, index = shard
        rows = np.arange(n)[index::parts]
        per_batch = spec.batch * len(ctxs)
        if len(rows) < per_batch:
            raise DataError(
                f"{spec.data_dir}: {n} examples cannot fill a batch of {per_batch} on each of {parts} ranks"
            )
        fields = {
            "ids": arrays["input_ids"].astype(np.float32),
            "types": arrays["segment_ids"].astype(np.float32),
            "mask": arrays["input_mask"].astype(np.float32),
            "positions": arrays["masked_lm_positions"].astype(np.int64),
            "mlm_ids": arrays["masked_lm_ids"].astype(np.float32),
            "mlm_weights": arrays["masked_lm_weights"].astype(np.float32),
            "nsp": arrays["next_sentence_labels"].astype(np.float32),
        }
        self.batches = self._batches(np.random.default_rng([spec.seed, index]), rows, fields, per_batch)

    def _batches(self, rng, rows, fields: dict, per_batch: int):
        import numpy as np

        batch, length = self.spec.batch, self.shape[0]
        # Flat indices of the masked positions into the (batch * length) token rows.
        offsets = (np.arange(batch) * length)[:, None]
        while True:
            order = rng.permutation(rows)
            for start in range(0, len(order) - per_batch + 1, per_batch):
                take = np.sort(order[start : start + per_batch])
                chunk = {k: v[take] for k, v in fields.items()}
                out = []
                for c in range(len(self.ctxs)):
                    part = {k: v[c * batch : (c + 1) * batch] for k, v in chunk.items()}
                    part["positions"] = (part["positions"] + offsets).reshape(-1).astype(np.float32)
                    out.append(part)
                yield out

    def next(self):
        """[((ids, types, positions, mask), (mlm_ids, nsp, mlm_weights))] per context, on the contexts."""
        mx, replicas = self.mx, []
        for ctx, part in zip(self.ctxs, next(self.batches), strict=True):
            a = {k: mx.nd.array(v, ctx=ctx, dtype="float32") for k, v in part.items()}
            inputs = (a["ids"], a["types"], a["positions"], a["mask"])
            replicas.append((inputs, (a["mlm_ids"], a["nsp"], a["mlm_weights"])))
        return replicas

    def describe(self) -> str:
        return "tokenised examples in memory (numpy), shuffled batches per epoch"
