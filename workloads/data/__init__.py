"""Data sources of a cell: `make_batches(cfg, spec, device)` gives endless (inputs, targets).

Which sources fit which model kind:
    tokens: synthetic, text (char-level file), bin (uint16 memmap)
    images: synthetic, imagefolder
    custom: synthetic, custom (the model's own reader of data.path; workloads/custom_model.py)
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch

from workloads.cell.config import CellConfig
from workloads.custom_model import CustomModel, custom_batches
from workloads.data.images import imagefolder_batches, synthetic_image_batches
from workloads.data.tokens import (
    Batch,
    bin_vocab_size,
    encode_text_file,
    stream_batches,
    synthetic_token_batches,
)


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


def make_batches(
    cfg: CellConfig,
    kind: str,
    batch_size: int,
    sample_shape: tuple[int, ...],
    num_classes: int,
    device: torch.device,
    tokens: np.ndarray | None = None,
    rank: int = 0,
    world_size: int = 1,
    custom: CustomModel | None = None,
) -> Iterator[Batch]:
    """Endless batches of the configured source, already on `device`; with several ranks, this
    rank's share (its own random samples, or its DistributedSampler part of an image folder).
    `custom`: a custom model's own batch maker and reader (kind `custom`)."""
    generator = _data_generator(cfg, rank)
    if custom is not None:
        return custom_batches(custom, cfg.data.source, cfg.data.path, batch_size, device, generator)
    if kind == "tokens":
        (block_size,) = sample_shape
        if tokens is not None:
            return stream_batches(tokens, batch_size, block_size, device, generator)
        return synthetic_token_batches(batch_size, block_size, num_classes, device, generator)
    if cfg.data.source == "imagefolder":
        return imagefolder_batches(
            cfg.data.path,
            batch_size,
            sample_shape,
            device,
            cfg.data.workers,
            cfg.seed,
            cfg.model.channels_last,
            world_size,
        )
    return synthetic_image_batches(
        batch_size, sample_shape, num_classes, device, generator, cfg.model.channels_last
    )
