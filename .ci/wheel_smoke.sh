#!/usr/bin/env bash
# Build the sdist and the wheel, check their metadata, install the wheel into a fresh virtualenv (no clone on
# sys.path) and run the README's plain-Python quickstart there.
set -euo pipefail
cd "$(dirname "$0")/.."
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

python -m build --sdist --wheel --outdir "$work/dist" . > "$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
python -m twine check --strict "$work"/dist/*
python -m venv "$work/venv"
"$work/venv/bin/python" -m pip install --quiet "$work"/dist/ironmem-*.whl
python - "$work/quickstart.py" <<'PY'
import re, sys
readme = open("README.md", encoding="utf-8").read()
section = readme.split("## Plain Python", 1)[1]
block = re.search(r"```python\n(.*?)```", section, re.S).group(1)
open(sys.argv[1], "w", encoding="utf-8").write(block)
PY
(cd "$work" && "$work/venv/bin/python" quickstart.py > quickstart.out)
grep -q "Prefers coastal hikes" "$work/quickstart.out"
"$work/venv/bin/ironmem" --version
echo "wheel OK: $(ls "$work"/dist)"
