#!/usr/bin/env bash
# Documented check: the LlamaIndex adapter against the OLDEST llama-index-core 0.14 release (0.14.0).
# CI tests the newest 0.14.x; this script covers the other end, twice:
#   1. llama-index-core 0.14.0 with the newest llama-index-workflows 2.x pip resolves for it
#      (Context reuse serializes the memory with to_dict()/from_dict());
#   2. llama-index-core 0.14.0 with llama-index-workflows 2.0.1, the oldest 2.x of that time
#      (Context reuse keeps the live objects; edit_state() yields the state itself).
# Usage: tools/check_llama_index_oldest.sh [venv-prefix]   (default /tmp/ironmem-li0140)
set -euo pipefail
cd "$(dirname "$0")/.."

prefix="${1:-/tmp/ironmem-li0140}"
tests=(tests/test_llama_index_memory.py tests/test_llama_index_tools.py
       tests/test_llama_index_agents.py tests/test_llama_index_chat_engines.py)
export PIP_DISABLE_PIP_VERSION_CHECK=1

for workflows in "" "llama-index-workflows==2.0.1"; do
  venv="${prefix}${workflows:+-workflows-2.0.1}"
  echo "== llama-index-core 0.14.0 ${workflows:-(newest llama-index-workflows)} in ${venv}"
  python -m venv "$venv"
  "$venv/bin/pip" install --quiet "llama-index-core==0.14.0" ${workflows:+"$workflows"} \
    pytest pytest-asyncio pytest-timeout
  "$venv/bin/pip" install --quiet -e .          # ironmem and its base dependencies, no extras
  "$venv/bin/python" -m pip list 2>/dev/null | grep -E "^llama-index-(core|workflows) "
  "$venv/bin/python" -m pytest -q -p no:cacheprovider -W ignore::DeprecationWarning "${tests[@]}"
done
