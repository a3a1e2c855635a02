"""Data sources of a cell: `make_batches(cfg, shape=..., device=...)` gives endless (inputs, targets).

Which sources fit which model kind:
    tokens: synthetic, text (char-level file), bin (uint16 memmap)
    images: synthetic, imagefolder
    custom: synthetic, custom (the model's own reader of data.path; workloads/models/custom.py)
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch

from workloads.cell.config import CellConfig
from workloads.cell.distributed import Ranks
from workloads.data.images import imagefolder_batches, synthetic_image_batches
from workloads.data.tokens import (
    Batch,
    bin_vocab_size,
    encode_text_file,
    stream_batches,
    synthetic_token_batches,
)
from workloads.models.custom import CustomModel, custom_batches


def _data_generator(cfg: CellConfig, rank: int) -> torch.Generator:
    # Separate stream from model init, so data is identical whatever the model consumed; each
    # rank of a distributed cell draws its own samples (rank 0 those of a single process).
    return torch.Generator().manual_seed(cfg.seed + 1 + rank)


def load_token_source(cfg: CellConfig) -> tuple[np.ndarray | None, int | None]:
    """(token stream, vocabulary size) of a file source; (None, None) for synthetic data.
    Read before the model is built because the vocabulary sizes the embedding."""
    if cfg.data.source == "text":
        return encode_text_file(cfg.data.path)
    if cfg.data.source == "bin":
        return np.memmap(cfg.data.path, dtype=np.uint16, mode="r"), bin_vocab_size(cfg.data.path)
    return None, None


@dataclass(frozen=True)
class BatchShape:
    """What one batch of a cell looks like (workloads/models ModelSpec's, at the cell's batch size)."""

    kind: str
    """`tokens`, `images` or `custom`."""
    batch_size: int
    sample_shape: tuple[int, ...]
    num_classes: int
    """The range of the targets (vocabulary size or classes)."""
    custom: CustomModel | None = None
    """model=custom: the model's own batch maker and reader."""


def make_batches(
    cfg: CellConfig,
    *,
    shape: BatchShape,
    device: torch.device,
    tokens: np.ndarray | None = None,
    ranks: Ranks = Ranks(),
) -> Iterator[Batch]:
    """Endless batches of the configured source, already on `device`; with several ranks, this
    rank's share (its own random samples, or its DistributedSampler part of an image folder).
    `tokens`: the stream of a token file (`load_token_source`)."""
    generator = _data_generator(cfg, ranks.rank)
    batch_size, sample_shape = shape.batch_size, shape.sample_shape
    if shape.custom is not None:
        return custom_batches(shape.custom, cfg.data.source, cfg.data.path, batch_size, device, generator)
    if shape.kind == "tokens":
        (block_size,) = sample_shape
        if tokens is not None:
            return stream_batches(tokens, batch_size, block_size, device, generator)
        return synthetic_token_batches(batch_size, block_size, shape.num_classes, device, generator)
    if cfg.data.source == "imagefolder":
        return imagefolder_batches(
            cfg.data.path,
            batch_size,
            sample_shape,
            device,
            cfg.data.workers,
            cfg.seed,
            cfg.model.channels_last,
            ranks.world_size,
        )
    return synthetic_image_batches(
        batch_size, sample_shape, shape.num_classes, device, generator, cfg.model.channels_last
    )
