"""Distributed cells, the workload side: merging the ranks' measurements into the cell's rows,
the `distributed` config section, joining a launch, and counting DDPOptimizer's graph splits on a
real DDP module under torch.compile. The cells that run as two Slurm tasks are in
tests/system/test_distributed_slurm.py.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn

from workloads.cell.cell_id import config_digest
from workloads.cell.config import ConfigError, DistributedConfig
from workloads.cell.config_io import cell_config_from_dict, cell_config_to_dict
from workloads.cell.distributed import LaunchError, Ranks, join, launched_ranks
from workloads.cell.recorder import CellRecorder, RankReport, merge_steps
from workloads.cell.train import StepRecord
from workloads.instruments.dynamo_records import count_ddp_splits


def report(
    rank: int,
    times: list[float],
    losses: list[float] | None = None,
    warmup: int = 1,
    waits: list[float] | None = None,
) -> RankReport:
    """A rank's report: step i took times[i] ms, the first `warmup` steps are warm-up."""
    losses = losses or [1.0] * len(times)
    waits = waits or [0.5] * len(times)
    steps = [
        StepRecord(i, "warmup" if i < warmup else "measure", t, w, loss)
        for i, (t, w, loss) in enumerate(zip(times, waits, losses))
    ]
    return RankReport(rank, f"node{rank}", steps, peak_mem_bytes=1000 * (rank + 1))


# --- merging -------------------------------------------------------------------------------


def test_merged_step_is_the_slowest_rank_and_the_mean_loss() -> None:
    merged = merge_steps(
        [
            report(1, [400, 11, 13], [3.0, 2.0, 1.0], waits=[1, 5, 2]),
            report(0, [500, 10, 14], [1.0, 4.0, 2.0], waits=[2, 3, 4]),
        ]
    )  # any order
    assert [m.step for m in merged] == [0, 1, 2]
    assert [m.phase for m in merged] == ["warmup", "measure", "measure"]
    assert [m.step_time_ms for m in merged] == [500, 11, 14]
    assert [m.data_time_ms for m in merged] == [2, 5, 4]
    assert [m.loss for m in merged] == [2.0, 3.0, 1.5]
    assert [m.rank_step_time_ms for m in merged] == [[500, 400], [10, 11], [14, 13]]  # rank order
    assert [m.rank_data_time_ms for m in merged] == [[2, 1], [3, 5], [4, 2]]


def test_steps_not_every_rank_finished_are_dropped() -> None:
    merged = merge_steps([report(0, [500, 10, 14]), report(1, [400, 11])])
    assert [m.step for m in merged] == [0, 1]


def test_ranks_disagreeing_on_a_step_is_an_error() -> None:
    shifted = report(1, [400, 11])
    shifted.steps[1] = StepRecord(5, "measure", 11, 0, 1)
    with pytest.raises(ValueError, match="ranks disagree on step 1"):
        merge_steps([report(0, [500, 10]), shifted])


def test_summary_of_two_ranks_is_global() -> None:
    """Throughput over all ranks' items at the slowest rank's median step; MFU over both devices'
    peaks; compile time per rank from its own steps, the cell's from the merged ones."""
    rec = CellRecorder("cell", 1, world_size=2)
    rec.items_per_step, rec.flops_per_step, rec.peak = 2048, 2.6e12, 100.0  # both ranks' items and FLOPs
    rec.summarise(
        [report(0, [500, 10, 12, 14]), report(1, [400, 11, 13, 9])], compiles=True, setup_time_s=0.0
    )
    run = rec.run
    # merged measured steps: max(10, 11), max(12, 13), max(14, 9) = 11, 13, 14
    assert (run["world_size"], run["measured_steps"], run["median_step_ms"]) == (2, 3, 13)
    assert run["items_per_s"] == pytest.approx(2048 / 0.013)
    assert run["mfu"] == pytest.approx(2.6e12 / 0.013 / 1e12 / 200)
    assert run["compile_time_s"] == pytest.approx((500 - 13) / 1e3)
    assert run["rank_median_step_ms"] == [12, 11]
    assert run["rank_compile_time_s"] == pytest.approx([(500 - 12) / 1e3, (400 - 11) / 1e3])
    assert (run["rank_hostname"], run["rank_peak_mem_bytes"], run["peak_mem_bytes"]) == (
        ["node0", "node1"],
        [1000, 2000],
        2000,
    )
    rows = rec.steps
    assert [r["step_time_ms"] for r in rows] == [500, 11, 13, 14]
    assert {r["items"] for r in rows} == {2048}
    assert rows[1]["mfu"] == pytest.approx(2.6e12 / 0.011 / 1e12 / 200)
    assert rows[1]["rank_step_time_ms"] == [10, 11]


