"""Engine launch command lines pasted with a log: ``vllm serve MODEL --enforce-eager``,
``python3 -m sglang.launch_server --model-path X --disable-cuda-graph``, docker/k8s
``command:`` / ``args:`` lists, shell lines with ``\\`` continuations, prompts and
``NAME=value`` environment prefixes.

Many pastes carry only what the user typed, not the engine's own config echo. The flags
become ``config`` events under the keys the echo parsers emit (argparse's dest rule
``--a-b`` -> ``a_b``, plus the few options whose dest or echoed field differs), marked
``origin=cmdline``: readers apply them before any echo (``diag.facts.record``), so what the
engine says it used wins over what was typed.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from typing import Any, Literal

import yaml

from diag.normalize.prefix import LogLine
from diag.parsers.base import Block, Context, LineParser
from diag.parsers.configs import parse_value
from diag.parsers.vllm.startup import flatten_settings

ORIGIN = "cmdline"
Engine = Literal["vllm", "sglang"]


@dataclass(frozen=True)
class Entry:
    """One way to launch an engine: the tokens that name it (a console script and its
    subcommands, or ``-m module``) and the dest a leading bare word fills, if any."""

    engine: Engine
    program: tuple[str, ...]
    positional: str | None = None


ENTRIES: tuple[Entry, ...] = (
    # vllm==0.11.0:vllm-0.11.0.dist-info/entry_points.txt: vllm = vllm.entrypoints.cli.main:main;
    # "serve" (vllm/entrypoints/cli/serve.py:42) takes [model_tag], which becomes model (:47-48)
    Entry("vllm", ("vllm", "serve"), "model"),
    Entry("vllm", ("-m", "vllm.entrypoints.cli.main", "serve"), "model"),
    # "bench throughput"/"latency" (vllm/entrypoints/cli/benchmark/throughput.py:12,
    # latency.py:12) take the engine args (vllm/benchmarks/throughput.py:604,
    # latency.py:74); "bench serve" is the client and is left out
    Entry("vllm", ("vllm", "bench", "throughput")),
    Entry("vllm", ("vllm", "bench", "latency")),
    # vllm==0.11.0:vllm/entrypoints/openai/api_server.py:1942-1950 (make_arg_parser)
    Entry("vllm", ("-m", "vllm.entrypoints.openai.api_server")),
    # sglang==0.5.2:sglang/launch_server.py (prepare_server_args(sys.argv[1:])); the
    # benchmarks take ServerArgs.add_cli_args too (bench_one_batch.py, bench_offline_throughput.py)
    Entry("sglang", ("-m", "sglang.launch_server")),
    Entry("sglang", ("-m", "sglang.bench_one_batch")),
    Entry("sglang", ("-m", "sglang.bench_offline_throughput")),
    # sglang==0.5.23:entry_points.txt sglang = sglang.cli.main:main, subcommand "serve"
    Entry("sglang", ("sglang", "serve")),
)


_FIRST_WORDS = frozenset(e.program[0] for e in ENTRIES)


@dataclass(frozen=True)
class FlagRules:
    """How one engine's parser reads its flags, beyond the dest rule."""

    # option strings whose echoed key is not their own dest-rule name
    aliases: dict[str, str]
    # flags that take no value (store_true / BooleanOptionalAction): a bare word after one
    # is a positional, not its value
    switches: frozenset[str]
    # nargs="+" flags: every bare word up to the next flag is one list
    lists: frozenset[str]
    # BooleanOptionalAction's --no-<name> sets <name> False
    negations: bool
    # environment variables of the engine (its envs module reads these names)
    env_prefix: str
    # the option whose value is a JSON dict also settable as --opt.<key> / -O.<key>
    dict_options: dict[str, str] = field(default_factory=dict)


