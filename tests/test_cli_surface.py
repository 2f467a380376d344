"""The b10621 command line on mlxcel-server and mlxcel serve: every spelling parses as b10621 reads it (values by
position, variables with its rules, the command line last), and every option is acted on, accepted as inert,
or refused at startup with one line naming the option, the value, the reason and the alternative."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import require
from oracle.reference import SOURCE_SUBDIR
from server.cachedir import cache_root
from server.cli.args import MLXCEL, build_parser
from server.cli.classify import RULES, check_value, refusals
from server.cli.parse import MLXCEL_OWN
from server.options import BY_ID, OPTIONS

PROGS = ("mlxcel-server", "mlxcel serve")
SRC = cache_root() / "reference" / "source" / SOURCE_SUBDIR


@pytest.fixture(autouse=True)
def _no_llama_variables(monkeypatch):
    import os

    for k in list(os.environ):
        if k.startswith(("LLAMA_ARG_", "LLAMA_API_KEY")) or k in ("HF_TOKEN", "MTMD_BACKEND_DEVICE"):
            monkeypatch.delenv(k)


def parse(*argv: str, prog: str = "mlxcel-server"):
    return build_parser(prog).parse_args(list(argv))


def refused(*argv: str) -> list[str]:
    return refusals(parse(*argv).given)


def _error(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as e:
        parse(*argv)
    assert e.value.code == 1
    return capsys.readouterr().err


def _sample(o) -> list[str]:
    """A value b10621 accepts for the option, as command-line tokens."""
    if o.kind in ("void", "bool"):
        return []
    if o.kind == "str_str":
        return ["0", "1"]
    return {
        "--load-mode": ["auto"],
        "--split-mode": ["none"],
        "--numa": ["isolate"],
        "--pooling": ["mean"],
        "--rope-scaling": ["yarn"],
        "--spec-type": ["none"],
        "--log-colors": ["auto"],
        "--flash-attn": ["on"],
        "--fit": ["on"],
        "--gpu-layers": ["all"],
        "--spec-draft-ngl": ["all"],
        "--cpu-range": ["0-1"],
        "--cpu-range-batch": ["0-1"],
        "--device": ["none"],
        "--spec-draft-device": ["none"],
        "--override-tensor": ["x=CPU"],
        "--spec-draft-override-tensor": ["x=CPU"],
        "--override-kv": ["tokenizer.ggml.add_bos_token=bool:false"],
        "--cache-type-k": ["f16"],
        "--cache-type-v": ["f16"],
        "--spec-draft-type-k": ["f16"],
        "--spec-draft-type-v": ["f16"],
        "--media-path": ["/"],
        "--slot-save-path": ["/"],
        "--api-key-file": [__file__],
        "--ui-config-file": [__file__],
        "--reasoning": ["on"],
        "--reasoning-format": ["none"],
        "--sleep-idle-seconds": ["5"],
        "--prio-batch": ["1"],
        "--spec-draft-prio": ["1"],
        "--spec-draft-prio-batch": ["1"],
        "--control-vector-scaled": ["f:0.5"],
        "--lora-scaled": ["f:0.5"],
        "--spec-ngram-simple-size-n": ["2"],
        "--spec-ngram-simple-size-m": ["2"],
        "--spec-ngram-simple-min-hits": ["2"],
        "--spec-ngram-map-k-size-n": ["2"],
        "--spec-ngram-map-k-size-m": ["2"],
        "--spec-ngram-map-k-min-hits": ["2"],
        "--spec-ngram-map-k4v-size-n": ["2"],
        "--spec-ngram-map-k4v-size-m": ["2"],
        "--spec-ngram-map-k4v-min-hits": ["2"],
        "--spec-ngram-mod-n-match": ["2"],
    }.get(o.id, ["1"])


REMOVED = {"--draft", "--draft-min", "--spec-ngram-size-n", "--spec-ngram-size-m", "--spec-ngram-min-hits"}


# ----- every spelling parses ----------------------------------------------------------------------------------


def test_the_table_holds_b10621s_323_long_and_84_short_spellings():
    spellings = {s for o in OPTIONS for s in (*o.spellings, *o.negatives)}
    assert len(OPTIONS) == 249
    assert len({s for s in spellings if s.startswith("--")}) == 323
    assert len({s for s in spellings if not s.startswith("--")}) == 84


def test_the_table_is_what_the_generator_makes_of_arg_cpp():
    require((SRC / "common" / "arg.cpp").is_file(), "needs the pinned llama.cpp sources")
    from compat.gen_cli_table import TABLE, build_table, render

    assert TABLE.read_text(encoding="utf-8") == render(build_table((SRC / "common" / "arg.cpp").read_text()))


@pytest.mark.parametrize("prog", PROGS)
def test_every_spelling_parses(prog):
    for o in OPTIONS:
        if o.id in REMOVED or o.id in ("--version", "--cache-list", "--completion-bash"):
            continue  # these print and exit: test_print_and_exit_options
        for spelling in (*o.spellings, *o.negatives):
            ns = parse(spelling, *_sample(o), prog=prog) if o.id != "--help" else None
            if ns is not None:
                assert [g.option for g in ns.given] == [o.id], spelling


def test_both_entry_points_dump_the_whole_surface():
    for prog, code in (
        ("mlxcel-server", "from server.cli.main import server_main; server_main()"),
        (
            "mlxcel serve",
            ("import sys; sys.argv[0] = 'mlxcel'; from server.cli.main import mlxcel_main; mlxcel_main()"),
        ),
    ):
        argv = [sys.executable, "-c", code, *(["serve"] if prog == "mlxcel serve" else []), "--dump-flag-surface"]
        dump = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)
        got = {s for o in dump["options"] for s in o["spellings"]}
        # b10621's whole surface, and mlxcel's own store root
        assert got == {s for o in OPTIONS for s in (*o.spellings, *o.negatives)} | set(MLXCEL_OWN), prog


@pytest.mark.parametrize(
    "argv, stream, start",
    [
        (["--version", "--bogus"], "err", "version: "),  # b10621 exits inside the handler, before the next token
        (["-cl"], "out", "number of models in cache: "),
        (["--completion-bash"], "out", "# bash completion for mlxcel-server"),
    ],
)
def test_print_and_exit_options(capsys, argv, stream, start):
    with pytest.raises(SystemExit) as e:
        parse(*argv)
    assert e.value.code == 0
    assert getattr(capsys.readouterr(), stream).startswith(start)


def test_removed_options_fail_in_b10621s_words(capsys):
    err = _error(capsys, "--draft", "4")
    assert err.startswith(
        'error while handling argument "--draft": the argument has been removed. use '
        "--spec-draft-n-max or --spec-ngram-mod-n-max\n\nusage:\n--draft, --draft-n, --draft-max N"
    )
    assert err.rstrip().endswith("to show complete usage, run with -h")


@pytest.mark.parametrize(
    "argv, value",
    [
        (["--alias", "-np"], ["-np"]),
        (["-a", "-h"], ["-h"]),
        (["--alias", "--help"], ["--help"]),
        (["-a", "--"], ["--"]),
    ],
)
def test_a_value_that_spells_an_option_is_a_value(argv, value):
    ns = parse(*argv, "-np", "2")
    assert ns.alias == value and ns.parallel == 2 and not ns.help


def test_chat_template_value_that_spells_an_option_is_a_value():
    ns = parse("--chat-template", "-ngl", "-r", "--jinja")
    assert ns.chat_template_args == [("--chat-template", "--chat-template", "-ngl")]
    assert ns.reverse_prompt == ["--jinja"]


def test_multi_letter_single_dash_spellings_are_options():
    ns = parse("-ngl", "99", "-np", "3", "-ctk", "f16", "-hft", "t", "-fa", "on", "-cram", "0", "-to", "7")
    assert ns.parallel == 3 and ns.cache_ram == 0 and ns.timeout == 7
    assert [g.option for g in ns.given] == [
        "--gpu-layers",
        "--parallel",
        "--cache-type-k",
        "--hf-token",
        "--flash-attn",
        "--cache-ram",
        "--timeout",
    ]


def test_underscores_in_long_spellings_read_as_dashes():
    assert parse("--ctx_size", "4096", "--no_cont_batching").ctx_size == 4096


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--ctx-size=5"], "error: invalid argument: --ctx-size=5"),
        (["-c5"], "error: invalid argument: -c5"),
        (["--ctx"], "error: invalid argument: --ctx"),  # no abbreviations
        (["model.gguf"], "error: invalid argument: model.gguf"),
        (["-c"], 'error while handling argument "-c": expected value for argument'),
        (["-c", "abc"], 'error while handling argument "-c": stoi'),
        (["-c", "99999999999"], 'error while handling argument "-c": stoi'),
        (["-fa", "maybe"], """error while handling argument "-fa": error: unknown value for --flash-attn: 'maybe'"""),
        (["--spec-type", "bogus"], 'error while handling argument "--spec-type": unknown speculative type: bogus'),
        (["--prio", "4"], 'error while handling argument "--prio": invalid value'),
        (
            ["--log-colors", "yes"],
            (
                """error while handling argument "--log-colors": error: unknown value for """
                "--log-colors: 'yes'"
            ),
        ),
    ],
)
def test_command_line_errors_are_b10621s(capsys, argv, message):
    assert _error(capsys, *argv).startswith(message)


def test_int_values_read_as_std_stoi():
    assert parse("-c", " 12abc").ctx_size == 12 and parse("-c", "+7").ctx_size == 7


# ----- the environment --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, fires",
    [
        ("1", True),
        ("true", True),
        ("on", True),
        ("enabled", True),
        ("TRUE", False),
        ("yes", False),
        ("0", False),
        (" 1", False),
    ],
)
def test_value_less_flags_fire_from_the_environment_only_for_truthy(monkeypatch, raw, fires):
    monkeypatch.setenv("LLAMA_ARG_ENDPOINT_PROPS", raw)
    monkeypatch.setenv("LLAMA_ARG_SWA_FULL", raw)
    ns = parse()
    assert ns.props is fires
    assert any(g.option == "--swa-full" for g in ns.given) is fires  # LLAMA_ARG_SWA_FULL=0 turns nothing on


@pytest.mark.parametrize(
    "raw, value",
    [
        ("1", True),
        ("on", True),
        ("enabled", True),
        ("true", True),
        ("0", False),
        ("off", False),
        ("disabled", False),
        ("false", False),
    ],
)
def test_bool_pairs_read_the_environment_with_parse_bool_value(monkeypatch, raw, value):
    monkeypatch.setenv("LLAMA_ARG_CONT_BATCHING", raw)
    assert parse().cont_batching is value


@pytest.mark.parametrize(
    "var, raw, message",
    [
        (
            "LLAMA_ARG_CONT_BATCHING",
            "yes",
            ('error while handling environment variable "LLAMA_ARG_CONT_BATCHING": invalid boolean value'),
        ),
        ("LLAMA_ARG_CTX_SIZE", "abc", 'error while handling environment variable "LLAMA_ARG_CTX_SIZE": stoi'),
        ("LLAMA_ARG_PERF", "sometimes", 'error while handling environment variable "LLAMA_ARG_PERF": invalid boolean'),
        (
            "LLAMA_ARG_DRAFT_MAX",
            "4",
            ('error while handling environment variable "LLAMA_ARG_DRAFT_MAX": the argument has been removed.'),
        ),
    ],
)
def test_environment_errors_are_b10621s(capsys, monkeypatch, var, raw, message):
    monkeypatch.setenv(var, raw)
    assert _error(capsys).startswith(message)


def test_the_no_alias_of_a_pair_means_false_whatever_its_value(monkeypatch):
    monkeypatch.setenv("LLAMA_ARG_NO_CONT_BATCHING", "1")
    monkeypatch.setenv("LLAMA_ARG_CONT_BATCHING", "1")
    assert parse().cont_batching is False
    monkeypatch.setenv("LLAMA_ARG_NO_UI", "whatever")
    assert parse().ui is False and refused() == []
    monkeypatch.delenv("LLAMA_ARG_NO_UI")
    monkeypatch.setenv("LLAMA_ARG_UI", "on")
    assert parse().ui is True
    monkeypatch.setenv("LLAMA_ARG_UI_MCP_PROXY", "on")  # the CORS proxy: served (conformance/test_cors_proxy.py)
    assert parse().ui_mcp_proxy is True and refused() == []


def test_command_line_beats_environment(monkeypatch, capsys):
    monkeypatch.setenv("LLAMA_ARG_CTX_SIZE", "100")
    monkeypatch.setenv("LLAMA_ARG_CONT_BATCHING", "0")
    monkeypatch.setenv("LLAMA_ARG_N_GPU_LAYERS", "3")  # partial offload from the variable, full on the line
    monkeypatch.setenv("LLAMA_ARG_CHAT_TEMPLATE", "from-env")
    ns = parse("-c", "200", "-cb", "-ngl", "all", "--chat-template-file", "f.jinja")
    assert ns.ctx_size == 200 and ns.cont_batching is True
    assert ns.chat_template_args[-1] == ("--chat-template-file", "--chat-template-file", "f.jinja")
    assert [g.value for g in ns.given if g.option == "--gpu-layers"] == ["3", "all"]  # the line's applied last
    assert (
        "warn: LLAMA_ARG_CTX_SIZE environment variable is set, but will be overwritten by command line argument "
        "-c" in capsys.readouterr().err
    )
    assert parse().ctx_size == 100


def test_environment_values_that_accumulate_keep_the_variables(monkeypatch):
    monkeypatch.setenv("LLAMA_API_KEY", "k1,k2")
    monkeypatch.setenv("LLAMA_ARG_ALIAS", "zebra")
    ns = parse("--api-key", '"a,b",c', "-a", "apple, ,mango")
    assert ns.api_key == ["k1", "k2", "a,b", "c"]  # b10621 appends both, quoted fields kept whole
    assert ns.alias == ["apple", "mango", "zebra"]  # one sorted set: apple is served


def test_transport_authentication_and_logging_parse_into_their_dests(monkeypatch, tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("k\n")
    monkeypatch.setenv("LLAMA_ARG_LOG_TIMESTAMPS", "off")
    ns = parse(
        "--host",
        "h.sock",
        "--port",
        "0",
        "-to",
        "9",
        "--threads-http",
        "3",
        "--api-prefix",
        "/v",
        "--reuse-port",
        "--ssl-key-file",
        "k.pem",
        "--ssl-cert-file",
        "c.pem",
        "--cors-origins",
        "localhost",
        "--cors-headers",
        "X",
        "--cors-methods",
        "GET",
        "--no-cors-credentials",
        "--api-key",
        "a",
        "--api-key-file",
        str(keys),
        "--log-disable",
        "--log-file",
        "l.log",
        "--log-colors",
        "enabled",
        "--no-log-prefix",
        "-v",
        "-lv",
        "5",
    )
    got = {
        k: getattr(ns, k)
        for k in (
            "host",
            "port",
            "timeout",
            "threads_http",
            "api_prefix",
            "reuse_port",
            "ssl_key_file",
            "ssl_cert_file",
            "cors_origins",
            "cors_headers",
            "cors_methods",
            "cors_credentials",
            "api_key",
            "api_key_file",
            "log_disable",
            "log_file",
            "log_colors",
            "log_prefix",
            "log_timestamps",
            "verbose",
            "verbosity",
        )
    }
    assert got == {
        "host": "h.sock",
        "port": 0,
        "timeout": 9,
        "threads_http": 3,
        "api_prefix": "/v",
        "reuse_port": True,
        "ssl_key_file": "k.pem",
        "ssl_cert_file": "c.pem",
        "cors_origins": "localhost",
        "cors_headers": "X",
        "cors_methods": "GET",
        "cors_credentials": False,
        "api_key": ["a"],
        "api_key_file": [str(keys)],
        "log_disable": True,
        "log_file": "l.log",
        "log_colors": "on",
        "log_prefix": False,
        "log_timestamps": False,
        "verbose": True,
        "verbosity": 5,
    }
    defaults = parse()
    assert (
        defaults.host,
        defaults.port,
        defaults.timeout,
        defaults.api_key,
        defaults.cors_credentials,
        defaults.log_colors,
        defaults.verbosity,
    ) == ("127.0.0.1", 8080, 3600, [], True, "auto", 3)


def test_an_unreadable_api_key_file_fails_as_b10621(capsys, tmp_path):
    assert _error(capsys, "--api-key-file", str(tmp_path / "none")).startswith(
        f"""error while handling argument "--api-key-file": error: failed to open file '{tmp_path / "none"}'"""
    )


def test_escapes_are_processed_in_reverse_prompts_and_dry_breakers():
    ns = parse("-r", "\\n\\x41\\q", "--dry-sequence-breaker", "a\\tb")
    assert ns.reverse_prompt == ["\nA\\q"] and ns.dry_sequence_breaker == ["a\tb"]
    assert parse("--no-escape", "-r", "\\n").reverse_prompt == ["\\n"]


# ----- --help and the classification -------------------------------------------------------------------------


def test_help_shows_what_is_served_or_accepted_and_hides_what_is_refused(capsys):
    """--help lists the options mlxcel acts on and those it accepts at some value, each of the latter with what
    mlxcel does with it (server/cli/classify.py's words); an option refused at every value stays hidden."""
    with pytest.raises(SystemExit) as e:
        parse("--help")
    assert e.value.code == 0
    import re

    out = capsys.readouterr().out
    shown = set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w.-]*)", out))
    users_pass = {"--ctx-size", "--api-key", "--jinja", "--temp", "-t", "-ngl", "-fa", "-ctk", "--mlock", "--no-mmap"}
    assert users_pass <= shown
    assert "[mlxcel: served: the weights locked in RAM once loaded]" in " ".join(out.split())
    assert not shown & {"--gpt-oss-20b-default", "--dump-flag-surface"}


