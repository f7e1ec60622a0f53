"""Write the bundled sign scenes (the command is ``python -m physattack.scene.generate``, in
``physattack.cli.scenes``).

Each sign gets ``DIR/<name>/`` with ``sign.obj``, ``sign.mtl``, ``texture.png``, ``face_mask.png``
and ``scene.yaml``. The output is deterministic on every machine (see :mod:`physattack.scene.vector`),
so regenerating leaves the bundled scenes' texels and mesh text unchanged.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from physattack.atomic import save_png, save_rgb_png, save_text
from physattack.scene.mesh import save_obj
from physattack.scene.signs import SignDesign, build_mesh, draw_texture


def write_sign_scene(design: SignDesign, out: Path) -> Path:
    folder = out / design.name
    folder.mkdir(parents=True, exist_ok=True)
    texture, mask, size_m = draw_texture(design)
    save_rgb_png(folder / "texture.png", texture)
    save_png(folder / "face_mask.png", mask)
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


if __name__ == "__main__":          # the command lives in physattack.cli.scenes
    import sys

    from physattack.cli.scenes import main
    sys.exit(main())
