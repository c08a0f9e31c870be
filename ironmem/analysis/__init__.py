"""Tools that measure what the three rules save: token counting, the prefix-cache simulator, session replay and
the usage meter. Nothing in the runtime (``ironmem.core``) depends on this package."""
