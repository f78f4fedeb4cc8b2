"""Datasets and the device-resident input pipeline.

Two datasets, both CIFAR-shaped (uint8 images ``[N, 3, 32, 32]``, int64 labels, 10 classes):

- ``synthetic``: generated, deterministic, no download (see :func:`synthetic_dataset`), in two
  versions: 2 (the default: faint structures at several scales, overlapping classes, label
  noise; accuracy tells configurations apart) and 1 (bold shapes; every GPU run scores
  1.000), kept selectable so that older studies can be repeated
  (``wattlab.train.synthetic_tasks``).
- ``cifar10``: read from a user-given directory in the official ``cifar-10-batches-py`` layout.

The input pipeline follows airbench (Keller Jordan's ``airbench94.py``): the whole uint8
dataset is moved to the device once, and every batch is gathered, cropped, flipped and
normalised there, vectorised, so the training step never waits for the host.

Sharding for a fixed budget: each epoch has one permutation, drawn from a generator seeded by
``(seed, epoch)`` and identical on every rank. It is cut into global batches of exactly
``batch_size`` (the last partial batch is dropped) and rank ``r`` takes the slice
``[r*b:(r+1)*b]`` of every global batch, ``b = batch_size // world_size``. A run with 1 process
and a run with 2 processes therefore see exactly the same samples, with the same augmentation,
at every step.
"""

from __future__ import annotations

import hashlib
import pickle
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np
import torch

from wattlab.errors import ConfigError, DataError
from wattlab.train.synthetic_tasks import LOOK_ALIKE, TASKS, V1, ShapesTask

if TYPE_CHECKING:
    from wattlab.train.config import RunConfig

NUM_CLASSES = 10
IMAGE_SHAPE = (3, 32, 32)
SYNTHETIC_SEED = 20_240_611  # fixed, independent of the run seed: every machine sees the same data
SYNTHETIC_TRAIN = 50_000
SYNTHETIC_TEST = 10_000
SYNTHETIC_VERSION = 2  # bump when the v1 generator changes (it names the on-disk cache file)
DEFAULT_SYNTHETIC_TASK = 2  # RunConfig.synthetic_version's default (synthetic_tasks.TASKS)
_TASK2_GENERATOR = 1  # bump when version 2's images change (it names its cache file)
CROP_PAD = 4  # random-crop padding in pixels (reflect padding, as in airbench)

CIFAR_TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
CIFAR_TEST_FILE = "test_batch"


@dataclass(frozen=True)
class Dataset:
    """Images as uint8 ``[N, 3, 32, 32]`` (0-255), labels as int64 ``[N]`` in ``[0, 10)``."""

    name: str
    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    num_classes: int = NUM_CLASSES

    @property
    def train_size(self) -> int:
        return int(self.train_y.shape[0])

    @property
    def test_size(self) -> int:
        return int(self.test_y.shape[0])


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------


def load_dataset(
    source: RunConfig | str = "synthetic",
    *,
    data_dir: str | Path | None = None,
    train_samples: int | None = None,
    test_samples: int | None = None,
    cache_dir: str | Path | None = None,
) -> Dataset:
    """Load a dataset by name, or the one a ``RunConfig`` names (its ``dataset``, ``data_dir``,
    ``train_samples`` and ``test_samples``; keyword arguments given here take precedence).

    ``train_samples`` / ``test_samples`` keep the first N images of each split. ``cache_dir``
    (synthetic only) stores the generated splits as ``.pt`` files to skip the generation next
    time; the data is also cached in memory for the life of the process.
    """
    if isinstance(source, str):
        name = source
    else:
        name = source.dataset
        data_dir = data_dir if data_dir is not None else source.data_dir
        train_samples = train_samples if train_samples is not None else source.train_samples
        test_samples = test_samples if test_samples is not None else source.test_samples
    for label, value in (("train_samples", train_samples), ("test_samples", test_samples)):
        if value is not None and value <= 0:
            raise ConfigError(f"{label} must be a positive whole number, got {value}.")
    if name == "synthetic":
        version = DEFAULT_SYNTHETIC_TASK if isinstance(source, str) else source.synthetic_version
        return synthetic_dataset(train_samples, test_samples, cache_dir=cache_dir, version=version)
    if name == "cifar10":
        if data_dir is None:
            raise ConfigError("dataset 'cifar10' needs a data directory (cifar-10-batches-py).")
        return load_cifar10(data_dir, train_samples=train_samples, test_samples=test_samples)
    raise ConfigError(f"unknown dataset {name!r}; allowed: synthetic, cifar10.")


# --------------------------------------------------------------------------------------------
# CIFAR-10 from the official python pickles
# --------------------------------------------------------------------------------------------


