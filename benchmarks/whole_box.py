"""How often the stack's detector boxes the whole sign on a classifier run's approach windows, clean and patched.

    OMP_WAIT_POLICY=PASSIVE python benchmarks/whole_box.py --run <classifier run> [--run <another>] \
        [--frames 160] [--clean-camera] [--background view|frame]

Draws ``--frames`` window frames of ``eot=approach``'s drives (seed 0, the training background bank), puts each on every
tile of the drive stack's search that holds the sign whole (``eot.sampler.seen``'s rows, ``physattack.drive.seen``),
renders them at DetNet's 160 px and prints, per texture (the clean sign, then each run's patch), the share of frames
whose best tile has a box of any class on the whole sign (IoU >= 0.5) at DetNet's threshold, the same for a *stop*
box, and ``eot.sampler.seen``'s hinge there (weight 1, reading 0.75). ``--clean-camera`` films them with the held-out
drives' camera instead of the drawn effects. On the red team's preset (2026-12-07, view camera / drives' camera):
clean 100 / 100 %; seeds 3 and 0 67.5 / 80.6 % and 77.5 / 90.6 % (a *stop* box 10 and 12.5 %); made with
``eot.sampler.seen.weight=4`` 84.4 / 91.3 % and 87.5 / 97.5 %.
"""

from __future__ import annotations

import argparse
from types import SimpleNamespace


def main() -> None:
    import torch

    from physattack.attack.seen import SeenTerm, boxed_whole
    from physattack.cli.runs import open_run
    from physattack.drive.approach import ApproachSampler
    from physattack.drive.framing import DetectorFraming
    from physattack.drive.stacks import SearchTiles, StackSettings
    from physattack.drive.trajectories import Dashcam
    from physattack.eot import BackgroundBank, ViewPipeline
    from physattack.render import Renderer
    from physattack.victims import load_detnet

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", action="append", required=True, help="a classifier run's folder (repeat for more)")
    ap.add_argument("--frames", type=int, default=160, help="window frames drawn")
    ap.add_argument("--clean-camera", action="store_true", help="the held-out drives' camera, not the drawn effects")
    ap.add_argument("--background", default="view", choices=("view", "frame"), help="eot.sampler.background")
    args = ap.parse_args()
    torch.set_grad_enabled(False)

    detnet = load_detnet().eval()
    search = SearchTiles(int(detnet.input_size), Dashcam(), (0.75, 0.75), StackSettings())
    sampler = ApproachSampler(drives=8, segments=4, background_count=48, seen={"weight": 1.0, "frames": args.frames},
                              framing=DetectorFraming(SimpleNamespace(search=search), None),
                              clean_camera=float(args.clean_camera), background=args.background)
    rows = sampler.windows(torch.Generator().manual_seed(0)).seen
    pipe = ViewPipeline(Renderer(), BackgroundBank(48, seed=0), (int(detnet.input_size),) * 2)
    term = SeenTerm(sampler.seen, detnet, pipe)
    stop = detnet.label_index("stop")
    print(f"{int(rows.frame.unique().numel())} window frames on {len(rows)} whole-sign tiles "
          f"({'drives' if args.clean_camera else 'view'} camera, {args.background} background):")
    runs = [open_run(r).rebuild("cpu") for r in args.run]
    for name, scene, texture in [("clean", runs[0].scene, runs[0].scene.texture)] + \
            [(r, run.scene, run.adv_texture) for r, run in zip(args.run, runs)]:
        views, output = term.read(scene, texture, rows)
        loss, seen = term.score(views, output, rows)
        as_stop = boxed_whole(output, views.boxes, rows.frame, stop)
        print(f"  {name}: boxed whole {100 * seen:.1f} % (as stop {100 * as_stop:.1f} %), hinge {float(loss):.3f}")


if __name__ == "__main__":
    main()
