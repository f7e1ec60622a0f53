"""The detector attack, timed and judged: ``python -m physattack +scene=stop_sign attack=hide victim=detnet``.

    OMP_WAIT_POLICY=PASSIVE python benchmarks/detector_attack.py [extra overrides...]

Runs the command (plus any overrides passed here) in a fresh subprocess, then prints the wall time,
the held-out stop-sign detection rate clean and attacked (a detection of the stop class with IoU ≥ 0.5
and score ≥ the detector's threshold, on the held-out frame grid), the disappearance rate over
clean-detected frames, AP@0.5 clean and attacked, and the sticker area, against issue 3's goals:
≥ 95 % clean, ≤ 20 % attacked, ≤ 20 % of the face, ≤ 10 min wall on 2 CPU cores.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    extra = sys.argv[1:]
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "physattack", "+scene=stop_sign", "attack=hide", "victim=detnet", *extra,
               f"hydra.run.dir={run_dir}"]
        t = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - t
        if proc.returncode != 0:
            print(proc.stderr[-4000:])
            raise SystemExit(f"the detector attack failed (exit {proc.returncode})")
        m = json.loads((run_dir / "metrics.json").read_text())
    clean, adv, gone = m["detection_rate_clean"], m["detection_rate_attacked"], m["disappearance_rate"]
    rows = [
        ("wall time (s)", wall, wall <= 600, "<= 600"),
        ("stop detection rate, clean", clean["rate"], clean["rate"] >= 0.95, ">= 0.95"),
        ("stop detection rate, attacked", adv["rate"], adv["rate"] <= 0.20, "<= 0.20"),
        ("sticker area / face", m["patch_area_fraction"], m["patch_area_fraction"] <= 0.20, "<= 0.20"),
    ]
    print(" ".join(cmd[1:-1]))
    print(f"steps {m['steps_done']} x batch {m['batch_size']}, attack {m['attack_seconds']} s, "
          f"grid {clean['n']} held-out frames, best step {m['best_step']}, threshold {m['score_threshold']}")
    for name, value, ok, goal in rows:
        print(f"{name:30s} {value:8.3f}   goal {goal:8s} {'PASS' if ok else 'FAIL'}")
    print(f"disappearance {gone['rate']:.3f} (95% CI [{gone['ci95'][0]:.3f}, {gone['ci95'][1]:.3f}], "
          f"{gone['count']}/{gone['n']} clean-detected frames); no detection of any class on the sign "
          f"{m['vanish_rate']['rate']:.3f}; "
          f"AP@0.5 {m['ap50_clean']:.3f} clean -> {m['ap50_attacked']:.3f} attacked")


if __name__ == "__main__":
    main()
