"""Is the render shared? One ensemble EOT step against its parts, measured in one run.

    OMP_WAIT_POLICY=PASSIVE python benchmarks/ensemble_step.py [--members signnets|zoo] [--device cuda]
        [--batch 32] [--size 96] [--repeats 7] [--processes 5] [--glibc-defaults]

For the first K = 2 and K = 3 members, either three bundled SignNets (``--members signnets``, the
default: signnet, signnet_seed1, signnet_w8_seed2, one architecture) or the members of
``victim=ensemble`` as ``conf/victim/ensemble.yaml`` lists them (``--members zoo``: signnet,
zoo_resnet10t, zoo_mobilenetv3, three families with their own input sizes and normalizations), each
repeat times, in turn on the same machine state:

- one ensemble step of the real loop (``EOTAttack._step`` with an ``Ensemble`` victim: sample,
  patch, render and camera effects once, each member's forward+backward to the images one after
  another, the printability priors, one backward through the renderer, Adam);
- one view pipeline forward+backward (the same step without any victim: sample, patch, render and
  effects, priors, a backward of a fixed image gradient through the renderer, Adam);
- each member's forward+backward (targeted loss) on the same rendered images.

The ratio is ensemble step / (pipeline + sum of members), whose goal (issue 14) is <= 1.1; each repeat
gives its own ratio (steadier on shared cores, where the load drifts between repeats; the order
alternates for the same reason). The ratio drifts more between processes than between repeats of one
process (on 2 shared cores one process read 1.03 where the next read 1.17), so each K is measured in
``--processes`` fresh processes, and the headline is the median over them of each process's
per-repeat median; every process's figure is printed beside it. A ratio near 1 means the render is
done once, not once per member (that would be about 1 + (K - 1) * pipeline / (pipeline + members)).
On CUDA it also prints the step's peak memory beside the largest single member's. Each process sets
the CPU allocator as the attack does (``keep_freed_memory``, ``physattack/cli/allocator.py``);
``--glibc-defaults`` measures without it.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import statistics
import time
from importlib import resources
from pathlib import Path

import torch

from physattack.cli.allocator import keep_freed_memory
from physattack.attack import AttackSetup, EOTAttack
from physattack.attack.loop import LoopState
from physattack.attack.objectives import OBJECTIVES
from physattack.config import RunConfig
from physattack.eot import BackgroundBank, ViewPipeline, ViewSampler
from physattack.patch import sticker_for_scene
from physattack.printing import load_palette, non_printability_score, total_variation
from physattack.render import Renderer
from physattack.scene import load_scene
from physattack.victims import Ensemble, load_signnet

SIGNNETS = ("signnet", "signnet_seed1", "signnet_w8_seed2")


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def clock(fn, device) -> float:
    sync(device)
    t = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t


def bundled(name: str, device):
    return load_signnet(Path(str(resources.files("physattack.assets"))) / f"{name}.safetensors").to(device)


def ensemble_config():
    """``conf/victim/ensemble.yaml``: the members of ``victim=ensemble``, in order."""
    from omegaconf import OmegaConf

    return OmegaConf.load(Path(str(resources.files("physattack.conf"))) / "victim" / "ensemble.yaml")


def member_names(args) -> list[str]:
    return list(SIGNNETS) if args.members == "signnets" else list(ensemble_config().members)


def member_set(args, device) -> dict:
    """The members, built as the attack builds them (``--members zoo``: from ``victim=ensemble``'s config)."""
    if args.members == "zoo":
        from hydra.utils import instantiate

        return {name: instantiate(member).to(device) for name, member in ensemble_config().members.items()}
    return {name: bundled(name, device) for name in SIGNNETS}


def measure_fresh(k: int, args) -> dict:
    """``measure`` in this (fresh) process, with the members loaded here, and the CPU allocator set as
    the attack sets it (``keep_freed_memory``, unless ``--glibc-defaults``)."""
    if not args.glibc_defaults:
        keep_freed_memory()
    device = torch.device(args.device)
    torch.manual_seed(0)
    return measure(k, args, device, member_set(args, device))


def measure(k: int, args, device, victims: dict) -> dict:
    names = tuple(victims)
    scene = load_scene("stop_sign").to(device)
    members = [victims[n] for n in names[:k]]
    ensemble = Ensemble(members, names=list(names[:k]))
    patch = sticker_for_scene(scene, shape="bars").to(device)
    pipeline = ViewPipeline(Renderer(), BackgroundBank(16, seed=0), (args.size, args.size))
    sampler = ViewSampler(background_count=16)
    attack = EOTAttack(target="yield", steps=10**6, batch_size=args.batch, lr=0.1, checkpoint_every=0,
                       mask_search_steps=0)
    setup = AttackSetup(scene=scene, patch=patch, victim=ensemble, pipeline=pipeline, sampler=sampler,
                        palette=load_palette())
    loop = attack._start(setup, RunConfig(seed=0, progress=False), torch.Generator().manual_seed(0))
    state = LoopState(best_state={})
    palette = loop.palette
    g = torch.Generator().manual_seed(1)
    fixed_grad = torch.randn(args.batch, 3, args.size, args.size, generator=g).to(device) * 1e-3
    objective, labels = OBJECTIVES["targeted"], ensemble.member_label_indices("yield")

    def ensemble_step():
        attack._step(loop, state)

    def pipeline_step():
        views = pipeline(scene, patch.apply(scene.texture), sampler.sample(args.batch, g))
        colors = patch.colors()
        priors = attack.nps_weight * non_printability_score(colors, palette, patch.mask) + \
            attack.tv_weight * total_variation(colors, patch.mask)
        loop.opt.zero_grad(set_to_none=True)
        torch.autograd.backward([priors, views.images], [torch.ones_like(priors), fixed_grad])
        loop.opt.step()

    with torch.no_grad():
        images = pipeline(scene, patch.apply(scene.texture), sampler.sample(args.batch, g)).images

    def member_step(member, label):
        def run():
            x = images.detach().requires_grad_()
            loss = objective.loss(member(ensemble.member_inputs(member, x)), label, None).mean()
            loss.backward()
        return run

    member_steps = [member_step(m, lab) for m, lab in zip(members, labels)]
    ensemble_step(), pipeline_step(), [f() for f in member_steps]            # warm-up
    times = {"ensemble": [], "pipeline": [], **{n: [] for n in names[:k]}}
    for i in range(args.repeats):           # alternate the order, so that drifting load hits both sides alike
        if i % 2 == 0:
            times["ensemble"].append(clock(ensemble_step, device))
        times["pipeline"].append(clock(pipeline_step, device))
        for name, f in zip(names, member_steps):
            times[name].append(clock(f, device))
        if i % 2 == 1:
            times["ensemble"].append(clock(ensemble_step, device))
    out = {key: statistics.median(v) for key, v in times.items()}
    parts = [p + sum(times[n][i] for n in names[:k]) for i, p in enumerate(times["pipeline"])]
    out["ratio"] = out["ensemble"] / (out["pipeline"] + sum(out[n] for n in names[:k]))
    out["ratio_per_repeat"] = statistics.median(e / p for e, p in zip(times["ensemble"], parts))
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
        ensemble_step()
        out["peak_step_mib"] = torch.cuda.max_memory_allocated() / 2**20
        single = []
        for f in member_steps:
            torch.cuda.reset_peak_memory_stats()
            f()
            single.append(torch.cuda.max_memory_allocated() / 2**20)
        out["peak_member_mib"] = max(single)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", choices=("signnets", "zoo"), default="signnets",
                        help="three SignNet seeds, or victim=ensemble's members (three families)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batch", type=int, default=32, help="views per step (the canonical attack's 32)")
    parser.add_argument("--size", type=int, default=96, help="view side in pixels (the canonical run's 96)")
    parser.add_argument("--repeats", type=int, default=7, help="timed repeats in each process")
    parser.add_argument("--processes", type=int, default=5,
                        help="fresh processes per K (the ratio varies more between processes than within one)")
    parser.add_argument("--glibc-defaults", action="store_true",
                        help="leave glibc's allocator as it is (the run setting keep_freed_memory=false)")
    args = parser.parse_args()
    device = torch.device(args.device)
    print(f"ensemble step vs view pipeline + members' forward+backward; {args.batch} views of {args.size} px, "
          f"{device}, {torch.get_num_threads()} threads; {args.processes} fresh processes of {args.repeats} repeats "
          f"for each K (ms: medians of the first process); allocator: "
          f"{'glibc defaults' if args.glibc_defaults else 'keep_freed_memory, as the attack runs'}")
    names = tuple(member_names(args))
    print(f"members: {', '.join(names)}")
    spawn = multiprocessing.get_context("spawn")
    for k in (2, 3):
        runs = []
        for _ in range(args.processes):
            with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=spawn) as pool:
                runs.append(pool.submit(measure_fresh, k, args).result())
        r = runs[0]
        members = " + ".join(f"{n} {1000 * r[n]:.1f}" for n in names[:k])
        ratios = sorted(x["ratio_per_repeat"] for x in runs)
        print(f"K={k}: ensemble step {1000 * r['ensemble']:.1f} | pipeline {1000 * r['pipeline']:.1f} + {members} "
              f"= {1000 * (r['pipeline'] + sum(r[n] for n in names[:k])):.1f}")
        print(f"      ratio, median over processes {statistics.median(ratios):.3f} (goal <= 1.1); each process's "
              f"per-repeat median: {', '.join(f'{x:.3f}' for x in ratios)}")
        if "peak_step_mib" in r:
            print(f"      peak memory: ensemble step {r['peak_step_mib']:.0f} MiB, largest member alone "
                  f"{r['peak_member_mib']:.0f} MiB (members' activations are freed one by one)")


if __name__ == "__main__":
    main()
