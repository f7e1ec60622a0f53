"""timm classifiers as victims (timm is a dependency: the victim zoo is built on its architectures).

Nothing is downloaded: the model is built with ``pretrained=False`` (and ``HF_HUB_OFFLINE=1``), then its
weights are read as data from ``weights`` or from where ``timm.create_model(arch, pretrained=True)`` left
them on this machine — the Hugging Face hub cache (``models--timm--<name>/snapshots/*/model.safetensors``)
or, for weights timm fetched by URL, torch's hub cache (``$TORCH_HOME/hub/checkpoints``).

The preprocessing of timm's data config (input size, interpolation, mean, std; optionally its centre
crop) runs inside ``forward``, differentiably, so callers hand the victim plain rendered images.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

from physattack.victims.base import Classifier, VictimError, build_from_weights, normalize, read_state_dict
from physattack.victims.labels import load_label_sets

#: The interpolations timm's data configs name, as ``torch.nn.functional.interpolate`` modes (timm's
#: ``random`` picks one per image while training; a victim is deterministic, so bilinear).
INTERPOLATION = {"bilinear": "bilinear", "bicubic": "bicubic", "nearest": "nearest", "random": "bilinear"}


def _timm():
    # Belt and braces: the model is never built with pretrained=True, but nothing timm or the hub
    # does on import or later may reach the network either.
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        import timm
    except ImportError:
        raise VictimError("timm victims need timm, a dependency of physattack that is missing here; reinstall "
                          "physattack (pip install -e .) or pip install timm.") from None
    return timm


class TimmClassifier(Classifier):
    """A ``timm`` classifier with its preprocessing inside ``forward``.

    Args:
        model: the timm model (``timm.create_model(...)``), B×3×h×w normalized -> B×K logits.
        labels: class names, in output order.
        input_size: side of the square the model sees.
        mean, std: per-channel normalization of images in [0, 1].
        interpolation: ``bilinear``, ``bicubic`` or ``nearest``.
        crop_pct: ``None``: the whole view is resized to ``input_size`` (as the torchvision victims);
            a fraction: timm's eval transform — the shorter side resized to ``input_size / crop_pct``,
            then the centre ``input_size`` kept.

    Shape:
        images B×3×H×W in [0, 1] -> logits B×K.
    """

    def __init__(self, model: torch.nn.Module, labels: Sequence[str], input_size: int,
                 mean: Sequence[float], std: Sequence[float], interpolation: str = "bicubic",
                 crop_pct: float | None = None):
        super().__init__()
        self.model = model
        self.labels = tuple(labels)
        self.input_size = int(input_size)
        self.mean = tuple(float(m) for m in mean)
        self.std = tuple(float(s) for s in std)
        self.interpolation = interpolation
        self.crop_pct = crop_pct

    def logits(self, images: Tensor) -> Tensor:
        return self.model(normalize(self.resize(images), self.mean, self.std))

    def resize(self, images: Tensor) -> Tensor:
        """B×3×H×W -> B×3×S×S (S = ``input_size``), differentiable."""
        s = self.input_size
        if self.crop_pct is None:
            return _resize(images, (s, s), self.interpolation)
        # timm's eval transform: scale the shorter side to S/crop_pct, keep the centre S×S.
        scale = s / self.crop_pct / min(images.shape[-2:])
        size = (max(s, round(images.shape[-2] * scale)), max(s, round(images.shape[-1] * scale)))
        images = _resize(images, size, self.interpolation)
        top, left = (size[0] - s) // 2, (size[1] - s) // 2
        return images[..., top:top + s, left:left + s]


def _resize(images: Tensor, size: tuple[int, int], mode: str) -> Tensor:
    if tuple(images.shape[-2:]) == tuple(size):
        return images
    if mode == "nearest":
        return F.interpolate(images, size=size, mode="nearest")
    return F.interpolate(images, size=size, mode=mode, antialias=True, align_corners=False)


def hf_hub_cache() -> Path:
    """The Hugging Face hub cache, read from the environment at call time as huggingface_hub reads it."""
    if os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE"):
        return Path(os.environ.get("HF_HUB_CACHE") or os.environ["HUGGINGFACE_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "huggingface"
    return Path(home).expanduser() / "hub"


def local_timm_weights(arch: str, pretrained_cfg) -> Path:
    """The weights file ``timm.create_model(arch, pretrained=True)`` would have left on this machine;
    never downloaded. Looks in the Hugging Face hub cache, then torch's hub cache."""
    from huggingface_hub import try_to_load_from_cache

    def field(key):                 # model.pretrained_cfg is a dict, get_pretrained_cfg() a dataclass
        value = pretrained_cfg.get(key) if isinstance(pretrained_cfg, Mapping) else getattr(pretrained_cfg, key, None)
        return value or None

    hf_id, url = field("hf_hub_id"), field("url")
    if not hf_id and not url:
        raise VictimError(f"timm knows no pretrained weights for {arch}; point victim.weights at a weights file "
                          "for it (or set victim.random_init=true, for tests only).")
    looked = []
    if hf_id:
        repo, _, revision = hf_id.partition("@")
        filename = field("hf_hub_filename")
        names = [filename] if filename else ["model.safetensors", "pytorch_model.bin"]
        if filename and filename.endswith(".bin"):      # timm prefers a safetensors twin of a .bin
            names.insert(0, filename[:-4] + ".safetensors")
        cache = hf_hub_cache()
        for name in names:
            found = try_to_load_from_cache(repo, name, cache_dir=str(cache), revision=revision or None)
            if isinstance(found, str) and Path(found).is_file():
                return Path(found)
        looked.append(str(cache / f"models--{repo.replace('/', '--')}"))
    if url and Path(url).suffix in {".pth", ".pt", ".bin", ".safetensors"}:
        path = Path(torch.hub.get_dir()) / "checkpoints" / Path(url).name
        if path.is_file():
            return path
        looked.append(str(path))
    raise VictimError(f"timm weights for {arch} are not on this machine (looked in {' and '.join(looked)}); download "
                      f"them elsewhere with timm.create_model('{arch}', pretrained=True) and copy the cache folder "
                      "here, or point victim.weights at the weights file (e.g. its model.safetensors).")


