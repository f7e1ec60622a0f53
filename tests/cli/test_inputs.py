"""The bad inputs of issue 13, through the commands: each is one sentence naming what is wrong, exit
status 2, and nothing the user made (a finished run, a scene folder, the working folder) changes."""

from __future__ import annotations

import pathlib
import shutil

import pytest
import torch
from commands import call, one_sentence, tree_digest

from physattack.cli.attack import main as attack_main
from physattack.cli.evaluate import main as evaluate_main
from physattack.cli.export import main as export_main
from physattack.scene.scene import bundled_scenes_dir


class Payload:
    """Unpickling this runs ``Path.touch(target)``: what a shared run folder could hide in a .pt file."""

    def __init__(self, target: pathlib.Path):
        self.target = target

    def __reduce__(self):
        return pathlib.Path.touch, (self.target,)


@pytest.mark.parametrize("override, words", [
    ("attack.steps=-1", ["attack.steps", ">= 1", "-1"]),
    ("attack.batch_size=0", ["attack.batch_size", ">= 1"]),
    ("image_size=0", ["image_size", ">= 8"]),
    ("eot.grid.sensor_focal_px=0", ["eot.grid.sensor_focal_px", "> 0"]),
    ("eot.grid.frame=0", ["eot.grid.frame", "(0, 1]"]),
    ("eot.sampler.speed_kmh=[75,25]", ["eot.sampler.speed_kmh", "min <= max"]),
])
def test_numbers_out_of_range_are_refused_before_any_work(override, words, in_tmp, capsys):
    assert call(attack_main, ["+scene=stop_sign", override]) == 2
    msg = one_sentence(capsys)
    for w in words:
        assert w in msg, msg
    assert not list(in_tmp.iterdir()), "a refused run left a folder behind"


def test_an_area_frontier_of_a_paint_patch_names_the_key(in_tmp, capsys):
    assert call(attack_main, ["+scene=stop_sign", "patch=paint", "evaluation.area.enabled=true"]) == 2
    msg = one_sentence(capsys)
    assert "evaluation.area.enabled=true" in msg and "no stickers to take off" in msg, msg
    assert not list(in_tmp.iterdir()), "a refused run left a folder behind"


def scene_copy(tmp_path) -> pathlib.Path:
    folder = tmp_path / "scene"
    shutil.copytree(bundled_scenes_dir() / "stop_sign", folder)
    return folder


def edit_obj(folder: pathlib.Path, prefix: str, replace) -> int:
    """Rewrite the first OBJ line starting with ``prefix``; returns its 1-based line number."""
    obj = folder / "sign.obj"
    lines = obj.read_text().splitlines()
    k = next(i for i, ln in enumerate(lines) if ln.startswith(prefix))
    lines[k] = replace(lines[k])
    obj.write_text("\n".join(lines) + "\n")
    return k + 1


@pytest.mark.parametrize("broken, prefix, words", [
    ("nan_vertex", "v ", ["finite"]),
    ("face_past_the_list", "f ", ["face", "vertices"]),
])
def test_broken_meshes_name_the_file_and_line(broken, prefix, words, tmp_path, in_tmp, capsys):
    folder = scene_copy(tmp_path)
    if broken == "nan_vertex":
        line = edit_obj(folder, prefix, lambda ln: "v nan 0.0 0.0")
    else:
        line = edit_obj(folder, prefix, lambda ln: "f " + " ".join(["9999/1/1"] * 3))
    before = tree_digest(folder)
    assert call(attack_main, ["+scene=stop_sign", f"scene.name_or_path={folder}",
                              f"hydra.run.dir={in_tmp / 'run'}"]) == 2
    msg = one_sentence(capsys)
    assert f"sign.obj:{line}" in msg, msg
    assert any(w in msg for w in words), msg
    assert tree_digest(folder) == before and not (in_tmp / "run").exists()


def test_a_transparent_texture_is_refused(tmp_path, in_tmp, capsys):
    import cv2
    import numpy as np
    folder = scene_copy(tmp_path)
    bgr = cv2.imread(str(folder / "texture.png"), cv2.IMREAD_COLOR)
    alpha = np.full(bgr.shape[:2], 255, np.uint8)
    alpha[:40, :40] = 0
    cv2.imwrite(str(folder / "texture.png"), np.dstack([bgr, alpha]))
    assert call(attack_main, ["+scene=stop_sign", f"scene.name_or_path={folder}"]) == 2
    msg = one_sentence(capsys)
    assert "texture.png" in msg and "transparen" in msg, msg


