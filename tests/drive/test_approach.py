"""EOT over approach windows (physattack/drive/approach.py, eot=approach): the windows are drawn where a
recognition still stops the car, the hard success agrees with the judge, the stop margin pulls on the windows
that stop the car even where every frame reads the sign, the detector framing is measured on real frames, and
a few optimizer steps through it lower the drives' stop margin."""

from __future__ import annotations

import pytest
import torch

from physattack.drive.approach import ApproachObjective, ApproachSampler, Windows
from physattack.drive.framing import DetectorFraming, FramingDraw
from physattack.drive.judge import first_recognition
from physattack.drive.surrogate import stop_margin
from physattack.drive.render import DriveRenderer
from physattack.drive.trajectories import Dashcam, braking_distance_m
from physattack.eot import BackgroundBank
from physattack.errors import InputError

K, N = 3, 5


def test_windows_lie_between_the_first_frame_and_the_braking_point():
    s = ApproachSampler(drives=6, segments=3)
    w = s.windows(torch.Generator().manual_seed(0))
    assert len(w.params) == s.batch_size == 6 * 3 * N and w.found.all()          # no detector framing: all found
    x = w.params.distance_m.reshape(6, 3, N)
    along = torch.sqrt(x ** 2 - (s.dashcam.height_m - s.sign_height_m) ** 2)       # down the road, plus the offset
    assert (x[:, 0, 0] >= s.start_m - 1e-3).all()                                   # the first window: the first frames
    steps = x[..., :-1] - x[..., 1:]
    assert (steps > 0).all() and (steps < s.speed_kmh[1] / 3.6 / s.fps + 1e-3).all()   # consecutive 30-fps frames
    # every frame is at least its drive's braking distance away (the fastest drive's is the nearest bound)
    assert (along.amin((1, 2)) >= braking_distance_m(s.speed_kmh[0], s.reaction_s, s.decel_mps2) - 1e-3).all()
    assert (w.params.azimuth_deg < 0).all()          # the sign stands to the right of the car's path


def test_a_band_draws_the_later_windows_in_it_and_counts_its_windows_only():
    """eot.sampler.band_m: the windows after the first start in the band (a fast drive's braking point clips its
    near end), the first stays at the first frame, and every_window counts the band's windows, not the drive's."""
    whole = ApproachSampler(drives=64, segments=4).windows(torch.Generator().manual_seed(0))
    s = ApproachSampler(drives=64, segments=4, band_m=[55.0, 75.0])
    w = s.windows(torch.Generator().manual_seed(0))
    p = w.params
    along = (p.distance_m * p.elevation_deg.deg2rad().cos() * p.azimuth_deg.deg2rad().cos()).reshape(64, 4, N)
    assert (along[:, 0, 0] >= s.start_m - 1e-3).all()                                # the first frames as before
    assert (along[:, 1:, 0] <= 75.0 + 1e-3).all() and (along[:, 1:, -1] >= 55.0 - 1e-3).all()   # the rest in the band
    speed = (along[:, 0, 0] - along[:, 0, 1]) * s.fps * 3.6                      # each drive's, from its frames
    brake = s.braking_m(speed)
    assert (brake > 56.0).any()                                  # the fast drives brake beyond the band's near end...
    assert (along[:, 1:, -1] >= brake[:, None] - 1e-2).all()     # ...and their windows still end before it
    assert (w.usable < whole.usable).all() and (w.usable >= 1).all()
    with pytest.raises(InputError, match="eot.sampler.band_m"):
        ApproachSampler(band_m=[60.0, 90.0])                         # beyond the first frame at 80 m


def test_the_hard_success_is_the_judges_rule_on_each_segment():
    g = torch.Generator().manual_seed(1)
    w = ApproachSampler(drives=64, segments=2).windows(g)
    for trial in range(20):
        reads = torch.rand(len(w.params), generator=g) < 0.25 + 0.03 * trial
        runs = w.runs(reads)
        per = reads.reshape(64, 2, N)
        for d in range(64):
            stops = any(first_recognition(per[d, j], K, N) is not None for j in range(2))
            assert bool(runs[d]) is not stops


def test_missed_frames_read_nothing():
    w = ApproachSampler(drives=1, segments=1).windows(torch.Generator().manual_seed(0))
    missed = Windows(w.params, torch.tensor([True, False, False, False, True]), 1, 1, ApproachObjective())
    assert bool(missed.runs(torch.ones(N, dtype=torch.bool))[0]) is True        # 2 frames found: the car runs it
    assert bool(w.runs(torch.ones(N, dtype=torch.bool))[0]) is False            # all 5 found and read: it stops


