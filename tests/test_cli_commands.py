"""`mlxcel generate`, `mlxcel chat` and `mlxcel inspect` (server/cli/generate.py, chat_repl.py, inspect_cmd.py):
the same tokens as the server's /completion for the same flags, a chat under a pseudo-terminal, a model's report."""

from __future__ import annotations

import io
import json
import os
import pty
import select
import subprocess
import sys
import time

import httpx
import pytest

from server.cli.chat_repl import Chat, command, read_message
from server.cli.local import OptionError, Own, take_own

MLXCEL = "import sys; sys.argv[0] = 'mlxcel'; from server.cli.main import mlxcel_main; mlxcel_main()"


def mlxcel(*argv: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", MLXCEL, *argv], capture_output=True, text=True, timeout=300, **kw)


# --- the commands' own options beside llama-server's ----------------------------------------------------------


def test_own_options_are_taken_by_exact_spelling_and_the_rest_kept_in_order():
    own = (Own("prompt", ("-p", "--prompt")), Own("file", ("-f", "--file")), Own("help", ("-h",), value=False))
    got, rest = take_own(["-fa", "on", "-p", "-x", "-hf", "a/b", "--prompt=again", "-h", "-n", "-1"], own)
    assert got == {"prompt": "again", "file": None, "help": True}
    assert rest == ["-fa", "on", "-hf", "a/b", "-n", "-1"]  # (argparse would read -fa as -f a, -hf as -h -f)
    with pytest.raises(OptionError):
        take_own(["-p"], own)


# --- chat input and commands ---------------------------------------------------------------------------------


def test_a_message_reads_as_llama_clis_console_reads_lines():
    out = io.StringIO()
    assert read_message(io.StringIO("one line\nnext\n"), out, multiline=False) == "one line\n"
    assert read_message(io.StringIO("first \\\nsecond\nthird\n"), out, multiline=False) == "first \nsecond\n"
    assert read_message(io.StringIO("a\nb\\\nc\n"), out, multiline=True) == "a\nb\n"  # (-mli: \ ends it)
    assert read_message(io.StringIO("sent now/\nlater\n"), out, multiline=True) == "sent now"
    assert read_message(io.StringIO(""), out, multiline=False) is None
    assert out.getvalue() == "\n> " * 5


def test_chat_commands_edit_the_history_as_llama_clis(tmp_path):
    out, chat = io.StringIO(), Chat("be brief")
    assert command(chat, "/regen", out) == "" and "No message to regenerate." in out.getvalue()
    (tmp_path / "notes.txt").write_text("file text\n")
    assert command(chat, f"/read {tmp_path / 'notes.txt'}", out) == ""
    assert command(chat, "hello", out) == "answer"
    assert chat.messages == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": f"--- File: {tmp_path / 'notes.txt'} ---\nfile text\nhello"},
    ]
    chat.messages.append({"role": "assistant", "content": "hi"})
    assert command(chat, "/regen", out) == "answer" and chat.messages[-1]["role"] == "user"
    assert command(chat, "/clear", out) == "" and chat.messages == [{"role": "system", "content": "be brief"}]
    assert command(chat, "/exit now", out) == "exit" and command(chat, "", out) == ""


# --- generate: /completion's tokens ---------------------------------------------------------------------------

FLAGS = ["-s", "1234", "--temp", "0.9", "--top-k", "20", "-n", "24", "-np", "1", "--ignore-eos"]
PROMPT = "Once upon a time, in a village by the sea,"


