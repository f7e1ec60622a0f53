"""The natural-failure atlas: where does the victim misread the *clean* object, with no patch at all?

The ImageNet-A idea made physical (Hendrycks et al. 2021): rather than collect natural adversarial
photos, search the scene's parameters — viewpoint, light, blur, noise, haze, partial occlusion — for
conditions in which the victim already fails, often with high confidence. The search is a
one- and two-factor design around a benign nominal view (8 m, head-on, a lighting preset, a held-out
background): each sample varies one axis (or one pair of axes) over its whole range, so that a
region's failures are the axis's and not a mix of every extreme at once. A **region** is a box in
parameter space (a run of bins on one axis, or a cell of a pair) whose clean accuracy is below
``max_accuracy``; each comes with its Wilson interval, the wrong label it is read as, and example
renders. The attack evaluation asks ``Atlas.contains(params)`` to mark successes that come "free".

Two conditions the renderer and camera effects do not make are applied here, to the rendered views:

- **haze**, Koschmieder's law ``I·t + A·(1 − t)``, ``t = exp(−β·depth)``, with the renderer's depth
  (the background is taken to lie ``background_depth_factor`` times farther than the object);
- **occlusion** by a foreground bar (a pole, a branch) covering a share of the object's width.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace

import torch
from torch import Tensor

from physattack.eot.effects import apply_camera_effects
from physattack.eot.grid import LIGHTING_PRESETS
from physattack.eot.params import SceneParams
from physattack.eot.sampler import sensor_pixels
from physattack.evaluate.metrics import in_label_set, wilson_interval


@dataclass(frozen=True)
class AtlasAxis:
    """One searched parameter: its range, its nominal (benign) value, and whether to space it logarithmically."""

    low: float
    high: float
    nominal: float
    log: bool = False


def default_axes() -> dict[str, AtlasAxis]:
    """Wider than the optimizer's sampler on purpose: the atlas looks for where the victim breaks."""
    return {
        "azimuth_deg": AtlasAxis(-85.0, 85.0, 0.0),
        "elevation_deg": AtlasAxis(-40.0, 60.0, -5.0),
        "distance_m": AtlasAxis(3.0, 80.0, 8.0, log=True),
        "light": AtlasAxis(0.05, 1.6, 1.0),              # scales the preset's ambient and diffuse light
        "color_temp_k": AtlasAxis(3000.0, 15000.0, 5800.0),
        "exposure": AtlasAxis(0.2, 2.5, 1.0),
        "blur_sigma_px": AtlasAxis(0.0, 4.0, 0.4),
        "noise_std": AtlasAxis(0.0, 0.25, 0.01),
        "haze_beta": AtlasAxis(0.0, 0.3, 0.0),           # extinction per metre
        "occlusion": AtlasAxis(0.0, 0.8, 0.0),           # share of the object's width behind a bar
    }


# -- the two conditions applied after rendering --------------------------------------------------------
def apply_haze(images: Tensor, depth: Tensor, beta: Tensor, airlight: Tensor | float = 0.8,
               background_depth_m: Tensor | None = None) -> Tensor:
    """Koschmieder haze: ``I·t + A·(1 − t)``, ``t = exp(−β·depth)``.

    Shape:
        images B×3×H×W; depth B×1×H×W metres (``inf`` on the background); beta B per metre;
        background_depth_m B (depth given to background pixels; default 3× the nearest object depth).
    """
    finite = torch.isfinite(depth)
    if background_depth_m is None:
        near = torch.where(finite, depth, torch.full_like(depth, float("inf"))).flatten(1).amin(1)
        background_depth_m = torch.where(torch.isfinite(near), 3 * near, torch.full_like(near, 30.0))
    d = torch.where(finite, depth, background_depth_m[:, None, None, None].expand_as(depth))
    t = torch.exp(-beta[:, None, None, None] * d)
    a = torch.as_tensor(airlight, dtype=images.dtype, device=images.device)
    a = a.view(1, -1, 1, 1) if a.dim() == 1 else a
    return images * t + a * (1 - t)