def test_stop_margin_does_not_saturate_and_pulls_on_the_stopping_window():
    p = torch.zeros(2, 3, N)
    p[0] = 1.0                                  # every frame read as the sign: the car surely stops
    p[1, 1, :2] = 0.4                           # nothing close to k readings
    p.requires_grad_(True)
    m = stop_margin(p, K, N)
    assert float(m[0].detach()) > N - K and float(m[1].detach()) < 0.05
    m.sum().backward()
    assert p.grad[0].sum() > 0.9                # a gradient of about 1 where soft_stop's would vanish
    q = torch.full((1, 2, N), 0.2)
    q[0, 1] = torch.tensor([0.2, 0.9, 0.9, 0.9, 0.2])
    q.requires_grad_(True)
    stop_margin(q, K, N).sum().backward()
    assert q.grad[0, 1, 1:4].min() > 10 * q.grad[0, 0].abs().max()      # the window that stops the car


def test_bad_settings_name_the_key():
    with pytest.raises(InputError, match="eot.sampler.decision.k"):
        ApproachObjective(k=6, n=5)
    with pytest.raises(InputError, match="eot.sampler.speed_kmh"):
        ApproachSampler(speed_kmh=(30.0, 120.0))                  # braking beyond the first frame
    with pytest.raises(InputError, match="views_per_step"):
        ApproachSampler(views_per_step=8)
    with pytest.raises(InputError, match="longer than the runs"):
        stop_margin(torch.zeros(1, 1, 4), K, N)


def test_the_detector_framing_is_measured_on_rendered_drive_frames(stop_scene):
    """The bundled DetNet finds the clean sign on frames of drives rendered over training backgrounds, its box
    within a few percent of the sign's; views drawn after the fit are framed by those boxes."""
    from physattack.drive.stacks import StackSettings, TiledDetector
    from physattack.render import Renderer
    from physattack.victims import load_detnet

    cam = Dashcam()
    tiled = TiledDetector(load_detnet().eval(), cam, stop_scene.texture_size_m, StackSettings())
    framing = DetectorFraming(tiled, DriveRenderer(Renderer(), BackgroundBank(4, seed=0), cam), drives=2,
                              frames_per_drive=5)
    s = ApproachSampler(dashcam=cam, background_count=4, framing=framing)
    g = torch.Generator().manual_seed(0)
    m = s.refit(0, stop_scene, stop_scene.texture, g)
    assert m is not None and len(m) >= 8 and m.found_rate() >= 0.8
    assert (m.ratio[m.found] - 1).abs().max() < 0.3 and m.dx[m.found].abs().max() < 0.2
    assert s.refit(1, stop_scene, stop_scene.texture, g) is None               # not due
    w = s.windows(g)
    assert torch.allclose(w.params.frame, s.crop_frame / framing.sample(w.params.distance_m, g).ratio, atol=0.3)
    state = s.state_dict()
    other = ApproachSampler(dashcam=cam, background_count=4, framing=DetectorFraming(tiled, framing.renderer))
    other.load_state_dict(state)
    assert torch.equal(other.framing.measured.ratio, m.ratio)


def test_the_detector_framing_can_be_fitted_on_training_streets_and_never_on_a_held_out_one(stop_scene):
    """``fit.streets``: that share of a fit's drives stand on training streets (seeds below the held-out ones) and
    the detector is measured on their frames, where it still finds the clean sign; without a share the fit's drives
    are the ones drawn before, with no extra draw from the run's generator; a share outside 0-1 names its key."""
    from physattack.drive.stacks import StackSettings, TiledDetector
    from physattack.drive.street import HELD_OUT_STREETS
    from physattack.drive.trajectories import random_drives
    from physattack.render import Renderer
    from physattack.victims import load_detnet

    cam = Dashcam()
    tiled = TiledDetector(load_detnet().eval(), cam, stop_scene.texture_size_m, StackSettings())
    seen = []

    class Spy(DriveRenderer):
        def render(self, scene, texture, frames, region):
            seen.append(frames.street)
            return super().render(scene, texture, frames, region)

    framing = DetectorFraming(tiled, Spy(Renderer(), BackgroundBank(4, seed=0), cam), drives=2, frames_per_drive=4,
                              streets=1.0)
    m = ApproachSampler(dashcam=cam, background_count=4, framing=framing).refit(0, stop_scene, stop_scene.texture,
                                                                                torch.Generator().manual_seed(0))
    assert len(seen) == 2 and all(s is not None and s.seed < HELD_OUT_STREETS for s in seen)
    assert m.found_rate() >= 0.75                 # DetNet finds the clean sign among the street's clutter
    g, h = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    drives = random_drives(4, (25.0, 75.0), (2.0, 8.0), 4, g)
    plain = DetectorFraming(tiled, framing.renderer).on_streets(drives, g)
    random_drives(4, (25.0, 75.0), (2.0, 8.0), 4, h)
    assert plain == drives and torch.equal(g.get_state(), h.get_state())        # nothing more drawn
    with pytest.raises(InputError, match="eot.sampler.fit.streets"):
        DetectorFraming(tiled, framing.renderer, streets=1.5)


