"""The canonical command, timed and judged: ``python -m physattack +scene=stop_sign attack=yield``.

    OMP_WAIT_POLICY=PASSIVE python benchmarks/canonical_attack.py [extra overrides...]

Runs the command exactly as the README gives it (plus any overrides passed here) in a fresh
subprocess, then prints wall time, held-out targeted success (RP2: over clean-correct views),
clean accuracy on the same grid and the sticker area, against the foundation's goals: ≤ 5 min wall,
≥ 90 % success, ≥ 95 % clean accuracy, ≤ 20 % of the face.
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
    extra = sys.argv[1:]
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
    asr, clean = m["attack_success_rate"], m["clean_accuracy"]
    rows = [
        ("wall time (s)", wall, wall <= 300, "<= 300"),
        ("held-out targeted success", asr["rate"], asr["rate"] >= 0.90, ">= 0.90"),
        *([(f"the same, {m['heldout']['views']}-view protocol", m["heldout"]["attack_success_rate"]["rate"],
            m["heldout"]["attack_success_rate"]["rate"] >= 0.90, ">= 0.90")] if m.get("heldout") else []),
        ("clean accuracy on the grid", clean["rate"], clean["rate"] >= 0.95, ">= 0.95"),
        ("sticker area / face", m["patch_area_fraction"], m["patch_area_fraction"] <= 0.20, "<= 0.20"),
    ]
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


if __name__ == "__main__":
    main()
