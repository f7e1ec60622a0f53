"""``python -m physattack.scene.generate [out=<folder>] [overwrite=false]``: draw every bundled sign
(vector artwork and the project's stroke font, rasterised exactly in integers), extrude it into a
UV-mapped plate and write its scene folder (and the reprogramming board).

The output is deterministic, whatever OpenCV, Pillow or numpy is installed: regenerating the bundled
scenes (``overwrite=true``) leaves their texels and mesh text unchanged (a PNG encoder may still
compress the same texels into other bytes). A scene folder that exists is never replaced without
``overwrite=true``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from physattack.cli.door import key_value_command, parse_options
from physattack.cli.rundir import ensure_writable
from physattack.errors import InputError

USAGE = "python -m physattack.scene.generate [out=<folder>] [overwrite=false]"


@dataclass
class GenerateCommand:
    out: str | None = None        # default: the bundled scenes/ folder
    overwrite: bool = False


@key_value_command(
    "physattack.scene.generate", "draw every bundled sign (vector artwork and the project's stroke font, "
    "rasterised exactly, so the same texels on any machine), extrude it into a UV-mapped plate and write "
    "its scene folder (sign.obj, sign.mtl, texture.png, face_mask.png, scene.yaml), and the reprogramming board.",
    [USAGE], ["out: the folder to write the scene folders into (default: the bundled scenes/)",
              "overwrite: replace scene folders that exist (default false)"])
def main(argv: list[str]) -> int:
    from physattack.scene.boards import write_board_scene
    from physattack.scene.generate import write_sign_scene
    from physattack.scene.scene import bundled_scenes_dir
    from physattack.scene.signs import SIGNS

    cmd = parse_options(GenerateCommand, argv, USAGE)
    out = Path(cmd.out).expanduser() if cmd.out else bundled_scenes_dir()
    names = [*SIGNS, "reprogram_board"]
    taken = [n for n in names if (out / n).exists()]
    if taken and not cmd.overwrite:
        raise InputError(f"{out} already holds scene folder(s) {', '.join(taken)}; choose another out= or add "
                         "overwrite=true to write over them.")
    ensure_writable(out, "out")
    for design in SIGNS.values():
        print(f"wrote {write_sign_scene(design, out)}")
    print(f"wrote {write_board_scene(out)}")
    return 0
