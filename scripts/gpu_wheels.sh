#!/usr/bin/env bash
# Download, on a Linux x86-64 machine that reaches the package registry, the wheels that
# scripts/gpu_session.sh installs on an offline GPU machine: every dependency of ivln-ce and of
# its dev extra (the tests) for CPython 3.12, except torch (the GPU machine brings its CUDA
# build), plus the build backend of the editable install (setuptools, wheel).
#
# Why binary-only and for a named Python: the GPU machine has no compiler set-up and no
# registry, and its Python (3.12) may differ from this machine's; `pip download` with
# --python-version/--platform fetches the wheels for that interpreter whatever runs it. Run it on
# Linux x86-64: pip evaluates the dependencies' environment markers on this machine.
#
#   bash scripts/gpu_wheels.sh [--dest wheels] [--python-version 3.12] [--platform TAG ...]
#                              [--build-python PY] [--check] [--dry-run]
#
# --platform may be repeated (default manylinux2014_x86_64 and manylinux_2_28_x86_64: glibc 2.17
# and 2.28, which every current CUDA image exceeds). Packages that publish no Linux wheel
# (SOURCE_ONLY below: scikit-fmm) are built into wheels here by a Python of the target version
# (--build-python, default python3.12 when on PATH); without one, their source archive and
# build requirements are downloaded instead and the GPU machine builds them (it then needs a C
# compiler). --check resolves the set without downloading it (pip install --dry-run into a
# throwaway target); --dry-run prints the requirements and the pip commands.

set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="wheels"
PYVER="3.12"
PLATFORMS=()
CHECK=0
DRY_RUN=0
PYTHON="${PYTHON:-python3}"
BUILD_PYTHON=""
#: dependencies without Linux wheels on the registry (built from source)
SOURCE_ONLY=(scikit-fmm)

die() {
    echo "gpu_wheels.sh: error: $*" >&2
    exit 2
}

