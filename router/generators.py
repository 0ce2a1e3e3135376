"""Answer generators: an OpenAI-compatible chat endpoint, and an offline extractive default.

The HTTP backend is how vLLM, Ray Serve LLM and most hosted models are reached. The extractive
backend needs no network and no weights beyond the embedder: it quotes the source sentences
that best match the question, each with its citation, so it is grounded by construction and
is the baseline any model has to beat.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import httpx
import numpy as np

from ragindex.errors import BackendUnavailable, InvalidInput, RagIndexError
from ragindex.protocols import Embedder
from ragindex.router.context import AssembledContext
from ragindex.router.grounding import content_terms, coverage, split_sentences
from ragindex.router.prompt import NO_ANSWER, build_messages, instruction_signals

log = logging.getLogger(__name__)


class Generator(Protocol):
    name: str

    def generate(self, question: str, context: AssembledContext) -> str: ...


class OpenAICompatibleGenerator:
    """POST {base_url}/v1/chat/completions with the grounded prompt; temperature 0 by default."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout: float = 30.0,
        *,
        max_tokens: int = 512,
        temperature: float = 0.0,
    ) -> None:
        if not isinstance(base_url, str) or not re.match(r"^https?://[^\s/]+", base_url):
            raise InvalidInput(f"base_url must be an http(s) URL, got {base_url!r}")
        if not isinstance(model, str) or not model.strip():
            raise InvalidInput("model must be a non-empty string")
        if not timeout > 0:
            raise InvalidInput(f"timeout must be > 0 seconds, got {timeout!r}")
        if max_tokens < 1:
            raise InvalidInput(f"max_tokens must be >= 1, got {max_tokens}")
        root = base_url.rstrip("/")
        root = root[: -len("/v1")] if root.endswith("/v1") else root
        self.url = f"{root}/v1/chat/completions"
        self.model = model
        self.name = f"openai-compatible:{model}"
        self.max_tokens = max_tokens
        self.temperature = temperature
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(timeout=timeout, headers=headers)

    def request_body(self, question: str, context: AssembledContext) -> dict[str, Any]:
        return {
            "model": self.model,
            "messages": build_messages(question, context),
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
        }

    def generate(self, question: str, context: AssembledContext) -> str:
        # What the endpoint says goes to the log, never to the caller: an upstream error body
        # can carry the prompt, other tenants' text or the endpoint's internals.
        try:
            response = self._client.post(self.url, json=self.request_body(question, context))
        except httpx.HTTPError as err:
            log.warning("generator %s did not answer: %s", self.url, err)
            raise BackendUnavailable("the answer generator did not answer") from None
        if response.status_code >= 400:
            log.warning(
                "generator %s answered HTTP %s: %s",
                self.url,
                response.status_code,
                response.text[:2000],
            )
            if response.status_code >= 500:
                raise BackendUnavailable(
                    f"the answer generator failed (HTTP {response.status_code})"
                )
            raise RagIndexError(
                f"the answer generator refused the request (HTTP {response.status_code})"
            )
        try:
            content = response.json()["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            content = None
        if not isinstance(content, str):
            log.warning(
                "generator %s sent a malformed chat completion: %s", self.url, response.text[:2000]
            )
            raise RagIndexError("the answer generator sent a malformed chat completion")
        return content.strip()

    def close(self) -> None:
        self._client.close()


@dataclass(frozen=True)
class Candidate:
    sid: int
    chunk_id: str
    text: str
    rank: int


_INLINE_CITE = re.compile(r"\[(\d{1,6}(?:\s*[,;]\s*\d{1,6})*)\]")


def clean_sentence(sentence: str) -> str:
    """Tidy a quoted sentence: one space, no space before punctuation, no stray [n] markers
    (a source's own reference numbers would otherwise read as our citations)."""
    text = _INLINE_CITE.sub(r"(\1)", sentence)
    text = re.sub(r"\s+", " ", text).strip()
    return re.sub(r"\s+([.!?,;:])", r"\1", text)


def candidates(context: AssembledContext, min_terms: int = 3) -> list[Candidate]:
    """Sentences of the context that could be quoted: not from instruction-like chunks, and
    long enough to say something."""
    out = []
    for src in context.sources:
        for ch in src.chunks:
            if instruction_signals(ch.display_text):
                continue
            for raw in split_sentences(ch.display_text):
                text = clean_sentence(raw)
                if len(set(content_terms(text))) >= min_terms:
                    out.append(Candidate(src.sid, ch.chunk_id, text, ch.rank))
    return out


def cite(sentence: str, sid: int) -> str:
    """Put the citation before the final punctuation: 'Lift rises [2].'"""
    body = sentence.rstrip(".!?").rstrip()
    end = sentence[len(body) :].strip() or "."
    return f"{body} [{sid}]{end[0]}"


class ExtractiveGenerator:
    """Quote the best-matching source sentences with their citations; offline.

    Sentences are scored by the share of question content words they hold, or by MiniLM
    cosine similarity with the question when an embedder is given; ties go to the better-
    ranked chunk. Near-identical sentences (same content words) are quoted once.
    """

    name = "extractive"

    def __init__(
        self, embedder: Embedder | None = None, *, max_sentences: int = 3, min_score: float = 0.0
    ) -> None:
        if max_sentences < 1:
            raise InvalidInput(f"max_sentences must be >= 1, got {max_sentences}")
        self.embedder = embedder
        self.max_sentences = max_sentences
        self.min_score = min_score
        if embedder is not None:
            self.name = "extractive-minilm"

    def scores(self, question: str, cands: Sequence[Candidate]) -> list[float]:
        if self.embedder is None:
            terms = content_terms(question)
            return [coverage(terms, content_terms(c.text)) for c in cands]
        q = self.embedder.embed_queries([question])
        s = self.embedder.embed_passages([c.text for c in cands])
        return [float(v) for v in np.asarray(s @ q[0], dtype=np.float64)]

    def generate(self, question: str, context: AssembledContext) -> str:
        cands = candidates(context)
        if not cands:
            return NO_ANSWER
        scored = sorted(
            zip(self.scores(question, cands), cands, strict=True),
            key=lambda pair: (-pair[0], pair[1].rank),
        )
        chosen: list[Candidate] = []
        seen_terms: list[frozenset[str]] = []
        for score, cand in scored:
            if score <= self.min_score or len(chosen) >= self.max_sentences:
                break
            terms = frozenset(content_terms(cand.text))
            if terms in seen_terms:
                continue
            seen_terms.append(terms)
            chosen.append(cand)
        if not chosen:
            return NO_ANSWER
        return " ".join(cite(c.text, c.sid) for c in chosen)


def make_generator(
    backend: str,
    *,
    base_url: str | None = None,
    model: str | None = None,
    api_key: str | None = None,
    timeout: float = 30.0,
    embedder: Embedder | None = None,
) -> Generator:
    """The generator a config names: 'extractive' (offline default) or 'openai-compatible'."""
    if backend == "extractive":
        return ExtractiveGenerator(embedder)
    if backend == "openai-compatible":
        if not base_url or not model:
            raise InvalidInput("the openai-compatible generator needs base_url and model")
        return OpenAICompatibleGenerator(base_url, model, api_key, timeout)
    raise InvalidInput(
        f"generator backend must be 'extractive' or 'openai-compatible', got {backend!r}"
    )
