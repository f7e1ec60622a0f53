"""torchvision detector adapters with random weights: shapes, boxes in input pixels, gradients that
reach the sticker patch through the pre-NMS candidates, weights files, and never a download."""

from __future__ import annotations

import pytest
import torch

from physattack.attack.detection_objectives import hide
from physattack.eot import BackgroundBank, ViewPipeline, ViewSampler
from physattack.eot.frames import FrameSampler
from physattack.patch import sticker_for_scene
from physattack.render import Renderer
from physattack.victims import VictimError
from physattack.victims.torchvision_detection import TorchvisionDetector, load_torchvision_detector

ARCHS = ["fasterrcnn_mobilenet_v3_large_320_fpn", "fasterrcnn_resnet50_fpn", "retinanet_resnet50_fpn",
         "fcos_resnet50_fpn", "ssdlite320_mobilenet_v3_large"]
SIZE = 128


@pytest.fixture(autouse=True)
def no_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))    # an empty cache, whatever this machine has


@pytest.fixture(scope="module")
def frames(stop_scene):
    """Four context frames of the stop sign with a sticker patch that requires grad."""
    patch = sticker_for_scene(stop_scene, shape="bars", area=0.18)
    pipe = ViewPipeline(Renderer(), BackgroundBank(4, seed=0), (SIZE, SIZE))
    sampler = FrameSampler(ViewSampler(background_count=4, jpeg_share=0.0, distance_m=(4.0, 10.0)),
                           object_share=(0.25, 0.5))
    return patch, pipe, sampler.sample(2, torch.Generator().manual_seed(0))


@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHS)
def test_gradients_reach_the_patch_through_the_candidates(arch, frames, stop_scene):
    patch, pipe, params = frames
    det = load_torchvision_detector(arch, input_size=SIZE, random_init=True)
    assert isinstance(det, TorchvisionDetector) and not det.training
    assert all(not p.requires_grad for p in det.parameters())
    assert len(det.labels) == 91 and det.labels[13] == "stop sign" and det.label_index("stop") == 13
    patch.zero_grad()
    views = pipe(stop_scene, patch.apply(stop_scene.texture), params)
    out = det(views.images)
    b, n, _ = out.candidate_boxes.shape
    assert b == 2 and n > 0 and out.candidate_scores.shape == (2, n, 91) and out.candidate_valid.shape == (2, n)
    assert len(out.detections) == 2 and out.score_threshold == 0.5
    s = out.candidate_scores[out.candidate_valid]
    assert ((s >= 0) & (s <= 1)).all()
    # boxes are in pixels of the rendered frame, whatever size the model resized it to
    centres = (out.candidate_boxes[..., :2] + out.candidate_boxes[..., 2:]).detach() / 2
    assert -SIZE < float(centres[out.candidate_valid].min()) and float(centres[out.candidate_valid].max()) < 2 * SIZE
    loss = hide(out, det.label_index("stop"), views).sum()
    assert loss > 0
    loss.backward()
    grad = patch.logits.grad
    assert grad is not None and float(grad.abs().sum()) > 0, f"no gradient reached the patch through {arch}"


def test_absent_weights_say_where_to_put_them(tmp_path):
    with pytest.raises(VictimError, match="not on this machine") as err:
        load_torchvision_detector("fasterrcnn_mobilenet_v3_large_320_fpn")
    assert "fasterrcnn_mobilenet_v3_large_320_fpn" in str(err.value) and "victim.weights" in str(err.value)
    with pytest.raises(VictimError, match="not on this machine"):
        load_torchvision_detector("retinanet_resnet50_fpn", weights=str(tmp_path / "none.pth"))
    with pytest.raises(VictimError, match="has no detector"):
        load_torchvision_detector("fasterrcnn_banana")


