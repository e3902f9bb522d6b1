"""Extra server arguments: read as each server's parser reads them, refused when the program owns
them or the server does not know them, and passed on as exact argv words."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from components import extra_args, option_categories
from components.extra_args import (
    MAX_WORD,
    Option,
    OptionTable,
    llama_server_options,
    owned_spellings,
    vllm_serve_options,
)
from components.llamacpp import inputs as llama_inputs
from components.llamacpp.manifests import (
    kubernetes_args,
    llama_server_args,
    server_argv,
    server_container,
)
from components.validation import Problem, input_problems, named, snake_path
from components.vllm import inputs as vllm_inputs
from components.vllm.builders import compose_words, vllm_serve_args
from infra.config import ConfigError, parse_stack
from infra.config.inputs import STACK_KEYS
from tests.conftest import problems_of, stack_values
from tests.support.component_inputs import llama_server, vllm_server
from tests.support.extra_args import kubelet_expanded
from tests.support.profiles import examples

LLAMA = llama_server_options()
VLLM = vllm_serve_options()
LLAMA_OWNED = owned_spellings(LLAMA, llama_inputs.OWNED_OPTIONS)
VLLM_OWNED = owned_spellings(VLLM, vllm_inputs.OWNED_OPTIONS)


def owned_cases(table: OptionTable, owned: dict[Option, tuple[str | int, ...]]) -> list[Any]:
    """(spelling, the input that owns it) for every spelling of every owned option."""
    return sorted((name, where) for option, where in owned.items() for name in option.names)


def words_for(option: Option, spelling: str, inline: bool) -> list[str]:
    """An option as extra words, with as many values as it takes (`=value` when inline)."""
    count = option.values if isinstance(option.values, int) else 1
    if inline and count:
        return [f"{spelling}=1", *["1"] * (count - 1)]
    return [spelling, *["1"] * count]


def underscored(spelling: str) -> str:
    """The `_` spelling of a `--` option both parsers read as the `-` one."""
    return "--" + spelling[2:].replace("-", "_") if spelling.startswith("--") else spelling


def problems_named(problems: list[tuple[Any, str]]) -> list[tuple[Any, str]]:
    return [(where, named(message, snake_path)) for where, message in problems]


@pytest.mark.parametrize(
    ("table", "owned", "check"),
    [
        (LLAMA, LLAMA_OWNED, llama_inputs.extra_args_problems),
        (VLLM, VLLM_OWNED, vllm_inputs.extra_args_problems),
    ],
    ids=["llama-server", "vllm"],
)
@settings(max_examples=examples(300))
@given(data=st.data(), underscore=st.booleans(), inline=st.booleans())
def test_an_owned_option_is_refused_in_every_spelling_naming_its_input(
    table: OptionTable,
    owned: dict[Option, tuple[str | int, ...]],
    check: Callable[[list[str]], list[Problem]],
    data: st.DataObject,
    underscore: bool,
    inline: bool,
) -> None:
    spelling, where = data.draw(st.sampled_from(owned_cases(table, owned)), label="case")
    option = table.lookup(spelling)
    assert option is not None
    written = underscored(spelling) if underscore else spelling
    problems = problems_named(check(words_for(option, written, inline)))
    assert problems, (written, inline)
    location, message = problems[0]
    assert location == (0,)
    assert f"rendered from {snake_path(where)}: set that instead" in message


def unique_abbreviations(table: OptionTable, owned: Any) -> list[tuple[str, str]]:
    """(option, its longest prefix that argparse reads as it) of each owned long option."""
    found = []
    for option in sorted({o.name for o in owned}):
        for cut in range(len(option) - 1, 3, -1):
            prefix = option[:cut]
            if table.lookup(prefix) is None and len(table.abbreviated(prefix)) == 1:
                found.append((option, prefix))
                break
    return found


@pytest.mark.parametrize(("option", "prefix"), unique_abbreviations(VLLM, VLLM_OWNED))
def test_an_abbreviated_owned_vllm_option_is_refused_naming_its_input(
    option: str, prefix: str
) -> None:
    # argparse (allow_abbrev) reads any unique prefix of a long option as the option.
    ((where, message),) = problems_named(vllm_inputs.extra_args_problems([prefix, "1"]))
    assert where == (0,)
    assert f"abbreviates {option}, which " in message and "write options in full" in message


def stack_problems(stack: str, table: OptionTable, option: str) -> list[str]:
    """The problems of the stack with `option` (and its values) as its server's extra args."""
    values = stack_values(stack)
    found = table.lookup(option)
    assert found is not None
    values["server"]["extraArgs"] = words_for(found, option, inline=False)
    return problems_of(values)


