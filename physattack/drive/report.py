"""The drive report: ``drive.json``, ``drive.md``, timelines and videos, the console line, W&B."""

from __future__ import annotations

import cv2
from torch import Tensor

from physattack.drive.judge import DriveOutcome, DriveSettings, Judging, drive_metrics, evaluate_drives, panel_metrics
from physattack.drive.store import DriveStore, judging_key
from physattack.drive.video import timeline_figure, write_video
from physattack.evaluate.members import other_data_phrase


# -- the report -----------------------------------------------------------------------------------
def _pct(r: dict) -> str:
    if not r["n"]:
        return "n/a"
    return f"{r['rate']:.1%} [{r['ci95'][0]:.0%}-{r['ci95'][1]:.0%}] ({r['count']}/{r['n']})"


def drives_phrase(result: dict, n: int) -> str:
    """"18 held-out drives", or "1 footage drive" for a drive over the user's footage."""
    kind = "footage drive" if result.get("source") == "footage" else "held-out drive"
    return f"{n} {kind}{'' if n == 1 else 's'}"


def stack_line(stack_info: dict) -> str:
    v = stack_info["victims"]
    merged = ", its tiles' boxes merged" if stack_info.get("merge") == "nmm" else ""
    return (f"two-stage ({v['detector']}{merged} -> {v['classifier']})" if stack_info["stack"] == "two-stage"
            else f"detector alone ({v['detector']}{merged})")


def drive_markdown(summary: dict, metrics: dict, outcomes: list[DriveOutcome], settings: DriveSettings,
                   files: dict[str, list[str]]) -> str:
    attacked = "stop_rate_attacked" in metrics
    lines = ["# Drive-by evaluation: would the car still stop?", "",
             f"{summary.get('scene', '')}, {summary.get('attack', '')}: {drives_phrase(summary, len(outcomes))} through the "
             f"**{stack_line(summary)}** stack. {summary['setup']}", "",
             f"A sign is *recognised* when {settings.k} of the last {settings.n} frames read it as its class; the car "
             "*stops* when that happens at or before the braking point, the braking distance "
             f"v·{settings.reaction_s:g} s + v²/(2·{settings.decel_mps2:g} m/s²) from the sign. Attack success counts "
             "drives that stop clean and run the sign attacked, over the drives that stop clean. Rates with 95 % "
             "Wilson intervals.", "",
             "| drives | n | stop, clean | stop, attacked | run the sign, attacked | attack success |",
             "|---|---|---|---|---|---|"]

    def row(title: str, m: dict) -> str:
        cells = [_pct(m["stop_rate_clean"])]
        cells += ([_pct(m["stop_rate_attacked"]), _pct(m["run_rate_attacked"]), _pct(m["attack_success_rate"])]
                  if attacked else ["", "", ""])
        return f"| {title} | {m['drives']} | " + " | ".join(cells) + " |"

    lines.append(row("all", metrics))
    for s, m in metrics["by_speed"].items():
        lines.append(row(f"{s} km/h (braking {settings.braking_m(float(s)):.1f} m)", m))
    for li, m in metrics["by_lighting"].items():
        lines.append(row(li, m))
    for weather, m in metrics.get("by_weather", {}).items():
        lines.append(row(f"weather: {weather}", m))
    for occlusion, m in metrics.get("by_occlusion", {}).items():
        lines.append(row(f"occlusion: {occlusion}", m))
    for yaw, m in metrics.get("by_sign_yaw", {}).items():
        lines.append(row(f"sign turned {yaw}°", m))
    for radius, m in metrics.get("by_curve", {}).items():
        lines.append(row(f"road {bend(float(radius))}", m))
    for grade, m in metrics.get("by_grade", {}).items():
        lines.append(row(f"road {slope(float(grade))}", m))
    lines += ["", "## Every drive", "",
              "| # | speed km/h | light | effects | lane offset m | background | braking m | clean: recognised at m | "
              "attacked: recognised at m |", "|---|---|---|---|---|---|---|---|---|"]
    for o in outcomes:
        cells = []
        for name in ("clean", "attacked"):
            if name not in o.readings:
                cells.append("")
                continue
            at = o.recognised_at_m(name)
            where = f" ({at:.1f})" if at is not None else " (never)"
            cells.append(("stops" if o.stops(name) else "**runs**") + where)
        d = o.drive
        yaw, radius, grade = (getattr(d, k, 0.0) for k in ("sign_yaw_deg", "curve_radius_m", "grade_pct"))
        light = ", ".join([d.light] + [v for v, default in ((getattr(d, "weather", "clear"), "clear"),
                                                             (getattr(d, "occlusion", "none"), "none")) if v != default]
                          + ([f"sign turned {yaw:g}°"] if yaw else []) + ([bend(radius)] if radius else [])
                          + ([slope(grade)] if grade else []))
        lines.append(f"| {o.index} | {d.speed_kmh:g} | {light} | {d.effects} | {d.lane_offset_m:g} | "
                     f"{scenery(d)} | {o.braking_m:.1f} | {cells[0]} | {cells[1]} |")
    lines += ["", "Drives not drawn are judged until the frame past their braking point (their verdict is known "
              "there): a 'never' means never before the braking point.", ""]
    if metrics.get("panel"):
        lines += panel_markdown(metrics["panel"], attacked)
    for kind, paths in files.items():
        if paths:
            lines.append(f"{kind}: " + ", ".join(f"[{p}]({p})" for p in paths))
    if any(p.endswith(".avi") for p in files.get("videos", [])):
        lines.append("(OpenCV on this machine cannot write MP4, so the videos are Motion-JPEG AVI, which W&B does not "
                     "play: they are only in this folder.)")
    return "\n".join(lines) + "\n"


