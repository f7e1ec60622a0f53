"""Numbers the eot part is built with: each bad one fails where it is built, with one sentence that
names its config key and its valid range (physattack/eot/*.py, physattack/errors.py)."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch

from physattack.eot import BackgroundBank, EvalGrid, ViewPipeline, ViewSampler
from physattack.eot.frames import FrameGrid, FrameSampler
from physattack.errors import InputError, check_interval, check_range, check_values


def _one_sentence(message: str) -> None:
    assert message.endswith(".") and "\n" not in message and "Traceback" not in message


@pytest.mark.parametrize("field, value, words", [
    ("distance_m", [25.0, 3.0], "0 < min <= max"),
    ("distance_m", [0.0, 3.0], "0 < min <= max"),
    ("distance_m", 5.0, "[min, max]"),
    ("frame", [0.0, 0.5], "0 < min <= max <= 1"),
    ("frame", [0.5, 1.5], "0 < min <= max <= 1"),
    ("azimuth_deg", [60.0, -60.0], "min <= max"),
    ("elevation_deg", [-15.0, 90.0], "-90 < min <= max < 90"),
    ("shift", [-0.6, 0.1], "-0.5 <= min"),
    ("ambient", [-0.1, 0.5], "0 <= min"),
    ("color_temp_k", [1000.0, 9000.0], "3000 <= min"),
    ("sensor_focal_px", 0.0, "> 0"),
    ("sensor_focal_px", -5.0, "> 0"),
    ("object_width_m", 0.0, "> 0"),
    ("blur_sigma_px", [-1.0, 1.0], "0 <= min"),
    ("motion_px", [1, 2, 3], "odd integers >= 1"),
    ("motion_px", [], "non-empty"),
    ("motion_px", [0, 1], ">= 1"),
    ("exposure", [0.0, 1.3], "0 < min"),
    ("noise_std", [0.04, 0.0], "min <= max"),
    ("jpeg_quality", [40.0, 120.0], "max <= 100"),
    ("jpeg_share", 1.5, "in [0, 1]"),
    ("jpeg_share", -0.1, "in [0, 1]"),
    ("background_count", 0, "integer >= 1"),
    ("bg_scale", [0.0, 1.0], "0 < min <= max <= 1"),
])
def test_sampler_refuses_each_bad_value_naming_its_key(field, value, words):
    with pytest.raises(InputError) as err:
        ViewSampler(**{field: value})
    message = str(err.value)
    assert message.startswith(f"eot.sampler.{field} must ") and words in message
    _one_sentence(message)


def test_reversed_distance_range_is_refused_as_the_issue_writes_it():
    with pytest.raises(InputError, match=r"eot\.sampler\.distance_m must be \[min, max\] .*got \[25, 3\]\."):
        ViewSampler(distance_m=[25, 3])


@pytest.mark.parametrize("field, value, key, words", [
    ("frame", 0.0, "eot.grid.frame", "in (0, 1]"),
    ("frame", 1.2, "eot.grid.frame", "in (0, 1]"),
    ("frame", float("nan"), "eot.grid.frame", "in (0, 1]"),
    ("sensor_focal_px", 0.0, "eot.grid.sensor_focal_px", "> 0"),
    ("distance_m", [4.0, -1.0], "eot.grid.distance_m", "numbers > 0"),
    ("distance_m", [], "eot.grid.distance_m", "non-empty"),
    ("azimuth_deg", [], "eot.grid.azimuth_deg", "non-empty"),
    ("object_width_m", 0.0, "eot.grid.object_width_m", "> 0"),
    ("blur_sigma_px", -0.1, "eot.grid.blur_sigma_px", ">= 0"),
    ("noise_std", -0.1, "eot.grid.noise_std", ">= 0"),
    ("background_count", 0, "eot.grid.background_count", ">= 1"),
    ("lighting", [], "eot.grid.lighting", "non-empty"),
    ("lighting", ["noon", "dusk"], "eot.grid.lighting", "dusk"),
    ("elevation_deg", [0.0, 95.0], "evaluation.grid.elevation_deg", "(-90, 90)"),
    ("camera_effects", ["fog"], "evaluation.grid.camera_effects", "fog"),
    ("backgrounds_per_view", 0, "evaluation.grid.backgrounds_per_view", ">= 1"),
])
def test_grid_refuses_each_bad_value_naming_its_key(field, value, key, words):
    with pytest.raises(InputError) as err:
        EvalGrid(**{field: value})
    message = str(err.value)
    assert message.startswith(key) and words in message
    _one_sentence(message)


def test_defaults_and_the_bundled_eot_configs_pass():
    from pathlib import Path

    import yaml
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    def load(path):           # an option that extends another (eot=approach_2w: defaults [approach, _self_]) over it
        cfg = yaml.safe_load(path.read_text())
        parents = [load(path.parent / f"{p}.yaml") for p in cfg.pop("defaults", []) if p != "_self_"]
        return OmegaConf.to_container(OmegaConf.merge(*parents, cfg))

    ViewSampler(), EvalGrid(), FrameSampler(), FrameGrid()
    for path in sorted((Path(__file__).parents[2] / "conf" / "eot").glob("*.yaml")):
        cfg = load(path)
        sampler = instantiate(cfg["sampler"], _convert_="all")        # ViewSampler, or DriveSampler (eot=drive)
        if path.stem == "approach_2w":
            assert (sampler.segments, sampler.views_per_step, sampler.conditions.any) == (2, 16, False)
        params = sampler.sample(2, torch.Generator().manual_seed(0))
        assert len(params) == 2 and torch.isfinite(params.distance_m).all(), path.name
        EvalGrid(**{k: v for k, v in cfg["grid"].items() if k != "_target_"})


def test_frames_and_banks_and_pipelines_check_their_numbers():
    with pytest.raises(InputError, match=r"FrameSampler\.fov_deg must be \[min, max\]"):
        FrameSampler(fov_deg=(25.0, 7.0))
    with pytest.raises(InputError, match=r"FrameSampler\.object_share .* <= 1"):
        FrameSampler(object_share=(0.1, 1.5))
    with pytest.raises(InputError, match=r"FrameGrid\.fov_deg must be in \(0, 180\)"):
        FrameGrid(fov_deg=0.0)
    with pytest.raises(InputError, match=r"eot\.backgrounds\.count .* >= 0"):
        BackgroundBank(count=-1)
    with pytest.raises(InputError, match=r"image_size must be an integer >= 8"):
        ViewPipeline(None, None, (0, 96))
    with pytest.raises(InputError, match=r"image_size must be \(height, width\)"):
        ViewPipeline(None, None, 96)


def test_digit_task_checks_its_class_count_and_split():
    pytest.importorskip("sklearn")
    from physattack.eot.tasks import DigitTask
    with pytest.raises(InputError, match=r"attack\.classes must be an integer in \[2, 10\]"):
        DigitTask(classes=11)
    with pytest.raises(InputError, match=r"heldout_share must be in \(0, 1\)"):
        DigitTask(heldout_share=1.0)


def test_check_helpers_return_what_they_accept():
    assert check_range("k", 3, 1, integer=True) == 3
    assert check_range("k", 4.0, 1, integer=True) == 4
    assert check_interval("k", [1, 2], 0, lo_open=True) == (1, 2)
    assert check_values("k", (1.0, 2.0), 0) == [1.0, 2.0]
    with pytest.raises(InputError, match=r"k must be an integer >= 1; got True\."):
        check_range("k", True, 1, integer=True)
    with pytest.raises(InputError, match=r"k must be a number in \[0, 1\] \(a share\); got 'x'\."):
        check_range("k", "x", 0, 1, why="a share")
    with pytest.raises(InputError, match=r"k must be a finite number; got inf\."):
        check_range("k", float("inf"))


def _photo(path, colour=(30, 120, 200)):
    img = np.zeros((40, 60, 3), np.uint8)
    img[:] = colour
    cv2.imwrite(str(path), cv2.cvtColor(img, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, 95])


def test_a_background_folder_reads_photos_and_refuses_a_truncated_one(tmp_path):
    _photo(tmp_path / "a.jpg")
    cv2.imwrite(str(tmp_path / "grey.png"), np.full((30, 30), 90, np.uint8))
    bank = BackgroundBank(count=0, folder=tmp_path)
    assert bank.images.shape == (2, 3, 256, 256)
    assert abs(float(bank.images[0, 2].mean()) * 255 - 200) < 3             # RGB order kept
    assert torch.allclose(bank.images[1, 0], bank.images[1, 1])             # grey became RGB
    data = (tmp_path / "a.jpg").read_bytes()
    (tmp_path / "b.jpg").write_bytes(data[:len(data) // 2])
    with pytest.raises(InputError, match=r"background image .*b\.jpg is truncated"):
        BackgroundBank(count=0, folder=tmp_path)
