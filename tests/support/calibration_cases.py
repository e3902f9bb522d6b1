"""The calibration cases: tiny llama models and the llama-server flags they are checked under.

Shared by the contract test that boots llama-server on them (tests/contract/
test_plan_calibration.py) and the unit test that reads the load logs kept from a machine with AMX
(tests/unit/test_cpu_variant_logs.py): the models are seeded, so both see the same tensors.
"""

from __future__ import annotations

from dataclasses import dataclass

import gguf

from tests.support.tiny_gguf import TinyLlamaSpec

Q = gguf.GGMLQuantizationType


@dataclass(frozen=True)
class Case:
    """One model and server configuration."""

    name: str
    spec: TinyLlamaSpec
    ctx: int
    parallel: int
    cache: str
    unified: bool = False


CASES = [
    Case("f16-c4096-np1-f16", TinyLlamaSpec(4, 256, 4, 4, 512, Q.F16), 4096, 1, "f16"),
    Case("q8-c8192-np2-q8_0", TinyLlamaSpec(4, 256, 4, 4, 512, Q.Q8_0), 8192, 2, "q8_0"),
    Case("f32-c16384-np4-q4_0", TinyLlamaSpec(3, 256, 4, 2, 512, Q.F32), 16384, 4, "q4_0"),
    Case("gqa-c3000-np3-f16", TinyLlamaSpec(5, 256, 8, 2, 384, Q.F16), 3000, 3, "f16"),
    Case("kvu-c6000-np2-q8_0", TinyLlamaSpec(2, 128, 4, 4, 256, Q.F16), 6000, 2, "q8_0", True),
    Case("q4-c4096-np2-f16", TinyLlamaSpec(4, 256, 4, 2, 512, Q.Q4_0), 4096, 2, "f16"),
]
