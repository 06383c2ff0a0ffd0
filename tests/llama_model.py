r"""A tiny, scripted GGUF model for tests against a real ``llama-server``.

``write_model`` writes (in a few milliseconds) a one-layer ``qwen3`` model whose transformer weights are all
zero, so the hidden state at every position is just the (RMS-normalised) token embedding. The output matrix
therefore acts as a bigram table: each token of the script has its own embedding direction, and the output
row of its scripted successor has a large weight on that direction (a logit gap of ``_LOGIT``), so the
next-token distribution is one-hot for any sampler settings. Tokens outside the script predict ``<|im_end|>``.

The vocabulary is byte-level BPE ("gpt2", pre-tokenizer "qwen2"): the 256 byte tokens, the ChatML/Qwen3
special tokens (``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>`` = EOS as control tokens; ``<think>``,
``</think>`` as user-defined tokens, as in Qwen3 GGUFs) and one normal token per scripted piece. The only merge
is ``\n`` + ``\n``, so a prompt tokenises into bytes, ``\n\n`` and the special tokens. The embedded
Qwen3-like chat template ends every generation prompt with ``<|im_start|>assistant\n``; that ``\n`` byte
token starts the chain, so after any conversation the model emits exactly

    <think>\nSpell it out: s, t, r, a, w, b, e, r, r, y.\n</think>\n\nThree r's.<|im_end|>

as the pieces of ``SCRIPT``. llama.cpp forbids two tokens with the same text and a bigram chain needs a
distinct token for every repeated piece, so the newlines inside the think block are folded into the
neighbouring pieces (the bare ``\n`` byte is reserved for the end of the prompt). With ``split_tags=True``
the think tags are emitted as plain text split across tokens (``SPLIT_SCRIPT``: ``<thi`` + ``nk>``,
``</th`` + ``ink>``); the text is identical. With ``chat_template_kwargs: {"enable_thinking": false}`` the
prompt ends with ``</think>\n\n`` and the ``\n\n`` token continues with the answer only.

``write_model(path, script=...)`` makes a model that emits another script: ``SCRIPTS`` holds the shapes the
tests use (newlines after both tags, none at all, reasoning only, an unclosed block, content only, a block of
blank lines, extra newlines, tags split across tokens), each a ``Script`` with the raw text and the split
llama-server 0.3.36 gives with ``reasoning_format: "deepseek"``. ``OPENED_TEMPLATE`` is the chat template of
the models whose template opens the reasoning tag in the prompt (QwQ, DeepSeek-R1 distills, Qwen3
"Thinking-2507"): its generation prompt ends with ``<think>\n``, so the model writes only the closing tag
(``OPENED_SCRIPT``); llama-server takes it with ``--chat-template-file``.

``run_llama_server`` starts ``llama-server`` on a free local port and yields its OpenAI base URL.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, NamedTuple

import httpx
import numpy as np
import pytest

from tests.e2e_support import free_port, stop_process

LLAMA_SERVER_VERSION = "0.3.36"
"""The llama-cpp-python release whose llama.cpp sources ``.ci/build-llama-server`` builds."""

REASONING = "Spell it out: s, t, r, a, w, b, e, r, r, y."
CONTENT = "Three r's."
RAW_CONTENT = f"<think>\n{REASONING}\n</think>\n\n{CONTENT}"
"""The exact generated text (what ``reasoning_format: "none"`` returns as ``content``)."""
SERVER_REASONING = REASONING + "\n"
"""``reasoning_content`` as llama-server 0.3.36 extracts it: it keeps the newline before ``</think>`` (it does
the same with the real Qwen3 template)."""

# Token types, as in gguf.TokenType / llama_token_type.
_NORMAL = 1
_CONTROL = 3
_USER_DEFINED = 4

_BOS = "<|endoftext|>"
_IM_START = "<|im_start|>"
_EOS = "<|im_end|>"
_SPECIAL_TOKENS: tuple[tuple[str, int], ...] = (
    (_BOS, _CONTROL),
    (_IM_START, _CONTROL),
    (_EOS, _CONTROL),
    ("<think>", _USER_DEFINED),
    ("</think>", _USER_DEFINED),
)
_PROMPT_END = "\n"  # the byte token that ends every rendered generation prompt

SCRIPT: tuple[str, ...] = (
    "<think>",
    "\nSpell it out: ",
    "s, t, r, a, w, b, e, r, r, y.\n",
    "</think>",
    "\n\n",
    "Three",
    " r's.",
)
"""The generated pieces (one token each) when the think tags are whole tokens; ``<|im_end|>`` follows."""

SPLIT_SCRIPT: tuple[str, ...] = ("<thi", "nk>", *SCRIPT[1:3], "</th", "ink>", *SCRIPT[4:])
"""The generated pieces when ``split_tags=True``."""


class Script(NamedTuple):
    """A script for ``write_model``: the generated pieces (one token each; no piece may be the bare ``"\\n"``,
    which ends the prompt, and no piece may repeat) and the reasoning and content llama-server extracts from it
    with ``reasoning_format: "deepseek"`` (checked against the server by ``tests/test_e2e_llama.py``)."""

    pieces: tuple[str, ...]
    reasoning: str
    content: str

    @property
    def text(self) -> str:
        """The generated text, as ``reasoning_format: "none"`` returns it."""
        return "".join(self.pieces)


SCRIPTS: dict[str, Script] = {
    "newlines": Script(SCRIPT, SERVER_REASONING, CONTENT),
    "no-newlines": Script(("<think>", "Plan", " first.", "</think>", "Answer", " now."), "Plan first.", "Answer now."),
    "reasoning-only": Script(("<think>", "\nOnly", " thinking.\n", "</think>"), "Only thinking.\n", ""),
    "unclosed": Script(("<think>", "\nStill", " thinking"), "Still thinking", ""),
    "content-only": Script(("Just", " the answer."), "", "Just the answer."),
    "blank-reasoning": Script(("<think>", "\n\n\n", "</think>", "\n\n", "Answer", " here."), "", "Answer here."),
    "extra-newlines": Script(
        ("<think>", "\n\nDeep", ".\n\n", "</think>", "\n\n\n", "Answer", " below."), "\nDeep.\n\n", "\nAnswer below."
    ),
    "split-no-newlines": Script(
        ("<th", "ink>", "Plan", " first.", "</", "think>", "Answer", " now."), "Plan first.", "Answer now."
    ),
}
"""Scripted outputs by name, with llama-server's own split of each."""