def test_every_option_is_acted_on_or_classified():
    ids = {o.id for o in OPTIONS}
    assert set(MLXCEL) | set(RULES) == ids and not set(MLXCEL) & set(RULES)
    hidden = {
        o.id
        for o in OPTIONS
        if any(a.help == "==SUPPRESS==" for a in build_parser("p")._actions if getattr(a, "option", None) is o)
    }
    assert hidden == {o for o, rule in RULES.items() if rule.inert_text in ("", "none")}  # refused at every value


def test_help_after_a_bad_option_is_the_error(capsys):
    assert _error(capsys, "-h", "--bogus").startswith("error: invalid argument: --bogus")


def test_every_refusal_is_one_line_naming_option_value_reason_and_alternative():
    checked = set()
    for option, rule in RULES.items():
        o = BY_ID[option]
        if option in REMOVED:
            continue
        spelling = o.spellings[-1]
        argv = [spelling, *_sample(o)]
        lines = refused(*argv)
        if not lines:  # the sample value is an inert one
            assert rule.inert_text != "none", option
            continue
        checked.add(option)
        assert len(lines) == 1 and "\n" not in lines[0], option
        assert lines[0].startswith(f"error: {' '.join(argv)}: {rule.reason}"), lines[0]
        assert rule.alternative in lines[0]
    assert (
        len(checked) >= 8
    )  # (fewer as options become served: 11 at issue 30's --path and --perf, 9 at #33's projector, 8 at #34's
    # --spec-default)