@pytest.mark.parametrize(
    ("field", "option"), sorted(llama_inputs.FLAG_OPTIONS.items()), ids=lambda v: str(v)
)
def test_a_stack_file_names_the_key_that_sets_an_owned_llama_server_option(
    field: str, option: str
) -> None:
    problems = stack_problems("strix-halo", LLAMA, option)
    key = STACK_KEYS["LlamaCppVulkanServer"][f"flags.{field}"]
    assert f"server.extraArgs[0]: '{option}'" in problems[0]
    assert f"is rendered from {key}: set that instead" in problems[0]


@pytest.mark.parametrize(
    ("field", "option"), sorted(vllm_inputs.FLAG_OPTIONS.items()), ids=lambda v: str(v)
)
def test_a_stack_file_names_the_key_that_sets_an_owned_vllm_option(field: str, option: str) -> None:
    problems = stack_problems("mi300x", VLLM, option)
    key = STACK_KEYS["VllmRocmServer"].get(f"flags.{field}", "server")
    (problem,) = [p for p in problems if p.startswith("server.extraArgs")]
    assert problem.startswith(f"server.extraArgs[0]: '{option}'")
    assert f"is rendered from {key}" in problem


def test_a_fleet_names_the_server_entry_whose_extra_args_are_refused() -> None:
    values = copy.deepcopy(stack_values("strix-halo-pair"))
    values["servers"][1]["extraArgs"] = ["--ctx-size", "4096"]
    with pytest.raises(ConfigError) as caught:
        parse_stack(values)
    assert caught.value.problems == [
        "servers[1].extraArgs[0]: '--ctx-size' is rendered from servers[1].contextSize: set that "
        "instead"
    ]


_KNOWN = {n.lstrip("-") for n in [*LLAMA.by_name, *VLLM.by_name]}


@settings(max_examples=examples(200))
@given(st.from_regex(r"--[a-z][a-z0-9-]{1,24}", fullmatch=True))
def test_an_option_the_server_does_not_know_is_refused(spelling: str) -> None:
    for table, check in (
        (LLAMA, llama_inputs.extra_args_problems),
        (VLLM, vllm_inputs.extra_args_problems),
    ):
        if table.lookup(spelling) is not None or table.abbreviated(spelling):
            continue
        ((where, message),) = check([spelling])
        assert where == (0,)
        assert f"{spelling!r} is not an option of {table.software}" in message


def test_a_typo_names_the_nearest_option() -> None:
    ((_, message),) = llama_inputs.extra_args_problems(["--n-cpu-mo", "3"])
    assert message.endswith("(did you mean --n-cpu-moe?)")
    ((_, message),) = vllm_inputs.extra_args_problems(["--enforce-eagr"])
    assert message.endswith("(did you mean --enforce-eager?)")


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["--override-kv"], "takes 1 value (KEY=TYPE:VALUE,...) and none follows"),
        (["--override-kv", "--tags", "x"], "takes 1 value (KEY=TYPE:VALUE,...) and an option"),
        (["--control-vector-layer-range", "1"], "takes 2 values (START END) and only 1 follow"),
        (["1024"], "'1024' is not an option of llama-server b11434: each value follows its"),
        (["--tags=x"], "reads no --flag=value; write '--tags' and 'x' as two words"),
        (["--hf-token", "hf_x"], "is refused: a secret in argv"),
        (["--list-devices"], "is refused: llama-server prints and exits instead of serving"),
        (["--api-prefix", "/v2"], "it moves every endpoint, the probes' /health included"),
        (["-hf", "org/model"], "is rendered from flags.model_path: set that instead"),
    ],
)
def test_llama_server_words_that_are_refused(words: list[str], message: str) -> None:
    problems = problems_named(llama_inputs.extra_args_problems(words))
    assert problems and problems[0][0] == (0,)
    assert message in problems[0][1], problems


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["--max-log-len"], "takes 1 value and none follows"),
        (["--response-role", "-x"], "takes 1 value and an option follows"),
        (["--enforce-eager=1"], "--enforce-eager takes no value"),
        (["--uvicorn-log-level", "loud"], "'loud' is not a choice of --uvicorn-log-level"),
        (["--config", "/etc/vllm.yaml"], "is refused: it reads more options from a file"),
        (["--uds", "/tmp/s"], "a socket file, not the port Caddy forwards to"),
        (["--hf-overrides.x"], None),
    ],
)
def test_vllm_words_that_are_refused(words: list[str], message: str | None) -> None:
    problems = problems_named(vllm_inputs.extra_args_problems(words))
    if message is None:
        assert problems[0][1].endswith("takes 1 value and none follows")
        return
    assert problems and problems[0][0] == (0,)
    assert message in problems[0][1], problems


