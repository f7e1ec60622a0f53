"""The README's Python example runs as written, and builds the attack the command builds."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from commands import TINY, with_warp
from omegaconf import OmegaConf

import physattack.cli.attack as attack_cli

README = Path(__file__).resolve().parents[2] / "README.md"


def python_example() -> str:
    text = README.read_text()
    section = text[text.index("## In Python"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_python_path_composes_the_commands_configuration(finished_run):
    cfg = attack_cli.compose("+scene=stop_sign", "attack=yield", *with_warp(TINY), "evaluation.enabled=false")
    assert OmegaConf.to_yaml(cfg, resolve=True) == (finished_run / "config.yaml").read_text()


@pytest.mark.slow
def test_the_readme_python_example_runs_as_written(in_tmp, monkeypatch, capsys):
    code = python_example()
    assert "run_attack(" in code and "compose(" in code
    real = attack_cli.compose
    # the example's own overrides, plus the tests' tiny budget: the code itself runs unchanged
    monkeypatch.setattr(attack_cli, "compose", lambda *o: real(*o, *TINY, "evaluation.enabled=false"))
    exec(compile(code, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "held-out success" in out
    runs = [p for p in in_tmp.rglob("metrics.json")]
    assert len(runs) == 1 and (runs[0].parent / "export" / "manifest.json").is_file()