def bend(radius_m: float) -> str:
    """How a drive's road bends before the sign, in words."""
    if not radius_m:
        return "straight"
    return f"bends {'right' if radius_m > 0 else 'left'} (radius {abs(radius_m):g} m)"


def slope(grade_pct: float) -> str:
    """How a drive's road climbs or falls to the sign, in words."""
    if not grade_pct:
        return "level"
    return f"climbs {grade_pct:g} % to a crest" if grade_pct > 0 else f"falls {-grade_pct:g} % to a sag"


def panel_markdown(table: dict, attacked: bool) -> list[str]:
    """The victims-over-the-drives table of ``drive.md``."""
    kind = table.get("kind", "classifier")
    seen = "read the same crops" if kind == "classifier" else "scanned the same frames"
    lines = ["## Victims over the drives", "",
             f"Every {kind} of the run's held-out protocol {seen} of the same drives, judged by the same rule. A "
             f"held-out one was never called by the optimizer: its row is what a car whose {kind} the patch was "
             "not fitted to would do.", "",
             "| victim | role | family | trained on | stop, clean | stop, attacked | attack success |",
             "|---|---|---|---|---|---|---|"]
    for name, r in table["members"].items():
        cells = [_pct(r["stop_rate_clean"])] + ([_pct(r["stop_rate_attacked"]), _pct(r["attack_success_rate"])]
                                                 if attacked else ["", ""])
        lines.append(f"| {name} | {r['role']} | {r['family'] or '–'} | {r.get('data', 'render')} | "
                     + " | ".join(cells) + " |")
    lines.append("")
    mean, fam = table["held_out_mean"], table["held_out_families"]
    if mean["attack_success_rate"] is not None:
        lines.append(f"Mean attack success over the {len(mean['victims'])} held-out victims that stop in some drive "
                     f"clean: **{mean['attack_success_rate']:.1%}**"
                     + (f"; over the {len(fam['victims'])} of families no attacked victim belongs to "
                        f"({', '.join(fam['families'])}): **{fam['attack_success_rate']:.1%}**."
                        if fam["attack_success_rate"] is not None else "."))
        lines.append("")
    other = table.get("held_out_other_data") or {}
    if other.get("attack_success_rate") is not None:
        lines += [f"Over the {len(other['victims'])} held-out victims trained on other images than the renders the "
                  f"attack optimizes through ({', '.join(other['data'])}; left out of the means above): "
                  f"**{other['attack_success_rate']:.1%}** (lowest {other['attack_success_rate_min']:.1%}).", ""]
    if table["skipped"]:
        lines += [f"Skipped: {', '.join(f'`{n}` ({why})' for n, why in table['skipped'].items())}.", ""]
    return lines


def panel_phrase(table: dict) -> str:
    """How the panel fared over the drives, in words: an ensemble's attacked members one by one (a car
    runs one model, not the members' mean), and the held-out victims' mean (empty when none was scored)."""
    text = ""
    attacked = {n: r for n, r in table["members"].items() if r["role"] == "attacked" and "attack_success_rate" in r}
    if len(attacked) > 1:
        text += ("; each attacked member alone: " + ", ".join(
            f"{n} {r['attack_success_rate']['rate']:.1%}" if r["attack_success_rate"]["n"] else f"{n} n/a"
            for n, r in attacked.items()) + " of the drives it stops in clean")
    mean, fam = table["held_out_mean"], table["held_out_families"]
    if mean["attack_success_rate"] is None:
        return text
    k, kind = len(mean["victims"]), table.get("kind", "classifier")
    text += (f"; not fitted to: with {k} held-out {kind}{'' if k == 1 else 's'} it runs the sign in "
             f"{mean['attack_success_rate']:.1%} of the drives they stop in clean on average")
    if fam["attack_success_rate"] is not None:
        text += f", {fam['attack_success_rate']:.1%} for the {len(fam['victims'])} of families it never saw"
    return text + other_data_phrase(table.get("held_out_other_data") or {}, "run it in", " of their clean stops")


