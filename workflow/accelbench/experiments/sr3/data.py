"""Sky images for Study B's SR3 super-resolution: high-resolution patches and their 4x downsampled pairs.

Study B trains SR3 on 256x256 grayscale sky maps made with PySM (galactic foregrounds). The embedded
default uses real astronomical imagery that ships with scikit-image (offline): the Hubble Deep Field
(``skimage.data.hubble_deep_field()``, RGB 872x1000), converted to grayscale. A site's own images
(PySM maps or any sky images as ``.npy``, ``.png``/``.jpg``/``.tif`` or ``.fits``) come from a folder.

Tiling is deterministic:

* held-out patches lie on the non-overlapping grid (stride = patch), every ``held_out_every``-th grid
  tile in raster order of each image (starting at the middle one of each group);
* training patches are all windows on a finer grid (stride = patch x (1 - ``train_overlap``)) that do
  not intersect any held-out patch, so no held-out pixel is ever seen in training.

Values are in [0, 1] (Hubble: 8-bit luminance / 255; folder images: min-max of each image, since sky
maps come in arbitrary units). Low-resolution pairs are made with area averaging (``factor`` x
``factor`` block means), as a pixel-integrating detector would record them.

Example::

    summary = prepare("resources/sky/hubble_small.npz", patch=64, factor=4, source="hubble")
    data = load("resources/sky/hubble_small.npz")   # {"train_hr": (N, 64, 64), "train_lr": (N, 16, 16), ...}
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from accelbench.core import files
from accelbench.errors import DataError

IMAGE_SUFFIXES = (".npy", ".png", ".jpg", ".jpeg", ".tif", ".tiff", ".fits", ".fit", ".fts")
MAX_IMAGE_BYTES = 4 * 2**30  # one sky map or picture (a 16k x 16k float64 map: 2 GiB)
MAX_PATCH_SET_BYTES = 64 * 2**30  # a patch set written by prepare (paper scale: a few GiB)
NOTICE_MIB = 64  # a patch set this large is announced before it is compressed (seconds to a minute)
FITS_SUFFIXES = (".fits", ".fit", ".fts", ".fits.gz", ".fit.gz", ".fts.gz")  # astropy reads gzipped FITS too


def _kind(path: Path) -> str | None:
    """The image suffix of ``path`` (``.fits.gz`` counts as FITS), or None."""
    name = path.name.lower()
    for suffix in FITS_SUFFIXES:
        if name.endswith(suffix):
            return ".fits"
    return path.suffix.lower() if path.suffix.lower() in IMAGE_SUFFIXES else None


def _fits_image(path: Path) -> np.ndarray:
    """The first HDU of a FITS file holding an image (tables are skipped).

    Raises:
        DataError: no image HDU (names the file and the HDU kinds found).
    """
    from astropy.io import fits

    with files.open_binary(path, "sky image", MAX_IMAGE_BYTES, DataError) as fh, fits.open(fh) as hdus:
        for hdu in hdus:
            if isinstance(hdu, (fits.PrimaryHDU, fits.ImageHDU, fits.CompImageHDU)) and hdu.data is not None:
                return np.array(hdu.data)
        kinds = ", ".join(type(h).__name__ for h in hdus)
    raise DataError(f"FITS file {path} holds no image HDU (found {kinds}); sr3_scaling.data.folder needs 2-D maps")


def hubble_gray() -> np.ndarray:
    """The Hubble Deep Field shipped with scikit-image as grayscale float32 in [0, 1], shape (872, 1000)."""
    from skimage import data
    from skimage.color import rgb2gray

    return rgb2gray(data.hubble_deep_field()).astype(np.float32)


# Sky maps (.npy, FITS) hold one plane of real values of sane magnitude: HEALPix's blank value UNSEEN (-1.6375e30) or
# values near the float64 limit would squash the min-max scaled map to two values (or to zeros and one NaN).
MAP_SUFFIXES = (".npy", ".fits")
MAX_ABS_VALUE = 1e20  # far above any physical sky value (K, Jy/sr, counts) and far below the blank sentinels
UNSEEN = -1.6375e30  # healpy.UNSEEN


def _check_map(path: Path, arr: np.ndarray) -> None:
    """A map file (.npy, FITS) holds one 2-D plane of real numbers (a picture file may be RGB: its format says so).

    Raises:
        DataError: complex or non-numeric values, or not 2-D (one line naming the file).
    """
    if np.iscomplexobj(arr):
        raise DataError(
            f"sky image {path} holds complex values ({arr.dtype}); give a real map (e.g. its abs or real part)"
        )
    if arr.dtype.kind not in "biuf":
        raise DataError(f"sky image {path} holds {arr.dtype} values, not numbers")
    if arr.ndim != 2:
        raise DataError(
            f"sky image {path} has shape {arr.shape}; a .npy or FITS map must be one 2-D plane "
            f"(an RGB picture goes in as .png/.jpg/.tif; split a cube into one file per plane)"
        )


def _check_range(path: Path, arr: np.ndarray) -> None:
    """Every value finite and within +-:data:`MAX_ABS_VALUE` (blank sentinels such as UNSEEN refused, named).

    Raises:
        DataError: one line naming the file, the first bad value and where it is.
    """
    bad = ~np.isfinite(arr)
    if bad.any():  # min-max scaling would squash the map to a constant (or zeros) around it
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise DataError(
            f"sky image {path} has {int(bad.sum())} NaN/Inf pixel(s) (first: {arr[where]} at {where}); "
            f"fill or crop them (blank FITS pixels are NaN) or move the file out of the folder"
        )
    huge = np.abs(arr) > MAX_ABS_VALUE
    if huge.any():
        where = tuple(int(i) for i in np.argwhere(huge)[0])
        value = float(arr[where])
        blank = " (HEALPix's blank value UNSEEN)" if np.isclose(value, UNSEEN, rtol=1e-4) else ""
        raise DataError(
            f"sky image {path} has {int(huge.sum())} pixel(s) beyond +-{MAX_ABS_VALUE:g} (first: {value:g}{blank} "
            f"at {where}); fill or crop blank pixels, rescale the map, or move the file out of the folder"
        )


def _read_image(path: Path) -> np.ndarray:
    """One image file as a 2-D float32 array scaled to [0, 1] by its min and max. A map (.npy, FITS) must be one 2-D
    plane of real values (:func:`_check_map`); a picture (.png, .jpg, .tif) may be RGB(A), read as grayscale. Every
    value must be finite and of sane magnitude (:func:`_check_range`).

    Raises:
        DataError: unreadable file, FITS without astropy, complex or non-numeric values, not a 2-D map (or RGB
            picture), a NaN/Inf or blank/huge value, or a constant image.
    """
    suffix = _kind(path)
    try:
        if suffix == ".npy":  # a plain file (never a FIFO or device), no pickled objects: one line naming it
            arr = files.load_numpy(path, "sky image", MAX_IMAGE_BYTES, DataError)
        elif suffix == ".fits":
            try:
                import astropy  # noqa: F401
            except ImportError:
                raise DataError(f"{path}: reading FITS needs astropy (pip install astropy)") from None
            arr = _fits_image(path)
        else:
            from skimage.io import imread

            with files.open_binary(path, "sky image", MAX_IMAGE_BYTES, DataError) as fh:
                arr = imread(fh)  # a checked plain file, never opened by name again
        arr = np.asarray(arr)
    except DataError:
        raise
    except Exception as exc:  # noqa: BLE001 - any reader error becomes a clear message
        raise DataError(f"cannot read sky image {path}: {exc}") from None
    if suffix in MAP_SUFFIXES:
        _check_map(path, arr)
    elif np.iscomplexobj(arr) or arr.dtype.kind not in "biuf":
        raise DataError(f"sky image {path} holds {arr.dtype} values, not real numbers")
    arr = arr.astype(np.float64)
    _check_range(path, arr)
    if arr.ndim == 3 and arr.shape[-1] in (3, 4):
        from skimage.color import rgb2gray

        arr = rgb2gray(arr[..., :3] / max(arr.max(), 1e-12))
    if arr.ndim != 2:
        raise DataError(f"sky image {path} has shape {arr.shape}; expected a 2-D map (or RGB)")
    lo, hi = float(arr.min()), float(arr.max())
    if hi <= lo:
        raise DataError(f"sky image {path} is constant")
    return ((arr - lo) / (hi - lo)).astype(np.float32)


def folder_images(folder: str | Path) -> list[tuple[str, np.ndarray]]:
    """Every image in ``folder`` (sorted by name), as ``(name, array)``.

    Raises:
        DataError: the folder is missing or holds no image files.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise DataError(f"sr3_scaling.data.folder {folder} is not a folder")
    files = sorted(p for p in folder.iterdir() if _kind(p))
    if not files:
        raise DataError(
            f"sr3_scaling.data.folder {folder} holds no images ({', '.join(IMAGE_SUFFIXES + FITS_SUFFIXES[3:])})"
        )
    return [(p.name, _read_image(p)) for p in files]