def occlude_with_bar(images: Tensor, boxes: Tensor, share: Tensor, position: Tensor,
                     colour: tuple[float, float, float] = (0.22, 0.2, 0.18)) -> Tensor:
    """A vertical bar across the whole image in front of the object, ``share`` of its box's width wide,
    centred at ``position`` (0 = the box's left edge, 1 = its right edge); edges anti-aliased.

    Shape:
        images B×3×H×W; boxes B×4 (x0, y0, x1, y1) pixels; share, position B.
    """
    w = images.shape[-1]
    x0, x1 = boxes[:, 0], boxes[:, 2]
    bw = (x1 - x0).clamp(min=0) * share
    centre = x0 + position * (x1 - x0)
    xs = torch.arange(w, device=images.device, dtype=images.dtype) + 0.5
    left, right = (centre - bw / 2)[:, None], (centre + bw / 2)[:, None]
    cover = ((xs[None] + 0.5).minimum(right) - (xs[None] - 0.5).maximum(left)).clamp(0, 1)     # B×W
    cover = cover[:, None, None, :]
    c = torch.tensor(colour, dtype=images.dtype, device=images.device).view(1, 3, 1, 1)
    return images * (1 - cover) + c * cover


# -- samples -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AtlasSamples:
    """Axis values of every sample (name -> N) with the SceneParams they make and the extra conditions."""

    values: dict[str, Tensor]
    params: SceneParams
    haze_beta: Tensor
    occlusion: Tensor
    occlusion_position: Tensor
    design: list[str]                 # per sample: the axis (or "a×b" pair) it varies

    def __len__(self) -> int:
        return len(self.params)

    def __getitem__(self, index) -> "AtlasSamples":
        idx = torch.as_tensor(index)
        return AtlasSamples({k: v[idx] for k, v in self.values.items()}, self.params[idx], self.haze_beta[idx],
                            self.occlusion[idx], self.occlusion_position[idx],
                            [self.design[i] for i in idx.flatten().tolist()])


def _draw(axis: AtlasAxis, n: int, g: torch.Generator, stratified: bool = True) -> Tensor:
    """``n`` values over the axis's range: stratified (one per equal slice, jittered) or uniform."""
    u = (torch.arange(n) + torch.rand(n, generator=g)) / n if stratified else torch.rand(n, generator=g)
    if stratified:
        u = u[torch.randperm(n, generator=g)]
    if axis.log:
        return torch.exp(math.log(axis.low) + (math.log(axis.high) - math.log(axis.low)) * u)
    return axis.low + (axis.high - axis.low) * u


def params_from_values(values: dict[str, Tensor], axes: dict[str, AtlasAxis], g: torch.Generator,
                       background_count: int, frame: float = 0.62, object_width_m: float = 0.75,
                       sensor_focal_px: float = 1400.0) -> tuple[SceneParams, Tensor]:
    """SceneParams for per-sample axis values (missing axes at their nominal values), a random
    lighting preset and held-out background per sample; also the occlusion bar positions."""
    n = len(next(iter(values.values())))
    v = {k: values.get(k, torch.full((n,), axes[k].nominal)) for k in axes}
    full = lambda x: torch.full((n,), float(x))  # noqa: E731
    presets = list(LIGHTING_PRESETS)
    pick = torch.randint(len(presets), (n,), generator=g).tolist()
    light = {k: torch.tensor([LIGHTING_PRESETS[presets[i]][k] for i in pick]) for k in LIGHTING_PRESETS["noon"]}
    light["ambient"] = light["ambient"] * v.get("light", full(1))
    light["diffuse"] = light["diffuse"] * v.get("light", full(1))
    if "color_temp_k" in values:
        light["color_temp_k"] = v["color_temp_k"]
    dist = v.get("distance_m", full(8.0))
    fr = full(frame)
    params = SceneParams(
        distance_m=dist, azimuth_deg=v.get("azimuth_deg", full(0)), elevation_deg=v.get("elevation_deg", full(-5)),
        roll_deg=full(0), frame=fr, shift_x=full(0), shift_y=full(0), **light,
        sensor_px=sensor_pixels(object_width_m, dist, fr, sensor_focal_px),
        blur_sigma_px=v.get("blur_sigma_px", full(0.4)), motion_px=full(1), motion_angle_deg=full(0),
        exposure=v.get("exposure", full(1)), contrast=full(1), noise_std=v.get("noise_std", full(0.01)),
        jpeg_quality=full(100), noise_seed=torch.randint(0, 2**31 - 1, (n,), generator=g),
        background_index=torch.randint(0, max(1, background_count), (n,), generator=g),
        bg_x=torch.rand(n, generator=g), bg_y=torch.rand(n, generator=g), bg_scale=0.5 + 0.5 * torch.rand(n, generator=g))
    return params, 0.25 + 0.5 * torch.rand(n, generator=g)