def test_eager_ranks_have_no_compile_time() -> None:
    rec = CellRecorder("cell", 1, world_size=2)
    rec.items_per_step = 1
    rec.summarise([report(0, [50, 10]), report(1, [40, 11])], compiles=False, setup_time_s=0.0)
    assert rec.run["compile_time_s"] is None and rec.run["rank_compile_time_s"] is None


# --- config and launch ---------------------------------------------------------------------


def test_single_process_cells_keep_their_ids() -> None:
    """The `distributed` section at its defaults leaves the digest as it was before the section existed."""
    cfg = cell_config_from_dict({"model": {"name": "gpt"}, "backend": {"name": "inductor"}})
    values = cell_config_to_dict(cfg)
    assert config_digest(cfg) == config_digest({k: v for k, v in values.items() if k != "distributed"})
    two = cell_config_from_dict({**values, "distributed": {"tasks_per_node": 2}})
    assert config_digest(two) != config_digest(cfg)


@pytest.mark.parametrize(
    "section, message",
    [
        ({"tasks_per_node": 0}, "distributed.tasks_per_node must be >= 1"),
        ({"nodes": 0}, "distributed.nodes must be >= 1"),
        ({"backend": "mpi"}, "distributed.backend must be one of"),
        ({"bucket_cap_mb": 0.5}, "distributed.bucket_cap_mb must be >= 1"),
        ({"tasks_per_nodes": 2}, "unknown config key 'distributed.tasks_per_nodes'"),
    ],
)
def test_bad_distributed_section(section: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        cell_config_from_dict({"distributed": section})


def test_nccl_on_the_cpu_is_refused() -> None:
    with pytest.raises(ConfigError, match="nccl needs GPUs"):
        cell_config_from_dict({"device": "cpu", "distributed": {"backend": "nccl"}})


def test_launched_ranks_from_the_environment() -> None:
    assert launched_ranks({}) == Ranks()
    assert launched_ranks({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"}) == Ranks(3, 4, 1)
    with pytest.raises(LaunchError, match="outside WORLD_SIZE"):
        launched_ranks({"RANK": "4", "WORLD_SIZE": "4"})
    with pytest.raises(LaunchError, match="must be integers"):
        launched_ranks({"RANK": "zero"})


def test_a_distributed_cell_started_alone_says_how_to_start_it() -> None:
    with pytest.raises(LaunchError, match=r"trains as 2 process\(es\).*started alone.*Slurm cluster profile"):
        join(DistributedConfig(tasks_per_node=2), "cpu", environ={})
    with pytest.raises(LaunchError, match="started WORLD_SIZE=2"):
        join(DistributedConfig(), "cpu", environ={"RANK": "0", "WORLD_SIZE": "2"})
    assert join(DistributedConfig(), "cpu", environ={}) == Ranks()  # one process: no group


# --- DDP under torch.compile -----------------------------------------------------------------


class FourLayers(nn.Module):
    """Four 1 MiB layers (512 x 512 fp32). A module defined here: dynamo compiles frames of user
    code, and a bare nn.Sequential's forward is torch's own (skipped)."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(512, 512, bias=False) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


@pytest.fixture
def one_rank_group():
    """A real gloo process group of one rank in this process (DDP and DDPOptimizer need one)."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.mark.parametrize("bucket_cap_mb, pieces", [(25, 2), (1, 4)])
def test_ddp_splits_of_a_compiled_module_are_counted(
    one_rank_group, bucket_cap_mb: float, pieces: int
) -> None:
    """Four 1 MiB layers. DDP fills a first bucket of 1 MiB (early communication), then buckets
    of up to bucket_cap_mb: the last layer alone and the other three together at DDP's 25 MiB,
    one layer each at 1 MiB; DDPOptimizer cuts the graph at each bucket boundary."""
    torch._dynamo.reset()
    ddp = nn.parallel.DistributedDataParallel(FourLayers(), bucket_cap_mb=bucket_cap_mb)
    compiled = torch.compile(ddp, backend="aot_eager")
    with count_ddp_splits() as buckets:
        compiled(torch.randn(8, 512)).sum().backward()
    assert buckets == [pieces]
