"""Memory and disk plans of a stack, computed before anything is downloaded or started."""