def test_words_the_servers_accept_pass() -> None:
    assert (
        llama_inputs.extra_args_problems(
            ["--n-cpu-moe", "20", "-ub", "1024", "--no-warmup", "--tags", "a b", "--seed", "-1"]
        )
        == []
    )
    assert vllm_inputs.extra_args_problems(
        ["--enforce-eager", "--max-log-len=200", "--hf-overrides.rope_theta", "1e6",
         "--allowed-origins", "https://a.example", "--disable-log-stats"]
    ) == []  # fmt: skip


@pytest.mark.parametrize(
    "word", ["a\nb", "a\rb", "a\x00b", "a\tb", "\x1b[31m", "a" * (MAX_WORD + 1)]
)
def test_a_word_with_a_control_character_or_too_long_is_refused_by_every_component(
    word: str,
) -> None:
    for args, args_type in (
        (llama_server(), llama_inputs.LlamaCppVulkanServerArgs),
        (vllm_server(), vllm_inputs.VllmRocmServerArgs),
    ):
        args["extra_args"] = ["--tags" if "llama" in args_type.__name__.lower() else "--seed", word]
        problems = input_problems(args, args_type)
        assert [where for where, _ in problems] == [("extra_args", 1)], problems


def llama_args_with(words: list[str], **changes: Any) -> Any:
    from components.validation import with_defaults

    args = {**llama_server(), **changes, "extra_args": words}
    return with_defaults(args, llama_inputs.LlamaCppVulkanServerArgs)


def every_flag_rendered_is_owned(argv: list[str], table: OptionTable, owned: Any) -> None:
    options = [table.lookup(word) for word in argv if word.startswith("-")]
    assert all(option is not None and option in owned for option in options), [
        word for word in argv if word.startswith("-") and table.lookup(word) not in owned
    ]


@pytest.mark.parametrize("switch", [True, False])
def test_every_option_the_llama_server_builder_renders_is_owned(switch: bool) -> None:
    args = llama_args_with([], api_key="sk")
    flags = {
        **args["flags"], "jinja": switch, "cont_batching": switch, "repack": switch,
        "metrics": switch, "top_k": 40, "min_p": 0.05,
    }  # fmt: skip
    every_flag_rendered_is_owned(
        server_argv({**args, "flags": flags, "gpu_gate": switch}),  # type: ignore[typeddict-item]
        LLAMA,
        LLAMA_OWNED,
    )
    every_flag_rendered_is_owned(llama_server_args(flags), LLAMA, LLAMA_OWNED)  # type: ignore[arg-type]


@pytest.mark.parametrize("switch", [True, False])
def test_every_option_the_vllm_builder_renders_is_owned(switch: bool) -> None:
    flags = {**vllm_server()["flags"], "enable_prefix_caching": switch}
    argv = vllm_serve_args(flags)  # type: ignore[arg-type]
    assert argv[:3] == ["vllm", "serve", flags["model"]]
    every_flag_rendered_is_owned(argv[3:], VLLM, VLLM_OWNED)
    assert VLLM.lookup("--model") in VLLM_OWNED  # MODEL's own option