INERT = [
    ["-t", "-1"],
    ["-t", "8"],
    ["-tb", "2"],
    ["-C", "ff"],
    ["-Cr", "0-3"],
    ["--cpu-strict", "1"],
    ["--prio", "2"],
    ["--poll", "0"],
    ["-ngl", "10"],
    ["-ngl", "0"],
    ["-sm", "row"],
    ["-ts", "1,1"],
    ["-mg", "1"],
    ["-dev", "none"],
    ["-ot", "token_embd=CPU"],
    ["-cmoe"],
    ["-ncmoe", "2"],
    ["-nkvo"],
    ["--no-op-offload"],
    ["--no-host"],
    ["-fitt", "512"],
    ["-fit", "on", "-fitc", "512"],
    ["-t", "0"],
    ["-tb", "-1"],
    ["--cpu-strict", "0"],
    ["--prio", "0"],
    ["--poll", "50"],
    ["--cpu-strict-batch", "0"],
    ["--prio-batch", "0"],
    ["--poll-batch", "50"],
    ["-ngl", "all"],
    ["-ngl", "auto"],
    ["-fa", "on"],
    ["-fa", "auto"],
    ["-fa", "off"],
    ["-sm", "none"],
    ["-sm", "layer"],
    ["-mg", "0"],
    ["-fit", "off"],
    ["-fit", "on"],
    ["-fitt", "1024"],
    ["-fitc", "4096"],
    ["--mmap"],
    ["--no-mmap"],
    ["-ndio"],
    ["-lm", "auto"],
    ["-lm", "mmap"],
    ["-lm", "none"],
    ["--repack"],
    ["--no-repack"],
    ["-kvo"],
    ["--op-offload"],
    ["--no-perf"],
    ["-ncmoe", "0"],
    ["-dt", "0.1"],
    ["--offline"],
    ["-hft", "secret"],
    ["--no-ui"],
    ["--no-webui"],
    ["-no-ag"],
    ["--no-agent"],
    ["--no-ui-mcp-proxy"],
    ["--no-webui-mcp-proxy"],
    ["--tools", ""],
    ["--path", ""],
    ["--control-vector-layer-range", "2", "9"],
    ["--spec-type", "none"],
    ["--spec-draft-n-max", "8"],
    ["--spec-ngram-mod-n-min", "12"],
    ["-ctkd", "q8_0"],
    ["-ngld", "7"],
    ["--no-warmup"],
    ["--warmup"],
    ["-ctk", "f16"],
    ["-ctv", "f16"],
    ["--pooling", "cls"],
    ["--no-mmproj"],
    ["-no-kvu"],
    ["-sps", "0"],
    ["--cache-reuse", "0"],
    ["--sleep-idle-seconds", "-1"],
    ["--models-max", "2"],
]


