"""A deterministic, cheap "model": tokenizer, chat template and next-token function.

Each output token is a function of a digest of the whole context and of its position,
so two greedy replies (temperature 0) are equal exactly when their contexts were. A
request that does not ask for temperature 0 samples, as on SGLang: its tokens then also
depend on its seed or its bootstrap room, so a workload that forgets temperature 0 sees
replies differ here too. The context digest is what
prefill ships to decode inside the KV bytes: a reply proves which KV it was decoded from,
which makes context loss and cross-request mix-ups visible as wrong text.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "EOS_ID",
    "Message",
    "apply_chat_template",
    "context_digest",
    "detokenize",
    "next_token",
    "tokenize",
]

# Output words; ids 1..len(WORDS). Input words hash into ids above OUTPUT_SPACE.
WORDS = [
    "amber",
    "basil",
    "cedar",
    "delta",
    "ember",
    "fjord",
    "glade",
    "harbor",
    "iris",
    "juniper",
    "kelp",
    "lumen",
    "maple",
    "nectar",
    "onyx",
    "pepper",
    "quartz",
    "raven",
    "sable",
    "thistle",
    "umber",
    "velvet",
    "willow",
    "xenon",
    "yarrow",
    "zephyr",
    "acorn",
    "birch",
    "coral",
    "dune",
    "elm",
    "fern",
    "garnet",
    "hazel",
    "ivy",
    "jade",
    "kestrel",
    "lark",
    "moss",
    "nimbus",
    "oak",
    "pearl",
    "quill",
    "reed",
    "sage",
    "tide",
    "urchin",
    "vale",
    "wren",
    "yew",
    "zinc",
    "anchor",
    "beacon",
    "cobalt",
    "drift",
    "echo",
    "flint",
    "grove",
    "heron",
    "inlet",
    "jasper",
    "knoll",
    "lagoon",
    "mesa",
    "north",
    "orbit",
    "prism",
    "quarry",
    "ridge",
    "summit",
    "tundra",
    "upland",
    "vista",
    "wharf",
    "yonder",
    "zenith",
]
EOS_ID = 0
OUTPUT_SPACE = 1 << 16
_EOS_PERIOD = 97  # about one chance in 97 per token to stop, unless ignore_eos
_TOKEN_RE = re.compile(r"\w+|[^\w\s]")


def _h64(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big")


def tokenize(text: str) -> list[int]:
    """Words and punctuation; output words map back to their own ids so replies round-trip."""
    ids: list[int] = []
    for piece in _TOKEN_RE.findall(text):
        if piece in _WORD_IDS:
            ids.append(_WORD_IDS[piece])
        else:
            ids.append(OUTPUT_SPACE + _h64(piece.encode()) % (1 << 30))
    return ids


_WORD_IDS = {w: i + 1 for i, w in enumerate(WORDS)}


def detokenize(ids: list[int]) -> str:
    return "".join(" " + WORDS[i - 1] for i in ids if 0 < i <= len(WORDS))


def context_digest(ids: list[int]) -> str:
    """The digest that stands for the KV cache of this exact context."""
    h = hashlib.blake2b(digest_size=16)
    for i in ids:
        h.update(i.to_bytes(8, "big"))
    return h.hexdigest()


def next_token(digest: str, position: int, *, ignore_eos: bool, salt: int | None = None) -> int:
    """Token number ``position`` (0 = the first, sampled on prefill) of the reply: greedy
    (``salt`` None) a function of the context alone, sampled also of the request's salt."""
    extra = b"" if salt is None else salt.to_bytes(8, "big", signed=True)
    h = _h64(bytes.fromhex(digest) + position.to_bytes(4, "big") + extra)
    if not ignore_eos and position > 0 and h % _EOS_PERIOD == 0:
        return EOS_ID
    return 1 + (h >> 8) % len(WORDS)


@dataclass(frozen=True)
class Message:
    role: str
    content: str

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> "Message":
        content = raw.get("content") or ""
        if isinstance(content, list):  # OpenAI content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        return cls(role=str(raw.get("role", "user")), content=str(content))


def apply_chat_template(messages: list[Message], *, truncate_to: int | None = None) -> str:
    """``<|role|>`` blocks, then the assistant header.

    ``truncate_to`` drops the oldest non-system turns while the prompt is longer than that
    many tokens: the ``context_truncation`` defect, never used by a clean engine.
    """
    kept = list(messages)
    while truncate_to is not None and len(kept) > 1 and len(tokenize(_render(kept))) > truncate_to:
        drop = next((i for i, m in enumerate(kept[:-1]) if m.role != "system"), None)
        if drop is None:
            break
        del kept[drop]
    return _render(kept)


def _render(messages: list[Message]) -> str:
    return "".join(f"<|{m.role}|>\n{m.content}\n" for m in messages) + "<|assistant|>\n"
