"""Reading the user's images (physattack/imageio.py): 8-bit RGB out, one sentence for a bad file."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from PIL import Image

from physattack.errors import InputError
from physattack.imageio import read_grey, read_rgb, read_rgba


class PartError(InputError):
    """A part's own InputError subclass."""


def _jpeg(path, size=(48, 64)) -> np.ndarray:
    rng = np.random.default_rng(0)
    rgb = cv2.GaussianBlur((rng.random((*size, 3)) * 255).astype(np.uint8), (5, 5), 2)
    cv2.imwrite(str(path), cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, 95])
    return rgb


def test_a_jpeg_reads_as_opencv_decodes_it(tmp_path):
    _jpeg(tmp_path / "a.jpg")
    opencv = cv2.cvtColor(cv2.imread(str(tmp_path / "a.jpg")), cv2.COLOR_BGR2RGB)
    got = read_rgb(tmp_path / "a.jpg")
    assert got.dtype == np.uint8 and got.shape == (48, 64, 3)
    np.testing.assert_array_equal(got, opencv)


def test_a_truncated_jpeg_is_refused_naming_the_file(tmp_path):
    _jpeg(tmp_path / "a.jpg")
    data = (tmp_path / "a.jpg").read_bytes()
    (tmp_path / "cut.jpg").write_bytes(data[:len(data) // 2])
    assert cv2.imread(str(tmp_path / "cut.jpg")) is not None          # OpenCV alone would score it
    with pytest.raises(PartError) as err:
        read_rgb(tmp_path / "cut.jpg", "photo", error=PartError)
    message = str(err.value)
    assert "cut.jpg" in message and "truncated" in message and message.startswith("The photo ")


def test_a_truncated_png_and_random_bytes_are_refused(tmp_path):
    cv2.imwrite(str(tmp_path / "a.png"), np.arange(64 * 64 * 3, dtype=np.uint8).reshape(64, 64, 3))
    data = (tmp_path / "a.png").read_bytes()
    (tmp_path / "cut.png").write_bytes(data[:len(data) // 2])
    (tmp_path / "noise.png").write_bytes(np.random.default_rng(1).bytes(500))
    with pytest.raises(InputError, match="cut.png is truncated"):
        read_rgb(tmp_path / "cut.png")
    with pytest.raises(InputError, match=r"noise.png is not an image"):
        read_rgb(tmp_path / "noise.png")
    with pytest.raises(InputError, match=r"There is no texture at .*absent.png"):
        read_rgb(tmp_path / "absent.png", "texture")


def test_grey_and_16_bit_images_become_8_bit_rgb(tmp_path):
    grey = np.tile(np.arange(0, 256, 16, dtype=np.uint8), (4, 1))
    cv2.imwrite(str(tmp_path / "g.png"), grey)
    cv2.imwrite(str(tmp_path / "g16.png"), grey.astype(np.uint16) * 257)
    colour16 = np.zeros((4, 16, 3), np.uint16)
    colour16[..., 2] = grey.astype(np.uint16) * 257                      # red in OpenCV's BGR
    cv2.imwrite(str(tmp_path / "c16.png"), colour16)
    for name in ("g.png", "g16.png"):
        got = read_rgb(tmp_path / name)
        assert got.dtype == np.uint8 and got.shape == (4, 16, 3)
        np.testing.assert_array_equal(got, np.repeat(grey[..., None], 3, 2))
    red = read_rgb(tmp_path / "c16.png")
    assert red.dtype == np.uint8
    np.testing.assert_array_equal(red[..., 0], grey)
    assert not red[..., 1:].any()
    np.testing.assert_array_equal(read_grey(tmp_path / "g16.png"), grey)


def test_opaque_alpha_is_dropped_and_transparency_refused_or_composited(tmp_path):
    rgba = np.zeros((4, 4, 4), np.uint8)
    rgba[..., 0], rgba[..., 3] = 200, 255
    Image.fromarray(rgba).save(tmp_path / "opaque.png")
    np.testing.assert_array_equal(read_rgb(tmp_path / "opaque.png")[0, 0], [200, 0, 0])
    rgba[0, 0, 3] = 0
    Image.fromarray(rgba).save(tmp_path / "hole.png")
    with pytest.raises(InputError, match=r"texture .*hole.png has transparent pixels"):
        read_rgb(tmp_path / "hole.png", "texture")
    white = read_rgb(tmp_path / "hole.png", alpha="composite_white")
    np.testing.assert_array_equal(white[0, 0], [255, 255, 255])
    np.testing.assert_array_equal(white[1, 1], [200, 0, 0])
    assert read_rgba(tmp_path / "hole.png")[0, 0, 3] == 0
    assert read_rgba(tmp_path / "opaque.png").shape == (4, 4, 4)
    _jpeg(tmp_path / "a.jpg")
    assert (read_rgba(tmp_path / "a.jpg")[..., 3] == 255).all()


def test_exif_orientation_is_applied_as_opencv_does(tmp_path):
    rgb = np.zeros((20, 40, 3), np.uint8)
    rgb[:, :20] = (250, 0, 0)
    exif = Image.Exif()
    exif[0x0112] = 6                                                   # rotate 90° clockwise to view
    Image.fromarray(rgb).save(tmp_path / "rot.jpg", exif=exif, quality=95)
    opencv = cv2.cvtColor(cv2.imread(str(tmp_path / "rot.jpg")), cv2.COLOR_BGR2RGB)
    got = read_rgb(tmp_path / "rot.jpg")
    assert got.shape == opencv.shape == (40, 20, 3)
    assert np.abs(got.astype(int) - opencv).max() <= 2


def test_every_user_image_reader_refuses_a_truncated_file_with_its_parts_error(tmp_path):
    from physattack.eot import BackgroundBank
    from physattack.cli.photos import PhotoError, read_photo
    from physattack.patch import PatchError, mask_from_png
    from physattack.printing.calibrate import CalibrationError, fit_photo
    from physattack.printing.export import ExportError, read_png_rgba

    _jpeg(tmp_path / "a.jpg")
    data = (tmp_path / "a.jpg").read_bytes()
    cut = tmp_path / "cut" / "cut.png"
    cut.parent.mkdir()
    cut.write_bytes(data[:len(data) // 2])                      # a JPEG cut short, whatever its name
    for call, error in ((lambda: mask_from_png(cut, (16, 16)), PatchError),
                        (lambda: fit_photo(cut, None), CalibrationError),
                        (lambda: read_png_rgba(cut), ExportError),
                        (lambda: read_photo(cut), PhotoError),
                        (lambda: BackgroundBank(count=0, folder=cut.parent), InputError)):
        with pytest.raises(error, match=r"cut\.png is truncated"):
            call()
