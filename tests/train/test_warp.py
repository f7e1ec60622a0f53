"""Training views from another image path (``physattack.train.warp``): the flat face warped by OpenCV onto
photographs, and the zoo members trained on them (``source=warp``)."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch

pytest.importorskip("skimage", reason="source=warp draws its backgrounds from scikit-image's photographs")

from physattack.cli.train import main  # noqa: E402
from physattack.scene.signs import SIGNS  # noqa: E402
from physattack.train.warp import (TEST_PHOTOS, TRAIN_PHOTOS, face_corners, photographs, place_face,  # noqa: E402
                                   warp_set)
from physattack.train.zoo import augment  # noqa: E402
from physattack.victims.signnet import default_weights  # noqa: E402

CONF = Path(__file__).resolve().parents[2] / "conf" / "victim"


def test_a_head_on_face_spans_its_width_and_a_turned_one_narrows():
    head_on = face_corners((0.75, 0.75), 40.0, (48.0, 48.0), 0, 0, 0)
    assert np.allclose(head_on, [[28, 28], [68, 28], [68, 68], [28, 68]])
    turned = face_corners((0.75, 0.75), 40.0, (48.0, 48.0), 60, 0, 0)
    width = turned[:, 0].max() - turned[:, 0].min()
    assert 0.45 * 40 < width < 0.6 * 40                       # about cos 60° of the head-on width
    rolled = face_corners((0.75, 0.75), 40.0, (48.0, 48.0), 0, 0, 10)
    assert rolled[0, 1] != rolled[1, 1]                        # a rolled top edge is not level


def test_the_face_lands_on_the_quad_its_corners_give():
    """A white face over black lands inside the quad and nowhere else (a pixel off its edges is black)."""
    face = (np.ones((64, 64, 3), np.float32), np.ones((64, 64), np.float32), (0.75, 0.75))
    corners = np.array([[20.0, 14.0], [70.0, 22.0], [66.0, 80.0], [16.0, 70.0]])
    out = place_face(face, np.zeros((96, 96, 3), np.float32), corners)
    quad = np.zeros((96, 96), np.uint8)
    cv2.fillConvexPoly(quad, np.round(corners).astype(np.int32), 1)
    inside = cv2.erode(quad, np.ones((5, 5), np.uint8)).astype(bool)          # 2 px in: bilinear edges
    outside = ~cv2.dilate(quad, np.ones((5, 5), np.uint8)).astype(bool)
    assert out[inside].min() > 0.99 and out[outside].max() < 0.01
    tinted = place_face(face, np.zeros((96, 96, 3), np.float32), corners, 0.5, np.array([1.0, 0.5, 0.0], np.float32))
    assert np.allclose(tinted[inside].mean(0), [0.5, 0.25, 0.0], atol=0.01)


def test_warped_views_replay_from_their_seed_over_the_photographs():
    names = list(SIGNS)
    a, labels = warp_set(names, 2, seed=3, image_size=48)
    b, _ = warp_set(names, 2, seed=3, image_size=48)
    assert a.shape == (18, 3, 48, 48) and a.dtype == torch.uint8 and labels.tolist() == sorted(list(range(9)) * 2)
    assert torch.equal(a, b) and not torch.equal(a, warp_set(names, 2, seed=4, image_size=48)[0])
    assert float(a.float().std((1, 2, 3)).min()) > 10           # photographs behind, not a flat colour
    assert not set(TRAIN_PHOTOS) & set(TEST_PHOTOS) and all(p.shape[2] == 3 for p in photographs(TEST_PHOTOS))


def test_v2_augmentation_stays_in_range_and_replays_from_the_seed():
    x = torch.rand(4, 3, 24, 24)
    torch.manual_seed(5)
    a = augment(x, "v2", torch.Generator())
    torch.manual_seed(5)
    assert torch.equal(a, augment(x, "v2", torch.Generator()))
    assert a.shape == x.shape and 0 <= float(a.min()) and float(a.max()) <= 1 and not torch.equal(a, x)


def test_a_warp_member_trains_on_no_render_and_says_so(tmp_path, capsys):
    out = tmp_path / "warp_tiny.safetensors"
    argv = ["zoo", "arch=mobilenetv3_small_050", "name=warp_tiny", f"out={out}", "source=warp", "augment=v2",
            "per_class=2", "test_per_class=1", "epochs=1", "batch_size=6", "image_size=32", "input_size=32"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "warped held-out top-1" in text and "over 9 warps over unseen photographs" in text
    meta = json.loads(out.with_suffix(".json").read_text())
    assert meta["train"]["source"] == "warp" and "no render of this pipeline" in meta["train"]["recipe"]
    assert meta["heldout_warp_views"] == 9 and meta["heldout_views"] == 9      # and still measured on renders
    assert main(["zoo", "source=warp", "hard=true", f"out={tmp_path / 'b.safetensors'}"]) == 2
    err = capsys.readouterr().err
    assert "give hard=false with source=warp" in err and err.count("\n") == 1


@pytest.mark.parametrize("config", sorted(CONF.glob("warp_*.yaml")), ids=lambda p: p.stem)
def test_bundled_warp_members_record_their_image_path(config):
    from omegaconf import OmegaConf

    from physattack.cli.build import make
    spec = OmegaConf.load(config)
    weights = default_weights().parent / f"{spec.name}.safetensors"
    meta = json.loads(weights.with_suffix(".json").read_text())
    assert "source=warp" in meta["command"] and meta["train"]["source"] == "warp" and "recipe" in meta["train"]
    assert meta["heldout_warp_top1"] >= 0.9 and meta["heldout_top1"] >= 0.7     # renders are another domain to it
    assert meta["heldout_per_class"]["stop"] >= 0.95                             # but it knows a rendered stop sign
    assert list(make(spec).labels) == meta["labels"]
