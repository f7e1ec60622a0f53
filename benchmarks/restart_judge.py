"""What judging a start on the red team's own drives costs (``attack.restart_judge.by=drives``), and what it reads.

    OMP_WAIT_POLICY=PASSIVE python benchmarks/restart_judge.py --run <classifier or detector run> [--repeat 1]
        [--against-stack]

Builds the run's parts from its ``config.yaml`` (not timed), then times the judge as a restarted run meets it: built
once (the clean sign on the judge's drives) and asked of the run's patch (``patch.pt``, as printed) ``--repeat`` times;
prints the seconds (median of the repeats) and each member's share of the drives run. The run's own
``attack.restart_judge`` says which drives (``by`` is set to ``drives`` here whatever the run used).
``--against-stack``: also times, alternating with it in the same process, the judge that reads the stack's own verdict
(the members' mean) beside the members, as it did before 2026-12-07, and prints the ratio (the shares must agree).
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
    ap.add_argument("--against-stack", action="store_true",
                    help="also time the judge that reads the stack's own verdict, as the baseline")
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
    kinds = {"members alone": False, **({"with the stack's own reading": True} if args.against_stack else {})}
    judges, built = {}, {}
    for name, own in kinds.items():
        t0 = time.perf_counter()
        judges[name] = restart_validation(cfg, parts, run, device, own=own)
        built[name] = time.perf_counter() - t0
    times, shares = {name: [] for name in kinds}, {}
    for r in range(args.repeat):
        for name in (list(kinds) if r % 2 == 0 else list(kinds)[::-1]):     # alternated: drift hits both alike
            t0 = time.perf_counter()
            shares[name] = judges[name](printed)
            times[name].append(time.perf_counter() - t0)
    for name in kinds:
        print(f"{folder}: {judges[name].drives} drives, {name}: built (the clean sign) {built[name]:.1f} s; the patch "
              f"judged in {statistics.median(times[name]):.1f} s (median of {len(times[name])})")
    print("members' share of the drives run: " + ", ".join(f"{k} {100 * v:.1f} %"
                                                          for k, v in shares["members alone"].items()))
    if args.against_stack:
        base = "with the stack's own reading"
        ratio = statistics.median(times["members alone"]) / statistics.median(times[base])
        print(f"members alone / {base}: {ratio:.2f}; the shares "
              f"{'agree' if shares['members alone'] == shares[base] else 'DIFFER'}")


if __name__ == "__main__":
    main()
