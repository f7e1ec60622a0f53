"""The canonical command, timed and judged: ``python -m physattack +scene=stop_sign attack=yield``.

    OMP_WAIT_POLICY=PASSIVE python benchmarks/canonical_attack.py [--drives] [extra overrides...]

Runs the command exactly as the README gives it (plus any overrides passed here) in a fresh
subprocess, then prints wall time, held-out targeted success (RP2: over clean-correct views),
clean accuracy on the same grid, the sticker area and the quick drives' verdict, against issue 26's goals:
≤ 6 min wall, ≥ 90 % success per view, ≥ 95 % clean accuracy, ≤ 20 % of the face. ``--drives`` then judges
the run on the 18 held-out drives (``python -m physattack.drive run_dir=<run>``, ~3.5 min) against its goal:
the car runs the sign in ≥ 90 % of the drives it stops in clean, and in ≥ 5 of 6 at each speed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from physattack.evaluate.protocol import heldout_line


def main() -> None:
    extra = [a for a in sys.argv[1:] if a != "--drives"]
    drives = "--drives" in sys.argv[1:]
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "physattack", "+scene=stop_sign", "attack=yield", *extra,
               f"hydra.run.dir={run_dir}"]
        t = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - t
        if proc.returncode != 0:
            print(proc.stderr[-4000:])
            raise SystemExit(f"the canonical command failed (exit {proc.returncode})")
        m = json.loads((run_dir / "metrics.json").read_text())
        full = judge_drives(run_dir) if drives else None
    asr, clean = m["attack_success_rate"], m["clean_accuracy"]
    quick = (m.get("drive") or {}).get("attack_success_rate")
    rows = [
        ("wall time (s)", wall, wall <= 360, "<= 360"),
        ("held-out targeted success", asr["rate"], asr["rate"] >= 0.90, ">= 0.90"),
        *([(f"the same, {m['heldout']['views']}-view protocol", m["heldout"]["attack_success_rate"]["rate"],
            m["heldout"]["attack_success_rate"]["rate"] >= 0.90, ">= 0.90")] if m.get("heldout") else []),
        ("clean accuracy on the grid", clean["rate"], clean["rate"] >= 0.95, ">= 0.95"),
        ("sticker area / face", m["patch_area_fraction"], m["patch_area_fraction"] <= 0.20, "<= 0.20"),
        *([(f"quick drives run ({quick['count']}/{quick['n']})", quick["rate"], quick["rate"] >= 0.90, ">= 0.90")]
          if quick and quick["n"] else []),
    ]
    if full is not None:
        s = full["attack_success_rate"]
        rows.append((f"18 drives run ({s['count']}/{s['n']})", s["rate"], s["rate"] >= 0.90, ">= 0.90"))
        for speed, block in full["by_speed"].items():
            b = block["attack_success_rate"]
            rows.append((f"  at {speed} km/h ({b['count']}/{b['n']})", b["rate"], b["count"] * 6 >= 5 * b["n"],
                         ">= 5/6"))
    print(" ".join(cmd[1:-1]))
    print(f"steps {m['steps_done']} x batch {m['batch_size']}, attack {m['attack_seconds']} s, "
          f"grid {clean['n']} views, best step {m['best_step']}")
    for name, value, ok, goal in rows:
        print(f"{name:28s} {value:8.3f}   goal {goal:8s} {'PASS' if ok else 'FAIL'}")
    print(f"success 95% CI [{asr['ci95'][0]:.3f}, {asr['ci95'][1]:.3f}] over {asr['n']} clean-correct views; "
          f"unconditional {m['attack_success_rate_unconditional']['rate']:.3f}; "
          f"mean yield confidence {m['mean_target_confidence']:.3f}")
    if m.get("heldout"):
        print(heldout_line(m["heldout"], m.get("victim_names")))
    if m.get("headline"):
        print(m["headline"])


def judge_drives(run_dir: Path) -> dict:
    """The run judged on the full held-out drive set; its ``drive.json``."""
    out = run_dir / "drive-full"
    proc = subprocess.run([sys.executable, "-m", "physattack.drive", f"run_dir={run_dir}", f"hydra.run.dir={out}"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        print(proc.stderr[-4000:])
        raise SystemExit(f"the drive report failed (exit {proc.returncode})")
    print(proc.stdout.strip().splitlines()[-1])
    return json.loads((out / "drive.json").read_text())


if __name__ == "__main__":
    main()
