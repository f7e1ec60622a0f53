"""The bundled victims trained through fog (``signnet``: ``fog_share=0.1``; ``signnet_fog``: 0.3) read a stop sign
whose contrast fog has taken down to 20-30 % — what a car in 150-m fog sees of it at 55-60 m, before its braking
point at 70 km/h — where the clear-trained SignNet (``signnet_clear``, the bundled one until 2026-12-05) does not."""

from __future__ import annotations

import torch

from physattack.eot import BackgroundBank, ViewSampler
from physattack.eot.fog import FogDraw
from physattack.eot.frames import FrameSampler
from physattack.render import Renderer
from physattack.scene import load_scene
from physattack.train.classifier import render_set
from physattack.train.detector import FrameDraws
from physattack.train.detector import render_set as render_frame_set
from physattack.train.world import ViewSource
from physattack.victims import load_detnet
from physattack.victims.detection import best_scores_on_boxes
from physattack.victims.signnet import bundled_signnet
from physattack.victims.torchvision_detection import bundled_sign_detector

THICK = FogDraw(share=1.0, transmission=(0.2, 0.3))
BANK = BackgroundBank(8, seed=7777)                 # training's held-out backgrounds


def test_signnet_fog_reads_the_stop_sign_through_fog_and_the_clear_trained_signnet_does_not():
    source = ViewSource(Renderer(), ViewSampler(background_count=8), BANK)
    crops, _ = render_set(["stop_sign"], 32, source, torch.Generator().manual_seed(1), 96, fog=THICK)
    x = crops.float() / 255
    read = {n: float((bundled_signnet(n)(x).argmax(1) == 0).float().mean())
            for n in ("signnet", "signnet_fog", "signnet_clear")}
    assert read["signnet"] >= 0.9 and read["signnet_fog"] >= 0.9 and read["signnet_clear"] <= 0.5, read


def test_the_bundled_detectors_find_the_stop_sign_through_fog():
    frames = render_frame_set([load_scene("stop_sign")], FrameDraws(FrameSampler(ViewSampler(background_count=8),
                                                                                 fog=THICK), BANK),
                              32, torch.Generator().manual_seed(2), 160)
    have = [i for i, b in enumerate(frames.boxes) if len(b)]
    x, boxes = frames.images[have].float() / 255, torch.stack([frames.boxes[i][0] for i in have])
    assert len(have) >= 16
    for detector, least in ((load_detnet(), 0.85), (bundled_sign_detector("det_fcos"), 0.85)):
        scores = best_scores_on_boxes(detector(x).detections, boxes, detector.label_index("stop"))
        found = float((scores >= detector.score_threshold).float().mean())
        assert found >= least, (type(detector).__name__, found)