def test_generate_prints_the_tokens_completion_answers_for_the_same_flags(twin_q4_1):
    from oracle.processes import mlxcel_server

    server = mlxcel_server(twin_q4_1.mlx_model, FLAGS)
    server.start()
    try:
        answer = httpx.post(f"{server.base_url}/completion", json={"prompt": PROMPT}, timeout=120).json()
    finally:
        server.cleanup()
    got = mlxcel("generate", "-m", twin_q4_1.mlx_model, "-p", PROMPT, *FLAGS)
    assert got.returncode == 0, got.stderr
    assert answer["tokens_predicted"] == 24 and got.stdout == answer["content"] + "\n"
    speeds = got.stderr.strip().splitlines()[-1]
    assert speeds.startswith("[ Prompt: ") and "Generation: 24 tokens" in speeds
    other = mlxcel("generate", "-m", twin_q4_1.mlx_model, "-p", PROMPT, *FLAGS[:-1], "-s", "99", "--ignore-eos")
    assert other.returncode == 0 and other.stdout != got.stdout  # (the seed reaches the sampler)


def test_generate_says_what_is_missing_in_one_line(tmp_path):
    missing = mlxcel("generate", "-m", "x.gguf")
    assert (
        missing.returncode == 2
        and missing.stderr == "mlxcel generate: error: give the prompt with -p PROMPT or -f FILE\n"
    )
    no_model = mlxcel("generate", "-p", "hi")
    assert no_model.returncode == 2 and no_model.stderr.endswith("-m MODEL (or -hf REPO) names the model\n")
    bad = mlxcel("generate", "-m", str(tmp_path / "none.gguf"), "-p", "hi")
    assert bad.returncode == 1 and len(bad.stderr.strip().splitlines()) == 1 and "not found" in bad.stderr


# --- chat: the history, the template, Ctrl-C -------------------------------------------------------------------


def test_chat_sends_the_history_in_the_models_template(twin_q4_1, tmp_path):
    logs = tmp_path / "prompts"
    script = "What is the sea?\nline one\\\nline two\n/exit\n"
    args = ["-m", twin_q4_1.mlx_model, "-n", "6", "--temp", "0", "-np", "1", "--log-prompts-dir", str(logs)]
    got = mlxcel("chat", *args, "-sys", "You answer briefly.", input=script)
    assert got.returncode == 0, got.stderr
    assert got.stdout.count("[ Prompt: ") == 2 and got.stdout.endswith("\n\nExiting...\n")
    first, second = (p.read_text() for p in sorted(logs.iterdir()))
    template = "<|im_start|>system\nYou answer briefly.<|im_end|>\n<|im_start|>user\nWhat is the sea?<|im_end|>\n"
    assert first == template + "<|im_start|>assistant\n"
    answer = got.stdout.split("\n> ")[1].split("\n\n[ Prompt")[0].strip()
    assert second.startswith(template + f"<|im_start|>assistant\n{answer}")
    assert second.endswith("<|im_start|>user\nline one\nline two<|im_end|>\n<|im_start|>assistant\n")


def _read_until(fd: int, seen: bytearray, done, timeout: float = 120) -> None:
    """Read the terminal into `seen` until done(seen)."""
    end = time.monotonic() + timeout
    while not done(seen):
        left = end - time.monotonic()
        assert left > 0, f"timed out; the terminal showed {bytes(seen[-400:])!r}"
        if select.select([fd], [], [], left)[0]:
            try:
                seen += os.read(fd, 4096)
            except OSError:  # the child closed the terminal
                return


def test_ctrl_c_under_a_terminal_stops_the_answer_and_the_chat_goes_on(twin_q4_1):
    import fcntl
    import termios

    master, slave = pty.openpty()

    def controlling_terminal() -> None:  # the child's own session, the pty its terminal: Ctrl-C is SIGINT to it
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    args = ["-m", twin_q4_1.mlx_model, "-n", "-1", "--ignore-eos", "-c", "4096", "-np", "1"]
    proc = subprocess.Popen(
        [sys.executable, "-c", MLXCEL, "chat", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        preexec_fn=controlling_terminal,
    )
    os.close(slave)
    seen = bytearray()
    try:
        _read_until(master, seen, lambda s: b"\n> " in s)
        os.write(master, b"Tell me a long story.\n")
        _read_until(master, seen, lambda s: b"story." in s)
        asked = seen.find(b"story.")
        _read_until(master, seen, lambda s: len(s) > asked + 200)  # the answer streams (no end before -c's 4096)
        os.write(master, b"\x03")  # Ctrl-C: the terminal sends SIGINT
        stopped = len(seen)
        _read_until(master, seen, lambda s: b"\n> " in s[stopped:])
        assert proc.poll() is None  # a new prompt, the chat still running
        os.write(master, b"/exit\n")
        _read_until(master, seen, lambda s: b"Exiting..." in s)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)


