"""What placement error costs: an EOT step with it against one without, and a placed protocol view
against a plain one.

    OMP_WAIT_POLICY=PASSIVE python benchmarks/placement_cost.py [--run outputs/<date>/<time>] [--repeats 7]

The stickers are a finished run's (``--run``: its ``patch.pt``), or else a seeded mask of 45 mm cells
covering 19.5 % of the stop sign's face, as the canonical attack's mask search leaves them. Each
repeat times, in turn on the same machine state (the order alternates, so that drifting load on shared
cores hits both sides alike):

- one step of the real loop (``EOTAttack._step``, 32 views of 96 px, SignNet) without placement error,
  and one with ``attack=yield_placed``'s 5 mm / 5° drawn per view;
- one batch of 16 protocol views rendered and classified with the attacked texture (what the held-out
  protocol does per view), and the same views with every sticker off by exactly 5 mm / ±6° (what a
  cell of the placement table does per view).

It prints the medians, the ratios (also as the median of each repeat's own ratio, steadier on shared
cores) and what the table's default 11 rendered cells of 120 views add to a run, per the medians.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from physattack.attack import AttackSetup, EOTAttack
from physattack.attack.loop import LoopState
from physattack.attack.mask_search import cells_covering
from physattack.config import RunConfig
from physattack.eot import BackgroundBank, EvalGrid, ViewPipeline, ViewSampler
from physattack.evaluate.placement import PlacementSettings
from physattack.patch import sticker_for_scene
from physattack.patch.placement import PlacementError, place_stickers, sticker_pieces, texels_per_mm
from physattack.printing import load_palette
from physattack.render import Renderer
from physattack.scene import load_scene
from physattack.victims import load_signnet


def clock(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def sticker_patch(scene, run: str | None):
    patch = sticker_for_scene(scene)
    if run:
        state = torch.load(f"{run}/patch.pt", weights_only=True)
        patch.load_state_dict(state.get("patch", state))
    else:
        score = torch.rand(1, *scene.face_mask.shape[-2:], generator=torch.Generator().manual_seed(0))
        patch.set_mask(cells_covering(score, scene.face_mask, 0.195, patch.mask_search["cell_px"]))
        with torch.no_grad():
            patch.logits.normal_(generator=torch.Generator().manual_seed(1))
    return patch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", default=None, help="a finished run whose stickers to place")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    scene, victim = load_scene("stop_sign"), load_signnet()
    patch = sticker_patch(scene, args.run)
    pieces = sticker_pieces(patch.mask)
    pipeline = ViewPipeline(Renderer(), BackgroundBank(16, seed=0), (96, 96))
    sampler = ViewSampler(background_count=16)
    setup = AttackSetup(scene=scene, patch=patch, victim=victim, pipeline=pipeline, sampler=sampler,
                        palette=load_palette())
    steps = {}
    for name, placement in (("plain", None), ("placed", PlacementError(shift_mm=5, rotation_deg=5))):
        attack = EOTAttack(target="yield", steps=10**6, batch_size=32, lr=0.1, checkpoint_every=0,
                           mask_search_steps=0, placement=placement)
        loop = attack._start(setup, RunConfig(seed=0, progress=False), torch.Generator().manual_seed(0))
        state = LoopState(best_state={})
        steps[name] = (lambda a=attack, lp=loop, s=state: a._step(lp, s))

    grid = EvalGrid(azimuth_deg=[-40.0, -20.0, 0.0, 20.0, 40.0], distance_m=[5.0, 10.0, 15.0, 20.0],
                    background_count=16)
    params = grid.params()[torch.arange(16)]
    with torch.no_grad():
        adv = patch.apply(scene.texture)
    settings = PlacementSettings()
    draw = PlacementError(5, 6, distribution="fixed").sample(16, len(pieces), torch.Generator().manual_seed(0))

    @torch.no_grad()
    def plain_views():
        victim(pipeline(scene, adv, params).images)

    @torch.no_grad()
    def placed_views():
        textures = place_stickers(adv, patch.mask, scene.texture, scene.face_mask, texels_per_mm(scene), draw, pieces)
        victim(pipeline(scene, textures, params).images)

    jobs = {"plain": steps["plain"], "placed": steps["placed"], "views": plain_views, "placed_views": placed_views}
    for fn in jobs.values():                 # warm-up
        fn()
    times = {k: [] for k in jobs}
    for i in range(args.repeats):
        for key in (list(jobs) if i % 2 == 0 else list(jobs)[::-1]):
            times[key].append(clock(jobs[key]))
    med = {k: statistics.median(v) for k, v in times.items()}
    step_ratio = statistics.median(p / q for p, q in zip(times["placed"], times["plain"]))
    view_ratio = statistics.median(p / q for p, q in zip(times["placed_views"], times["views"]))
    cells = sum(1 for s in settings.shift_mm for r in settings.rotation_deg if s or r)
    table_s = cells * settings.views * med["placed_views"] / 16
    print(f"{len(pieces)} stickers ({'run ' + args.run if args.run else 'seeded 45 mm cells, 19.5 % of the face'}); "
          f"{torch.get_num_threads()} threads; medians of {args.repeats} repeats")
    print(f"EOT step (32 views, SignNet): plain {1000 * med['plain']:.0f} ms | with placement error "
          f"{1000 * med['placed']:.0f} ms | ratio {med['placed'] / med['plain']:.2f} (per-repeat median {step_ratio:.2f})")
    print(f"16 protocol views rendered + classified: plain {1000 * med['views']:.0f} ms | stickers placed "
          f"{1000 * med['placed_views']:.0f} ms | ratio {med['placed_views'] / med['views']:.2f} "
          f"(per-repeat median {view_ratio:.2f})")
    print(f"placement table as configured ({cells} rendered cells x {settings.views} views, 1 draw): about "
          f"{table_s:.0f} s added to a run's held-out protocol")


if __name__ == "__main__":
    main()
