"""Write the bundled sign scenes: ``python -m physattack.scene.generate [--out DIR]``.

Each sign gets ``DIR/<name>/`` with ``sign.obj``, ``sign.mtl``, ``texture.png``, ``face_mask.png``
and ``scene.yaml``. The output is deterministic, so regenerating leaves the bundled files unchanged.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from physattack.atomic import save_rgb_png, save_text
from physattack.scene.mesh import save_obj
from physattack.scene.boards import write_board_scene
from physattack.scene.scene import bundled_scenes_dir
from physattack.scene.signs import SIGNS, SignDesign, build_mesh, draw_texture, save_mask_png


def write_sign_scene(design: SignDesign, out: Path) -> Path:
    folder = out / design.name
    folder.mkdir(parents=True, exist_ok=True)
    texture, mask, size_m = draw_texture(design)
    save_rgb_png(folder / "texture.png", texture)
    save_mask_png(folder / "face_mask.png", mask)
    save_obj(build_mesh(design), folder / "sign.obj")
    desc = {
        "name": design.name,
        "class_name": design.class_name,
        "description": design.description,
        "mesh": "sign.obj",
        "face_mask": "face_mask.png",
        "texture_size_m": [round(size_m[0], 6), round(size_m[1], 6)],
        "mount_height_m": 2.1,
        "support_materials": ["post"],
    }
    save_text(folder / "scene.yaml", yaml.safe_dump(desc, sort_keys=False))
    return folder


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=bundled_scenes_dir(), help="folder to write scenes into")
    args = parser.parse_args(argv)
    for design in SIGNS.values():
        print(f"wrote {write_sign_scene(design, args.out)}")
    print(f"wrote {write_board_scene(args.out)}")


if __name__ == "__main__":
    main()
