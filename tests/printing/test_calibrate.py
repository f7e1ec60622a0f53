"""Calibration (physattack/printing/calibrate.py and ``python -m physattack.calibrate``): a chart with
ArUco markers, found again in a synthetic photo, and the colour distortion it went through recovered."""

from __future__ import annotations

import json

import cv2
import numpy as np
import pytest
import torch

from pdfread import read_pdf
from physattack.cli.calibrate import main as calibrate_main
from physattack.printing import load_colour_model, load_palette
from physattack.printing.calibrate import (CalibrationError, ChartLayout, chart_layout, detect_markers, draw_chart,
                                           fit_photo, linear_to_srgb, srgb_to_linear)
from physattack.printing.export import read_png_dpi

A = np.array([[0.80, 0.08, 0.03], [0.05, 0.78, 0.06], [0.02, 0.09, 0.72]])
CAST = np.array([1.08, 1.0, 0.82])            # the photo's light and exposure: white balance removes it


def printer(lin: np.ndarray) -> np.ndarray:
    """A known printer: cross-talk, a raised black, and second-order terms, in linear RGB."""
    return lin @ A.T + np.array([0.015, 0.012, 0.02]) - 0.06 * lin ** 2 + 0.04 * lin[:, [1, 2, 0]] * lin


@pytest.fixture(scope="module")
def layout():
    return chart_layout(load_palette())


def synthetic_photo(layout, path, distort=printer, cast=CAST, cover_marker=None, seed=0):
    """The chart printed by ``distort``, lit by ``cast``, seen in perspective, with noise, as a JPEG."""
    chart = draw_chart(layout, 4.0).astype(np.float64) / 255
    h, w = chart.shape[:2]
    img = linear_to_srgb(distort(srgb_to_linear(chart.reshape(-1, 3))) * cast).reshape(h, w, 3) * 255
    src = np.float32([[0, 0], [w, 0], [w, h], [0, h]])
    dst = np.float32([[180, 140], [1480, 90], [1540, 1100], [120, 1010]])
    photo = cv2.warpPerspective(img.astype(np.float32), cv2.getPerspectiveTransform(src, dst), (1660, 1200),
                                flags=cv2.INTER_LINEAR, borderValue=(60, 70, 50))
    photo += np.random.default_rng(seed).normal(0, 2.0, photo.shape)
    if cover_marker is not None:
        (x0, y0), (x1, y1) = np.array(layout.markers[cover_marker])[[0, 2]] * 4
        corners = cv2.perspectiveTransform(np.float32([[[x0, y0], [x1, y0], [x1, y1], [x0, y1]]]),
                                           cv2.getPerspectiveTransform(src, dst))
        cv2.fillConvexPoly(photo, corners.astype(np.int32)[0], (128, 128, 128))
    photo = np.clip(photo, 0, 255).round().astype(np.uint8)
    cv2.imwrite(str(path), cv2.cvtColor(photo, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, 92])
    return path


def test_fit_recovers_a_known_distortion_within_2_of_255(layout, tmp_path):
    photo = synthetic_photo(layout, tmp_path / "photo.jpg")
    model, reading, stats = fit_photo(photo, layout, degree=2)
    assert len(reading.measured) == len(layout.patches) >= 150
    # What the attack should see: the print relative to the paper, whose white is the palette's.
    pal = np.asarray(layout.palette, float) / 255
    paper = pal[pal.sum(1).argmax()]
    g = np.linspace(0, 1, 9)
    x = np.stack(np.meshgrid(g, g, g, indexing="ij"), -1).reshape(-1, 3)
    expected = linear_to_srgb(printer(srgb_to_linear(x)) * srgb_to_linear(paper[None])[0] / printer(np.ones((1, 3)))[0])
    with torch.no_grad():
        got = model.print_colours(torch.tensor(x.T[..., None], dtype=torch.float32))[..., 0].numpy().T
    error = np.abs(got - expected).mean(0) * 255
    assert (error < 2.0).all(), error
    # the distortion was real: the identity would be far off
    assert (np.abs(x - expected).mean(0) * 255 > 10).any()
    assert stats["residual_mean_abs_255"] < [2, 2, 2]


def test_an_undistorted_chart_fits_the_identity(layout, tmp_path):
    photo = synthetic_photo(layout, tmp_path / "flat.jpg", distort=lambda lin: lin, cast=np.ones(3))
    model, _, _ = fit_photo(photo, layout, degree=1, white_balance=False)
    coeffs = model.printer.numpy()
    assert np.abs(coeffs[:, 1:] - np.eye(3)).max() < 0.03 and np.abs(coeffs[:, 0]).max() < 0.01


def test_a_hidden_marker_is_named(layout, tmp_path):
    photo = synthetic_photo(layout, tmp_path / "hidden.jpg", cover_marker=2)
    bgr = cv2.imread(str(photo))
    assert sorted(detect_markers(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))) == [0, 1, 3]
    with pytest.raises(CalibrationError, match=r"not \[2\]"):
        fit_photo(photo, layout)


def test_chart_and_fit_commands(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert calibrate_main(["chart"]) == 0
    assert calibrate_main(["chart", "paper=letter", "dpi=100"]) == 0          # a new name, never a clobber
    assert {p.name for p in tmp_path.iterdir()} >= {"calibration_chart.pdf", "calibration_chart-2.pdf",
                                                     "calibration_chart.png", "calibration_chart.json"}
    (page,) = read_pdf(tmp_path / "calibration_chart.pdf")
    assert page.size_mm == pytest.approx((297.0, 210.0), abs=0.01)            # A4 landscape, true scale
    assert read_png_dpi(tmp_path / "calibration_chart-2.png") == pytest.approx((100, 100), abs=0.01)
    layout = ChartLayout.load(tmp_path / "calibration_chart.json")
    assert layout.fingerprint() == chart_layout(load_palette()).fingerprint()
    synthetic_photo(layout, tmp_path / "p.jpg")
    assert calibrate_main(["fit", "p.jpg", "layout=calibration_chart.json"]) == 0
    model = load_colour_model(tmp_path / "p.colour_model.json")            # usable as printer.model=
    assert model.degree == 2 and json.loads((tmp_path / "p.colour_model.json").read_text())["fit"]["patches"] > 150
    assert (tmp_path / "p.colour_model.rectified.png").is_file()
    capsys.readouterr()
    assert calibrate_main(["fit", "p.jpg", "out=p.colour_model.json"]) == 2   # a named output is not replaced
    assert "overwrite=true" in capsys.readouterr().err
    assert calibrate_main(["fit", "p.jpg", "degree=7"]) == 2
    assert "degree" in capsys.readouterr().err
    assert calibrate_main(["fit", "missing.jpg"]) == 2
    assert "missing.jpg" in capsys.readouterr().err
    assert calibrate_main([]) == 2
