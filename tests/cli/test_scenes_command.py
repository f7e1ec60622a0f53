"""``python -m physattack.scene.generate``: writes every scene folder, and never over one without asking."""

from __future__ import annotations

from commands import call, one_sentence, tree_digest

from physattack.cli.scenes import main as generate_main
from physattack.scene.scene import bundled_scenes_dir


def test_generate_writes_the_bundled_scenes_and_refuses_to_replace_them(tmp_path, capsys):
    assert call(generate_main, [f"out={tmp_path}"]) == 0
    stop = tmp_path / "stop_sign"
    for name in ("sign.obj", "sign.mtl", "texture.png", "face_mask.png", "scene.yaml"):
        assert (stop / name).is_file()
    assert (stop / "sign.obj").read_bytes() == (bundled_scenes_dir() / "stop_sign" / "sign.obj").read_bytes()
    (stop / "texture.png").write_bytes(b"the user's own texture")
    before = tree_digest(tmp_path)
    assert call(generate_main, [f"out={tmp_path}"]) == 2
    assert "overwrite=true" in one_sentence(capsys)
    assert tree_digest(tmp_path) == before