@pytest.mark.parametrize("argv", INERT, ids=[" ".join(a) for a in INERT])
def test_inert_values_start(argv):
    assert refused(*argv) == []


GGML_REFUSALS = {  # (--perf: accepted, both change nothing a client sees: startup case perf)
    ("--rpc", "h:1"): "error: --rpc h:1: mlxcel has no GGML backend: MLX runs every tensor of the model on one "
    "device, its default; there is no RPC backend to offload to; split one model over several machines with "
    "mlx.launch (docs/scaling-out.md)",
}


@pytest.mark.parametrize("argv", list(GGML_REFUSALS), ids=[" ".join(a) for a in GGML_REFUSALS])
def test_ggml_runtime_refusals_are_pinned(argv):
    assert refused(*argv) == [GGML_REFUSALS[argv]]


def test_load_mode_is_classified_in_command_line_order():
    from server.cli.classify import load_mode

    assert refused("--mlock", "--load-mode", "mmap") == []  # the last writer wins, as upstream
    assert load_mode(parse("--mlock", "--load-mode", "mmap").given)[0] == "mmap"
    assert load_mode(parse("-lm", "auto", "--mlock").given)[0] == "mlock"  # served: the weights locked
    assert refused("-lm", "auto", "--mlock") == [] and refused("--no-mmap", "--load-mode", "mmap") == []
    assert refused("-lm", "dio") == [
        "error: -lm dio: the load mode this leaves (dio) asks mlxcel to read the weights with direct I/O; mlxcel "
        "loads safetensors through MLX and has no such loading mode; leave it out, or pass --load-mode "
        "auto|mmap|none|mlock"
    ]
    assert refused("-dio", "-lm", "mmap") == []


