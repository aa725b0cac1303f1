"""3D brain MRI inputs for Study A (Med-DDPM): image + one-hot mask, as NIfTI.

Sources:
  * ``mni152``: the MNI152 2009 T1 template and its brain mask that nilearn ships (offline, real
    data). The template is a healthy brain: the tumour channel of the mask is empty.
  * ``folder``: your own data in Med-DDPM's layout, ``<folder>/image/<case>.nii.gz`` and
    ``<folder>/mask/<case>.nii.gz`` (mask = integer label map, or an already one-hot 4D volume).

Preparation (Med-DDPM's preprocessing): resample onto a grid of ``volume`` voxels of
``spacing_mm`` centred on the source volume (trilinear for the image, nearest for the mask),
min-max scale the image to [-1, 1], one-hot encode the mask over ``label_values`` (whole head:
1 = brain, 2 = tumour), and write ``image.nii.gz`` (float32, X x Y x Z) and ``mask.nii.gz``
(uint8, X x Y x Z x C).
"""

from __future__ import annotations

import logging
from pathlib import Path

import nibabel as nib
import numpy as np

from accelbench.errors import DataError

log = logging.getLogger(__name__)


def _load_nifti(path: Path) -> nib.Nifti1Image:
    if not path.exists():
        raise DataError(f"MRI input not found: {path}")
    try:
        img = nib.load(str(path))
        img.get_fdata(dtype=np.float32)  # force a read: a truncated file fails here, not later
        return img
    except Exception as exc:  # nibabel raises several types for bad files (some without a message)
        why = " ".join(str(exc).split()) or (
            "the file holds less data than its header promises (truncated?)"
            if isinstance(exc, (EOFError, OSError, ValueError))
            else type(exc).__name__
        )
        raise DataError(f"MRI input {path} is unreadable as NIfTI: {why}") from None


def find_case(folder: str | Path, case: str | None = None) -> tuple[Path, Path]:
    """The (image, mask) pair named ``case`` (or the first, sorted) in a Med-DDPM-style folder.

    Raises:
        DataError: missing folder, no NIfTI files, or an image without its mask.
    """
    folder = Path(folder)
    image_dir, mask_dir = folder / "image", folder / "mask"
    for d in (image_dir, mask_dir):
        if not d.is_dir():
            raise DataError(f"MRI folder {folder} must contain image/ and mask/ sub-folders; missing: {d}")
    images = sorted(p for p in image_dir.iterdir() if p.name.endswith((".nii", ".nii.gz")))
    if not images:
        raise DataError(f"no NIfTI files (*.nii, *.nii.gz) in {image_dir}")
    if case is not None:
        images = [p for p in images if p.name == case or p.name.split(".nii")[0] == case]
        if not images:
            raise DataError(f"case {case!r} not found in {image_dir}")
    image = images[0]
    mask = mask_dir / image.name
    if not mask.exists():
        raise DataError(f"mask for {image} not found: expected {mask}")
    return image, mask


def target_affine(
    source: nib.Nifti1Image, volume: tuple[int, int, int], spacing_mm: tuple[float, float, float]
) -> np.ndarray:
    """Affine of a ``volume`` grid with ``spacing_mm`` voxels centred on ``source``'s centre (world mm)."""
    shape = np.asarray(source.shape[:3], dtype=float)
    centre = source.affine @ np.append((shape - 1) / 2, 1.0)
    affine = np.diag(list(spacing_mm) + [1.0])
    affine[:3, 3] = centre[:3] - np.asarray(spacing_mm) * (np.asarray(volume) - 1) / 2
    return affine


def one_hot(labels: np.ndarray, label_values: list[int]) -> np.ndarray:
    """(X, Y, Z) integer labels -> (X, Y, Z, C) uint8, one channel per value in ``label_values``."""
    return np.stack([(np.rint(labels) == v) for v in label_values], axis=-1).astype(np.uint8)


def scale_to_unit_range(image: np.ndarray) -> np.ndarray:
    """Min-max scale to [-1, 1] (Med-DDPM's normalisation). A constant image maps to zeros."""
    lo, hi = float(image.min()), float(image.max())
    if hi <= lo:
        return np.zeros_like(image, dtype=np.float32)
    return ((image - lo) / (hi - lo) * 2.0 - 1.0).astype(np.float32)