# --- inspect ---------------------------------------------------------------------------------------------------


def test_inspect_reports_a_gguf_and_the_checkpoint_it_converts_into(twin_q4_1):
    from server.models.gguf_reader import FastGGUFReader

    got = mlxcel("inspect", str(twin_q4_1.gguf), "--json")
    assert got.returncode == 0, got.stderr
    report = json.loads(got.stdout)
    reader = FastGGUFReader(str(twin_q4_1.gguf))
    assert report["architecture"] == "llama" and ("layers", "30") in map(tuple, report["facts"])
    assert report["bytes"] == sum(int(t.n_bytes) for t in reader.tensors)
    assert {t["dtype"]: t["count"] for t in report["tensors"]} == _types(reader)
    assert report["n_params"] == sum(int(t.n_elements) for t in reader.tensors)
    assert ["model", "gpt2"] in report["tokenizer"] and report["template"].startswith("{% for message")
    assert report["verdict"].startswith("served: converted into an MLX checkpoint")
    text = mlxcel("inspect", twin_q4_1.mlx_model)
    assert text.returncode == 0 and "(MLX checkpoint)" in text.stdout
    assert "mlxcel            served as it is" in text.stdout and "quantization      affine 4-bit" in text.stdout


def _types(reader) -> dict[str, int]:
    counts: dict[str, int] = {}
    for t in reader.tensors:
        counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
    return counts


def test_inspect_says_why_a_file_is_not_served(tmp_path):
    from oracle.reference import source_tree

    vocab = source_tree() / "models" / "ggml-vocab-gpt-2.gguf"  # (a vocab-only file: architecture gpt2)
    got = json.loads(mlxcel("inspect", str(vocab), "--json").stdout)
    assert got["architecture"] == "gpt2" and got["verdict"].startswith("refused: architecture 'gpt2' is not")
    damaged = tmp_path / "cut.gguf"
    damaged.write_bytes(vocab.read_bytes()[:1000])
    bad = mlxcel("inspect", str(damaged))
    assert bad.returncode == 1 and len(bad.stderr.strip().splitlines()) == 1
    assert bad.stderr.startswith("mlxcel inspect: error: ")