def test_steps_on_approach_windows_lower_the_drives_stop_margin(stop_scene, signnet, tmp_path):
    """The decision-level objective end to end in the EOT loop (the hand framing: no detector): a short run makes
    the drawn drives' stop margin fall and records the share of drives that run the sign as its success."""
    from physattack.attack import AttackSetup, EOTAttack
    from physattack.config import RunConfig
    from physattack.eot import ViewPipeline
    from physattack.patch import sticker_for_scene
    from physattack.printing import load_palette
    from physattack.render import Renderer

    torch.manual_seed(0)
    sampler = ApproachSampler(drives=2, segments=2, background_count=4, view={"frame": (0.55, 0.7)})
    pipe = ViewPipeline(Renderer(), BackgroundBank(4, seed=0), (64, 64))
    patch = sticker_for_scene(stop_scene, shape="bars")
    setup = AttackSetup(scene=stop_scene, patch=patch, victim=signnet.eval(), pipeline=pipe, sampler=sampler,
                        palette=load_palette(None))
    attack = EOTAttack(steps=12, lr=0.3, checkpoint_every=0)
    signs = tuple(signnet.label_set("stop"))

    def margin() -> float:
        g = torch.Generator().manual_seed(5)
        with torch.no_grad():
            texture = patch.apply(stop_scene.texture)
            out = []
            for _ in range(3):
                w = sampler.windows(g)
                views = pipe(stop_scene, texture, w.params)
                out.append(w.margin(torch.softmax(signnet(views.images), -1)[:, list(signs)].sum(-1)))
            return float(torch.cat(out).mean())

    before = margin()
    result = attack.run(setup, RunConfig(seed=0, progress=False), tmp_path)
    after = margin()
    assert before > 0.2 and after < 0.25 * before, (before, after)
    assert all(0.0 <= r["batch_success"] <= 1.0 for r in result.history)


def test_a_detectors_windows_are_the_drive_stacks_tiles_that_hold_the_sign(stop_scene):
    """For attack=hide each window frame is read on every tile of the drive stack's search that holds the sign
    whole (a far sign at 2x and at the sensor's own resolution, as the drive's TiledDetector reads it): rendered
    through a 160-px pipeline, the sign lands where that tile has it, within a pixel."""
    from physattack.drive.stacks import StackSettings
    from physattack.drive.trajectories import face_corners, projected_boxes
    from physattack.eot import ViewPipeline
    from physattack.render import Renderer

    s = ApproachSampler(drives=3, segments=2, background_count=4).for_detector(160)
    w = s.windows(torch.Generator().manual_seed(0))
    assert w.group is not None and w.frames == len(w.group) > 30 and w.frames == s.batch_size
    assert torch.equal(w.group.unique(), torch.arange(30))                  # every frame is read somewhere
    p = w.params[:w.frames]
    along = torch.sqrt(p.distance_m ** 2 - (s.dashcam.height_m - s.sign_height_m) ** 2)
    far = along > 60
    tiles = s.tiles
    assert [sc.scale for sc in tiles.scales] == [sc.scale for sc in StackSettings().scales] == [2.0, 1.0]
    for f in w.group[far].unique().tolist():                                 # far signs: both scales read them
        assert set(p.sensor_px[w.group == f].round().tolist()) == {80.0, 160.0}
    # the sign's box where the drive frame has it, in the tile's pixels
    x = -torch.sqrt(p.distance_m ** 2 - along ** 2 - (s.dashcam.height_m - s.sign_height_m) ** 2)
    with torch.no_grad():
        views = ViewPipeline(Renderer(), BackgroundBank(4, seed=0), (160, 160))(stop_scene, stop_scene.texture, p,
                                                                                 effects=False)
    centre = (views.boxes[:, :2] + views.boxes[:, 2:]) / 2
    expected = (torch.stack([p.shift_x, p.shift_y], -1) + 0.5) * 160
    assert (centre - expected).abs().max() < 1.0
    assert ((views.boxes[:, 2] - views.boxes[:, 0]) - p.frame * 160).abs().max() < 1.5
    points = torch.stack([x, torch.full_like(x, s.dashcam.height_m - s.sign_height_m), along], -1).double()
    boxes, _ = projected_boxes(s.dashcam.cameras(points), face_corners((0.75, 0.75)).double())
    held = tiles.holding(boxes)
    assert held.any(1).all()
    # a frame reads the sign when any of its tiles does
    reads = torch.zeros(w.frames, dtype=torch.bool)
    first = torch.nonzero(w.group == 0).flatten()
    reads[first[-1]] = True
    per_frame = w._read(reads.float()).flatten()
    assert per_frame[0] == 1 and per_frame[1:].sum() == 0


