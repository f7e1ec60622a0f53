"""Nothing lost, nothing mislabelled: a full disk, a folder made read-only mid-run, Ctrl-C and SIGTERM
on the long commands, W&B online without a network, an oversized texture and an export page too small
for a sticker each end in one sentence and their exit status (2 bad input, 74 a file that cannot be
written, 130 / 143 a signal), and every file that was there before is unchanged (sha256)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import cv2
import numpy as np
import pytest
from commands import TINY, call, last_error_line, tree_digest

from physattack.errors import WRITE_FAILED, Interrupted

ENV = {"WANDB_MODE": "disabled", "OMP_WAIT_POLICY": "PASSIVE"}


def popen(module: str, args: list[str], cwd: Path, **env) -> subprocess.Popen:
    """The command as a terminal's foreground job runs it: Ctrl-C at its default (a runner started in the
    background, e.g. by a script's ``&``, passes SIGINT on ignored, and Python then never raises
    KeyboardInterrupt)."""
    return subprocess.Popen([sys.executable, "-m", module, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=cwd, env={**os.environ, "HOME": str(cwd / "home"), **ENV, **env},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def wait_for(predicate, proc: subprocess.Popen, timeout: float = 240) -> None:
    deadline = time.time() + timeout
    while not predicate():
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.time() < deadline, "timed out waiting for the command"
        time.sleep(0.1)


# -- interrupts ----------------------------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("module, args, folder, started, sig", [
    # the drive report: once its models are loaded and it judges drives (a library's import may swallow Ctrl-C)
    ("physattack.drive", ["drive=quick"], "drive", "drive/per_drive/command.json", signal.SIGINT),
    ("physattack.evaluate", ["evaluation.settings.atlas=false"], "evaluation", "evaluation", signal.SIGTERM),
])
def test_a_long_command_stopped_by_a_signal_says_so_and_keeps_the_run(finished_run, tmp_path, module, args, folder,
                                                                       started, sig):
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    before = tree_digest(run)
    proc = popen(module, [f"run_dir={run}", *args], tmp_path)
    wait_for(lambda: (run / started).exists(), proc)
    time.sleep(1 if started != folder else 3)                  # inside the work, past the imports
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + sig, err[-3000:]
    line = [ln for ln in err.strip().splitlines() if ln.strip()][-1]
    assert line.startswith(f"interrupted by {signal.Signals(sig).name}: python -m {module} stopped"), err[-2000:]
    assert "Traceback" not in err
    after = tree_digest(run)
    assert {k: after[k] for k in before} == before, "a file of the run changed"
    left = list((run / folder).iterdir()) if (run / folder).is_dir() else []      # gone when it held no work
    assert not any(p.name.startswith(".") and p.suffix in (".mp4", ".json", ".png") for p in left), left


def test_every_hydra_command_turns_a_signal_into_one_sentence_and_its_status(finished_run, in_tmp, capsys):
    from physattack.cli import atlas, attack, drive, evaluate, transfer
    from physattack.cli.door import run_hydra

    for command, argv in [(attack.COMMAND, ["+scene=stop_sign", f"hydra.run.dir={in_tmp / 'new'}"]),
                          (drive.COMMAND, [f"run_dir={finished_run}"]), (evaluate.COMMAND, [f"run_dir={finished_run}"]),
                          (transfer.COMMAND, [f"run_dir={finished_run}"]),
                          (atlas.COMMAND, ["+scene=stop_sign", f"hydra.run.dir={in_tmp / 'atlas'}"])]:
        for raised, status in [(KeyboardInterrupt(), 130), (Interrupted(signal.SIGTERM), 143)]:
            def task(cfg, out, raised=raised):
                raise raised
            before = tree_digest(finished_run)
            assert call(lambda a: run_hydra(dataclasses.replace(command, task=task), a), argv) == status
            assert f"python -m {command.module} stopped before it finished" in capsys.readouterr().err
            assert tree_digest(finished_run) == before
            for made in [in_tmp / "new", in_tmp / "atlas", finished_run / "drive", finished_run / "evaluation", finished_run / "transfer"]:
                shutil.rmtree(made, ignore_errors=True)


@pytest.mark.parametrize("module, target, argv", [
    ("physattack.export", "physattack.cli.export.export_run", ["run_dir=x"]),
    ("physattack.train", "physattack.cli.train.train_signnet", ["signnet", "out={tmp}/w.safetensors"]),
    ("physattack.scene.generate", "physattack.scene.generate.write_sign_scene", ["out={tmp}/scenes"]),
])
def test_every_key_value_command_turns_a_signal_into_one_sentence(module, target, argv, tmp_path, monkeypatch, capsys):
    import importlib

    mod, name = target.rsplit(".", 1)
    main = importlib.import_module({"physattack.export": "physattack.cli.export",
                                    "physattack.train": "physattack.cli.train",
                                    "physattack.scene.generate": "physattack.cli.scenes"}[module]).main
    for raised, status in [(KeyboardInterrupt(), 130), (Interrupted(signal.SIGTERM), 143)]:
        def boom(*a, raised=raised, **k):
            raise raised
        monkeypatch.setattr(importlib.import_module(mod), name, boom)
        assert call(main, [a.format(tmp=tmp_path) for a in argv]) == status
        err = capsys.readouterr().err
        assert f"python -m {module} stopped before it finished" in err and "Traceback" not in err
    assert not (tmp_path / "w.safetensors").exists()


# -- full and read-only disks -------------------------------------------------------------------------

@contextlib.contextmanager
def small_disk(folder: Path, size: str = "64m"):
    """A tmpfs mounted at ``folder`` (needs root and mount rights; the test skips otherwise)."""
    folder.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({proc.stderr.strip() or 'mount failed'}), so no disk can be filled")
    try:
        yield folder
    finally:
        for mount in sorted((line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()
                             if line.split()[1].startswith(str(folder))), key=len, reverse=True):
            subprocess.run(["umount", "-l", mount], capture_output=True)


def fill(folder: Path) -> None:
    """Take every free byte of ``folder``'s file system."""
    with contextlib.suppress(OSError), open(folder / "filler", "wb") as f:
        block = b"\0" * (1 << 20)
        with contextlib.suppress(OSError):
            while True:
                f.write(block)
                f.flush()
        with contextlib.suppress(OSError):
            while True:
                f.write(b"\0" * 4096)
                f.flush()


