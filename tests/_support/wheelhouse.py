"""Wheels of distributions installed in this venv, and the environment that installs from them alone.

A tool's ``# /// script`` environment is built by an installer, from an index;
tests that build one without the network repack what this venv already has
(its installed files, as their ``RECORD`` lists them) into wheels in a folder,
and point uv and pip at that folder with the index off.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import zipfile
from pathlib import Path

# Written by the installer, not part of a wheel.
_INSTALLED_ONLY = ("INSTALLER", "REQUESTED", "RECORD", "direct_url.json")


def repack(name: str, folder: Path) -> Path:
    """A wheel in ``folder`` of the installed distribution ``name``, as installed here; returns its path."""
    dist = importlib.metadata.distribution(name)
    files = [f for f in dist.files or () if not str(f).startswith("..") and "__pycache__" not in f.parts]
    info = next(f.parent for f in files if f.name == "METADATA" and f.parent.name.endswith(".dist-info"))
    wheel_meta = Path(str(dist.locate_file(info / "WHEEL"))).read_text()
    tag = next(line.split(":", 1)[1].strip() for line in wheel_meta.splitlines() if line.startswith("Tag:"))
    stem = info.name.removesuffix(".dist-info")  # name-version, as the wheel spells it
    wheel = folder / f"{stem}-{tag}.whl"
    record: list[str] = []
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as whl:
        for file in files:
            if file.parent == info and file.name in _INSTALLED_ONLY:
                continue
            data = Path(str(dist.locate_file(file))).read_bytes()
            whl.writestr(str(file), data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{file},sha256={digest},{len(data)}")
        whl.writestr(f"{info}/RECORD", "\n".join([*record, f"{info}/RECORD,,"]) + "\n")
    return wheel


def offline_env(links: Path, base: dict[str, str]) -> dict[str, str]:
    """``base`` with uv and pip installing from ``links`` alone (no index, no network)."""
    return {
        **base,
        "PIP_NO_INDEX": "1",
        "PIP_FIND_LINKS": str(links),
        "UV_NO_INDEX": "1",
        "UV_FIND_LINKS": str(links),
        "UV_OFFLINE": "1",
    }
