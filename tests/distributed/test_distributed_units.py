"""Pieces of the distributed support that need no second process."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from torchwork.distributed.env import World, world_from_env
from torchwork.distributed.launch import torchrun_command
from torchwork.distributed.setup import ShardSampler, shard_loader
from torchwork.errors import CheckpointError, ConfigError


def test_world_from_env():
    assert world_from_env({}) == World()
    world = world_from_env({"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1"})
    assert (world.rank, world.world_size, world.local_rank, world.is_rank_zero) == (3, 4, 1, False)
    with pytest.raises(ConfigError, match="malformed"):
        world_from_env({"WORLD_SIZE": "two"})


def test_shard_loader_gives_training_a_padded_distributed_sampler_and_evaluation_exact_shards():
    dataset = TensorDataset(torch.arange(10))
    world = World(rank=1, world_size=3)
    train = shard_loader(DataLoader(dataset, batch_size=2, shuffle=True, num_workers=0), world, train=True)
    assert isinstance(train.sampler, DistributedSampler) and train.sampler.shuffle
    assert len(list(train.sampler)) == 4  # 10 samples padded to 12, 4 per rank
    evaluation = shard_loader(DataLoader(dataset, batch_size=2), world, train=False)
    assert isinstance(evaluation.sampler, ShardSampler) and list(evaluation.sampler) == [1, 4, 7]
    shards = [list(ShardSampler(10, r, 3)) for r in range(3)]
    assert sorted(i for s in shards for i in s) == list(range(10))  # every sample once, none twice
    plain = [1, 2, 3]
    assert shard_loader(plain, world, train=True) is plain


def test_resume_mid_epoch_at_another_world_size_is_refused():
    from torchwork.runs.resume import own_rank_state

    state = {"world_size": 2, "counters": {"batch_in_epoch": 3}, "per_rank": [{}, {}]}
    with pytest.raises(CheckpointError, match="mid-epoch by 2 process"):
        own_rank_state(state, rank=0, world_size=1)
    state["counters"]["batch_in_epoch"] = 0
    assert own_rank_state(state, rank=0, world_size=1) == {}


def test_torchrun_command_for_many_nodes(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("print('hello')\n")
    command = torchrun_command(str(script), [], nproc=4, nnodes=2, node_rank=1, master_addr="10.0.0.1")
    assert command[3:] == ["--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1", "--master-port",
                           "29500", "--nproc-per-node", "4", str(script)]
    with pytest.raises(ConfigError, match="master-addr"):
        torchrun_command(str(script), [], nproc=1, nnodes=2)