def test_on_this_cpu_host_every_placement_starts_with_b10621s_warnings(tmp_path, capsys):
    """b10621's CPU build prints that -ngl, -sm, -ts and -mg have no effect and runs every layer on the CPU;
    mlxcel on a CPU-only MLX does the same (server/cli/offload.py)."""
    from server.cli import offload

    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 30}))
    assert not offload.gpu_host()
    assert offload.resolve(parse("-ngl", "20", "-sm", "row", "-ts", "3,1", "-mg", "1").given, tmp_path) is None
    err = capsys.readouterr().err
    assert "warning: no usable GPU found, --gpu-layers option will be ignored\n" in err
    for what in ("the split mode", "a tensor split", "the main GPU"):
        assert f"compiled without support for GPU offload. Setting {what} has no effect.\n" in err
    assert offload.list_devices() == "Available devices:\n  (none)\n"


def test_on_a_gpu_host_a_whole_placement_is_served_and_a_split_refused(tmp_path):
    from server.cli import offload

    (tmp_path / "config.json").write_text(json.dumps({"num_hidden_layers": 30}))
    for argv in (["-ngl", "31"], ["-ngl", "all"], ["-ngl", "auto"], ["-ngl", "0"], ["-dev", "none"], ["-mg", "0"]):
        assert offload._gpu_refusal(parse(*argv).given, tmp_path) is None, argv
    assert offload._gpu_refusal(parse("-ngl", "30").given, tmp_path) == (
        "error: -ngl 30: this model has 30 layers, so 30 keeps some on the CPU; mlxcel serves the whole model on "
        "MLX's device (here a GPU) and cannot split it across devices; pass -ngl all or -ngl 0"
    )
    for argv in (["-ts", "3,1"], ["-mg", "1"], ["-cmoe"], ["-ncmoe", "2"], ["-ot", "x=CPU"], ["-nkvo"]):
        line = offload._gpu_refusal(parse(*argv).given, tmp_path)
        assert line is not None and line.endswith("cannot split it across devices; leave it out"), argv


