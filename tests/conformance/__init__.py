"""Hermes conformance suite."""
