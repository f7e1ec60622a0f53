"""A drive's detectors scan only the tiles near the sign (``Needed.near_sign``): on real frames the bundled
DetNet then finds on the sign exactly what it finds scanning every tile, from a fraction of the tiles."""

from __future__ import annotations

import torch

from physattack.drive.stacks import StackSettings, TiledDetector, _on_sign
from physattack.drive.render import DriveRenderer
from physattack.drive.trajectories import Dashcam, DriveSet
from physattack.eot import BackgroundBank
from physattack.render import Renderer
from physattack.victims import load_detnet


class Counting(torch.nn.Module):
    """A detector that counts the tiles it is given."""

    def __init__(self, detector):
        super().__init__()
        self.detector, self.tiles = detector, 0
        self.input_size, self.score_threshold = detector.input_size, detector.score_threshold

    def forward(self, images):
        self.tiles += images.shape[0]
        return self.detector(images)


def test_near_sign_tiles_find_on_the_sign_what_every_tile_finds(stop_scene):
    cam = Dashcam()
    detector = Counting(load_detnet().eval())
    tiled = TiledDetector(detector, cam, stop_scene.texture_size_m, StackSettings())
    drive = DriveSet(speeds_kmh=[50.0], lighting=["noon"], lane_offsets_m=[3.5], background_count=2).drives()[0]
    frames = drive.frames(cam, stop_scene.texture_size_m)
    picked = [int(torch.argmin((frames.distance_m - d).abs())) for d in (75.0, 55.0, 40.0, 28.0, 15.0)]
    renderer = DriveRenderer(Renderer(), BackgroundBank(2, seed=3000), cam)
    images, boxes = [], []
    for i in picked:
        views = renderer.render(stop_scene, stop_scene.texture, frames[i], region=tiled.region)
        images.append(views.images)
        boxes.append(views.boxes)
    images, boxes = torch.cat(images), torch.cat(boxes)
    every = tiled(images, tiled.region)
    scanned_all, detector.tiles = detector.tiles, 0
    near = tiled(images, tiled.region, near=boxes)
    assert detector.tiles * 4 < scanned_all, (detector.tiles, scanned_all)
    found = 0
    for full, part, sign in zip(every, near, boxes):
        a, b = _on_sign(full, sign, 0.01, 0.0), _on_sign(part, sign, 0.01, 0.0)
        assert a.sum() == b.sum()
        assert torch.equal(full.labels[a], part.labels[b])
        assert torch.allclose(full.boxes[a], part.boxes[b], atol=1e-4)
        assert torch.allclose(full.scores[a], part.scores[b], atol=1e-5)
        found += int(a.sum())
    assert found >= 3, "DetNet should find the clean sign in most of these frames"
