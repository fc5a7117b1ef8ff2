#!/usr/bin/env bash
# Run the vLLM engine tests (tests/test_vllm_engine.py) in their venv, building it first if needed.
#
#   bash tests/vllm_engine/run.sh [pytest options]
#
# A missing or broken engine fails these tests here; it never skips them.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
bash "$root/tests/vllm_engine/setup_venv.sh"
cd "$root"
TRL_BUDGET_REQUIRE_VLLM_ENGINE=1 "$root/.venv-vllm/bin/python" -m pytest -q -p no:cacheprovider -m vllm_engine \
    tests/test_vllm_engine.py "$@"