OPENED_SCRIPT: tuple[str, ...] = ("Spell it out: ", *SCRIPT[2:])
"""What a model whose chat template opened ``<think>\\n`` writes: ``SCRIPT`` after ``<think>\\n``."""

_N_EMBD = 64
_N_HEAD = 2
_N_FF = 64
_LOGIT = 1000.0  # logit of the scripted successor, every other token gets 0: one-hot even at high temperature

CHAT_TEMPLATE = """\
{%- for message in messages %}
    {%- set content = message.content if message.content is string else '' %}
    {%- if message.role == 'assistant' %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- elif '</think>' in content %}
            {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
            {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
        {%- endif %}
        {%- if reasoning_content %}
            {{- '<|im_start|>assistant\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' }}
            {{- content.lstrip('\\n') + '<|im_end|>\\n' }}
        {%- else %}
            {{- '<|im_start|>assistant\\n' + content + '<|im_end|>\\n' }}
        {%- endif %}
    {%- else %}
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>\\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}
"""
"""Qwen3-like ChatML template: history reasoning is rendered as ``<think>\\n...\\n</think>\\n\\n``."""

OPENED_TEMPLATE = CHAT_TEMPLATE.replace(
    """    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}""",
    """    {{- '<|im_start|>assistant\\n<think>\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '\\n</think>\\n\\n' }}
    {%- endif %}""",
)
"""``CHAT_TEMPLATE`` with the generation prompt of QwQ, the DeepSeek-R1 distills and the Qwen3 "Thinking-2507"
models: it opens the reasoning block, ``<|im_start|>assistant\\n<think>\\n``."""
assert OPENED_TEMPLATE != CHAT_TEMPLATE


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map used by byte-level BPE vocabularies."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    mapping = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


_BYTE_CHARS = _bytes_to_unicode()


