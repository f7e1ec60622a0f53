"""Where a tile's edge cuts the sign: does the classifier read the drive stack's crop there as the approach windows
framed that way have it read? A classifier run's patch, one held-out drive, a band of distances.

    OMP_WAIT_POLICY=PASSIVE python benchmarks/edge_crops.py --run <classifier run, eot=approach> --drive 9 \
        --near 61 --far 67 [--member zoo_convnext_atto] [--draws 3] [--tiles]

The drive side renders the held-out drive's frames in the band (``conf/drive``'s drives, the run's evaluation
backgrounds) and crops them as the two-stage stack does (``square_crops``), once around the sign's own box and once
around the part of it that a tile of the stack holds where the tile's edge cuts the sign (``eot.sampler.fit.edge``;
the sign's box where no tile cuts it). The window side draws ``--draws`` steps of the run's windows (its sampler,
effects and training backgrounds) and puts their first frames at the same places, framed both ways. Prints, per
frame, the member's probability of the sign's class and how many frames it reads as the sign on each side. On the
red team's preset, seed 3, drive 9 (30 km/h, 6-m lane; 2026-12-06): the sign's box read as the sign in 0 of 22
frames at 61-67 m, the part in 14 of 22; the windows framed as the part 2-10 of 22, framed on the sign 0 of 22.

``--tiles`` also prints, per frame, each tile of the stack that holds part of the sign: the share it holds and the
stack detector's best score of a box on the sign there (IoU >= the drives' ``iou``; * at or above its threshold), on
the clean sign and on the patched one. Same run and drive (2026-12-07): the tile that holds the whole sign finds it
at 0.64-0.93 clean and at 0.12-0.42 patched (under DetNet's 0.30 in 14 of 22 frames), the tile whose edge cuts it
finds the part at 0.30-0.56 patched (65.6-62.2 m): the patch half-hides the sign from the detector, and the part is what is read.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

import torch
from torch import Tensor


def cut_parts(sign: Tensor, tiles) -> Tensor:
    """N×4: the part of each sign box (N×4) held by the tile of ``tiles`` (``SearchTiles``) whose edge cuts it and
    holds the most of it, or the box itself where no tile's edge cuts it."""
    parts, cuts = tiles.cut_parts(sign)
    k = (tiles.parts(sign)[1] * cuts).argmax(1)
    return torch.where(cuts.any(1)[:, None], parts[torch.arange(len(sign)), k], sign)


def tile_score(tiled, scaled: list[Tensor], j: int, sign: Tensor, iou: float) -> str:
    """The detector's best score of a box on ``sign`` (IoU >= ``iou``) on tile ``j`` alone of one frame (``scaled``:
    its ``TiledDetector.scaled_regions``), with * at or above its threshold."""
    from torchvision.ops import box_iou

    tile = tiled.tiles[j]
    scale, x0, y0 = tiled.spans[j][:3]
    scaled = scaled[tile.scale_index]
    d = tiled.detector(scaled[:, :, tile.y:tile.y + tiled.tile, tile.x:tile.x + tiled.tile]).detections[0]
    on = box_iou(d.boxes.float() / scale + torch.tensor([x0, y0, x0, y0]), sign[None].float())[:, 0] >= iou
    best = float(d.scores[on].max()) if on.any() else 0.0
    return f"{best:.2f}{'*' if best >= tiled.detector.score_threshold else ''}"


