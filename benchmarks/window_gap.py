"""Can a detector run's approach windows be trusted as its drive verdict? Its windows, read as its optimizer read
them, beside its held-out drives' own per-frame readings, by distance.

    OMP_WAIT_POLICY=PASSIVE python benchmarks/window_gap.py --run <attack=hide run, eot=approach> \
        --drive <its 18-drive report folder, e.g. <run>/drive-2> [--steps 6] [--camera drawn|clean]

The run's sampler (``eot.sampler``, over the training backgrounds, the drive stack's tiles) draws ``--steps``
steps of windows; each tile is rendered with the run's patch and read by the run's victim as the optimizer read
it (a detection of the sign's class at the victim's threshold on the sign, IoU 0.5), a frame reading the sign when
any of its tiles does. ``--camera clean`` films every window by the held-out drives' camera (``CLEAN_CAMERA``)
instead of the drawn effects. The held-out side is the report's kept readings (``per_drive/drive_<i>.pt``: the
stack's reading of every frame it judged; a drive stops being read where it is recognised). Prints the share of
frames read as the sign on each side per distance band, and the share of the windows' drives that run the sign
(two windows a drive: an upper bound of a whole drive's). A detector run only (a classifier's windows are framed
crops, not tiles).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import torch
from torch import Tensor

BANDS = ((14, 30), (30, 45), (45, 60), (60, 70), (70, 81))


def window_readings(run_dir: str, steps: int, camera: str) -> tuple[Tensor, Tensor, float]:
    from physattack.cli import build
    from physattack.cli.runs import open_run
    from physattack.drive.approach import CLEAN_CAMERA
    from physattack.eot.pipeline import ViewPipeline
    from physattack.victims.detection import best_scores_on_boxes

    run = open_run(run_dir).rebuild("cpu")
    victim = run.victim
    if not getattr(victim, "is_detector", False):
        raise SystemExit(f"{run_dir} attacked a classifier: its windows are framed crops, not tiles (a detector run).")
    bank = build.make(run.cfg.eot.backgrounds)
    sampler = build.make(run.cfg.eot.sampler, background_count=len(bank), _convert_="all")
    if not hasattr(sampler, "windows"):
        raise SystemExit(f"{run_dir} did not draw approach windows (eot=approach).")
    sampler = build.approach_framing(sampler.for_detector(victim.input_size), run.cfg, scene=run.scene,
                                     renderer=run.rendering[0], backgrounds=bank, device="cpu")
    pipe = build.photographed(ViewPipeline(run.rendering[0], bank, (victim.input_size,) * 2), run.printer[1])
    label = victim.label_index(run.scene.class_name)
    g = torch.Generator().manual_seed(123)
    along, reads, runs = [], [], []
    for _ in range(steps):
        w = sampler.windows(g)
        params = w.params[:w.frames]
        if camera == "clean":
            params = replace(params, **{k: torch.full((w.frames,), v) for k, v in CLEAN_CAMERA.items()})
        with torch.no_grad():
            views = pipe(run.scene, run.adv_texture, params)
            out = victim.detect(views.images)
        dets = out.detections if hasattr(out, "detections") else out
        tile_reads = (best_scores_on_boxes(dets, views.boxes, label, iou=0.5) >= victim.score_threshold).float()
        reads.append(w._read(tile_reads).flatten())
        drop = (sampler.dashcam.height_m - sampler.sign_height_m) ** 2
        dist = torch.sqrt(params.distance_m ** 2 - drop)        # down the road, with the lane offset
        along.append(torch.zeros(len(reads[-1])).scatter_reduce(0, w.group, dist, "amax", include_self=False))
        runs.append(w.runs(tile_reads.bool()).float())
    return torch.cat(along), torch.cat(reads), float(torch.cat(runs).mean())


def held_out_readings(run_dir: str, drive_dir: str) -> tuple[Tensor, Tensor]:
    from hydra import compose, initialize_config_module

    from physattack.cli import build
    from physattack.cli.runs import open_run

    run = open_run(run_dir).rebuild("cpu")
    with initialize_config_module("physattack.conf", version_base=None):
        cfg = compose("drive", overrides=[f"run_dir={run_dir}"])
    drives = build.make(cfg.drive.drives, background_count=len(run.eval_bank), _convert_="all").drives()
    dashcam = build.make(cfg.drive.dashcam)
    along, reads = [], []
    for i, drive in enumerate(drives):
        kept = Path(drive_dir) / "per_drive" / f"drive_{i}.pt"
        if not kept.is_file():
            raise SystemExit(f"{kept} is missing: give --drive the folder of a finished 18-drive report.")
        r = torch.load(kept, weights_only=False)["readings"]["attacked"]
        correct = (r["correct"] if isinstance(r, dict) else r.correct).float()
        frames = drive.frames(dashcam, tuple(run.scene.texture_size_m))
        along.append(frames.distance_m[:len(correct)])
        reads.append(correct)
    return torch.cat(along), torch.cat(reads)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", required=True)
    ap.add_argument("--drive", required=True)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--camera", choices=("drawn", "clean"), default="drawn")
    a = ap.parse_args()
    wd, wr, runs = window_readings(a.run, a.steps, a.camera)
    hd, hr = held_out_readings(a.run, a.drive)
    print(f"windows ({a.steps} steps, {a.camera} camera): frames read as the sign {float(wr.mean()):.1%}, "
          f"their drives run the sign {runs:.1%} (two windows a drive)")
    print(f"held-out drives: frames read as the sign {float(hr.mean()):.1%} (of {len(hr)} judged frames)")
    for lo, hi in BANDS:
        m, mh = (wd >= lo) & (wd < hi), (hd >= lo) & (hd < hi)
        w = f"{float(wr[m].mean()):.1%} of {int(m.sum())}" if m.any() else "-"
        h = f"{float(hr[mh].mean()):.1%} of {int(mh.sum())}" if mh.any() else "-"
        print(f"  {lo:3d}-{hi:3d} m: windows {w:>14}   held out {h:>14}")


if __name__ == "__main__":
    main()