def test_device_and_buffer_names_are_checked_as_b10621s_cpu_build_checks_them(capsys):
    assert _error(capsys, "-dev", "CUDA0").startswith('error while handling argument "-dev": invalid device: CUDA0')
    assert _error(capsys, "-ot", "x=CUDA0").startswith('error while handling argument "-ot": unknown buffer type')
    assert _error(capsys, "-devd", "x").startswith('error while handling argument "-devd": invalid device: x')


MODEL_SOURCE_REFUSALS = {
    ("-dr", "gemma3"): "-dr gemma3",
}  # (-mu URL: fetched into -m's path, conformance/test_hf_download.py)


@pytest.mark.parametrize("argv", list(MODEL_SOURCE_REFUSALS))
def test_model_source_refusals_are_pinned(argv):
    assert refused(*argv) == [
        (
            f"error: {MODEL_SOURCE_REFUSALS[argv]}: mlxcel fetches no model from Docker Hub's registry: it fetches "
            "from a Hugging Face-style hub (-hf) or a URL (-m FILE -mu URL); pass -hf REPO[:QUANT], or -m FILE.gguf "
            "-mu URL (a GGUF is converted once into the cache)"
        )
    ]
    assert refused("-hf", "ggml-org/gemma-3-1b-it-GGUF", "-hff", "x.gguf") == []  # served (-hf, -hff)
    assert refused("--override-kv", "a=int:1") == []  # (a GGUF's metadata overridden: startup case override-kv)


@pytest.mark.parametrize("argv", [("-ag",), ("--agent",), ("--tools", "all"), ("--tools", "read_file,get_info")])
def test_the_built_in_tools_and_the_agent_switch_are_accepted(argv):
    assert refused(*argv) == []  # (an unknown tool name: b10621's setup refusal, startup case tools-unknown-refused)


@pytest.mark.parametrize(
    "argv", [("--ui",), ("--webui",), ("--no-ui",), ("--ui-config", "{}"), ("--ui-mcp-proxy",), ("--webui-mcp-proxy",)]
)
def test_the_web_ui_options_are_accepted(argv):
    assert refused(*argv) == []


def test_a_tools_runtime_and_mcp_servers_are_accepted():
    assert refused("--tools-runtime", "docker:busybox") == []  # (b10621's setup checks: startup cases)
    assert refused("--mcp-servers-json", "{}") == refused("--mcp-servers-config", "m.json") == []


def test_a_static_path_and_perf_are_accepted():
    assert refused("--path", "/srv/ui") == refused("--perf") == []  # (their effects: startup cases path*, perf)