def _bpe_text(piece: str) -> str:
    return "".join(_BYTE_CHARS[b] for b in piece.encode())


def _vocab(script: Sequence[str]) -> tuple[list[str], list[int], dict[str, int]]:
    """Token texts (as stored in the GGUF), token types and an index from decoded piece to token id.

    The vocabulary holds the bytes, the special tokens, ``"\\n\\n"`` (the one merge) and ``script``'s pieces; the
    default model's vocabulary (``SCRIPT``) also holds ``SPLIT_SCRIPT``'s pieces, as it always has.
    """
    texts = [_BYTE_CHARS[b] for b in range(256)]
    types = [_NORMAL] * 256
    ids = {bytes([b]).decode("latin-1"): b for b in range(128)}  # ASCII pieces -> byte tokens
    for piece, kind in _SPECIAL_TOKENS:
        ids[piece] = len(texts)
        texts.append(piece)
        types.append(kind)
    extra = (*SCRIPT, *SPLIT_SCRIPT) if tuple(script) in (SCRIPT, SPLIT_SCRIPT) else ("\n\n", *script)
    for piece in dict.fromkeys(extra):
        if piece not in ids:
            ids[piece] = len(texts)
            texts.append(_bpe_text(piece))
            types.append(_NORMAL)
    return texts, types, ids


