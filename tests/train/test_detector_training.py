"""``python -m physattack.train detector``: a torchvision detector of another architecture trained on a tiny
budget of DetNet's frames, written as float16 safetensors + JSON with the command, and loaded back as a
victim that reads the scene's own label names."""

from __future__ import annotations

import json

import pytest
import torch

from physattack.cli.train import main
from physattack.train.detector import DetectorTraining
from physattack.victims import VictimError
from physattack.victims.torchvision_detection import (TorchvisionDetector, bundled_sign_detector, load_sign_detector,
                                                      sign_detector)

TINY = ["frames=4", "test_frames=2", "epochs=1", "batch_size=2", "image_size=64", "fpn_channels=32", "threads=1"]


@pytest.mark.parametrize("arch", ["fcos", "ssdlite"])
def test_tiny_training_writes_float16_weights_and_the_command_and_loads_back(tmp_path, capsys, arch):
    out = tmp_path / f"det_{arch}.safetensors"
    argv = ["detector", f"arch={arch}", f"out={out}", *TINY]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert f"wrote {out}" in printed and "held-out AP@0.5" in printed
    meta = json.loads(out.with_suffix(".json").read_text())
    assert meta["command"] == "python -m physattack.train " + " ".join(argv)
    assert meta["arch"] == arch and meta["storage"] == "float16" and meta["input_size"] == 64
    assert meta["labels"][0] == "stop" and len(meta["labels"]) == len(meta["heldout_ap50"]) == 9
    assert meta["train"]["epochs"] == 1 and meta["train"]["frames"] == 4 and "minutes" in meta["train"]
    assert 0.0 <= meta["grid_detection_rate_stop"] <= 1.0
    assert meta["weights_bytes"] < 2.5 * meta["parameters"]          # float16: two bytes a weight (+ counters)

    det = load_sign_detector(out)
    assert isinstance(det, TorchvisionDetector) and not det.training
    assert det.input_size == 64 and det.score_threshold == meta["score_threshold"]
    assert det.labels[0] == "__background__" and det.label_index("stop") == 1       # no COCO alias for our labels
    assert det.meta["command"] == meta["command"]
    same = bundled_sign_detector(out.stem, weights=str(out), score_threshold=0.5)
    assert same.score_threshold == 0.5
    x = torch.rand(2, 3, 64, 64)
    a, b = det(x), same(x)
    assert torch.equal(a.candidate_scores, b.candidate_scores)       # the same weights, whichever loader

    before = out.read_bytes()
    assert main(argv) == 2                                           # refused before anything is rendered
    assert "already exists" in one_sentence(capsys) and out.read_bytes() == before


def one_sentence(capsys) -> str:
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_a_file_of_another_architecture_is_one_sentence(tmp_path):
    from physattack.train.detector import save_detector

    arch = DetectorTraining(arch="fcos", image_size=64, fpn_channels=32).architecture(["stop", "yield"])
    out = tmp_path / "det.safetensors"
    save_detector(out, sign_detector(arch), {**arch, "storage": "float16"})
    meta = json.loads(out.with_suffix(".json").read_text())
    out.with_suffix(".json").write_text(json.dumps({**meta, "arch": "ssdlite"}))
    with pytest.raises(VictimError, match="does not fit the network"):
        load_sign_detector(out)


@pytest.mark.parametrize("argv, words", [
    (["detector", "arch=yolo"], "arch must be one of"),
    (["detector", "arch=fcso"], "did you mean fcos"),
    (["detector", "image_size=100"], "multiple of 32"),
    (["detector", "fpn_channels=48"], "multiple of 32"),
    (["detector", "name=a/b"], "may hold only"),
    (["detector", "storage=int8"], "storage must be one of"),
])
def test_bad_options_are_one_sentence_and_exit_2(capsys, argv, words):
    assert main(argv) == 2
    assert words in one_sentence(capsys)
