"""Regenerate the committed CSI stubs from ``csi.proto`` with grpcio-tools.

The stubs are committed (so the runtime needs no protoc), and a test regenerates them into a temporary
directory and compares, so the committed files can never drift from the proto. Generating with
``-I <src>`` and the path ``csi_proto/csi.proto`` makes the generated import read
``from csi_proto import csi_pb2`` without any post-editing.

Usage: ``python -m csi_proto.regenerate [OUTPUT_SRC_DIR]`` (default: the ``src`` directory holding this
package, i.e. regenerate in place).
"""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
SRC_DIR = PACKAGE_DIR.parent
PROTO_RELATIVE = "csi_proto/csi.proto"
GENERATED_FILES = ("csi_pb2.py", "csi_pb2_grpc.py", "csi_pb2.pyi")


def regenerate(output_src_dir: Path) -> list[Path]:
    """Compile ``csi.proto`` into ``<output_src_dir>/csi_proto/``; return the generated files.

    Raises ``RuntimeError`` with protoc's exit code when compilation fails.
    """
    from grpc_tools import protoc  # dev dependency only: imported lazily

    well_known = resources.files("grpc_tools") / "_proto"
    out_pkg = output_src_dir / "csi_proto"
    out_pkg.mkdir(parents=True, exist_ok=True)
    args = [
        "grpc_tools.protoc",
        f"-I{SRC_DIR}",
        f"-I{well_known}",
        f"--python_out={output_src_dir}",
        f"--pyi_out={output_src_dir}",
        f"--grpc_python_out={output_src_dir}",
        str(SRC_DIR / PROTO_RELATIVE),
    ]
    code = protoc.main(args)
    if code != 0:
        raise RuntimeError(f"protoc failed with exit code {code}")
    return [out_pkg / name for name in GENERATED_FILES]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    target = Path(argv[0]) if argv else SRC_DIR
    for path in regenerate(target):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