RULES: dict[Engine, FlagRules] = {
    "vllm": FlagRules(
        # vllm==0.11.0:vllm/engine/arg_utils.py:548,652-688,934
        aliases={
            "-q": "quantization",
            "-pp": "pipeline_parallel_size",
            "-tp": "tensor_parallel_size",
            "-dcp": "decode_context_parallel_size",
            "-dp": "data_parallel_size",
            "-dpn": "data_parallel_rank",
            "-dpr": "data_parallel_start_rank",
            "-dpl": "data_parallel_size_local",
            "-dpa": "data_parallel_address",
            "-dpp": "data_parallel_rpc_port",
            "-dpb": "data_parallel_backend",
            "-O": "compilation_config",
        },
        # bool fields are BooleanOptionalAction (arg_utils.py:206-208); enforce_eager (:550)
        switches=frozenset({"enforce_eager", "enable_prefix_caching", "enable_chunked_prefill"}),
        lists=frozenset({"cuda_graph_sizes"}),  # list[int] -> nargs="+" (arg_utils.py:220-229)
        negations=True,
        # vllm==0.11.0:vllm/envs.py reads VLLM_*; its graph switches: VLLM_USE_V1 (:900),
        # VLLM_ENABLE_CUDAGRAPH_GC (:1363), VLLM_DISABLE_PAD_FOR_CUDAGRAPH (:1369)
        env_prefix="VLLM_",
        # -O3 / -O 3 / -O.level=3 / --compilation-config.cudagraph_mode=NONE
        # (vllm==0.11.0:vllm/utils/__init__.py:1874-1967)
        dict_options={"-O": "compilation_config", "--compilation-config": "compilation_config"},
    ),
    "sglang": FlagRules(
        # sglang==0.5.2:sglang/srt/server_args.py:859,1124,1131,1388,1414,1541,1600 and
        # from_cli_args (:2224-2228: tp_size = tensor_parallel_size, ...)
        aliases={
            "--model": "model_path",
            "--tensor-parallel-size": "tp_size",
            "--pipeline-parallel-size": "pp_size",
            "--data-parallel-size": "dp_size",
            "--expert-parallel-size": "ep_size",
            "--ep": "ep_size",
            "--nccl-init-addr": "dist_init_addr",
            "--speculative-draft-model": "speculative_draft_model_path",
            # argparse takes a unique prefix (allow_abbrev; prepare_server_args :2563 builds
            # a plain ArgumentParser): --tp/--pp/--dp are --tp-size/--pp-size/--dp-size
            "--tp": "tp_size",
            "--pp": "pp_size",
            "--dp": "dp_size",
        },
        # store_true (server_args.py:1894,1899,1980)
        switches=frozenset(
            {"disable_cuda_graph", "disable_cuda_graph_padding", "enable_torch_compile"}
        ),
        lists=frozenset({"cuda_graph_bs"}),  # nargs="+" (server_args.py:1890)
        negations=False,
        # sglang==0.5.2 reads SGLANG_* (none of them turns graphs on or off)
        env_prefix="SGLANG_",
    ),
}

# where a launch command may start: cheap test before any splitting
_LAUNCH = re.compile(
    r"(?:^|[\s/'\"\[,])(?:vllm\s+(?:serve|bench)\b|sglang\s+serve\b|-m\s+(?:vllm|sglang)\.)"
)
# docker / compose / k8s YAML: `command: [...]`, `args: [...]`, or the key alone (block list)
_YAML_KEY = re.compile(r"^\s*(?:-\s+)?(?P<key>command|args|entrypoint)\s*:\s*(?P<rest>.*?)\s*$")
_YAML_ITEM = re.compile(r"^(?P<indent>\s*)-\s+(?P<item>.*?)\s*$")
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_SHELL_STOP = re.compile(r"^(?:\|\|?|&&?|;|[0-9]*>>?.*|<.*|#.*)$")
_NUMBER = re.compile(r"^-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?$")
MAX_CONTINUED = 200  # lines one command may span


@dataclass(frozen=True)
class Command:
    """A recognised launch: the engine, its config keys as the echo spells them, its env."""

    engine: Engine
    settings: list[tuple[str, Any]]
    env: list[tuple[str, Any]]


def find_entry(tokens: list[str]) -> tuple[int, Entry] | None:
    """Where in the words a launch starts, and which one it is."""
    for start in range(len(tokens)):
        if _program_word(tokens[start]) not in _FIRST_WORDS:
            continue
        for entry in ENTRIES:
            n = len(entry.program)
            if tuple(_program_word(t) for t in tokens[start : start + n]) == entry.program:
                return start, entry
    return None


