"""Printed boards: an A4 card on a stand whose frame is a patch and whose window shows a task input.

The reprogramming scene (Elsayed et al. 2018, made physical): the frame around the window is the
"program" an attacker prints; the window holds whatever the task shows (a digit), changed per view.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import yaml

from physattack.atomic import save_png, save_rgb_png, save_text
from physattack.scene.mesh import save_obj
from physattack.scene.signs import SignDesign, _rect, build_mesh
from physattack.scene.vector import paint, polyline

A4_M = (0.210, 0.297)
WINDOW_M = 0.11                         # side of the square window, centred on the card
TEXTURE_LONG_SIDE_PX = 256              # ~3 texels a pixel of a 96 px view; one texture a view stays cheap


def _draw_board(img, px, scale):
    """White card; a thin grey line marks the window's edge (where the input is printed or glued).

    ``px`` gives whole texels here (the window's cut in the face mask falls on texel edges): the line
    runs through the centres of the texels at the window's corners.
    """
    img[:] = (242, 242, 238)
    h = WINDOW_M / 2
    corners = [px(-h, h), px(h, h), px(h, -h), px(-h, -h)]
    paint(img, polyline([(x + 0.5, y + 0.5) for x, y in corners], max(1, int(0.002 * scale)), closed=True),
          (150, 150, 150))


BOARD = SignDesign("reprogram_board", "board", _rect(*A4_M), _draw_board,
                   "A4 card (210x297 mm) on a stand: a printed frame (the program) around a 110 mm window")


def write_board_scene(out: Path, mount_height_m: float = 1.3) -> Path:
    folder = out / BOARD.name
    folder.mkdir(parents=True, exist_ok=True)
    w_m, h_m = A4_M
    scale = TEXTURE_LONG_SIDE_PX / max(w_m, h_m)
    w_px, h_px = int(round(w_m * scale)), int(round(h_m * scale))

    def px(x, y):
        return int(round((x + w_m / 2) * scale)), int(round((h_m / 2 - y) * scale))

    img = np.zeros((h_px, w_px, 3), np.uint8)
    BOARD.draw(img, px, scale)
    x0, y0 = px(-WINDOW_M / 2, WINDOW_M / 2)
    x1, y1 = px(WINDOW_M / 2, -WINDOW_M / 2)
    mask = np.full((h_px, w_px), 255, np.uint8)
    margin = max(1, int(0.004 * scale))          # keep the program off the window's cut line
    mask[y0 - margin:y1 + margin, x0 - margin:x1 + margin] = 0
    save_rgb_png(folder / "texture.png", img)
    save_png(folder / "face_mask.png", mask)
    save_obj(build_mesh(BOARD, thickness_m=0.003, mount_height_m=mount_height_m, post_width_m=0.03),
             folder / "sign.obj")
    desc = {
        "name": BOARD.name, "class_name": BOARD.class_name, "description": BOARD.description,
        "mesh": "sign.obj", "face_mask": "face_mask.png",
        "texture_size_m": [w_m, h_m], "mount_height_m": mount_height_m, "support_materials": ["post"],
        "regions": {"window": [round(x0 / w_px, 6), round(y0 / h_px, 6), round(x1 / w_px, 6), round(y1 / h_px, 6)]},
    }
    save_text(folder / "scene.yaml", yaml.safe_dump(desc, sort_keys=False))
    return folder