def imagenet_labels() -> list[str]:
    """ImageNet-1k class names in the standard order (torchvision's, which ``label_sets: imagenet`` uses)."""
    import torchvision

    return list(torchvision.models.ResNet50_Weights.DEFAULT.meta["categories"])


@dataclass(frozen=True)
class Preprocessing:
    """How a timm classifier sees a view (``victim.preprocessing``); each None is timm's data config for the arch.

    Args:
        input_size: the square side the model sees.
        mean, std: normalization, three numbers each.
        interpolation: ``bilinear``, ``bicubic`` or ``nearest``.
        crop_pct: None resizes the whole view; a fraction in (0, 1] applies timm's centre crop.
    """

    input_size: int | None = None
    mean: list[float] | None = None
    std: list[float] | None = None
    interpolation: str | None = None
    crop_pct: float | None = None

    def __post_init__(self) -> None:
        if self.crop_pct is not None:
            VictimError.check_range("victim.preprocessing.crop_pct", self.crop_pct, 0, 1, lo_open=True,
                                    why="timm's centre crop, or null for the whole view")

    @classmethod
    def of(cls, value) -> Preprocessing:
        """A ``Preprocessing`` from itself, None (all defaults) or a mapping of its keys (a config node)."""
        if value is None or isinstance(value, cls):
            return value or cls()
        keys = dict(_plain(value))
        unknown = sorted(set(keys) - set(cls.__dataclass_fields__))
        if unknown:
            raise VictimError(f"victim.preprocessing.{unknown[0]} is not a setting; the settings are "
                              f"{', '.join(cls.__dataclass_fields__)}.")
        return cls(**keys)


#: The keys of ``Preprocessing``: how earlier configs and the zoo's JSON files name them, at the top level.
PREPROCESSING_KEYS = ("input_size", "mean", "std", "interpolation", "crop_pct")