def parse_command(tokens: list[str]) -> Command | None:
    """Tokens of a shell line or YAML list -> the launch they hold, None if none."""
    found = find_entry(tokens)
    if found is None:
        return None
    start, entry = found
    rules = RULES[entry.engine]
    env = [
        (name, _typed(value))
        for name, _, value in (t.partition("=") for t in tokens[:start] if _ENV.match(t))
        if name.startswith(rules.env_prefix)
    ]
    settings = read_flags(
        _until_shell_stop(tokens[start + len(entry.program) :]), rules, entry.positional
    )
    if not settings and not env:
        return None
    return Command(entry.engine, settings, env)


def _program_word(token: str) -> str:
    """``/opt/venv/bin/vllm`` names the ``vllm`` script; other words stand as they are."""
    return token.rsplit("/", 1)[-1] if "/" in token and not token.startswith("-") else token


def _until_shell_stop(tokens: list[str]) -> list[str]:
    for i, t in enumerate(tokens):
        if _SHELL_STOP.match(t):
            return tokens[:i]
    return tokens


def read_flags(args: list[str], rules: FlagRules, positional: str | None) -> list[tuple[str, Any]]:
    """argparse's reading of the flags, as far as the echo keys need it."""
    out: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    i = 0
    while i < len(args):
        tok = args[i]
        i += 1
        if not _is_flag(tok):
            if positional is not None and positional not in out:
                out[positional] = tok
            continue
        name, eq, inline = tok.partition("=")
        if "-O" in rules.dict_options and tok.startswith("-O") and tok != "-O" and tok[2] != ".":
            # -O3 / -O=3 is a level (vllm==0.11.0:vllm/utils/__init__.py:1891-1896)
            name, eq, inline = "-O.level", "=", tok[3:] if tok[2] == "=" else tok[2:]
        elif (
            name == "-O"
            and "-O" in rules.dict_options
            and i < len(args)
            and args[i] in {"0", "1", "2", "3"}
        ):
            name = "-O.level"  # -O 3 (utils/__init__.py:1897-1901)
        option, dot, sub = name.partition(".")
        target = rules.dict_options.get(option.replace("_", "-"))
        if dot and target is not None:
            if not eq and i < len(args):
                inline, eq = args[i], "="
                i += 1
            if eq:  # -O.a.b=v is {"a": {"b": v}} (utils/__init__.py:1903-1967)
                *path, leaf = sub.split(".")
                node = nested.setdefault(target, {})
                for part in path:
                    node = node.setdefault(part, {})
                    if not isinstance(node, dict):
                        break
                else:
                    node[leaf] = _json_value(inline)
            continue
        key = _dest(name, rules)
        if rules.negations and key.startswith("no_") and not eq:
            out[key[3:]] = False
            continue
        if eq:
            out[key] = _typed(inline)
        elif key in rules.lists:
            values = []
            while i < len(args) and not _is_flag(args[i]):
                values.append(_typed(args[i]))
                i += 1
            out[key] = values
        elif key in rules.switches or i >= len(args) or _is_flag(args[i]):
            out[key] = True
        else:
            out[key] = _typed(args[i])
            i += 1
    for key, sub_values in nested.items():
        base = out.get(key)
        out[key] = {**(base if isinstance(base, dict) else {}), **sub_values}
    return flatten_settings(out)


def _is_flag(token: str) -> bool:
    return token.startswith("-") and len(token) > 1 and not _NUMBER.match(token)


def _dest(option: str, rules: FlagRules) -> str:
    """argparse's dest: the option without dashes, ``-`` -> ``_`` (vLLM also accepts
    ``--a_b``: utils/__init__.py:1879-1889); aliases give the echoed name."""
    if option in rules.aliases:
        return rules.aliases[option]
    return option.lstrip("-").replace("-", "_")


def _json_value(text: str) -> Any:
    """A dotted option's value: JSON, else the text (utils/__init__.py:1955-1958)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return text


def _typed(text: str) -> Any:
    """A flag's value as the echo prints it: numbers, JSON/Python dicts and lists, text."""
    s = text.strip()
    if _NUMBER.match(s):
        return int(s) if re.fullmatch(r"-?\d+", s) else float(s)
    if s[:1] in "[{":
        try:
            return json.loads(s)
        except (ValueError, RecursionError):  # parse_value bounds the nesting itself
            try:
                return parse_value(s)
            except ValueError:
                return s
    return s