def drive_setup(dashcam, drives: list) -> str:
    """The drives' camera and conditions in one sentence."""
    values = lambda key: ", ".join(dict.fromkeys(f"{getattr(d, key):g}" if not isinstance(getattr(d, key), str)  # noqa: E731
                                                 else getattr(d, key) for d in drives))
    return (f"Dashcam {dashcam.width_px}×{dashcam.height_px} px, {dashcam.hfov_deg:g}° horizontal (focal "
            f"{dashcam.focal_px:.0f} px), {dashcam.height_m:g} m high, pitch {dashcam.pitch_deg:g}°; speeds "
            f"{values('speed_kmh')} km/h; light {values('light')}; camera effects {values('effects')}; lane offsets "
            f"{values('lane_offset_m')} m; from {values('start_m')} m at {values('fps')} fps until the sign leaves the "
            f"frame; {world_phrase(drives)}.")


def scenery(drive) -> str:
    """What stood behind the sign in one drive, as the drive table's "background" column says it: the held-out street
    by its seed, or the background image by its index in the held-out bank."""
    street = getattr(drive, "street", None)
    return f"street {street}" if street is not None else str(drive.background)


def world_phrase(drives: list) -> str:
    """What stands behind the sign in ``drives``: held-out streets (by seed), background images, or both."""
    streets = [d.street for d in drives if getattr(d, "street", None) is not None]
    if not streets:
        return "held-out background images"
    seeds = f"seeds {min(streets)}-{max(streets)}" if len(set(streets)) > 1 else f"seed {streets[0]}"
    return f"held-out streets ({seeds})" + (" and background images" if len(streets) < len(drives) else "")


def drive_headline(result: dict) -> str:
    """One line for the terminal: stop share clean vs attacked, through which victims."""
    c = result["stop_rate_clean"]
    line = (f"drive-by ({stack_line(result)}, {drives_phrase(result, result['drives'])}): the car stops in {c['rate']:.1%} "
            f"(95% CI {c['ci95'][0]:.1%}-{c['ci95'][1]:.1%}) clean")
    if "stop_rate_attacked" in result:
        a, s = result["stop_rate_attacked"], result["attack_success_rate"]
        line += (f", {a['rate']:.1%} (95% CI {a['ci95'][0]:.1%}-{a['ci95'][1]:.1%}) attacked; the patch makes it run "
                 f"the sign in {s['rate']:.1%} of the drives it stops in clean ({s['count']}/{s['n']})")
        if result.get("panel"):
            line += panel_phrase(result["panel"])
    return line + f"; report {result['report']}"


def drive_verdict(result: dict) -> str:
    """What a run's headline leads with: over the run's held-out drives, how often the car runs the sign it
    stops for clean, through the attacked stack, and through the held-out victims on average."""
    s = result.get("attack_success_rate")
    if s is None:
        return f"no attacked drive was judged ({drives_phrase(result, result['drives'])})"
    head = f"over {drives_phrase(result, result['drives'])} ({stack_line(result)}) "
    if s["n"] == 0:
        head += "the car never stops for the clean sign, so the drive verdict is undefined"
    else:
        head += (f"the car runs the sign in {s['rate']:.1%} ({s['count']}/{s['n']}, 95% CI {s['ci95'][0]:.1%}-"
                 f"{s['ci95'][1]:.1%}) of those it stops in clean")
    panel = result.get("panel") or {}
    attacked = {n: r["attack_success_rate"] for n, r in (panel.get("members") or {}).items()
                if r["role"] == "attacked" and "attack_success_rate" in r}
    if len(attacked) > 1:                      # a car runs one model, not the members' mean the stack reads
        head += " (each attacked member alone: " + ", ".join(
            f"{n} {r['rate']:.1%}" if r["n"] else f"{n} n/a" for n, r in attacked.items()) + ")"
    mean, fam = panel.get("held_out_mean") or {}, panel.get("held_out_families") or {}
    if mean.get("attack_success_rate") is not None:
        k, kind = len(mean["victims"]), panel.get("kind", "classifier")
        head += (f", the {k} held-out {kind}{'' if k == 1 else 's'} in {mean['attack_success_rate']:.1%} on average"
                 + (f" ({fam['attack_success_rate']:.1%} for the {len(fam['victims'])} of families it never saw)"
                    if fam.get("attack_success_rate") is not None else ""))
    other = panel.get("held_out_other_data") or {}
    if other.get("attack_success_rate") is not None:
        head += (f", the {len(other['victims'])} trained on other images ({', '.join(other['data'])}) in "
                 f"{other['attack_success_rate']:.1%}")
    return head