def test_random_bytes_as_weights_name_the_file(in_tmp, capsys):
    bad = in_tmp / "weights" / "noise.safetensors"
    bad.parent.mkdir()
    bad.write_bytes(torch.randint(0, 256, (4096,), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
                    .numpy().tobytes())
    (bad.parent / "noise.json").write_text("{}")
    assert call(attack_main, ["+scene=stop_sign", f"victim.weights={bad}"]) == 2
    assert "noise.safetensors" in one_sentence(capsys)


def test_online_logging_without_a_key_is_one_sentence(in_tmp, monkeypatch, capsys):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(in_tmp / "no-netrc"))
    assert call(attack_main, ["+scene=stop_sign", "logger.mode=online", "attack.steps=1",
                              f"hydra.run.dir={in_tmp / 'run'}"]) == 2
    assert "API key" in one_sentence(capsys)


def test_an_unwritable_output_folder_is_refused_before_any_work(in_tmp, capsys):
    (in_tmp / "a_file").write_text("not a folder")
    assert call(attack_main, ["+scene=stop_sign", f"hydra.run.dir={in_tmp / 'a_file' / 'run'}"]) == 2
    msg = one_sentence(capsys)
    assert "Cannot write" in msg and "hydra.run.dir" in msg


def test_a_finished_run_folder_is_never_reused(finished_run, capsys):
    before = tree_digest(finished_run)
    assert call(attack_main, ["+scene=stop_sign", "attack=untargeted", f"hydra.run.dir={finished_run}"]) == 2
    msg = one_sentence(capsys)
    assert "already holds files" in msg and f"resume={finished_run}" in msg
    assert tree_digest(finished_run) == before


def test_a_pickle_payload_in_a_checkpoint_never_runs(tmp_path, in_tmp, capsys):
    shared = tmp_path / "shared_run"
    shared.mkdir()
    pwned = tmp_path / "pwned"
    torch.save({"patch": Payload(pwned), "state": {}}, shared / "checkpoint.pt")
    before = tree_digest(shared)
    assert call(attack_main, ["+scene=stop_sign", f"resume={shared}"]) == 2
    msg = one_sentence(capsys)
    assert "checkpoint.pt" in msg and "refused" in msg, msg
    assert not pwned.exists(), "the payload ran"
    assert tree_digest(shared) == before and sorted(p.name for p in shared.iterdir()) == ["checkpoint.pt"]


def test_a_truncated_checkpoint_is_one_sentence(finished_run, tmp_path, in_tmp, capsys):
    run = tmp_path / "cut"
    run.mkdir()
    data = (finished_run / "checkpoint.pt").read_bytes()
    (run / "checkpoint.pt").write_bytes(data[: len(data) // 2])
    assert call(attack_main, ["+scene=stop_sign", f"resume={run}"]) == 2
    assert "checkpoint.pt" in one_sentence(capsys)


@pytest.mark.parametrize("main", [export_main, evaluate_main], ids=["export", "evaluate"])
def test_a_pickle_payload_in_a_shared_patch_never_runs(main, finished_run, tmp_path, in_tmp, capsys):
    shared = tmp_path / "shared_run"
    shared.mkdir()
    shutil.copy(finished_run / "config.yaml", shared / "config.yaml")
    pwned = tmp_path / "pwned"
    torch.save({"patch": Payload(pwned)}, shared / "patch.pt")
    before = tree_digest(shared)
    assert call(main, [f"run_dir={shared}"]) == 2
    msg = one_sentence(capsys)
    assert "patch.pt" in msg and "refused" in msg, msg
    assert not pwned.exists(), "the payload ran"
    assert tree_digest(shared) == before


def test_an_undefined_success_rate_is_said_in_words():
    from physattack.cli.attack import headline
    from physattack.run_report import RunReport
    metrics = {"attack": "targeted -> yield", "true_label": "stop", "patch_area_fraction": 0.19,
               "attack_success_rate": {"rate": float("nan"), "count": 0, "n": 0, "ci95": [0.0, 1.0]},
               "clean_accuracy": {"rate": 0.0, "count": 0, "n": 120, "ci95": [0.0, 0.03]}}
    line = headline(RunReport.from_json(metrics))
    assert "nan" not in line and "undefined" in line and "0.0% of 120" in line
