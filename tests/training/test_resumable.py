"""Exact resume, piece by piece: the order a sampler replays, the random state a checkpoint
keeps, checkpoints written whole, and the error for one that cannot be read."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from skipdecode.training.checkpoints import AtomicCheckpointIO, CheckpointError, resume_step
from skipdecode.training.resumable import ResumableSampler, capture_rng, restore_rng

DATA = list(range(50))


def _epochs(loader: DataLoader, n: int = 3) -> list[list[list[int]]]:
    return [[batch.tolist() for batch in loader] for _ in range(n)]


def test_uninterrupted_order_is_the_one_a_shuffled_loader_gave():
    """Same global seed, same batches, epoch after epoch: runs keep their data order."""
    torch.manual_seed(3)
    before = _epochs(DataLoader(DATA, batch_size=7, shuffle=True))
    torch.manual_seed(3)
    own = torch.Generator().manual_seed(0)
    now = _epochs(DataLoader(DATA, batch_size=7, sampler=ResumableSampler(50), generator=own))
    assert now == before
    assert len({tuple(sum(e, [])) for e in now}) == 3  # a new order every epoch


def test_resume_replays_the_epoch_from_the_first_untrained_sample():
    sampler = ResumableSampler(50)
    torch.manual_seed(0)
    whole = list(sampler)
    seed = sampler.seed
    torch.manual_seed(99)  # another global state: the recorded seed decides
    sampler.resume(seed, 21)
    assert list(sampler) == whole[21:]
    assert sampler.seed == seed
    assert sorted(list(sampler)) == DATA  # the resume is one-off: the next epoch is whole


@pytest.mark.parametrize("size, trained", [(0, 0), (10, 10), (10, -1)])
def test_bad_sampler_settings_are_refused(size, trained):
    with pytest.raises(ValueError, match="size|trained"):
        ResumableSampler(size).resume(0, trained)


def test_rng_states_survive_a_weights_only_checkpoint(tmp_path):
    state = capture_rng()
    expected = (torch.rand(4), np.random.rand(3), random.random())
    torch.save({"rng": state}, tmp_path / "c.ckpt")
    torch.manual_seed(1), np.random.seed(1), random.seed(1)
    restore_rng(torch.load(tmp_path / "c.ckpt", weights_only=True)["rng"])
    again = (torch.rand(4), np.random.rand(3), random.random())
    assert torch.equal(expected[0], again[0])
    assert np.array_equal(expected[1], again[1]) and expected[2] == again[2]


def test_atomic_checkpoint_replaces_whole_and_leaves_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "checkpoints" / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"global_step": 4}, target)
    assert resume_step(target) == 4

    def killed(obj, f, *args, **kwargs):  # the write dies half-way
        f.write(b"PK\x03\x04 half a zip")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", killed)
    with pytest.raises(KeyboardInterrupt):
        io.save_checkpoint({"global_step": 8}, target)
    assert resume_step(target) == 4  # the previous checkpoint, intact
    assert [p.name for p in target.parent.iterdir()] == ["last.ckpt"]


def test_an_unreadable_checkpoint_is_named_with_the_ways_forward(tmp_path):
    ckpt_dir = tmp_path / "checkpoints"
    AtomicCheckpointIO().save_checkpoint({"global_step": 40}, ckpt_dir / "epoch=0-step=40.ckpt")
    (ckpt_dir / "last.ckpt").write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(CheckpointError) as err:
        resume_step(ckpt_dir / "last.ckpt")
    message = str(err.value)
    assert "ckpt_path" in message and "last.ckpt" in message
    assert "epoch=0-step=40.ckpt" in message and "ckpt_path=null" in message


def test_rank_shares_make_up_the_single_process_batches():
    """Device r of N takes positions r, r + N, ... of the order: global batch k of N devices
    with b rows each is single-process batch k of N x b rows (the order padded to a multiple of
    N by its first positions, as every device needs the same number of batches)."""
    from skipdecode.training.resumable import RankShare

    order = list(range(10, 21))  # 11 positions
    shares = [list(RankShare(order, rank, 3)) for rank in range(3)]
    assert [len(s) for s in shares] == [4, 4, 4] == [len(RankShare(order, r, 3)) for r in range(3)]
    for k in range(2):  # 2 rows a device: global batch k is positions 6k .. 6k + 5
        batch = sorted(sum((s[2 * k : 2 * k + 2] for s in shares), []))
        assert batch == sorted((order + order[:1])[6 * k : 6 * k + 6])
    with pytest.raises(ValueError, match="rank 3 is not a device of 3"):
        RankShare(order, 3, 3)
