"""Transfer (physattack/evaluate/transfer.py): the independent OpenCV path and the matrix's scoring."""

from __future__ import annotations

import pytest
import torch

from physattack.eot import BackgroundBank, EvalGrid, ViewPipeline
from physattack.errors import InputError
from physattack.evaluate.transfer import (ImagePath, load_victims, matrix_markdown, opencv_warp_views, transfer_cell,
                                          transfer_matrix)
from physattack.render import Renderer
from physattack.victims.base import Classifier


def test_opencv_path_frames_the_sign_like_the_renderer(stop_scene, signnet):
    bank = BackgroundBank(4, seed=1000)
    grid = EvalGrid(azimuth_deg=[-40.0, 0.0, 40.0], distance_m=[6.0], lighting=["noon"], background_count=4)
    p = grid.params()
    warped = opencv_warp_views(stop_scene.texture, stop_scene.face_mask, stop_scene.texture_size_m, p, bank.images)
    views = ViewPipeline(Renderer(), bank, (96, 96))(stop_scene, stop_scene.texture, p)
    assert warped.shape == (3, 3, 96, 96) and 0 <= float(warped.min()) and float(warped.max()) <= 1

    def red_columns(img):
        r, g, b = img
        return ((r > 0.25) & (r > 1.8 * g) & (r > 1.8 * b)).sum(0) >= 4

    for i in range(3):
        a, b = red_columns(warped[i]), red_columns(views.images[i])
        assert abs(int(a.sum()) - int(b.sum())) <= 4                       # same apparent width (±4 px)
        assert abs(float(a.nonzero().float().mean()) - float(b.nonzero().float().mean())) <= 3
    assert red_columns(warped[1]).sum() == pytest.approx(0.62 * 96, abs=4)  # head-on: the frame's share
    assert (signnet(warped).argmax(1) == 0).all()                            # and SignNet reads it as stop


class Fixed(Classifier):
    def __init__(self, labels, pred, sets=None):
        super().__init__()
        self.labels, self.pred = labels, pred
        self.label_sets = sets or {}

    def logits(self, images):
        out = torch.zeros(len(images), len(self.labels))
        out[torch.arange(len(images)), torch.tensor(self.pred(images))] = 5.0
        return out


def test_cells_score_targeted_where_the_target_exists_else_untargeted():
    clean = torch.zeros(4, 3, 8, 8)
    adv = torch.ones(4, 3, 8, 8)
    sign = Fixed(("stop", "yield", "other"), lambda x: [0] * len(x) if x.mean() < 0.5 else [1, 1, 2, 0])
    cell = transfer_cell(sign, clean, adv, "stop", "yield")
    assert cell["mode"] == "targeted" and cell["attack_success_rate"]["count"] == 2
    imagenet = Fixed(("a", "street sign", "b"), lambda x: [1] * len(x) if x.mean() < 0.5 else [1, 0, 2, 1],
                     sets={"stop": (1,), "yield": (1,)})
    cell = transfer_cell(imagenet, clean, adv, "stop", "yield")
    assert cell["mode"].startswith("untargeted") and cell["attack_success_rate"]["count"] == 2
    result = transfer_matrix({"sign": sign, "imagenet": imagenet},
                             [ImagePath("renderer", clean, adv), ImagePath("pytorch3d", None, None, "skipped: absent")],
                             "stop", "yield", {"resnet50": "skipped: no weights"})
    assert result["paths"] == ["renderer"] and set(result["skipped"]) == {"pytorch3d", "resnet50"}
    assert "| sign |" in matrix_markdown(result, "t")


def test_victims_without_weights_are_skipped_with_their_reason():
    def build(spec):
        if spec == "missing":
            raise RuntimeError("wrapped") from InputError("weights not on this machine")
        return spec
    victims, skipped = load_victims({"a": "ok", "b": "missing"}, build)
    assert victims == {"a": "ok"} and "not on this machine" in skipped["b"]
    with pytest.raises(ZeroDivisionError):
        load_victims({"c": "x"}, lambda spec: 1 / 0)                       # a bug is not a skip
