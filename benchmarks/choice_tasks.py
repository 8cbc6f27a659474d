"""The frozen setting of ``python -m benchmarks choice``: tasks, model, recipe and seeds.

Frozen before any selector of :func:`posenc.search.choose_encoding` was tuned; a change here
is a new benchmark, not a tuning step. Every task is a standard data set shipped inside a
package (nothing is downloaded): five UCR/UEA time-series sets from sktime's wheel (read
straight from its ``.ts`` files, sktime is not imported), and scikit-learn's ``load_digits``
(as an image of 2x2 patches, as an image of rows and as a point set of its patches in random order),
``load_wine`` and ``load_breast_cancer`` (tabular rows as sets of feature tokens, the token's
index naming its feature). UCR/UEA sets keep their official train/test split; the others get
one fixed split (``DATA_SEED``). A validation split is carved from train, stratified, with the
same fixed seed for every training seed: the ground truth of a task is one number per
candidate.

Every task's model is :class:`TinyTransformer` (a linear token embedding, a class token, an
``EncodingSearch`` over ``posenc.search.ENCODING_CANDIDATES`` where the model adds its position
encoding, 2 pre-norm encoder layers of width 32, 4 heads), trained with :data:`RECIPE` for the
task's ``epochs`` (about :data:`TARGET_STEPS` steps); seeds :data:`SEEDS` set the weights'
initial draw, the encodings' draws and the batch order.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from typing import Any

import torch
from torch import nn

from posenc.search import ENCODING_CANDIDATES, EncodingSearch

#: Training seeds (weights, encodings, batch order).
SEEDS: tuple[int, ...] = (0, 1, 2, 3, 4)
#: Seed of every data split (the same for all training seeds).
DATA_SEED = 0
#: Steps one stand-alone training should take (each task's epochs are frozen below from it).
TARGET_STEPS = 240
#: ``train_network`` / ``choose_encoding`` keywords shared by every task (the epochs are per task).
RECIPE: dict[str, Any] = {"optimizer": "adamw", "lr": 2e-3, "lr_min": 1e-5, "weight_decay": 0.05,
                          "batch_size": 32, "grad_clip": 1.0}
#: The model's sizes.
MODEL: dict[str, Any] = {"dim": 32, "depth": 2, "heads": 4, "ff": 64, "dropout": 0.1}
#: The candidates every task searches over.
CANDIDATES: tuple[str, ...] = ENCODING_CANDIDATES

#: name -> (kind, source, how it is tokenised, epochs). Epochs: ``round(TARGET_STEPS /
#: ceil(n_train / batch_size))``, computed once from the split sizes and frozen here.
TASKS: dict[str, dict[str, Any]] = {
    "GunPoint": {"kind": "sequence", "source": "sktime (UCR)", "tokens": "15 patches of 10 steps", "epochs": 120},
    "ItalyPowerDemand": {"kind": "sequence", "source": "sktime (UCR)", "tokens": "24 steps", "epochs": 120},
    "ArrowHead": {"kind": "sequence", "source": "sktime (UCR)", "tokens": "25 patches of 10 steps", "epochs": 240},
    "BasicMotions": {"kind": "sequence", "source": "sktime (UEA, 6 channels)", "tokens": "10 patches of 10 steps",
                     "epochs": 240},
    "JapaneseVowels": {"kind": "sequence", "source": "sktime (UEA, 12 channels, 7-29 steps)",
                       "tokens": "29 steps (zero-padded)", "epochs": 34},
    "digits-patches": {"kind": "image", "source": "scikit-learn load_digits", "tokens": "4x4 grid of 2x2 patches",
                       "epochs": 8},
    "digits-rows": {"kind": "image", "source": "scikit-learn load_digits", "tokens": "8 rows of 8 pixels",
                    "epochs": 8},
    "digits-patch-set": {"kind": "point set", "source": "scikit-learn load_digits",
                         "tokens": "16 points (2x2 patch pixels and the patch's row, col), in random order",
                         "epochs": 8},
    "wine": {"kind": "tabular set", "source": "scikit-learn load_wine", "tokens": "13 feature tokens", "epochs": 60},
    "breast_cancer": {"kind": "tabular set", "source": "scikit-learn load_breast_cancer",
                      "tokens": "30 feature tokens", "epochs": 24},
}


# ---------------------------------------------------------------------------------- the model
class TinyTransformer(nn.Module):
    """Tokens ``(B, N, F)`` -> class logits: linear embedding, class token, a searchable position
    encoding, pre-norm transformer encoder, linear head on the class token.

    Args:
        in_features: ``F``; num_classes: outputs; grid: ``N`` or ``(rows, cols)``.
        candidates: of the :class:`~posenc.search.EncodingSearch` (one name: a fixed encoding).
        seed: of the encodings' draws.
    """

    def __init__(self, in_features: int, num_classes: int, grid, candidates=CANDIDATES, *, dim: int = 32,
                 depth: int = 2, heads: int = 4, ff: int = 64, dropout: float = 0.1, seed: int = 0) -> None:
        super().__init__()
        self.embed = nn.Linear(in_features, dim)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = EncodingSearch(dim, grid, candidates, prefix_tokens=1, seed=seed)
        layer = nn.TransformerEncoderLayer(dim, heads, ff, dropout, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        x = torch.cat([self.cls.expand(len(x), -1, -1), x], 1)
        return self.head(self.norm(self.encoder(self.pos(x))[:, 0]))


def build_model(task: dict[str, Any], seed: int, candidates=CANDIDATES) -> TinyTransformer:
    """The task's model with the weights of ``seed`` (the same draw whatever the candidates)."""
    torch.manual_seed(seed)
    return TinyTransformer(task["in_features"], task["num_classes"], task["grid"], candidates, seed=seed, **MODEL)