def test_tile_share_adds_the_tiles_whose_edge_cuts_the_sign_each_showing_at_least_that_share(stop_scene):
    """eot.sampler.tile_share=0.3: besides the tiles that hold the sign whole, each window frame is read on every
    tile holding at least 0.3 of its box, as the drive's detector scans them near the sign; rendered through a
    160-px pipeline, such a tile shows the sign cut at its edge, at least that share of it."""
    from physattack.eot import ViewPipeline
    from physattack.render import Renderer

    g = lambda: torch.Generator().manual_seed(3)  # noqa: E731
    whole = ApproachSampler(drives=3, segments=2, background_count=4).for_detector(160)
    cut = ApproachSampler(drives=3, segments=2, background_count=4, tile_share=0.3).for_detector(160)
    w1, w2 = whole.windows(g()), cut.windows(g())
    assert torch.equal(w1.group.unique(), w2.group.unique())                    # the same frames...
    assert w2.frames > w1.frames                                                 # ...on more tiles
    extra = [i for i in range(w2.frames) if not any(
        torch.isclose(w2.params.shift_x[i], w1.params.shift_x[w1.group == w2.group[i]]).tolist())]
    assert extra
    p = w2.params[torch.tensor(extra)]
    with torch.no_grad():
        views = ViewPipeline(Renderer(), BackgroundBank(4, seed=0), (160, 160))(stop_scene, stop_scene.texture, p,
                                                                                 effects=False)
    full = p.frame * 160                                                         # the sign's side in the tile
    left, right = (p.shift_x + 0.5) * 160 - full / 2, (p.shift_x + 0.5) * 160 + full / 2
    assert ((left < 0) | (right > 160)).all()                                   # each extra tile cuts the sign
    width = views.boxes[:, 2] - views.boxes[:, 0]
    inside = right.clamp(max=160) - left.clamp(min=0)                            # and shows the part inside it
    assert (width - inside).abs().max() < 1.5 and (inside >= 0.3 * full - 1e-3).all() and (inside < full).all()
    with pytest.raises(InputError, match="eot.sampler.tile_share"):
        ApproachSampler(tile_share=0.0)


def test_background_frame_shows_behind_the_sign_what_that_tile_of_a_drives_frame_shows():
    """eot.sampler.background=frame: each tile's background is its part of the bank image stretched over the
    whole frame (DriveRenderer.background at a drive's first frame), not a crop of 35-100 % of the image: at each
    tile's centre the two agree, and a tile spans a few per cent of the image."""
    import torch.nn.functional as F

    from physattack.drive.render import DriveRenderer, frame_background_crop
    from physattack.render import Renderer

    bank = BackgroundBank(4, seed=0)
    g = lambda: torch.Generator().manual_seed(0)  # noqa: E731
    view = ApproachSampler(drives=2, segments=2, background_count=4).for_detector(160)
    frame = ApproachSampler(drives=2, segments=2, background_count=4, background="frame").for_detector(160)
    wv, wf = view.windows(g()), frame.windows(g())
    assert torch.equal(wv.params.shift_x, wf.params.shift_x)                   # the same rows, only the background
    assert (wf.params.bg_scale[:wf.frames] < 0.15).all() and (wv.params.bg_scale[:wv.frames] >= 0.35).all()
    extents = frame.tiles.extents
    crop = frame_background_crop(extents, frame.dashcam)
    index = torch.arange(len(extents)) % 4
    crops = bank.crops(index, crop["bg_x"], crop["bg_y"], crop["bg_scale"], (160, 160))
    first = wf.params[:len(extents)]                                           # a drive's first frame: no zoom yet
    first = type(first)(**{**{k: getattr(first, k) for k in first.__dataclass_fields__}, "background_index": index,
                           "bg_scale": torch.ones(len(extents))})
    drive = DriveRenderer(Renderer(), bank, frame.dashcam)
    centre, gaps = slice(72, 88), []
    for i, e in enumerate(extents.tolist()):
        behind = drive.background(first[i:i + 1], tuple(int(round(v)) for v in e))
        behind = F.interpolate(behind, size=(160, 160), mode="bilinear", align_corners=False)
        gaps.append(float((crops[i, :, centre, centre].mean((1, 2)) - behind[0, :, centre, centre].mean((1, 2)))
                          .abs().max()))
    # a square crop of the stretched image's part: the same colours at the centre (a cloud's edge differs a little)
    assert torch.tensor(gaps).median() < 0.01 and max(gaps) < 0.06, gaps
    # a classifier's crop (the sign filling 45-85 % of it) spans about 1-6 % of the frame's side, centred where the
    # crop is: the sign's place less its shift in the crop
    cv, cf = (ApproachSampler(drives=3, segments=2, background=b).windows(g()) for b in ("view", "frame"))
    assert torch.equal(cv.params.shift_x, cf.params.shift_x) and (cf.params.bg_scale < 0.07).all()
    s = cf.params.bg_scale.double()
    centre_u = ((2 * cf.params.bg_x.double() - 1) * (1 - s) + 1) / 2 * frame.dashcam.width_px
    along = torch.sqrt(cf.params.distance_m.double() ** 2 - (frame.dashcam.height_m - frame.sign_height_m) ** 2)
    azimuth = torch.deg2rad(cf.params.azimuth_deg.double())
    sign_u = frame.dashcam.width_px / 2 - frame.dashcam.focal_px * torch.tan(azimuth)
    crop_px = 0.75 * frame.dashcam.focal_px / along * torch.cos(torch.deg2rad(cf.params.azimuth_deg.double())) \
        / cf.params.frame.double()
    assert ((centre_u - (sign_u - cf.params.shift_x.double() * crop_px)).abs() < 0.1 * crop_px + 1).all()
    with pytest.raises(InputError, match="eot.sampler.background"):
        ApproachSampler(background="street")


