"""The full held-out drive report of finished runs, against the 10-minute budget, and a check that doing
only the work the verdict needs changes no verdict.

    OMP_WAIT_POLICY=PASSIVE python benchmarks/drive_report.py --run <classifier run> --run <detector run> \
        [--reference] [--threads 2]

For each run: ``python -m physattack.drive run_dir=<run>``'s report (conf/drive/default.yaml: 18 drives, the
run's whole panel) is made into a temporary folder as the command makes it (``drive.settings.early_stop=true``:
a reader stops on a drive once it has recognised the sign; ``drive.settings.near_sign=true``: detectors scan only
the tiles near the sign), and timed: wall time, and the process's CPU time
divided by the threads (what two idle cores would take when other work shares them). With ``--reference`` the
same report is made the straightforward way too (``early_stop=false near_sign=false``: every reader reads every
drive to its braking point, every tile of the search region), and every drive's verdict and recognition
distance — the stack's and each panel victim's, clean and attacked — is compared between the two.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import torch

BUDGET_S = 600.0


def report(run: str, shortcuts: bool, out: Path, extra: list[str] = ()) -> tuple[dict, float, float]:
    """The drive report of ``run`` into ``out``; returns drive.json's content, wall and CPU seconds."""
    from omegaconf import open_dict

    from physattack.cli.door import compose_checked
    from physattack.cli.drive import run_drive

    cfg = compose_checked("drive", [f"run_dir={run}", "logger=none", "progress=false",
                                    f"drive.settings.early_stop={str(shortcuts).lower()}",
                                    f"drive.settings.near_sign={str(shortcuts).lower()}", *extra])
    with open_dict(cfg):
        del cfg["hydra"]
    t, c = time.perf_counter(), time.process_time()
    run_drive(cfg, out)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    return json.loads((out / "drive.json").read_text()), wall, cpu


def verdicts(drive_json: dict) -> list:
    return [{k: d[k] for k in ("clean", "attacked") if k in d} for d in drive_json["per_drive"]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", action="append", required=True, help="a finished run's folder (give it more than once)")
    ap.add_argument("--reference", action="store_true", help="also make the report the straightforward way and "
                                                             "compare every verdict")
    ap.add_argument("--reference-speeds", default=None, help="compare only the drives at these speeds, e.g. [70]: "
                                                               "the straightforward path of a detector run's "
                                                               "whole panel takes hours")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        for k, run in enumerate(args.run):
            fast, wall, cpu = report(run, True, Path(tmp) / f"fast-{k}")
            drives = len(fast["per_drive"])
            print(f"{run}: {drives} drives, stack {fast['stack']} ({', '.join(fast['victims'].values())}), panel "
                  f"{len((fast.get('panel') or {}).get('members', {}))} victims")
            print(f"  only the work the verdict needs: {wall:.0f} s wall ({wall / BUDGET_S:.2f} of the 10-min budget), "
                  f"{cpu / args.threads:.0f} s CPU / {args.threads} threads")
            if args.reference:
                extra = [f"drive.drives.speeds_kmh={args.reference_speeds}"] if args.reference_speeds else []
                if extra:         # the fast path on the same subset, for the comparison
                    fast, wall, cpu = report(run, True, Path(tmp) / f"fast-sub-{k}", extra)
                    print(f"  the drives at {args.reference_speeds} km/h only: {len(fast['per_drive'])} drives, "
                          f"{wall:.0f} s wall")
                slow, swall, scpu = report(run, False, Path(tmp) / f"slow-{k}", extra)
                same = verdicts(slow) == verdicts(fast)
                print(f"  straightforward (every drive read to its braking point, every tile): {swall:.0f} s wall, "
                      f"{scpu / args.threads:.0f} s CPU / {args.threads} threads: {swall / max(wall, 1e-9):.1f}x "
                      f"the fast path's wall time")
                print(f"  per-drive verdicts and recognition distances (stack and panel, clean and attacked): "
                      f"{'identical' if same else 'DIFFERENT'}")
                if not same:
                    for i, (a, b) in enumerate(zip(verdicts(slow), verdicts(fast))):
                        if a != b:
                            print(f"    drive {i}: straightforward {a} | fast {b}")


if __name__ == "__main__":
    main()
