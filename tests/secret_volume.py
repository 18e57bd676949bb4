"""Certificate files laid out as the kubelet mounts a Secret, renewed as it renews them."""

from __future__ import annotations

import os
from pathlib import Path


class SecretVolume:
    """tls.crt -> ..data/tls.crt, with ..data a symlink to a timestamped directory that is
    swapped in one rename on every update (the kubelet's atomic flip)."""

    def __init__(self, root: Path) -> None:
        root.mkdir(exist_ok=True)
        self.root = root
        self.versions = 0
        for name in ("tls.crt", "tls.key"):
            (root / name).symlink_to(Path("..data") / name)

    @property
    def certfile(self) -> Path:
        return self.root / "tls.crt"

    @property
    def keyfile(self) -> Path:
        return self.root / "tls.key"

    def update(self, cert_pem: bytes, key_pem: bytes) -> None:
        self.versions += 1
        version = self.root / f"..2026_01_01_00_00_{self.versions:02d}"
        version.mkdir()
        (version / "tls.crt").write_bytes(cert_pem)
        (version / "tls.key").write_bytes(key_pem)
        staged = self.root / "..data_tmp"
        staged.symlink_to(version.name)
        os.replace(staged, self.root / "..data")