def test_every_window_weighs_the_drawn_windows_by_the_drives_that_they_stand_for():
    """decision.every_window: a drive judged on 200 windows, of which 10 are drawn, has a larger stop margin than
    the same 10 windows alone (the car judges them all); a drive with no more windows than drawn is unchanged."""
    p = torch.full((2, 2, N), 0.3)
    alone = stop_margin(p, K, N)
    weighed = stop_margin(p, K, N, windows=torch.tensor([200.0, 10.0]))
    assert weighed[0] > alone[0] * 1.5 and torch.isclose(weighed[1], alone[1])
    s = ApproachSampler(drives=3, segments=2, decision={"every_window": True})
    w = s.windows(torch.Generator().manual_seed(0))
    assert (w.usable > 2 * N).all()          # 80 m down to the braking point: far more frames than two windows
    assert (w.margin(torch.full((len(w.params),), 0.3)) > alone.mean()).all()


def test_a_detectors_reading_is_its_odds_over_the_threshold():
    from physattack.attack.detection_objectives import sign_probability, sign_reading
    from physattack.victims.detection import DetectorOutput

    class Views:
        boxes = torch.tensor([[10.0, 10.0, 30.0, 30.0]] * 3)

    scores = torch.zeros(3, 2, 2)
    scores[:, 0, 0] = torch.tensor([0.3, 0.9, 0.05])             # the candidate on the sign, class 0
    scores[:, 1, 0] = 0.99                                         # one elsewhere: never counts
    boxes = torch.tensor([[10.0, 10.0, 30.0, 30.0], [60.0, 60.0, 80.0, 80.0]]).expand(3, 2, 4)
    out = DetectorOutput(boxes, scores, torch.ones(3, 2, dtype=torch.bool), [], 0.3)
    p = sign_reading(out, 0, Views())
    assert p[0] == pytest.approx(0.5, abs=1e-4) and p[1] > 0.9 and p[2] < 0.15
    # decision.threshold_scale: read against a stricter threshold, a score just under the real one reads over 1/2
    scores[0, 0, 0] = 0.27
    assert sign_reading(out, 0, Views())[0] < 0.5 < sign_reading(out, 0, Views(), threshold_scale=0.6)[0]
    with pytest.raises(InputError, match="eot.sampler.decision.threshold_scale"):
        ApproachSampler(decision={"threshold_scale": 1.5})
    with pytest.raises(InputError, match="threshold_scale=0.6 applies to a detector"):
        sign_probability(torch.zeros(3, 4), (1,), Views(), threshold_scale=0.6)
    # ... and a classifier's run refuses it before its first step, where the attack looks at its windows
    from physattack.attack.loop import EOTAttack

    class Classifier:
        is_detector = False

    stricter = ApproachSampler(decision={"threshold_scale": 0.6})
    with pytest.raises(InputError, match="threshold_scale=0.6 applies to a detector"):
        EOTAttack().check_windows(Classifier(), None, stricter)


def test_clean_camera_films_a_share_of_the_drives_with_the_drives_own_camera():
    """eot.sampler.clean_camera: that share of the drawn drives has the held-out drives' camera (conf/drive's blur and
    noise, nothing else), every frame of such a drive alike; the rest keep the drawn effects."""
    from physattack.drive.approach import CLEAN_CAMERA

    w = ApproachSampler(drives=40, segments=1, clean_camera=0.5).windows(torch.Generator().manual_seed(0))
    p = w.params
    fx = torch.stack([getattr(p, k).float() for k in CLEAN_CAMERA], -1).reshape(40, N, -1)
    clean = (fx == torch.tensor(list(CLEAN_CAMERA.values()))).all(-1)       # drives × frames
    assert (clean.all(1) | ~clean.any(1)).all()                             # a drive is filmed one way
    assert 10 <= int(clean.all(1).sum()) <= 30
    none = ApproachSampler(drives=40, segments=1).windows(torch.Generator().manual_seed(0)).params
    assert not (torch.stack([getattr(none, k).float() for k in CLEAN_CAMERA], -1)
                == torch.tensor(list(CLEAN_CAMERA.values()))).all(-1).any()
    with pytest.raises(InputError, match="eot.sampler.clean_camera"):
        ApproachSampler(clean_camera=1.5)


