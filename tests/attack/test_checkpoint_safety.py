"""Checkpoints are data: a resumed run never unpickles code, and a damaged file is one sentence."""

from __future__ import annotations

import dataclasses
import pathlib
import pickle

import pytest
import torch

from physattack.attack import AttackSetup, EOTAttack
from physattack.attack.reprogram import ReprogramAttack
from physattack.config import RunConfig
from physattack.eot import BackgroundBank, ViewPipeline, ViewSampler
from physattack.errors import InputError
from physattack.patch import frame_for_scene, sticker_for_scene
from physattack.printing import load_palette
from physattack.render import Renderer
from physattack.scene import load_scene


class Payload:
    """What a hostile run folder would hold: unpickling it creates ``target``."""

    def __init__(self, target: pathlib.Path):
        self.target = target

    def __reduce__(self):
        return (pathlib.Path.touch, (self.target,))


@pytest.fixture(scope="module")
def setup(stop_scene, signnet):
    return AttackSetup(scene=stop_scene, patch=sticker_for_scene(stop_scene, shape="bars", area=0.1),
                       victim=signnet, pipeline=ViewPipeline(Renderer(), BackgroundBank(2, seed=0), (32, 32)),
                       sampler=ViewSampler(background_count=2, jpeg_share=0.0), palette=load_palette())


def attack(steps: int = 2) -> EOTAttack:
    return EOTAttack(target="yield", steps=steps, batch_size=2, lr=0.2, checkpoint_every=1, mask_search_steps=0,
                     lr_schedule="constant")


def test_a_pickle_payload_given_as_resume_is_refused_and_never_runs(setup, tmp_path):
    pwned = tmp_path / "pwned"
    pickle.loads(pickle.dumps(Payload(tmp_path / "armed")))      # the payload is live: unpickled, it writes
    assert (tmp_path / "armed").exists()
    run_dir = tmp_path / "shared-run"
    run_dir.mkdir()
    torch.save({"patch": Payload(pwned), "state": {}}, run_dir / "checkpoint.pt")
    with pytest.raises(InputError, match="refused"):
        attack().run(setup, RunConfig(resume=str(run_dir), progress=False), tmp_path / "new")
    assert not pwned.exists()


def test_a_truncated_checkpoint_is_one_sentence(setup, tmp_path):
    attack().run(setup, RunConfig(progress=False), tmp_path / "run")
    path = tmp_path / "run" / "checkpoint.pt"
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])
    with pytest.raises(InputError, match="truncated") as err:
        attack(3).run(setup, RunConfig(resume=str(path), progress=False), tmp_path / "again")
    assert "\n" not in str(err.value)


def test_a_file_that_is_not_a_checkpoint_is_refused(setup, tmp_path):
    torch.save({"weights": torch.zeros(2)}, tmp_path / "checkpoint.pt")
    with pytest.raises(InputError, match="not a physattack checkpoint"):
        attack().run(setup, RunConfig(resume=str(tmp_path), progress=False), tmp_path / "again")


def test_every_checkpoint_loads_as_plain_data(setup, stop_scene, tmp_path):
    """Optimizer, scheduler (cosine and constant), generator, loop state and reprogramming's label map
    all load under weights_only=True, and the loop state is a dict of plain values."""
    palette_patch = sticker_for_scene(stop_scene, shape="bars", area=0.1, colours="palette")
    for name, a, patch in [("constant", attack(), setup.patch), ("cosine", EOTAttack(
            steps=2, batch_size=2, checkpoint_every=1, mask_search_steps=0), palette_patch)]:
        s = dataclasses.replace(setup, patch=patch)
        a.run(s, RunConfig(progress=False), tmp_path / name)
        ckpt = torch.load(tmp_path / name / "checkpoint.pt", weights_only=True)
        assert type(ckpt["state"]) is dict and ckpt["state"]["step"] == 2
        assert ckpt["scheduler"]["last_epoch"] == 2 and ckpt["optimizer"]["state"]

    board = load_scene("reprogram_board")
    rp = ReprogramAttack(classes=3, label_map="auto", steps=2, batch_size=3, remap_every=1, checkpoint_every=1)
    rp.label(setup.victim, board)
    rs = AttackSetup(scene=board, patch=frame_for_scene(board), victim=setup.victim,
                     pipeline=ViewPipeline(Renderer(), BackgroundBank(2, seed=0), (32, 32)),
                     sampler=ViewSampler(object_width_m=0.21, distance_m=(0.8, 2.0), background_count=2),
                     palette=load_palette())
    rp.run(rs, RunConfig(progress=False), tmp_path / "reprogram")
    ckpt = torch.load(tmp_path / "reprogram" / "checkpoint.pt", weights_only=True)
    assert torch.equal(ckpt["attack"]["label_map"], rp.label_map) and "scores" in ckpt["attack"]


def test_a_checkpoint_of_another_patch_is_one_sentence(setup, stop_scene, tmp_path):
    palette = dataclasses.replace(setup, patch=sticker_for_scene(stop_scene, shape="bars", area=0.1, colours="palette"))
    attack(1).run(palette, RunConfig(progress=False), tmp_path / "palette")
    with pytest.raises(InputError, match="different patch"):
        attack().run(setup, RunConfig(resume=str(tmp_path / "palette"), progress=False), tmp_path / "again")
