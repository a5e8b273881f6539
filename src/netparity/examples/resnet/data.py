"""A tiny generated ImageFolder dataset and the matching PyTorch and MindSpore input pipelines.

The demo needs data that (a) exists offline, (b) is learnable, and (c) goes through the same
kind of pipeline as ImageNet in the reference migration: decode, resize the shorter side, centre
crop, scale to [0, 1], normalise with the ImageNet mean/std, HWC -> CHW; for training a random
resized crop and a horizontal flip instead of resize + centre crop.

``image_size`` is the crop; the resize before it is ``round(image_size * 256 / 224)`` (224 -> 256
as in the document, 56 -> 64 for the small demo).

PyTorch side: :class:`TorchImageFolder` + :func:`torch_loader`, transforms written with numpy/PIL
following torchvision's semantics (torchvision is not needed).
MindSpore side: :func:`ms_dataset`, ``mindspore.dataset.ImageFolderDataset`` + ``vision``
transforms as in the document. ``decoder`` selects how MindSpore decodes and resizes:

- ``"native"`` (the document's pipeline): MindSpore's own decoder and OpenCV-style resize.
  Measured against PIL on the generated PNGs (``tests/examples/test_resnet_data.py``): equal
  when the resize is the identity (64-px images, ``image_size=56``), up to a few uint8 levels
  once the resize really resamples (e.g. 64 -> 256).
- ``"pil"``: ``Decode(to_pil=True)`` so Resize/CenterCrop run through PIL exactly as the
  PyTorch pipeline does, then ``ToTensor`` + ``Normalize``: same values within float rounding.
- ``"numpy"``: ``GeneratorDataset`` over the arrays the PyTorch pipeline produced: identical by
  construction (use it to take the data pipeline out of a comparison).

``deterministic=True`` turns off shuffling and random augmentation on both sides so that they
yield the same batches in the same order (files sorted by class folder, then file name).

Example:
    >>> import tempfile
    >>> root = make_imagefolder(tempfile.mkdtemp(), classes=2, per_class=2, size=32)
    >>> sorted(p.name for p in root.iterdir())
    ['class_0', 'class_1']
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from netparity.errors import UsageError

__all__ = [
    "MEAN",
    "STD",
    "TorchImageFolder",
    "eval_transform",
    "list_samples",
    "make_imagefolder",
    "ms_batches",
    "ms_dataset",
    "resize_for",
    "torch_batches",
    "torch_loader",
    "train_transform",
]

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
_EXTENSIONS = (".png", ".jpg", ".jpeg")


# --------------------------------------------------------------------------- dataset generation


def _pattern(cls: int, classes: int, size: int, rng: np.random.Generator) -> np.ndarray:
    """One HxWx3 uint8 image whose stripe angle, frequency and tint depend on the class."""
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
    angle = math.pi * cls / classes + rng.uniform(-0.15, 0.15)
    freq = 2.0 + 2.0 * (cls % 3) + rng.uniform(-0.3, 0.3)
    phase = rng.uniform(0, 2 * math.pi)
    wave = np.sin(2 * math.pi * freq * (xx * math.cos(angle) + yy * math.sin(angle)) + phase)
    tint = np.array(
        [
            0.5 + 0.4 * math.cos(2 * math.pi * cls / classes),
            0.5 + 0.4 * math.sin(2 * math.pi * cls / classes),
            0.5 - 0.3 * math.cos(2 * math.pi * cls / classes),
        ],
        dtype=np.float32,
    )
    img = 0.5 + 0.35 * wave[..., None] * tint[None, None, :] + 0.25 * (tint - 0.5)
    img = img + rng.normal(0.0, 0.04, size=img.shape)
    return (np.clip(img, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)


def make_imagefolder(
    root: str | os.PathLike[str],
    classes: int = 4,
    per_class: int = 8,
    size: int = 64,
    seed: int = 0,
    fmt: str = "png",
) -> Path:
    """Write a small ImageFolder dataset (``root/class_<k>/img_<i>.<fmt>``) and return ``root``.

    Images are generated from ``seed`` (same arguments, same bytes for PNG): oriented stripes
    whose angle, frequency and colour depend on the class, plus noise, so a ResNet can learn
    them in a few steps.

    Args:
        root: output folder (created; existing files with the same names are overwritten).
        classes: number of class folders.
        per_class: images per class.
        size: image side in pixels.
        seed: numpy seed.
        fmt: ``"png"`` (lossless: both decoders agree) or ``"jpeg"``.

    Raises:
        UsageError: bad sizes or format.

    Example:
        >>> import tempfile
        >>> root = make_imagefolder(tempfile.mkdtemp(), classes=3, per_class=2, size=16)
        >>> len(list(root.glob("*/*.png")))
        6
    """
    from PIL import Image

    if classes < 1 or per_class < 1 or size < 8:
        raise UsageError("make_imagefolder needs classes >= 1, per_class >= 1 and size >= 8")
    if fmt not in ("png", "jpeg", "jpg"):
        raise UsageError(f"image format must be png or jpeg, got {fmt!r}")
    ext = "png" if fmt == "png" else "jpg"
    out = Path(root)
    rng = np.random.default_rng(seed)
    for cls in range(classes):
        folder = out / f"class_{cls}"
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            img = Image.fromarray(_pattern(cls, classes, size, rng), mode="RGB")
            if ext == "png":
                img.save(folder / f"img_{i:03d}.png", format="PNG")
            else:
                img.save(folder / f"img_{i:03d}.jpg", format="JPEG", quality=95)
    return out


def list_samples(root: str | os.PathLike[str]) -> tuple[list[tuple[Path, int]], list[str]]:
    """(path, label) pairs and class names in ImageFolder order (sorted folders, sorted files).

    Raises:
        UsageError: the folder is missing or holds no images.

    Example:
        >>> import tempfile
        >>> samples, names = list_samples(make_imagefolder(tempfile.mkdtemp(), 2, 1, 16))
        >>> [s[1] for s in samples], names
        ([0, 1], ['class_0', 'class_1'])
    """
    base = Path(root)
    if not base.is_dir():
        raise UsageError(f"dataset folder not found: {base}")
    names = sorted(p.name for p in base.iterdir() if p.is_dir())
    samples = [
        (f, label)
        for label, name in enumerate(names)
        for f in sorted((base / name).iterdir())
        if f.suffix.lower() in _EXTENSIONS
    ]
    if not samples:
        raise UsageError(f"no images under {base} (expected <root>/<class>/<image>.png|jpg)")
    return samples, names


# --------------------------------------------------------------------------- numpy/PIL transforms


def resize_for(image_size: int) -> int:
    """Shorter-side resize that precedes a centre crop of ``image_size`` (224 -> 256).

    Example:
        >>> resize_for(224), resize_for(56)
        (256, 64)
    """
    return int(round(image_size * 256 / 224))


def _resize_shorter(img: Any, size: int) -> Any:
    """torchvision ``Resize(int)`` on a PIL image: shorter side to ``size``, bilinear."""
    from PIL import Image

    w, h = img.size
    if min(w, h) == size:
        return img
    if w <= h:
        new = (size, int(size * h / w))
    else:
        new = (int(size * w / h), size)
    return img.resize(new, Image.Resampling.BILINEAR)


def _center_crop(img: Any, size: int) -> Any:
    w, h = img.size
    # torchvision rounds the offsets this way.
    top = int(round((h - size) / 2.0))
    left = int(round((w - size) / 2.0))
    return img.crop((left, top, left + size, top + size))


def _to_chw_normalised(img: Any) -> np.ndarray:
    arr = np.asarray(img, dtype=np.float32) / np.float32(255.0)
    arr = (arr - np.asarray(MEAN, np.float32)) / np.asarray(STD, np.float32)
    return np.ascontiguousarray(arr.transpose(2, 0, 1))


def eval_transform(img: Any, image_size: int = 224) -> np.ndarray:
    """Resize shorter side -> centre crop -> [0,1] -> normalise -> CHW float32.

    Example:
        >>> from PIL import Image
        >>> eval_transform(Image.new("RGB", (64, 80)), image_size=56).shape
        (3, 56, 56)
    """
    return _to_chw_normalised(
        _center_crop(_resize_shorter(img, resize_for(image_size)), image_size)
    )


def train_transform(img: Any, image_size: int, rng: np.random.Generator) -> np.ndarray:
    """RandomResizedCrop(scale 0.08-1, ratio 3/4-4/3) + horizontal flip p=0.5, then normalise.

    Example:
        >>> from PIL import Image
        >>> train_transform(Image.new("RGB", (64, 64)), 56, np.random.default_rng(0)).shape
        (3, 56, 56)
    """
    from PIL import Image

    w, h = img.size
    area = w * h
    box = (0, 0, w, h)
    for _ in range(10):  # torchvision's rejection sampling, then a centre-crop fallback
        target = area * rng.uniform(0.08, 1.0)
        ratio = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
        cw = int(round(math.sqrt(target * ratio)))
        ch = int(round(math.sqrt(target / ratio)))
        if 0 < cw <= w and 0 < ch <= h:
            top = int(rng.integers(0, h - ch + 1))
            left = int(rng.integers(0, w - cw + 1))
            box = (left, top, left + cw, top + ch)
            break
    else:
        side = min(w, h)
        box = ((w - side) // 2, (h - side) // 2, (w - side) // 2 + side, (h - side) // 2 + side)
    out = img.crop(box).resize((image_size, image_size), Image.Resampling.BILINEAR)
    if rng.uniform() < 0.5:
        out = out.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return _to_chw_normalised(out)


def _load_rgb(path: Path) -> Any:
    from PIL import Image

    with Image.open(path) as img:
        return img.convert("RGB")


# --------------------------------------------------------------------------- PyTorch pipeline


class TorchImageFolder:
    """A ``torch.utils.data.Dataset`` over an ImageFolder tree (map-style, numpy/PIL transforms).

    Args:
        root: dataset folder.
        train: random resized crop + flip (unless ``deterministic``) instead of resize + crop.
        image_size: crop size.
        deterministic: always use the evaluation transform.
        seed: seed of the augmentation RNG (per item: ``seed``, epoch and index).

    Example:
        >>> import tempfile
        >>> ds = TorchImageFolder(make_imagefolder(tempfile.mkdtemp(), 2, 2, 32), image_size=28)
        >>> img, label = ds[3]
        >>> img.shape, label
        ((3, 28, 28), 1)
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        train: bool = False,
        image_size: int = 224,
        deterministic: bool = False,
        seed: int = 0,
    ) -> None:
        self.samples, self.classes = list_samples(root)
        self.train = train and not deterministic
        self.image_size = image_size
        self.seed = seed
        self.epoch = 0

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[np.ndarray, int]:
        path, label = self.samples[index]
        img = _load_rgb(path)
        if self.train:
            rng = np.random.default_rng((self.seed, self.epoch, index))
            return train_transform(img, self.image_size, rng), label
        return eval_transform(img, self.image_size), label


