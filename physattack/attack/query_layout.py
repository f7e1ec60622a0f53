"""Moving the stickers by queries: where they sit, not only their colours (``attack.query.layout_every``).

A sticker patch found by the mask search (``patch.shape=search``) is a set of whole square cells of the sticker
grid, each entirely on the face. A layout step is a (1+λ) random search over that set, in the spirit of Square
Attack (Andriushchenko et al., ECCV 2020) but over placements: each child moves ``layout_cells`` cells, each to a
free cell of the face next to the stickers (its eight neighbours), carrying its colours with it, so the number of
cells, and the area, never change. The best child on the step's views replaces the patch when it is strictly better
(ties keep the stickers where they are: a move is a new print). Nothing here differentiates anything.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from physattack.attack.loop import AttackError


class StickerLayout:
    """The cells of ``cell_px`` texels (a grid from the texture's corner, as the mask search lays it) that the
    stickers cover, and those free cells of the face a sticker may move to."""

    def __init__(self, mask: Tensor, face_mask: Tensor, cell_px: int):
        c = int(cell_px)
        h, w = mask.shape[-2:]
        self.cell_px, self.rows, self.cols, self.size = c, h // c, w // c, (h, w)
        crop = (slice(None), slice(0, self.rows * c), slice(0, self.cols * c))
        self.on = F.avg_pool2d((mask > 0.5).float()[crop][None], c)[0, 0] > 0.5
        self.face = F.avg_pool2d((face_mask > 0.5).float()[crop][None], c)[0, 0] > 0.999
        if not torch.equal(self.texels(self.on), (mask > 0.5).float()):
            raise AttackError(f"attack.query.layout_every moves whole sticker cells of {c} texels, but this patch's "
                              "mask is not made of them (bars or a PNG mask); set attack.query.layout_every=0, or "
                              "start from a patch.shape=search run.")

    def texels(self, on: Tensor) -> Tensor:
        """1×H×W: the texels of the cells ``on`` (rows×cols)."""
        grid = on.float().repeat_interleave(self.cell_px, 0).repeat_interleave(self.cell_px, 1)
        return F.pad(grid, (0, self.size[1] - grid.shape[1], 0, self.size[0] - grid.shape[0]))[None]

    def free(self, on: Tensor) -> Tensor:
        """rows×cols: free cells of the face next to a sticker (one of its eight neighbours)."""
        near = F.max_pool2d(on.float()[None, None], 3, stride=1, padding=1)[0, 0] > 0
        return near & self.face & ~on

    def propose(self, cells: int, generator: torch.Generator) -> list[tuple[int, int]] | None:
        """Up to ``cells`` (source, destination) moves, as flat cell indices; None when no cell can move."""
        on, moves = self.on.clone(), []
        for _ in range(cells):
            sources, free = on.flatten().nonzero()[:, 0], self.free(on).flatten().nonzero()[:, 0]
            if len(sources) == 0 or len(free) == 0:
                break
            src = int(sources[torch.randint(len(sources), (1,), generator=generator)])
            dst = int(free[torch.randint(len(free), (1,), generator=generator)])
            on.view(-1)[src], on.view(-1)[dst] = False, True
            moves.append((src, dst))
        return moves or None

    def move(self, colours: Tensor, moves: list[tuple[int, int]]) -> tuple[Tensor, Tensor, Tensor]:
        """(cells on, 1×H×W mask, 3×H×W colours) after ``moves``: each destination takes its source's colours."""
        on, out, c = self.on.clone(), colours.clone(), self.cell_px
        for src, dst in moves:
            (sy, sx), (dy, dx) = divmod(src, self.cols), divmod(dst, self.cols)
            out[:, dy * c:(dy + 1) * c, dx * c:(dx + 1) * c] = out[:, sy * c:(sy + 1) * c, sx * c:(sx + 1) * c]
            on[sy, sx], on[dy, dx] = False, True
        mask = self.texels(on)
        return on, mask, out * mask


def layout_step(run) -> dict | None:
    """One (1+λ) search step over the stickers' places for a ``QueryRun``: ``samples`` children, each moving
    ``layout_cells`` cells, judged with the parent on the step's views; the best strictly better child is taken."""
    draw, _ = run.draw()
    if not run.affords(draw):
        return None
    st, blocks = run.settings, run.blocks
    parent_loss, parent_win = run.ask(run.offset.detach(), draw)
    colours = blocks.free_colors(run.offset.detach())
    best = (parent_loss, parent_win, None)
    for _ in range(st.samples):
        moves = run.layout.propose(st.layout_cells, run.generator)
        if moves is None:
            break
        on, mask, moved = run.layout.move(colours, moves)
        child = type(blocks)(moved, mask, blocks.cell_px, blocks.palette)      # the run's colour blocks, moved
        loss, win = run.ask(torch.zeros(child.blocks, 3), draw, child)
        if loss < best[0]:
            best = (loss, win, (child, on, len(moves)))
    run.moved["steps"] += 1
    if best[2] is not None and st.layout_confirm and not confirmed(run, best[2][0]):
        run.moved["refused"] += 1
        best = (parent_loss, parent_win, None)
    if best[2] is not None:
        child, run.layout.on, cells = best[2]
        run.adopt(child)
        run.moved["taken"] += 1
        run.moved["moved"] += cells
    return {"loss": best[0], "batch_success": best[1], "parent_success": parent_win,
            "accepted": int(best[2] is not None), "layout": 1}


def confirmed(run, child) -> bool:
    """Whether ``child`` (a moved layout) also beats the run's patch on a second, fresh draw of the same step
    (``layout_confirm``): both asked, both counted; a draw the budget cannot answer confirms nothing."""
    draw, _ = run.draw(refit=False)
    if not run.victim.can_answer(2 * len(draw.params) + run.reserve):
        return False
    parent_loss, _ = run.ask(run.offset.detach(), draw)
    child_loss, _ = run.ask(torch.zeros(child.blocks, 3), draw, child)
    return child_loss < parent_loss


__all__ = ["StickerLayout", "layout_step"]