PRESETS = {
    "--gpt-oss-20b-default": ("ggml-org/gpt-oss-20b-GGUF", "mlx-community/gpt-oss-20b-MXFP4-Q8"),
    "--gpt-oss-120b-default": ("ggml-org/gpt-oss-120b-GGUF", "mlx-community/gpt-oss-120b-MXFP4-Q8"),
    "--vision-gemma-4b-default": ("ggml-org/gemma-3-4b-it-qat-GGUF", "mlx-community/gemma-3-4b-it-qat-4bit"),
    "--vision-gemma-12b-default": ("ggml-org/gemma-3-12b-it-qat-GGUF", "mlx-community/gemma-3-12b-it-qat-4bit"),
}


@pytest.mark.parametrize("preset", list(PRESETS))
def test_presets_refuse_with_the_mlx_equivalents(preset):
    gguf, mlx = PRESETS[preset]
    (line,) = refused(preset)
    assert line.startswith(f"error: {preset}: b10621's preset serves the GGUF repository {gguf}; ")
    assert (
        f"the nearest MLX checkpoint is {mlx}: fetch it (`huggingface-cli download {mlx} --local-dir DIR`) and "
        "run `mlxcel-server -m DIR --port 80" in line
    )
    assert refused("--gpt-oss-20b-default")[0].endswith(
        "-m DIR --port 8013 -ub 2048 -b 32768 -np 2 -c 262144 --temp 1.0 --top-p 1.0 --top-k 0 --min-p 0.01 --jinja`"
    )


@pytest.mark.parametrize(
    "preset", ["--fim-qwen-1.5b-default", "--fim-qwen-3b-default", "--fim-qwen-30b-default", "--fim-qwen-7b-spec"]
)
def test_fim_presets_are_served_with_b10621s_settings(preset):
    args = build_parser("p").parse_args(["--port", "9", "-c", "64", preset, "-ub", "512"])
    assert refused(preset) == [] and args.hf_repo.startswith("ggml-org/") and args.hf_file.endswith(".gguf")
    # set where it stands: over what came before, under what comes after
    assert (args.port, args.ctx_size, args.batch_size, args.ubatch_size, args.cache_reuse) == (8012, 0, 1024, 512, 256)


def test_the_embedding_preset_points_at_the_bundled_encoder():
    (line,) = refused("--embd-gemma-default")
    assert line.startswith(
        "error: --embd-gemma-default: b10621's preset serves the GGUF repository "
        "ggml-org/embeddinggemma-300M-qat-q4_0-GGUF, which mlxcel cannot load, and embeddinggemma "
        "is no BERT-family encoder"
    )
    assert line.endswith("`mlxcel-server -m all-minilm-l6-v2 --port 8011 -np 32 --embedding`")


def test_the_twelfth_preset_turns_on_ngram_mod_where_it_stands():
    """--spec-default pushes ngram-mod (n_match 24, n_min 48, n_max 64) as b10621's handler does: a knob after it
    overrides it, one before is overridden; the type is added to --spec-type's."""
    from server.cli.startup import ngram_config, speculative_config
    from server.engine.ngram_drafters import ModParams

    assert refused("--spec-default") == []
    for argv, want in (
        (["--spec-default"], ModParams(24, 48, 64)),
        (["--spec-default", "--spec-ngram-mod-n-max", "32"], ModParams(24, 48, 32)),
        (["--spec-ngram-mod-n-max", "32", "--spec-default"], ModParams(24, 48, 64)),
    ):
        args = parse(*argv)
        types, _ = speculative_config(args, None, "p")
        assert types == ["none", "ngram-mod"]
        assert ngram_config(args, types, "p").mod == want


def test_control_vectors_are_served():
    # read when the model loads (a missing file fails there, as b10621's common_init does)
    assert refused("--control-vector-layer-range", "1", "20") == []
    assert refused("--control-vector", "a.gguf,b.gguf") == []
    assert refused("--control-vector-scaled", "a.gguf:0") == []


def test_control_vector_scaled_format_is_checked_as_b10621(capsys):
    assert _error(capsys, "--control-vector-scaled", "a.gguf").startswith(
        'error while handling argument "--control-vector-scaled": control-vector-scaled format: FNAME:SCALE'
    )


def test_log_prompts_dir_is_served_and_made_as_the_option_is_read(tmp_path):
    from server.api.prompt_log import make_dir

    target = tmp_path / "prompts" / "deeper"
    assert refused("--log-prompts-dir", str(target)) == []
    assert parse("--log-prompts-dir", str(target)).log_prompts_dir == str(target)
    make_dir(str(target))  # (main.serve calls it, as b10621's argument handler creates the directory)
    assert target.is_dir()


def test_every_speculative_type_is_served_and_an_unknown_one_is_b10621s_error():
    for types in ("draft-dflash", "draft-dspark", "draft-eagle3,draft-dspark", "draft-mtp,ngram-simple"):
        assert refused("--spec-type", types) == []
    assert refused("--spec-type", "ngram-mod,ngram-map-k,ngram-map-k4v,ngram-cache,ngram-simple,draft-simple") == []
    with pytest.raises(ValueError, match="^unknown speculative type: draft-medusa$"):
        check_value("--spec-type", "ngram-mod,draft-medusa")