def _check_pair(image_path: Path, image: nib.Nifti1Image, mask_path: Path, mask: nib.Nifti1Image, label_values) -> None:
    """A user's image and mask must give a meaningful conditioning pair: finite voxels (in both), the mask on the
    image's grid (same shape and affine: Med-DDPM's layout), a one-hot mask with one channel per label value.

    Raises:
        DataError: naming the file and the value.
    """
    data = image.get_fdata(dtype=np.float32)
    bad = ~np.isfinite(data)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise DataError(
            f"MRI image {image_path} has {int(bad.sum())} NaN/Inf voxel(s) (first: {data[where]} at "
            f"voxel {where}); fill them (e.g. with 0) before use"
        )
    labels = np.asanyarray(mask.dataobj)
    bad = ~np.isfinite(labels) if labels.dtype.kind == "f" else None
    if bad is not None and bad.any():  # np.rint(NaN) cannot become a label
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise DataError(
            f"mask {mask_path} has {int(bad.sum())} NaN/Inf voxel(s) (first: {labels[where]} at voxel {where}); "
            f"a mask holds integer labels: fill them (e.g. with 0) before use"
        )
    m_shape, i_shape = tuple(mask.shape), tuple(image.shape)
    if m_shape[:3] != i_shape[:3]:
        raise DataError(
            f"mask {mask_path} has shape {m_shape[:3]}, its image {image_path} {i_shape[:3]}: a mask "
            f"must lie on its image's voxel grid"
        )
    if not np.allclose(mask.affine, image.affine, atol=1e-3):
        raise DataError(
            f"mask {mask_path} lies on another grid than its image {image_path} (affines differ: "
            f"{np.round(mask.affine[:3, 3], 2).tolist()} vs {np.round(image.affine[:3, 3], 2).tolist()} mm "
            f"origin); resample it onto the image first"
        )
    if len(m_shape) == 4 and m_shape[3] != len(label_values):
        raise DataError(
            f"mask {mask_path} is one-hot with {m_shape[3]} channels; data.mri.label_values has "
            f"{len(label_values)} ({list(label_values)})"
        )
    if len(m_shape) > 4:
        raise DataError(f"mask {mask_path} has shape {m_shape}: a 3-D label map or a 4-D one-hot volume is needed")