def test_the_kubelet_rule_as_implemented_here_expands_what_the_api_documents() -> None:
    env = {"HOME": "/scratch"}
    assert kubelet_expanded("$(HOME)/x", env) == "/scratch/x"
    assert kubelet_expanded("$(NOPE)", env) == "$(NOPE)"
    assert kubelet_expanded("$$(HOME)", env) == "$(HOME)"
    assert kubelet_expanded("a$b$", env) == "a$b$"


HOSTILE_VALUES = [
    "$(reboot)", "$(HOME)", "$$(HOME)", "${HOME}", "`id`", "; rm -rf /", "a' \"b\" \\c",
    "x && y | z > /tmp/w", "*", "~root", "- [a, b]", "{a: 1}", "&anchor *alias", "# comment",
    "%TAG ! x", "'", '"', "\\", "  padded  ", "",
]  # fmt: skip


HOSTILE_VALUE = st.one_of(
    st.sampled_from(HOSTILE_VALUES),
    st.text(st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")), max_size=64),
)


@settings(max_examples=examples(200))
@given(value=HOSTILE_VALUE)
def test_a_llama_server_value_with_metacharacters_reaches_the_server_as_one_exact_word(
    value: str,
) -> None:
    if not value.isprintable() or LLAMA.lookup(value.partition("=")[0]) is not None:
        return  # a control character is refused; a known option is no value (tested above)
    words = ["--tags", value, "--reasoning-budget-message", value]
    args = llama_args_with(words)
    assert input_problems(args, llama_inputs.LlamaCppVulkanServerArgs) == []
    container = server_container(args)
    env = {item["name"]: item["value"] for item in container["env"]}
    # Through the Deployment's YAML and the kubelet's $(VAR) expansion, word for word.
    loaded = yaml.safe_load(yaml.safe_dump({"args": container["args"]}))["args"]
    assert [kubelet_expanded(word, env) for word in loaded][-4:] == words
    assert server_argv(args)[-4:] == words


@settings(max_examples=examples(200))
@given(value=HOSTILE_VALUE)
def test_a_vllm_value_with_metacharacters_is_one_exact_word_of_the_compose_command(
    value: str,
) -> None:
    if not value.isprintable() or value.startswith("-"):
        return
    words = ["--response-role", value]
    args = {**vllm_server(), "extra_args": words}
    assert input_problems(args, vllm_inputs.VllmRocmServerArgs) == []
    argv = vllm_serve_args(args["flags"], words)
    assert argv[-2:] == words
    command = yaml.safe_load(yaml.safe_dump({"command": compose_words(argv)}))["command"]
    # compose reads `$$` as `$` and nothing else of these words as a variable.
    assert [re.sub(r"\$\$", "$", w) for w in command] == argv
    assert all(not re.search(r"(?<!\$)\$(?!\$)", w.replace("$$", "")) for w in command)


def test_escaping_changes_nothing_of_words_without_a_dollar() -> None:
    argv = server_argv(llama_args_with([]))
    assert kubernetes_args(argv) == argv
    vllm = vllm_serve_args(vllm_server()["flags"])
    assert compose_words(vllm) == vllm


@pytest.mark.parametrize(
    ("value", "bad"),
    [
        ("exps", "exps"),
        ("a=CPU,b", "b"),
        (r"blk\.[0-9]{1,2}\.x=CPU", r"blk\.[0-9]{1"),
        ("=CPU", "=CPU"),
    ],
)
def test_a_tensor_override_that_llama_server_cannot_split_is_refused_at_its_value(
    value: str, bad: str
) -> None:
    for option in ("-ot", "--override-tensor", "-otd"):
        ((where, message),) = llama_inputs.extra_args_problems([option, value])
        assert where == (1,)
        assert message.startswith(f"{bad!r} is not PATTERN=BUFFER")
    assert llama_inputs.extra_args_problems(["-ot", r"exps=CPU,blk\.0\.=CPU"]) == []


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("(unclosed", "is not a regular expression"),
        ("(?i)EXPS", "syntax llama.cpp's ECMAScript regex does not read"),
        (r"\Ablk", "syntax llama.cpp's ECMAScript regex does not read"),
        ("(?P<n>exps)", "syntax llama.cpp's ECMAScript regex does not read"),
    ],
)
def test_a_tensor_override_pattern_both_regex_readers_cannot_share_is_refused(
    pattern: str, message: str
) -> None:
    ((where, problem),) = llama_inputs.extra_args_problems(["-ot", f"{pattern}=CPU"])
    assert where == (1,) and problem.startswith(f"{pattern!r} ") and message in problem
    assert llama_inputs.extra_args_problems(["-ot", r"(?:blk)\.(?!0\.)\d+\.ffn=CPU"]) == []


