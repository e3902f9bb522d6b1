"""A Qwen GGUF on a k3s node with llm-infra's components, in another Pulumi program."""

from example import main

main()
