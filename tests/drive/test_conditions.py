"""The drives' light and weather in EOT (issue 27: each preset "in the held-out drive set and in EOT"): the approach
sampler draws fog, night in the headlights and dusk per drive (``Conditions``), and ``ViewPipeline`` renders what a
view's ``fog_beta`` and ``headlights`` say, as a drive frame has them (``physattack.eot.fog``, ``physattack.eot.night``)."""

from __future__ import annotations

import pytest
import torch

from physattack.drive.approach import ApproachSampler
from physattack.drive.conditions import Conditions
from physattack.drive.trajectories import DRIVE_LIGHTS
from physattack.eot import BackgroundBank, ViewPipeline
from physattack.eot.fog import airlight
from physattack.eot.grid import EvalGrid
from physattack.eot.night import NIGHT_BACKDROP
from physattack.errors import InputError
from physattack.render import Renderer


def head_on(stop_scene, **conditions):
    """One head-on view of the stop sign at 12 m, framed 0.62, no camera effects."""
    from dataclasses import replace

    params = EvalGrid(azimuth_deg=[0.0], distance_m=[12.0], lighting=["noon"], blur_sigma_px=0.0,
                      noise_std=0.0).params()[:1]
    return replace(params, **{k: torch.tensor([float(v)]) for k, v in conditions.items()})


def render(stop_scene, texture, params, effects=False, print_retroreflects=False):
    pipe = ViewPipeline(Renderer(), BackgroundBank(2, seed=1000), (96, 96), object_width_m=0.75,
                        print_retroreflects=print_retroreflects)
    return pipe(stop_scene, texture, params, effects=effects)


def test_a_night_view_dims_a_sticker_of_the_faces_own_colour_and_its_background_and_by_day_nothing(stop_scene):
    texture = stop_scene.texture.clone()
    h, w = texture.shape[1:]
    block = (slice(None), slice(int(0.35 * h), int(0.65 * h)), slice(int(0.2 * w), int(0.8 * w)))
    printed = texture.clone()
    printed[block] = (printed[block] + 2 / 255).clamp(max=1)          # print, not sheeting, in the sheeting's colour
    day = head_on(stop_scene)
    night = head_on(stop_scene, headlights=1, **DRIVE_LIGHTS["night"])
    clean_day, printed_day = (render(stop_scene, t, day) for t in (texture, printed))
    clean_night, printed_night = (render(stop_scene, t, night) for t in (texture, printed))
    sticker = (printed_day.images[0] - clean_day.images[0]).abs().amax(0) > 1e-3      # where the print is
    assert 0.03 < float(sticker.float().mean()) < 0.2
    mean = lambda v: float(v.images[0][:, sticker].mean())  # noqa: E731
    assert mean(printed_day) == pytest.approx(mean(clean_day), rel=0.03)
    assert mean(printed_night) < 0.2 * mean(clean_night)              # the matte print is dark...
    assert mean(clean_night) > 1.0                                    # ...on sheeting that glows (the camera clips)
    # printed on retroreflective film (printer.material=retroreflective) the sticker glows as the sheeting does
    retro = render(stop_scene, printed, night, print_retroreflects=True)
    assert mean(retro) == pytest.approx(mean(clean_night), rel=0.03)
    # the background is a daylight photograph dimmed to NIGHT_BACKDROP of itself
    bg = clean_day.alpha[0, 0] < 0.01
    ratio = clean_night.images[0][:, bg].mean() / clean_day.images[0][:, bg].mean()
    assert float(ratio) == pytest.approx(NIGHT_BACKDROP, rel=0.05)


def test_fog_fades_the_sign_by_its_distance_and_the_background_by_the_backdrops(stop_scene):
    beta = 3.912 / 150.0
    clear = render(stop_scene, stop_scene.texture, head_on(stop_scene))
    params = head_on(stop_scene, fog_beta=beta)
    foggy = render(stop_scene, stop_scene.texture, params)
    air = airlight(params.ambient, params.diffuse, params.lights().color)[0].view(3, 1)
    face = clear.alpha[0, 0] > 0.999
    t = torch.exp(torch.tensor(-beta * 12.0))
    expected = clear.images[0][:, face] * t + air * (1 - t)
    assert torch.allclose(foggy.images[0][:, face], expected, atol=1e-4)
    bg = clear.alpha[0, 0] < 0.001
    t_bg = torch.exp(torch.tensor(-beta * 200.0))
    assert torch.allclose(foggy.images[0][:, bg], clear.images[0][:, bg] * t_bg + air * (1 - t_bg), atol=1e-4)