def find_cifar10_dir(data_dir: str | Path) -> Path:
    """The folder holding ``data_batch_1..5`` and ``test_batch``: DIR or DIR/cifar-10-batches-py."""
    root = Path(data_dir).expanduser()
    if not root.is_dir():
        raise DataError(
            f"CIFAR-10 directory {str(root)!r} does not exist; expected a folder holding "
            "cifar-10-batches-py (data_batch_1..5, test_batch)."
        )
    for candidate in (root, root / "cifar-10-batches-py"):
        if (candidate / CIFAR_TEST_FILE).is_file():
            return candidate
    return root if (root / CIFAR_TRAIN_FILES[0]).is_file() else root / "cifar-10-batches-py"


CIFAR_MAX_BATCH_BYTES = 256 * 1024 * 1024  # an official batch is 31 MB; no batch comes near this
_CIFAR_EXPECTED = 'a pickled dict with b"data" (uint8 [N, 3072]) and b"labels" (N ints in 0..9)'
_PLAIN_DATA = "dict, bytes, str, list, int and numpy arrays"


def _numpy_reconstruct() -> Any:
    try:
        from numpy._core.multiarray import _reconstruct  # numpy >= 2
    except ImportError:  # pragma: no cover - numpy 1.x
        from numpy.core.multiarray import _reconstruct  # type: ignore[no-redef]
    return _reconstruct


def _latin1_encode(text: str, encoding: str = "utf-8") -> bytes:
    """``_codecs.encode`` as a protocol-2 pickle of ``bytes`` uses it: latin-1 only."""
    if not isinstance(text, str) or encoding != "latin1":
        raise pickle.UnpicklingError("_codecs.encode with anything but a latin1 str")
    return text.encode("latin1")


def _array_reconstruct(cls: Any, shape: Any, dtype_char: Any) -> Any:
    """numpy's ``_reconstruct``, for plain ndarrays only (never a subclass)."""
    if cls is not np.ndarray:
        raise pickle.UnpicklingError("_reconstruct of something other than numpy.ndarray")
    return _numpy_reconstruct()(cls, shape, dtype_char)


# What a CIFAR batch may reference (python 2 pickles from the official archive reference the
# numpy names; python 3 protocol-2 pickles of bytes add _codecs.encode). Nothing else.
_CIFAR_GLOBALS: dict[tuple[str, str], Any] = {
    ("numpy.core.multiarray", "_reconstruct"): _array_reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _array_reconstruct,
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("_codecs", "encode"): _latin1_encode,
}


class UnsafePickleError(DataError):
    """A data file that asks to import or call something a plain data file never needs."""


class _DataOnlyUnpickler(pickle.Unpickler):
    """An unpickler that builds plain data only: dict, bytes, str, list, int, float, tuple
    and numpy arrays. Any other global (os.system, builtins.eval, ...) is refused before it
    is looked up, so a hostile batch runs no code."""

    def find_class(self, module: str, name: str) -> Any:
        found = _CIFAR_GLOBALS.get((module, name))
        if found is None:
            raise UnsafePickleError(f"{module}.{name}")
        return found


def load_data_pickle(path: Path) -> Any:
    """Unpickle the data file ``path`` (python-2 strings as bytes) allowing plain data only.

    Raises UnsafePickleError (one sentence) when the file references anything else."""
    with path.open("rb") as f:
        try:
            return _DataOnlyUnpickler(f, encoding="bytes").load()
        except UnsafePickleError as error:
            raise UnsafePickleError(
                f"CIFAR-10 file {str(path)!r} asks to load {error}, which no data file needs; "
                f"wattlab loads only {_PLAIN_DATA} from a data file, so it was not loaded."
            ) from None


def _check_batch_file(path: Path) -> None:
    """The batch is a regular file of a plausible size (checked without reading it)."""
    import stat

    try:
        st = path.stat()
    except OSError:
        raise DataError(
            f"CIFAR-10 file {str(path)!r} is missing; expected {_CIFAR_EXPECTED}."
        ) from None
    if not stat.S_ISREG(st.st_mode):
        raise DataError(f"CIFAR-10 file {str(path)!r} is not a regular file.")
    if st.st_size > CIFAR_MAX_BATCH_BYTES:
        raise DataError(
            f"CIFAR-10 file {str(path)!r} is {st.st_size / 2**20:.0f} MiB, more than the "
            f"{CIFAR_MAX_BATCH_BYTES // 2**20} MiB a batch may be (an official batch is 30 MiB)."
        )


