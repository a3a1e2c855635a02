"""Each data source on files the tests write: a char-level text file, a nanoGPT `.bin` token
file with its `meta.pkl`, and an ImageFolder tree of real JPEGs read by worker processes."""

from __future__ import annotations

import math
import pickle
from pathlib import Path

import pytest

from workloads.models.gpt import GPT_SIZES


def completed(cell):
    assert cell.status == "completed", cell.run["error"]
    return cell


def test_text_file_sizes_the_vocabulary_by_its_characters(tiny_cells, char_text_file: Path, gpt_param_count):
    text = char_text_file.read_text(encoding="utf-8")
    vocab = len(set(text))
    assert vocab != len(set(text.encode("utf-8")))  # characters, not bytes
    cell = completed(tiny_cells.get("gpt", "eager", data={"source": "text", "path": str(char_text_file)}))
    run = cell.run
    assert run["data_source"] == "text"
    # the tied embedding/head has one row per distinct character (nanoGPT's meta.pkl vocab)
    assert run["params"] == gpt_param_count(vocab)
    losses = cell.losses()
    # an untrained model predicts about uniformly over the vocabulary ...
    assert losses[0] == pytest.approx(math.log(vocab), abs=0.25)
    # ... and the text has structure to learn, where random tokens have none
    assert losses[-1] < losses[0] - 0.2


def test_bin_file_takes_its_vocabulary_from_meta_pkl(tiny_cells, token_bin_file: Path, gpt_param_count):
    with open(token_bin_file.with_name("meta.pkl"), "rb") as fh:
        vocab = pickle.load(fh)["vocab_size"]
    assert vocab != GPT_SIZES["tiny"].vocab_size
    cell = completed(tiny_cells.get("gpt", "eager", data={"source": "bin", "path": str(token_bin_file)}))
    assert cell.run["data_source"] == "bin"
    assert cell.run["params"] == gpt_param_count(vocab)
    # uniformly random ids below the vocabulary: the loss stays at their entropy
    for loss in cell.losses():
        assert loss == pytest.approx(math.log(vocab), abs=0.25)


def imagefolder(path: Path, **data) -> dict:
    return {"data": {"source": "imagefolder", "path": str(path), "workers": 2, **data}}


def test_imagefolder_of_jpegs_trains_through_worker_processes(tiny_cells, jpeg_tree: Path):
    cell = completed(tiny_cells.get("resnet", "eager", **imagefolder(jpeg_tree)))
    run = cell.run
    assert run["data_source"] == "imagefolder"
    assert run["items_per_step"] == run["batch_size"]
    losses = cell.losses()
    assert len(losses) == run["warmup_steps"] + run["measured_steps"]
    # two classes of 8 images: the 1000-way classifier quickly learns which two labels occur
    assert losses[-1] < losses[0] - 1.0


def test_imagefolder_with_workers_is_reproducible(tiny_cells, jpeg_tree: Path):
    """Same seed, same files: worker processes decode and augment the same batches again."""
    first = completed(tiny_cells.get("resnet", "eager", **imagefolder(jpeg_tree)))
    again = completed(
        tiny_cells.get("resnet", "eager", cell_id="imagefolder-again", **imagefolder(jpeg_tree))
    )
    assert again.losses() == first.losses()


def test_unreadable_jpegs_fail_the_cell_from_the_workers(tiny_cells, tmp_path: Path):
    """Files that are no JPEGs fail in the DataLoader's worker processes, where decoding happens."""
    for c in ("a", "b"):
        (tmp_path / c).mkdir()
        for i in range(8):
            (tmp_path / c / f"{i}.jpg").write_bytes(b"not a jpeg " * 20)
    cell = tiny_cells.get("resnet", "eager", **imagefolder(tmp_path))
    assert cell.status == "failed"
    assert cell.run["status"] == "failed"
    assert "DataLoader worker process" in cell.run["error"]
    assert cell.steps == []
