"""Pictures of drives: a timeline per drive (score and label read against the distance) and a video
with the stack's readings drawn on the frames."""

from __future__ import annotations

import cv2
import numpy as np

from physattack.drive.judge import DriveOutcome, DriveSettings, Judging
from physattack.drive.stacks import Readings


# -- pictures -------------------------------------------------------------------------------------
GREEN, RED, GREY, ORANGE = (40, 200, 60), (230, 40, 40), (150, 150, 150), (255, 150, 0)


def timeline_figure(outcome: DriveOutcome, labels: tuple[str, ...], sign_label: str, settings: DriveSettings):
    """Score of the sign's class and the label read, against the distance to the sign, one row per
    texture; the braking point and the moment of recognition (k of n) marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(outcome.readings)
    fig, axes = plt.subplots(len(names), 1, figsize=(9, 2.6 * len(names) + 0.6), sharex=True, squeeze=False)
    d = outcome.frames.distance_m[:outcome.judged].numpy()
    cmap = matplotlib.colormaps["tab10"]
    for ax, name in zip(axes[:, 0], names):
        r = outcome.readings[name]
        ax.plot(d, r.score.numpy(), color="black", lw=1.2, label=f"score of '{sign_label}'")
        for lab in sorted(set(r.label.tolist())):
            sel = (r.label == lab).numpy()
            text = "not found" if lab < 0 else labels[lab]
            colour = "lightgrey" if lab < 0 else ("tab:green" if r.correct[sel].all() else cmap(lab % 10))
            ax.scatter(d[sel], np.full(sel.sum(), -0.08), s=9, marker="s", color=colour, label=f"read: {text}")
        ax.axvline(outcome.braking_m, color="tab:red", ls="--", lw=1, label=f"braking point {outcome.braking_m:.1f} m")
        at = outcome.recognised_at_m(name)
        if at is not None:
            ax.axvline(at, color="tab:green", lw=1.5, label=f"recognised ({settings.k} of {settings.n}) at {at:.1f} m")
        verdict = "stops" if outcome.stops(name) else "runs the sign"
        ax.set_title(f"{name}: {verdict}", fontsize=10, loc="left")
        ax.set_ylim(-0.15, 1.05)
        ax.set_ylabel("score")
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("distance to the sign along the road (m)")
    axes[-1, 0].invert_xaxis()
    dr = outcome.drive
    fig.suptitle(f"drive {outcome.index}: {dr.speed_kmh:.3g} km/h, {dr.light}, {dr.effects}, lane offset "
                 f"{dr.lane_offset_m:.3g} m, background {dr.background}", fontsize=10)
    fig.tight_layout()
    return fig


def _draw_frame(img: np.ndarray, scale: float, r: Readings, i: int, stack, outcome: DriveOutcome, name: str,
                settings: DriveSettings) -> np.ndarray:
    """One video frame (H×W×3 uint8 RGB) with the stack's search region, its detections and the verdict so far."""
    img = np.ascontiguousarray(img)
    px = lambda box: tuple(int(round(float(v) * scale)) for v in box)  # noqa: E731
    x0, y0, x1, y1 = px(stack.region)
    cv2.rectangle(img, (x0, y0), (x1, y1), GREY, 1)
    det_labels = stack.tiled.detector.labels
    thr = stack.tiled.detector.score_threshold
    if r.detections:
        shown = r.detections[i].above(thr)
        for box, score, lab in zip(shown.boxes, shown.scores.tolist(), shown.labels.tolist()):
            a, b, c, e = px(box)
            cv2.rectangle(img, (a, b), (c, e), ORANGE, 1)
            cv2.putText(img, f"{det_labels[lab][:12]} {score:.2f}", (a, max(10, b - 3)), cv2.FONT_HERSHEY_SIMPLEX,
                        0.35, ORANGE, 1, cv2.LINE_AA)
    if r.label[i] >= 0:
        colour = GREEN if r.correct[i] else RED
        a, b, c, e = px(r.box[i])
        cv2.rectangle(img, (a, b), (c, e), colour, 2)
        text = f"{stack.labels[int(r.label[i])]} {float(r.score[i]):.2f}"
        cv2.putText(img, text, (a, e + 14), cv2.FONT_HERSHEY_SIMPLEX, 0.45, colour, 1, cv2.LINE_AA)
    dist = float(outcome.frames.distance_m[i])
    rec = outcome.recognised[name]
    if rec is not None and rec <= i:
        at = outcome.recognised_at_m(name)
        status, colour = ((f"recognised at {at:.1f} m: STOPS", GREEN) if outcome.stops(name)
                          else (f"recognised at {at:.1f} m: too late, RUNS THE SIGN", RED))
    elif dist < outcome.braking_m:
        status, colour = "not recognised before the braking point: RUNS THE SIGN", RED
    else:
        status, colour = "not recognised yet", (255, 255, 255)
    lines = [(f"{name} | {outcome.drive.speed_kmh:g} km/h | sign {dist:.1f} m ahead | braking point "
              f"{outcome.braking_m:.1f} m", (255, 255, 255)), (status, colour)]
    band = img[:8 + 18 * len(lines)]
    band[:] = (band * 0.45).astype(np.uint8)                       # a dark band keeps the text readable
    for j, (text, col) in enumerate(lines):
        cv2.putText(img, text, (8, 18 + 18 * j), cv2.FONT_HERSHEY_SIMPLEX, 0.5, col, 1, cv2.LINE_AA)
    return img


