"""Night drives (physattack/eot/night.py): in the car's headlights the sign's retroreflective face outshines a
matte sticker of the same colour many times over; under street lamps too, less so; in daylight the two look
alike."""

from __future__ import annotations

import pytest
import torch

from physattack.eot.night import Headlights
from physattack.drive.render import DriveRenderer
from physattack.drive.trajectories import Dashcam, Drive
from physattack.eot import BackgroundBank
from physattack.errors import InputError
from physattack.render import Renderer


def sticker_and_sheeting(scene, light: str, print_retroreflects: bool = False) -> tuple[float, float]:
    """Mean pixel of a sticker printed in the face's own red (2/255 off: print, not sheeting) and of the same
    area of sheeting mirrored across the face, at 12 m."""
    texture = scene.texture.clone()
    h, w = texture.shape[1:]
    rows, left, right = slice(int(0.2 * h), int(0.3 * h)), slice(int(0.3 * w), int(0.4 * w)), \
        slice(int(0.6 * w), int(0.7 * w))
    assert torch.allclose(texture[:, rows, left].mean((1, 2)), texture[:, rows, right].mean((1, 2)), atol=0.02)
    texture[:, rows, left] = (texture[:, rows, left] + 2 / 255).clamp(max=1)
    cam = Dashcam()
    drive = Drive(speed_kmh=36.0, lane_offset_m=3.5, start_m=12.0, fps=1.0, light=light, noise_std=0.0,
                  blur_sigma_px=0.0)
    frames = drive.frames(cam, tuple(scene.texture_size_m))[:1]
    x0, y0, x1, y1 = (int(v) for v in frames.face_boxes[0])
    views = DriveRenderer(Renderer(), BackgroundBank(2, seed=1000), cam, print_retroreflects=print_retroreflects).render(
        scene, texture, frames, region=(x0 - 2, y0 - 2, x1 + 2, y1 + 2), effects=False)
    img = views.images[0]
    fy = lambda a, b: slice(2 + round(a * (y1 - y0)), 2 + round(b * (y1 - y0)))  # noqa: E731
    fx = lambda a, b: slice(2 + round(a * (x1 - x0)), 2 + round(b * (x1 - x0)))  # noqa: E731
    sticker = img[:, fy(0.22, 0.28), fx(0.32, 0.38)].mean()
    sheeting = img[:, fy(0.22, 0.28), fx(0.62, 0.68)].mean()
    return float(sticker), float(sheeting)


def test_at_night_the_sheeting_outshines_a_sticker_of_its_own_colour_and_by_day_it_does_not(stop_scene):
    sticker, sheeting = sticker_and_sheeting(stop_scene, "night")
    assert sheeting > 10 * sticker, (sticker, sheeting)
    sticker, sheeting = sticker_and_sheeting(stop_scene, "noon")
    assert sheeting == pytest.approx(sticker, rel=0.1), (sticker, sheeting)
    # printed on retroreflective film (printer.material=retroreflective), the sticker glows with the sheeting
    sticker, sheeting = sticker_and_sheeting(stop_scene, "night", print_retroreflects=True)
    assert sheeting == pytest.approx(sticker, rel=0.1), (sticker, sheeting)
    # on a lit street the lamps add the same light to print and sheeting (the sheeting returns theirs towards the
    # lamps, not the camera); the headlights still make the face glow
    lit_sticker, lit_sheeting = sticker_and_sheeting(stop_scene, "night_lit")
    dark_sticker, dark_sheeting = sticker_and_sheeting(stop_scene, "night")
    assert lit_sticker - dark_sticker > 0.03 and lit_sheeting > 5 * lit_sticker
    assert lit_sheeting - dark_sheeting == pytest.approx(lit_sticker - dark_sticker, abs=0.02)


def test_retroreflection_falls_with_the_observation_angle_and_distance():
    lights = Headlights()
    far, near = torch.tensor([[-3.5, -0.7, 80.0]]), torch.tensor([[-3.5, -0.7, 10.0]])
    (retro_far, matte_far), (retro_near, matte_near) = lights.gains(far), lights.gains(near)
    # nearer: more light (inverse square) but a wider observation angle, so the ratio to matte falls
    assert float(matte_near) > 30 * float(matte_far)
    assert float(retro_near / matte_near) < float(retro_far / matte_far)
    assert 20 < float(retro_far / matte_far) < 200
    assert float(Headlights(sheeting="type_iii").gains(far)[0]) > 3 * float(retro_far)
    with pytest.raises(InputError, match="drive.headlights.sheeting must be one of"):
        Headlights(sheeting="paper")