def main() -> None:
    from omegaconf import OmegaConf

    from physattack.cli import build
    from physattack.cli.runs import open_run
    from physattack.drive.framing import box_framing
    from physattack.drive.render import DriveRenderer
    from physattack.drive.stacks import SearchTiles, StackSettings, TiledDetector
    from physattack.eot.pipeline import ViewPipeline
    from physattack.eot.sampler import sensor_pixels
    from physattack.victims.stack import square_crops

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", required=True, help="a classifier run's folder (eot=approach)")
    ap.add_argument("--drive", type=int, required=True, help="the held-out drive's index (its report's numbering)")
    ap.add_argument("--near", type=float, required=True, help="the band's near end, metres")
    ap.add_argument("--far", type=float, required=True, help="the band's far end, metres")
    ap.add_argument("--member", default=None, help="an ensemble member to read with (default: the run's victim)")
    ap.add_argument("--draws", type=int, default=3, help="steps of windows drawn")
    ap.add_argument("--tiles", action="store_true", help="also the stack detector's score on the sign, tile by tile")
    args = ap.parse_args()
    torch.set_grad_enabled(False)

    run = open_run(args.run).rebuild("cpu")
    cfg = run.cfg
    model = dict(zip(run.victim_names, getattr(run.victim, "members", [run.victim])))[args.member] \
        if args.member else run.victim
    label = list(model.labels).index(run.scene.class_name)
    node = OmegaConf.load("conf/drive/default.yaml")
    dashcam = build.make(node.dashcam)
    drive = build.make(node.drives, background_count=len(run.eval_bank), _convert_="all").drives()[args.drive]
    width = float(run.scene.texture_size_m[0])
    frames = drive.frames(dashcam, tuple(run.scene.texture_size_m))
    idx = torch.nonzero((frames.distance_m >= args.near) & (frames.distance_m <= args.far)).flatten()
    if not len(idx):
        raise SystemExit(f"drive {args.drive} has no frame {args.near}-{args.far} m from the sign.")
    sub = frames[int(idx[0]):int(idx[-1]) + 1]
    tiles = SearchTiles(160, dashcam, (width, width), build.make(node.stack, _convert_="all")
                        if "stack" in node else StackSettings())
    frame0, px = float(cfg.eot.grid.frame), int(cfg.image_size)

    def reads(images: Tensor) -> tuple[Tensor, int]:
        """p(the sign's class) per image, and how many images it is the top class of (the stack's reading)."""
        p = torch.softmax(model(images), -1)
        return p[:, label], int((p.argmax(-1) == label).sum())

    rendered = DriveRenderer(run.rendering[0], run.eval_bank, dashcam).render(run.scene, run.adv_texture, sub,
                                                                              tiles.region)
    sign = rendered.boxes.double()
    part = cut_parts(sign, tiles)
    print(f"drive {args.drive} ({drive.speed_kmh:.0f} km/h, {drive.lane_offset_m} m lane), {len(sub)} frames "
          f"{float(sub.distance_m.min()):.1f}-{float(sub.distance_m.max()):.1f} m; p({run.scene.class_name}) by "
          f"{args.member or 'the victim'}:")
    for name, boxes in (("the sign's box", sign), ("a cutting tile's part", part)):
        crops = square_crops(rendered.images, boxes.float(), frame0, px, tiles.region[:2])
        p, top = reads(crops)
        print(f"  drive crops around {name:22s} read {top:2d}/{len(p)}: "
              + " ".join(f"{v:.2f}" for v in p.tolist()))
    if args.tiles:
        detector = build.make(node.detector.victim).eval()
        renderer = DriveRenderer(run.rendering[0], run.eval_bank, dashcam)
        clean = renderer.render(run.scene, run.scene.texture, sub, tiles.region).images
        tiled = TiledDetector(detector, dashcam, (width, width), tiles.settings)
        print(f"  {node.detector.name}'s best score on the sign per tile holding part of it, clean / patched "
              f"(* at or above its threshold {detector.score_threshold:g}):")
        for f, distance in enumerate(sub.distance_m.tolist()):
            scaled = [tiled.scaled_regions(im[f:f + 1], tiles.region) for im in (clean, rendered.images)]
            cells = [f"{tiled.spans[j][0]:g}x tile {j} holds {share:.2f}: "
                     + " / ".join(tile_score(tiled, sc, j, sign[f], float(node.settings.iou)) for sc in scaled)
                     for j, share in enumerate(tiles.parts(sign[f:f + 1])[1][0].tolist()) if share > 0.05]
            print(f"    {distance:5.1f} m | " + " | ".join(cells))
    ratio, dx, dy = (t.float() for t in box_framing(part, sign))       # as fit.edge frames a window there
    bank = build.make(cfg.eot.backgrounds)
    sampler = build.make(cfg.eot.sampler, background_count=len(bank), _convert_="all")
    if not hasattr(sampler, "windows"):
        raise SystemExit(f"{args.run} did not draw approach windows (eot=approach).")
    sampler = sampler.with_crop_frame(frame0)
    pipe = build.photographed(ViewPipeline(run.rendering[0], bank, (px, px)), run.printer[1])
    n, g = len(sub), torch.Generator().manual_seed(123)
    for draw in range(args.draws):
        w = sampler.windows(g).params
        if len(w.distance_m) < n:
            raise SystemExit(f"a step draws {len(w.distance_m)} window frames, fewer than the band's {n}.")
        base = replace(w, **{f: getattr(w, f)[:n] for f in w.__dataclass_fields__})
        for name, frame, sx, sy in (("the sign", torch.full((n,), frame0), torch.zeros(n), torch.zeros(n)),
                                    ("the part", frame0 / ratio, -dx * frame0 / ratio, -dy * frame0 / ratio)):
            params = replace(base, distance_m=sub.params.distance_m.float(), azimuth_deg=sub.params.azimuth_deg.float(),
                             elevation_deg=sub.params.elevation_deg.float(), frame=frame, shift_x=sx, shift_y=sy,
                             sensor_px=sensor_pixels(width, sub.params.distance_m.float(), frame, dashcam.focal_px))
            p, top = reads(pipe(run.scene, run.adv_texture, params).images)
            print(f"  windows (draw {draw}) framed on {name:13s} read {top:2d}/{n}: "
                  + " ".join(f"{v:.2f}" for v in p.tolist()))


if __name__ == "__main__":
    main()
