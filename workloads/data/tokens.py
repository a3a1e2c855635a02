"""Token batches for GPT cells: synthetic ids, a char-level text file, or a uint16 `.bin` memmap.

File sources are sampled the way nanoGPT's train.py does: random offsets into one long token
stream, inputs `data[i:i+T]`, targets shifted by one, copied to the GPU from pinned memory
without blocking so the copy overlaps the running step.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from workloads.cell.train import Batch


def encode_text_file(path: str | Path) -> tuple[np.ndarray, int]:
    """Char-level encoding as nanoGPT's shakespeare_char prepare step: the vocabulary is the
    sorted set of characters of the file; returns (uint16 ids, vocabulary size)."""
    text = Path(path).read_text(encoding="utf-8")
    if len(text) < 2:
        raise ValueError(f"{path}: text file too short to train on ({len(text)} characters)")
    chars = sorted(set(text))
    stoi = {ch: i for i, ch in enumerate(chars)}
    return np.array([stoi[ch] for ch in text], dtype=np.uint16), len(chars)


def bin_vocab_size(path: str | Path) -> int | None:
    """Vocabulary size from nanoGPT's `meta.pkl` beside a `.bin` file, if there is one."""
    meta = Path(path).with_name("meta.pkl")
    if not meta.exists():
        return None
    with open(meta, "rb") as fh:
        return int(pickle.load(fh)["vocab_size"])


def stream_batches(
    tokens: np.ndarray, batch_size: int, block_size: int, device: torch.device, generator: torch.Generator
) -> Iterator[Batch]:
    """Endless (inputs, targets) batches drawn at random offsets of `tokens`."""
    if len(tokens) <= block_size + 1:
        raise ValueError(f"data has {len(tokens)} tokens; need more than block_size + 1 = {block_size + 1}")
    pin = device.type == "cuda"
    while True:
        ix = torch.randint(len(tokens) - block_size - 1, (batch_size,), generator=generator).tolist()
        x = torch.from_numpy(np.stack([tokens[i : i + block_size] for i in ix]).astype(np.int64))
        y = torch.from_numpy(np.stack([tokens[i + 1 : i + 1 + block_size] for i in ix]).astype(np.int64))
        if pin:
            x, y = x.pin_memory(), y.pin_memory()
        yield x.to(device, non_blocking=pin), y.to(device, non_blocking=pin)


def synthetic_token_batches(
    batch_size: int,
    block_size: int,
    vocab_size: int,
    device: torch.device,
    generator: torch.Generator,
    pool: int = 8,
) -> Iterator[Batch]:
    """Random token batches, made once on the host (identical on every device) and cycled
    from device memory, so that the measured step contains no input pipeline."""
    batches = []
    for _ in range(pool):
        seq = torch.randint(vocab_size, (batch_size, block_size + 1), generator=generator)
        batches.append((seq[:, :-1].contiguous().to(device), seq[:, 1:].contiguous().to(device)))
    while True:
        yield from batches