def pause_between_writes(proc: subprocess.Popen, run: Path) -> None:
    """SIGSTOP ``proc`` at a moment no atomic write of it is half done (no temp file in ``run``)."""
    for _ in range(200):
        proc.send_signal(signal.SIGSTOP)
        if not any(p.name.startswith(".checkpoint.pt.") for p in run.iterdir()):
            return
        proc.send_signal(signal.SIGCONT)
        time.sleep(0.01)
    raise AssertionError("the run never paused between two writes")


@pytest.mark.slow
@pytest.mark.parametrize("how", ["full", "read-only"])
def test_an_attack_that_cannot_write_its_checkpoint_keeps_the_last_good_one(tmp_path, how):
    with small_disk(tmp_path / "disk") as disk:
        run = disk / "run"
        proc = popen("physattack", ["+scene=stop_sign", "attack=yield", *TINY, "attack.steps=100000",
                                    "patch.shape=bars", f"hydra.run.dir={run}"], tmp_path)
        wait_for(lambda: (run / "checkpoint.pt").is_file(), proc)
        pause_between_writes(proc, run)
        if how == "full":
            fill(disk)
        else:                   # a read-only bind mount over the run: its open log stays writable, new files do not
            subprocess.run(["mount", "--bind", str(run), str(run)], check=True)
            subprocess.run(["mount", "-o", "remount,bind,ro", str(run)], check=True)
        before = {k: v for k, v in tree_digest(run).items() if not k.startswith("wandb/")}   # W&B appends its logs
        proc.send_signal(signal.SIGCONT)
        _, err = proc.communicate(timeout=240)
        assert proc.returncode == WRITE_FAILED, err[-3000:]
        line = last_error_line(err)
        reason = "No space left on device" if how == "full" else "Read-only file system"
        assert line.startswith(f"error: Cannot write {run / 'checkpoint.pt'} ({reason})"), line
        assert ("the last good checkpoint.pt is kept: free space (or make the folder writable) and continue the "
                f"run with resume={run}") in line
        after = tree_digest(run)
        assert {k: after.get(k) for k in before} == before, "a file the run had written changed or went"
        import torch
        assert torch.load(run / "checkpoint.pt", weights_only=True)["state"]["step"] >= 1