def split_shell(text: str) -> list[str]:
    """``shlex`` words of a shell line; an unclosed quote (a cut paste) falls back to
    whitespace words so the flags before it still count."""
    try:
        return shlex.split(text, posix=True)
    except ValueError:
        return text.split()


def _yaml_list(text: str) -> list[str] | None:
    try:
        value = yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError):
        return None
    if isinstance(value, list) and all(isinstance(v, str | int | float) for v in value):
        return [str(v) for v in value]
    if isinstance(value, str):
        return split_shell(value)
    return None


def _yaml_scalar(text: str) -> str:
    """One ``- item`` of a YAML block list as the program sees it (quotes removed)."""
    try:
        value = yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError):
        return text
    return (
        str(value) if isinstance(value, str | int | float) and not isinstance(value, bool) else text
    )


# ------------------------------------------------------------------------- the parser
class CmdlineParser(LineParser):
    engine = "common"
    anchors = ("vllm", "sglang", "command:", "args:", "entrypoint:")

    def feed(self, line: LogLine, ctx: Context) -> Block | None:
        text = line.msg.rstrip()
        key = _YAML_KEY.match(text)
        if key is not None:
            rest = key.group("rest")
            if not rest:
                return _YamlListBlock(line, key.group("key"))
            if rest.startswith("["):
                tokens = _yaml_list(rest)
                if tokens is not None:
                    _yaml_command(key.group("key"), tokens, line, ctx)
                return None
        if not _LAUNCH.search(text):
            return None
        if text.endswith("\\"):
            return _ContinuedBlock(line, text[:-1])
        _emit(parse_command(split_shell(text)), line, ctx)
        return None


class _ContinuedBlock(Block):
    """A shell command continued with ``\\`` at the end of each line."""

    def __init__(self, first: LogLine, text: str) -> None:
        self.first = first
        self.parts = [text]

    def offer(self, line: LogLine) -> bool:
        text = line.msg.rstrip()
        self.parts.append(text[:-1] if text.endswith("\\") else text)
        if not text.endswith("\\") or len(self.parts) >= MAX_CONTINUED:
            self.done = True
        return True

    def finish(self, ctx: Context) -> None:
        _emit(parse_command(split_shell(" ".join(self.parts))), self.first, ctx)


class _YamlListBlock(Block):
    """``command:`` / ``args:`` followed by ``- item`` lines (compose, k8s)."""

    def __init__(self, first: LogLine, key: str) -> None:
        self.first = first
        self.key = key
        self.items: list[str] = []
        self.indent: str | None = None

    def offer(self, line: LogLine) -> bool:
        m = _YAML_ITEM.match(line.msg.rstrip())
        if m is None or (self.indent is not None and m.group("indent") != self.indent):
            self.done = True
            return False
        self.indent = m.group("indent")
        self.items.append(_yaml_scalar(m.group("item")))
        if len(self.items) >= MAX_CONTINUED:
            self.done = True
        return True

    def finish(self, ctx: Context) -> None:
        _yaml_command(self.key, self.items, self.first, ctx)


@dataclass
class CmdlineState:
    """A k8s/compose ``command:`` naming the program alone, waiting for its ``args:``."""

    program: list[str] = field(default_factory=list)


def _yaml_command(key: str, items: list[str], line: LogLine, ctx: Context) -> None:
    """``command:``/``entrypoint:`` may name the program and ``args:`` (k8s: appended to
    the command) carry its flags; either may hold the whole launch."""
    state = ctx.state_of(CmdlineState)
    if key == "args" and state.program and find_entry(items) is None:
        items = [*state.program, *items]
    elif key != "args" and find_entry(items) is not None:
        state.program = items
    _emit(parse_command(items), line, ctx)


def _emit(cmd: Command | None, line: LogLine, ctx: Context) -> None:
    if cmd is None:
        return
    for key, value in (*cmd.settings, *cmd.env):
        ctx.emit("config", line, engine=cmd.engine, origin=ORIGIN, key=key, value=value)