while [[ $# -gt 0 ]]; do
    case "$1" in
        --dest) [[ $# -ge 2 ]] || die "--dest needs a folder"; DEST="$2"; shift 2 ;;
        --python-version) [[ $# -ge 2 ]] || die "--python-version needs X.Y"; PYVER="$2"; shift 2 ;;
        --platform) [[ $# -ge 2 ]] || die "--platform needs a tag"; PLATFORMS+=("$2"); shift 2 ;;
        --build-python) [[ $# -ge 2 ]] || die "--build-python needs an interpreter"; BUILD_PYTHON="$2"; shift 2 ;;
        --check) CHECK=1; shift ;;
        --dry-run) DRY_RUN=1; shift ;;
        -h | --help) sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) die "unknown argument: $1" ;;
    esac
done
[[ "$PYVER" =~ ^3\.[0-9]+$ ]] || die "--python-version must look like 3.12, got '$PYVER'"
[[ ${#PLATFORMS[@]} -gt 0 ]] || PLATFORMS=(manylinux2014_x86_64 manylinux_2_28_x86_64)

# The requirements: [project].dependencies and the dev extra of pyproject.toml, without torch,
# and the build system's requires.
REQS="$("$PYTHON" - "$REPO/pyproject.toml" <<'EOF'
import re
import sys

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib

with open(sys.argv[1], "rb") as fh:
    meta = tomllib.load(fh)
reqs = list(meta["build-system"]["requires"]) + list(meta["project"]["dependencies"])
reqs += list(meta["project"].get("optional-dependencies", {}).get("dev", []))
seen = set()
for r in reqs:
    name = re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0].lower().replace("_", "-")
    if name == "torch" or name in seen:
        continue
    seen.add(name)
    print(r)
EOF
)"
[[ -n "$REQS" ]] || die "no requirements read from $REPO/pyproject.toml"

ABI="cp${PYVER/./}"
TARGET=(--only-binary=:all: --python-version "$PYVER" --implementation cp --abi "$ABI")
for p in "${PLATFORMS[@]}"; do TARGET+=(--platform "$p"); done
REQFILE="$(mktemp)"
SRCFILE="$(mktemp)"
trap 'rm -f "$REQFILE" "$SRCFILE"' EXIT
# binary requirements; the source-only ones (with their version bounds) apart
: > "$SRCFILE"
while IFS= read -r r; do
    name="$(echo "$r" | sed -E 's/[[:space:]<>=!~;[].*//' | tr 'A-Z_' 'a-z-')"
    src=0
    for s in "${SOURCE_ONLY[@]}"; do [[ "$name" == "$s" ]] && src=1; done
    if [[ $src -eq 1 ]]; then echo "$r" >> "$SRCFILE"; else echo "$r" >> "$REQFILE"; fi
done <<< "$REQS"
if [[ -z "$BUILD_PYTHON" ]] && "python$PYVER" -c 'pass' > /dev/null 2>&1; then
    BUILD_PYTHON="python$PYVER"
fi
if [[ -n "$BUILD_PYTHON" ]]; then
    have="$("$BUILD_PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" || die "--build-python $BUILD_PYTHON does not run"
    [[ "$have" == "$PYVER" ]] || die "--build-python $BUILD_PYTHON is Python $have, not $PYVER: its wheels would not install on the GPU machine"
fi

if [[ $DRY_RUN -eq 1 ]]; then
    echo "requirements as wheels (torch excluded):"
    sed 's/^/  /' "$REQFILE"
    echo "source-only requirements (no Linux wheel on the registry):"
    sed 's/^/  /' "$SRCFILE"
    echo "commands:"
    echo "  $PYTHON -m pip download ${TARGET[*]} -d $DEST -r <requirements as wheels>"
    if [[ -n "$BUILD_PYTHON" ]]; then
        echo "  $BUILD_PYTHON -m pip wheel --no-deps -w $DEST -r <source-only requirements>"
    else
        echo "  $PYTHON -m pip download --no-deps --no-binary=:all: -d $DEST -r <source-only requirements>  (no Python $PYVER here: built on the GPU machine)"
        echo "  $PYTHON -m pip download ${TARGET[*]} -d $DEST <their build requirements>"
    fi
    exit 0
fi

if [[ $CHECK -eq 1 ]]; then
    TMP="$(mktemp -d)"
    trap 'rm -rf "$REQFILE" "$TMP"' EXIT
    "$PYTHON" -m pip install --dry-run --ignore-installed --target "$TMP/target" "${TARGET[@]}" \
        --report "$TMP/report.json" -r "$REQFILE" > /dev/null
    "$PYTHON" - "$TMP/report.json" <<'EOF'
import json
import sys

items = json.load(open(sys.argv[1]))["install"]
names = sorted(f"{i['metadata']['name']}=={i['metadata']['version']}" for i in items)
print(f"{len(names)} wheels resolve for the GPU machine:")
print("\n".join("  " + n for n in names))
if any(n.lower().startswith(("torch==", "nvidia-", "triton==")) for n in names):
    sys.exit("gpu_wheels.sh: the set would bring torch or its CUDA libraries; the GPU machine's own must stay")
EOF
    exit 0
fi

mkdir -p "$DEST"
"$PYTHON" -m pip download "${TARGET[@]}" -d "$DEST" -r "$REQFILE"
if [[ -s "$SRCFILE" ]]; then
    if [[ -n "$BUILD_PYTHON" ]]; then
        # a wheel built by Python $PYVER here installs on the GPU machine (linux_x86_64 tag)
        "$BUILD_PYTHON" -m pip wheel --no-deps -w "$DEST" -r "$SRCFILE"
    else
        echo "gpu_wheels.sh: warning: no Python $PYVER here (--build-python): downloading the source of $(tr '\n' ' ' < "$SRCFILE")and" \
            "its build requirements; the GPU machine will build it and needs a C compiler" >&2
        "$PYTHON" -m pip download --no-deps --no-binary=:all: -d "$DEST" -r "$SRCFILE"
        # the build backend of scikit-fmm (meson-python) and its numpy, as wheels for the target
        "$PYTHON" -m pip download "${TARGET[@]}" -d "$DEST" meson-python meson ninja "numpy>=2.0" pyproject-metadata packaging
    fi
fi
echo "gpu_wheels.sh: $(find "$DEST" -maxdepth 1 -name '*.whl' | wc -l) wheels in $DEST; copy the folder to the GPU machine and run"
echo "  bash scripts/gpu_session.sh --wheels $DEST"