@pytest.mark.slow
def test_an_export_onto_a_full_disk_writes_nothing_and_says_so(finished_run, tmp_path):
    with small_disk(tmp_path / "disk") as disk:
        run = disk / "run"
        shutil.copytree(finished_run, run, ignore=shutil.ignore_patterns("wandb"))
        fill(disk)
        before = tree_digest(run)
        proc = popen("physattack.export", [f"run_dir={run}"], tmp_path)
        _, err = proc.communicate(timeout=240)
        assert proc.returncode == WRITE_FAILED, err[-3000:]
        assert "No space left on device" in last_error_line(err)
        assert tree_digest(run) == before and not (run / "export-2").exists()


# -- W&B, textures, export pages --------------------------------------------------------------------

@pytest.mark.slow
def test_wandb_online_without_a_network_waits_a_bounded_time(tmp_path):
    run = tmp_path / "run"
    t0 = time.time()
    proc = popen("physattack", ["+scene=stop_sign", *TINY, "logger.mode=online", "logger.init_timeout_s=3",
                                f"hydra.run.dir={run}"], tmp_path, WANDB_MODE="online", WANDB_API_KEY="a" * 40,
                 WANDB_BASE_URL="http://127.0.0.1:9")
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 2, err[-3000:]
    assert "could not reach the W&B server within 3 s" in last_error_line(err)
    assert "logger.mode=offline" in last_error_line(err)
    assert time.time() - t0 < 120 and not run.exists()


def test_an_oversized_texture_is_refused_from_its_header(tmp_path, in_tmp, capsys):
    from physattack.cli.attack import main
    from physattack.scene import SceneError, load_scene
    from physattack.scene.scene import bundled_scenes_dir

    scene = tmp_path / "huge"
    shutil.copytree(bundled_scenes_dir() / "stop_sign", scene)
    big = np.zeros((4100, 4100, 3), np.uint8)
    cv2.imwrite(str(scene / "texture.png"), big, [cv2.IMWRITE_PNG_COMPRESSION, 1])
    before = tree_digest(scene)
    with pytest.raises(SceneError, match=r"4100×4100 px; a texture may be at most 4096 px a side"):
        load_scene(scene)
    assert call(main, ["+scene=stop_sign", f"scene.name_or_path={scene}", *TINY]) == 2
    assert "may be at most 4096 px a side" in last_error_line(capsys.readouterr().err)
    assert tree_digest(scene) == before and not (in_tmp / "outputs").exists()


def test_a_photo_above_the_pixel_limit_is_refused_before_decoding(tmp_path, monkeypatch):
    import physattack.imageio as imageio
    from physattack.errors import InputError

    path = tmp_path / "photo.png"
    cv2.imwrite(str(path), np.zeros((300, 400, 3), np.uint8))
    monkeypatch.setattr(imageio, "MAX_PIXELS", 100_000)
    decoded = []
    monkeypatch.setattr(imageio, "_to_uint8", lambda im: decoded.append(im) or np.zeros((1, 1, 3), np.uint8))
    with pytest.raises(InputError, match=r"400×300 px \(0 megapixels\); images above 0 megapixels"):
        imageio.read_rgb(path, "photo")
    assert decoded == []


def test_export_refuses_a_margin_on_which_a_sticker_cannot_fit(finished_run, tmp_path, capsys):
    from physattack.cli.export import main

    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    before = tree_digest(run)
    assert call(main, [f"run_dir={run}", "margin_mm=80"]) == 2
    line = last_error_line(capsys.readouterr().err)
    assert "margin_mm=80 (printer.export.margin_mm) leaves 50×123 mm of a4 for a cut sheet, but sticker" in line
    assert "make the margin smaller" in line
    assert tree_digest(run) == before and sorted(p.name for p in run.iterdir()) == sorted(
        p.name for p in finished_run.iterdir())
    manifest = json.loads((run / "export" / "manifest.json").read_text())
    assert manifest["stickers"], "the finished run has stickers to cut"