def test_inspect_names_a_draft_head_for_what_it_is(tmp_path):
    """A header as the converter writes a DFlash draft's (architecture dflash; inspect reads no tensor data)."""
    import gguf
    import numpy as np

    path = tmp_path / "draft.gguf"
    w = gguf.GGUFWriter(str(path), arch="dflash")
    w.add_block_count(1)
    w.add_tensor("fc.weight", np.zeros((4, 8), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    got = json.loads(mlxcel("inspect", str(path), "--json").stdout)
    assert got["architecture"] == "dflash" and "--spec-draft-model" in got["verdict"]
    assert got["tensors"] == [{"dtype": "F32", "count": 1, "elements": 32, "nbytes": 128}]
    assert got["tokenizer"] == [["tokenizer", "none in the file"]] and got["template"] is None


def test_inspect_on_a_path_that_is_nothing():
    got = mlxcel("inspect", "no-such-model")
    assert got.returncode == 1 and "is not a file, a directory nor a store name" in got.stderr


def test_mlxcel_help_lists_the_commands():
    out = mlxcel("--help").stdout
    assert all(f"  {name} " in out for name in ("generate", "chat", "inspect", "estimate", "bench"))


# --- estimate: within 10% of the measured peak ------------------------------------------------------------------


@pytest.mark.parametrize(
    "twin_kind, args, weighty",
    [
        ("q4_1", ["-c", "4096"], "kv"),  # (the KV cache and its growth: a third of the peak)
        ("f32", ["-c", "1024", "-ctk", "f32", "-ctv", "f32"], "ggml_order_copy"),  # (the load's peak)
    ],
)
def test_the_estimate_is_within_a_tenth_of_the_peak_a_full_context_takes(twin_kind, args, weighty):
    """The server on the same command line, its context filled by one prompt: its high-water resident set
    (VmHWM) against `mlxcel estimate`'s peak."""
    from fixtures.twins import twin
    from oracle.bench import peak_rss_mib
    from oracle.processes import mlxcel_server

    model, flags = twin(twin_kind).mlx_model, [*args, "-np", "1"]
    estimate = mlxcel("estimate", "-m", model, *flags, "--json")
    assert estimate.returncode == 0, estimate.stderr
    parts = json.loads(estimate.stdout)
    server = mlxcel_server(model, flags)
    server.start()
    try:
        n_ctx = int(args[1])
        phrase = "The sea is wide and deep. "
        per = len(httpx.post(f"{server.base_url}/tokenize", json={"content": phrase * 8}).json()["tokens"]) / 8
        prompt = phrase * int((n_ctx - 64) / per)  # (the context nearly full)
        answer = httpx.post(
            f"{server.base_url}/completion", json={"prompt": prompt, "n_predict": 4}, timeout=300
        ).json()
        assert n_ctx - 160 < answer["tokens_evaluated"] < n_ctx, answer
        measured = peak_rss_mib(server) * 2**20
    finally:
        server.cleanup()
    assert parts[weighty] > 0.1 * measured and parts["weights"] > 0.1 * measured  # (the parts that weigh here)
    assert abs(parts["peak"] - measured) < 0.10 * measured, (parts, measured / 2**20)


def test_the_servers_estimate_memory_prints_the_same_and_exits(twin_q4_1):
    got = subprocess.run(
        [sys.executable, "-m", "server", "-m", twin_q4_1.mlx_model, "-c", "4096", "--estimate-memory"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert got.returncode == 0, got.stderr
    lines = got.stdout.splitlines()
    assert lines[0].startswith(f"mlxcel-server: {twin_q4_1.mlx_model}: 4096 cells x 1 unified stream, K f16 / V f16")
    assert lines[-1].lstrip().startswith("peak") and "MiB" in lines[-1]


# --- bench: llama-bench's figures ------------------------------------------------------------------------------


def test_bench_times_whole_prompts_and_generations_each_repetition(twin_q4_1):
    got = mlxcel("bench", "-m", twin_q4_1.mlx_model, "-p", "32", "-n", "8", "-r", "2", "-o", "json")
    assert got.returncode == 0, got.stderr
    pp, tg = json.loads(got.stdout)
    assert pp["test"] == "pp32" and pp["prompt_n"] == [32, 32]  # (the prompt cache off: every run whole)
    assert tg["test"] == "tg8" and tg["predicted_n"] == [8, 8]
    assert all(s > 0 for s in pp["samples_ts"] + tg["samples_ts"])
    md = mlxcel("bench", "-m", twin_q4_1.mlx_model, "-p", "16", "-n", "0", "-r", "1").stdout.splitlines()
    assert [c.strip() for c in md[0].strip("|").split("|")] == [
        "model",
        "size",
        "params",
        "backend",
        "threads",
        "test",
        "t/s",
    ]
    assert len(md) == 3 and md[2].split("|")[6].strip() == "pp16" and "±" in md[2]
    bad = mlxcel("bench", "-m", twin_q4_1.mlx_model, "-r", "x")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