def test_views_draw_the_boxes_measured_where_their_sign_is_in_the_frame():
    """Two places at the same distance, where the detector boxed the sign differently (a tight box 6 m right, a
    true one 3.5 m right): keyed by place, each window frame draws its own place's box; keyed by distance
    alone, both are mixed. A bad ``by`` is one sentence."""
    from physattack.drive.framing import BoxMeasurements

    cam = Dashcam()
    s = ApproachSampler(dashcam=cam, drives=32, segments=1, lane_offset_m=(3.5, 6.0), speed_kmh=(30.0, 30.0),
                        start_m=70.0, framing=DetectorFraming(None, None, draw=FramingDraw(neighbours=3, by="place")))
    # measured on frames at the windows' distances, the sign 3.5 and 6 m right: ratio 0.66 at 6 m, 1.0 at 3.5 m
    dist = torch.linspace(60.0, 72.0, 13).repeat(2)
    offset = torch.cat([torch.full((13,), 3.5), torch.full((13,), 6.0)])
    y = torch.full_like(dist, cam.height_m - s.sign_height_m)
    boxes = s._boxes(-offset, y, dist).float()
    place = torch.cat([(boxes[:, :2] + boxes[:, 2:]) / 2, (boxes[:, 2:] - boxes[:, :2]).amax(1, keepdim=True)], 1)
    ratio = torch.where(offset > 5, 0.66, 1.0)
    zeros = torch.zeros_like(dist)
    s.framing.measured = BoxMeasurements(dist, torch.ones_like(dist, dtype=torch.bool), ratio, zeros, zeros, place)
    w = s.windows(torch.Generator().manual_seed(1))
    lateral = w.params.distance_m * torch.sin(torch.deg2rad(w.params.azimuth_deg)).abs()
    right, near = lateral > 5.4, lateral < 4.1                  # frames nearest the 6-m and the 3.5-m measurements
    assert right.sum() >= 5 and near.sum() >= 5
    frame = w.params.frame
    assert torch.allclose(frame[right], torch.full_like(frame[right], s.crop_frame / 0.66))
    assert torch.allclose(frame[near], torch.full_like(frame[near], s.crop_frame))
    s.framing.draw = FramingDraw(neighbours=3, by="distance")
    mixed = s.windows(torch.Generator().manual_seed(1)).params.frame
    assert not torch.allclose(mixed[right], torch.full_like(mixed[right], s.crop_frame / 0.66))
    with pytest.raises(InputError, match="eot.sampler.fit.by"):
        FramingDraw(by="nearest")


def test_a_window_can_share_one_measured_box_as_a_drives_consecutive_frames_do():
    """``fit.per=window``: the n frames of a window are framed by the one measurement drawn for its first frame (a
    tight box persists, and k of n tight frames decide a drive), so each window's frames are all tight or all true;
    drawn per frame (the default) they mix within windows. A bad ``per`` is one sentence."""
    from physattack.drive.framing import BoxMeasurements

    framing = DetectorFraming(None, None, draw=FramingDraw(neighbours=4, per="window"))
    s = ApproachSampler(drives=32, segments=2, start_m=70.0, framing=framing)
    dist = torch.linspace(10.0, 72.0, 64)
    ratio = torch.where(torch.arange(64) % 2 == 0, 0.6, 1.0)       # every other measurement a tight box
    zeros = torch.zeros_like(dist)
    s.framing.measured = BoxMeasurements(dist, torch.ones_like(dist, dtype=torch.bool), ratio, zeros, zeros)
    n = s.decision.n

    def tight_per_window(sampler):
        w = sampler.windows(torch.Generator().manual_seed(2))
        return (w.params.frame[:w.frames] > sampler.crop_frame * 1.2).reshape(-1, n).sum(1)

    shared = tight_per_window(s)
    assert ((shared == 0) | (shared == n)).all() and (shared == n).any() and (shared == 0).any()
    s.framing.draw = FramingDraw(neighbours=4, per="frame")
    mixed = tight_per_window(s)
    assert ((mixed > 0) & (mixed < n)).float().mean() > 0.5
    with pytest.raises(InputError, match="eot.sampler.fit.per"):
        FramingDraw(per="drive")