def design_samples(axes: dict[str, AtlasAxis], per_axis: int, pairs: list[tuple[str, str]], per_pair: int,
                   generator: torch.Generator, background_count: int) -> AtlasSamples:
    """One-factor samples for every axis, then two-factor samples for every pair."""
    blocks: list[tuple[dict[str, Tensor], str]] = []
    for name, axis in axes.items():
        if per_axis > 0:
            blocks.append(({name: _draw(axis, per_axis, generator)}, name))
    for a, b in pairs:
        if per_pair > 0:
            blocks.append(({a: _draw(axes[a], per_pair, generator), b: _draw(axes[b], per_pair, generator)}, f"{a}×{b}"))
    values = {k: torch.cat([blk.get(k, torch.full((len(next(iter(blk.values()))),), axes[k].nominal))
                            for blk, _ in blocks]) for k in axes}
    design = [d for blk, d in blocks for _ in range(len(next(iter(blk.values()))))]
    params, position = params_from_values(values, axes, generator, background_count)
    zeros = torch.zeros(len(design))
    return AtlasSamples(values, params, values.get("haze_beta", zeros), values.get("occlusion", zeros), position, design)


def render_samples(scene, texture: Tensor, pipeline, samples: AtlasSamples, device=None) -> Tensor:
    """Render samples: the pipeline without its camera effects, then haze and occlusion, then the effects."""
    device = device or texture.device
    p = samples.params.to(device)
    views = pipeline(scene, texture, p, effects=False)
    x = apply_haze(views.images, views.depth, samples.haze_beta.to(device))
    x = occlude_with_bar(x, views.boxes, samples.occlusion.to(device), samples.occlusion_position.to(device))
    return apply_camera_effects(x.clamp(0, 1), p)


# -- regions -----------------------------------------------------------------------------------------
@dataclass
class AtlasRegion:
    """A box of parameter space (axis -> [low, high]) where the clean victim fails."""

    box: dict[str, list[float]]
    n: int
    correct: int
    accuracy: float
    ci95: list[float]
    confident_failures: int
    top_wrong_label: str | None
    mean_wrong_confidence: float
    examples: list[int] = field(default_factory=list)      # failing sample indices, most confident first

    @property
    def name(self) -> str:
        return " & ".join(f"{k} {lo:.3g}..{hi:.3g}" for k, (lo, hi) in self.box.items())


@dataclass
class Atlas:
    """The atlas: axes, per-bin accuracy of every axis, and the failing regions."""

    true_label: str
    true_set: list[int]
    axes: dict[str, AtlasAxis]
    samples: int
    clean_accuracy: float
    confident_failure_rate: float
    confidence: float
    max_accuracy: float
    bins: dict[str, list[dict]]
    regions: list[AtlasRegion]

    def contains(self, params: SceneParams, haze_beta: Tensor | None = None, occlusion: Tensor | None = None) -> Tensor:
        """B bool: do the views' conditions lie in any region? (Held-out grid views have no haze or
        occlusion unless given.)"""
        vals = axis_values(params, haze_beta, occlusion)
        inside = torch.zeros(len(params), dtype=torch.bool)
        for r in self.regions:
            hit = torch.ones(len(params), dtype=torch.bool)
            for k, (lo, hi) in r.box.items():
                hit &= (vals[k] >= lo) & (vals[k] <= hi)
            inside |= hit
        return inside

    def to_dict(self) -> dict:
        d = asdict(self)
        d["axes"] = {k: asdict(a) for k, a in self.axes.items()}
        for r, rd in zip(self.regions, d["regions"]):
            rd["name"] = r.name
        return d

    @staticmethod
    def from_dict(d: dict) -> "Atlas":
        d = {k: v for k, v in d.items() if k in Atlas.__dataclass_fields__}     # atlas.json adds victim, scene
        d["axes"] = {k: AtlasAxis(**a) for k, a in d["axes"].items()}
        d["regions"] = [AtlasRegion(**{k: v for k, v in r.items() if k != "name"}) for r in d["regions"]]
        return Atlas(**d)


