"""Finished runs are read through one function (physattack/cli/runs.py ``open_run``) and their report
through ``run_report.read_report``: today's folders, folders earlier versions wrote (no schema version,
class paths that have moved since), and a report from a newer physattack (one sentence)."""

from __future__ import annotations

import json
import shutil

import pytest
from commands import tree_digest

from physattack.cli.runs import open_run, prior_victims
from physattack.errors import InputError
from physattack.run_report import SCHEMA_VERSION, RunReport, read_report


def test_a_finished_run_opens_with_its_report_and_rebuilds(finished_run):
    folder = open_run(finished_run)
    assert folder.report.kind == "classifier" and folder.report.schema_version == SCHEMA_VERSION
    assert folder.report.headline and folder.report.summary["victim_names"] == ["signnet"]
    assert folder.target == "yield"
    run = folder.rebuild()
    assert run.scene.name == "stop_sign" and run.adv_texture.shape == run.scene.texture.shape


def test_the_init_runs_victims_are_handed_back_as_that_run_built_them(finished_run, tmp_path):
    """A protocol whose pool lacks a victim the init= run attacked builds it from that run's config (issue 28: the
    preset's fourth member had no row in its query runs' tables); only the names asked, only the same kind of model."""
    folder = open_run(finished_run)
    assert folder.gradient_run() is folder and list(folder.victim_configs()) == ["signnet"]
    got = prior_victims(str(finished_run), ["signnet"], detectors=False)
    assert list(got) == ["signnet"] and got["signnet"]._target_ == folder.cfg.victim._target_
    assert prior_victims(str(finished_run), ["signnet"], detectors=True) == {}         # a classifier run, not detectors
    assert prior_victims(str(finished_run), ["zoo_vit"], detectors=False) == {}        # not one of its victims
    assert prior_victims(None, ["signnet"], detectors=False) == {}
    assert prior_victims(str(tmp_path / "gone"), ["signnet"], detectors=False) == {}   # its folder gone: the pool alone


def test_a_folder_written_before_the_run_report_still_loads(finished_run, tmp_path):
    """Version 1: no schema_version and no kind; eot=drive's sampler under its old class path."""
    old = tmp_path / "old"
    shutil.copytree(finished_run, old)
    data = json.loads((old / "metrics.json").read_text())
    del data["schema_version"], data["kind"]
    (old / "metrics.json").write_text(json.dumps(data))
    config = (old / "config.yaml").read_text()
    (old / "config.yaml").write_text(config + "old_sampler:\n  _target_: physattack.eot.drive.DriveSampler\n")
    before = tree_digest(old)
    folder = open_run(old)
    assert folder.report.kind == "classifier" and folder.report.headline == data["headline"]
    assert folder.cfg.old_sampler._target_ == "physattack.drive.DriveSampler"       # where the class lives now
    assert tree_digest(old) == before                                                # reading changes nothing
    detector = RunReport.from_json({"attack": "hide", "detection_rate_clean": {}})
    assert detector.kind == "detector" and RunReport.from_json({"attack": "reprogram"}).kind == "reprogram"


def test_a_report_from_a_newer_physattack_is_one_sentence(tmp_path):
    (tmp_path / "metrics.json").write_text(json.dumps({"schema_version": SCHEMA_VERSION + 1, "kind": "classifier"}))
    with pytest.raises(InputError, match=rf"schema version {SCHEMA_VERSION + 1}, newer than this physattack reads"):
        read_report(tmp_path)
    (tmp_path / "metrics.json").write_text("{not json")
    with pytest.raises(InputError, match="is not valid JSON"):
        read_report(tmp_path)
    assert read_report(tmp_path / "nowhere") is None


def test_the_report_round_trips_and_keeps_sections_whole(tmp_path):
    report = RunReport("classifier", summary={"attack": "untargeted", "steps_done": 3}, per_view=[{"a": 1}])
    report.add(heldout={"views": 2}, headline="h")
    with pytest.raises(ValueError, match="not a section"):
        report.add(heldut={})
    back = read_report(report.write(tmp_path).parent)
    assert back == report and back["heldout"] == {"views": 2} and "drive" not in back
    assert list(json.loads((tmp_path / "metrics.json").read_text()))[:3] == ["schema_version", "kind", "attack"]


def test_keys_that_moved_into_a_group_are_read_where_they_live_now(finished_run, tmp_path):
    """A sticker patch's palette settings and a timm victim's preprocessing were top-level keys once."""
    from omegaconf import OmegaConf

    old = tmp_path / "old"
    shutil.copytree(finished_run, old)
    cfg = OmegaConf.load(old / "config.yaml")
    options = cfg.patch.pop("palette_options")
    cfg.patch.update(options)
    cfg.victim = {"_target_": "physattack.victims.timm.load_timm_classifier", "arch": "resnet18", "input_size": 64,
                  "mean": [0.5, 0.5, 0.5], "preprocessing": {"std": [0.2, 0.2, 0.2]}}
    (old / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
    folder = open_run(old)
    assert "temperature" not in folder.cfg.patch and folder.cfg.patch.palette_options.hard_from == 0.7
    assert dict(folder.cfg.victim.preprocessing) == {"std": [0.2, 0.2, 0.2], "input_size": 64, "mean": [0.5] * 3}
    folder.scene_and_patch()                                   # the old patch config builds today's patch
