"""Parse a `vllm serve` argv with vLLM's own parser; run by the vLLM venv's python.

Usage: `VLLM_TARGET_DEVICE=cpu python vllm_parse_args.py vllm serve MODEL FLAGS...`.
Prints the parsed namespace as JSON (the values the tests check) and exits 0; an argv vLLM
rejects exits non-zero (argparse's 2, or 3 when validation refuses it) with vLLM's message.
"""

from __future__ import annotations

import json
import os
import sys

EXIT_INVALID = 3


def main(argv: list[str]) -> int:
    """Parse and validate argv (which starts with `vllm serve`); print the namespace."""
    if argv[:2] != ["vllm", "serve"]:
        print("argv must start with: vllm serve", file=sys.stderr)
        return 2
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    from vllm.entrypoints.common.cli_args import make_arg_parser, validate_parsed_serve_args
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = make_arg_parser(FlexibleArgumentParser(prog="vllm serve"))
    namespace = parser.parse_args(argv[2:])
    # `vllm serve` moves its positional model_tag into model before validation.
    if getattr(namespace, "model_tag", None):
        namespace.model = namespace.model_tag
    try:
        validate_parsed_serve_args(namespace)
    except (TypeError, ValueError) as exc:
        print(f"vllm refused the arguments: {exc}", file=sys.stderr)
        return EXIT_INVALID
    print(json.dumps(vars(namespace), default=repr, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