def test_flash_attention_off_with_a_quantized_v_cache_is_refused_naming_the_cache_key() -> None:
    values = copy.deepcopy(stack_values("strix-halo"))
    values["server"]["extraArgs"] = ["--flash-attn", "off"]
    with pytest.raises(ConfigError) as caught:
        parse_stack(values)
    assert caught.value.problems == [
        "server.extraArgs[1]: 'off' with the quantized V cache 'q8_0' of server.cacheTypeV: "
        "llama-server b11434 refuses to start (a quantized V cache needs flash attention)"
    ]
    values["server"].update(cacheTypeK="f16", cacheTypeV="f16")
    assert parse_stack(values).server.extra_args == ["--flash-attn", "off"]  # type: ignore[union-attr]
    args = llama_args_with(["-fa", "off"])  # the sample's q8_0 cache
    ((where, message),) = input_problems(args, llama_inputs.LlamaCppVulkanServerArgs)
    assert where == ("extra_args", 1) and "of flags.cache_type_v" in named(message, snake_path)


def test_log_disable_beside_the_gpu_gate_is_refused_naming_the_gate() -> None:
    values = copy.deepcopy(stack_values("strix-halo"))  # gpuGate: true
    values["server"]["extraArgs"] = ["--log-disable"]
    with pytest.raises(ConfigError) as caught:
        parse_stack(values)
    assert caught.value.problems == [
        "server.extraArgs[0]: silences the load log that server.gpuGate reads: the startup "
        "probe would never pass (drop one of them)"
    ]
    values["server"]["gpuGate"] = False
    assert parse_stack(values).server.extra_args == ["--log-disable"]  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("server", "table", "categories"),
    [
        ("llama", "llama_server_options", option_categories.LLAMA_SERVER),
        ("vllm", "vllm_serve_options", option_categories.VLLM_SERVE),
    ],
)
def test_every_option_that_opens_the_server_is_refused_in_every_spelling(
    server: str, table: str, categories: dict[str, str]
) -> None:
    options = getattr(extra_args, table)()
    check = (
        llama_inputs.extra_args_problems if server == "llama" else vllm_inputs.extra_args_problems
    )
    for spelling, category in categories.items():
        option = options.lookup(spelling)
        assert option is not None, f"{spelling} is not an option of {options.software}"
        for name in option.names:
            words = [name] + (["x"] if option.values == 1 else [])
            problems = problems_named(check(words))
            assert problems and problems[0][0] == (0,), (name, problems)
            assert "is refused: " + option_categories.REASONS[category] in problems[0][1], problems


@pytest.mark.parametrize(
    ("table", "refused", "uncountable"),
    [
        ("llama_server_options", option_categories.LLAMA_SERVER_REFUSED,
         option_categories.LLAMA_SERVER_UNCOUNTABLE),
        ("vllm_serve_options", option_categories.VLLM_SERVE_REFUSED,
         option_categories.VLLM_SERVE_UNCOUNTABLE),
    ],
)  # fmt: skip
def test_the_refusal_table_names_options_of_the_pinned_server_once(
    table: str, refused: dict[str, str], uncountable: dict[str, str]
) -> None:
    options = getattr(extra_args, table)()
    component = {options.lookup(s) for s in refused}
    plan = {options.lookup(s) for s in uncountable}
    assert None not in component | plan, [
        s for s in [*refused, *uncountable] if not options.lookup(s)
    ]
    assert len(component) == len(refused) and len(plan) == len(uncountable)
    assert not component & plan, sorted(o.name for o in component & plan if o)