# ---------------------------------------------------------------------------------- the data
def _sktime_file(name: str, split: str) -> Path:
    spec = importlib.util.find_spec("sktime")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("the choice benchmark reads UCR/UEA sets shipped in sktime's wheel: "
                                  "pip install 'posenc[bench]'", name="sktime")
    return Path(spec.submodule_search_locations[0]) / "datasets" / "data" / name / f"{name}_{split}.ts"


def read_ts(path: Path) -> tuple[list[torch.Tensor], list[str]]:
    """A ``.ts`` file (the UCR/UEA archive's text format): per case a ``(channels, length)``
    float64 tensor and its label."""
    series, labels = [], []
    in_data = False
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if not in_data:
            in_data = line.lower() == "@data"
            continue
        *dims, label = line.split(":")
        rows = [[float(v) for v in d.split(",")] for d in dims]
        series.append(torch.tensor(rows, dtype=torch.float64))
        labels.append(label.strip())
    return series, labels


def _encode_labels(*splits: list[str]) -> list[torch.Tensor]:
    classes = sorted({c for s in splits for c in s})
    index = {c: i for i, c in enumerate(classes)}
    return [torch.tensor([index[c] for c in s]) for s in splits]


def _patches(x: torch.Tensor, size: int) -> torch.Tensor:
    """``(B, C, L)`` -> ``(B, L // size, C * size)`` tokens (the tail that does not fill a patch dropped)."""
    b, c, n = x.shape
    n = (n // size) * size
    return x[..., :n].reshape(b, c, n // size, size).permute(0, 2, 1, 3).reshape(b, n // size, c * size)


def _stratified(y: torch.Tensor, fraction: float, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices ``(kept, carved)``: ``fraction`` of each class (at least one) carved out."""
    keep, carve = [], []
    for c in torch.unique(y).tolist():
        idx = torch.nonzero(y == c).flatten()
        idx = idx[torch.randperm(len(idx), generator=gen)]
        k = max(1, int(round(fraction * len(idx)))) if len(idx) > 1 else 0
        carve.append(idx[:k])
        keep.append(idx[k:])
    return torch.cat(keep).sort().values, torch.cat(carve).sort().values


def _ucr(name: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    (xs_tr, l_tr), (xs_te, l_te) = read_ts(_sktime_file(name, "TRAIN")), read_ts(_sktime_file(name, "TEST"))
    y_tr, y_te = _encode_labels(l_tr, l_te)
    length = max(s.shape[1] for s in xs_tr + xs_te)

    def stack(xs: list[torch.Tensor]) -> torch.Tensor:
        out = torch.zeros(len(xs), xs[0].shape[0], length, dtype=torch.float64)
        for i, s in enumerate(xs):
            out[i, :, : s.shape[1]] = s
        return out

    return stack(xs_tr), y_tr, stack(xs_te), y_te


def _standardise(x_tr: torch.Tensor, x_te: torch.Tensor, dims) -> tuple[torch.Tensor, torch.Tensor]:
    mean, std = x_tr.mean(dims, keepdim=True), x_tr.std(dims, keepdim=True).clamp_min(1e-8)
    return (x_tr - mean) / std, (x_te - mean) / std


def _sequence(name: str) -> dict[str, Any]:
    x_tr, y_tr, x_te, y_te = _ucr(name)
    if name == "GunPoint":
        t_tr, t_te, grid = _patches(x_tr, 10), _patches(x_te, 10), 15
    elif name == "ItalyPowerDemand":
        t_tr, t_te, grid = x_tr.transpose(1, 2), x_te.transpose(1, 2), 24
    elif name == "ArrowHead":
        t_tr, t_te, grid = _patches(x_tr, 10), _patches(x_te, 10), 25
    elif name == "BasicMotions":
        x_tr, x_te = _standardise(x_tr, x_te, (0, 2))
        t_tr, t_te, grid = _patches(x_tr, 10), _patches(x_te, 10), 10
    elif name == "JapaneseVowels":
        t_tr, t_te, grid = x_tr.transpose(1, 2), x_te.transpose(1, 2), 29
    else:
        raise ValueError(f"unknown sequence task {name!r}")
    return {"x_trainval": t_tr, "y_trainval": y_tr, "x_test": t_te, "y_test": y_te, "grid": grid}


def _sklearn(name: str) -> dict[str, Any]:
    from sklearn import datasets

    gen = torch.Generator().manual_seed(DATA_SEED)
    if name.startswith("digits"):
        d = datasets.load_digits()
        images = torch.tensor(d.images, dtype=torch.float64) / 16.0  # (n, 8, 8)
        y = torch.tensor(d.target)
        if name == "digits-patches":
            x = images.reshape(-1, 4, 2, 4, 2).permute(0, 1, 3, 2, 4).reshape(-1, 16, 4)
            grid: Any = (4, 4)
        elif name == "digits-rows":
            x, grid = images, 8
        else:  # each 2x2 patch a point: its 4 pixels and its (row, col) in [-1, 1], in a random order per image
            patches = images.reshape(-1, 4, 2, 4, 2).permute(0, 1, 3, 2, 4).reshape(-1, 16, 4)
            where = torch.stack(torch.meshgrid(torch.arange(4), torch.arange(4), indexing="ij"), -1).reshape(16, 2)
            where = (where.double() - 1.5) / 1.5
            points = torch.cat([patches, where.expand(len(patches), 16, 2)], -1)
            order = torch.stack([torch.randperm(16, generator=gen) for _ in range(len(points))])
            x, grid = torch.gather(points, 1, order.unsqueeze(-1).expand(-1, -1, 6)), 16
    else:
        d = datasets.load_wine() if name == "wine" else datasets.load_breast_cancer()
        x = torch.tensor(d.data, dtype=torch.float64)
        y = torch.tensor(d.target)
        grid = x.shape[1]
    keep, test = _stratified(y, 0.25, gen)
    x_tv, x_te = x[keep], x[test]
    if not name.startswith("digits"):
        x_tv, x_te = _standardise(x_tv, x_te, 0)
        x_tv, x_te = x_tv.unsqueeze(-1), x_te.unsqueeze(-1)
    return {"x_trainval": x_tv, "y_trainval": y[keep], "x_test": x_te, "y_test": y[test], "grid": grid}


def load_task(name: str, *, subset: int | None = None) -> dict[str, Any]:
    """The task's splits as float32 token tensors ``(n, N, F)`` and int64 labels.

    Returns:
        ``{"train", "val", "test": (tokens, labels), "grid", "in_features", "num_classes",
        "epochs", ...}`` (``subset``: at most that many examples per split, for a smoke run).
    """
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; tasks: {list(TASKS)}")
    raw = _sequence(name) if TASKS[name]["kind"] == "sequence" else _sklearn(name)
    gen = torch.Generator().manual_seed(DATA_SEED + 1)
    train_i, val_i = _stratified(raw["y_trainval"], 0.25, gen)
    x, y = raw["x_trainval"].float(), raw["y_trainval"]
    out = {**TASKS[name], "name": name, "grid": raw["grid"], "in_features": int(x.shape[-1]),
           "num_classes": int(max(int(y.max()), int(raw["y_test"].max())) + 1),
           "train": (x[train_i], y[train_i]), "val": (x[val_i], y[val_i]),
           "test": (raw["x_test"].float(), raw["y_test"])}
    if subset is not None:
        for split in ("train", "val", "test"):
            xs, ys = out[split]
            out[split] = (xs[:subset], ys[:subset])
    return out


def frozen_epochs(n_train: int) -> int:
    """How each task's ``epochs`` were set: ``TARGET_STEPS`` steps of ``batch_size`` examples."""
    return max(1, round(TARGET_STEPS / math.ceil(n_train / RECIPE["batch_size"])))
