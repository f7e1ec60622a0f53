"""A drive's detectors scan only the tiles near the sign (``Needed.near_sign``): on real frames the bundled
DetNet then finds on the sign exactly what it finds scanning every tile, from a fraction of the tiles. And how
the tiles' boxes join (``drive.stack.merge``): suppression or merging, where a tile's edge cuts the sign."""

from __future__ import annotations

import pytest
import torch

from physattack.drive.boxes import merge_boxes
from physattack.drive.stacks import StackSettings, TiledDetector, _on_sign
from physattack.drive.render import DriveRenderer
from physattack.drive.report import stack_line
from physattack.drive.trajectories import Dashcam, DriveSet
from physattack.errors import InputError
from physattack.eot import BackgroundBank
from physattack.render import Renderer
from physattack.victims import load_detnet
from physattack.victims.detection import Detections, DetectorOutput


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


class BoxesWhatItSees(torch.nn.Module):
    """A detector that boxes the bright pixels of each tile: 0.9 where the tile's edge cuts them, 0.6 where the
    tile holds them whole (the score pattern that made a cut part the box taken: issue 26's seed-3 drives), and
    a faint candidate (0.1, under its threshold) over the whole tile, as real detectors leave many."""

    input_size, score_threshold = 160, 0.5

    def forward(self, images):
        out = []
        for image in images:
            ys, xs = torch.nonzero(image[0] > 0.5, as_tuple=True)
            if not len(xs):
                out.append(Detections.empty())
                continue
            box = torch.tensor([[xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]], dtype=torch.float32)
            cut = bool((box[0, :2] == 0).any() or (box[0, 2:] == self.input_size).any())
            faint = torch.tensor([[0.0, 0.0, self.input_size, self.input_size]])      # a candidate under threshold
            out.append(Detections(torch.cat([box, faint]), torch.tensor([0.9 if cut else 0.6, 0.1]),
                                  torch.tensor([1, 1])))
        return DetectorOutput(torch.zeros(len(images), 0, 4), torch.zeros(len(images), 0, 2),
                              torch.zeros(len(images), 0, dtype=torch.bool), out, self.score_threshold)


def test_merging_joins_the_part_a_tiles_edge_cuts_to_the_whole_sign_where_suppression_takes_the_part():
    cam, size = Dashcam(), (0.75, 0.75)
    tiled = {m: TiledDetector(BoxesWhatItSees(), cam, size, StackSettings(merge=m)) for m in ("nms", "nmm")}
    t = tiled["nms"]
    scale, x0, y0, x1, y1 = t.spans[0]                    # a tile of the 2x scale: a 26-px sign across its right edge
    sign = torch.tensor([[x1 - 8.0, y0 + 30.0, x1 + 5.0, y0 + 43.0]])
    assert t.search.holding(sign)[0].sum() >= 1, "another tile of the overlap holds the whole sign"
    region = t.region
    image = torch.zeros(1, 3, region[3] - region[1], region[2] - region[0])
    image[:, :, int(sign[0, 1]) - region[1]:int(sign[0, 3]) - region[1],
          int(sign[0, 0]) - region[0]:int(sign[0, 2]) - region[0]] = 1.0
    taken = {}
    for merge, stack in tiled.items():
        det = stack(image, region, near=sign)[0]
        hit = _on_sign(det, sign[0], 0.3, 0.5)
        taken[merge] = det.boxes[hit][det.scores[hit].argmax()]
    width = float(sign[0, 2] - sign[0, 0])
    assert float(taken["nms"][2] - taken["nms"][0]) < 0.9 * width, "suppression keeps the cut part (the top score)"
    assert torch.allclose(taken["nmm"], sign[0], atol=1.0), "merging gives the whole sign's box, not the faint ones'"


def test_merging_is_greedy_per_label_on_the_smaller_boxs_share_and_a_bad_name_is_refused():
    boxes = torch.tensor([[0.0, 0, 10, 10], [0, 0, 6, 10], [20, 0, 30, 10], [0, 0, 10, 10], [8, 0, 18, 10]])
    scores, labels = torch.tensor([0.5, 0.9, 0.7, 0.4, 0.3]), torch.tensor([1, 1, 1, 2, 1])
    b, s, lab = merge_boxes(boxes, scores, labels)
    assert s.tolist() == pytest.approx([0.9, 0.7, 0.4, 0.3])          # the part took in the whole; labels apart
    assert b[0].tolist() == [0, 0, 10, 10] and lab.tolist() == [1, 1, 2, 1]
    assert b[3].tolist() == [8, 0, 18, 10], "a fifth of the smaller box in common does not merge"
    with pytest.raises(InputError, match="drive.stack.merge must be one of nms, nmm"):
        StackSettings(merge="union")


def test_the_report_names_a_stack_that_merges_its_tiles_boxes():
    info = {"stack": "two-stage", "victims": {"detector": "detnet", "classifier": "signnet"}}
    assert stack_line(info) == "two-stage (detnet -> signnet)"
    assert stack_line({**info, "merge": "nmm"}) == "two-stage (detnet, its tiles' boxes merged -> signnet)"
    assert stack_line({"stack": "detector", "victims": {"detector": "fcos"}, "merge": "nmm"}) == \
        "detector alone (fcos, its tiles' boxes merged)"
