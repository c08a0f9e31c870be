"""Commands of the ``ironmem`` CLI contributed by feature modules (each exposes ``register(app)``)."""