def axis_values(params: SceneParams, haze_beta: Tensor | None = None, occlusion: Tensor | None = None) -> dict[str, Tensor]:
    """The atlas's axes as seen in any SceneParams (light is relative to the nominal presets' level)."""
    p = params.to("cpu")
    base = torch.tensor([LIGHTING_PRESETS[k]["ambient"] + LIGHTING_PRESETS[k]["diffuse"] for k in LIGHTING_PRESETS])
    level = (p.ambient + p.diffuse)
    # the light axis scales a preset; for views made from presets this is 1 (nearest preset's ratio)
    light = (level[:, None] / base[None]).gather(1, (level[:, None] - base[None]).abs().argmin(1, keepdim=True))[:, 0]
    zeros = torch.zeros(len(p))
    return {"azimuth_deg": p.azimuth_deg, "elevation_deg": p.elevation_deg, "distance_m": p.distance_m,
            "light": light, "color_temp_k": p.color_temp_k, "exposure": p.exposure, "blur_sigma_px": p.blur_sigma_px,
            "noise_std": p.noise_std, "haze_beta": haze_beta.cpu() if haze_beta is not None else zeros,
            "occlusion": occlusion.cpu() if occlusion is not None else zeros}


def _edges(axis: AtlasAxis, k: int) -> Tensor:
    if axis.log:
        return torch.exp(torch.linspace(math.log(axis.low), math.log(axis.high), k + 1))
    return torch.linspace(axis.low, axis.high, k + 1)


def _region(box, keep: Tensor, correct: Tensor, wrong_conf: Tensor, pred: Tensor, labels, confidence: float,
            examples: int) -> AtlasRegion:
    n, k = int(keep.sum()), int((correct & keep).sum())
    wrong = keep & ~correct
    top = None
    if wrong.any():
        top = labels[int(torch.mode(pred[wrong]).values)]
    order = torch.nonzero(wrong).flatten()
    order = order[wrong_conf[order].argsort(descending=True)]
    if len(order) > examples:            # spread over the region: the most confident, then evenly down the list
        order = order[torch.linspace(0, len(order) - 1, examples).round().long()]
    return AtlasRegion(box={a: [float(lo), float(hi)] for a, (lo, hi) in box.items()}, n=n, correct=k,
                       accuracy=k / n if n else float("nan"), ci95=list(wilson_interval(k, n)),
                       confident_failures=int((wrong & (wrong_conf >= confidence)).sum()), top_wrong_label=top,
                       mean_wrong_confidence=float(wrong_conf[wrong].mean()) if wrong.any() else 0.0,
                       examples=order.tolist())


@dataclass(frozen=True)
class AtlasDesign:
    """How the atlas searches and bins (``build_atlas``, ``find_regions``).

    Args:
        per_axis: one-factor samples per axis; ``pairs`` and ``per_pair``: two-factor samples.
        bins, pair_bins: bins per axis for one- and two-factor regions.
        max_accuracy: a bin fails when its clean accuracy is below this.
        confidence: a failure is "confident" when the wrong label's probability is at least this.
        min_samples: the fewest samples a failing bin needs; ``examples``: sample indices kept per region.
        batch_size: views rendered at a time; ``seed``: of the samples' generator.
    """

    per_axis: int = 48
    pairs: tuple[tuple[str, str], ...] = ()
    per_pair: int = 64
    bins: int = 8
    pair_bins: int = 4
    max_accuracy: float = 0.5
    confidence: float = 0.5
    min_samples: int = 4
    examples: int = 4
    batch_size: int = 64
    seed: int = 2000


