"""One training step of each trained-detector architecture, in the default and in the channels-last layout.

    OMP_WAIT_POLICY=PASSIVE python benchmarks/detector_train_step.py [--threads 1] [--repeats 5] [--batch 16]

``python -m physattack.train detector`` trains in channels-last (``physattack/train/detector.py``); this
prints, per architecture (``sign_detector_model`` at 160 px, 10 labels), the median seconds of a
forward + backward through the model's own losses on a batch of random frames with two boxes each,
in both layouts, and the ratio. The first step of each is left out (allocations, kernel choice).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from physattack.victims.torchvision_detection import sign_detector_model

ARCHS = [("fcos", "regnetx_002"), ("retinanet", "mobilenetv3_large_100"), ("retinanet", "regnetx_002"),
         ("ssdlite", "-")]


def step_seconds(arch: str, trunk: str, channels_last: bool, batch: int, repeats: int) -> float:
    torch.manual_seed(0)
    model = sign_detector_model(arch, 10, 160, trunk=trunk if trunk != "-" else "regnetx_002").train()
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    images = list(torch.rand(batch, 3, 160, 160, generator=torch.Generator().manual_seed(0)))
    targets = [{"boxes": torch.tensor([[30.0, 30.0, 70.0, 80.0], [100.0, 100.0, 120.0, 130.0]]),
                "labels": torch.tensor([1, 3])}] * batch
    times = []
    for _ in range(repeats + 1):
        t = time.perf_counter()
        sum(model(images, targets).values()).backward()
        times.append(time.perf_counter() - t)
    return statistics.median(times[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{args.batch} frames of 160 px, {args.threads} thread(s), median of {args.repeats} steps")
    print(f"{'architecture':38s} {'default s':>10s} {'channels-last s':>16s} {'ratio':>6s}")
    for arch, trunk in ARCHS:
        plain = step_seconds(arch, trunk, False, args.batch, args.repeats)
        last = step_seconds(arch, trunk, True, args.batch, args.repeats)
        print(f"{arch + ' ' + trunk:38s} {plain:10.3f} {last:16.3f} {plain / last:6.2f}")


if __name__ == "__main__":
    main()