def load_timm_classifier(arch: str, weights: str | None = None, num_classes: int | None = None,
                         labels: list[str] | None = None, label_sets: str | dict | None = None,
                         preprocessing: Preprocessing | dict | None = None, model_kwargs: dict | None = None,
                         random_init: bool = False) -> TimmClassifier:
    """Build ``timm.create_model(arch, pretrained=False)`` and load its weights without the network.

    Args:
        arch: a timm model name, with or without a pretrained tag (``resnet18``, ``resnet18.a1_in1k``,
            ``convnext_tiny.fb_in22k_ft_in1k``); see ``timm.list_models(pretrained=True)``.
        weights: a state-dict file (``.safetensors``, or a torch file read data-only); default: where
            timm's own download left the weights for ``arch`` (Hugging Face or torch hub cache).
        num_classes: output classes; default ``len(labels)``, else the pretrained head's (1000).
        labels: class names in output order (e.g. the project's sign labels, for a model it trained);
            default: ImageNet-1k's names when the model has 1000 classes.
        label_sets: the scene classes' sets of acceptable labels (``imagenet``, a JSON file, or None;
            see ``physattack.victims.labels``).
        preprocessing: input size, normalization, interpolation and centre crop (``Preprocessing``, or a
            mapping of its keys); what it leaves None is timm's data config for ``arch``.
        model_kwargs: more arguments for ``timm.create_model`` (e.g. ``{img_size: 64}`` for a ViT
            trained at 64 px, ``{drop_path_rate: 0.1}``).
        random_init: skip the weights (for tests of shapes and gradients only).
    """
    prep = Preprocessing.of(preprocessing)
    input_size, mean, std, interpolation, crop_pct = (prep.input_size, prep.mean, prep.std, prep.interpolation,
                                                      prep.crop_pct)
    timm = _timm()
    data_args = _data_args(input_size, mean, std, interpolation)
    labels = None if labels is None else [str(x) for x in labels]
    if labels is not None and num_classes is not None and num_classes != len(labels):
        raise VictimError(f"victim.num_classes is {num_classes} but victim.labels names {len(labels)} classes; "
                          "give one name per class (or leave num_classes null).")
    if not timm.is_model(arch):     # also accepts a pretrained tag, e.g. resnet18.a1_in1k
        close = difflib.get_close_matches(arch.split(".")[0], timm.list_models(), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise VictimError(f"timm has no model '{arch}'{hint}; see timm.list_models() for the names.")
    n = num_classes if num_classes is not None else (len(labels) if labels is not None else None)
    try:
        model = timm.create_model(arch, pretrained=False, **({"num_classes": n} if n is not None else {}),
                                  **_plain(model_kwargs or {}))
    except (TypeError, ValueError, RuntimeError, AssertionError) as e:
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise VictimError(f"timm could not build {arch} with num_classes={n} and model_kwargs={_plain(model_kwargs or {})} "
                          f"({reason}); check victim.model_kwargs against timm.create_model('{arch}').") from None
    if labels is None:
        if model.num_classes != 1000:
            raise VictimError(f"timm's {arch} has {model.num_classes} classes and no names for them; give "
                              "victim.labels (one name per class, in output order).")
        labels = imagenet_labels()
    if not random_init:
        path = Path(weights) if weights else local_timm_weights(arch, model.pretrained_cfg)
        build_from_weights(path, lambda: model, _unwrap(read_state_dict(path, f"timm {arch} weights")))
    config = timm.data.resolve_data_config(data_args, model=model)
    mode = INTERPOLATION.get(str(config["interpolation"]))
    if mode is None:
        raise VictimError(f"victim.preprocessing.interpolation must be one of bilinear, bicubic, nearest; got "
                          f"{config['interpolation']!r}.")
    height, width = config["input_size"][-2:]
    if height != width:
        raise VictimError(f"timm's data config for {arch} is {height}×{width}, not square; set "
                          "victim.preprocessing.input_size.")
    victim = TimmClassifier(model, labels, height, config["mean"], config["std"], mode, crop_pct)
    victim.label_sets = load_label_sets(label_sets, victim.labels)
    victim.arch = arch
    return victim.freeze()


def _data_args(input_size, mean, std, interpolation) -> dict:
    args = {}
    if input_size is not None:
        if int(input_size) < 8:
            raise VictimError(f"victim.preprocessing.input_size must be at least 8 pixels, got {input_size}.")
        args["input_size"] = (3, int(input_size), int(input_size))
    for key, value in (("mean", mean), ("std", std)):
        if value is not None:
            value = tuple(float(v) for v in value)
            if len(value) != 3 or (key == "std" and min(value) <= 0):
                raise VictimError(f"victim.preprocessing.{key} must be three numbers{' above 0' if key == 'std' else ''}, "
                                  f"got {list(value)}.")
            args[key] = value
    if interpolation is not None:
        args["interpolation"] = str(interpolation)
    return args


def _unwrap(state: dict) -> dict:
    """A checkpoint's state dict: timm's training script nests it under ``state_dict``; DDP prefixes ``module.``."""
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    if isinstance(state, dict) and state and all(str(k).startswith("module.") for k in state):
        state = {k[len("module."):]: v for k, v in state.items()}
    return state



def bundled_timm_victim(name: str) -> TimmClassifier:
    """A timm classifier the project trained and ships: ``assets/<name>.safetensors``, built as the
    ``victim`` arguments its ``assets/<name>.json`` records (``python -m physattack.train zoo``)."""
    import json
    from importlib import resources

    path = Path(str(resources.files("physattack.assets"))) / f"{name}.safetensors"
    meta_path = path.with_suffix(".json")
    if not path.is_file() or not meta_path.is_file():
        raise VictimError(f"There is no bundled victim '{name}' ({path.name} with {meta_path.name} beside it in "
                          "physattack/assets); train it with 'python -m physattack.train zoo name=" + name + " ...'.")
    try:
        kwargs = dict(json.loads(meta_path.read_text())["victim"])
    except (ValueError, KeyError, TypeError) as e:
        raise VictimError(f"{meta_path} does not record the victim's arguments ({e}); it should be the JSON "
                          "'python -m physattack.train zoo' wrote.") from None
    kwargs.pop("weights", None)
    return load_timm_classifier(weights=str(path), **grouped_preprocessing(kwargs))


def grouped_preprocessing(kwargs: dict) -> dict:
    """``load_timm_classifier``'s arguments from a mapping that names the preprocessing keys at the top level
    (the zoo's JSON files, configs written before ``victim.preprocessing``), grouped under ``preprocessing``."""
    kwargs = dict(kwargs)
    flat = {k: kwargs.pop(k) for k in PREPROCESSING_KEYS if k in kwargs}
    if flat:
        kwargs["preprocessing"] = {**dict(kwargs.get("preprocessing") or {}), **flat}
    return kwargs

def _plain(value):
    """Config containers (OmegaConf's, when Hydra passes them) as plain dicts and lists."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [_plain(v) for v in value]
    return value