def test_a_draft_model_and_draft_simple_are_served():
    assert refused("-md", "draft", "--spec-type", "draft-simple", "--spec-draft-n-max", "8") == []
    assert refused("-md", "head.gguf", "--spec-type", "draft-eagle3", "--spec-draft-n-max", "8") == []
    assert refused("--spec-type", "ngram-simple,draft-simple", "--spec-ngram-simple-size-n", "4") == []
    assert refused("-hfd", "a/b") == []  # fetched as -hf fetches (conformance/test_hf_download.py)


def test_with_a_draft_model_its_runtime_options_are_held_to_the_targets():
    assert refused("-td", "4", "-ctkd", "q8_0", "-devd", "none") == []  # no draft: they configure nothing
    assert refused("-md", "d", "-td", "-1", "-ctkd", "f16", "-ngld", "99", "-devd", "none") == []
    # -td / -tbd act (the draft's steps on their thread counts: tests/test_cpu_threads.py); -ctkd q8_0: the draft's
    # cache is block-quantized, as the target's -ctk q8_0 makes its own
    assert refused("-md", "d", "-td", "4", "-tbd", "2", "-ctkd", "q8_0") == []
    assert refused("-md", "d", "-Cd", "3") == [
        "error: -Cd 3: the draft model runs on the target's CPU thread pool (on -td / -tbd of its threads), which "
        "-C / -Cr / --cpu-strict / --prio / --poll place (the draft model's placement); leave it out, and size or "
        "place the pool with the target's options",
    ]


def test_speculative_tuning_is_inert_and_checked_as_b10621(capsys):
    assert refused("--spec-draft-n-max", "16", "--spec-ngram-mod-n-match", "3", "-td", "4", "-devd", "none") == []
    assert _error(capsys, "--spec-ngram-mod-n-match", "0").startswith(
        'error while handling argument "--spec-ngram-mod-n-match": ngram size N must be between 1 and 1024 inclusive'
    )


def test_other_issues_surfaces_are_served_or_refuse_with_their_reason():
    assert refused("--lora", "a") == []  # served (#13): a path that does not exist fails when the server starts
    assert refused("--mmproj", "p") == []  # served (#33): LLaVA's projector, checked when the server starts
    assert refused("--mmproj-url", "http://h/p.gguf") == []  # served (#33): fetched as -mu fetches a model
    assert refused("--models-dir", "d") == []  # router mode (#13): started without -m


def test_a_refusal_exits_1_before_the_model_is_resolved():
    proc = subprocess.run(
        [sys.executable, "-m", "server", "-m", "/nonexistent/model", "--rpc", "h:1", "-dio"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        (
            "error: --rpc h:1: mlxcel has no GGML backend: MLX runs every tensor of the model on one device, its "
            "default; there is no RPC backend to offload to; split one model over several machines with mlx.launch "
            "(docs/scaling-out.md)"
        ),
        (
            "error: -dio: the load mode this leaves (dio) asks mlxcel to read the weights with direct I/O; mlxcel "
            "loads safetensors through MLX and has no such loading mode; leave it out, or pass --load-mode "
            "auto|mmap|none|mlock"
        ),
    ]


def test_a_unified_kv_gives_each_slot_the_whole_context():
    """b10621's kv_unified (-kvu, or -np auto whatever -no-kvu says): n_ctx_seq = n_ctx; otherwise -c / -np."""
    from server.cli.startup import slot_context, unified_kv

    for argv, unified, n_ctx in (
        (["-kvu", "-np", "2", "-c", "1000"], True, 1024),
        (["-np", "2", "-c", "1000"], False, 512),
        (["-no-kvu", "-c", "1000"], True, 1024),  # -np auto: unified
        (["-no-kvu", "-np", "4", "-c", "4096"], False, 1024),
    ):
        ns = parse(*argv)
        assert unified_kv(ns) is unified, argv
        assert slot_context(ns.ctx_size, 0 if unified_kv(ns) else ns.parallel) == n_ctx, argv


def test_a_draft_models_inert_options_each_get_a_log_line():
    """With a draft model, the options that place or tune what mlxcel's draft does not have are accepted with one
    line each (server/cli/startup.py logs them); without one they configure nothing and say nothing."""
    from server.cli.classify import draft_inert_notices

    given = build_parser("mlxcel-server").parse_args(["-md", "d", "-ngld", "99", "-devd", "none", "-td", "2"]).given
    assert draft_inert_notices(given) == [
        "-ngld 99: accepted, changes nothing here: the draft runs whole on MLX's device, as the target does",
        "-devd none: accepted, changes nothing here: the draft runs whole on MLX's device, as the target does",
    ]  # (-td acts: not listed)
    assert draft_inert_notices(build_parser("mlxcel-server").parse_args(["-ngld", "99"]).given) == []
