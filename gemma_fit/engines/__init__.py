"""Stage 7, the engines: llama.cpp itself (llamacpp.run_check -> CheckResult), and vLLM, Ollama and Hugging
Face transformers beyond it.

Each engine is one module with an `ENGINE` object that meets `base.Engine` (its own options, defaults, estimate
and printed command) and one line in `registry._MODULES`; every engine answers with one `base.CheckResult`.
The rules, and the source version each one was read from, are in the engine modules and in
docs/engines.md. Sources read: vLLM 0.33.0 (sdist), transformers 5.24.0 (wheel), bitsandbytes 0.50.2
(wheel), Ollama (github ollama/ollama, one commit per file: server/routes.go 00188139, llm/server.go
5dbb81b7, ml/device.go 02725d3d, fs/ggml/ggml.go c664d9c1, api/types.go b8761ab0).
"""
