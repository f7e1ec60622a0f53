"""A tiny PDF reader for tests: pages, their MediaBox, and where each image is drawn.

It reads what matplotlib's PDF backend writes (uncompressed object table, Flate content streams),
independently of the code that wrote it, so a test can measure a page in points as a printer would.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

PT_PER_MM = 72 / 25.4
_OBJ = re.compile(rb"(\d+) 0 obj\s*(.*?)\s*endobj", re.S)


@dataclass
class DrawnImage:
    name: str
    width_px: int
    height_px: int
    ctm: tuple[float, float, float, float, float, float]     # the image's unit square -> page points

    @property
    def size_pt(self) -> tuple[float, float]:
        a, b, c, d, _, _ = self.ctm
        return float(np.hypot(a, b)), float(np.hypot(c, d))

    @property
    def origin_pt(self) -> tuple[float, float]:
        return self.ctm[4], self.ctm[5]


@dataclass
class Page:
    media_box: tuple[float, float, float, float]
    content: bytes
    images: list[DrawnImage]
    texts: list[str]

    @property
    def size_mm(self) -> tuple[float, float]:
        x0, y0, x1, y1 = self.media_box
        return (x1 - x0) / PT_PER_MM, (y1 - y0) / PT_PER_MM


def _objects(data: bytes) -> dict[int, bytes]:
    return {int(m.group(1)): m.group(2) for m in _OBJ.finditer(data)}


def _stream(obj: bytes) -> bytes:
    raw = obj.split(b"stream", 1)[1].lstrip(b"\r\n").rsplit(b"endstream", 1)[0]
    return zlib.decompress(raw) if b"/FlateDecode" in obj.split(b"stream", 1)[0] else raw


def _mul(m, n):
    a, b, c, d, e, f = m
    A, B, C, D, E, F = n
    return (a * A + b * C, a * B + b * D, c * A + d * C, c * B + d * D, e * A + f * C + E, e * B + f * D + F)


def _walk(content: bytes, xobjects: dict[str, tuple[int, int]]) -> tuple[list[DrawnImage], list[str]]:
    ctm, stack, operands, images, texts = (1, 0, 0, 1, 0, 0), [], [], [], []
    for tok in re.findall(rb"\((?:\\.|[^\\)])*\)|/[^\s/\[\]()<>]+|[^\s/\[\]()<>]+|\[|\]", content):
        if tok == b"q":
            stack.append(ctm)
        elif tok == b"Q":
            ctm = stack.pop()
        elif tok == b"cm":
            ctm = _mul(tuple(float(x) for x in operands[-6:]), ctm)
        elif tok == b"Do":
            name = operands[-1].decode()[1:]
            w, h = xobjects[name]
            images.append(DrawnImage(name, w, h, ctm))
        elif tok == b"Tj":
            texts.append(operands[-1][1:-1].decode("latin-1"))
        if re.fullmatch(rb"[A-Za-z*'\"]+", tok) and tok not in (b"true", b"false"):
            operands = []
        else:
            operands.append(tok)
    return images, texts


def read_pdf(path: str | Path) -> list[Page]:
    data = Path(path).read_bytes()
    assert data.startswith(b"%PDF-"), f"{path} is not a PDF"
    objs = _objects(data)
    sizes = {}
    for num, obj in objs.items():
        head = obj.split(b"stream", 1)[0]
        if re.search(rb"/Subtype\s*/Image", head):
            sizes[num] = (int(re.search(rb"/Width (\d+)", head).group(1)),
                          int(re.search(rb"/Height (\d+)", head).group(1)))
    xobjects = {}
    for obj in objs.values():
        for name, ref in re.findall(rb"/(\w+) (\d+) 0 R", obj.split(b"stream", 1)[0]):
            if int(ref) in sizes:
                xobjects[name.decode()] = sizes[int(ref)]
    pages_obj = next(o for o in objs.values() if re.search(rb"/Type\s*/Pages\b", o))
    kids = [int(k) for k in re.findall(rb"(\d+) 0 R", re.search(rb"/Kids\s*\[(.*?)\]", pages_obj, re.S).group(1))]
    pages = []
    for k in kids:
        page = objs[k]
        box = tuple(float(v) for v in re.search(rb"/MediaBox\s*\[\s*([^\]]*)\]", page).group(1).split())
        content = _stream(objs[int(re.search(rb"/Contents (\d+) 0 R", page).group(1))])
        images, texts = _walk(content, xobjects)
        pages.append(Page(box, content, images, texts))
    return pages
