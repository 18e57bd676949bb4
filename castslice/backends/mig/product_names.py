"""A MIG GPU whose product name no configured model is known by, and the setting line that
adds it (CASTSLICE_MIG_PRODUCT_NAMES): doctor says it before a Pod waits for a node that
never matches.

Real boards of one model report names of their own (`NVIDIA H200` on one driver, `NVIDIA
H200 141GB HBM3e` in other clusters, `NVIDIA H200 NVL` for the NVL board); the profile table
holds the names real sources give, and the setting adds the others.
"""

from __future__ import annotations

from collections.abc import Iterable

from castslice.backends.mig import choice
from castslice.backends.mig.profiles import MODELS, GpuModel, gfd_product
from castslice.settings.config import Config

SETTING = "CASTSLICE_MIG_PRODUCT_NAMES"


def known(config: Config, product: str, exact: bool) -> bool:
    """Whether a configured model is known by `product`: NVML's name itself where `exact`
    (the DRA driver's `productName`, which a claim's CEL compares), else GPU Feature
    Discovery's label of it."""
    for model in choice.models(config):
        names = model.nvml_names if exact else model.products
        if (product if exact else gfd_product(product)) in names:
            return True
    return False


def setting_line(config: Config, model: str, product: str) -> str:
    """The whole setting with `model=product` added to what it holds now."""
    entries = [f"{m}={name}" for m, names in config.mig_product_names.items() for name in names]
    return f"{SETTING}={','.join([*entries, f'{model}={product}'])}"


def unrecognised(config: Config, product: str, profiles: Iterable[str], exact: bool) -> str | None:
    """What to say of a MIG GPU named `product` whose devices are `profiles`, or None: a
    configured model is known by that name."""
    if not product or known(config, product, exact):
        return None
    offered = sorted(set(profiles))
    owner = _owner(config, offered)
    said = (
        f"its MIG devices ({', '.join(offered)}) are on a GPU named {product!r}, which no model "
        f"of CASTSLICE_MIG_GPU_MODELS ({', '.join(config.mig_gpu_models)}) is known by"
    )
    if owner is None:
        return f"{said}; no model of the profile table has those profiles"
    add = setting_line(config, owner.name, product)
    if owner.name not in config.mig_gpu_models:
        return f"{said}; they are {owner.name}'s profiles: add {owner.name} to it and set {add}"
    return f"{said}; they are {owner.name}'s profiles: set {add}"


def _owner(config: Config, profiles: list[str]) -> GpuModel | None:
    """The model (a configured one first) whose profiles include every one of `profiles`."""
    candidates = [*choice.models(config), *MODELS.values()]
    for model in candidates:
        if profiles and set(profiles) <= {p.name for p in model.profiles}:
            return model
    return None