def find_regions(samples: AtlasSamples, probs: Tensor, true_set, labels, axes: dict[str, AtlasAxis],
                 design: AtlasDesign = AtlasDesign()) -> tuple[dict[str, list[dict]], list[AtlasRegion]]:
    """Per-axis bins of the one-factor samples and the failing regions (runs of failing bins, and
    failing cells of each pair not already inside a one-axis region)."""
    bins, pair_bins, max_accuracy = design.bins, design.pair_bins, design.max_accuracy
    confidence, min_samples, examples = design.confidence, design.min_samples, design.examples
    pred = probs.argmax(1)
    correct = in_label_set(pred, true_set)
    wrong_conf = probs.max(1).values
    table: dict[str, list[dict]] = {}
    regions: list[AtlasRegion] = []
    for name, axis in axes.items():
        own = torch.tensor([d == name for d in samples.design])
        if not own.any():
            continue
        v, edges = samples.values[name], _edges(axis, bins)
        rows, failing = [], []
        for i in range(bins):
            keep = own & (v >= edges[i]) & ((v < edges[i + 1]) if i < bins - 1 else (v <= edges[i + 1]))
            n, k = int(keep.sum()), int((keep & correct).sum())
            rows.append({"low": float(edges[i]), "high": float(edges[i + 1]), "n": n, "correct": k,
                         "accuracy": k / n if n else None, "ci95": list(wilson_interval(k, n))})
            failing.append(n >= min_samples and k / n < max_accuracy)
        table[name] = rows
        i = 0
        while i < bins:                      # merge runs of failing bins into one region
            if not failing[i]:
                i += 1
                continue
            j = i
            while j + 1 < bins and failing[j + 1]:
                j += 1
            lo, hi = float(edges[i]), float(edges[j + 1])
            keep = own & (v >= lo) & (v <= hi)
            regions.append(_region({name: (lo, hi)}, keep, correct, wrong_conf, pred, labels, confidence, examples))
            i = j + 1
    for d in sorted({d for d in samples.design if "×" in d}):
        a, b = d.split("×")
        own = torch.tensor([x == d for x in samples.design])
        ea, eb = _edges(axes[a], pair_bins), _edges(axes[b], pair_bins)
        va, vb = samples.values[a], samples.values[b]
        for i in range(pair_bins):
            for j in range(pair_bins):
                box = {a: (float(ea[i]), float(ea[i + 1])), b: (float(eb[j]), float(eb[j + 1]))}
                keep = own & (va >= ea[i]) & (va <= ea[i + 1]) & (vb >= eb[j]) & (vb <= eb[j + 1])
                n, k = int(keep.sum()), int((keep & correct).sum())
                if n < min_samples or k / n >= max_accuracy:
                    continue
                centre = {a: (box[a][0] + box[a][1]) / 2, b: (box[b][0] + box[b][1]) / 2}
                if any(len(r.box) == 1 and all(r.box[x][0] <= c <= r.box[x][1] for x, c in centre.items() if x in r.box)
                       for r in regions):
                    continue                  # explained by one axis alone
                regions.append(_region(box, keep, correct, wrong_conf, pred, labels, confidence, examples))
    regions.sort(key=lambda r: (r.accuracy, -r.n))
    return table, regions


@torch.no_grad()
def build_atlas(scene, victim, pipeline, design: AtlasDesign = AtlasDesign(), *, true_set=None,
                axes: dict[str, AtlasAxis] | None = None, background_count: int | None = None
                ) -> tuple[Atlas, AtlasSamples, Tensor]:
    """Search the clean scene's parameters for natural failures of ``victim``.

    Args:
        pipeline: a ViewPipeline over **held-out** backgrounds.
        design: how many samples, how they are binned and when a bin fails (``AtlasDesign``).
        true_set: acceptable label indices (default: the victim's set for the scene's class).
        axes: name -> AtlasAxis (default ``default_axes()``; a subset searches only those).

    Returns:
        the atlas, the samples, and their N×K probabilities.
    """
    per_axis, per_pair, batch_size, seed = design.per_axis, design.per_pair, design.batch_size, design.seed
    confidence, max_accuracy, pairs = design.confidence, design.max_accuracy, design.pairs
    axes = axes or default_axes()
    pairs = [tuple(p) for p in (pairs or ())]
    unknown = [a for p in pairs for a in p if a not in axes]
    if unknown:
        raise ValueError(f"Atlas pairs name unknown axes {unknown}; axes are {sorted(axes)}.")
    true_set = tuple(true_set) if true_set is not None else victim.label_set(scene.class_name)
    g = torch.Generator().manual_seed(seed)
    count = background_count if background_count is not None else len(pipeline.backgrounds)
    samples = design_samples(axes, per_axis, pairs, per_pair, g, count)
    probs = []
    for s in range(0, len(samples), batch_size):
        images = render_samples(scene, scene.texture, pipeline, samples[torch.arange(s, min(s + batch_size, len(samples)))])
        probs.append(torch.softmax(victim(images).float(), 1).cpu())
    probs = torch.cat(probs)
    table, regions = find_regions(samples, probs, true_set, victim.labels, axes, design)
    correct = in_label_set(probs.argmax(1), true_set)
    confident = (~correct & (probs.max(1).values >= confidence)).float().mean()
    atlas = Atlas(true_label=scene.class_name, true_set=list(true_set), axes=axes, samples=len(samples),
                  clean_accuracy=float(correct.float().mean()), confident_failure_rate=float(confident),
                  confidence=confidence, max_accuracy=max_accuracy, bins=table, regions=regions)
    return atlas, samples, probs


def with_axes(axes: dict[str, AtlasAxis], names: list[str] | None = None, **ranges) -> dict[str, AtlasAxis]:
    """A subset of ``axes`` (by ``names``) with some ranges replaced: ``azimuth_deg=(-60, 60)``."""
    out = {k: a for k, a in axes.items() if names is None or k in names}
    for k, (lo, hi) in ranges.items():
        out[k] = replace(out[k], low=float(lo), high=float(hi))
    return out
