"""The street around the sign (physattack/drive/street.py): a road below the horizon and sky above it, the sign
drawn over it where it projects, the same street for the same seed, regions as the full frame has them, other
signs (a red one among them) clear of the sign, and nothing between the car and the sign."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from physattack.drive.street import DISTRACTORS, Street
from physattack.drive.render import DriveRenderer
from physattack.drive.trajectories import Dashcam, Drive, DriveSet
from physattack.eot import BackgroundBank
from physattack.errors import InputError
from physattack.render import Renderer

CAM = Dashcam(width_px=640, height_px=360)


def frame(scene, street, region=None, texture=None):
    drive = Drive(speed_kmh=36.0, lane_offset_m=3.5, start_m=25.0, fps=2.0, noise_std=0.0, blur_sigma_px=0.0,
                  street=street)
    frames = drive.frames(CAM, tuple(scene.texture_size_m))[:1]
    renderer = DriveRenderer(Renderer(), BackgroundBank(2, seed=1000), CAM)
    return renderer.render(scene, scene.texture if texture is None else texture, frames, region=region, effects=False)


def test_a_street_frame_has_its_road_below_the_horizon_sky_above_and_the_sign_over_it(stop_scene):
    street = frame(stop_scene, 7)
    plain = frame(stop_scene, None)
    img = street.images[0]
    assert torch.equal(street.boxes, plain.boxes), "the street moved the sign"
    road = img[:, 340, 300]                                       # under the car, just ahead of it
    assert float(road.max() - road.min()) < 0.08 and 0.15 < float(road.mean()) < 0.45, road
    sky = img[:, 3, 300]
    assert float(sky[2]) > float(sky[0]), sky
    # the sign is drawn over the street: its face pixels are the same as over a bank background
    x0, y0, x1, y1 = (int(v) for v in street.boxes[0])
    cx, cy = (x0 + x1) // 2, (y0 + y1) // 2
    centre = (slice(None), slice(cy - 2, cy + 3), slice(cx - 2, cx + 3))
    assert torch.allclose(img[centre], plain.images[0][centre], atol=1e-6)
    # and a region is the full frame there, up to anti-aliasing along some polygon edges
    part = frame(stop_scene, 7, region=(300, 100, 600, 300))
    diff = (part.images[0] - img[:, 100:300, 300:600]).abs().amax(0)
    assert float((diff > 2e-3).float().mean()) < 0.01 and float(diff.mean()) < 2e-3


def test_the_same_seed_is_the_same_street_and_another_is_another(stop_scene):
    a, b, c = (frame(stop_scene, s).images[0] for s in (7, 7, 8))
    assert torch.equal(a, b)
    assert float((a - c).abs().mean()) > 0.02


@pytest.mark.parametrize("seed", range(6))
def test_other_signs_stand_clear_and_nothing_stands_between_the_car_and_the_sign(seed):
    street = Street(seed, lane_offset_m=3.5)
    polygons, faces = street.polygons()
    assert len(faces) == street.distractors and faces[0].name in DISTRACTORS[:3]        # a red one at least
    assert all(abs(f.centre[2]) >= street.clear_m for f in faces)
    # the car's sight lines to the sign run at -3.5 < x < 0, from the lens (0.7 m below the sign's centre) to the
    # face (0.375 m above it), for z between the car and the sign: a polygon reaching into that box would hide it
    sight = np.array([[-3.4, -0.8, 0.5], [0.0, 0.4, 200.0]])
    for p in polygons:
        lo, hi = p.points.min(0), p.points.max(0)
        assert not ((lo < sight[1]) & (hi > sight[0])).all(), p
    for f in faces:
        x, _, z = f.centre
        assert not (-3.4 < x < 0.0 and z > 0.5), (f.name, x, z)


def test_a_drive_set_on_streets_gives_every_drive_its_own_held_out_street():
    drives = DriveSet(world="street", street_seed=50_000).drives()
    assert [d.street for d in drives] == list(range(50_000, 50_018))
    assert all(d.street is None for d in DriveSet().drives())
    from physattack.drive.report import scenery, world_phrase
    assert world_phrase(drives) == "held-out streets (seeds 50000-50017)"          # what drive.md says they stood on
    assert world_phrase(DriveSet().drives()) == "held-out background images"
    plain = DriveSet().drives()[3]
    assert scenery(drives[3]) == "street 50003" and scenery(plain) == str(plain.background)    # drive.md's column
    with pytest.raises(InputError, match="drive.drives.world must be backdrop .* or street"):
        DriveSet(world="city")
    with pytest.raises(InputError, match="puts the sign on the road"):
        Street(0, lane_offset_m=1.0)
    assert np.isfinite(Street(1, 6.0).edge_x)


def test_fog_takes_contrast_by_depth_and_rain_is_the_same_for_the_same_frame(stop_scene):
    from physattack.drive.weather import WEATHER, fog_layer, transmission

    fog = WEATHER["fog"]
    assert float(transmission(fog.visibility_m, fog)) == pytest.approx(0.02, abs=1e-3)      # Koschmieder's 2 %
    black = torch.zeros(1, 3, 2, 2)
    air = torch.tensor([0.8, 0.8, 0.8])
    seen = fog_layer(black, torch.ones(1, 1, 2, 2), fog.visibility_m, fog, air)
    assert torch.allclose(seen, 0.98 * air.view(1, 3, 1, 1).expand_as(seen), atol=2e-3)
    clear = frame(stop_scene, 7).images[0]
    drive = Drive(speed_kmh=36.0, lane_offset_m=3.5, start_m=25.0, fps=2.0, noise_std=0.0, blur_sigma_px=0.0,
                  street=7, weather="fog")
    frames = drive.frames(CAM, tuple(stop_scene.texture_size_m))[:1]
    foggy = DriveRenderer(Renderer(), BackgroundBank(2, seed=1000), CAM).render(stop_scene, stop_scene.texture, frames,
                                                                                effects=False).images[0]
    near, far = (slice(None), slice(330, 360), slice(250, 350)), (slice(None), slice(185, 190), slice(310, 330))
    assert float((foggy[near] - clear[near]).abs().mean()) < float((foggy[far] - clear[far]).abs().mean())
    x0, y0, x1, y1 = (int(v) for v in frames.face_boxes[0])
    sign = (slice(None), slice(y0 + 3, y1 - 3), slice(x0 + 3, x1 - 3))
    assert float(foggy[sign].std()) < float(clear[sign].std())                  # the sign's contrast falls too
    rain = Drive(speed_kmh=36.0, lane_offset_m=3.5, start_m=25.0, fps=2.0, street=7, weather="rain")
    frames = rain.frames(CAM, tuple(stop_scene.texture_size_m))[:1]
    renderer = DriveRenderer(Renderer(), BackgroundBank(2, seed=1000), CAM)
    a, b = (renderer.render(stop_scene, stop_scene.texture, frames).images for _ in range(2))
    assert torch.equal(a, b)
    drives = DriveSet(weather=["clear", "fog"]).drives()
    assert len(drives) == 36 and [d.weather for d in drives[17:19]] == ["clear", "fog"]
    with pytest.raises(InputError, match="drive.drives.weather has unknown preset"):
        DriveSet(weather=["snow"])


def test_the_eot_samplers_never_draw_a_street_night_weather_or_occlusion():
    """The held-out streets and occlusions are for judging only: every drive an EOT sampler draws is a drive over a
    background image with nothing in the way, by day in clear air unless the approach sampler's ``conditions`` ask
    for fog, dusk or night (tests/drive/test_conditions.py)."""
    from physattack.drive.trajectories import DriveSampler, random_drives

    drives = DriveSampler().drives(64, torch.Generator().manual_seed(0))
    drives += random_drives(64, (20.0, 90.0), (2.0, 8.0), 24, torch.Generator().manual_seed(1))
    assert all(d.street is None and d.weather == "clear" and d.occlusion == "none"
               and d.light in ("noon", "overcast", "low_sun") for d in drives)


def test_a_training_bank_can_hold_training_streets_below_the_held_out_ones():
    from physattack.drive.street import HELD_OUT_STREETS, bank_with_streets
    from physattack.eot.backgrounds import BackgroundBank

    plain = BackgroundBank(2, seed=0)
    assert torch.equal(bank_with_streets(2, seed=0).images, plain.images)          # streets=0: the bank alone
    bank = bank_with_streets(2, seed=0, streets=2, street_seed=10)
    assert len(bank) == 4 and torch.equal(bank.images[:2], plain.images)
    street = bank.images[2:]
    assert street.shape == (2, 3, 256, 256) and float(street.std()) > 0.05
    with pytest.raises(InputError, match="must stay below 50000"):
        bank_with_streets(2, streets=2, street_seed=HELD_OUT_STREETS - 1)
