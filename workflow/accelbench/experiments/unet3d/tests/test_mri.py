import nibabel as nib
import numpy as np
import pytest

from accelbench.errors import DataError
from accelbench.experiments.unet3d import data as mri


def test_prepare_mni152(tmp_path):
    img, msk = tmp_path / "image.nii.gz", tmp_path / "mask.nii.gz"
    summary = mri.prepare(img, msk, volume=[16, 16, 16], spacing_mm=[12, 12, 12])
    image, mask = nib.load(img), nib.load(msk)
    assert image.shape == (16, 16, 16) and mask.shape == (16, 16, 16, 2)
    data = image.get_fdata()
    assert data.min() == pytest.approx(-1) and data.max() == pytest.approx(1)
    m = np.asanyarray(mask.dataobj)
    assert set(np.unique(m)) <= {0, 1} and 0.1 < m[..., 0].mean() < 0.6  # brain
    assert m[..., 1].sum() == 0  # the template has no tumour
    assert np.allclose(np.diag(image.affine)[:3], 12)
    assert summary["sources"]["image"].startswith("nilearn MNI152")


def test_one_hot_and_scaling():
    labels = np.array([[[0, 1], [2, 1]]])
    oh = mri.one_hot(labels, [1, 2])
    assert oh.shape == (1, 2, 2, 2) and oh[..., 0].sum() == 2 and oh[..., 1].sum() == 1
    assert np.all(mri.scale_to_unit_range(np.ones((2, 2))) == 0)


def _write_pair(folder, name="case1.nii.gz", shape=(20, 20, 20)):
    (folder / "image").mkdir(parents=True)
    (folder / "mask").mkdir()
    rng = np.random.default_rng(0)
    nib.save(nib.Nifti1Image(rng.random(shape).astype(np.float32) * 300, np.eye(4)), str(folder / "image" / name))
    labels = np.zeros(shape, np.uint8)
    labels[5:15, 5:15, 5:15] = 1
    labels[8:11, 8:11, 8:11] = 2
    nib.save(nib.Nifti1Image(labels, np.eye(4)), str(folder / "mask" / name))


def test_prepare_from_user_folder(tmp_path):
    _write_pair(tmp_path / "data")
    img, msk = tmp_path / "i.nii.gz", tmp_path / "m.nii.gz"
    summary = mri.prepare(img, msk, [16, 16, 16], [1, 1, 1], source="folder", folder=str(tmp_path / "data"))
    m = np.asanyarray(nib.load(msk).dataobj)
    assert m[..., 1].sum() > 0 and m[..., 0].sum() > m[..., 1].sum()
    assert summary["sources"]["image"].endswith("case1.nii.gz")
    image, mask = mri.load_case(img, msk, image_channels=4, mask_channels=4)
    assert tuple(image.shape) == (1, 4, 16, 16, 16) and tuple(mask.shape) == (1, 4, 16, 16, 16)
    assert mask[:, 2:].sum() == 0


def test_missing_and_corrupt_files_are_named(tmp_path):
    _write_pair(tmp_path / "data")
    (tmp_path / "data" / "mask" / "case1.nii.gz").unlink()
    with pytest.raises(DataError, match="mask for .*case1.nii.gz not found"):
        mri.find_case(tmp_path / "data")
    with pytest.raises(DataError, match="must contain image/ and mask/"):
        mri.find_case(tmp_path / "nowhere")
    bad = tmp_path / "bad.nii.gz"
    bad.write_bytes(b"not a nifti")
    with pytest.raises(DataError, match=f"{bad} is unreadable"):
        mri.load_case(bad, bad, 1, 2)
    with pytest.raises(DataError, match="not found"):
        mri.load_case(tmp_path / "none.nii.gz", bad, 1, 2)
    with pytest.raises(DataError, match="case 'x' not found"):
        _write_pair(tmp_path / "d2")
        mri.find_case(tmp_path / "d2", "x")