def tile_origins(
    shape: tuple[int, int], patch: int, held_out_every: int, train_overlap: float
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Top-left corners ``(y, x)`` of training and held-out patches in an image of ``shape``.

    Held-out: every ``held_out_every``-th tile of the non-overlapping grid (raster order, starting at
    index ``held_out_every // 2``; 0 = none). Training: windows on a grid of stride
    ``round(patch * (1 - train_overlap))`` that do not intersect a held-out tile.

    Raises:
        DataError: the image is smaller than one patch.
    """
    h, w = shape
    if h < patch or w < patch:
        raise DataError(f"image of {h}x{w} px is smaller than one {patch}x{patch} patch")
    grid = [(y, x) for y in range(0, h - patch + 1, patch) for x in range(0, w - patch + 1, patch)]
    held = [o for i, o in enumerate(grid) if held_out_every and i % held_out_every == held_out_every // 2]
    stride = max(1, round(patch * (1.0 - train_overlap)))
    # a window meets a held-out tile iff one of the (at most 2 x 2) grid cells it covers is held out: a cell table
    # (one cell more each way: the margin no tile covers) answers that for every window at once
    cells = np.zeros(((h - patch) // patch + 2, (w - patch) // patch + 2), bool)
    for hy, hx in held:
        cells[hy // patch, hx // patch] = True
    ys, xs = np.arange(0, h - patch + 1, stride), np.arange(0, w - patch + 1, stride)
    y0, y1 = np.minimum(ys // patch, len(cells) - 1), np.minimum((ys + patch - 1) // patch, len(cells) - 1)
    x0, x1 = np.minimum(xs // patch, cells.shape[1] - 1), np.minimum((xs + patch - 1) // patch, cells.shape[1] - 1)
    hit = cells[np.ix_(y0, x0)] | cells[np.ix_(y0, x1)] | cells[np.ix_(y1, x0)] | cells[np.ix_(y1, x1)]
    train = [(int(ys[i]), int(xs[j])) for i, j in zip(*np.nonzero(~hit))]  # raster order, as the windows go
    return train, held


def downsample(hr: np.ndarray, factor: int) -> np.ndarray:
    """Area (block-mean) downsampling of (..., H, W) by ``factor``; H and W must be multiples of it."""
    *lead, h, w = hr.shape
    if h % factor or w % factor:
        raise DataError(f"patch {h}x{w} is not a multiple of the downsampling factor {factor}")
    return hr.reshape(*lead, h // factor, factor, w // factor, factor).mean(axis=(-3, -1)).astype(np.float32)


def make_pairs(
    images: list[np.ndarray],
    patch: int,
    factor: int,
    held_out_every: int,
    train_overlap: float,
    names: list[str] | None = None,
) -> dict[str, np.ndarray]:
    """Training and held-out HR patches (N, patch, patch) and LR pairs (N, patch/f, patch/f), float32 in [0, 1],
    plus their origins (N, 3) = (image index, y, x).

    Raises:
        DataError: no training or no held-out patch results.
    """
    out: dict[str, list] = {"train_hr": [], "heldout_hr": [], "train_origin": [], "heldout_origin": []}
    for k, img in enumerate(images):
        try:
            train, held = tile_origins(img.shape, patch, held_out_every, train_overlap)
        except DataError as exc:
            raise DataError(f"sky image {names[k] if names else k}: {exc}") from None
        for split, origins in (("train", train), ("heldout", held)):
            for y, x in origins:
                out[f"{split}_hr"].append(img[y : y + patch, x : x + patch])
                out[f"{split}_origin"].append((k, y, x))
    if not out["train_hr"] or not out["heldout_hr"]:
        raise DataError(
            f"tiling gave {len(out['train_hr'])} training and {len(out['heldout_hr'])} held-out "
            f"{patch}x{patch} patches; both must be > 0 (lower sr3_scaling.data.held_out_every or use larger images)"
        )
    res = {k: np.stack(v).astype(np.float32 if k.endswith("hr") else np.int64) for k, v in out.items()}
    res["train_lr"] = downsample(res["train_hr"], factor)
    res["heldout_lr"] = downsample(res["heldout_hr"], factor)
    return res


def prepare(
    out: str | Path,
    patch: int,
    factor: int,
    source: str = "hubble",
    folder: str | None = None,
    held_out_every: int = 5,
    train_overlap: float = 0.5,
    notify=None,
) -> dict:
    """Build the patch set and write it as ``.npz`` (keys of :func:`make_pairs`). Returns a summary dict.
    ``notify(line)`` is told, before a patch set of :data:`NOTICE_MIB` or more is compressed, what is being written
    (``accelbench sr3-prepare`` passes the line on to the run's terminal).

    Raises:
        ConfigError-like DataError: unknown source, missing folder, or an empty split.
    """
    if source == "hubble":
        names, images = ["skimage.data.hubble_deep_field"], [hubble_gray()]
    elif source == "folder":
        if not folder:
            raise DataError("sr3_scaling.data.source is 'folder' but sr3_scaling.data.folder is not set")
        pairs = folder_images(folder)
        names, images = [n for n, _ in pairs], [a for _, a in pairs]
    else:
        raise DataError(f"sr3_scaling.data.source must be 'hubble' or 'folder', not {source!r}")
    pairs = make_pairs(images, patch, factor, held_out_every, train_overlap, names)
    mib = sum(a.nbytes for a in pairs.values()) / 2**20
    if mib >= NOTICE_MIB and notify is not None:  # compressing takes a while (~10 s per 100 MiB): say so
        notify(
            f"sky patches: {len(pairs['train_hr'])} training + {len(pairs['heldout_hr'])} held-out {patch}x{patch} "
            f"patches from {len(images)} image(s), {mib:.0f} MiB; compressing them to {out}"
        )
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.stem}.tmp.npz")
    np.savez_compressed(tmp, **pairs, sources=np.array(names))
    tmp.replace(out)
    return {
        "out": str(out),
        "sources": names,
        "patch": patch,
        "factor": factor,
        "train": int(len(pairs["train_hr"])),
        "heldout": int(len(pairs["heldout_hr"])),
    }


def load(path: str | Path) -> dict[str, np.ndarray]:
    """Read a patch set written by :func:`prepare`.

    Raises:
        DataError: missing file or missing keys.
    """
    path = Path(path)
    if not path.exists():
        raise DataError(f"sky patch set {path} not found; run its rule (sr3_prepare) first")
    data = files.load_numpy(path, "sky patch set", MAX_PATCH_SET_BYTES, DataError)  # a plain file, no pickles
    if not isinstance(data, dict):
        raise DataError(f"sky patch set {path} is a .npy array, not an .npz archive; delete it and rerun sr3_prepare")
    missing = {"train_hr", "train_lr", "heldout_hr", "heldout_lr"} - set(data)
    if missing:
        raise DataError(f"sky patch set {path} lacks {sorted(missing)}; delete it and rerun sr3_prepare")
    return data
