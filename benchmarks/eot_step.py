"""What an EOT step costs, and how it scales: printed as shares and ratios measured in one run.

    OMP_WAIT_POLICY=PASSIVE python benchmarks/eot_step.py [--device cuda] [--amp] [--channels-last]
        [--batches 8,16,32,64,128,256] [--repeats 5]

1. The share of one EOT step (sample, render, camera effects, victim forward+backward, Adam step on
   the patch) spent outside the victim, with ResNet-50 (random weights, 224 px, 16 views: the
   victim's cost does not depend on its weights) and with the bundled SignNet (96 px, 24 views).
   Each step is timed in parts (the victim's forward+backward on the rendered images, then the
   backward through the renderer and the Adam step), so both sides of the share come from the
   same step; the share quoted is the median over steps.
2. Step time per view and peak memory as the EOT batch grows, each batch size in a fresh process
   (peak RSS on CPU, torch.cuda.max_memory_allocated on CUDA).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import torch
import torchvision

from physattack.attack.objectives import OBJECTIVES
from physattack.eot import BackgroundBank, ViewPipeline, ViewSampler
from physattack.patch import sticker_for_scene
from physattack.render import Renderer
from physattack.scene import load_scene
from physattack.victims import load_signnet
from physattack.victims.torchvision import TorchvisionClassifier


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, repeats, device) -> float:
    fn()
    sync(device)
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        sync(device)
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def make_step(victim, size, batch, device, amp=False, channels_last=False):
    scene = load_scene("stop_sign").to(device)
    patch = sticker_for_scene(scene, shape="bars").to(device)
    pipe = ViewPipeline(Renderer(), BackgroundBank(16, seed=0), (size, size))
    sampler = ViewSampler(background_count=16)
    g = torch.Generator().manual_seed(0)
    opt = torch.optim.Adam(patch.parameters(), lr=0.1)
    label = victim.label_index(victim.labels[1])
    objective = OBJECTIVES["targeted"]

    def render():
        views = pipe(scene, patch.apply(scene.texture), sampler.sample(batch, g))
        images = views.images
        if channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        return images, views

    def step(parts=None):
        """One EOT step, timed in parts: the victim's forward+backward on the rendered images is
        split from the rest (sampling, rendering, effects, their backward, Adam) within the step."""
        t0 = time.perf_counter()
        images, views = render()
        leaf = images.detach().requires_grad_(True)
        sync(device)
        t1 = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            out = victim(leaf)
        loss = objective.loss(out.float(), label, views).mean()
        opt.zero_grad()
        loss.backward()
        sync(device)
        t2 = time.perf_counter()
        images.backward(leaf.grad)
        opt.step()
        sync(device)
        t3 = time.perf_counter()
        if parts is not None:
            parts.append((t3 - t0, t2 - t1))
    return step


def share_outside(name, victim, size, batch, device, repeats, amp, cl):
    step = make_step(victim, size, batch, device, amp, cl)
    step()
    parts = []
    for _ in range(repeats):
        step(parts)
    shares = [(total - vic) / total for total, vic in parts]
    t_step = statistics.median(p[0] for p in parts)
    t_victim = statistics.median(p[1] for p in parts)
    share = statistics.median(shares)
    print(f"{name:>10} {batch:3d}x{size}px: step {1000 * t_step:8.1f} ms, victim fwd+bwd {1000 * t_victim:8.1f} ms, "
          f"everything else {100 * share:5.1f} % of the step (goal <= 15 % with ResNet-50)")
    return share


def one_batch(batch: int, device: str, repeats: int) -> None:
    dev = torch.device(device)
    step = make_step(load_signnet().to(dev), 96, batch, dev)
    t = timed(step, repeats, dev)
    if dev.type == "cuda":
        peak = torch.cuda.max_memory_allocated() / 2**20
    else:
        peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM")) / 1024
    print(json.dumps({"batch": batch, "step_s": t, "peak_mib": peak}))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cpu")
    p.add_argument("--amp", action="store_true", help="bf16 autocast for the victim")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--batches", default="8,16,32,64,128,256")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--one-batch", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one_batch:
        return one_batch(args.one_batch, args.device, args.repeats)
    dev = torch.device(args.device)
    print(f"torch {torch.__version__} on {dev}, {torch.get_num_threads()} threads, amp={args.amp}, "
          f"channels_last={args.channels_last}; medians of {args.repeats}")
    resnet = TorchvisionClassifier(torchvision.models.resnet50(weights=None), [str(i) for i in range(1000)]).freeze()
    if args.channels_last:
        resnet = resnet.to(memory_format=torch.channels_last)
    share_outside("resnet50", resnet.to(dev), 224, 16, dev, args.repeats, args.amp, args.channels_last)
    share_outside("signnet", load_signnet().to(dev), 96, 24, dev, args.repeats, args.amp, args.channels_last)
    print("EOT batch scaling (SignNet, 96 px), each in a fresh process:")
    base = None
    for b in [int(x) for x in args.batches.split(",")]:
        out = subprocess.run([sys.executable, __file__, "--one-batch", str(b), "--device", args.device,
                              "--repeats", str(max(2, args.repeats // 2))], capture_output=True, text=True)
        if out.returncode != 0:
            print(f"  batch {b}: failed: {out.stderr.strip().splitlines()[-1]}")
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        per_view = 1000 * r["step_s"] / b
        base = base or per_view
        print(f"  batch {b:4d}: step {1000 * r['step_s']:8.1f} ms, {per_view:6.2f} ms/view "
              f"({base / per_view:4.2f}x the per-view throughput of batch 8), peak memory {r['peak_mib']:8.0f} MiB")


if __name__ == "__main__":
    main()
