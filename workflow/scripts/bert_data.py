"""Rule bert_data, in PyTorch's environment (tokenizers): corpus → WordPiece vocab → BERT
pre-training examples (dlbench.data.bert)."""

import argparse

from dlbench.data import bert, run_job

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("--out", required=True, help="output directory (examples.npz, vocab.txt, manifest.json)")
parser.add_argument(
    "--corpus", default=None, help="one sentence per line, blank line between documents (default: pydoc_data)"
)
parser.add_argument("--examples", type=int, default=512)
parser.add_argument("--seq-len", type=int, default=128)
parser.add_argument("--max-predictions", type=int, default=20)
parser.add_argument("--masked-lm-prob", type=float, default=0.15)
parser.add_argument("--short-seq-prob", type=float, default=0.1)
parser.add_argument("--vocab-size", type=int, default=8000)
parser.add_argument("--seed", type=int, default=0)
args = parser.parse_args()
run_job(
    lambda: bert.build(
        args.out,
        corpus=args.corpus,
        examples=args.examples,
        seq_len=args.seq_len,
        max_predictions=args.max_predictions,
        masked_lm_prob=args.masked_lm_prob,
        short_seq_prob=args.short_seq_prob,
        vocab_size=args.vocab_size,
        seed=args.seed,
    )
)
