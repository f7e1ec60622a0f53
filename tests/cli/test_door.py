"""The door (physattack/cli/door.py): Hydra's composition errors, unknown arguments and wrong types
become one sentence with a "did you mean"; every command answers --help with its own name."""

from __future__ import annotations

import importlib

import pytest
from commands import call, one_sentence

from physattack.cli.attack import main as attack_main


@pytest.mark.parametrize("args, words", [
    (["attack=yeild"], ["attack=yeild", "did you mean yield", "reprogram"]),
    (["attack.stpes=3"], ["attack.stpes", "did you mean steps", "batch_size"]),
    (["+attack.stpes=3"], ["attack.stpes", "EOTAttack", "did you mean steps"]),
    (["attack.steps=abc"], ["attack.steps", "integer", "'abc'"]),
    (["sed=1"], ["sed", "did you mean seed"]),
    (["victim=signet"], ["victim=signet", "did you mean signnet"]),
    (["attack.steps=["], ["Cannot read an override"]),
    (["patch.shape=bars", "patch.aera=0.1"], ["patch.aera", "did you mean area"]),
])
def test_composition_errors_are_one_sentence_with_a_suggestion(args, words, in_tmp, capsys):
    assert call(attack_main, ["+scene=stop_sign", *args]) == 2
    msg = one_sentence(capsys)
    for w in words:
        assert w in msg, msg
    assert not list(in_tmp.iterdir()), "a refused command left files behind"


def test_a_constructor_argument_missing_from_the_yaml_is_offered_with_a_plus(in_tmp, capsys):
    # WandbTracker takes resume_id, which conf/logger/wandb.yaml does not list: say how to add it
    assert call(attack_main, ["+scene=stop_sign", "logger.resume_id=abc"]) == 2
    assert "add it with +logger.resume_id=abc" in one_sentence(capsys)


def test_scene_without_plus_and_missing_scene(in_tmp, capsys):
    assert call(attack_main, ["scene=stop_sign"]) == 2
    assert "+scene=" in one_sentence(capsys)
    assert call(attack_main, ["+scene=stop_sgn"]) == 2
    assert "did you mean stop_sign" in one_sentence(capsys)


@pytest.mark.parametrize("module, words", [
    ("physattack.cli.attack", ["python -m physattack ", "+scene=stop_sign attack=yield", "+scene", "attack", "victim"]),
    ("physattack.cli.evaluate", ["python -m physattack.evaluate", "run_dir=", "evaluation"]),
    ("physattack.cli.transfer", ["python -m physattack.transfer", "run_dir="]),
    ("physattack.cli.atlas", ["python -m physattack.atlas", "+scene=stop_sign", "victim"]),
    ("physattack.cli.export", ["python -m physattack.export", "run_dir=", "dpi"]),
    ("physattack.cli.calibrate", ["python -m physattack.calibrate", "chart", "fit"]),
    ("physattack.cli.photos", ["python -m physattack.evaluate_photos", "true_label"]),
    ("physattack.cli.train", ["python -m physattack.train", "signnet", "detnet"]),
    ("physattack.cli.scenes", ["python -m physattack.scene.generate", "out", "overwrite"]),
])
def test_every_command_answers_help_with_its_own_name(module, words, capsys):
    assert call(importlib.import_module(module).main, ["--help"]) == 0
    out = capsys.readouterr().out
    assert "powered by Hydra" not in out
    for w in words:
        assert w in out, out


def test_key_value_commands_suggest_the_option_meant(tmp_path, capsys):
    from physattack.cli.export import main as export_main
    assert call(export_main, [f"run_dir={tmp_path}", "dpy=300"]) == 2
    assert "did you mean dpi" in one_sentence(capsys)