def prepare(
    out_image: str | Path,
    out_mask: str | Path,
    volume: list[int],
    spacing_mm: list[float],
    source: str = "mni152",
    folder: str | None = None,
    case: str | None = None,
    label_values: list[int] = (1, 2),
) -> dict:
    """Build the prepared image/mask pair (see module docstring) and write both NIfTI files.

    Returns:
        A summary: source files, shapes, spacing, value range, brain-voxel fraction.

    Raises:
        DataError: a missing or unreadable input file, NaN voxels, a mask off the image's grid or of the wrong
            channel count, or one that resampling leaves empty (file and value named: :func:`_check_pair`).
    """
    from nilearn.image import resample_img

    if source == "mni152":
        from nilearn.datasets import load_mni152_brain_mask, load_mni152_template

        image_src, mask_src = load_mni152_template(resolution=1), load_mni152_brain_mask(resolution=1)
        sources = {"image": "nilearn MNI152 2009c T1 template (1 mm)", "mask": "nilearn MNI152 brain mask (label 1)"}
    elif source == "folder":
        if not folder:
            raise DataError("data.mri.source is 'folder' but data.mri.folder is not set")
        image_path, mask_path = find_case(folder, case)
        image_src, mask_src = _load_nifti(image_path), _load_nifti(mask_path)
        sources = {"image": str(image_path), "mask": str(mask_path)}
        shape = tuple(image_src.shape)
        if len(shape) == 4 and shape[3] == 1:
            image_src = nib.funcs.squeeze_image(image_src)
        elif len(shape) != 3:
            raise DataError(
                f"MRI image {image_path} has shape {shape}: a 3-D volume (one channel) is needed; "
                f"pick one volume of a 4-D series (e.g. nibabel.funcs.four_to_three)"
            )
        _check_pair(image_path, image_src, mask_path, mask_src, label_values)
        if np.asanyarray(mask_src.dataobj).ndim == 3:
            found = np.unique(np.rint(np.asanyarray(mask_src.dataobj)))
            labels = sorted(int(v) for v in found if v != 0)
            absent = [v for v in label_values if v not in labels]
            if len(absent) == len(label_values):
                raise DataError(
                    f"mask {mask_path} holds the labels {labels[:20]}, none of data.mri.label_values "
                    f"{list(label_values)}: the conditioning mask would be all zero; set "
                    f"data.mri.label_values to the labels of your masks"
                )
            if absent:
                log.warning(
                    "mask %s lacks the labels %s of data.mri.label_values (found %s): those channels stay zero",
                    mask_path,
                    absent,
                    labels[:20],
                )
    else:
        raise DataError(f"unknown MRI source {source!r} (mni152 | folder)")

    volume, spacing = tuple(int(v) for v in volume), tuple(float(s) for s in spacing_mm)
    affine = target_affine(image_src, volume, spacing)
    kw = dict(target_affine=affine, target_shape=volume, force_resample=True, copy_header=True)
    image = resample_img(image_src, interpolation="continuous", **kw).get_fdata(dtype=np.float32)
    image = scale_to_unit_range(image)
    mask_data = np.asanyarray(mask_src.dataobj)
    if mask_data.ndim == 4:  # already one-hot: resample each channel
        channels = [
            resample_img(
                nib.Nifti1Image(mask_data[..., c].astype(np.float32), mask_src.affine), interpolation="nearest", **kw
            ).get_fdata()
            for c in range(mask_data.shape[-1])
        ]
        mask = (np.stack(channels, axis=-1) > 0.5).astype(np.uint8)
    else:
        labels = resample_img(
            nib.Nifti1Image(mask_data.astype(np.float32), mask_src.affine), interpolation="nearest", **kw
        ).get_fdata()
        mask = one_hot(labels, list(label_values))

    if source == "folder" and mask_data.any() and not mask.any():
        raise DataError(
            f"mask {sources['mask']} is all zero on the {volume} grid of data.mri.spacing_mm {list(spacing)} "
            f"centred on the image: its labels lie outside that grid"
        )
    for path in (out_image, out_mask):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    nib.save(nib.Nifti1Image(image, affine), str(out_image))
    nib.save(nib.Nifti1Image(mask, affine), str(out_mask))
    return {
        "sources": sources,
        "volume": list(volume),
        "spacing_mm": list(spacing),
        "image_range": [float(image.min()), float(image.max())],
        "mask_channels": int(mask.shape[-1]),
        "mask_fraction": [float(mask[..., c].mean()) for c in range(mask.shape[-1])],
    }


def load_case(image_path: str | Path, mask_path: str | Path, image_channels: int, mask_channels: int):
    """Prepared NIfTI pair -> ``(image, mask)`` float32 tensors of shape (1, C, X, Y, Z).

    The image is repeated to ``image_channels`` (a single T1 stands in for BraTS' four modalities);
    the mask is zero-padded to ``mask_channels``.

    Raises:
        DataError: unreadable files, or a mask with more channels than ``mask_channels``.
    """
    import torch

    image = _load_nifti(Path(image_path)).get_fdata(dtype=np.float32)
    mask = np.asanyarray(_load_nifti(Path(mask_path)).dataobj).astype(np.float32)
    if mask.ndim == 3:
        mask = mask[..., None]
    if mask.shape[-1] > mask_channels:
        raise DataError(f"mask {mask_path} has {mask.shape[-1]} channels, the model takes {mask_channels}")
    img = torch.from_numpy(image)[None, None].repeat(1, image_channels, 1, 1, 1)
    m = torch.from_numpy(np.moveaxis(mask, -1, 0))[None]
    if m.shape[1] < mask_channels:
        m = torch.cat([m, torch.zeros(1, mask_channels - m.shape[1], *m.shape[2:])], dim=1)
    return img.contiguous(), m.contiguous()