def write_model(
    path: Path,
    *,
    split_tags: bool = False,
    script: Sequence[str] | None = None,
    chat_template: str = CHAT_TEMPLATE,
) -> None:
    """Write the scripted model to ``path`` (about 260 kB).

    Args:
        path: the GGUF file to write.
        split_tags: emit ``SPLIT_SCRIPT`` (tags split across tokens) instead of ``SCRIPT``.
        script: the pieces to emit instead (one token each, ``<|im_end|>`` after the last); see ``Script``.
        chat_template: the embedded chat template (llama-server's ``--chat-template-file`` overrides it).
    """
    import gguf  # imported lazily: only tests that need a model require the package

    if script is None:
        script = SPLIT_SCRIPT if split_tags else SCRIPT
    texts, types, ids = _vocab(script)
    n_vocab = len(texts)
    chain = [ids[_PROMPT_END], *(ids[piece] for piece in script), ids[_EOS]]
    assert len(set(chain)) == len(chain), "every token in the chain needs a unique successor"
    assert len(chain) < _N_EMBD

    # Direction 0: every token outside the chain (and the last one) predicts <|im_end|>.
    embd = np.zeros((n_vocab, _N_EMBD), dtype=np.float32)
    embd[:, 0] = 1.0
    out = np.zeros((n_vocab, _N_EMBD), dtype=np.float32)
    # The final RMS norm scales a unit basis vector to sqrt(n_embd).
    weight = np.float32(_LOGIT / np.sqrt(_N_EMBD))
    out[ids[_EOS], 0] = weight
    for direction, (token, successor) in enumerate(itertools.pairwise(chain), start=1):
        embd[token, 0] = 0.0
        embd[token, direction] = 1.0
        out[successor, direction] = weight

    writer = gguf.GGUFWriter(path, "qwen3")
    writer.add_name("numi-mw scripted test model")
    writer.add_context_length(4096)
    writer.add_embedding_length(_N_EMBD)
    writer.add_block_count(1)
    writer.add_feed_forward_length(_N_FF)
    writer.add_head_count(_N_HEAD)
    writer.add_head_count_kv(_N_HEAD)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(1_000_000.0)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(texts)
    writer.add_token_types(types)
    # The only merge: "\n\n" in a prompt becomes the scripted "\n\n" token, so a prompt ending in
    # "</think>\n\n" (enable_thinking=false) continues with the answer. Everything else stays bytes.
    newline = _BYTE_CHARS[ord("\n")]
    writer.add_token_merges([f"{newline} {newline}"])
    writer.add_bos_token_id(ids[_BOS])
    writer.add_eos_token_id(ids[_EOS])
    writer.add_pad_token_id(ids[_BOS])
    writer.add_add_bos_token(False)
    writer.add_chat_template(chat_template)

    head_dim = _N_EMBD // _N_HEAD
    ones = np.ones(_N_EMBD, dtype=np.float32)
    square = np.zeros((_N_EMBD, _N_EMBD), dtype=np.float32)
    writer.add_tensor("token_embd.weight", embd)
    writer.add_tensor("output_norm.weight", ones)
    writer.add_tensor("output.weight", out)
    writer.add_tensor("blk.0.attn_norm.weight", ones)
    for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
        writer.add_tensor(f"blk.0.{name}.weight", square)
    writer.add_tensor("blk.0.attn_q_norm.weight", np.ones(head_dim, dtype=np.float32))
    writer.add_tensor("blk.0.attn_k_norm.weight", np.ones(head_dim, dtype=np.float32))
    writer.add_tensor("blk.0.ffn_norm.weight", ones)
    ffn = np.zeros((_N_FF, _N_EMBD), dtype=np.float32)
    writer.add_tensor("blk.0.ffn_gate.weight", ffn)
    writer.add_tensor("blk.0.ffn_up.weight", ffn)
    writer.add_tensor("blk.0.ffn_down.weight", np.zeros((_N_EMBD, _N_FF), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def cache_dir() -> Path:
    """The cache ``.ci/build-llama-server`` and ``.ci/build-client-envs`` build into: ``$NUMI_MW_CACHE`` when it is
    set and not empty, else ``~/.cache/numi_mw`` (the scripts' own ``${NUMI_MW_CACHE:-$HOME/.cache/numi_mw}``)."""
    return Path(os.environ.get("NUMI_MW_CACHE") or Path.home() / ".cache" / "numi_mw")


def llama_server_binary() -> Path:
    """The llama-server binary to use: ``$NUMI_MW_LLAMA_SERVER`` when set, else where ``.ci/build-llama-server``
    caches it (``cache_dir() / "llama-server-VERSION"``)."""
    return Path(os.environ.get("NUMI_MW_LLAMA_SERVER") or cache_dir() / f"llama-server-{LLAMA_SERVER_VERSION}")


def missing_binary_reason(binary: Path) -> str:
    """Why a test that needs ``binary`` is skipped when it is absent, and how to get it."""
    return f"llama-server not found at {binary} (build it with .ci/build-llama-server or set NUMI_MW_LLAMA_SERVER)"


def llama_tier(binary: Path) -> list[pytest.MarkDecorator]:
    """The marks of a test module that runs ``binary``: ``llama``, and a skip with its reason while it is absent."""
    return [pytest.mark.llama, pytest.mark.skipif(not binary.exists(), reason=missing_binary_reason(binary))]


def _log_tail(log: IO[bytes], limit: int = 4000) -> str:
    log.flush()
    log.seek(0)
    return log.read().decode(errors="replace")[-limit:]


@contextlib.contextmanager
def run_llama_server(
    binary: Path,
    model: Path,
    *,
    extra_args: Sequence[str] = (),
    startup_timeout: float = 60.0,
) -> Iterator[str]:
    """Run ``llama-server`` on ``model`` and yield its base URL ``http://127.0.0.1:PORT/v1``.

    Waits (at most ``startup_timeout`` seconds) until ``GET /health`` answers 200; the process is always
    terminated on exit. The server's output goes to a temporary file quoted in startup errors.
    """
    port = free_port()
    args = [
        str(binary),
        "-m",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-c",
        "512",
        "-np",
        "1",
        "--jinja",
        "--threads",
        "1",
        "--no-warmup",
        "--no-webui",
        "--offline",
        *extra_args,
    ]
    # LLAMA_ARG_* variables would silently change the server's defaults (e.g. LLAMA_ARG_THINK).
    env = {key: value for key, value in os.environ.items() if not key.startswith("LLAMA_ARG_")}
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            deadline = time.monotonic() + startup_timeout
            with httpx.Client(timeout=2.0) as client:
                while True:
                    if proc.poll() is not None:
                        raise RuntimeError(f"llama-server exited with {proc.returncode}:\n{_log_tail(log)}")
                    with contextlib.suppress(httpx.TransportError):
                        if client.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                            break
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"llama-server not healthy after {startup_timeout} s:\n{_log_tail(log)}")
                    time.sleep(0.05)
            yield f"http://127.0.0.1:{port}/v1"
        finally:
            stop_process(proc)
