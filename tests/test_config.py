"""config.yaml loading: the happy path, every error case naming its key and fix, env overrides, the registry."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from ironmem import ConfigError, MemoryManager
from ironmem.core.config import available_providers, load_config, manager_from_config, provider_class
from ironmem.providers.local_vector import LocalVectorProvider

EMBEDDER = "ironmem.testing.embeddings:HashingEmbedder"


def write(folder: Path, text: str) -> Path:
    path = folder / "config.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for var in list(os.environ):
        if var.startswith("IRONMEM_") or var == "MEM0_API_KEY":
            monkeypatch.delenv(var, raising=False)


# -- happy paths ---------------------------------------------------------------------------------
def test_full_config_builds_a_manager_with_its_provider(tmp_path: Path) -> None:
    path = write(tmp_path, f"""
        memory:
          home: mem
          memory_char_limit: 1000
          user_char_limit: 500
          prefetch_timeout: 1.5
          strict: true
          provider: local_vector
        local_vector:
          embedder: {EMBEDDER}
          embedder_options: {{dims: 64}}
          top_k: 3
    """)
    with MemoryManager.from_config(path) as manager:
        assert manager.home == tmp_path / "mem"  # relative to the config file
        assert manager.builtin.limits == {"memory": 1000, "user": 500}
        assert manager.prefetch_timeout == 1.5 and manager.strict is True
        assert isinstance(manager.external, LocalVectorProvider)
        assert manager.external.top_k == 3
        assert manager.external.path == tmp_path / "mem" / "local_vector.db"
        session = manager.start_session("s1", user_id="ada")
        out = json.loads(session.handle_tool_call("vector_memory_write", {"action": "save", "content": "Ada rides a red bike"}))
        assert out["success"] is True
        assert "red bike" in session.prefetch("what colour is the bike?").fenced()
        session.end()
    assert (tmp_path / "mem" / "local_vector.db").is_file()


def test_a_single_provider_section_selects_that_provider(tmp_path: Path) -> None:
    path = write(tmp_path, f"""
        memory: {{home: mem}}
        local_vector: {{embedder: {EMBEDDER}}}
    """)
    config = load_config(path)
    assert config.provider == "local_vector"
    assert config.provider_settings.embedder == EMBEDDER


def test_empty_file_means_defaults_and_no_provider(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IRONMEM_HOME", str(tmp_path / "from-env"))
    config = load_config(write(tmp_path, ""))
    assert config.provider is None
    assert config.home == tmp_path / "from-env"
    assert config.memory.memory_char_limit == 2200 and config.memory.prefetch_timeout == 3.0


def test_disabled_section_is_kept_but_not_used(tmp_path: Path) -> None:
    path = write(tmp_path, f"""
        memory: {{home: mem, provider: local_vector}}
        local_vector: {{embedder: {EMBEDDER}}}
        mem0: {{enabled: false, top_k: 9}}
    """)
    config = load_config(path)
    assert config.provider == "local_vector" and config.disabled_sections == ["mem0"]


# -- error cases ---------------------------------------------------------------------------------
def test_unknown_provider_names_the_key_and_the_registered_ones(tmp_path: Path) -> None:
    path = write(tmp_path, "memory: {provider: mem_zero}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert "memory.provider" in message and "'mem_zero'" in message
    assert "Did you mean 'mem0'?" in message
    assert "local_vector" in message and "ironmem.providers" in message


def test_missing_required_setting_names_the_key(tmp_path: Path) -> None:
    path = write(tmp_path, "memory: {provider: local_vector}\nlocal_vector: {top_k: 3}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert "local_vector.embedder: required setting is missing" in message
    assert "import path" in message  # says what to put there


def test_hosted_mem0_without_api_key_names_the_variable(tmp_path: Path) -> None:
    path = write(tmp_path, "memory: {provider: mem0}\nmem0: {mode: hosted}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert "mem0.api_key is required" in str(err.value) and "MEM0_API_KEY" in str(err.value)


def test_two_providers_in_a_list_is_refused_by_rule_1(tmp_path: Path) -> None:
    path = write(tmp_path, "memory: {provider: [mem0, local_vector]}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert "memory.provider" in message and "ONE external provider" in message and "provider: mem0" in message


def test_two_enabled_sections_without_a_choice_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, f"""
        mem0: {{top_k: 3}}
        local_vector: {{embedder: {EMBEDDER}}}
    """)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert "two provider sections are enabled (mem0, local_vector)" in message
    assert "memory.provider" in message and "enabled: false" in message


def test_a_second_enabled_section_next_to_the_chosen_provider_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, f"""
        memory: {{provider: local_vector}}
        local_vector: {{embedder: {EMBEDDER}}}
        mem0: {{top_k: 3}}
    """)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert message.startswith("mem0: a second provider section is enabled while memory.provider is 'local_vector'")
    assert "enabled: false" in message


def test_extra_key_is_forbidden_with_a_suggestion(tmp_path: Path) -> None:
    path = write(tmp_path, "memory: {prefetch_timout: 2}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert "memory.prefetch_timout: unknown setting" in message and "Did you mean 'prefetch_timeout'?" in message


def test_extra_key_in_a_provider_section_is_forbidden(tmp_path: Path) -> None:
    path = write(tmp_path, f"local_vector: {{embedder: {EMBEDDER}, dedupe: 0.9}}\n")
    with pytest.raises(ConfigError, match=r"local_vector\.dedupe: unknown setting\. Did you mean 'dedupe_threshold'\?"):
        load_config(path)


def test_unknown_section_is_named(tmp_path: Path) -> None:
    path = write(tmp_path, "memroy: {home: x}\n")
    with pytest.raises(ConfigError, match=r"memroy: unknown section\. Did you mean 'memory'\?"):
        load_config(path)


def test_bad_value_names_key_and_value(tmp_path: Path) -> None:
    path = write(tmp_path, "memory: {prefetch_timeout: -1}\n")
    with pytest.raises(ConfigError, match=r"memory\.prefetch_timeout: .*greater than 0.*-1"):
        load_config(path)


def test_invalid_yaml_reports_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "memory:\n  home: [unclosed\n  strict: true\n")
    with pytest.raises(ConfigError, match=r"not valid YAML at line \d+"):
        load_config(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")


def test_embedder_import_path_that_does_not_exist(tmp_path: Path) -> None:
    path = write(tmp_path, "local_vector: {embedder: 'ironmem.testing.embeddings:NoSuchThing'}\n")
    with pytest.raises(ConfigError, match=r"local_vector\.embedder: module 'ironmem\.testing\.embeddings' has no attribute"):
        manager_from_config(path)


def test_embedder_that_is_not_an_embedder(tmp_path: Path) -> None:
    path = write(tmp_path, "local_vector: {embedder: 'os:sep'}\n")
    with pytest.raises(ConfigError, match=r"local_vector\.embedder: .* is not an embedder"):
        manager_from_config(path)


def test_missing_environment_reference(tmp_path: Path) -> None:
    path = write(tmp_path, "mem0: {api_key: '${IRONMEM_TEST_UNSET_KEY}'}\n")
    with pytest.raises(ConfigError, match=r"mem0\.api_key: refers to the environment variable IRONMEM_TEST_UNSET_KEY"):
        load_config(path)


def test_unknown_ironmem_variable_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IRONMEM_LOCAL_VECTOR_TOPK", "3")
    path = write(tmp_path, f"local_vector: {{embedder: {EMBEDDER}}}\n")
    with pytest.raises(ConfigError, match=r"IRONMEM_LOCAL_VECTOR_TOPK sets local_vector\.topk.*Did you mean 'top_k'"):
        load_config(path)


# -- environment overrides -----------------------------------------------------------------------
def test_env_overrides_file_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IRONMEM_MEMORY_PREFETCH_TIMEOUT", "7.5")
    monkeypatch.setenv("IRONMEM_LOCAL_VECTOR_TOP_K", "9")
    path = write(tmp_path, f"memory: {{prefetch_timeout: 2}}\nlocal_vector: {{embedder: {EMBEDDER}, top_k: 3}}\n")
    config = load_config(path)
    assert config.memory.prefetch_timeout == 7.5
    assert config.provider_settings.top_k == 9


def test_secret_precedence_ironmem_variable_then_vendor_variable_then_file(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "mem0: {api_key: from-file}\n")
    assert load_config(path).provider_settings.api_key.get_secret_value() == "from-file"
    monkeypatch.setenv("MEM0_API_KEY", "from-vendor-var")
    settings = load_config(path).provider_settings
    assert settings.api_key.get_secret_value() == "from-vendor-var"
    assert settings.hosted is True  # an api key switches auto mode to the hosted client
    assert "from-vendor-var" not in repr(settings)  # secrets stay masked
    monkeypatch.setenv("IRONMEM_MEM0_API_KEY", "from-ironmem-var")
    assert load_config(path).provider_settings.api_key.get_secret_value() == "from-ironmem-var"


def test_environment_reference_in_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_VECTOR_DB", str(tmp_path / "db" / "v.db"))
    path = write(tmp_path, f"local_vector: {{embedder: {EMBEDDER}, path: '${{MY_VECTOR_DB}}'}}\n")
    assert load_config(path).provider_settings.path == str(tmp_path / "db" / "v.db")


def test_provider_choice_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IRONMEM_MEMORY_PROVIDER", "mem0,local_vector")
    with pytest.raises(ConfigError, match="ONE external provider"):
        load_config(write(tmp_path, ""))


# -- registry --------------------------------------------------------------------------------------
def test_own_providers_are_registered_as_entry_points() -> None:
    from importlib.metadata import entry_points

    installed = {ep.name: ep.value for ep in entry_points(group="ironmem.providers")}
    assert installed.get("mem0") == "ironmem.providers.mem0:Mem0Provider", "run: pip install -e . --no-deps"
    assert installed.get("local_vector") == "ironmem.providers.local_vector:LocalVectorProvider"
    assert provider_class("local_vector") is LocalVectorProvider


def test_third_party_provider_is_found_through_its_entry_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A real installed distribution: a package plus a .dist-info folder with entry_points.txt on sys.path.
    pkg = tmp_path / "site" / "notes_provider"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(textwrap.dedent("""
        import json
        from ironmem import MemoryProvider, ToolSchema

        class NotesProvider(MemoryProvider):
            name = "notes"
            def __init__(self, greeting="hi"):
                self.greeting = greeting
            def is_available(self):
                return True
            def initialize(self, session_id, **ctx):
                pass
            def tool_schemas(self):
                return [ToolSchema("notes_read", "Read notes.", {"type": "object", "properties": {}})]
            def handle_tool_call(self, name, args):
                return json.dumps({"success": True, "greeting": self.greeting})
    """))
    info = tmp_path / "site" / "notes_provider-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: notes-provider\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[ironmem.providers]\nnotes = notes_provider:NotesProvider\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))

    assert "notes" in available_providers()
    path = write(tmp_path, "memory: {home: mem}\nnotes: {greeting: hello}\n")
    with manager_from_config(path) as manager:
        assert manager.external is not None and manager.external.name == "notes"
        session = manager.start_session("s1")
        assert json.loads(session.handle_tool_call("notes_read", {}))["greeting"] == "hello"
    bad = write(tmp_path, "notes: {colour: red}\n")
    with pytest.raises(ConfigError, match=r"notes: the provider rejected its settings: .*colour"):
        manager_from_config(bad)


def test_a_configured_provider_that_cannot_work_is_an_error_not_a_silent_skip(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    path = write(tmp_path, "memory: {home: mem}\nmem0: {top_k: 3}\n")  # no embedder, no OpenAI key
    with pytest.raises(ConfigError, match=r"mem0: no embedder: mem0's default embedder is OpenAI and OPENAI_API_KEY is not set"):
        manager_from_config(path)


def test_a_bad_secret_value_is_not_echoed_in_the_error(tmp_path: Path) -> None:
    path = write(tmp_path, "mem0: {api_key: [sk-live-123456789]}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert "mem0.api_key" in str(err.value) and "sk-live-123456789" not in str(err.value)


@pytest.mark.parametrize("value,model", [("true", "multilingual-e5-small-q4"), ("e5", "multilingual-e5-small-q4"),
                                         ("minilm", "all-MiniLM-L6-v2-onnx-int8")])
def test_memory_embeddings_chooses_the_local_model(tmp_path: Path, value: str, model: str) -> None:
    from ironmem.core.builtin.vectors import embeddings_missing

    needs = "minilm" if value == "minilm" else "e5"
    if embeddings_missing(needs):
        pytest.skip(embeddings_missing(needs))
    path = write(tmp_path, f"memory: {{embeddings: {value}}}\n")
    with manager_from_config(path, home=tmp_path / "home") as manager:
        recall = manager.status()["recall"]
        assert recall["mode"] == "hybrid" and recall["model"] == model


def test_an_unknown_embeddings_model_is_refused_with_the_choices(tmp_path: Path) -> None:
    path = write(tmp_path, "memory: {embeddings: bert}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert "memory.embeddings" in str(err.value) and "'e5'" in str(err.value) and "'minilm'" in str(err.value)
