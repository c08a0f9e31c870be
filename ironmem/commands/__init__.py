"""CLI command groups of ``ironmem``, one module each, every module exposing ``register(app: typer.Typer)``."""