def _read_cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One pickle: ``{b"data": uint8 [N, 3072], b"labels": [N] in 0..9}`` -> (x, y) arrays."""
    expected = _CIFAR_EXPECTED
    _check_batch_file(path)
    try:
        batch: object = load_data_pickle(path)
    except UnsafePickleError:
        raise
    except Exception as error:  # any unpickling failure is a malformed file
        raise DataError(
            f"CIFAR-10 file {str(path)!r} could not be read ({type(error).__name__}); "
            f"expected {expected}."
        ) from None
    if not isinstance(batch, dict) or b"data" not in batch or b"labels" not in batch:
        raise DataError(f"CIFAR-10 file {str(path)!r} is malformed; expected {expected}.")
    try:
        x = np.asarray(batch[b"data"])
        y = np.asarray(batch[b"labels"])
    except Exception:
        raise DataError(f"CIFAR-10 file {str(path)!r} is malformed; expected {expected}.") from None
    ok = (
        x.dtype == np.uint8
        and x.ndim == 2
        and x.shape[1] == 3 * 32 * 32
        and y.ndim == 1
        and y.shape[0] == x.shape[0]
        and x.shape[0] > 0
        and np.issubdtype(y.dtype, np.integer)
        and int(y.min()) >= 0
        and int(y.max()) < NUM_CLASSES
    )
    if not ok:
        raise DataError(
            f"CIFAR-10 file {str(path)!r} has data {x.dtype} {list(x.shape)} and labels "
            f"{list(y.shape)}; expected {expected}."
        )
    return x.reshape(-1, *IMAGE_SHAPE), y.astype(np.int64)


_checked_batches: set[tuple[str, int, int]] = set()  # (path, size, mtime_ns) known good


def check_cifar10_dir(data_dir: str | Path, *, open_files: bool = True) -> Path:
    """Check a CIFAR-10 folder before any work: every batch file (data_batch_1..5 and
    test_batch) is present, a regular file of a plausible size, and, with ``open_files``,
    parses as plain data of the right shape. Without ``open_files`` (a dry run) no data file
    is opened. Returns the folder; raises DataError (one sentence)."""
    folder = find_cifar10_dir(data_dir)
    names = (*CIFAR_TRAIN_FILES, CIFAR_TEST_FILE)
    missing = [f for f in names if not (folder / f).is_file()]
    if missing:
        raise DataError(
            f"CIFAR-10 folder {str(folder)!r} lacks {', '.join(missing)}; expected the "
            "cifar-10-batches-py files data_batch_1..5 and test_batch."
        )
    for name in names:
        path = folder / name
        _check_batch_file(path)
        if not open_files:
            continue
        st = path.stat()
        key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
        if key in _checked_batches:
            continue
        _read_cifar_batch(path)
        _checked_batches.add(key)
    return folder


def _read_cifar_split(
    folder: Path, files: tuple[str, ...], limit: int | None
) -> tuple[torch.Tensor, torch.Tensor]:
    xs: list[np.ndarray] = []
    ys: list[np.ndarray] = []
    have = 0
    for name in files:
        if limit is not None and have >= limit:
            break
        x, y = _read_cifar_batch(folder / name)
        xs.append(x)
        ys.append(y)
        have += len(y)
    images = torch.from_numpy(np.ascontiguousarray(np.concatenate(xs)))
    labels = torch.from_numpy(np.concatenate(ys))
    if limit is not None:
        images, labels = images[:limit].clone(), labels[:limit].clone()
    return images, labels


def load_cifar10(
    data_dir: str | Path, *, train_samples: int | None = None, test_samples: int | None = None
) -> Dataset:
    """CIFAR-10 from ``data_dir`` (the ``cifar-10-batches-py`` folder or its parent)."""
    folder = find_cifar10_dir(data_dir)
    train_x, train_y = _read_cifar_split(folder, CIFAR_TRAIN_FILES, train_samples)
    test_x, test_y = _read_cifar_split(folder, (CIFAR_TEST_FILE,), test_samples)
    return Dataset("cifar10", train_x, train_y, test_x, test_y)


# --------------------------------------------------------------------------------------------
# Synthetic shapes
# --------------------------------------------------------------------------------------------
#
# Each image: a noisy background (random base colour, a random linear colour gradient, pixel
# noise, 0-3 specks of clutter: small rectangles of any colour) with the class's *structure*
# pasted at a random position, in a random colour that contrasts with the background (lighter
# on dark backgrounds, darker on light ones). The ten structures are shapes, arrangements and
# textures:
#
#   0 filled square   1 hollow square   2 plus            3 diagonal cross   4 disk
#   5 ring            6 horizontal bars 7 vertical bars   8 checkerboard     9 triangle
#
# each drawn at a random size of 12, 15 or 18 pixels. Because position, colour, contrast sign
# and size are random, no fixed pixel template separates the classes: a linear classifier on
# raw pixels stays near chance, while a CNN (local, translation-equivariant filters) learns
# the shapes within a few epochs. (Smaller structures, 7-11 px, were tried first: small CNNs
# with max-pooling still learnt them at once, but torchvision ResNets, which average-pool,
# learnt them far more slowly than CIFAR-10.)
#
# Generation is vectorised in chunks of _CHUNK images; chunk k of a split is drawn from its
# own generator seeded by (seed, split, k), so the first N images do not depend on how many
# are generated (train_samples=N is a true prefix of the full split) and the output is
# identical on every machine.

_CHUNK = 2048
_MAX_SIZE = max(max(t.sizes) for t in TASKS.values())
_GRADIENT = 0.25  # max change of the background across the image, per channel

# keyed by (task version, seed, split)
_memory_cache: dict[tuple[int, int, str], tuple[torch.Tensor, torch.Tensor]] = {}
_memory_lock = threading.Lock()


def _templates(sizes: tuple[int, ...]) -> torch.Tensor:
    """Binary masks ``[10 classes, len(sizes), S, S]`` (S the largest size of any task);
    size s occupies the top-left s x s."""
    out = torch.zeros(NUM_CLASSES, len(sizes), _MAX_SIZE, _MAX_SIZE)
    for k, s in enumerate(sizes):
        i = torch.arange(s).view(-1, 1).expand(s, s)  # row
        j = torch.arange(s).view(1, -1).expand(s, s)  # column
        c = (s - 1) / 2
        u = (j - c) / (s / 2)  # -1..1 across
        v = (i - c) / (s / 2)  # -1..1 down
        r2 = u**2 + v**2
        band = max(1, s // 7)  # half-width of plus arms and cross lines
        border = max(1, s // 5)
        masks = [
            torch.ones(s, s, dtype=torch.bool),  # filled square
            (i < border) | (i >= s - border) | (j < border) | (j >= s - border),  # hollow
            ((i - c).abs() <= band - 0.5) | ((j - c).abs() <= band - 0.5),  # plus
            ((i - j).abs() <= band - 1) | ((i + j - (s - 1)).abs() <= band - 1),  # cross
            r2 <= 1.0,  # disk
            (r2 <= 1.0) & (r2 >= 0.4),  # ring
            (i // 2) % 2 == 0,  # horizontal bars
            (j // 2) % 2 == 0,  # vertical bars
            ((i // 2) + (j // 2)) % 2 == 0,  # checkerboard
            u.abs() <= (v + 1) / 2,  # triangle, apex up
        ]
        for cls, mask in enumerate(masks):
            out[cls, k, :s, :s] = mask.float()
    return out


def _chunk_seed(seed: int, split: str, index: int, key: str = V1.seed_key) -> int:
    digest = hashlib.sha256(f"{key}:{seed}:{split}:{index}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def _synthetic_chunk(
    templates: torch.Tensor, n: int, seed: int, task: ShapesTask = V1, *, train: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` images (uint8 [n, 3, 32, 32]) and labels from one seeded generator. Version 1
    draws exactly what it always drew (its extra draws below are skipped)."""
    g = torch.Generator().manual_seed(seed)
    h = w = 32
    labels = torch.randint(0, NUM_CLASSES, (n,), generator=g)
    structure = labels
    if task.confusion > 0:  # overlapping classes: the look-alike's structure, same label
        swap = torch.rand(n, generator=g) < task.confusion
        structure = torch.where(swap, torch.tensor(LOOK_ALIKE)[labels], labels)
    # Background: base colour + linear gradient + noise, in 0..1.
    base = torch.rand(n, 3, 1, 1, generator=g) * 0.8 + 0.1
    grad = (torch.rand(n, 3, 2, generator=g) * 2 - 1) * _GRADIENT
    ys = torch.linspace(-0.5, 0.5, h).view(1, 1, h, 1)
    xs = torch.linspace(-0.5, 0.5, w).view(1, 1, 1, w)
    background = base + grad[..., 0:1, None] * ys + grad[..., 1:2, None] * xs
    # Structure colour: away from the background base, per channel.
    lo, hi = task.contrast
    delta = torch.rand(n, 3, 1, 1, generator=g) * (hi - lo) + lo
    colour = torch.where(base < 0.5, base + delta, base - delta)
    # Mask: the class template at a random size and position (read back through a gather).
    size_idx = torch.randint(0, len(task.sizes), (n,), generator=g)
    sizes = torch.tensor(task.sizes)[size_idx]
    tmpl = templates[structure, size_idx]  # [n, S, S], size s in the top-left corner
    py = (torch.rand(n, generator=g) * (h - sizes + 1)).long().view(n, 1, 1)
    px = (torch.rand(n, generator=g) * (w - sizes + 1)).long().view(n, 1, 1)
    ty = torch.arange(h).view(1, h, 1) - py  # template row under each image row, [n, h, 1]
    tx = torch.arange(w).view(1, 1, w) - px  # [n, 1, w]
    inside = (ty >= 0) & (ty < _MAX_SIZE) & (tx >= 0) & (tx < _MAX_SIZE)
    rows_n = torch.arange(n).view(n, 1, 1)
    mask = tmpl[rows_n, ty.clamp(0, _MAX_SIZE - 1), tx.clamp(0, _MAX_SIZE - 1)] * inside
    mask = mask.unsqueeze(1)  # [n, 1, h, w]
    # Clutter: 0-3 specks (1-3 px rectangles, any colour) under the structure.
    n_specks = torch.randint(0, task.max_specks + 1, (n,), generator=g)
    grid_y = torch.arange(h).view(1, h, 1)
    grid_x = torch.arange(w).view(1, 1, w)
    for speck in range(task.max_specks):
        y0, x0 = (torch.randint(0, 31, (2, n, 1, 1), generator=g)).unbind(0)
        sy, sx = (torch.randint(1, task.speck_px + 1, (2, n, 1, 1), generator=g)).unbind(0)
        inside = (grid_y >= y0) & (grid_y < y0 + sy) & (grid_x >= x0) & (grid_x < x0 + sx)
        inside = (inside & (speck < n_specks).view(n, 1, 1)).unsqueeze(1).float()
        speck_colour = torch.rand(n, 3, 1, 1, generator=g)
        background = background * (1 - inside) + speck_colour * inside
    image = background * (1 - mask) + colour * mask
    image += torch.randn(n, 3, h, w, generator=g) * task.noise_std
    image = (image.clamp_(0, 1) * 255).round_().to(torch.uint8)
    if train and task.label_noise > 0:  # training labels only: the test labels stay true
        noisy = torch.rand(n, generator=g) < task.label_noise
        labels = torch.where(noisy, torch.randint(0, NUM_CLASSES, (n,), generator=g), labels)
    return image, labels


