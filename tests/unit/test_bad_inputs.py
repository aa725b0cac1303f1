"""Bad inputs get one clear line naming the key or file. Fixtures are built here (nibabel, astropy)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from accelbench.core.config import coerce_to_schema, cross_field_errors, validate_config
from accelbench.errors import ConfigError, DataError
from accelbench.experiments.sr3 import data as sky
from accelbench.experiments.unet3d import data as mri
from conftest import REPO
from dag import snakemake, write_config


def _mri_folder(folder: Path, image: np.ndarray, labels: np.ndarray) -> None:
    (folder / "image").mkdir(parents=True)
    (folder / "mask").mkdir()
    nib.save(nib.Nifti1Image(image.astype(np.float32), np.eye(4)), str(folder / "image/case.nii.gz"))
    nib.save(nib.Nifti1Image(labels.astype(np.uint8), np.eye(4)), str(folder / "mask/case.nii.gz"))


def _labels(values=(1, 2)) -> np.ndarray:
    labels = np.zeros((20, 20, 20), np.uint8)
    labels[5:15, 5:15, 5:15] = values[0]
    labels[8:11, 8:11, 8:11] = values[1]
    return labels


def test_4d_nifti_is_refused_at_prepare_naming_file_and_shape(tmp_path):
    _mri_folder(tmp_path / "d", np.random.default_rng(0).random((20, 20, 20, 3)), _labels())
    with pytest.raises(DataError, match=r"image/case.nii.gz has shape \(20, 20, 20, 3\): a 3-D volume"):
        mri.prepare(
            tmp_path / "i.nii.gz", tmp_path / "m.nii.gz", [16] * 3, [1] * 3, source="folder", folder=str(tmp_path / "d")
        )
    assert not (tmp_path / "i.nii.gz").exists()


def test_single_volume_4d_nifti_is_accepted(tmp_path):
    _mri_folder(tmp_path / "d", np.random.default_rng(0).random((20, 20, 20, 1)), _labels())
    summary = mri.prepare(
        tmp_path / "i.nii.gz", tmp_path / "m.nii.gz", [16] * 3, [1] * 3, source="folder", folder=str(tmp_path / "d")
    )
    assert summary["volume"] == [16, 16, 16]


def test_mask_without_the_configured_labels_is_refused(tmp_path):
    _mri_folder(tmp_path / "d", np.random.default_rng(0).random((20, 20, 20)), _labels((255, 255)))
    with pytest.raises(DataError, match=r"mask/case.nii.gz holds the labels \[255\], none of data.mri.label_values"):
        mri.prepare(
            tmp_path / "i.nii.gz", tmp_path / "m.nii.gz", [16] * 3, [1] * 3, source="folder", folder=str(tmp_path / "d")
        )


def test_mask_missing_one_label_warns_with_the_labels_found(tmp_path, caplog):
    _mri_folder(tmp_path / "d", np.random.default_rng(0).random((20, 20, 20)), _labels((1, 1)))
    mri.prepare(
        tmp_path / "i.nii.gz",
        tmp_path / "m.nii.gz",
        [16] * 3,
        [1] * 3,
        source="folder",
        folder=str(tmp_path / "d"),
        label_values=[1, 2],
    )
    assert "lacks the labels [2]" in caplog.text and "found [1]" in caplog.text


def test_sr3_small_image_is_named(tmp_path):
    np.save(tmp_path / "tiny_map.npy", np.random.default_rng(0).random((8, 8)))
    with pytest.raises(DataError, match=r"sky image tiny_map.npy: image of 8x8 px is smaller than one 32x32"):
        sky.prepare(tmp_path / "o.npz", patch=32, factor=4, source="folder", folder=str(tmp_path))


def test_sr3_fits_table_hdu_is_refused_and_gzipped_fits_read(tmp_path):
    from astropy.io import fits

    table = fits.BinTableHDU.from_columns([fits.Column(name="flux", format="E", array=np.arange(4.0))])
    fits.HDUList([fits.PrimaryHDU(), table]).writeto(tmp_path / "catalogue.fits")
    with pytest.raises(DataError, match=r"catalogue.fits holds no image HDU \(found PrimaryHDU, BinTableHDU\)"):
        sky.folder_images(tmp_path)
    (tmp_path / "catalogue.fits").unlink()
    image = np.random.default_rng(1).random((64, 64)).astype(np.float32)
    fits.PrimaryHDU(image).writeto(tmp_path / "map.fits.gz")
    [(name, arr)] = sky.folder_images(tmp_path)
    assert name == "map.fits.gz" and arr.shape == (64, 64) and np.isclose(arr.max(), 1.0)


def _sky_map() -> np.ndarray:
    return np.random.default_rng(2).random((64, 64))


def _blank_corner() -> np.ndarray:
    arr = _sky_map()
    arr[:4, :4] = -1.6375e30  # HEALPix's UNSEEN
    return arr


def _near_float_max() -> np.ndarray:
    arr = _sky_map()
    arr[10, 20] = 1.7e308
    return arr


UNUSABLE_MAPS = [  # each was accepted (rc 0) and collapsed or misread
    (
        "blank.fits",
        _blank_corner,
        r"blank.fits has 16 pixel\(s\) beyond \+-1e\+20 \(first: -1.6375e\+30 \(HEALPix's blank",
    ),
    ("huge.npy", _near_float_max, r"huge.npy has 1 pixel\(s\) beyond \+-1e\+20 \(first: 1.7e\+308 at \(10, 20\)\)"),
    (
        "cube.npy",
        lambda: np.random.default_rng(3).random((64, 64, 3)),
        r"cube.npy has shape \(64, 64, 3\); a \.npy or FITS",
    ),
    (
        "cube.fits",
        lambda: np.random.default_rng(3).random((64, 64, 3)),
        r"cube.fits has shape \(64, 64, 3\); a \.npy or FITS",
    ),
    ("wave.npy", lambda: _sky_map() * (1 + 2j), r"wave.npy holds complex values \(complex128\)"),
]


@pytest.mark.parametrize("name, make, message", UNUSABLE_MAPS, ids=[u[0] for u in UNUSABLE_MAPS])
def test_sr3_unusable_own_maps_are_refused_in_one_line_naming_file_and_value(tmp_path, name, make, message):
    arr = make()
    if name.endswith(".fits"):
        from astropy.io import fits

        fits.PrimaryHDU(arr).writeto(tmp_path / name)
    else:
        np.save(tmp_path / name, arr)
    with pytest.raises(DataError, match=message) as err:
        sky.prepare(tmp_path / "o.npz", patch=32, factor=4, source="folder", folder=str(tmp_path))
    assert "\n" not in str(err.value) and not (tmp_path / "o.npz").exists()


def test_sr3_rgb_picture_is_still_read_as_grayscale(tmp_path):
    from skimage.io import imsave

    rgb = (np.random.default_rng(4).random((64, 64, 3)) * 255).astype(np.uint8)
    imsave(tmp_path / "photo.png", rgb, check_contrast=False)
    [(name, arr)] = sky.folder_images(tmp_path)
    assert name == "photo.png" and arr.shape == (64, 64) and np.isclose(arr.max(), 1.0)


def test_sr3_messages_name_the_real_key(tmp_path):
    with pytest.raises(DataError, match=r"^sr3_scaling.data.folder .* holds no images .*\.fits\.gz"):
        sky.folder_images(tmp_path)
    with pytest.raises(DataError, match=r"^sr3_scaling.data.folder .* is not a folder"):
        sky.folder_images(tmp_path / "nowhere")


def test_nested_config_strings_are_coerced_to_schema_types(default_config):
    cfg = copy.deepcopy(default_config)
    cfg["unet3d_profile"].update(repeat="5", quality_rel_l2_max="0.1")
    cfg["llm_quant"]["reuse_prefix"] = "false"
    cfg["llm_quant"]["sensitivity_tokens"] = "null"
    validate_config(cfg, REPO / "config/config.schema.yaml")
    assert cfg["unet3d_profile"]["repeat"] == 5 and cfg["unet3d_profile"]["quality_rel_l2_max"] == 0.1
    assert cfg["llm_quant"]["reuse_prefix"] is False and cfg["llm_quant"]["sensitivity_tokens"] is None
    assert coerce_to_schema({"system": "123"}, REPO / "config/config.schema.yaml") == {"system": "123"}  # a string
    cfg["unet3d_profile"]["repeat"] = "five"
    with pytest.raises(ConfigError, match="unet3d_profile.repeat': 'five' is not of type 'integer'"):
        validate_config(cfg, REPO / "config/config.schema.yaml")


def test_lora_model_key_typo_is_named(default_config):
    cfg = copy.deepcopy(default_config)
    cfg["lora_finetune"]["models"] = ["smollm2_135m", "typo"]
    assert cross_field_errors(cfg) == [
        f"config key 'lora_finetune.models[1]': 'typo' is not a key of lora_finetune.presets (known: "
        f"{', '.join(sorted(cfg['lora_finetune']['presets']))})"
    ]


def test_norm_groups_that_do_not_divide_the_channels_are_named(default_config):
    cfg = copy.deepcopy(default_config)
    cfg["unet3d_profile"]["presets"]["whole_head"]["norm_groups"] = 7
    errors = cross_field_errors(cfg)
    assert any(e.startswith("config key 'unet3d_profile.presets.whole_head'") and "norm_groups 7" in e for e in errors)
    with pytest.raises(ConfigError, match="not multiples of norm_groups 7"):
        validate_config(cfg, REPO / "config/config.schema.yaml")


def test_volume_divisibility_follows_the_preset_levels(default_config):
    cfg = copy.deepcopy(default_config)
    preset = cfg["unet3d_profile"]["presets"]["whole_head"]
    preset.update(channel_mult=[1, 1, 2, 3, 4, 4], volume=[48, 48, 48])
    cfg["unet3d_profile"]["scales"]["small"].pop("volume", None)
    errors = cross_field_errors(cfg)
    assert any("volume [48, 48, 48] must be a multiple of 32 per side (6 U-Net levels" in e for e in errors), errors
    preset["volume"] = [64, 64, 64]
    assert not any("volume" in e for e in cross_field_errors(cfg))


def test_lora_counts_gpt2_conv1d_targets():
    from transformers import GPT2Config, GPT2LMHeadModel

    from accelbench.experiments.lora.model import apply_lora, expected_lora_parameters
    from accelbench.experiments.lora.settings import LoraSettings

    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=64, n_positions=32))
    s = LoraSettings(r=4, alpha=4, target_modules=("c_attn",))
    assert expected_lora_parameters(model, s) == 4 * (16 + 48)
    _, counts = apply_lora(model, s)
    assert counts["trainable"] == counts["expected"] == 4 * (16 + 48)


def test_nested_config_and_relative_mri_folder_under_another_directory(tmp_path, tiny_config):
    """`--config 'unet3d_profile={repeat: 5}'` is accepted; a relative data.mri.folder resolves against the
    repository under `snakemake -s repo/Snakefile -d elsewhere` (a dry run: the spec files say where it points)."""
    tiny_config["data"]["mri"].update(source="folder", folder="my_mri_cases")
    write_config(tmp_path, tiny_config, ["unet3d_profile"])
    proc = snakemake(tmp_path, "-n", "--config", "unet3d_profile={repeat: 5}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    specs = [json.loads(p.read_text()) for p in (tmp_path / ".snakemake/accelbench/spec").glob("*.json")]
    assert any(s.get("data", {}).get("folder") == str(REPO / "my_mri_cases") for s in specs if "volume" in s)
    assert any(s.get("run", {}).get("repeat") == 5 for s in specs)