def test_tightest_draws_the_tightest_box_the_detector_found_among_the_nearest():
    """``fit.tightest=1``: every draw takes the smallest box found among its nearest measurements (a miss is never
    the tightest); 0 draws as before, with nothing more from the generator; a share outside 0-1 names its key."""
    from physattack.drive.framing import BoxMeasurements

    dist = torch.tensor([50.0, 51.0, 52.0, 53.0, 70.0, 71.0])
    found = torch.tensor([True, True, False, True, True, True])
    ratio = torch.tensor([1.2, 0.7, 0.1, 1.1, 0.9, 1.3])
    zeros = torch.zeros_like(dist)
    framing = DetectorFraming(None, None, draw=FramingDraw(neighbours=4, tightest=1.0))
    framing.measured = BoxMeasurements(dist, found, ratio, zeros, zeros)
    f = framing.sample(torch.full((64,), 51.5), torch.Generator().manual_seed(0))
    assert torch.equal(f.ratio, torch.full((64,), 0.7)) and f.found.all()
    framing.draw = FramingDraw(neighbours=4)
    g, h = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    plain = framing.sample(torch.full((64,), 51.5), g)
    assert len(set(plain.ratio.tolist())) > 2                     # random among the four nearest
    torch.randint(4, (64,), generator=h)
    assert torch.equal(g.get_state(), h.get_state())
    with pytest.raises(InputError, match="eot.sampler.fit.tightest"):
        FramingDraw(tightest=2.0)


def test_shrink_frames_a_share_of_found_boxes_on_a_part_of_the_sign():
    """``fit.shrink=1``: every found draw's box is shrunk by a factor within ``shrink_to`` and stays inside the box
    it was drawn as (a miss stays a miss); 0 draws nothing more; a share or a range out of bounds names its key."""
    from physattack.drive.framing import BoxMeasurements

    dist = torch.tensor([50.0, 51.0, 52.0, 53.0])
    found = torch.tensor([True, True, False, True])
    ratio = torch.tensor([1.2, 1.0, 1.0, 1.1])
    dx = torch.tensor([0.05, -0.05, 0.0, 0.0])
    framing = DetectorFraming(None, None, draw=FramingDraw(neighbours=4, shrink=1.0, shrink_to=(0.5, 0.6)))
    framing.measured = BoxMeasurements(dist, found, ratio, dx, torch.zeros_like(dist))
    f = framing.sample(torch.full((256,), 51.5), torch.Generator().manual_seed(0))
    framing.draw = FramingDraw(neighbours=4)
    g = torch.Generator().manual_seed(0)
    plain = framing.sample(torch.full((256,), 51.5), g)
    assert torch.equal(f.found, plain.found) and not f.found.all()
    factor = f.ratio[f.found] / plain.ratio[f.found]
    assert factor.min() >= 0.5 - 1e-6 and factor.max() <= 0.6 + 1e-6
    assert torch.equal(f.ratio[~f.found], plain.ratio[~f.found])
    room = plain.ratio * (1 - f.ratio / plain.ratio) / 2 + 1e-6
    assert ((f.dx - plain.dx).abs() <= room).all() and ((f.dy - plain.dy).abs() <= room).all()
    assert (f.dx - plain.dx)[f.found].abs().max() > 0.05              # moved within the box, not centred
    h = torch.Generator().manual_seed(0)
    torch.randint(4, (256,), generator=h)
    assert torch.equal(g.get_state(), h.get_state())                  # shrink 0: nothing more drawn
    with pytest.raises(InputError, match="eot.sampler.fit.shrink"):
        FramingDraw(shrink=1.5)
    with pytest.raises(InputError, match="eot.sampler.fit.shrink_to"):
        FramingDraw(shrink_to=(0.7, 1.4))


