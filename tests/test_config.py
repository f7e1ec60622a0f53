"""Run-level settings (physattack/config.py): a bad value fails with one sentence naming its key."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from physattack.config import RunConfig
from physattack.errors import InputError, input_error


@pytest.mark.parametrize("key, value, words", [
    ("image_size", 0, ">= 8"), ("image_size", 4, ">= 8"), ("eval_batch_size", 0, ">= 1"),
    ("gallery_views", -1, ">= 0"), ("device", "gpu", "cuda:N"), ("device", "cuda:x", "cuda:N"),
    ("seed", "zero", "integer"), ("seed", 1.5, "integer"),
])
def test_a_bad_run_setting_names_its_key_and_range(key, value, words):
    with pytest.raises(InputError) as err:
        RunConfig(**{key: value})
    message = str(err.value)
    assert message.startswith(f"{key} must be") and words in message and message.count(".") >= 1


@pytest.mark.parametrize("device", ["cpu", "cuda", "cuda:1", "mps"])
def test_good_devices_pass(device):
    assert RunConfig(device=device).device == device


def test_the_structured_config_path_runs_the_checks():
    """The entry point builds RunConfig through OmegaConf.to_object, which calls the constructor."""
    cfg = OmegaConf.merge(OmegaConf.structured(RunConfig), {"image_size": 0})
    with pytest.raises(Exception) as err:
        OmegaConf.to_object(cfg)
    assert "image_size must be an integer >= 8" in str(input_error(err.value))
    ok = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(RunConfig), {"image_size": 64}))
    assert isinstance(ok, RunConfig) and ok.image_size == 64