def write_video(path, outcome: DriveOutcome, judging: Judging):
    """The drive as a video: each texture's frames (re-rendered at ``video_scale`` of the sensor, the
    stack's readings of the judged frames drawn on them), stacked top to bottom. MP4 (``mp4v``);
    Motion-JPEG AVI where this OpenCV cannot write MP4. Returns the path written."""
    from pathlib import Path

    from physattack.atomic import save_with

    renderer, settings, textures, chunk = judging.renderer, judging.settings, judging.textures, judging.chunk
    small = renderer.scaled(settings.video_scale)
    scale = small.dashcam.width_px / renderer.dashcam.width_px
    w, h = small.dashcam.width_px, small.dashcam.height_px
    path = Path(path)
    fourcc, out = "mp4v", path.with_suffix(".mp4")
    probe = cv2.VideoWriter(str(path.with_name(f".probe-{path.stem}.mp4")), cv2.VideoWriter_fourcc(*fourcc), 1, (w, h))
    if not probe.isOpened():
        fourcc, out = "MJPG", path.with_suffix(".avi")
    probe.release()
    path.with_name(f".probe-{path.stem}.mp4").unlink(missing_ok=True)

    def write(tmp: Path) -> None:
        writer = cv2.VideoWriter(str(tmp), cv2.VideoWriter_fourcc(*fourcc), float(outcome.drive.fps),
                                 (w, h * len(textures)))
        if not writer.isOpened():
            raise OSError(f"OpenCV could not open a video writer for {out} (fourcc {fourcc}).")
        try:
            for start in range(0, outcome.judged, chunk):
                sub = outcome.frames[start:min(outcome.judged, start + chunk)]
                rows = []
                for name, texture in textures.items():
                    images = judging.images(small.render(judging.scene, texture.detach(), sub))
                    u8 = (images.clamp(0, 1).permute(0, 2, 3, 1).cpu().numpy() * 255).round().astype(np.uint8)
                    rows.append([_draw_frame(u8[j], scale, outcome.readings[name], start + j, judging.stack, outcome,
                                             name, settings) for j in range(len(sub))])
                for frame in zip(*rows):
                    writer.write(cv2.cvtColor(np.concatenate(frame, 0), cv2.COLOR_RGB2BGR))
        finally:
            writer.release()
    return save_with(out, write)