def _synthetic_split(
    split: str, n: int, seed: int, version: int = DEFAULT_SYNTHETIC_TASK
) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``n`` images of a split, generated chunk by chunk (cached in memory)."""
    with _memory_lock:
        empty = (torch.empty(0, *IMAGE_SHAPE, dtype=torch.uint8), torch.empty(0, dtype=torch.long))
        x, y = _memory_cache.get((version, seed, split), empty)
        if y.shape[0] < n:
            # Cached prefixes are whole chunks, so generation resumes at a chunk boundary.
            task = TASKS[version]
            templates = _templates(task.sizes)
            xs, ys = [x], [y]
            for index in range(y.shape[0] // _CHUNK, -(-n // _CHUNK)):
                chunk_seed = _chunk_seed(seed, split, index, task.seed_key)
                cx, cy = _synthetic_chunk(
                    templates, _CHUNK, chunk_seed, task, train=split == "train"
                )
                xs.append(cx)
                ys.append(cy)
            x, y = torch.cat(xs), torch.cat(ys)
            _memory_cache[(version, seed, split)] = (x, y)
        return x[:n], y[:n]


def check_synthetic_version(version: int) -> int:
    """``version`` when it names a synthetic task; a ConfigError (one sentence) otherwise."""
    if version not in TASKS:
        raise ConfigError(
            f"synthetic_version must be one of {', '.join(map(str, TASKS))}, got {version!r}."
        )
    return version


def synthetic_dataset(
    train_samples: int | None = None,
    test_samples: int | None = None,
    *,
    seed: int = SYNTHETIC_SEED,
    cache_dir: str | Path | None = None,
    version: int = DEFAULT_SYNTHETIC_TASK,
) -> Dataset:
    """The synthetic dataset: 50 000 train / 10 000 test images, 10 classes.

    ``version`` 2 (the default) and 1 are described in ``wattlab.train.synthetic_tasks``.
    Deterministic in ``seed`` (a fixed default, independent of the run seed). Train and test
    are drawn from separate streams. ``train_samples`` / ``test_samples`` keep the first N.
    """
    check_synthetic_version(version)
    n_train = min(train_samples or SYNTHETIC_TRAIN, SYNTHETIC_TRAIN)
    n_test = min(test_samples or SYNTHETIC_TEST, SYNTHETIC_TEST)
    if cache_dir is not None:
        # The disk cache holds whole splits: generate them once, then every size is a slice.
        _load_disk_cache(Path(cache_dir), seed, version)
        _synthetic_split("train", SYNTHETIC_TRAIN, seed, version)
        _synthetic_split("test", SYNTHETIC_TEST, seed, version)
        _save_disk_cache(Path(cache_dir), seed, version)
    train_x, train_y = _synthetic_split("train", n_train, seed, version)
    test_x, test_y = _synthetic_split("test", n_test, seed, version)
    return Dataset("synthetic", train_x, train_y, test_x, test_y)


CACHE_ENV = "WATTLAB_CACHE_DIR"  # where generated data is cached; "off" turns the cache off


def default_cache_dir() -> Path | None:
    """$WATTLAB_CACHE_DIR, else $XDG_CACHE_HOME/wattlab, else ~/.cache/wattlab; None for "off"
    (``cache_files.cache_folder``, the rule of every cache)."""
    from wattlab.cache_files import cache_folder

    return cache_folder()


_saved_len: dict[tuple[int, int, str], int] = {}  # images of each split known to be on disk


def _disk_cache_path(cache_dir: Path, seed: int, split: str, version: int) -> Path:
    if version == 1:  # the name version 1's files always had
        return cache_dir / f"wattlab-synthetic-v{SYNTHETIC_VERSION}-{seed}-{split}.pt"
    return cache_dir / f"wattlab-synthetic-task{version}-g{_TASK2_GENERATOR}-{seed}-{split}.pt"


MAX_CACHE_FILE_BYTES = 1 << 30  # a split's file is ~160 MB; anything larger is not ours


def _load_disk_cache(cache_dir: Path, seed: int, version: int) -> None:
    """Read each split's cache file into memory, when it is this user's own (a regular file,
    owned by the user, writable by nobody else: ``wattlab.cache_files``); a file that is not,
    or that is broken, is said in one line and regenerated."""
    import wattlab.cache_files as cache_files

    for split in ("train", "test"):
        key = (version, seed, split)
        path = _disk_cache_path(cache_dir, seed, split, version)
        if key in _memory_cache:
            continue
        try:
            handle = cache_files.open_entry(path, MAX_CACHE_FILE_BYTES)
        except cache_files.Untrusted as error:
            cache_files.note(path, str(error), "the data is generated again")
            continue
        if handle is None:
            continue
        try:
            with handle:
                blob = torch.load(handle, weights_only=True)
            x, y = blob["x"], blob["y"]
        except Exception:
            continue  # a broken cache file is regenerated and overwritten
        if x.dtype == torch.uint8 and x.shape[1:] == IMAGE_SHAPE and len(x) % _CHUNK == 0:
            with _memory_lock:
                _memory_cache[key] = (x, y)
                _saved_len[key] = len(x)


def _save_disk_cache(cache_dir: Path, seed: int, version: int) -> None:
    """Write each split that grew beyond what is on disk (``cache_files.write_entry``: a new
    temporary file with a random name, never through a link, renamed into place; a failure is
    ignored, the cache is a convenience)."""
    import wattlab.cache_files as cache_files

    for split in ("train", "test"):
        key = (version, seed, split)
        x, y = _memory_cache[key]
        path = _disk_cache_path(cache_dir, seed, split, version)
        if len(x) <= _saved_len.get(key, 0):
            continue
        blob = {"x": x, "y": y}

        def write(handle: BinaryIO, blob: dict[str, torch.Tensor] = blob) -> None:
            torch.save(blob, handle)

        if cache_files.write_entry(path, write) is not None:
            _saved_len[key] = len(x)


def clear_memory_cache() -> None:
    """Forget the in-memory synthetic data (tests use it to check regeneration)."""
    with _memory_lock:
        _memory_cache.clear()
        _saved_len.clear()


# --------------------------------------------------------------------------------------------
# Sharding: one permutation per epoch, identical on every rank
# --------------------------------------------------------------------------------------------


def epoch_generator(seed: int, epoch: int) -> torch.Generator:
    """A CPU generator seeded by (seed, epoch): the same stream on every rank and machine."""
    digest = hashlib.sha256(f"wattlab-epoch:{seed}:{epoch}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") & ((1 << 63) - 1))


@dataclass(frozen=True)
class EpochPlan:
    """This rank's share of one epoch, on the CPU: ``indices[step]`` are the sample indices of
    this rank's slice of global batch ``step``; ``flip``/``shift_y``/``shift_x`` the matching
    augmentation draws (drawn for the whole global batch, so they do not depend on the world
    size)."""

    indices: torch.Tensor  # int64 [steps, per_rank_batch]
    flip: torch.Tensor  # bool [steps, per_rank_batch]
    shift_y: torch.Tensor  # int64 [steps, per_rank_batch], in [-CROP_PAD, CROP_PAD]
    shift_x: torch.Tensor

    @property
    def steps(self) -> int:
        return int(self.indices.shape[0])


def plan_epoch(
    n: int,
    batch_size: int,
    *,
    seed: int,
    epoch: int,
    world_size: int = 1,
    rank: int = 0,
    steps: int | None = None,
) -> EpochPlan:
    """Rank ``rank``'s batches for one epoch over ``n`` training samples.

    The permutation comes from :func:`epoch_generator` ``(seed, epoch)``; it is cut into
    ``n // batch_size`` global batches (the last partial batch dropped), optionally only the
    first ``steps`` of them (a partial final epoch), and rank ``r`` keeps columns
    ``[r*b:(r+1)*b]`` of each, ``b = batch_size // world_size``.
    """
    if batch_size % world_size:
        raise ConfigError(f"batch_size {batch_size} must divide evenly over {world_size} ranks.")
    full = n // batch_size
    if full == 0:
        raise ConfigError(
            f"batch_size {batch_size} is larger than the {n} training samples; "
            "use a smaller batch or more samples."
        )
    steps = full if steps is None else steps
    if not 0 < steps <= full:
        raise ConfigError(f"an epoch has 1..{full} steps, got {steps}.")
    g = epoch_generator(seed, epoch)
    perm = torch.randperm(n, generator=g)
    used = steps * batch_size
    flip = torch.rand(n, generator=g) < 0.5
    shifts = torch.randint(-CROP_PAD, CROP_PAD + 1, (2, n), generator=g)
    b = batch_size // world_size
    cols = slice(rank * b, (rank + 1) * b)

    def mine(t: torch.Tensor) -> torch.Tensor:
        return t[:used].view(steps, batch_size)[:, cols].contiguous()

    return EpochPlan(mine(perm), mine(flip), mine(shifts[0]), mine(shifts[1]))


@dataclass(frozen=True)
class DevicePlan:
    """An epoch's gather indices where the data lives (see :meth:`DeviceData.prepare`)."""

    indices: torch.Tensor  # int64 [steps, b]: sample of each image
    rows: torch.Tensor  # int64 [steps, b, H]: source row of each output row (crop, reflect)
    cols: torch.Tensor  # int64 [steps, b, W]: source column (crop, reflect, flip)

    @property
    def steps(self) -> int:
        return int(self.indices.shape[0])


