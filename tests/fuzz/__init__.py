"""The fuzz suite (issue 13): graph JSON, declarative libs, params, safetensors, bundles, CLI."""