def torch_loader(
    root: str | os.PathLike[str],
    train: bool = False,
    image_size: int = 224,
    batch_size: int = 32,
    shuffle: bool | None = None,
    deterministic: bool = False,
    drop_last: bool = True,
    seed: int = 0,
    num_workers: int = 0,
) -> Any:
    """A ``DataLoader`` yielding ``(float32 NCHW tensor, int64 labels)``.

    ``shuffle`` defaults to ``train``; ``deterministic`` forces no shuffle and no augmentation.

    Example:
        >>> import tempfile
        >>> root = make_imagefolder(tempfile.mkdtemp(), 2, 2, 32)
        >>> x, y = next(iter(torch_loader(root, image_size=28, batch_size=2)))
        >>> tuple(x.shape), y.tolist()
        ((2, 3, 28, 28), [0, 0])
    """
    import torch
    from torch.utils.data import DataLoader, Dataset

    class _Wrapped(Dataset):  # type: ignore[type-arg]
        def __init__(self, inner: TorchImageFolder) -> None:
            self.inner = inner

        def __len__(self) -> int:
            return len(self.inner)

        def __getitem__(self, i: int) -> tuple[Any, int]:
            img, label = self.inner[i]
            return torch.from_numpy(img), label

    folder = TorchImageFolder(root, train, image_size, deterministic, seed)
    do_shuffle = (train if shuffle is None else shuffle) and not deterministic
    gen = torch.Generator().manual_seed(seed)
    return DataLoader(
        _Wrapped(folder),
        batch_size=batch_size,
        shuffle=do_shuffle,
        drop_last=drop_last,
        num_workers=num_workers,
        generator=gen,
    )


