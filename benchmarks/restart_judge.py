"""What judging a start on the red team's own drives costs (``attack.restart_judge.by=drives``), and what it reads.

    OMP_WAIT_POLICY=PASSIVE python benchmarks/restart_judge.py --run <classifier or detector run> [--repeat 1]

Builds the run's parts from its ``config.yaml`` (not timed), then times the judge as a restarted run meets it: built
once (the clean sign on the judge's drives) and asked of the run's patch (``patch.pt``, as printed) ``--repeat`` times;
prints the seconds (median of the repeats) and each member's share of the drives run. The run's own
``attack.restart_judge`` says which drives (``by`` is set to ``drives`` here whatever the run used).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path


def main() -> None:
    import torch
    from omegaconf import OmegaConf, open_dict

    from physattack.cli import build
    from physattack.cli.attack import restart_validation
    from physattack.cli.parts import attack_parts
    from physattack.cli.runs import load_patch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True, help="a finished classifier or detector run's folder")
    ap.add_argument("--repeat", type=int, default=1, help="times the patch is judged (the median is printed)")
    args = ap.parse_args()
    folder = Path(args.run)
    cfg = OmegaConf.load(folder / "config.yaml")
    with open_dict(cfg):
        cfg.attack.restarts = max(int(cfg.attack.get("restarts", 1)), 2)
        cfg.attack.restart_judge = {**(cfg.attack.get("restart_judge") or {}), "by": "drives"}
        cfg.evaluation.enabled = False          # the protocol's held-out victims: not needed here
        cfg.resume = None
    run = build.run_config(cfg)
    device = torch.device("cpu")
    parts = attack_parts(cfg, run, device)
    load_patch(parts.patch, folder / "patch.pt", device)
    printed = parts.patch.printed(parts.scene.texture, parts.colour_model)
    t0 = time.perf_counter()
    judge = restart_validation(cfg, parts, run, device)
    built = time.perf_counter() - t0
    times, shares = [], None
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        shares = judge(printed)
        times.append(time.perf_counter() - t0)
    print(f"{folder}: {judge.drives} drives; built (the clean sign) {built:.1f} s; the patch judged in "
          f"{statistics.median(times):.1f} s (median of {len(times)})")
    print("members' share of the drives run: " + ", ".join(f"{k} {100 * v:.1f} %" for k, v in shares.items()))


if __name__ == "__main__":
    main()
