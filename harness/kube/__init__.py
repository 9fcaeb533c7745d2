"""The harness's only way to the Kubernetes API: raw JSON over HTTPS, camelCase kept as the API sends it."""
