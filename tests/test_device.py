"""The same code on the configured device (CPU here; CUDA under benchmarks/gpu_check.sh)."""

from __future__ import annotations

import torch

from physattack.attack import AttackSetup, EOTAttack
from physattack.config import RunConfig
from physattack.eot import BackgroundBank, ViewPipeline, ViewSampler
from physattack.patch import sticker_for_scene
from physattack.printing import load_palette
from physattack.render import Renderer


def test_render_on_device_matches_cpu(stop_scene, device):
    params = ViewSampler(background_count=4).sample(4, torch.Generator().manual_seed(0))
    bank = BackgroundBank(4, seed=0)
    cpu = ViewPipeline(Renderer(), bank, (64, 64))(stop_scene, stop_scene.texture, params, effects=False)
    dev_scene = stop_scene.to(device)
    dev = ViewPipeline(Renderer(), BackgroundBank(4, seed=0), (64, 64))(dev_scene, dev_scene.texture, params,
                                                                         effects=False)
    assert dev.images.device.type == device.type
    assert (dev.images.cpu() - cpu.images).abs().mean() < 1e-3
    assert torch.allclose(dev.boxes.cpu(), cpu.boxes, atol=1.0)


def test_attack_steps_on_device(stop_scene, signnet, device, tmp_path):
    scene = stop_scene.to(device)
    victim = signnet.to(device)
    patch = sticker_for_scene(scene).to(device)
    attack = EOTAttack(target="yield", steps=2, batch_size=4, mask_search_steps=1)
    setup = AttackSetup(scene=scene, patch=patch, victim=victim, sampler=ViewSampler(background_count=4),
                        pipeline=ViewPipeline(Renderer(), BackgroundBank(4, seed=0), (64, 64)), palette=load_palette())
    cuda = device.type == "cuda"
    result = attack.run(setup, RunConfig(seed=0, progress=False, amp=cuda, channels_last=cuda), tmp_path)
    assert result.steps_done == 2 and result.zero_grad_steps == 0
    assert patch.logits.device.type == device.type
    signnet.to("cpu")
