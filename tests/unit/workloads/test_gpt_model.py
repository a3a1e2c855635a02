"""The GPT sizes are nanoGPT's: parameter counts and the FLOP estimate behind MFU must match."""

import pytest
import torch

from workloads.cell.config_io import cell_config_from_dict
from workloads.instruments.environment import peak_tflops
from workloads.models import build_model
from workloads.models.gpt import GPT, GPT_SIZES


@pytest.mark.parametrize("size, millions", [("small", 10.65), ("medium", 123.59)])
def test_parameter_counts_match_nanogpt(size: str, millions: float) -> None:
    # nanoGPT prints "number of parameters: 10.65M" (shakespeare_char) and "123.59M" (gpt2),
    # position embeddings excluded, tied token embedding counted once.
    with torch.device("meta"):
        model = GPT(GPT_SIZES[size])
    assert round(model.num_params() / 1e6, 2) == millions


def test_an_arch_name_builds_that_gpt_at_the_sizes_context_and_batch() -> None:
    # The name a GPT cell records (`arch`) builds the same GPT when asked for again.
    with torch.device("meta"):
        spec = build_model(cell_config_from_dict({"model": {"arch": "gpt-3x4x256"}, "size": "small"}))
    blocks = spec.module.transformer.h
    assert spec.arch == "gpt-3x4x256" and len(blocks) == 3 and blocks[0].attn.n_head == 4
    assert blocks[0].mlp.c_fc.weight.shape == (1024, 256)
    assert spec.sample_shape == (256,) and spec.batch_size == 64  # size=small's context and batch


def test_output_head_is_tied_to_token_embedding() -> None:
    model = GPT(GPT_SIZES["tiny"])
    assert model.lm_head.weight is model.transformer.wte.weight


def test_mfu_of_the_peer_measurement_is_reproduced() -> None:
    # The peers' nanoGPT GPT-2 inductor run: 491,520 tokens per step in 1094.6 ms on an
    # H100 SXM reported 38.8% MFU; our FLOPs per token and peak table must give the same.
    with torch.device("meta"):
        model = GPT(GPT_SIZES["medium"])
    tokens = 12 * 1024 * 40
    mfu = model.flops_per_token() * tokens / 1.0946 / (peak_tflops("NVIDIA H100 80GB HBM3", "bf16") * 1e12)
    assert round(mfu * 100, 1) == 38.8


def test_peak_table_distinguishes_h100_variants() -> None:
    assert peak_tflops("NVIDIA H100 PCIe", "bf16") == 756.0
    assert peak_tflops("NVIDIA A100-SXM4-80GB", "bf16") == 312.0
    assert peak_tflops(None, "bf16") is None
    assert peak_tflops("Some Future GPU", "bf16") is None
