"""Pictures of an evaluation: success heatmaps, a gallery of clean vs attacked views, training curves."""

from __future__ import annotations

import cv2
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from torch import Tensor  # noqa: E402


def success_heatmap(conditions: list[dict], success: Tensor, valid: Tensor, title: str):
    """Success over azimuth × distance (averaged over the other conditions), one panel per lighting
    preset plus the total; cells with no valid (clean-correct) view are grey."""
    az = sorted({c["azimuth_deg"] for c in conditions})
    dist = sorted({c["distance_m"] for c in conditions})
    lights = sorted({c["lighting"] for c in conditions})
    panels = lights + ["all lighting"]
    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels) + 1, 3.2), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        hits = np.zeros((len(dist), len(az)))
        counts = np.zeros((len(dist), len(az)))
        for c, s, v in zip(conditions, success.tolist(), valid.tolist()):
            if panel != "all lighting" and c["lighting"] != panel:
                continue
            i, j = dist.index(c["distance_m"]), az.index(c["azimuth_deg"])
            counts[i, j] += v
            hits[i, j] += s * v
        grid = np.where(counts > 0, hits / np.maximum(counts, 1), np.nan)
        cmap = matplotlib.colormaps["viridis"].with_extremes(bad="lightgrey")
        im = ax.imshow(grid, vmin=0, vmax=1, cmap=cmap, origin="lower", aspect="auto")
        ax.set_xticks(range(len(az)), [f"{a:g}" for a in az], fontsize=7, rotation=45)
        ax.set_yticks(range(len(dist)), [f"{d:g}" for d in dist], fontsize=7)
        ax.set_xlabel("azimuth (deg)")
        ax.set_title(panel, fontsize=9)
    axes[0][0].set_ylabel("distance (m)")
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8, label="success")
    fig.suptitle(title, fontsize=10)
    return fig


def training_curves(history: list[dict]):
    fig, ax = plt.subplots(1, 2, figsize=(9, 3))
    steps = [h["step"] for h in history]
    ax[0].plot(steps, [h["loss"] for h in history], label="total")
    ax[0].plot(steps, [h["adv_loss"] for h in history], label="objective")
    ax[0].set_xlabel("step")
    ax[0].set_ylabel("loss")
    ax[0].legend()
    ax[1].plot(steps, [h["batch_success"] for h in history], alpha=0.3, label="batch")
    ax[1].plot(steps, [h["running_success"] for h in history], label="running")
    ax[1].set_xlabel("step")
    ax[1].set_ylabel("success on training draws")
    ax[1].set_ylim(0, 1)
    ax[1].legend()
    fig.tight_layout()
    return fig


def _to_uint8(img: Tensor) -> np.ndarray:
    return (img.clamp(0, 1).permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)


def views_gallery(clean: Tensor, attacked: Tensor, clean_labels: list[str], attacked_labels: list[str],
                  scale: int = 2, columns: int = 8) -> np.ndarray:
    """Pairs of views (clean above, attacked below) with each one's predicted label; H×W×3 uint8 RGB."""
    tiles = []
    for img_c, img_a, lab_c, lab_a in zip(clean, attacked, clean_labels, attacked_labels):
        pair = []
        for img, lab, colour in ((img_c, lab_c, (255, 255, 255)), (img_a, lab_a, (255, 230, 60))):
            t = cv2.resize(_to_uint8(img), None, fx=scale, fy=scale, interpolation=cv2.INTER_NEAREST)
            t = cv2.copyMakeBorder(t, 0, 18, 0, 0, cv2.BORDER_CONSTANT, value=(20, 20, 20))
            cv2.putText(t, lab[:22], (3, t.shape[0] - 5), cv2.FONT_HERSHEY_SIMPLEX, 0.38, colour, 1, cv2.LINE_AA)
            pair.append(t)
        tiles.append(cv2.copyMakeBorder(np.concatenate(pair, 0), 2, 2, 2, 2, cv2.BORDER_CONSTANT, value=(0, 0, 0)))
    while len(tiles) % columns:
        tiles.append(np.zeros_like(tiles[0]))
    rows = [np.concatenate(tiles[i:i + columns], 1) for i in range(0, len(tiles), columns)]
    return np.concatenate(rows, 0)