def test_edge_frames_a_share_of_windows_as_the_part_of_the_sign_a_tiles_edge_cuts():
    """``fit.edge``: where an edge of one of the stack's tiles cuts the sign, a found frame is boxed as that tile's
    part of the sign (what the tiled detector's box was, to the pixel, in the lost drives): the sign's full height,
    part of its width, centred on the part. A frame no tile cuts, or a miss, keeps its draw; a window's frames are
    edged together (a share of the windows, all of their frames); windows drawn through the sampler carry it; 0
    draws nothing more; a share out of bounds names its key."""
    from types import SimpleNamespace

    from physattack.drive.framing import BoxMeasurements, Framing
    from physattack.drive.stacks import SearchTiles, StackSettings

    cam = Dashcam()
    tiles = SearchTiles(160, cam, (0.75, 0.75), StackSettings())
    framing = DetectorFraming(SimpleNamespace(search=tiles), None, draw=FramingDraw(edge=1.0))
    cut = torch.tensor([1044.0, 524.0, 1055.0, 535.0], dtype=torch.float64)      # a 2x tile ends at x=1052
    whole = torch.tensor([998.0, 527.0, 1006.0, 536.0], dtype=torch.float64)     # inside every tile that meets it
    boxes = torch.stack([cut, whole, cut])
    drawn = Framing(torch.tensor([True, True, False]), torch.full((3,), 1.2), torch.zeros(3), torch.zeros(3))
    f = framing.at_tile_edges(drawn, boxes, torch.arange(3), torch.Generator().manual_seed(0))
    assert f.ratio[0] == pytest.approx(1.0) and f.dx[0] == pytest.approx(((1044 + 1052) / 2 - 1049.5) / 11)
    assert f.dy[0] == pytest.approx(0.0)
    assert torch.equal(f.ratio[1:], drawn.ratio[1:]) and torch.equal(f.dx[1:], drawn.dx[1:])
    framing.draw = FramingDraw(edge=0.5)
    many = Framing(torch.ones(400, dtype=torch.bool), torch.full((400,), 1.2), torch.zeros(400), torch.zeros(400))
    edged = framing.at_tile_edges(many, cut.expand(400, 4), torch.arange(400) // 5,
                                  torch.Generator().manual_seed(1)).dx.ne(0).reshape(80, 5).sum(1)
    assert ((edged == 0) | (edged == 5)).all() and 20 < int((edged == 5).sum()) < 60
    framing.draw = FramingDraw(edge=1.0, neighbours=4)
    s = ApproachSampler(dashcam=cam, drives=16, segments=2, lane_offset_m=(6.0, 6.0), speed_kmh=(30.0, 30.0),
                        start_m=70.0, framing=framing)
    dist = torch.linspace(10.0, 72.0, 32)
    zeros = torch.zeros_like(dist)
    framing.measured = BoxMeasurements(dist, torch.ones_like(dist, dtype=torch.bool), torch.full_like(dist, 1.2),
                                       zeros, zeros)
    w = s.windows(torch.Generator().manual_seed(3))
    moved = w.params.shift_x[:w.frames] != 0
    assert moved.any() and (~moved).any()                             # cut frames edged, the others as drawn
    assert torch.allclose(w.params.frame[:w.frames][~moved], torch.full((int((~moved).sum()),), s.crop_frame / 1.2))
    framing.draw = FramingDraw(neighbours=4)
    g, h = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    assert framing.at_tile_edges(many, cut.expand(400, 4), torch.arange(400), g) is many
    assert torch.equal(g.get_state(), h.get_state())                   # edge 0: nothing more drawn
    with pytest.raises(InputError, match="eot.sampler.fit.edge"):
        FramingDraw(edge=1.5)


def test_an_unknown_fit_key_is_one_sentence_before_the_detector_loads():
    """``eot.sampler.fit`` with a key nothing reads (a typo of ``shrink``) stops the run with one sentence naming it
    and the keys it takes, before any detector is loaded (no scene, renderer or weights are needed to say so)."""
    from omegaconf import OmegaConf

    from physattack.cli.build import approach_framing

    sampler = ApproachSampler(fit={"drives": 6, "frames_per_drive": 8, "neighbours": 6, "shrnk": 0.25})
    cfg = OmegaConf.create({"eot": {"grid": {"frame": 0.62}}})
    with pytest.raises(InputError, match=r"eot.sampler.fit has no key shrnk: it takes .*shrink, shrink_to and edge\."):
        approach_framing(sampler, cfg, scene=None, renderer=None, backgrounds=None, device="cpu")


def test_replay_redraws_the_windows_that_stopped_the_car():
    """eot.sampler.replay: the windows a step's readings stopped go to the memory, and the next step's first drives
    redraw them (speed, lane offset and their last window's first frame); with the memory empty, or replay 0, the
    draws are the same as without the option."""
    g = lambda: torch.Generator().manual_seed(3)  # noqa: E731
    plain = ApproachSampler(drives=4, segments=2).windows(g())
    s = ApproachSampler(drives=4, segments=2, replay=0.5)
    w = s.windows(g())
    assert torch.equal(w.params.distance_m, plain.params.distance_m) and len(s.memory) == 0
    reads = torch.zeros(len(w.params), dtype=torch.bool)
    reads[N:2 * N] = True                                  # drive 0's second window reads the sign in every frame
    assert w.success(reads, reads)[()] == pytest.approx(0.75)
    assert len(s.memory) == 1 and torch.equal(s.memory.rows[0], w.places[0, 1])
    again = s.windows(torch.Generator().manual_seed(9))
    assert torch.allclose(again.places[:2, -1], w.places[0, 1].expand(2, 3))      # 2 of 4 drives: round(0.5 * 4)
    assert not torch.allclose(again.places[2:, -1, :2], w.places[0, 1, :2].expand(2, 2))
    resumed = ApproachSampler(drives=4, segments=2, replay=0.5)
    resumed.load_state_dict(s.state_dict())
    assert torch.equal(resumed.memory.rows, s.memory.rows)
    with pytest.raises(InputError, match="eot.sampler.replay"):
        ApproachSampler(replay=2.0)
