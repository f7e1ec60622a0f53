"""``python -m physattack.train``: a tiny budget end to end, the recorded command, and no overwrite."""

from __future__ import annotations

import hashlib
import json

import pytest

from physattack.cli.train import main
from physattack.victims import load_detnet, load_signnet

TINY = {
    "signnet": ["per_class=2", "test_per_class=1", "epochs=1", "batch_size=6", "image_size=32"],
    "detnet": ["frames=4", "test_frames=2", "epochs=1", "batch_size=2", "image_size=48", "width=4", "neck=8",
               "threads=1"],
}
LOADERS = {"signnet": load_signnet, "detnet": load_detnet}


def _digest(*paths) -> list[str]:
    return [hashlib.sha256(p.read_bytes()).hexdigest() for p in paths]


@pytest.mark.parametrize("model", ["signnet", "detnet"])
def test_tiny_training_writes_weights_records_the_command_and_never_overwrites(tmp_path, capsys, model):
    out = tmp_path / "w" / f"{model}.safetensors"
    argv = [model, f"out={out}", *TINY[model]]
    assert main(argv) == 0
    meta_path = out.with_suffix(".json")
    meta = json.loads(meta_path.read_text())
    assert meta["command"] == "python -m physattack.train " + " ".join(argv)
    assert meta["train"]["epochs"] == 1 and meta["train"]["seed"] == 0
    assert LOADERS[model](out).meta["command"] == meta["command"]      # what was written loads back
    assert f"wrote {out}" in capsys.readouterr().out

    before = _digest(out, meta_path)
    assert main(argv) == 2                                           # refused before anything is rendered
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "already exists" in err and "overwrite=true" in err and err.count("\n") == 1
    assert _digest(out, meta_path) == before
    assert sorted(p.name for p in out.parent.iterdir()) == sorted([out.name, meta_path.name])


def test_help_names_the_command_and_its_options(capsys):
    assert main(["--help"]) == 0
    text = capsys.readouterr().out
    assert "python -m physattack.train" in text and "signnet" in text and "detnet" in text
    assert main(["detnet", "-h"]) == 0
    text = capsys.readouterr().out
    assert "python -m physattack.train detnet" in text and "frames=6000" in text and "score_threshold=0.3" in text


def test_help_keeps_every_line_of_an_options_text(capsys):
    assert main(["zoo", "--help"]) == 0
    lines = {line.split()[0].split("=")[0]: line for line in capsys.readouterr().out.splitlines()
             if line.startswith("  ") and "=" in line.split()[0]}
    assert lines["config"].rstrip().endswith("(by name when out is in physattack/assets, else with every "
                                             "victim=timm key filled).")          # its docstring's second line
    assert "so fewer page faults" in lines["keep_freed_memory"] and lines["keep_freed_memory"].split()[0].endswith("=true")


@pytest.mark.parametrize("setting, calls", [("true", 1), ("false", 0)])
def test_training_keeps_freed_memory_unless_told_not_to(tmp_path, monkeypatch, setting, calls):
    import physattack.cli.train as cli

    asked = []
    monkeypatch.setattr(cli, "keep_freed_memory", lambda: asked.append(1) or True)
    argv = ["signnet", f"out={tmp_path / 'w.safetensors'}", *TINY["signnet"], f"keep_freed_memory={setting}"]
    assert main(argv) == 0
    assert len(asked) == calls
    assert json.loads((tmp_path / "w.json").read_text())["command"].endswith(f"keep_freed_memory={setting}")


@pytest.mark.parametrize("argv, words", [
    (["signet"], "did you mean signnet"),
    (["signnet", "epoch=3"], "did you mean epochs"),
    (["signnet", "epochs=0"], "epochs must be an integer >= 1"),
    (["signnet", "epochs=many"], "could not be converted"),
    (["signnet", "--epochs", "3"], "key=value"),
    (["signnet", "per_class=1", "batch_size=128"], "batch_size=128 is more than"),
    (["detnet", "image_size=100"], "multiple of 16"),
    (["signnet", "out=weights.pt"], ".safetensors"),
])
def test_bad_options_are_one_sentence_and_exit_2(tmp_path, capsys, argv, words):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1


def test_an_unwritable_folder_is_refused_before_training(tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    assert main(["signnet", f"out={blocker / 'w.safetensors'}"]) == 2
    err = capsys.readouterr().err
    assert "Cannot write the output folder" in err and err.count("\n") == 1