# --------------------------------------------------------------------------------------------
# The device-resident pipeline
# --------------------------------------------------------------------------------------------


def _reflect(index: torch.Tensor, size: int) -> torch.Tensor:
    """Reflect-pad an index: -1 -> 1, size -> size - 2 (numpy/torch 'reflect' padding)."""
    index = index.abs()
    return torch.where(index >= size, 2 * (size - 1) - index, index)


class DeviceData:
    """The dataset on one device, with batch gathering, augmentation and normalisation there.

    Trick (airbench): the uint8 dataset is copied to the device once (4x smaller than float),
    when it fits in half the free memory; otherwise it stays in pinned host memory and each
    batch is copied with ``non_blocking=True``. Normalisation uses the training set's own
    per-channel mean/std, so the same code serves CIFAR-10 and the synthetic data.
    ``image_size`` other than the stored 32 resizes every batch on the device (bilinear, after
    crop, flip and normalisation), inside the measured step.
    """

    def __init__(
        self,
        data: Dataset,
        device: torch.device,
        *,
        channels_last: bool | None = None,
        image_size: int | None = None,
    ):
        self.device = device
        # images of another size than the stored 32x32 are resized (bilinear) after the crop
        stored = int(data.train_x.shape[-1])
        self.resize_to = None if image_size in (None, stored) else int(image_size)
        self.num_classes = data.num_classes
        self.channels_last = device.type == "cuda" if channels_last is None else channels_last
        self.memory_format = torch.channels_last if self.channels_last else torch.contiguous_format
        nbytes = sum(t.numel() * t.element_size() for t in (data.train_x, data.test_x))
        self.resident = device.type != "cuda" or _fits_on_device(nbytes, device)
        home = device if self.resident else torch.device("cpu")
        pin = device.type == "cuda" and not self.resident

        def place(t: torch.Tensor) -> torch.Tensor:
            t = t.contiguous()
            return t.pin_memory() if pin else t.to(home, non_blocking=True)

        self.train_x, self.train_y = place(data.train_x), place(data.train_y)
        self.test_x, self.test_y = place(data.test_x), place(data.test_y)
        # Per-channel statistics in the 0..255 scale, computed once, kept on the device.
        mean, std = channel_stats(data.train_x)
        self.mean = mean.float().view(1, 3, 1, 1).to(device)
        self.inv_std = (1.0 / std).float().view(1, 3, 1, 1).to(device)

    @property
    def train_size(self) -> int:
        return int(self.train_y.shape[0])

    @property
    def test_size(self) -> int:
        return int(self.test_y.shape[0])

    def _normalise(self, images: torch.Tensor) -> torch.Tensor:
        if not self.resident:
            images = images.pin_memory()  # so that the copy below is truly asynchronous
        x = images.to(self.device, non_blocking=True).float().sub_(self.mean).mul_(self.inv_std)
        if self.resize_to is not None:
            size = (self.resize_to, self.resize_to)
            x = torch.nn.functional.interpolate(x, size=size, mode="bilinear", align_corners=False)
        return x.contiguous(memory_format=self.memory_format)

    def prepare(self, plan: EpochPlan) -> DevicePlan:
        """Turn an epoch's plan into gather indices on the device, once per epoch.

        Trick: random crop (reflect padding of CROP_PAD pixels), horizontal flip and the batch
        gather become ONE indexing op on the uint8 data: row/column indices are shifted,
        reflected at the border and reversed for flipped images, so no padded copy is made and
        a step launches only the gather and the normalisation.
        """
        home = self.train_x.device
        h, w = self.train_x.shape[-2:]
        dy = plan.shift_y.to(home, non_blocking=True).unsqueeze(-1)  # [steps, b, 1]
        dx = plan.shift_x.to(home, non_blocking=True).unsqueeze(-1)
        flip = plan.flip.to(home, non_blocking=True).unsqueeze(-1)
        ar_h = torch.arange(h, device=home)
        ar_w = torch.arange(w, device=home)
        rows = _reflect(dy + ar_h, h)  # [steps, b, h]
        cols = _reflect(dx + torch.where(flip, w - 1 - ar_w, ar_w), w)  # flip: read backwards
        return DevicePlan(plan.indices.to(home, non_blocking=True), rows, cols)

    def train_batch(self, plan: DevicePlan, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs (float32, normalised, cropped, flipped) and labels for ``step`` of ``plan``."""
        idx, rows, cols = plan.indices[step], plan.rows[step], plan.cols[step]
        b, h, w = rows.shape[0], rows.shape[1], cols.shape[1]
        # Advanced indices split by ':' put their broadcast dims first -> [b, h, w, C] (NHWC).
        images = self.train_x[idx.view(b, 1, 1), :, rows.view(b, h, 1), cols.view(b, 1, w)]
        images = images.permute(0, 3, 1, 2)  # NCHW view of NHWC memory = channels_last
        return self._normalise(images), self.train_y[idx].to(self.device, non_blocking=True)

    def test_batches(
        self, batch_size: int, *, start: int = 0, stop: int | None = None, pad: bool = False
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Normalised, un-augmented test batches covering ``[start, stop)`` in order.

        With ``pad`` every image batch has exactly ``batch_size`` rows: a short last batch is
        filled up with copies of its last image (its labels stay unpadded, so ``len(labels)``
        says how many rows are real). One input shape means cuDNN's autotuning, done for the
        training step's shape, is never run again for evaluation."""
        stop = self.test_size if stop is None else stop
        for lo in range(start, stop, batch_size):
            hi = min(lo + batch_size, stop)
            images = self.test_x[lo:hi]
            if pad and hi - lo < batch_size:
                filler = images[-1:].expand(batch_size - (hi - lo), *images.shape[1:])
                images = torch.cat([images, filler])
            x = self._normalise(images)
            yield x, self.test_y[lo:hi].to(self.device, non_blocking=True)


def channel_stats(images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel mean and standard deviation (float64 ``[3]``, 0..255 scale) of uint8
    images ``[N, 3, H, W]``, summed in chunks so no float copy of the whole set is made."""
    total = torch.zeros(3, dtype=torch.float64)
    squares = torch.zeros(3, dtype=torch.float64)
    for chunk in images.split(2048):
        c = chunk.to(torch.float64)
        total += c.sum(dim=(0, 2, 3))
        squares += (c * c).sum(dim=(0, 2, 3))
    count = images.shape[0] * images.shape[2] * images.shape[3]
    mean = total / count
    std = (squares / count - mean * mean).clamp(min=1.0).sqrt()
    return mean, std


def _fits_on_device(nbytes: int, device: torch.device) -> bool:
    try:
        free, _total = torch.cuda.mem_get_info(device)
    except Exception:
        return True
    return nbytes < free // 2