def test_the_approach_sampler_draws_fog_night_and_dusk_per_drive_and_nothing_by_default(stop_scene):
    g = lambda: torch.Generator().manual_seed(3)  # noqa: E731
    plain = ApproachSampler(drives=64, segments=1).windows(g()).params
    assert float(plain.fog_beta.abs().sum()) == 0 and float(plain.headlights.sum()) == 0
    same = ApproachSampler(drives=64, segments=1, conditions={"fog": 0.0}).windows(g()).params
    assert torch.equal(same.ambient, plain.ambient) and torch.equal(same.distance_m, plain.distance_m)
    drawn = ApproachSampler(drives=64, segments=1, conditions={"fog": 0.5, "night": 0.25, "dusk": 0.25})
    p = drawn.windows(g()).params
    per_drive = lambda t: t.view(64, -1)  # noqa: E731
    for name in ("fog_beta", "headlights", "ambient"):                # one condition per drive, all its frames
        assert bool((per_drive(getattr(p, name)) == per_drive(getattr(p, name))[:, :1]).all())
    beta, lit = per_drive(p.fog_beta)[:, 0], per_drive(p.headlights)[:, 0] > 0
    foggy = beta > 0
    assert 16 <= int(foggy.sum()) <= 48
    assert bool(((beta[foggy] >= 3.912 / 1000 - 1e-6) & (beta[foggy] <= 3.912 / 150 + 1e-6)).all())
    amb = per_drive(p.ambient)[:, 0]
    assert 6 <= int(lit.sum()) <= 26 and bool((amb[lit] == DRIVE_LIGHTS["night"]["ambient"]).all())
    dusk = amb == DRIVE_LIGHTS["dusk"]["ambient"]
    assert 6 <= int(dusk.sum()) <= 26 and not bool((dusk & lit).any())
    # a detector's windows (the drive stack's tiles) keep their drive's conditions; its close views stay clear
    tiles = ApproachSampler(drives=4, segments=1, views_per_step=2, views={}, conditions={"night": 1.0})
    w = tiles.for_detector(64).windows(g())
    assert bool((w.params.headlights[:w.frames] == 1).all()) and not bool(w.params.headlights[w.frames:].any())
    # a night view in fog still passes the gradient to the patch
    texture = stop_scene.texture.clone().requires_grad_(True)
    row = p[torch.nonzero(p.headlights > 0).flatten()[:2]]
    row = type(row)(**{**{f: getattr(row, f) for f in row.__dataclass_fields__},
                       "fog_beta": torch.full((2,), 0.01)})
    render(stop_scene, texture, row, effects=True).images.sum().backward()
    assert float(texture.grad.abs().sum()) > 0


def test_a_print_material_that_is_neither_matte_nor_retroreflective_is_refused():
    from omegaconf import OmegaConf

    from physattack.cli.build import print_retroreflects

    assert not print_retroreflects(OmegaConf.create({})) and not print_retroreflects(OmegaConf.create({"printer": {}}))
    assert print_retroreflects(OmegaConf.create({"printer": {"material": "retroreflective"}}))
    with pytest.raises(InputError, match=r"printer\.material='glossy' is not a print material"):
        print_retroreflects(OmegaConf.create({"printer": {"material": "glossy"}}))


def test_bad_conditions_name_the_key():
    with pytest.raises(InputError, match=r"eot\.sampler\.conditions\.fog"):
        Conditions(fog=1.5)
    with pytest.raises(InputError, match=r"conditions\.night=0\.6 and eot\.sampler\.conditions\.dusk=0\.6"):
        Conditions(night=0.6, dusk=0.6)
    with pytest.raises(InputError, match=r"conditions\.fog_visibility_m"):
        Conditions(fog_visibility_m=(0.0, 100.0))


def test_views_draw_the_detector_boxes_measured_in_their_own_light_and_weather():
    from physattack.drive.framing import BoxMeasurements, DetectorFraming, FramingDraw
    from physattack.drive.conditions import condition_code, drive_condition
    from physattack.drive.trajectories import random_drives

    framing = DetectorFraming(tiled=None, renderer=None, draw=FramingDraw(neighbours=3))
    dist = torch.tensor([40.0, 60.0, 80.0] * 2)
    code = torch.tensor([0, 0, 0, 2, 2, 2])               # daylight, then night
    framing.measured = BoxMeasurements(dist, torch.ones(6, dtype=torch.bool), torch.tensor([1.0] * 3 + [1.3] * 3),
                                       torch.zeros(6), torch.zeros(6), condition=code)
    g = torch.Generator().manual_seed(0)
    views = torch.tensor([45.0, 70.0, 79.0])
    assert torch.equal(framing.sample(views, g, condition=torch.full((3,), 2)).ratio, torch.full((3,), 1.3))
    assert torch.equal(framing.sample(views, g, condition=torch.zeros(3, dtype=torch.long)).ratio, torch.ones(3))
    # the framing's drives take the same shares; none asked: the drives and the generator are left alone
    drives = random_drives(40, (30.0, 70.0), (2.0, 8.0), 8, torch.Generator().manual_seed(1))
    g = torch.Generator().manual_seed(2)
    assert Conditions().on_drives(drives, g) == drives and torch.equal(g.get_state(),
                                                                     torch.Generator().manual_seed(2).get_state())
    night = Conditions(night=1.0, fog=1.0, fog_visibility_m=(150.0, 1000.0)).on_drives(drives, g)
    assert {d.light for d in night} == {"night"} and {d.weather for d in night} == {"fog", "haze"}
    assert {drive_condition(d) for d in night} == {int(condition_code(*(torch.tensor([v]) for v in (1, 0, 1))))}