def torch_batches(
    root: str | os.PathLike[str], image_size: int, batch_size: int, count: int | None = None
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Deterministic batches of the PyTorch pipeline as numpy ``(images, int64 labels)``.

    Example:
        >>> import tempfile
        >>> b = torch_batches(make_imagefolder(tempfile.mkdtemp(), 2, 2, 32), 28, 2)
        >>> len(b), b[0][0].dtype.name, b[1][1].tolist()
        (2, 'float32', [1, 1])
    """
    loader = torch_loader(root, image_size=image_size, batch_size=batch_size, deterministic=True)
    return _take(((x.numpy(), y.numpy()) for x, y in loader), count)


def _take(
    it: Iterator[tuple[np.ndarray, np.ndarray]], count: int | None
) -> list[tuple[np.ndarray, np.ndarray]]:
    out: list[tuple[np.ndarray, np.ndarray]] = []
    for item in it:
        if count is not None and len(out) >= count:
            break
        out.append(item)
    return out


# --------------------------------------------------------------------------- MindSpore pipeline


def ms_dataset(
    root: str | os.PathLike[str],
    train: bool = False,
    image_size: int = 224,
    batch_size: int = 32,
    shuffle: bool | None = None,
    deterministic: bool = False,
    decoder: str = "native",
    drop_remainder: bool = True,
    num_parallel_workers: int = 1,
    repeat_num: int = 1,
    seed: int = 0,
) -> Any:
    """The document's ``create_dataset`` on an ImageFolder tree (columns ``image``, ``label``).

    Args:
        root: dataset folder.
        train: random resized crop + flip (unless ``deterministic``).
        image_size: crop size (resize before it: :func:`resize_for`).
        batch_size: batch size (``drop_remainder`` as in the document).
        shuffle: defaults to ``train``; ignored when ``deterministic``.
        deterministic: no shuffle, evaluation transforms only.
        decoder: ``"native"`` (document), ``"pil"`` (PIL decode + resize, matches PyTorch), or
            ``"numpy"`` (GeneratorDataset over the PyTorch pipeline's arrays).
        drop_remainder: drop a last incomplete batch.
        num_parallel_workers: MindData parallelism (small: the machine is shared).
        repeat_num: ``repeat`` count (epochs).
        seed: ``mindspore.dataset.config.set_seed`` for shuffling/augmentation.

    Raises:
        UsageError: unknown ``decoder``.

    Example:
        >>> import tempfile
        >>> root = make_imagefolder(tempfile.mkdtemp(), 2, 2, 32)
        >>> ds = ms_dataset(root, image_size=28, batch_size=2, deterministic=True)
        >>> ds.get_dataset_size()
        2
    """
    import mindspore as ms
    import mindspore.dataset as mds
    from mindspore.dataset import transforms as T
    from mindspore.dataset import vision as V

    if decoder not in ("native", "pil", "numpy"):
        raise UsageError(f"decoder must be native, pil or numpy, got {decoder!r}")
    do_shuffle = (train if shuffle is None else shuffle) and not deterministic
    augment = train and not deterministic
    mds.config.set_seed(seed)

    if decoder == "numpy":
        folder = TorchImageFolder(root, augment, image_size, False, seed)

        def gen() -> Iterator[tuple[np.ndarray, np.int32]]:
            for i in range(len(folder)):
                img, label = folder[i]
                yield img, np.int32(label)

        data = mds.GeneratorDataset(
            gen, column_names=["image", "label"], shuffle=do_shuffle, num_parallel_workers=1
        )
    else:
        _, names = list_samples(root)  # validates the folder
        data = mds.ImageFolderDataset(
            str(root),
            num_parallel_workers=num_parallel_workers,
            shuffle=do_shuffle,
            extensions=list(_EXTENSIONS),
            # Pin the label of each folder to ImageFolder's sorted order.
            class_indexing={name: i for i, name in enumerate(names)},
        )
        resize = resize_for(image_size)
        trans: list[Any]
        if decoder == "pil":
            # PIL-backed ops reproduce the PyTorch pipeline's resize/crop arithmetic.
            trans = [V.Decode(to_pil=True)]
            if augment:
                trans += [V.RandomResizedCrop(image_size), V.RandomHorizontalFlip(prob=0.5)]
            else:
                trans += [V.Resize(resize), V.CenterCrop(image_size)]
            trans += [V.ToTensor(), V.Normalize(list(MEAN), list(STD), is_hwc=False)]
        else:
            trans = [V.Decode()]
            if augment:
                trans += [V.RandomResizedCrop(image_size), V.RandomHorizontalFlip(prob=0.5)]
            else:
                trans += [V.Resize(resize), V.CenterCrop(image_size)]
            trans += [
                V.Rescale(1.0 / 255.0, 0.0),
                V.Normalize(list(MEAN), list(STD)),
                V.HWC2CHW(),
            ]
        data = data.map(
            operations=T.TypeCast(ms.int32),
            input_columns="label",
            num_parallel_workers=num_parallel_workers,
        )
        data = data.map(
            operations=trans, input_columns="image", num_parallel_workers=num_parallel_workers
        )
    data = data.batch(batch_size, drop_remainder=drop_remainder)
    if repeat_num > 1:
        data = data.repeat(repeat_num)
    return data


def ms_batches(
    root: str | os.PathLike[str],
    image_size: int,
    batch_size: int,
    count: int | None = None,
    decoder: str = "pil",
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Deterministic batches of the MindSpore pipeline as numpy ``(images, int32 labels)``.

    Example:
        >>> import tempfile
        >>> b = ms_batches(make_imagefolder(tempfile.mkdtemp(), 2, 2, 32), 28, 2)
        >>> b[0][0].shape, b[1][1].tolist()
        ((2, 3, 28, 28), [1, 1])
    """
    data = ms_dataset(
        root, image_size=image_size, batch_size=batch_size, deterministic=True, decoder=decoder
    )
    it = data.create_tuple_iterator(output_numpy=True, num_epochs=1)
    return _take(((np.asarray(x), np.asarray(y)) for x, y in it), count)


def max_batch_difference(
    a: Sequence[tuple[np.ndarray, np.ndarray]], b: Sequence[tuple[np.ndarray, np.ndarray]]
) -> tuple[float, bool]:
    """(largest absolute image difference, labels equal) between two batch lists.

    Example:
        >>> x = [(np.zeros((1, 3, 2, 2), np.float32), np.array([1]))]
        >>> max_batch_difference(x, x)
        (0.0, True)
    """
    if len(a) != len(b):
        raise UsageError(f"batch counts differ: {len(a)} vs {len(b)}")
    diff = 0.0
    same = True
    for (xa, ya), (xb, yb) in zip(a, b):
        if xa.shape != xb.shape:
            raise UsageError(f"batch shapes differ: {xa.shape} vs {xb.shape}")
        diff = max(diff, float(np.max(np.abs(xa.astype(np.float64) - xb.astype(np.float64)))))
        same = same and bool(np.array_equal(ya.astype(np.int64), yb.astype(np.int64)))
    return diff, same
