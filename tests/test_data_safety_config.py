"""Hermes's ``memory:`` config section loads in ironmem as Hermes writes it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ironmem import MemoryManager
from ironmem.core.config import load_config
from ironmem.core.errors import ConfigError

HERMES_MEMORY_SECTION = """\
memory:
  home: mem
  memory_enabled: true
  user_profile_enabled: false
  memory_char_limit: 3000
  user_char_limit: 900
  nudge_interval: 10
  flush_min_turns: 6
  provider: builtin
"""


def test_hermes_memory_section_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(HERMES_MEMORY_SECTION, encoding="utf-8")
    config = load_config(path)
    assert config.provider is None  # "builtin" means no external provider, as in Hermes
    assert config.memory.user_profile_enabled is False and config.memory.nudge_interval == 10
    with MemoryManager.from_config(path) as manager:
        assert manager.builtin.limits == {"memory": 3000, "user": 900}
        session = manager.start_session()
        assert "USER PROFILE" not in session.system_prompt_block()
        refused = json.loads(session.handle_tool_call("memory", {"action": "add", "target": "user", "content": "x"}))
        assert refused["success"] is False and "user_profile_enabled: false" in refused["error"]
        ok = json.loads(session.handle_tool_call("memory", {"action": "add", "target": "memory", "content": "y"}))
        assert ok["success"] is True


def test_empty_provider_and_typos_still_caught(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text('memory:\n  home: mem\n  provider: ""\n', encoding="utf-8")
    assert load_config(path).provider is None
    path.write_text("memory:\n  home: mem\n  memory_enabeld: true\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="memory_enabled"):
        load_config(path)


def test_memory_per_user_from_config(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("memory:\n  home: mem\n  memory_per_user: true\n", encoding="utf-8")
    with MemoryManager.from_config(path) as manager:
        assert manager.start_session(user_id="ada").scopes == {"memory": "ada", "user": "ada"}
        assert manager.start_session().scopes == {"memory": "", "user": ""}
