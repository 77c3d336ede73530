"""Character-level dataset over ``data/corpus.txt`` (see ``data/README.md``).

Batches are sampled on the CPU from a caller-supplied ``torch.Generator`` and only
then moved to the target device. This keeps the token stream identical on every
device for a given seed, so runs on ``neuron`` and ``cpu`` see exactly the same data
and their losses can be compared directly.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import torch

CORPUS_PATH = Path(__file__).resolve().parent / "data" / "corpus.txt"
# Fraction of the corpus used for training; the tail is held out for validation.
TRAIN_FRACTION = 0.9


class CharTokenizer:
    """Maps each distinct character of a text to an integer id and back."""

    def __init__(self, text: str) -> None:
        # Sorting makes the id assignment depend only on the character set, not on
        # the order characters first appear.
        self.chars = sorted(set(text))
        self.stoi = {c: i for i, c in enumerate(self.chars)}
        self.itos = dict(enumerate(self.chars))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> list[int]:
        return [self.stoi[c] for c in text]

    def decode(self, ids) -> str:
        # Accept tensors as well as lists so callers can pass model output directly.
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        return "".join(self.itos[i] for i in ids)


class CharDataset:
    def __init__(self, text: str) -> None:
        self.tokenizer = CharTokenizer(text)
        ids = torch.tensor(self.tokenizer.encode(text), dtype=torch.long)
        n_train = int(len(ids) * TRAIN_FRACTION)
        self.splits = {"train": ids[:n_train], "val": ids[n_train:]}

    def get_batch(
        self,
        split: str,
        batch_size: int,
        seq_len: int,
        device: torch.device | str,
        generator: torch.Generator,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Random windows x, y of shape (batch_size, seq_len); y is x shifted by 1."""
        ids = self.splits[split]
        if len(ids) <= seq_len:
            raise ValueError(f"{split} split has {len(ids)} tokens, need > {seq_len}")
        # Start offsets drawn from the CPU generator: deterministic for a given seed
        # and independent of the device the batch ends up on.
        starts = torch.randint(0, len(ids) - seq_len, (batch_size,), generator=generator)
        # One gather for the whole batch instead of a Python loop over windows.
        offsets = starts[:, None] + torch.arange(seq_len + 1)
        windows = ids[offsets]
        # contiguous() so each tensor is one dense buffer and .to(device) is a single
        # plain host-to-device copy.
        x = windows[:, :-1].contiguous()
        y = windows[:, 1:].contiguous()
        return x.to(device), y.to(device)


@lru_cache(maxsize=1)
def load_dataset(path: Path = CORPUS_PATH) -> CharDataset:
    # Cached so repeated calls (training, benchmarks over several devices) read and
    # tokenise the corpus once.
    return CharDataset(path.read_text(encoding="utf-8"))


def get_tokenizer() -> CharTokenizer:
    return load_dataset().tokenizer


def get_batch(
    split: str,
    batch_size: int,
    seq_len: int,
    device: torch.device | str,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Batch from the shipped corpus; see :meth:`CharDataset.get_batch`."""
    return load_dataset().get_batch(split, batch_size, seq_len, device, generator)
