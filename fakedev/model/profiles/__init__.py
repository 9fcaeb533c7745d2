"""Built-in node profiles, shipped as YAML package data."""
