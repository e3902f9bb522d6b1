"""A stand-in for the Hugging Face hub on loopback, and header-only GGUF files to serve with it.

`infra.hub.server` speaks the part of the hub protocol `huggingface_hub`, `llm-infra lock` and
the fetcher use, over a directory of repos (`llm-infra hub serve DIR`) or repos held in memory
(`infra.hub.repos`; the tests' emulator adds its faults on top). `infra.hub.gguf_stub` writes
GGUF files whose header is real and whose data region is never materialised (sparse files), so a
big model can be locked, planned and rendered offline.
"""
