"""`python -m infra.cli`: the `llm-infra` command."""

import sys

from infra.cli import main

sys.exit(main())