def report_drives(evaluation, *, out_dir, clean_texture: Tensor, adv_texture: Tensor | None, summary: dict,
                  tracker=None, photograph=None, progress: bool = False) -> dict:
    """Judge ``evaluation``'s drives (a ``physattack.drive.build.DriveEvaluation``) clean and attacked, write
    ``drive.json``, ``drive.md``, timeline plots and videos into ``out_dir`` and log them; returns the drive
    section of the run report. Each drive's results are kept in ``out_dir/per_drive`` as it finishes
    (``physattack.drive.store``), and those an interrupted run of the same report left there are reused."""
    from pathlib import Path

    import matplotlib.pyplot as plt

    from physattack.atomic import save_figure, save_json, save_text

    out_dir = Path(out_dir)
    scene, drives, renderer, stack, settings = (evaluation.scene, evaluation.drives, evaluation.renderer,
                                                evaluation.stack, evaluation.settings)
    textures = {"clean": clean_texture} if adv_texture is None else {"clean": clean_texture, "attacked": adv_texture}
    judging = Judging(scene, textures, renderer, stack, settings, photograph)
    outcomes = evaluate_drives(judging, drives, progress, DriveStore(out_dir, judging_key(judging)))
    metrics = drive_metrics(outcomes)
    if stack.panel:
        metrics["panel"] = {**panel_metrics(outcomes, stack.panel, stack.panel_skipped),
                            "kind": "detector" if stack.kind == "detector" else "classifier"}
    sign_label = scene.class_name
    files: dict[str, list[str]] = {"timelines": [], "videos": []}
    for o in outcomes[:settings.timelines]:
        fig = timeline_figure(o, stack.labels, sign_label, settings)
        files["timelines"].append(save_figure(out_dir / f"timeline_{o.index}.png", fig).name)
        plt.close(fig)
    for o in outcomes[:settings.videos]:
        files["videos"].append(write_video(out_dir / f"drive_{o.index}.mp4", o, judging).name)
    setup = getattr(evaluation, "setup", None)
    head = {**summary, "stack": stack.kind, "victims": stack.names, "setup": setup or drive_setup(renderer.dashcam, drives),
            "merge": getattr(getattr(getattr(stack, "tiled", None), "settings", None), "merge", "nms")}
    if setup:
        head["source"] = "footage"
    result = {**head, **metrics, "report": str(out_dir / "drive.md"), "files": files}
    save_text(out_dir / "drive.md", drive_markdown(head, metrics, outcomes, settings, files))
    save_json(out_dir / "drive.json", {
        **result, "settings": {k: getattr(settings, k) for k in settings.__dataclass_fields__},
        "per_drive": [{**o.summary(), "timeline": {n: o.timeline(n, stack.labels) for n in o.readings}}
                      for o in outcomes]})
    if tracker is not None:
        flat = {f"drive/{k}": metrics[k]["rate"] for k in ("stop_rate_clean", "stop_rate_attacked", "run_rate_attacked",
                                                           "attack_success_rate") if k in metrics}
        panel = metrics.get("panel")
        if panel:
            flat.update({f"drive/{n}/attack_success_rate": r["attack_success_rate"]["rate"]
                         for n, r in panel["members"].items() if "attack_success_rate" in r})
            for key in ("held_out_mean", "held_out_families", "held_out_other_data"):
                if (panel.get(key) or {}).get("attack_success_rate") is not None:
                    flat[f"drive/{key}_attack_success_rate"] = panel[key]["attack_success_rate"]
            keys = ("stop_rate_clean", "stop_rate_attacked", "attack_success_rate")
            tracker.log_table("drive/victims", ["victim", "role", "family", "data", *keys],
                              [[n, r["role"], r["family"], r.get("data", "render"),
                                *(r[k]["rate"] if k in r else None for k in keys)]
                               for n, r in panel["members"].items()])
        tracker.summary(flat)
        tracker.log(flat)
        tracker.log_images({f"drive/timeline_{i}": cv2.cvtColor(cv2.imread(str(out_dir / p)), cv2.COLOR_BGR2RGB)
                            for i, p in enumerate(files["timelines"])})
        for p in files["videos"]:
            tracker.log_video(f"drive/{Path(p).stem}", out_dir / p)
        tracker.log_table("drive/per_drive", ["drive", "speed_kmh", "light", "lane_offset_m", "braking_m",
                                              *(f"{n}_stops" for n in textures)],
                          [[o.index, o.drive.speed_kmh, o.drive.light, o.drive.lane_offset_m, round(o.braking_m, 2),
                            *(o.stops(n) for n in textures)] for o in outcomes])
    return result