def test_weights_load_from_a_users_file_and_a_wrong_file_is_refused(tmp_path):
    src = load_torchvision_detector("ssdlite320_mobilenet_v3_large", random_init=True)
    path = tmp_path / "ssd.pth"
    torch.save(src.model.state_dict(), path)
    loaded = load_torchvision_detector("ssdlite320_mobilenet_v3_large", weights=str(path))
    for (k, a), b in zip(src.model.state_dict().items(), loaded.model.state_dict().values()):
        assert torch.equal(a, b), k
    x = torch.rand(1, 3, 64, 64)
    with torch.no_grad():
        assert torch.allclose(src(x).candidate_scores, loaded(x).candidate_scores)
    with pytest.raises(VictimError, match="does not hold"):
        load_torchvision_detector("fasterrcnn_mobilenet_v3_large_320_fpn", weights=str(path))


def test_torch_cache_is_where_weights_are_looked_for(tmp_path, monkeypatch):
    """A file in $TORCH_HOME/hub/checkpoints under torchvision's own name is found without a path."""
    import torchvision
    src = load_torchvision_detector("fasterrcnn_mobilenet_v3_large_320_fpn", random_init=True)
    url = torchvision.models.get_model_weights("fasterrcnn_mobilenet_v3_large_320_fpn").DEFAULT.url
    cache = tmp_path / "torch" / "hub" / "checkpoints"
    cache.mkdir(parents=True)
    state = {k: v for k, v in src.model.state_dict().items() if not k.endswith("num_batches_tracked")}
    torch.save(state, cache / url.rsplit("/", 1)[-1])     # as a frozen-BN checkpoint has no counters
    loaded = load_torchvision_detector("fasterrcnn_mobilenet_v3_large_320_fpn")
    assert loaded.input_size == 320


# -- the project's own small detectors of these kinds (python -m physattack.train detector) ------------

@pytest.mark.parametrize("arch", ["fcos", "retinanet", "ssdlite"])
def test_sign_detectors_read_scene_labels_and_pass_gradients_to_the_patch(arch, frames, stop_scene):
    from physattack.victims.torchvision_detection import sign_detector

    patch, pipe, params = frames
    labels = ["stop", "yield", "one_way"]
    torch.manual_seed(0)
    det = sign_detector({"arch": arch, "labels": labels, "input_size": 64, "fpn_channels": 32,
                         "score_threshold": 0.3}).freeze()
    assert det.labels == ("__background__", *labels) and det.input_size == 64 and det.score_threshold == 0.3
    assert det.label_index("stop") == 1 and det.label_index("one_way") == 3      # the scene's own names, no COCO alias
    with pytest.raises(VictimError, match="no label 'stop sign'"):
        det.label_index("stop sign")
    patch.zero_grad()
    views = pipe(stop_scene, patch.apply(stop_scene.texture), params)            # 128-px frames, resized to 64
    out = det(views.images)
    assert out.candidate_scores.shape[:2] == out.candidate_boxes.shape[:2] and out.candidate_scores.shape[-1] == 4
    centres = (out.candidate_boxes[..., :2] + out.candidate_boxes[..., 2:]).detach() / 2
    assert float(centres[out.candidate_valid].max()) > 64                     # boxes in pixels of the 128-px frame
    hide(out, det.label_index("stop"), views).sum().backward()
    assert float(patch.logits.grad.abs().sum()) > 0, f"no gradient reached the patch through {arch}"


def test_a_missing_sign_detector_is_one_sentence_saying_how_to_train_it(tmp_path):
    from physattack.victims.torchvision_detection import bundled_sign_detector, load_sign_detector

    with pytest.raises(VictimError) as err:
        bundled_sign_detector("det_nowhere")
    text = str(err.value)
    assert "\n" not in text and "det_nowhere.safetensors" in text and "det_nowhere.json" in text
    assert "python -m physattack.train detector name=det_nowhere" in text and "victim.weights" in text
    with pytest.raises(VictimError, match="not found at .*none.safetensors"):
        load_sign_detector(tmp_path / "none.safetensors")
    with pytest.raises(VictimError, match="arch must be one of"):
        from physattack.victims.torchvision_detection import sign_detector_model
        sign_detector_model("yolo", 3)
