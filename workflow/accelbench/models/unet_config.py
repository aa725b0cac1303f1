"""Config checks of the diffusion U-Nets (Study A's MONAI/Med-DDPM network, SR3's), torch-free: the experiments'
rules modules call them from ``config_errors`` so that a preset that cannot build stops the run before any job."""

from __future__ import annotations


def divisible_errors(where: str, what: str, channels: list[int], attention: list[int], p: dict) -> list[str]:
    """MONAI's DiffusionModelUNet needs every level's channels divisible by norm_groups, and the channels of each
    attention level by num_heads (head width = channels / num_heads)."""
    out = []
    for key, checked in (("norm_groups", channels), ("num_heads", attention)):
        bad = [c for c in checked if c % p[key]]
        if bad:
            out.append(
                f"config key '{where}': channels {bad} ({what}{', attention levels' if key == 'num_heads' else ''})"
                f" are not multiples of {key} {p[key]}"
            )
    return out
